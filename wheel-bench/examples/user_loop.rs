//! The plain user loop of issue 12 beside this machine's floor for it, measured in one run.
//!
//! The loop is what an application writes: one producer thread, for each timer
//! `let intended = Instant::now() + delay; service.schedule(delay, move || record(j, intended))`,
//! a 24-byte closure. Each round schedules every timer, then waits until all have fired; round
//! 0 is a warm-up (the service's records and wheels grow), the rounds after it are warm.
//!
//! The floor is the same loop with `schedule` replaced by the least a schedule can do on this
//! machine, built up in three steps, each timed on its own:
//! - `user`: the loop's own work, the caller's clock read and the closure, nothing scheduled;
//! - `+ clock`: one time-stamp counter read, the cheapest never-behind "now" this machine has
//!   (what `schedule(Duration)` starts its deadline from where the kernel's clock reads that
//!   counter; elsewhere a monotonic clock read);
//! - `+ record`: a 64-byte record written (read, then 48 bytes and a state word stored), the
//!   next one in memory each time among as many records as there are timers, prefetched 16
//!   timers ahead, after another thread has written every record, as a worker does when it
//!   fires a timer. Every timer needs a record of its own written once, and 10 M records are
//!   far more than any cache holds, so the least this costs is a stream of writes to memory:
//!   in order, which is how a producer takes records after a round has freed them all. (A
//!   random order costs a DRAM miss a record on a machine whose prefetches cannot hide it: it
//!   measured above the service's whole loop on a virtual machine, so it is no floor.)
//! - `+ hand-over`: a 16-byte reference to the record sent to another thread through the
//!   cheapest queue there is, a single-producer ring of 4 Ki cells (a service's default ring
//!   size) with no atomic read-modify-write: the producer stores the reference and then the
//!   cell's position, and reads the consumer's head only when the ring looks full. The
//!   consumer drains what is published every couple of microseconds, so each cell line moves
//!   to it about once, and back to the producer on the next lap: the share of a cache-line
//!   transfer a schedule cannot avoid. The floor is this last step.
//!
//! ```text
//! cargo run --release -p wheel-bench --example user_loop -- [TIMERS] [ROUNDS] [SPREAD_MS]
//! ```
//!
//! The service runs the default config with the `WHEEL_*` variables on top (for example
//! `WHEEL_PIN_THREADS=true`). Each round also prints how much of the loop's time the producer
//! was on a CPU: the rest it waited for one, behind the host's stalls or the service's own
//! threads on its core.
//!
//! It exits non-zero if a timer fired early or went missing.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use wheel_shard::{Config, TimerService};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

static FIRED: AtomicU64 = AtomicU64::new(0);
static EARLY: AtomicU64 = AtomicU64::new(0);

/// How many timers ahead the floor's record write is prefetched, as the service's claims are.
const PREFETCH_AHEAD: usize = 16;

/// The callback: counts the timer, and counts it early if it runs before its intended time.
#[inline(never)]
fn record(j: u64, intended: Instant) {
    if Instant::now() < intended {
        EARLY.fetch_add(1, Ordering::Relaxed);
    }
    black_box(j);
    FIRED.fetch_add(1, Ordering::Relaxed);
}

