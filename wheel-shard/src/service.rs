//! [`TimerService`]: the public face of the service.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::contain::drop_contained;
use crate::error::{ConfigError, ScheduleError};
use crate::runtime::core::{Core, ThreadGuard, ThreadKind};
use crate::runtime::hand_back::{hand_back_abandoned, hand_back_pending};
use crate::runtime::manual_clock::ManualClock;
use crate::runtime::pinning;
use crate::runtime::priority;
use crate::runtime::tick::ShardTick;
use crate::runtime::tick_thread::TickThread;
use crate::runtime::worker;
use crate::shard::{
    Cancelled, Claimed, Moved, Notice, Placement, PushRefused, Record, Shard, ShardWheel,
};
use crate::shutdown::{RunningCallback, ShutdownReport};
use crate::stats::{Lateness, Stats};
use crate::sync;
use crate::task::{NewTask, OnceFn, Task};
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

/// A handle that does not keep the service running: [`TimerService::downgrade`] makes one,
/// and [`WeakTimerService::upgrade`] gives the service back while a [`TimerService`] clone
/// still exists somewhere.
///
/// For callbacks that act on their own service. A callback that captures a `TimerService`
/// keeps the service alive as long as the callback exists: a one-shot's until it runs, a
/// repeating timer's until the timer ends, so a repeating timer holding its own service
/// never lets dropping the application's handles shut the service down. Capture a
/// `WeakTimerService` instead:
///
/// ```
/// use std::sync::{Arc, OnceLock};
/// use std::time::Duration;
/// use wheel_shard::{Config, TimerId, TimerService};
///
/// let timers = TimerService::new(Config { shards: 1, ..Config::default() }).unwrap();
/// let me: Arc<OnceLock<TimerId>> = Arc::default();
/// let id = timers
///     .schedule_repeating(Duration::from_millis(10), {
///         let (service, me) = (timers.downgrade(), me.clone());
///         move || {
///             // A back-off: the next run 50 ms from now, while the service is up.
///             if let (Some(timers), Some(&id)) = (service.upgrade(), me.get()) {
///                 timers.reschedule(id, Duration::from_millis(50));
///             }
///         }
///     })
///     .unwrap();
/// me.set(id).unwrap();
/// drop(timers); // the last strong handle: the service shuts down, its threads stop
/// ```
#[derive(Clone)]
pub struct WeakTimerService {
    handle: Weak<Handle>,
}

impl WeakTimerService {
    /// The service, unless every [`TimerService`] clone has been dropped (it has shut down, or
    /// is shutting down). The handle returned keeps it running while it lives: drop it
    /// before the callback returns.
    pub fn upgrade(&self) -> Option<TimerService> {
        self.handle.upgrade().map(|handle| TimerService { handle })
    }
}

impl fmt::Debug for WeakTimerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakTimerService")
            .field("alive", &(self.handle.strong_count() > 0))
            .finish()
    }
}

/// Owns the threads; its drop (the last `TimerService` clone going away) shuts down.
struct Handle {
    core: Arc<Core>,
    /// Taken by the first `shutdown`, which joins them without holding the lock, so a
    /// callback's `shutdown` never waits on a lock its own shutdown holds.
    threads: Mutex<Option<Threads>>,
    /// Set when the first `shutdown` has finished; later callers outside the service wait
    /// for it.
    stopped: Mutex<bool>,
    stopped_signal: Condvar,
    /// Threads a `shutdown_timeout` stopped waiting for (a callback still running), not yet
    /// joined. A later `shutdown` from outside the service waits for them and joins them, a
    /// later `shutdown_timeout` as long as its own timeout allows; the drop of the last handle
    /// joins those that have finished and detaches the rest, never waiting: each holds the
    /// core, which goes with the last of them once its callback returns.
    stragglers: Mutex<Vec<JoinHandle<()>>>,
}

