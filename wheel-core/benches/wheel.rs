//! Criterion benches: `Wheel` against tokio-util's `DelayQueue` at 1 k, 100 k, 1 M and 10 M
//! pending entries, for insert, remove, reschedule and expiry.
//!
//! Each benchmark iteration is one operation (`Throughput::Elements(1)`), so criterion's time is
//! nanoseconds per operation. A queue is filled to N pending entries once per size, outside the
//! timing; `iter_custom` then times only the operations, in chunks of at most N/10, and undoes
//! each chunk's changes untimed, so every operation runs at about N pending. Deadlines are
//! uniform over 1..=10 000 ticks of 1 ms (10 s) past the clock, drawn from a fixed seed; keys to
//! remove or reschedule are picked in a shuffled order, so they hit the slab at random places.
//! `remove_oldest` removes the longest-pending entry each time instead: the pattern of request
//! deadlines, which are mostly cancelled in about the order they were set.
//!
//! `DelayQueue` runs on a current-thread tokio runtime with a paused clock: awaiting its next
//! entry moves the clock straight to the next deadline, as `Wheel::next_expiration` does here.
//!
//! `floor` does the same operations on a bare array of nodes, no wheel at all (see
//! `support/floor.rs`): what the machine's memory allows at that size, for reading the wheel's
//! figures as ratios.
//!
//! Criterion's test mode (`cargo test --benches`, `cargo bench -- --test`) runs the 1 k size only.

use std::future::poll_fn;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;
use tokio_util::time::delay_queue::{DelayQueue, Key};
use wheel_core::{TimerKey, Wheel};

#[path = "support/floor.rs"]
mod floor;

const SIZES: [usize; 4] = [1_000, 100_000, 1_000_000, 10_000_000];

/// Deadlines fall 1..=SPAN ticks (1 ms each) after the clock.
const SPAN: u64 = 10_000;

const SEED: u64 = 0x5EED;

#[derive(Clone, Copy)]
enum Op {
    Insert,
    Remove,
    RemoveOldest,
    Reschedule,
    Expire,
}

impl Op {
    /// `RemoveOldest` runs first, while positions are still in insertion order (the shuffled
    /// operations re-insert positions at random).
    const ALL: [Op; 5] = [
        Op::RemoveOldest,
        Op::Insert,
        Op::Remove,
        Op::Reschedule,
        Op::Expire,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Remove => "remove",
            Op::RemoveOldest => "remove_oldest",
            Op::Reschedule => "reschedule",
            Op::Expire => "expire",
        }
    }
}

/// A timer queue filled to N pending entries.
trait Fixture {
    const NAME: &'static str;

    fn filled(n: usize) -> Self;

    /// Runs `count` operations, returns how long they took, and restores N pending (untimed).
    fn run_chunk(&mut self, op: Op, count: usize) -> Duration;
}

/// The bookkeeping both fixtures share: the live keys, by position, and the random inputs.
struct Book<K> {
    keys: Vec<K>,
    /// A random permutation of positions: the order keys are picked in.
    order: Vec<u32>,
    cursor: usize,
    /// The next position in insertion order, for `remove_oldest`: each chunk re-inserts the
    /// positions it removed, so position `oldest` always holds the longest-pending entry.
    oldest: usize,
    rng: SmallRng,
    /// Scratch, reused by every chunk so that no chunk allocates.
    positions: Vec<u32>,
    picked: Vec<K>,
    delays: Vec<u64>,
}

impl<K: Copy> Book<K> {
    fn new(n: usize) -> Self {
        let mut rng = SmallRng::seed_from_u64(SEED);
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.shuffle(&mut rng);
        Book {
            keys: Vec::with_capacity(n),
            order,
            cursor: 0,
            oldest: 0,
            rng,
            positions: Vec::new(),
            picked: Vec::new(),
            delays: Vec::new(),
        }
    }

    fn delay(&mut self) -> u64 {
        self.rng.random_range(1..=SPAN)
    }

    /// Draws `count` delays, and picks the next `count` positions (shuffled, or oldest first)
    /// and their keys.
    fn prepare(&mut self, count: usize, oldest_first: bool) {
        self.delays.clear();
        self.positions.clear();
        self.picked.clear();
        for _ in 0..count {
            let delay = self.delay();
            self.delays.push(delay);
            let position = if oldest_first {
                let position = self.oldest as u32;
                self.oldest = (self.oldest + 1) % self.order.len();
                position
            } else {
                let position = self.order[self.cursor];
                self.cursor = (self.cursor + 1) % self.order.len();
                position
            };
            self.positions.push(position);
            self.picked.push(self.keys[position as usize]);
        }
    }
}

struct WheelFixture {
    wheel: Wheel<u32>,
    book: Book<TimerKey>,
    /// Keys of the entries an insert chunk adds, and values an expire chunk hands out.
    inserted: Vec<TimerKey>,
    expired: Vec<u32>,
}

impl Fixture for WheelFixture {
    const NAME: &'static str = "wheel";

    fn filled(n: usize) -> Self {
        let mut book = Book::new(n);
        let mut wheel = Wheel::new();
        wheel.reserve(n + chunk(n));
        for position in 0..n as u32 {
            let deadline = book.delay();
            book.keys.push(wheel.insert(deadline, position));
        }
        WheelFixture {
            wheel,
            book,
            inserted: Vec::new(),
            expired: Vec::new(),
        }
    }

