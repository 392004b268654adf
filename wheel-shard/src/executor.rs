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

use crate::contain::{drop_contained, drop_payload, panic_message};
use crate::core::Core;
use crate::idle::Idle;
use crate::job::{next_run, Armed, BoxedJob};
use crate::shard::Notice;
use crate::state::{short, Ended};
use crate::stats::{new_histogram, MAX_TRACKED_NANOS};
use crate::timer::TimerId;

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
    /// Its timer, for the slow-callback log and, if repeating, to re-arm it.
    pub(crate) id: TimerId,
    pub(crate) repeating: bool,
    /// When the tick thread handed it over, in real nanoseconds (`Clock::real_nanos`).
    pub(crate) handed_at: u64,
}

impl Run {
    pub(crate) fn new(
        job: BoxedJob,
        deadline: u64,
        id: TimerId,
        repeating: bool,
        handed_at: u64,
    ) -> Run {
        Run {
            job,
            deadline,
            id,
            repeating,
            handed_at,
        }
    }

    fn repeat(&self) -> Option<Repeat> {
        self.repeating.then(|| Repeat {
            shard: self.id.shard(),
            slot: self.id.slot(),
            gen: short(self.id.gen()),
        })
    }
}

/// Per-worker counters and samples, merged on request by `stats()`.
struct WorkerStats {
    fired: AtomicU64,
    panicked: AtomicU64,
    /// Runs over `Config::slow_callback`.
    slow: AtomicU64,
    /// Runs finished (or skipped), re-arm included: what a manual clock's `advance` waits for.
    /// Counted under a manual clock only.
    done: AtomicU64,
    samples: Mutex<Samples>,
}

/// One worker's distributions.
struct Samples {
    lateness: Histogram<u64>,
    callback_time: Histogram<u64>,
    queue_delay: Histogram<u64>,
}

/// The merged distributions of every worker (see `Stats`).
pub(crate) struct Distributions {
    pub(crate) lateness: Histogram<u64>,
    pub(crate) callback_time: Histogram<u64>,
    pub(crate) queue_delay: Histogram<u64>,
}

/// What a worker keeps to itself between runs.
///
/// A run's time is measured from its start to the start of the worker's next run (or to the
/// moment the worker finds nothing left to run), so a run costs one clock read, not two: the
/// measure includes the worker's own bookkeeping between the two, a few hundred nanoseconds
/// at most, which the watchdog's millisecond scale does not notice.
struct WorkerOwn {
    slow_log: SlowLog,
    /// The last run started, not yet measured.
    last_run: Option<LastRun>,
}

struct LastRun {
    /// When it started (`Clock::real_nanos`).
    started: u64,
    id: TimerId,
}

/// A worker's rate limit for the slow-callback log: at most one line per second, which says
/// how many it held back.
struct SlowLog {
    last: Option<Instant>,
    held_back: u64,
}

const SLOW_LOG_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct Executor {
    injectors: Box<[Injector<Run>]>,
    stealers: Box<[Stealer<Run>]>,
    workers: Box<[CachePadded<WorkerStats>]>,
    idle: Idle,
    /// `Config::slow_callback` in nanoseconds.
    slow_callback: u64,
}

