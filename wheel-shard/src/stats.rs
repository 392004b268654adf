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
    /// Callback runs that panicked. Each is logged with `tracing`; a repeating timer ends at
    /// its first panicking run.
    pub panicked: u64,
    /// Panics in user code's `Drop` that the service contained: a task dropped unrun (after a
    /// `cancel`, or when the last handle goes), a repeating task after its last run, or a panic
    /// payload of a callback. Each is logged with `tracing`, and the thread that dropped it (a
    /// tick thread or a worker) goes on.
    pub drop_panics: u64,
    /// Timers a tick thread or a worker found out of step with their own state (a bug in the
    /// service if ever non-zero): each is logged with `tracing`, kept unrun rather than acted
    /// on, and handed back by `shutdown`.
    pub strays: u64,
    /// Timers scheduled and not yet fired, cancelled or handed back.
    pub pending: usize,
    /// Times the tick threads woke up, all shards together.
    pub wakeups: u64,
    /// `schedule` calls that found their shard's pending ring full, and so waited for room
    /// (up to `Config::saturation_timeout`) or were refused. The tick threads wake before a
    /// ring is full and drain it every tick while it floods, so this stays 0 unless they cannot
    /// keep up (too few CPUs, a `ring_capacity` too small for the bursts, a `transfer_batch`
    /// spent each tick).
    pub ring_full: u64,
    /// Commands waiting in each shard's pending ring.
    pub ring_depths: Vec<usize>,
    /// Expired tasks handed to the executor and not yet started.
    pub executor_queue: usize,
    /// Callback start minus deadline, over every run so far.
    pub lateness: Lateness,
    /// How long callbacks ran, over every run so far (real time, also under a manual clock):
    /// from a run's start until its worker is ready for its next run, so a few hundred
    /// nanoseconds of the worker's own bookkeeping are included. A run is recorded when its
    /// worker starts the next one or runs out of work.
    pub callback_time: Lateness,
    /// Callback start minus the moment its tick thread handed it to the executor (real time):
    /// a long queue delay with a small lateness otherwise means a busy executor (slow
    /// callbacks, too few `executor_threads`), not a late wheel.
    pub queue_delay: Lateness,
    /// Callback runs that took longer than `Config::slow_callback`. Each is also logged with
    /// `tracing` at `warn`, naming the timer and its run time, at most once a second per worker
    /// (the line says how many it held back).
    pub slow_callbacks: u64,
    /// Tick threads running under real-time priority: the shard count when
    /// [`Config::realtime_ticks`](crate::Config::realtime_ticks) is set and the OS allowed
    /// it, otherwise 0.
    pub realtime_ticks: usize,
}

/// A distribution of durations with its usual percentiles: [`Stats::lateness`] (when each
/// callback started, measured from its deadline tick, the requested deadline rounded up to the
/// tick), [`Stats::callback_time`] and [`Stats::queue_delay`].
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

impl Lateness {
    /// An empty histogram with the bounds of every [`Lateness::histogram`]: nanoseconds from 1
    /// to an hour (longer samples are clamped), 3 significant digits. For code that records
    /// its own samples beside the service's and wants them comparable.
    ///
    /// ```
    /// let mut mine = wheel_shard::Lateness::empty_histogram();
    /// mine.record(1_500).unwrap();
    /// assert_eq!(mine.len(), 1);
    /// ```
    pub fn empty_histogram() -> Histogram<u64> {
        new_histogram()
    }

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
