//! [`TimerService`]: the public face of the service.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::contain::drop_contained;
use crate::error::{ConfigError, ScheduleError};
use crate::runtime::core::Core;
use crate::runtime::manual_clock::ManualClock;
use crate::runtime::threads::Handle;
use crate::shard::{Cancelled, Claimed, Moved, Notice, Placement, PushRefused, Record, Shard};
use crate::shutdown::ShutdownReport;
use crate::stats::{Lateness, Stats};
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
        Ok(TimerService {
            handle: Arc::new(Handle::start(config, clock)?),
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
    /// (`docs/performance.md`, "The fast path inlined into the caller"). The price is about 3 KiB of code a call site;
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
                shard.wake_for(deadline);
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
        shard.wake_for_cleanup();
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
                shard.post(Notice::Earlier(Placement { deadline, slot }));
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

/// A schedule refused with `error`: its task is dropped here, a panic in the task's `Drop`
/// contained and counted, so the caller gets the error and never an unwinding panic.
#[cold]
fn refuse(core: &Core, task: Task, error: ScheduleError) -> ScheduleError {
    drop_contained(task, "a task that was not scheduled", &core.drop_panics);
    error
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
    use std::thread;

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