/// Timer `j`'s delay: 200 ms plus a pseudo-random part of `spread`.
fn delay(j: u64, spread: Duration) -> Duration {
    let spread_us = spread.as_micros().max(1) as u64;
    Duration::from_micros(200_000 + (j.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % spread_us)
}

/// One record's cache line.
#[repr(C, align(64))]
struct Line {
    word: AtomicU64,
    rest: [AtomicU64; 7],
}

/// Cells of the hand-over ring: a power of two, the service's default ring size.
const HANDOVER_CELLS: usize = 4096;

/// A cell of the hand-over ring: the reference, and the position it was sent at plus one.
#[repr(C)]
struct HandoverCell {
    published: AtomicU64,
    reference: AtomicU64,
}

/// The floor's hand-over: a single-producer, single-consumer ring without read-modify-writes.
struct Handover {
    cells: Box<[HandoverCell]>,
    /// The next position the consumer reads; the producer reads it only when the ring looks
    /// full.
    head: CachePadded<AtomicU64>,
    /// Set by the producer when it has sent everything.
    done: AtomicBool,
}

impl Handover {
    fn new() -> Self {
        Handover {
            cells: (0..HANDOVER_CELLS)
                .map(|_| HandoverCell {
                    published: AtomicU64::new(0),
                    reference: AtomicU64::new(0),
                })
                .collect(),
            head: CachePadded::new(AtomicU64::new(0)),
            done: AtomicBool::new(false),
        }
    }

    /// Producer: sends `reference` as position `*tail`, waiting while the ring is full.
    #[inline(always)]
    fn send(&self, tail: &mut u64, head_seen: &mut u64, reference: u64) {
        while *tail - *head_seen == HANDOVER_CELLS as u64 {
            *head_seen = self.head.load(Ordering::Acquire);
            std::hint::spin_loop();
        }
        let cell = &self.cells[*tail as usize & (HANDOVER_CELLS - 1)];
        cell.reference.store(reference, Ordering::Relaxed);
        cell.published.store(*tail + 1, Ordering::Release);
        *tail += 1;
    }

    /// Consumer: takes what is published every couple of microseconds until the producer is
    /// done and everything is taken; returns a sum of the references (so none is optimised
    /// away).
    fn drain(&self) -> u64 {
        let (mut head, mut sum) = (0u64, 0u64);
        loop {
            let finished = self.done.load(Ordering::Acquire);
            let start = head;
            loop {
                let cell = &self.cells[head as usize & (HANDOVER_CELLS - 1)];
                if cell.published.load(Ordering::Acquire) != head + 1 {
                    break;
                }
                sum = sum.wrapping_add(cell.reference.load(Ordering::Relaxed));
                head += 1;
            }
            if head != start {
                self.head.store(head, Ordering::Release);
            } else if finished {
                return sum;
            }
            let pause = Instant::now();
            while pause.elapsed() < Duration::from_micros(2) {
                std::hint::spin_loop();
            }
        }
    }
}

#[inline(always)]
fn prefetch(line: &Line) {
    // The same hint the service's claims give (`Record::prefetch_for_write`).
    wheel_platform::hint::prefetch_for_write(line);
}

/// The cheapest read of "now" this machine has: the time-stamp counter, else the monotonic
/// clock (one read either way).
#[inline(always)]
fn read_now() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC is part of the x86_64 baseline and touches no memory.
    black_box(unsafe { std::arch::x86_64::_rdtsc() });
    #[cfg(not(target_arch = "x86_64"))]
    black_box(Instant::now());
}

/// Which steps of the floor a loop does (see the module doc).
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Floor {
    User,
    Clock,
    Record,
    Handover,
}

/// Runs the floor loop up to `step` over `n` timers; returns its wall time.
fn floor(step: Floor, n: u64, spread: Duration, lines: &[Line]) -> Duration {
    if step < Floor::Handover {
        return floor_loop(step, n, spread, lines, None);
    }
    let handover = Handover::new();
    std::thread::scope(|scope| {
        let consumer = scope.spawn(|| handover.drain());
        let took = floor_loop(step, n, spread, lines, Some(&handover));
        handover.done.store(true, Ordering::Release);
        black_box(consumer.join().expect("the consumer does not panic"));
        took
    })
}

/// The floor's loop (see [`floor`]); `handover` is the ring for the last step.
fn floor_loop(
    step: Floor,
    n: u64,
    spread: Duration,
    lines: &[Line],
    handover: Option<&Handover>,
) -> Duration {
    let (mut tail, mut head_seen) = (0u64, 0u64);
    let start = Instant::now();
    for j in 0..n {
        let delay = delay(j, spread);
        let intended = Instant::now() + delay;
        let task = move || record(j, intended);
        if step >= Floor::Clock {
            read_now();
        }
        if step >= Floor::Record {
            let i = j as usize;
            if let Some(ahead) = lines.get(i + PREFETCH_AHEAD) {
                prefetch(ahead);
            }
            let line = &lines[i];
            let word = line.word.load(Ordering::Acquire);
            line.rest[..6]
                .iter()
                .for_each(|part| part.store(word ^ j, Ordering::Relaxed));
            line.word.store(word + 1, Ordering::Release);
            if let Some(handover) = handover {
                handover.send(&mut tail, &mut head_seen, (j << 32) | word);
            }
        }
        let _task = black_box(task);
    }
    start.elapsed()
}

