//! Which timers make the lateness tail, and when they were due.
//!
//! The bench's histograms say how late the p99.99 timer was, not which timers were that late.
//! This example schedules timers as the bench's `fire` scenario does (one producer, delays
//! uniform over the spread, the clock read every 64 timers, deadlines by `schedule_at`), after
//! unmeasured warm-up rounds of the same size (one unless told), and notes each timer's
//! lateness by its index. It then prints the p99.99 and the max, and the latest 1 in 10 000 timers grouped by when they
//! were due, in 5 ms windows from the start of the round, beside how long the scheduling burst
//! took: a tail of scattered single windows is the host's or the guest's scheduling, a tail
//! packed into a few windows is one event of the service's (docs/performance.md has one).
//! Each window also counts its timers that were due within 20 ms of being scheduled: many of
//! them means references that waited in a full pending ring past their deadline.
//!
//! ```text
//! cargo run --release -p wheel-bench --example late_timers -- [TIMERS] [SPREAD_MS] [CAPACITY] [WARM_UPS]
//! ```
//!
//! `CAPACITY` is `Config::capacity` (0, the default: records written as the table grows).
//! `WARM_UPS` 0 measures a cold service, whose first burst grows its memory. It
//! exits non-zero if a timer fired early or never ran.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use wheel_shard::{Config, TimerService};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Each timer's lateness in microseconds, plus one (0: it has not run).
static LATE_US: OnceLock<Vec<AtomicU32>> = OnceLock::new();
/// The measured round's origin: deadlines are nanoseconds after it.
static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// Timers between two clock reads of the producer, as in the bench.
const CLOCK_EVERY: usize = 64;
/// The width of a due-time window in the report.
const WINDOW_NS: u64 = 5_000_000;
/// A delay this short can outlast a wait in a full pending ring: a tail of such timers is
/// references that reached the wheel after they were due, not late expiries.
const SHORT_DELAY_NS: u64 = 20_000_000;
/// A timer this much early would be a bug; its lateness is stored as this marker.
const EARLY: u32 = u32::MAX;

/// The callback: how late timer `index`, due `due_ns` after the origin, started.
#[inline(never)]
fn record(index: usize, due_ns: u64) {
    let now = ORIGIN
        .get()
        .expect("set before scheduling")
        .elapsed()
        .as_nanos() as u64;
    let late = match now.checked_sub(due_ns) {
        Some(late) => u32::try_from(late / 1000).unwrap_or(EARLY - 2) + 1,
        None => EARLY,
    };
    LATE_US.get().expect("set before scheduling")[index].store(late, Ordering::Relaxed);
}

/// A xorshift stream for the delays, the same in every run.
struct Delays(u64);

