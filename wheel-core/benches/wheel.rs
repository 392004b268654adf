//! Criterion benches: `Wheel` against tokio-util's `DelayQueue` at 1 k, 100 k, 1 M and 10 M
//! pending entries, for insert and expiry, and `Wheel::retain` with half the entries stale.
//!
//! Each benchmark iteration is one operation (`Throughput::Elements(1)`), so criterion's time is
//! nanoseconds per operation (per entry examined, for retain). A queue is filled to N pending
//! entries once per size, outside the timing; `iter_custom` then times only the operations, in
//! chunks of at most N/10, and undoes each chunk's changes untimed (an insert chunk is
//! followed by as many expiries, an expiry chunk by as many inserts), so every operation runs
//! at about N pending. Deadlines are uniform over 1..=10 000 ticks of 1 ms (10 s) past the
//! clock, drawn from a fixed seed.
//!
//! The wheel holds what the service puts in it: an 8-byte reference (a record number and a
//! ticket) per timer, 16 bytes with its deadline. For `retain`, the records are a table of
//! 64-byte records (one cache line each, as the service's are) holding each record's live
//! ticket; half the wheel's references carry an old ticket, so they are stale, in random
//! order. `keep` reads the record, as the service's would: `retain` is that cost without
//! help, `retain_prefetched` with the record prefetched a dozen entries ahead. Each chunk's
//! removed references are replaced (untimed) by as many new stale ones, so the wheel stays half
//! stale. Retain runs up to 1 M (the record table alone would be 640 MB at 10 M).
//!
//! `DelayQueue` runs on a current-thread tokio runtime with a paused clock: awaiting its next
//! entry moves the clock straight to the next deadline, as `Wheel::next_expiration` does here.
//!
//! `floor` does the same operations on a bare ring of 16-byte entries, no wheel at all (see
//! `support/floor.rs`): what the machine's memory allows at that size, for reading the wheel's
//! figures as ratios.
//!
//! Criterion's test mode (`cargo test --benches`, `cargo bench -- --test`) runs the 1 k size only.

use std::future::poll_fn;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;
use tokio_util::time::delay_queue::DelayQueue;
use wheel_core::Wheel;

#[path = "support/floor.rs"]
mod floor;

const SIZES: [usize; 4] = [1_000, 100_000, 1_000_000, 10_000_000];

/// The largest size `retain` runs at.
const RETAIN_MAX: usize = 1_000_000;

/// Deadlines fall 1..=SPAN ticks (1 ms each) after the clock.
const SPAN: u64 = 10_000;

const SEED: u64 = 0x5EED;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Insert,
    Expire,
    Retain,
    RetainPrefetched,
}

impl Op {
    const ALL: [Op; 4] = [Op::Insert, Op::Expire, Op::Retain, Op::RetainPrefetched];

    fn name(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Expire => "expire",
            Op::Retain => "retain",
            Op::RetainPrefetched => "retain_prefetched",
        }
    }
}

/// What the wheel holds per timer: a record number and the ticket it had when set.
type Ref = [u32; 2];

/// A timer queue filled to N pending entries.
trait Fixture {
    const NAME: &'static str;

    fn filled(n: usize) -> Self;

    /// Whether this queue does `op` at all.
    fn supports(op: Op, n: usize) -> bool;

    /// Runs `count` operations, returns how long they took, and restores N pending (untimed).
    fn run_chunk(&mut self, op: Op, count: usize) -> Duration;
}

/// Random delays from a fixed seed.
struct Delays(SmallRng);

impl Delays {
    fn new() -> Self {
        Delays(SmallRng::seed_from_u64(SEED))
    }

    fn next(&mut self) -> u64 {
        self.0.random_range(1..=SPAN)
    }
}

/// The caller's records, one cache line each: what `keep` reads to tell a stale reference.
pub(crate) struct Records {
    lines: Vec<[u32; 16]>,
    rng: SmallRng,
}

impl Records {
    fn new(n: usize) -> Self {
        Records {
            lines: vec![[0; 16]; n.max(1)],
            rng: SmallRng::seed_from_u64(SEED ^ 1),
        }
    }

