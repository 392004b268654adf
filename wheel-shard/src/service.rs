//! [`TimerService`]: the public face of the service.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::core::Core;
use crate::error::{ConfigError, ScheduleError};
use crate::executor::Executor;
use crate::job::{Armed, BoxedJob, Every, NewTimer, Once};
use crate::shard::{Notice, Shard};
use crate::state::{Moved, TimerCell};
use crate::stats::{Lateness, Stats};
use crate::tick::{hand_back, TickLoop};
use crate::timer::{TimerId, Unfired};
use crate::Config;

/// A sharded hashed-timing-wheel timer service. Cheap to clone (all clones share one service)
/// and usable from any thread; dropping the last clone shuts it down (unfired timers are then
/// dropped unrun — call [`TimerService::shutdown`] to get them back).
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use wheel_shard::{Config, TimerService};
///
/// let timers = TimerService::new(Config { shards: 2, ..Config::default() }).unwrap();
/// let (tx, rx) = mpsc::channel();
/// timers.schedule(Duration::from_millis(5), move || tx.send("fired").unwrap()).unwrap();
/// let id = timers.schedule(Duration::from_secs(60), || unreachable!()).unwrap();
/// assert!(timers.cancel(id));
/// assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "fired");
/// assert!(timers.shutdown().is_empty());
/// ```
#[derive(Clone)]
pub struct TimerService {
    handle: Arc<Handle>,
}

/// Owns the threads; its drop (the last `TimerService` clone going away) shuts down.
struct Handle {
    core: Arc<Core>,
    threads: Mutex<Option<Threads>>,
}

struct Threads {
    ticks: Vec<JoinHandle<Vec<Unfired>>>,
    workers: Vec<JoinHandle<()>>,
}

impl TimerService {
    /// Validates `config` and starts `shards` tick threads (`wheel-tick-N`) and
    /// `executor_threads` workers (`wheel-exec-N`).
    ///
    /// With `pin_threads`, tick thread `i` is pinned to core `i mod cores`: with fewer cores
    /// than shards, tick threads share cores rather than go unpinned, and where the platform
    /// reports no cores pinning is skipped with a warning. Workers are never pinned, so the OS
    /// can move them around the tick threads.
    ///
    /// Everything the config sizes is allocated and written here, before any thread starts:
    /// a config whose [`Config::memory_estimate`] is over this machine's
    /// [`limits::memory_limit`](crate::limits::memory_limit) is refused with
    /// [`ConfigError::TooLarge`], and an allocation the allocator refuses with
    /// [`ConfigError::OutOfMemory`]; both name the field, and neither aborts the process.
    pub fn new(config: Config) -> Result<TimerService, ConfigError> {
        config.validate()?;
        crate::memory::check(&config)?;
        let (core, locals) = Core::new(config)?;
        let wheels = (0..core.shards.len())
            .map(|_| TickLoop::wheel(&core))
            .collect::<Result<Vec<_>, _>>()?;
        let core = Arc::new(core);
        let mut threads = Threads {
            ticks: Vec::new(),
            workers: Vec::new(),
        };
        let started = spawn_threads(&core, locals, wheels, &mut threads);
        let handle = Handle {
            core,
            threads: Mutex::new(Some(threads)),
        };
        started.map_err(|source| ConfigError::Spawn { source })?;
        Ok(TimerService {
            handle: Arc::new(handle),
        })
    }

    fn core(&self) -> &Core {
        &self.handle.core
    }

    /// The configuration the service runs with.
    pub fn config(&self) -> &Config {
        &self.core().config
    }

    /// Runs `task` once, `delay` from now, rounded up to the tick (never early).
    /// `Duration::MAX` is legal: such a timer only ends by `cancel` or `shutdown`.
    pub fn schedule(
        &self,
        delay: Duration,
        task: impl FnOnce() + Send + 'static,
    ) -> Result<TimerId, ScheduleError> {
        let deadline = self.core().clock.deadline_after(delay);
        let wait = self.core().config.saturation_timeout;
        self.submit(deadline, Box::new(Once(Some(task))), wait)
    }

    /// [`TimerService::schedule`] that never waits: when the shard's pending ring is full it
    /// returns [`ScheduleError::Saturated`] at once instead of waiting up to
    /// [`Config::saturation_timeout`]. For async code and other callers that must not block.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_shard::{Config, TimerService};
    ///
    /// let timers = TimerService::new(Config::default()).unwrap();
    /// let id = timers.try_schedule(Duration::from_secs(1), || {}).unwrap();
    /// assert!(timers.cancel(id));
    /// ```
    pub fn try_schedule(
        &self,
        delay: Duration,
        task: impl FnOnce() + Send + 'static,
    ) -> Result<TimerId, ScheduleError> {
        let deadline = self.core().clock.deadline_after(delay);
        self.submit(deadline, Box::new(Once(Some(task))), Duration::ZERO)
    }

