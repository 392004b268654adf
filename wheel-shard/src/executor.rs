//! [`Executor`]: the worker threads that run expired callbacks, so no callback ever runs on a
//! tick thread and a slow one holds up only the worker running it.
//!
//! Each shard's tick thread pushes into its own injector (one producer each, no contention
//! between shards). Idle workers take batches from the injectors and steal from each other's
//! deques (crossbeam-deque), so work spreads to whoever is free. A worker with nothing to do
//! sleeps on a condition variable; tick threads wake only as many as they handed tasks to.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crossbeam_deque::{Injector, Steal, Stealer, Worker};
use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;

use crate::core::Core;
use crate::idle::Idle;
use crate::job::BoxedJob;
use crate::stats::{new_histogram, MAX_TRACKED_NANOS};

/// A repeating timer's identity, so its worker can re-arm it after the run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Repeat {
    pub(crate) shard: usize,
    pub(crate) slot: u32,
    pub(crate) gen: u32,
}

/// An expired task on its way to a worker.
pub(crate) struct Run {
    pub(crate) job: BoxedJob,
    /// The deadline tick it fired for.
    pub(crate) deadline: u64,
    pub(crate) repeat: Option<Repeat>,
}

/// Per-worker counters and lateness samples, merged on request by `stats()`.
struct WorkerStats {
    fired: AtomicU64,
    panicked: AtomicU64,
    lateness: Mutex<Histogram<u64>>,
}

pub(crate) struct Executor {
    injectors: Box<[Injector<Run>]>,
    stealers: Box<[Stealer<Run>]>,
    workers: Box<[CachePadded<WorkerStats>]>,
    idle: Idle,
}

impl Executor {
    /// The executor for `shards` tick threads and `threads` workers, and the workers' own deques
    /// (one for each worker thread to take).
    pub(crate) fn new(shards: usize, threads: usize) -> (Executor, Vec<Worker<Run>>) {
        let locals: Vec<Worker<Run>> = (0..threads).map(|_| Worker::new_fifo()).collect();
        let executor = Executor {
            injectors: (0..shards).map(|_| Injector::new()).collect(),
            stealers: locals.iter().map(Worker::stealer).collect(),
            workers: (0..threads)
                .map(|_| {
                    CachePadded::new(WorkerStats {
                        fired: AtomicU64::new(0),
                        panicked: AtomicU64::new(0),
                        lateness: Mutex::new(new_histogram()),
                    })
                })
                .collect(),
            idle: Idle::new(),
        };
        (executor, locals)
    }

    /// Queues an expired task from shard `shard`'s tick thread. Call [`Executor::notify`] after
    /// a batch.
    pub(crate) fn submit(&self, shard: usize, run: Run) {
        prefetch(&*run.job);
        self.injectors[shard].push(run);
    }

    /// Wakes up to `handed` sleeping workers for tasks just submitted.
    pub(crate) fn notify(&self, handed: usize) {
        self.idle.notify(handed);
    }

    /// Lets workers exit once the queues are empty.
    pub(crate) fn stop(&self) {
        self.idle.stop();
    }

    /// Tasks queued and not yet started.
    pub(crate) fn queued(&self) -> usize {
        self.injectors.iter().map(Injector::len).sum::<usize>()
            + self.stealers.iter().map(Stealer::len).sum::<usize>()
    }

    fn has_work(&self) -> bool {
        self.injectors.iter().any(|q| !q.is_empty()) || self.stealers.iter().any(|s| !s.is_empty())
    }

    pub(crate) fn fired(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.fired.load(Ordering::Relaxed))
            .sum()
    }

    pub(crate) fn panicked(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.panicked.load(Ordering::Relaxed))
            .sum()
    }

    /// Every worker's lateness samples, merged.
    pub(crate) fn lateness(&self) -> Histogram<u64> {
        let mut merged = new_histogram();
        for worker in self.workers.iter() {
            let samples = worker.lateness.lock().unwrap_or_else(|e| e.into_inner());
            merged.add(&*samples).expect("histograms share bounds");
        }
        merged
    }

    /// The body of worker thread `index`: run tasks until stopped and drained.
    pub(crate) fn work(core: &Core, index: usize, local: Worker<Run>) {
        let executor = &core.executor;
        loop {
            if let Some(run) = executor.find_task(index, &local) {
                executor.execute(core, index, run);
            } else if executor.idle.stopped() && !executor.has_work() {
                return;
            } else {
                executor.sleep();
            }
        }
    }

    fn find_task(&self, index: usize, local: &Worker<Run>) -> Option<Run> {
        if let Some(run) = local.pop() {
            return Some(run);
        }
        let injectors = self.injectors.len();
        let stealers = self.stealers.len();
        loop {
            let mut retry = false;
            for i in 0..injectors {
                match self.injectors[(index + i) % injectors].steal_batch_and_pop(local) {
                    Steal::Success(run) => return Some(run),
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            for i in 1..stealers {
                match self.stealers[(index + i) % stealers].steal_batch_and_pop(local) {
                    Steal::Success(run) => return Some(run),
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if !retry {
                return None;
            }
        }
    }

    fn sleep(&self) {
        self.idle.sleep(|| self.has_work());
    }

    fn execute(&self, core: &Core, index: usize, mut run: Run) {
        let stats = &self.workers[index];
        let late = Instant::now().saturating_duration_since(core.clock.instant(run.deadline));
        record(&stats.lateness, late);
        stats.fired.fetch_add(1, Ordering::Relaxed);
        let outcome = catch_unwind(AssertUnwindSafe(|| run.job.run()));
        if let Err(payload) = &outcome {
            stats.panicked.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                panic = panic_message(payload.as_ref()),
                repeating = run.repeat.is_some(),
                "timer callback panicked; the service goes on"
            );
        }
        if let Some(repeat) = run.repeat {
            let now = core.clock.now();
            core.shards[repeat.shard].after_run(
                repeat,
                run.job,
                run.deadline,
                outcome.is_ok(),
                now,
            );
        }
    }
}

fn record(lateness: &Mutex<Histogram<u64>>, late: Duration) {
    let nanos = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
    let mut histogram = lateness.lock().unwrap_or_else(|e| e.into_inner());
    histogram.saturating_record(nanos.clamp(1, MAX_TRACKED_NANOS));
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("<non-string panic payload>")
}

/// Starts loading a task's closure into the shared cache. The closure was boxed by its producer
/// up to the whole delay earlier and has usually gone cold: the worker's first touch of it was
/// a memory miss in nearly every sample of `Job::run`. Started from the tick thread as it hands
/// the task over, the worker finds the line in a nearer cache.
fn prefetch(job: &dyn crate::job::Job) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is only a hint: it never faults and changes no memory, and the
        // address is that of a live reference. SSE is part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((job as *const dyn crate::job::Job).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = job;
}