    /// A reference to a random record: live (its ticket) or stale (an older one), at even odds.
    fn reference(&mut self) -> Ref {
        let record = self.rng.random_range(0..self.lines.len() as u32);
        let ticket = self.lines[record as usize][0];
        let stale = self.rng.random_bool(0.5);
        [
            record,
            if stale {
                ticket.wrapping_sub(1)
            } else {
                ticket
            },
        ]
    }

    /// A stale reference to a random record.
    fn stale(&mut self) -> Ref {
        let record = self.rng.random_range(0..self.lines.len() as u32);
        [record, self.lines[record as usize][0].wrapping_sub(1)]
    }

    #[inline]
    fn is_live(&self, r: &Ref) -> bool {
        self.lines[r[0] as usize][0] == r[1]
    }

    #[inline]
    fn prefetch(&self, r: &Ref) {
        if let Some(line) = self.lines.get(r[0] as usize) {
            wheel_platform::hint::prefetch(line);
        }
    }
}

struct WheelFixture {
    wheel: Wheel<Ref>,
    delays: Delays,
    records: Records,
}

impl WheelFixture {
    /// Hands out `count` entries, sleeping from one expiration to the next as a tick thread
    /// would.
    fn expire(&mut self, count: usize) {
        let mut left = count;
        while left > 0 {
            let next = self.wheel.next_expiration().expect("entries are pending");
            for entry in self.wheel.advance(next).take(left) {
                black_box(entry);
                left -= 1;
            }
        }
    }
}

impl Fixture for WheelFixture {
    const NAME: &'static str = "wheel";

    fn filled(n: usize) -> Self {
        let mut wheel = Wheel::new();
        wheel
            .try_reserve(n + chunk(n))
            .expect("memory for the wheel");
        let mut delays = Delays::new();
        let mut records = Records::new(if n <= RETAIN_MAX { n } else { 1 });
        for _ in 0..n {
            wheel.insert(delays.next(), records.reference());
        }
        WheelFixture {
            wheel,
            delays,
            records,
        }
    }

    fn supports(op: Op, n: usize) -> bool {
        !matches!(op, Op::Retain | Op::RetainPrefetched) || n <= RETAIN_MAX
    }

    fn run_chunk(&mut self, op: Op, count: usize) -> Duration {
        match op {
            Op::Insert => {
                let now = self.wheel.now();
                let refs: Vec<(u64, Ref)> = (0..count)
                    .map(|_| (now + self.delays.next(), self.records.reference()))
                    .collect();
                let start = Instant::now();
                for &(deadline, r) in &refs {
                    self.wheel.insert(deadline, r);
                }
                let elapsed = start.elapsed();
                self.expire(count);
                elapsed
            }
            Op::Expire => {
                let start = Instant::now();
                self.expire(count);
                let elapsed = start.elapsed();
                let now = self.wheel.now();
                for _ in 0..count {
                    let deadline = now + self.delays.next();
                    let r = self.records.reference();
                    self.wheel.insert(deadline, r);
                }
                elapsed
            }
            Op::Retain | Op::RetainPrefetched => {
                let before = self.wheel.len();
                let records = &self.records;
                let start = Instant::now();
                let mut examined = 0;
                while examined < count {
                    examined += if op == Op::Retain {
                        self.wheel
                            .retain(count - examined, |_, r| records.is_live(r))
                    } else {
                        self.wheel.retain_prefetched(
                            count - examined,
                            |r| records.prefetch(r),
                            |_, r| records.is_live(r),
                        )
                    };
                }
                let elapsed = start.elapsed();
                let now = self.wheel.now();
                for _ in self.wheel.len()..before {
                    let deadline = now + self.delays.next();
                    let r = self.records.stale();
                    self.wheel.insert(deadline, r);
                }
                elapsed
            }
        }
    }
}

struct QueueFixture {
    runtime: Runtime,
    queue: DelayQueue<u32>,
    delays: Delays,
}