    /// Runs `task` once at `deadline`, rounded up to the tick; a past instant fires at once.
    pub fn schedule_at(
        &self,
        deadline: Instant,
        task: impl FnOnce() + Send + 'static,
    ) -> Result<TimerId, ScheduleError> {
        let deadline = self.core().clock.deadline_at(deadline);
        let wait = self.core().config.saturation_timeout;
        self.submit(deadline, Box::new(Once(Some(task))), wait)
    }

    /// Runs `task` every `period` (rounded up to whole ticks), first `period` from now, at a
    /// fixed rate: run `n` is due at `start + n·period` however long the runs take. When a run
    /// ends after later deadlines have passed, those runs are skipped (no catch-up burst) and
    /// the next one keeps the phase. A run that panics ends the timer.
    pub fn schedule_repeating(
        &self,
        period: Duration,
        task: impl FnMut() + Send + 'static,
    ) -> Result<TimerId, ScheduleError> {
        let clock = &self.core().clock;
        let deadline = clock.deadline_after(period);
        let period = clock.period(period);
        let wait = self.core().config.saturation_timeout;
        self.submit(deadline, Box::new(Every { f: task, period }), wait)
    }

    /// Sends a new timer to a shard, waiting up to `wait` for room in its ring.
    fn submit(
        &self,
        deadline: u64,
        job: BoxedJob,
        wait: Duration,
    ) -> Result<TimerId, ScheduleError> {
        let result = self.try_submit(deadline, job, wait);
        if result.is_err() {
            self.core().rejected.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn try_submit(
        &self,
        deadline: u64,
        job: BoxedJob,
        wait: Duration,
    ) -> Result<TimerId, ScheduleError> {
        let core = self.core();
        if core.closed.load(Ordering::Acquire) {
            return Err(ScheduleError::Shutdown);
        }
        core.limit
            .acquire()
            .map_err(|limit| ScheduleError::TooManyPending { limit })?;
        let shard = core.pick_shard();
        let Ok((slot, gen)) = shard.table.claim() else {
            core.limit.release();
            return Err(ScheduleError::Saturated);
        };
        let timer = NewTimer {
            repeating: job.period().is_some(),
            armed: Armed { slot, gen, job },
            deadline,
        };
        match shard.push(timer, wait) {
            Ok(()) => {
                shard.nudge(deadline);
                Ok(TimerId::new(shard.index, slot, gen))
            }
            Err(error) => {
                // No id of this generation got out: the slot goes back as it came.
                shard.table.unclaim(slot, gen);
                core.limit.release();
                Err(error)
            }
        }
    }

    /// Stops a timer. `true` means its task will never run (again): a pending one-shot, or a
    /// repeating timer — also while a run is in progress, which then is its last. `false`
    /// means it already ran or is running, was cancelled, or the id is unknown.
    pub fn cancel(&self, id: TimerId) -> bool {
        let Some((shard, cell)) = self.locate(id) else {
            return false;
        };
        if !cell.cancel(id.gen()) {
            return false;
        }
        self.core().limit.release();
        shard.notify_cleanup(Notice::Touch {
            slot: id.slot(),
            gen: id.gen(),
        });
        true
    }

    /// Moves a pending timer's deadline to `delay` from now, earlier or later (for a repeating
    /// timer: its next run). `false` when it already fired, is running, was cancelled, or the
    /// id is unknown. Postponing costs no wake-up: the shard finds the new deadline when the
    /// old one comes.
    pub fn reschedule(&self, id: TimerId, delay: Duration) -> bool {
        let Some((shard, cell)) = self.locate(id) else {
            return false;
        };
        let deadline = self.core().clock.deadline_after(delay);
        match cell.reschedule(id.gen(), deadline) {
            None => false,
            Some(Moved::From(old)) => {
                if deadline < old {
                    let notice = Notice::Touch {
                        slot: id.slot(),
                        gen: id.gen(),
                    };
                    shard.notify(notice, deadline);
                }
                true
            }
            Some(Moved::BeforeArrival) => {
                // The tick thread takes the new deadline when the timer arrives; it only needs
                // waking if that is sooner than it planned.
                shard.nudge(deadline);
                true
            }
        }
    }

    /// The shard and the state cell an id names, if it names any.
    fn locate(&self, id: TimerId) -> Option<(&Shard, &TimerCell)> {
        let shard = self.core().shards.get(id.shard())?;
        Some((shard, shard.table.cell(id.slot())?))
    }

    /// Timers scheduled and not yet fired, cancelled or handed back. Counted by the tick
    /// threads, so a cancel shows up within about a tick.
    pub fn pending(&self) -> usize {
        self.core()
            .shards
            .iter()
            .map(|s| s.ring.len() + s.in_wheel.load(Ordering::Relaxed))
            .sum()
    }

    /// A snapshot of the counters and the lateness distribution.
    pub fn stats(&self) -> Stats {
        let core = self.core();
        let shards = core.shards.iter();
        Stats {
            scheduled: shards.clone().map(|s| s.ring.pushed()).sum(),
            fired: core.executor.fired(),
            cancelled: shards
                .clone()
                .map(|s| s.cancelled.load(Ordering::Relaxed))
                .sum(),
            rejected: core.rejected.load(Ordering::Relaxed),
            panicked: core.executor.panicked(),
            pending: self.pending(),
            wakeups: shards
                .clone()
                .map(|s| s.wakeups.load(Ordering::Relaxed))
                .sum(),
            ring_depths: shards.map(|s| s.ring.len()).collect(),
            executor_queue: core.executor.queued(),
            lateness: Lateness::from_histogram(core.executor.lateness()),
        }
    }

    /// Stops the service: no new timers (`schedule` → [`ScheduleError::Shutdown`]), tick threads
    /// stop, tasks already handed to the executor run to completion (including one running now),
    /// and every timer that had not fired comes back. Idempotent: later calls return nothing.
    pub fn shutdown(&self) -> Vec<Unfired> {
        self.handle.shutdown()
    }
}

impl Handle {
    fn shutdown(&self) -> Vec<Unfired> {
        let mut guard = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let Some(threads) = guard.take() else {
            return Vec::new();
        };
        let core = &self.core;
        core.closed.store(true, Ordering::SeqCst);
        for shard in core.shards.iter() {
            shard.ring.close();
            shard.stop.store(true, Ordering::SeqCst);
            shard.wake();
        }
        let mut unfired: Vec<Unfired> = threads
            .ticks
            .into_iter()
            .filter_map(join_unless_current)
            .flatten()
            .collect();
        core.executor.stop();
        for worker in threads.workers {
            join_unless_current(worker);
        }
        // Repeating timers whose run ended after their tick thread stopped come back here.
        for shard in core.shards.iter() {
            while let Some(notice) = shard.notices.steal().success() {
                if let Notice::Rearm(armed) = notice {
                    unfired.extend(hand_back(core, shard, armed));
                }
            }
        }
        unfired
    }
}

/// Joins `handle`, unless it is the calling thread (a callback that dropped the last handle or
/// called `shutdown` itself): that thread finishes on its own once the call returns.
fn join_unless_current<T>(handle: JoinHandle<T>) -> Option<T> {
    if handle.thread().id() == thread::current().id() {
        return None;
    }
    match handle.join() {
        Ok(value) => Some(value),
        Err(_) => {
            tracing::error!("a wheel thread panicked");
            None
        }
    }
}

fn spawn_threads(
    core: &Arc<Core>,
    locals: Vec<crossbeam_deque::Worker<crate::executor::Run>>,
    wheels: Vec<wheel_core::Wheel<Armed>>,
    threads: &mut Threads,
) -> std::io::Result<()> {
    let cores = if core.config.pin_threads {
        let ids = core_affinity::get_core_ids().unwrap_or_default();
        if ids.is_empty() {
            tracing::warn!("pin_threads: the platform reports no cores; tick threads run unpinned");
        }
        ids
    } else {
        Vec::new()
    };
    for (index, wheel) in wheels.into_iter().enumerate() {
        let pin = (!cores.is_empty()).then(|| cores[index % cores.len()]);
        let thread_core = Arc::clone(core);
        let handle = thread::Builder::new()
            .name(format!("wheel-tick-{index}"))
            .spawn(move || {
                if let Some(id) = pin {
                    if !core_affinity::set_for_current(id) {
                        tracing::warn!(
                            shard = index,
                            "could not pin tick thread; it runs unpinned"
                        );
                    }
                }
                TickLoop::new(&thread_core, index, wheel).run()
            })?;
        core.shards[index].set_thread(handle.thread().clone());
        threads.ticks.push(handle);
    }
    for (index, local) in locals.into_iter().enumerate() {
        let thread_core = Arc::clone(core);
        let handle = thread::Builder::new()
            .name(format!("wheel-exec-{index}"))
            .spawn(move || Executor::work(&thread_core, index, local))?;
        threads.workers.push(handle);
    }
    Ok(())
}

impl Drop for Handle {
    fn drop(&mut self) {
        let unfired = self.shutdown();
        if !unfired.is_empty() {
            tracing::debug!(
                count = unfired.len(),
                "timer service dropped; unfired timers dropped unrun"
            );
        }
    }
}

impl fmt::Debug for TimerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerService")
            .field("config", self.config())
            .field("pending", &self.pending())
            .finish()
    }
}