impl Executor {
    /// The executor for `shards` tick threads and `threads` workers, and the workers' own deques
    /// (one for each worker thread to take).
    /// Callbacks running longer than `slow_callback` are counted and logged.
    pub(crate) fn new(
        shards: usize,
        threads: usize,
        slow_callback: Duration,
    ) -> (Executor, Vec<Worker<Run>>) {
        let locals: Vec<Worker<Run>> = (0..threads).map(|_| Worker::new_fifo()).collect();
        let executor = Executor {
            injectors: (0..shards).map(|_| Injector::new()).collect(),
            stealers: locals.iter().map(Worker::stealer).collect(),
            workers: (0..threads)
                .map(|_| {
                    CachePadded::new(WorkerStats {
                        fired: AtomicU64::new(0),
                        panicked: AtomicU64::new(0),
                        slow: AtomicU64::new(0),
                        done: AtomicU64::new(0),
                        samples: Mutex::new(Samples {
                            lateness: new_histogram(),
                            callback_time: new_histogram(),
                            queue_delay: new_histogram(),
                        }),
                    })
                })
                .collect(),
            idle: Idle::new(),
            slow_callback: u64::try_from(slow_callback.as_nanos()).unwrap_or(u64::MAX),
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

    /// A counter summed over every worker.
    fn sum(&self, counter: impl Fn(&WorkerStats) -> &AtomicU64) -> u64 {
        self.workers
            .iter()
            .map(|w| counter(w).load(Ordering::SeqCst))
            .sum()
    }

    pub(crate) fn fired(&self) -> u64 {
        self.sum(|w| &w.fired)
    }

    pub(crate) fn panicked(&self) -> u64 {
        self.sum(|w| &w.panicked)
    }

    /// Callback runs that took longer than `Config::slow_callback`.
    pub(crate) fn slow_callbacks(&self) -> u64 {
        self.sum(|w| &w.slow)
    }

    /// Runs finished or skipped, over all workers.
    pub(crate) fn done(&self) -> u64 {
        self.sum(|w| &w.done)
    }

    /// Every worker's samples, merged.
    pub(crate) fn distributions(&self) -> Distributions {
        let mut merged = Distributions {
            lateness: new_histogram(),
            callback_time: new_histogram(),
            queue_delay: new_histogram(),
        };
        for worker in self.workers.iter() {
            let samples = worker.samples.lock().unwrap_or_else(|e| e.into_inner());
            let add = |into: &mut Histogram<u64>, from: &Histogram<u64>| {
                into.add(from).expect("histograms share bounds");
            };
            add(&mut merged.lateness, &samples.lateness);
            add(&mut merged.callback_time, &samples.callback_time);
            add(&mut merged.queue_delay, &samples.queue_delay);
        }
        merged
    }

    /// The body of worker thread `index`: run tasks until stopped and drained.
    pub(crate) fn work(core: &Core, index: usize, local: Worker<Run>) {
        core.enter_thread();
        let executor = &core.executor;
        let mut own = WorkerOwn {
            slow_log: SlowLog {
                last: None,
                held_back: 0,
            },
            last_run: None,
        };
        let manual = core.clock.is_manual();
        loop {
            if let Some(run) = executor.find_task(index, &local) {
                executor.execute(core, index, run, &mut own);
                if manual {
                    executor.workers[index].done.fetch_add(1, Ordering::SeqCst);
                    core.settle.signal();
                }
                continue;
            }
            executor.end_last_run(core, index, &mut own);
            if executor.idle.stopped() && !executor.has_work() {
                return;
            }
            executor.sleep();
        }
    }

    /// Measures the worker's last run, ended by `now` (see [`WorkerOwn`]); `samples` is the
    /// worker's, locked. Returns the run to report as slow, if it was.
    fn measure_last_run(
        &self,
        own: &mut WorkerOwn,
        samples: &mut Samples,
        now: u64,
    ) -> Option<(TimerId, u64)> {
        let last = own.last_run.take()?;
        let took = now.saturating_sub(last.started);
        record(&mut samples.callback_time, took);
        (took > self.slow_callback).then_some((last.id, took))
    }

    /// Counts and logs a slow run that [`Executor::measure_last_run`] found.
    fn report_slow(&self, index: usize, own: &mut WorkerOwn, slow: Option<(TimerId, u64)>) {
        if let Some((id, took)) = slow {
            self.workers[index].slow.fetch_add(1, Ordering::Relaxed);
            own.slow_log.report(id, took);
        }
    }

    /// Measures the last run before the worker sleeps, so an idle worker's stats are complete.
    fn end_last_run(&self, core: &Core, index: usize, own: &mut WorkerOwn) {
        if own.last_run.is_none() {
            return;
        }
        let now = core.clock.real_nanos();
        let slow = {
            let mut samples = self.workers[index]
                .samples
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.measure_last_run(own, &mut samples, now)
        };
        self.report_slow(index, own, slow);
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

    fn execute(&self, core: &Core, index: usize, mut run: Run, own: &mut WorkerOwn) {
        let repeat = run.repeat();
        if let Some(repeat) = repeat {
            if !core.shards[repeat.shard].start_run(repeat) {
                // Cancelled while queued: `cancel` returned `true`, so the run is skipped.
                end_repeating(core, repeat, run.job);
                return;
            }
        }
        let stats = &self.workers[index];
        stats.fired.fetch_add(1, Ordering::Relaxed);
        let started = core.clock.real_nanos();
        let late = core.clock.lateness(run.deadline, started);
        let slow = {
            // Recorded before the run, so `stats()` counts a run as soon as it has started; the
            // last run's time goes in under the same lock.
            let mut samples = stats.samples.lock().unwrap_or_else(|e| e.into_inner());
            record(&mut samples.lateness, late);
            record(
                &mut samples.queue_delay,
                started.saturating_sub(run.handed_at),
            );
            self.measure_last_run(own, &mut samples, started)
        };
        self.report_slow(index, own, slow);
        own.last_run = Some(LastRun {
            started,
            id: run.id,
        });
        let ok = match catch_unwind(AssertUnwindSafe(|| run.job.run())) {
            Ok(()) => true,
            Err(payload) => {
                stats.panicked.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    panic = panic_message(payload.as_ref()),
                    timer = ?run.id,
                    repeating = run.repeating,
                    "timer callback panicked; the service goes on"
                );
                drop_payload(payload, &core.drop_panics);
                false
            }
        };
        match repeat {
            Some(repeat) => after_run(core, repeat, run.job, run.deadline, ok),
            // A one-shot's closure was consumed by its call, which dropped what it captured:
            // what is left holds no user code.
            None => drop(run.job),
        }
    }
}

impl SlowLog {
    /// Logs a slow run of timer `id` that took `nanos`, unless a line went out less than
    /// [`SLOW_LOG_EVERY`] ago (then it is held back and counted in the next line).
    fn report(&mut self, id: TimerId, nanos: u64) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < SLOW_LOG_EVERY)
        {
            self.held_back += 1;
            return;
        }
        tracing::warn!(
            timer = ?id,
            took = ?Duration::from_nanos(nanos),
            held_back = self.held_back,
            "slow timer callback (over Config::slow_callback); it delays the callbacks queued behind it on its worker"
        );
        self.last = Some(now);
        self.held_back = 0;
    }
}