impl QueueFixture {
    fn deadline(now: tokio::time::Instant, delay: u64) -> tokio::time::Instant {
        now + Duration::from_millis(delay)
    }

    fn expire(&mut self, count: usize) {
        let queue = &mut self.queue;
        self.runtime.block_on(async {
            for _ in 0..count {
                let entry = poll_fn(|cx| queue.poll_expired(cx)).await;
                black_box(entry.expect("entries are pending"));
            }
        });
    }
}

impl Fixture for QueueFixture {
    const NAME: &'static str = "delay_queue";

    fn filled(n: usize) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("tokio runtime");
        let mut delays = Delays::new();
        let queue = {
            // `DelayQueue` arms a tokio `Sleep`, which needs the runtime's context.
            let _context = runtime.enter();
            let mut queue = DelayQueue::with_capacity(n + chunk(n));
            let now = tokio::time::Instant::now();
            for position in 0..n as u32 {
                queue.insert_at(position, Self::deadline(now, delays.next()));
            }
            queue
        };
        QueueFixture {
            runtime,
            queue,
            delays,
        }
    }

    fn supports(op: Op, _: usize) -> bool {
        matches!(op, Op::Insert | Op::Expire)
    }

    fn run_chunk(&mut self, op: Op, count: usize) -> Duration {
        let delays: Vec<u64> = (0..count).map(|_| self.delays.next()).collect();
        match op {
            Op::Insert => {
                let elapsed = {
                    let _context = self.runtime.enter();
                    let now = tokio::time::Instant::now();
                    let start = Instant::now();
                    for &delay in &delays {
                        self.queue.insert_at(u32::MAX, Self::deadline(now, delay));
                    }
                    start.elapsed()
                };
                self.expire(count);
                elapsed
            }
            Op::Expire => {
                let start = Instant::now();
                self.expire(count);
                let elapsed = start.elapsed();
                let _context = self.runtime.enter();
                let now = tokio::time::Instant::now();
                for &delay in &delays {
                    self.queue.insert_at(0, Self::deadline(now, delay));
                }
                elapsed
            }
            Op::Retain | Op::RetainPrefetched => unreachable!("DelayQueue has no retain"),
        }
    }
}

/// Operations per timed chunk: few enough that the queue stays near N pending.
fn chunk(n: usize) -> usize {
    (n / 10).clamp(1, 1_000)
}

fn time_ops<F: Fixture>(fixture: &mut F, op: Op, iters: u64, chunk: usize) -> Duration {
    let mut left = iters;
    let mut total = Duration::ZERO;
    while left > 0 {
        let count = left.min(chunk as u64) as usize;
        total += fixture.run_chunk(op, count);
        left -= count as u64;
    }
    total
}

/// Criterion's own rule: test mode unless run as `cargo bench` without `--test`.
fn test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    !has("--bench") || has("--test")
}

/// Benchmarks one queue at one size. The fixture is built on first use, so a filter that skips
/// the benchmark also skips the (slow, at 10 M) fill, and shared by the operations.
fn bench_queue<F: Fixture>(c: &mut Criterion, n: usize) {
    let mut fixture: Option<F> = None;
    for op in Op::ALL.into_iter().filter(|&op| F::supports(op, n)) {
        let mut group = c.benchmark_group(op.name());
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(1_500))
            .throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new(F::NAME, n), |b| {
            let fixture = fixture.get_or_insert_with(|| F::filled(n));
            b.iter_custom(|iters| time_ops(fixture, op, iters, chunk(n)));
        });
        group.finish();
    }
}

fn benches(c: &mut Criterion) {
    let sizes = if test_mode() { &SIZES[..1] } else { &SIZES[..] };
    for &n in sizes {
        bench_queue::<WheelFixture>(c, n);
        bench_queue::<QueueFixture>(c, n);
        bench_queue::<floor::FloorFixture>(c, n);
    }
}

criterion_group! {
    name = wheel_vs_delay_queue;
    // Plots cost seconds per benchmark and are not needed for the ns/op table.
    config = Criterion::default().without_plots();
    targets = benches
}
criterion_main!(wheel_vs_delay_queue);