struct Threads {
    ticks: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl TimerService {
    /// Validates `config` and starts [`Config::tick_thread_count`] tick threads
    /// (`wheel-tick-N`) and `executor_threads` workers (`wheel-exec-N`).
    ///
    /// With `pin_threads`, each tick thread is pinned to a core of its own while the process
    /// has cores enough, counting down from the last core and on across the services of the
    /// process (see [`Config::pin_threads`]); with fewer cores than tick threads they share
    /// cores rather than go unpinned, and where the platform reports no cores pinning is
    /// skipped with a warning. Workers are never pinned, so the OS can move them around the
    /// tick threads.
    ///
    /// Everything the config sizes is allocated here, before any thread starts (and the
    /// records and wheel places for [`Config::capacity`] written):
    /// a config whose [`Config::memory_estimate`] is over this machine's
    /// [`limits::memory_limit`](crate::limits::memory_limit) is refused with
    /// [`ConfigError::TooLarge`], and an allocation the allocator refuses with
    /// [`ConfigError::OutOfMemory`]; both name the field, and neither aborts the process.
    ///
    /// The first real-clock service of a process with a tick of 100 µs or more, on a machine
    /// whose kernel clock reads the time-stamp counter, measures that counter's rate for
    /// 2 ms before it returns (see [`TimerService::schedule`]); later services reuse it.
    pub fn new(config: Config) -> Result<TimerService, ConfigError> {
        let clock = Clock::new(config.tick);
        TimerService::start(config, clock)
    }

    /// A service whose time is virtual, for deterministic tests of code built on timeouts:
    /// it starts at the real now and moves only by the returned [`ManualClock`], so nothing
    /// fires while it stands still, however much real time passes. Everything else is as in
    /// production: the same tick threads and executor run the timers, and every call
    /// (`schedule`, `reschedule`, `cancel`, `stats`, the async adapter's futures …) reads the
    /// virtual time.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use wheel_shard::{Config, TimerService};
    ///
    /// let (timers, clock) = TimerService::with_manual_clock(Config::default()).unwrap();
    /// let runs = Arc::new(AtomicUsize::new(0));
    /// let counter = Arc::clone(&runs);
    /// timers.schedule_repeating(Duration::from_secs(10), move || {
    ///     counter.fetch_add(1, Ordering::SeqCst);
    /// }).unwrap();
    /// clock.advance(Duration::from_secs(9));
    /// assert_eq!(runs.load(Ordering::SeqCst), 0);
    /// clock.advance(Duration::from_secs(1)); // returns once the run has completed
    /// assert_eq!(runs.load(Ordering::SeqCst), 1);
    /// clock.advance(Duration::from_secs(100));
    /// assert_eq!(runs.load(Ordering::SeqCst), 11);
    /// ```
    pub fn with_manual_clock(config: Config) -> Result<(TimerService, ManualClock), ConfigError> {
        let clock = Clock::manual(config.tick);
        let service = TimerService::start(config, clock)?;
        let manual = ManualClock::new(Arc::clone(&service.handle.core));
        Ok((service, manual))
    }

    fn start(config: Config, clock: Clock) -> Result<TimerService, ConfigError> {
        config.validate()?;
        crate::memory::check(&config)?;
        let core = Core::new(config, clock)?;
        let wheels = (0..core.shards.len())
            .map(|_| ShardTick::wheel(&core))
            .collect::<Result<Vec<_>, _>>()?;
        let core = Arc::new(core);
        let mut threads = Threads {
            ticks: Vec::new(),
            workers: Vec::new(),
        };
        let started = spawn_threads(&core, wheels, &mut threads);
        let handle = Handle {
            core,
            threads: Mutex::new(Some(threads)),
            stopped: Mutex::new(false),
            stopped_signal: Condvar::new(),
            stragglers: Mutex::new(Vec::new()),
        };
        started.map_err(|source| ConfigError::Spawn { source })?;
        Ok(TimerService {
            handle: Arc::new(handle),
        })
    }

    /// A handle to this service that does not keep it running (see [`WeakTimerService`]):
    /// what a callback that acts on its own service should capture.
    pub fn downgrade(&self) -> WeakTimerService {
        WeakTimerService {
            handle: Arc::downgrade(&self.handle),
        }
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
    ///
    /// "Now" is a bound that is never behind the monotonic clock: on x86_64 Linux whose
    /// clock reads the time-stamp counter, one counter read at most about 2 µs ahead of the
    /// truth (a few ns instead of a clock call), so about one deadline in 500 lands a tick
    /// later than an exact read would put it (1 ms tick; ticks under 100 µs read the clock).
    #[inline(always)]
    pub fn schedule(
        &self,
        delay: Duration,
        task: impl FnOnce() + Send + 'static,
    ) -> Result<TimerId, ScheduleError> {
        let deadline = self.core().clock.deadline_after(delay);
        self.submit(deadline, OnceFn(task), self.saturation_wait())
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
        self.submit(deadline, OnceFn(task), Duration::ZERO)
    }

    /// [`TimerService::schedule_at`] that never waits: when the shard's pending ring is full it
    /// returns [`ScheduleError::Saturated`] at once instead of waiting up to
    /// [`Config::saturation_timeout`], as [`TimerService::try_schedule`] does for a delay.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use wheel_shard::{Config, TimerService};
    ///
    /// let timers = TimerService::new(Config::default()).unwrap();
    /// let at = Instant::now() + Duration::from_secs(1);
    /// let id = timers.try_schedule_at(at, || {}).unwrap();
    /// assert!(timers.cancel(id));
    /// ```
    pub fn try_schedule_at(
        &self,
        deadline: Instant,
        task: impl FnOnce() + Send + 'static,
    ) -> Result<TimerId, ScheduleError> {
        self.submit_at(deadline, task, Duration::ZERO)
    }

    /// Runs `task` once at `deadline`, rounded up to the tick; a past instant fires at once.
    #[inline(always)]
    pub fn schedule_at(
        &self,
        deadline: Instant,
        task: impl FnOnce() + Send + 'static,
    ) -> Result<TimerId, ScheduleError> {
        self.submit_at(deadline, task, self.saturation_wait())
    }

    /// A one-shot at an instant, waiting up to `wait` for ring room: `schedule_at` and
    /// `try_schedule_at`, which differ only in that wait. Inlined for the reason `submit` is.
    #[inline(always)]
    fn submit_at(
        &self,
        deadline: Instant,
        task: impl FnOnce() + Send + 'static,
        wait: Duration,
    ) -> Result<TimerId, ScheduleError> {
        let deadline = self.core().clock.deadline_at(deadline);
        self.submit(deadline, OnceFn(task), wait)
    }

    /// Runs `task` every `period` (rounded up to whole ticks), first `period` from now, at a
    /// fixed rate: run `n` is due at `start + n·period` however long the runs take. When a run
    /// ends after later deadlines have passed, those runs are skipped (no catch-up burst) and
    /// the next one keeps the phase. A run that panics ends the timer. A run may move its own
    /// next run with [`TimerService::reschedule`] (a back-off, jitter), which sets a new phase;
    /// so does a reschedule right after this call, for a first run at another delay than the
    /// period. A callback that uses its own service should capture a [`WeakTimerService`]: a
    /// strong handle in a repeating callback keeps the service running until the timer ends.
    pub fn schedule_repeating(
        &self,
        period: Duration,
        task: impl FnMut() + Send + 'static,
    ) -> Result<TimerId, ScheduleError> {
        self.submit_every(period, task, self.saturation_wait())
    }

    /// [`TimerService::schedule_repeating`] that never waits: when the shard's pending ring is
    /// full it returns [`ScheduleError::Saturated`] at once instead of waiting up to
    /// [`Config::saturation_timeout`], as [`TimerService::try_schedule`] does for a one-shot.
    /// For async code (the async adapter's `Interval` uses it) and other callers that must not
    /// block.
    ///
    /// ```
    /// use std::time::Duration;
    /// use wheel_shard::{Config, TimerService};
    ///
    /// let timers = TimerService::new(Config::default()).unwrap();
    /// let id = timers.try_schedule_repeating(Duration::from_secs(1), || {}).unwrap();
    /// assert!(timers.cancel(id));
    /// ```
    pub fn try_schedule_repeating(
        &self,
        period: Duration,
        task: impl FnMut() + Send + 'static,
    ) -> Result<TimerId, ScheduleError> {
        self.submit_every(period, task, Duration::ZERO)
    }

    /// A repeating timer, waiting up to `wait` for ring room.
    fn submit_every(
        &self,
        period: Duration,
        task: impl FnMut() + Send + 'static,
        wait: Duration,
    ) -> Result<TimerId, ScheduleError> {
        let clock = &self.core().clock;
        let deadline = clock.deadline_after(period);
        let period = clock.period(period);
        self.submit(deadline, Task::every(task, period), wait)
    }

    /// How long `schedule` waits for room in a full ring.
    fn saturation_wait(&self) -> Duration {
        self.core().config.saturation_timeout
    }

    /// Sends a new timer to a shard, waiting up to `wait` for room in its ring.
    ///
    /// Inlined, with `try_submit`, into every `schedule*` call site, as `schedule` and
    /// `schedule_at` are into their callers, so that the task and the id do not cross a call
    /// as copies in memory: such a copy's wide load waits for every earlier store of the
    /// producer to reach the cache (the record's, the ring cell's) before it completes
    /// (docs/performance.md, sixteenth session). The price is about 3 KiB of code a call site;
    /// the unusual paths (a full ring, a refill of free slots) stay out of line.
    #[inline(always)]
    fn submit(
        &self,
        deadline: u64,
        task: impl NewTask,
        wait: Duration,
    ) -> Result<TimerId, ScheduleError> {
        let result = self.try_submit(deadline, task, wait);
        if result.is_err() {
            self.core().rejected.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Claims a free record of a shard, arms it with the task, and sends its first reference
    /// through the shard's ring. The record is written whole by this thread; the tick thread
    /// gets only the reference.
    #[inline(always)]
    fn try_submit(
        &self,
        deadline: u64,
        task: impl NewTask,
        wait: Duration,
    ) -> Result<TimerId, ScheduleError> {
        let core = self.core();
        if core.closed.load(Ordering::Acquire) {
            return Err(refuse(core, task.build(), ScheduleError::Shutdown));
        }
        if let Err(limit) = core.limit.acquire() {
            return Err(refuse(
                core,
                task.build(),
                ScheduleError::TooManyPending { limit },
            ));
        }
        let shard = core.pick_shard();
        let Ok(Claimed {
            slot,
            record,
            holds_lane,
        }) = shard.table.claim_for_schedule(deadline)
        else {
            // Every record of the shard's table holds a live timer.
            core.limit.release();
            return Err(refuse(core, task.build(), ScheduleError::Saturated));
        };
        let (gen, _) = record.arm(deadline, task);
        let placement = Placement { deadline, slot };
        match shard.push_from(placement, wait, holds_lane) {
            Ok(()) => {
                shard.nudge(deadline);
                Ok(TimerId::new(core.tag, shard.index, slot, gen))
            }
            Err(PushRefused { error, counted }) => {
                // No id of this generation got out: the record goes back as it came.
                if let Some(task) = record.withdraw(gen, deadline) {
                    shard.table.release(slot);
                    if counted {
                        shard.withdrawn.fetch_add(1, Ordering::Relaxed);
                    }
                    core.limit.release();
                    return Err(refuse(core, task, error));
                }
                // A stale twin fired it meanwhile (see `Record::withdraw`): it counts as
                // scheduled.
                if !counted {
                    shard.taken_by_twins.fetch_add(1, Ordering::Relaxed);
                }
                Ok(TimerId::new(core.tag, shard.index, slot, gen))
            }
        }
    }

    /// Stops a timer. `true` means its task will never run (again): a pending one-shot, or a
    /// repeating timer — also with a run in progress (that run is its last). `false` means it
    /// already ran or is running, was cancelled, or the id is unknown: handed out by another
    /// service, or its timer ended. An unknown id changes nothing.
    ///
    /// A pending timer ends right here: its task is dropped on the calling thread (a panic in
    /// its `Drop` is contained and counted in [`Stats::drop_panics`]) and its record is free
    /// for the next timer at once.
    pub fn cancel(&self, id: TimerId) -> bool {
        let Some((shard, record)) = self.locate(id) else {
            return false;
        };
        let core = self.core();
        match record.cancel(id.gen()) {
            Cancelled::No => return false,
            Cancelled::Now(task) => {
                shard.table.release(id.slot());
                drop_contained(task, "a cancelled task", &core.drop_panics);
            }
            Cancelled::DuringRun => {}
        }
        // Counted before its place is given back: a timer that takes the place is then never
        // seen by `pending()` beside this one still counted as pending (over `max_pending`).
        shard.cancelled.fetch_add(1, Ordering::Relaxed);
        core.limit.release();
        shard.notify_cleanup();
        true
    }

    /// Moves a pending timer's deadline to `delay` from now, earlier or later. For a repeating
    /// timer it moves the next run, also while a run is in progress (from its own callback,
    /// say, to back off or to add jitter): that run's next is due `delay` from now, and the runs
    /// after it keep the period from there. `false` when a one-shot already fired or is
    /// running, the timer was cancelled, the id is unknown (another service's, or its timer
    /// ended), or the service is shutting down (its timers are on their way back); then
    /// nothing changes. Postponing costs no wake-up and no message: the timer's reference finds
    /// the new deadline when the old one comes.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::{Arc, OnceLock};
    /// use std::time::Duration;
    /// use wheel_shard::{Config, TimerService, TimerId};
    ///
    /// let timers = TimerService::new(Config { shards: 1, ..Config::default() }).unwrap();
    /// // A probe that backs off: each run doubles the wait before the next. It holds a weak
    /// // handle, so that it does not keep the service running (see `WeakTimerService`).
    /// let me: Arc<OnceLock<TimerId>> = Arc::default();
    /// let runs = Arc::new(AtomicU32::new(0));
    /// let id = timers
    ///     .schedule_repeating(Duration::from_millis(2), {
    ///         let (service, me, runs) = (timers.downgrade(), me.clone(), runs.clone());
    ///         move || {
    ///             let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
    ///             if let (Some(timers), Some(&id)) = (service.upgrade(), me.get()) {
    ///                 assert!(timers.reschedule(id, Duration::from_millis(2 << n)));
    ///             }
    ///         }
    ///     })
    ///     .unwrap();
    /// me.set(id).unwrap();
    /// while runs.load(Ordering::SeqCst) < 3 {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert!(timers.cancel(id));
    /// # drop(timers.shutdown());
    /// ```
    pub fn reschedule(&self, id: TimerId, delay: Duration) -> bool {
        self.move_to(id, |clock| clock.deadline_after(delay))
    }

    /// [`TimerService::reschedule`] to an instant instead of a delay: the first tick at or
    /// after `deadline` (an instant already past is due now), as [`TimerService::schedule_at`]
    /// takes it. Everything else is as `reschedule` says.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use wheel_shard::{Config, TimerService};
    ///
    /// let (timers, clock) = TimerService::with_manual_clock(Config::default()).unwrap();
    /// let expiry = timers.schedule_at(clock.now() + Duration::from_secs(60), || {}).unwrap();
    /// assert!(timers.reschedule_at(expiry, clock.now() + Duration::from_secs(90)));
    /// clock.advance(Duration::from_secs(60));
    /// assert_eq!(timers.pending(), 1, "moved to 90 s");
    /// clock.advance(Duration::from_secs(30));
    /// assert_eq!(timers.pending(), 0);
    /// ```
    pub fn reschedule_at(&self, id: TimerId, deadline: Instant) -> bool {
        self.move_to(id, |clock| clock.deadline_at(deadline))
    }

    /// Moves the timer `id` names to the tick `deadline` computes, once it is known to name
    /// one (see [`TimerService::reschedule`]).
    fn move_to(&self, id: TimerId, deadline: impl FnOnce(&Clock) -> u64) -> bool {
        // Once a shutdown has begun, its timers are on their way back by their records: a move
        // now could only send a notice no thread reads any more.
        if self.core().closed.load(Ordering::Acquire) {
            return false;
        }
        let Some((shard, record)) = self.locate(id) else {
            return false;
        };
        let deadline = deadline(&self.core().clock);
        match record.reschedule(id.gen(), deadline) {
            None => false,
            // Later, or a repeating timer's next run that its worker arms when the run ends.
            Some(Moved::Later | Moved::NextRun) => true,
            Some(Moved::Earlier) => {
                let slot = id.slot();
                shard.notify(Notice::Earlier(Placement { deadline, slot }));
                true
            }
        }
    }

    /// The shard and the record an id names, if this service handed it out.
    fn locate(&self, id: TimerId) -> Option<(&Shard, &Record)> {
        if id.service() != self.core().tag {
            return None;
        }
        let shard = self.core().shards.get(id.shard())?;
        Some((shard, shard.table.record(id.slot())?))
    }

    /// Timers scheduled and not yet fired (a repeating one: not yet ended), cancelled or
    /// handed back.
    pub fn pending(&self) -> usize {
        self.core().pending()
    }

    /// A snapshot of the counters and the lateness distribution.
    pub fn stats(&self) -> Stats {
        let core = self.core();
        let shards = core.shards.iter();
        let distributions = core.executor.distributions();
        Stats {
            scheduled: shards.clone().map(Shard::scheduled).sum(),
            fired: core.executor.fired(),
            cancelled: shards
                .clone()
                .map(|s| s.cancelled.load(Ordering::Relaxed))
                .sum(),
            rejected: core.rejected.load(Ordering::Relaxed),
            panicked: core.executor.panicked(),
            drop_panics: core.drop_panics.load(Ordering::Relaxed),
            strays: core.strays.load(Ordering::Relaxed),
            pending: self.pending(),
            wakeups: shards
                .clone()
                .map(|s| s.wakeups.load(Ordering::Relaxed))
                .sum(),
            ring_full: shards
                .clone()
                .map(|s| s.ring_full.load(Ordering::Relaxed))
                .sum(),
            ring_depths: shards.map(|s| s.queued()).collect(),
            executor_queue: core.executor.queued(),
            lateness: Lateness::from_histogram(distributions.lateness),
            callback_time: Lateness::from_histogram(distributions.callback_time),
            queue_delay: Lateness::from_histogram(distributions.queue_delay),
            slow_callbacks: core.executor.slow_callbacks(),
            realtime_ticks: core.realtime_ticks.load(Ordering::Relaxed),
        }
    }

    /// Stops the service: no new timers (`schedule` → [`ScheduleError::Shutdown`]) and no more
    /// moves (`reschedule` → `false`), tick threads stop, tasks already handed to the executor
    /// run to completion (including one running now), and every timer that had not fired comes
    /// back. Its last step reads every record the service ever used, so it takes a moment
    /// proportional to the most timers ever pending at once. Idempotent: later calls return
    /// nothing.
    ///
    /// Safe from any thread, concurrently with other calls, and from inside a callback:
    /// - The first call does the work and returns what had not fired. A later or concurrent
    ///   call returns an empty list; from a thread outside the service it first waits until
    ///   the first call is done, so every service thread has stopped when it returns.
    /// - Called from a callback (or a task's `Drop` on a service thread), it cannot wait for
    ///   its own thread: it waits for every other thread of the service, hands back every
    ///   unfired timer but the one whose callback is running (those handed to its worker and
    ///   not started too), and returns while that callback still runs. A repeating timer whose
    ///   callback called it is not re-armed: its task is dropped when the run returns (so a
    ///   service handle it holds is released). A concurrent call from a callback, while another
    ///   shutdown is under way, returns at once.
    ///
    /// After a [`TimerService::shutdown_timeout`] that left callbacks running, a call from
    /// outside the service waits for them too.
    pub fn shutdown(&self) -> Vec<Unfired> {
        self.handle.shutdown(true)
    }

    /// [`TimerService::shutdown`] that waits at most `timeout` for the callbacks still running
    /// (plus the moment the pass over the records takes, see `shutdown`), for a service that
    /// must stop in bounded time: behind a proxy, under an orchestrator's grace period.
    ///
    /// It stops the service exactly as `shutdown` does: no new timers, no more moves, tick
    /// threads stop, the executor runs what was handed to it, and every timer that had not
    /// fired comes back in [`ShutdownReport::unfired`]. Once `timeout` has passed with
    /// callbacks still running, it stops waiting:
    /// - no further callback starts: the workers drop what they have queued or in hand without
    ///   running it, and those timers are handed back with the rest, each exactly once (a
    ///   worker's claim racing the hand-back is decided on the timer's record, so a timer is
    ///   either handed back or fired, never both nor neither);
    /// - the callbacks still running are named in [`ShutdownReport::still_running`]; their
    ///   threads are left to finish them and exit (a repeating timer among them ends with that
    ///   run, not re-armed); they are joined by a later `shutdown` from outside the service,
    ///   which waits for them, or detached when the last handle is dropped, which never waits
    ///   for them (see [`TimerService`]'s drop).
    ///
    /// With no callback running past `timeout` it is `shutdown`, with `still_running` empty.
    /// `Duration::MAX` (any timeout too long to have a deadline) waits as `shutdown` does.
    ///
    /// Idempotent and safe from any thread, concurrently with other calls and from inside a
    /// callback, as `shutdown` is: a later or concurrent call hands back nothing, waits for
    /// the first call and the threads it left running at most `timeout`, and names the
    /// callbacks running when it returns; called from a callback, it does not wait for its own
    /// worker (and does not list its own run).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use wheel_shard::{Config, TimerService};
    ///
    /// let timers = TimerService::new(Config { executor_threads: 1, ..Config::default() }).unwrap();
    /// let (started, wait) = std::sync::mpsc::channel();
    /// let stuck = timers
    ///     .schedule(Duration::ZERO, move || {
    ///         started.send(()).unwrap();
    ///         std::thread::sleep(Duration::from_secs(2)); // a callback that blocks
    ///     })
    ///     .unwrap();
    /// let late = timers.schedule(Duration::from_secs(60), || {}).unwrap();
    /// wait.recv().unwrap();
    ///
    /// let begun = Instant::now();
    /// let report = timers.shutdown_timeout(Duration::from_millis(100));
    /// assert!(begun.elapsed() < Duration::from_secs(1));
    /// assert_eq!(report.unfired.len(), 1);
    /// assert_eq!(report.unfired[0].id, late);
    /// assert_eq!(report.still_running.len(), 1);
    /// assert_eq!(report.still_running[0].id, stuck);
    /// assert!(report.still_running[0].running_for >= Duration::from_millis(100));
    /// ```
    pub fn shutdown_timeout(&self, timeout: Duration) -> ShutdownReport {
        self.handle.shutdown_timeout(timeout)
    }
}

impl Handle {
    /// `TimerService::shutdown`; with `wait_for_stragglers`, a later call from outside the
    /// service also waits for the threads a `shutdown_timeout` left running (the drop of the
    /// last handle does not).
    fn shutdown(&self, wait_for_stragglers: bool) -> Vec<Unfired> {
        let Some(threads) = self.take_threads() else {
            // Another call is shutting down or has. A service thread must not wait for it: that
            // call may be joining this very thread.
            if !self.core.is_own_thread() {
                self.wait_until_stopped(None);
                if wait_for_stragglers {
                    self.wait_for_stragglers(None);
                }
            }
            return Vec::new();
        };
        let unfired = self.stop(threads);
        self.mark_stopped();
        unfired
    }

    /// `TimerService::shutdown_timeout`.
    fn shutdown_timeout(&self, timeout: Duration) -> ShutdownReport {
        let deadline = Instant::now().checked_add(timeout);
        let Some(threads) = self.take_threads() else {
            // As in `shutdown`, but waiting at most until the deadline.
            if !self.core.is_own_thread() && self.wait_until_stopped(deadline) {
                self.wait_for_stragglers(deadline);
            }
            return ShutdownReport {
                unfired: Vec::new(),
                still_running: self.running_callbacks(),
            };
        };
        let report = match deadline {
            Some(deadline) => self.stop_by(threads, deadline),
            None => ShutdownReport {
                unfired: self.stop(threads),
                still_running: Vec::new(),
            },
        };
        self.mark_stopped();
        report
    }

    /// The threads, for the first shutdown call; `None` for any later one.
    fn take_threads(&self) -> Option<Threads> {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Tells later shutdown calls that the first one is done.
    fn mark_stopped(&self) {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.stopped_signal.notify_all();
    }

    /// Waits until the first shutdown call is done, or until `deadline` (`None`: none);
    /// whether it is done.
    fn wait_until_stopped(&self, deadline: Option<Instant>) -> bool {
        let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        while !*stopped {
            let Some(deadline) = deadline else {
                stopped = self
                    .stopped_signal
                    .wait(stopped)
                    .unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                return false;
            }
            stopped = self
                .stopped_signal
                .wait_timeout(stopped, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Closes the service to new timers and moves and tells the tick threads to stop.
    fn close(&self) {
        let core = &self.core;
        core.closed.store(true, Ordering::SeqCst);
        for shard in core.shards.iter() {
            shard.close_rings();
            shard.stop.store(true, Ordering::SeqCst);
            shard.wake();
        }
        if core.shards.iter().any(Shard::has_lane) {
            // Every lane push is now visible, or its holder sees the lane closed and takes its
            // timer back (`shard/lane.rs`), before the records are read below.
            sync::heavy_barrier();
        }
    }

    /// Stops and joins every thread but the calling one, and collects the unfired timers.
    fn stop(&self, threads: Threads) -> Vec<Unfired> {
        let core = &self.core;
        self.close();
        for tick in threads.ticks {
            join_unless_current(tick);
        }
        core.executor.stop();
        for worker in threads.workers {
            join_unless_current(worker);
        }
        // Last, by the records: every timer still pending, wherever its references are (see
        // `runtime/hand_back.rs`).
        let mut unfired = Vec::new();
        // One allocation for the whole list; where the allocator refuses it, the list grows.
        let _ = unfired.try_reserve_exact(core.pending());
        for shard in core.shards.iter() {
            hand_back_pending(core, shard, &mut unfired);
        }
        core.collected.store(true, Ordering::SeqCst);
        unfired
    }

    /// [`Handle::stop`] that waits for the threads only until `deadline`: then the executor is
    /// abandoned (no worker starts another callback), the pass over the records takes back
    /// every timer still pending and makes every repeating run in progress its timer's last
    /// (`runtime/hand_back.rs`), the callbacks still running are read off their workers, and
    /// the threads that have not finished are kept as stragglers.
    fn stop_by(&self, threads: Threads, deadline: Instant) -> ShutdownReport {
        let core = &self.core;
        self.close();
        // Called from a callback, the calling worker is not waited for (it cannot finish).
        let own = core.own_worker();
        // The tick threads first, as in `stop`: what they hand out on their way is the
        // executor's to run.
        core.exits
            .wait_until(Some(deadline), |live| live.ticks == 0);
        core.executor.stop();
        let others = usize::from(own.is_some());
        core.exits
            .wait_until(Some(deadline), |live| live.workers <= others);
        // Whoever is still running, no callback starts from here on; what they queued or hold
        // is pending in its record, and the pass takes it.
        core.executor.abandon();
        let mut unfired = Vec::new();
        let _ = unfired.try_reserve_exact(core.pending());
        for shard in core.shards.iter() {
            hand_back_abandoned(core, shard, &mut unfired);
        }
        core.collected.store(true, Ordering::SeqCst);
        let still_running = self.running_callbacks();
        let stragglers = self.join_finished(threads.ticks.into_iter().chain(threads.workers));
        self.stragglers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(stragglers);
        ShutdownReport {
            unfired,
            still_running,
        }
    }

    /// The callbacks the workers run now, longest-running first, but the calling callback's.
    fn running_callbacks(&self) -> Vec<RunningCallback> {
        let core = &self.core;
        let own = core.own_worker();
        let now = core.clock.real_nanos();
        let mut running: Vec<RunningCallback> = core
            .executor
            .workers
            .iter()
            .enumerate()
            .filter(|&(index, _)| Some(index) != own)
            .filter_map(|(_, worker)| worker.current_run())
            .map(|(slot, shard_gen, since)| RunningCallback {
                id: TimerId::from_parts(core.tag, slot, shard_gen),
                running_for: Duration::from_nanos(now.saturating_sub(since)),
            })
            .collect();
        running.sort_by_key(|run| std::cmp::Reverse(run.running_for));
        running
    }

    /// Joins the threads of `handles` that have finished, or have left their bodies and
    /// finish within [`TEARDOWN`] (together), and returns the others. The calling thread's
    /// own handle is dropped: it finishes on its own once the call returns.
    fn join_finished(&self, handles: impl Iterator<Item = JoinHandle<()>>) -> Vec<JoinHandle<()>> {
        let me = thread::current().id();
        let teardown_until = Instant::now() + TEARDOWN;
        let mut running = Vec::new();
        for handle in handles {
            if handle.thread().id() == me {
                continue;
            }
            if self.finishes_by(&handle, teardown_until) {
                join_unless_current(handle);
            } else {
                running.push(handle);
            }
        }
        running
    }

    /// Whether `handle`'s thread has finished, or has left its body (only its teardown is
    /// left: its thread-locals' destructors) and finishes by `until`.
    fn finishes_by(&self, handle: &JoinHandle<()>, until: Instant) -> bool {
        if handle.is_finished() {
            return true;
        }
        if !self.core.exits.has_left(handle.thread().id()) {
            return false;
        }
        while !handle.is_finished() {
            if Instant::now() >= until {
                return false;
            }
            thread::yield_now();
        }
        true
    }

    /// Joins the stragglers a `shutdown_timeout` left (see [`Handle::stragglers`]) as they
    /// finish, until none is left (`true`) or `deadline` passes (`None`: no deadline).
    fn wait_for_stragglers(&self, deadline: Option<Instant>) -> bool {
        loop {
            let waiting: Vec<thread::ThreadId> = {
                let mut stragglers = self.stragglers.lock().unwrap_or_else(|e| e.into_inner());
                let (finished, waiting): (Vec<_>, Vec<_>) =
                    stragglers.drain(..).partition(JoinHandle::is_finished);
                *stragglers = waiting;
                finished.into_iter().for_each(|handle| {
                    join_unless_current(handle);
                });
                stragglers.iter().map(|h| h.thread().id()).collect()
            };
            if waiting.is_empty() {
                return true;
            }
            let exits = &self.core.exits;
            let left = exits.wait_until(deadline, |live| {
                waiting.iter().all(|id| live.left.contains(id))
            });
            if !left || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return false;
            }
            // They have left their bodies: only their teardown is left.
            thread::yield_now();
        }
    }

    /// At the drop of the last handle: joins the stragglers that have finished and detaches
    /// the others, without waiting for any.
    fn release_stragglers(&self) {
        let stragglers =
            std::mem::take(&mut *self.stragglers.lock().unwrap_or_else(|e| e.into_inner()));
        for handle in stragglers {
            if handle.is_finished() {
                join_unless_current(handle);
            }
        }
    }
}

/// How long a bounded shutdown gives the threads that have left their bodies to finish
/// (their thread-locals' destructors), all together, before it leaves them to a later join.
const TEARDOWN: Duration = Duration::from_millis(20);

/// A schedule refused with `error`: its task is dropped here, a panic in the task's `Drop`
/// contained and counted, so the caller gets the error and never an unwinding panic.
#[cold]
fn refuse(core: &Core, task: Task, error: ScheduleError) -> ScheduleError {
    drop_contained(task, "a task that was not scheduled", &core.drop_panics);
    error
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

/// Moves tick thread `index` to real-time priority (`Config::realtime_ticks`), or warns that
/// it stays at normal priority.
fn make_tick_thread_realtime<T>(core: &Core, index: usize, handle: &JoinHandle<T>) {
    match priority::make_realtime(handle) {
        Ok(()) => {
            core.realtime_ticks.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => tracing::warn!(
            tick_thread = index,
            %error,
            "realtime_ticks: the OS refused real-time priority; the tick thread runs at normal priority"
        ),
    }
}

/// The shards (index and wheel) each tick thread drives: thread `i` every
/// `Config::tick_thread_count`-th shard from shard `i`.
fn shards_of_tick_threads(core: &Core, wheels: Vec<ShardWheel>) -> Vec<Vec<(usize, ShardWheel)>> {
    let threads = core.config.tick_thread_count();
    let mut groups: Vec<Vec<(usize, ShardWheel)>> = (0..threads).map(|_| Vec::new()).collect();
    for (index, wheel) in wheels.into_iter().enumerate() {
        groups[index % threads].push((index, wheel));
    }
    groups
}

fn spawn_threads(
    core: &Arc<Core>,
    wheels: Vec<ShardWheel>,
    threads: &mut Threads,
) -> std::io::Result<()> {
    let groups = shards_of_tick_threads(core, wheels);
    let cores = if core.config.pin_threads {
        pinning::tick_thread_cores(groups.len())
    } else {
        Vec::new()
    };
    // The field that sets how many tick threads there are, for a refusal's message.
    let field = match core.config.tick_threads {
        Some(_) => "tick_threads",
        None => "shards",
    };
    let count = core.config.tick_thread_count();
    for (index, shards) in groups.into_iter().enumerate() {
        let pin = cores.get(index).copied();
        let driven: Vec<usize> = shards.iter().map(|&(shard, _)| shard).collect();
        let thread_core = ThreadGuard::new(Arc::clone(core), ThreadKind::Tick);
        let realtime = core.config.realtime_ticks;
        let short_slice = core.config.short_tick_slice;
        let handle = spawn_named(format!("wheel-tick-{index}"), field, count, move || {
            // Under `realtime_ticks` the spawning thread sets the policy instead.
            if !realtime && short_slice {
                if let Err(error) = priority::ask_short_slice() {
                    tracing::debug!(tick_thread = index, %error, "no short slice");
                }
            }
            if let Some(id) = pin {
                if !core_affinity::set_for_current(id) {
                    tracing::warn!(
                        tick_thread = index,
                        "could not pin tick thread; it runs unpinned"
                    );
                }
            }
            thread_core.enter_thread();
            // No user code runs on a tick thread, so no shutdown runs here: the shutdown
            // that stopped this loop joins it and takes what it hands back.
            TickThread::new(&thread_core, shards).run()
        })?;
        for shard in driven {
            core.shards[shard].set_thread(handle.thread().clone());
        }
        if core.config.realtime_ticks {
            make_tick_thread_realtime(core, index, &handle);
        }
        threads.ticks.push(handle);
    }
    for index in 0..core.config.executor_threads {
        let thread_core = ThreadGuard::new(Arc::clone(core), ThreadKind::Worker);
        let handle = spawn_named(
            format!("wheel-exec-{index}"),
            "executor_threads",
            core.config.executor_threads,
            move || {
                thread_core.enter_worker(index);
                worker::work(&thread_core, index);
            },
        )?;
        threads.workers.push(handle);
    }
    Ok(())
}

/// Starts thread `name` running `body`, one of the `count` that config field `field` asks
/// for. The OS's refusal comes back as an `io::Error` of the same kind whose message names the
/// thread and the field (what `ConfigError::Spawn` shows), and whose source is the OS's error.
fn spawn_named<T: Send + 'static>(
    name: String,
    field: &'static str,
    count: usize,
    body: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    thread::Builder::new()
        .name(name.clone())
        .spawn(body)
        .map_err(|source| {
            let kind = source.kind();
            let refused = SpawnRefused {
                thread: name,
                field,
                count,
                source,
            };
            std::io::Error::new(kind, refused)
        })
}

/// See [`spawn_named`].
#[derive(Debug)]
struct SpawnRefused {
    thread: String,
    field: &'static str,
    count: usize,
    source: std::io::Error,
}

impl fmt::Display for SpawnRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, one of the {} threads config field `{}` asks for: {}",
            self.thread, self.count, self.field, self.source
        )
    }
}

impl std::error::Error for SpawnRefused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl Drop for Handle {
    /// Shuts the service down as `shutdown` does, then joins the threads a `shutdown_timeout`
    /// left running that have finished since, and detaches the others without waiting for
    /// them.
    fn drop(&mut self) {
        let unfired = self.shutdown(false);
        self.release_stragglers();
        if !unfired.is_empty() {
            tracing::debug!(
                count = unfired.len(),
                "timer service dropped; unfired timers dropped unrun"
            );
        }
        for timer in unfired {
            drop_contained(timer, "an unfired task", &self.core.drop_panics);
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Tick thread `t` drives every `tick_thread_count`-th shard from shard `t`.
    #[test]
    fn tick_threads_take_every_nth_shard() {
        for (tick_threads, expected) in [
            (None, vec![vec![0, 2, 4], vec![1, 3]]),
            (Some(1), vec![vec![0, 1, 2, 3, 4]]),
            (Some(3), vec![vec![0, 3], vec![1, 4], vec![2]]),
            (Some(9), vec![vec![0], vec![1], vec![2], vec![3], vec![4]]),
        ] {
            let config = Config {
                shards: 5,
                tick_threads,
                executor_threads: 1,
                ..Config::default()
            };
            let clock = Clock::new(config.tick);
            let core = Core::new(config, clock).unwrap();
            let wheels = (0..5).map(|_| ShardTick::wheel(&core).unwrap()).collect();
            let groups: Vec<Vec<usize>> = shards_of_tick_threads(&core, wheels)
                .into_iter()
                .map(|group| group.into_iter().map(|(shard, _)| shard).collect())
                .collect();
            assert_eq!(groups, expected, "tick_threads {tick_threads:?}");
        }
    }

    /// Schedules `timers` timers due now from this thread and waits until every one has fired.
    fn fire_now_and_wait(service: &TimerService, timers: usize) {
        let (fired, done) = std::sync::mpsc::channel();
        for _ in 0..timers {
            let fired = fired.clone();
            service
                .schedule(Duration::ZERO, move || fired.send(()).unwrap())
                .unwrap();
        }
        (0..timers).for_each(|_| done.recv().unwrap());
    }

    /// Idle workers write the next records of a shard that has handed out fresh slots, so its
    /// producers find them resident (`TimerTable::grow`); with a single worker they do not.
    #[test]
    fn idle_workers_write_records_ahead() {
        for (workers, grows) in [(2, true), (1, false)] {
            let config = Config {
                shards: 1,
                executor_threads: workers,
                ..Config::default()
            };
            let service = TimerService::new(config).unwrap();
            fire_now_and_wait(&service, 300);
            let table = &service.core().shards[0].table;
            let give_up = Instant::now() + Duration::from_secs(10);
            while grows && table.written() == 0 && Instant::now() < give_up {
                thread::sleep(Duration::from_millis(5));
            }
            thread::sleep(Duration::from_millis(50));
            let written = table.written();
            if grows {
                assert!(
                    written >= table.high_water(),
                    "{workers} workers: {written}"
                );
            } else {
                assert_eq!(written, 0, "a single worker never grows the table");
            }
        }
    }

    /// Workers give the slots of ended timers back in batches, and what a batch holds when
    /// they run out of work goes back then: none is stranded in a sleeping worker.
    #[test]
    fn slots_of_fired_timers_all_come_back_when_workers_go_idle() {
        let config = Config {
            shards: 1,
            executor_threads: 2,
            ..Config::default()
        };
        let service = TimerService::new(config).unwrap();
        // Not a multiple of a batch, so each worker ends with a part-full one.
        let timers = 3 * 256 + 7;
        fire_now_and_wait(&service, timers);
        // Every slot came fresh to this thread, so the map holds exactly those given back.
        let table = &service.core().shards[0].table;
        let give_up = Instant::now() + Duration::from_secs(10);
        while table.stored() < timers && Instant::now() < give_up {
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(table.stored(), timers);
    }

    /// Timers far off fire nothing, so no worker wakes on its own to write a growing table
    /// ahead: the tick thread wakes one for it.
    #[test]
    fn a_table_grows_ahead_of_a_burst_of_far_timers() {
        let config = Config {
            shards: 1,
            executor_threads: 2,
            ..Config::default()
        };
        let service = TimerService::new(config).unwrap();
        let table = &service.core().shards[0].table;
        // Past the first step of growth (2 MiB of records), in batches with pauses, so the
        // tick thread sees the table run low more than once.
        for _ in 0..4 {
            for _ in 0..20_000 {
                service.schedule(Duration::from_secs(3600), || {}).unwrap();
            }
            thread::sleep(Duration::from_millis(20));
        }
        let give_up = Instant::now() + Duration::from_secs(10);
        while table.written() < table.high_water() && Instant::now() < give_up {
            thread::sleep(Duration::from_millis(5));
        }
        assert!(
            table.written() >= table.high_water(),
            "written {} of {}",
            table.written(),
            table.high_water()
        );
        assert_eq!(service.stats().fired, 0, "nothing fired meanwhile");
    }

    /// A tick thread posts the memory its wheel grows into next and an idle worker makes it
    /// resident (`shard/prefault.rs`): not while the wheel holds nothing, then once its first
    /// timer is in, again as the wheel grows into it; with a single worker nothing is posted.
    #[test]
    fn idle_workers_populate_the_wheels_next_memory() {
        for (workers, populates) in [(2, true), (1, false)] {
            let config = Config {
                shards: 1,
                executor_threads: workers,
                ..Config::default()
            };
            let service = TimerService::new(config).unwrap();
            let prefault = &service.core().shards[0].prefault;
            thread::sleep(Duration::from_millis(50));
            assert!(!prefault.is_posted(), "nothing posted for an empty wheel");
            assert_eq!(prefault.populated(), 0, "nor populated");
            let id = service.schedule(Duration::from_secs(3600), || {}).unwrap();
            let give_up = Instant::now() + Duration::from_secs(10);
            while populates && prefault.populated() == 0 && Instant::now() < give_up {
                thread::sleep(Duration::from_millis(5));
            }
            if !populates {
                thread::sleep(Duration::from_millis(50));
                assert_eq!(prefault.populated(), 0, "a single worker populates nothing");
                assert!(!prefault.is_posted(), "and nothing is posted for it");
                assert!(service.cancel(id));
                continue;
            }
            assert_eq!(
                prefault.populated(),
                1,
                "the first post, after the first timer"
            );
            // Past half of the 4 MiB posted (8-byte references, 126 to a 1 KiB chunk): the
            // wheel grows into it and posts the next stretch.
            for i in 0..400_000u64 {
                service
                    .schedule(Duration::from_secs(3600 + i % 1000), || {})
                    .unwrap();
            }
            while prefault.populated() < 2 && Instant::now() < give_up {
                thread::sleep(Duration::from_millis(5));
            }
            assert!(prefault.populated() >= 2, "{}", prefault.populated());
            service.shutdown();
            assert!(!prefault.is_posted(), "withdrawn with the wheel");
        }
    }
}