    fn run_chunk(&mut self, op: Op, count: usize) -> Duration {
        self.book.prepare(count, matches!(op, Op::RemoveOldest));
        let now = self.wheel.now();
        let (wheel, book) = (&mut self.wheel, &mut self.book);
        match op {
            Op::Insert => {
                let start = Instant::now();
                for &delay in &book.delays {
                    self.inserted.push(wheel.insert(now + delay, u32::MAX));
                }
                let elapsed = start.elapsed();
                for key in self.inserted.drain(..) {
                    wheel.remove(key);
                }
                elapsed
            }
            Op::Remove | Op::RemoveOldest => {
                let start = Instant::now();
                for &key in &book.picked {
                    black_box(wheel.remove(key));
                }
                let elapsed = start.elapsed();
                for (&position, &delay) in book.positions.iter().zip(&book.delays) {
                    book.keys[position as usize] = wheel.insert(now + delay, position);
                }
                elapsed
            }
            Op::Reschedule => {
                let start = Instant::now();
                let mut ok = true;
                for (&key, &delay) in book.picked.iter().zip(&book.delays) {
                    ok &= wheel.reschedule(key, now + delay).is_ok();
                }
                let elapsed = start.elapsed();
                assert!(ok, "rescheduled a stale key");
                elapsed
            }
            Op::Expire => {
                // Sleep until the next expiration, hand out what is due, until `count` are out.
                let start = Instant::now();
                while self.expired.len() < count {
                    let next = wheel.next_expiration().expect("entries are pending");
                    let budget = count - self.expired.len();
                    self.expired
                        .extend(wheel.advance(next).take(budget).map(|e| e.value));
                }
                let elapsed = start.elapsed();
                let now = wheel.now();
                for (position, &delay) in self.expired.drain(..).zip(&book.delays) {
                    book.keys[position as usize] = wheel.insert(now + delay, position);
                }
                elapsed
            }
        }
    }
}

struct QueueFixture {
    runtime: Runtime,
    queue: DelayQueue<u32>,
    book: Book<Key>,
    inserted: Vec<Key>,
    expired: Vec<u32>,
}

impl QueueFixture {
    fn deadline(now: tokio::time::Instant, delay: u64) -> tokio::time::Instant {
        now + Duration::from_millis(delay)
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
        let mut book = Book::new(n);
        let queue = {
            // `DelayQueue` arms a tokio `Sleep`, which needs the runtime's context.
            let _context = runtime.enter();
            let mut queue = DelayQueue::with_capacity(n + chunk(n));
            let now = tokio::time::Instant::now();
            for position in 0..n as u32 {
                let deadline = Self::deadline(now, book.delay());
                book.keys.push(queue.insert_at(position, deadline));
            }
            queue
        };
        QueueFixture {
            runtime,
            queue,
            book,
            inserted: Vec::new(),
            expired: Vec::new(),
        }
    }

    fn run_chunk(&mut self, op: Op, count: usize) -> Duration {
        self.book.prepare(count, matches!(op, Op::RemoveOldest));
        let _context = self.runtime.enter();
        let now = tokio::time::Instant::now();
        let (queue, book) = (&mut self.queue, &mut self.book);
        match op {
            Op::Insert => {
                let start = Instant::now();
                for &delay in &book.delays {
                    let deadline = Self::deadline(now, delay);
                    self.inserted.push(queue.insert_at(u32::MAX, deadline));
                }
                let elapsed = start.elapsed();
                for key in self.inserted.drain(..) {
                    queue.remove(&key);
                }
                elapsed
            }
            Op::Remove | Op::RemoveOldest => {
                let start = Instant::now();
                for key in &book.picked {
                    black_box(queue.remove(key));
                }
                let elapsed = start.elapsed();
                for (&position, &delay) in book.positions.iter().zip(&book.delays) {
                    let deadline = Self::deadline(now, delay);
                    book.keys[position as usize] = queue.insert_at(position, deadline);
                }
                elapsed
            }
            Op::Reschedule => {
                let start = Instant::now();
                for (key, &delay) in book.picked.iter().zip(&book.delays) {
                    queue.reset_at(key, Self::deadline(now, delay));
                }
                start.elapsed()
            }
            Op::Expire => {
                // With the clock paused, awaiting the next entry jumps to its deadline.
                let expired = &mut self.expired;
                let elapsed = self.runtime.block_on(async {
                    let start = Instant::now();
                    for _ in 0..count {
                        let entry = poll_fn(|cx| queue.poll_expired(cx)).await;
                        expired.push(entry.expect("entries are pending").into_inner());
                    }
                    start.elapsed()
                });
                let now = tokio::time::Instant::now();
                for (position, &delay) in expired.drain(..).zip(&book.delays) {
                    let deadline = Self::deadline(now, delay);
                    book.keys[position as usize] = queue.insert_at(position, deadline);
                }
                elapsed
            }
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
/// the benchmark also skips the (slow, at 10 M) fill, and shared by the four operations.
fn bench_queue<F: Fixture>(c: &mut Criterion, n: usize) {
    let mut fixture: Option<F> = None;
    for op in Op::ALL {
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