/// A worker finished a run of a repeating timer: re-arm it for its next deadline, or end it
/// when it was cancelled during the run, panicked (which ends a repeating timer, as the JDK's
/// `ScheduledThreadPoolExecutor` does), or the service has shut down.
fn after_run(core: &Core, repeat: Repeat, job: BoxedJob, deadline: u64, ok: bool) {
    let shard = &core.shards[repeat.shard];
    if ok {
        let period = job.period().unwrap_or(1);
        let next = next_run(deadline, period, core.clock.now());
        let rearmed = shard
            .cell(repeat.slot)
            .is_some_and(|cell| cell.finish_run(repeat.gen, next));
        // Once shutdown has collected what it hands back, nobody reads the notices: a timer
        // whose run ends later (its callback called `shutdown`, say) ends here instead.
        if rearmed && !core.collected.load(Ordering::SeqCst) {
            let armed = Armed {
                slot: repeat.slot,
                gen: repeat.gen,
                job,
            };
            shard.notify(Notice::Rearm(armed), next);
            return;
        }
    }
    end_repeating(core, repeat, job);
}

/// Ends a repeating timer after its last run (or its skipped one): frees its slot and drops
/// its task, containing a panic in the task's `Drop`.
fn end_repeating(core: &Core, repeat: Repeat, job: BoxedJob) {
    if core.shards[repeat.shard].close_out(repeat.slot, repeat.gen) == Ended::Stray {
        core.report_stray(repeat.shard, repeat.slot, "ended after its run");
    }
    drop_contained(
        job,
        "a repeating task after its last run",
        &core.drop_panics,
    );
}

fn record(histogram: &mut Histogram<u64>, nanos: u64) {
    histogram.saturating_record(nanos.clamp(1, MAX_TRACKED_NANOS));
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