/// Another thread writes every record, as the workers do when the timers fire.
fn written_elsewhere(lines: &[Line]) {
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for line in lines {
                line.word
                    .store(line.word.load(Ordering::Relaxed) + 1, Ordering::Release);
            }
        });
    });
}

/// The user loop over `n` timers; returns its wall time.
/// The user loop: its wall time, and the time the producer thread was on a CPU meanwhile
/// (the rest it waited for a CPU: the host's stalls, or the service's threads on its core).
/// Never inlined, so a profile can count it alone.
#[inline(never)]
fn user_loop(service: &TimerService, n: u64, spread: Duration) -> (Duration, Duration) {
    let cpu_before = thread_cpu();
    let start = Instant::now();
    for j in 0..n {
        let delay = delay(j, spread);
        let intended = Instant::now() + delay;
        service
            .schedule(delay, move || record(j, intended))
            .expect("the service takes every timer");
    }
    (start.elapsed(), thread_cpu().saturating_sub(cpu_before))
}

/// CPU time of the calling thread so far.
fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call's duration.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "CLOCK_THREAD_CPUTIME_ID");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn arg<T: std::str::FromStr>(index: usize, default: T) -> T {
    std::env::args()
        .nth(index)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn ns_per(took: Duration, n: u64) -> f64 {
    took.as_nanos() as f64 / n as f64
}

fn main() {
    let n: u64 = arg(1, 10_000_000);
    let rounds: usize = arg(2, 4);
    let spread = Duration::from_millis(arg(3, 10_000));
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!(
        "user loop: {n} timers over {spread:?} from one producer, 24-byte closure, schedule(Duration); {cores} cores"
    );
    let config = Config::default()
        .with_env()
        .expect("the WHEEL_* variables make a valid config");
    let service = TimerService::new(config).expect("the config is valid");
    let lines: Vec<Line> = (0..n)
        .map(|_| Line {
            word: AtomicU64::new(0),
            rest: Default::default(),
        })
        .collect();
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let (took, on_cpu) = user_loop(&service, n, spread);
        while service.pending() > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let user = floor(Floor::User, n, spread, &lines);
        let clock = floor(Floor::Clock, n, spread, &lines);
        written_elsewhere(&lines);
        let record = floor(Floor::Record, n, spread, &lines);
        written_elsewhere(&lines);
        let handover = floor(Floor::Handover, n, spread, &lines);
        let label = if round == 0 { "warm-up" } else { "warm" };
        println!(
            "round {round} ({label}): loop {took:.2?} = {:.1} ns/timer ({:.1} on a CPU); floor {handover:.2?} = {:.1} ns/timer (user {:.1}, + clock {:.1}, + record {:.1}, + hand-over {:.1}); loop / floor {:.2}",
            ns_per(took, n),
            ns_per(on_cpu, n),
            ns_per(handover, n),
            ns_per(user, n),
            ns_per(clock, n),
            ns_per(record, n),
            ns_per(handover, n),
            took.as_secs_f64() / handover.as_secs_f64(),
        );
        if round > 0 {
            ratios.push(took.as_secs_f64() / handover.as_secs_f64());
        }
    }
    ratios.sort_by(f64::total_cmp);
    if let Some(median) = ratios.get(ratios.len() / 2) {
        println!("median loop / floor over the warm rounds: {median:.2}");
    }
    drop(service);
    let (fired, early) = (FIRED.load(Ordering::SeqCst), EARLY.load(Ordering::SeqCst));
    println!("fired {fired} of {}, early {early}", n * rounds as u64);
    if early != 0 || fired != n * rounds as u64 {
        std::process::exit(1);
    }
}