impl Delays {
    fn next_below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// Schedules `timers` timers from this thread, due after delays uniform over `spread_ns`;
/// returns, when `recorded`, each one's due time and its delay (when it was due after its
/// schedule call's clock read), in nanoseconds.
fn schedule_all(
    service: &TimerService,
    timers: usize,
    spread_ns: u64,
    origin: Instant,
    recorded: bool,
) -> Vec<(u64, u64)> {
    let mut delays = Delays(0x1234_5678_9abc_def0);
    let mut due = Vec::with_capacity(if recorded { timers } else { 0 });
    let mut now_ns = 0;
    for index in 0..timers {
        if index % CLOCK_EVERY == 0 {
            now_ns = origin.elapsed().as_nanos() as u64;
        }
        let delay_ns = delays.next_below(spread_ns);
        let due_ns = now_ns + delay_ns;
        let at = origin + Duration::from_nanos(due_ns);
        let scheduled = if recorded {
            due.push((due_ns, delay_ns));
            service.schedule_at(at, move || record(index, due_ns))
        } else {
            service.schedule_at(at, || {})
        };
        scheduled.expect("the service takes every timer");
    }
    due
}

fn wait_until_all_ran(service: &TimerService) {
    while service.pending() > 0 {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .map(|a| a.parse().expect("a number"))
        .unwrap_or(default)
}

fn main() {
    let timers = arg(1, 10_000_000) as usize;
    let spread_ns = arg(2, 10_000).max(1) * 1_000_000;
    let capacity = arg(3, 0) as usize;
    let warm_ups = arg(4, 1);
    let service = TimerService::new(Config {
        capacity,
        ..Config::default()
    })
    .expect("a valid config");
    LATE_US
        .set((0..timers).map(|_| AtomicU32::new(0)).collect())
        .expect("set once");

    // Warm-up: the same round, unrecorded, so the measured one finds the memory grown.
    for _ in 0..warm_ups {
        schedule_all(&service, timers, spread_ns, Instant::now(), false);
        wait_until_all_ran(&service);
    }

    let before = service.stats();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let due = schedule_all(&service, timers, spread_ns, origin, true);
    let burst = origin.elapsed();
    wait_until_all_ran(&service);
    // The last callbacks may still be storing their sample.
    std::thread::sleep(Duration::from_millis(100));

    let after = service.stats();
    let late = LATE_US.get().expect("set");
    let mut samples: Vec<(u32, u64, u64)> = Vec::with_capacity(timers);
    let (mut early, mut missing) = (0, 0);
    for (slot, &(due_ns, delay_ns)) in late.iter().zip(&due) {
        match slot.load(Ordering::Relaxed) {
            0 => missing += 1,
            EARLY => early += 1,
            late_us => samples.push((late_us - 1, due_ns, delay_ns)),
        }
    }
    if samples.is_empty() {
        eprintln!("no timer ran");
        std::process::exit(1);
    }
    samples.sort_unstable_by_key(|&(late_us, _, _)| std::cmp::Reverse(late_us));
    let tail = (samples.len() / 10_000).max(1);
    println!(
        "{timers} timers over {} ms, capacity {capacity}, {warm_ups} warm-up rounds: \
         the burst took {burst:?}; p99.99 {} µs, max {} µs",
        spread_ns / 1_000_000,
        samples[tail - 1].0,
        samples[0].0
    );
    // The service's own view of the round: how late each run started after its deadline tick,
    // and how much of that it waited in the executor's queues after the tick thread handed
    // it out. A tail in the queue delay is the executor's; one in the lateness alone is the
    // tick thread's.
    let round = |after: &Histogram<u64>, before: &Histogram<u64>| {
        let mut round = after.clone();
        round
            .subtract(before)
            .expect("the same bounds, and counts only grow");
        round
    };
    let lateness = round(&after.lateness.histogram, &before.lateness.histogram);
    let queue_delay = round(&after.queue_delay.histogram, &before.queue_delay.histogram);
    println!(
        "the service's view: lateness after the deadline tick p99.99 {} µs, max {} µs; \
         of which queued for a worker p99.99 {} µs, max {} µs",
        lateness.value_at_quantile(0.9999) / 1000,
        lateness.max() / 1000,
        queue_delay.value_at_quantile(0.9999) / 1000,
        queue_delay.max() / 1000
    );
    let mut windows: BTreeMap<u64, (usize, u32, usize)> = BTreeMap::new();
    for &(late_us, due_ns, delay_ns) in &samples[..tail] {
        let window = windows.entry(due_ns / WINDOW_NS).or_default();
        window.0 += 1;
        window.1 = window.1.max(late_us);
        if delay_ns < SHORT_DELAY_NS {
            window.2 += 1;
        }
    }
    println!(
        "the latest {tail} by when they were due (window: timers, the latest, \
         how many were due within {} ms of their schedule call):",
        SHORT_DELAY_NS / 1_000_000
    );
    for (window, (count, latest, short)) in windows {
        println!(
            "  {:>6} ms: {count:>5}, {latest} µs, {short} short",
            window * WINDOW_NS / 1_000_000
        );
    }
    if early + missing > 0 {
        eprintln!("{early} timers fired early, {missing} never ran");
        std::process::exit(1);
    }
}
