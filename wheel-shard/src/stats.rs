//! [`Stats`]: what the service has done, read without stopping it.

use std::time::Duration;

use hdrhistogram::Histogram;

/// A snapshot of the service's counters. Counters are read one after another while the service
/// runs, so a snapshot taken under load can be off by the operations in flight; after
/// `shutdown` it is exact.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Timers accepted by `schedule`, `schedule_at` and `schedule_repeating`.
    pub scheduled: u64,
    /// Callback runs started (a repeating timer counts once per run).
    pub fired: u64,
    /// Timers ended by a successful `cancel`.
    pub cancelled: u64,
    /// `schedule` calls refused with an error.
    pub rejected: u64,
    /// Callback runs that panicked.
    pub panicked: u64,
    /// Timers scheduled and not yet fired, cancelled or handed back.
    pub pending: usize,
    /// Times the tick threads woke up, all shards together.
    pub wakeups: u64,
    /// Commands waiting in each shard's pending ring.
    pub ring_depths: Vec<usize>,
    /// Expired tasks handed to the executor and not yet started.
    pub executor_queue: usize,
    /// Callback start minus deadline, over every run so far.
    pub lateness: Lateness,
}

/// The lateness distribution: when each callback started, measured from its deadline tick
/// (the requested deadline rounded up to the tick).
#[derive(Clone, Debug)]
pub struct Lateness {
    /// Runs measured.
    pub count: u64,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
    /// 99.99th percentile.
    pub p9999: Duration,
    /// The latest start.
    pub max: Duration,
    /// Every sample, in nanoseconds, merged from all executor workers.
    pub histogram: Histogram<u64>,
}

/// Highest lateness a histogram tracks exactly (an hour); later samples are clamped to it.
pub(crate) const MAX_TRACKED_NANOS: u64 = 3_600_000_000_000;

pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKED_NANOS, 3).expect("static histogram bounds are valid")
}

/// Bytes one [`new_histogram`] allocates for its counts (each executor worker keeps one).
pub(crate) fn histogram_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| new_histogram().distinct_values() * std::mem::size_of::<u64>())
}

impl Lateness {
    pub(crate) fn from_histogram(histogram: Histogram<u64>) -> Lateness {
        let at = |q: f64| Duration::from_nanos(histogram.value_at_quantile(q));
        Lateness {
            count: histogram.len(),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
            max: Duration::from_nanos(histogram.max()),
            histogram,
        }
    }
}
