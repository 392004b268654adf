//! Futures on top of the service: [`TimerService::sleep`] and [`TimerService::timeout`], and
//! their versions to an instant ([`TimerService::sleep_until`], [`TimerService::timeout_at`]).
//!
//! Built only on the public API (`try_schedule`, `try_schedule_at`, `reschedule`,
//! `reschedule_at` and `cancel`): the timer's callback marks a
//! shared [`Signal`] fired and wakes the waiting task; dropping the future cancels its timer.
//! Nothing here needs a tokio runtime (the futures work on any executor): the module sits
//! behind the `async` feature (`tokio` is its old name, kept as an alias), which pulls in no
//! dependency.
//!
//! A timer callback that blocks its thread until a `Sleep` of the same service completes
//! (a `block_on` inside the callback) holds a worker meanwhile: the sleep's own timer needs
//! another worker free to run it, so with `executor_threads = 1` it never completes.
//!
//! Nothing here blocks the calling thread. The callers are async tasks, and a runtime thread
//! that waits inside `schedule` for room in a full ring (up to
//! [`Config::saturation_timeout`](crate::Config::saturation_timeout)) stalls every other task
//! on it; so the timers are scheduled with
//! [`try_schedule`](TimerService::try_schedule), and a full ring resolves the future to
//! [`TimerError::Refused`]`(`[`ScheduleError::Saturated`]`)` at once.
//!
//! When the service cannot keep a timer, the future says so instead of hanging or firing early:
//! a refused schedule (shut down, `max_pending`, a full ring) and a timer the service drops
//! unrun (shutdown hands back [`Unfired`](crate::Unfired) timers; dropping or running them
//! ends their callbacks without the deadline) both resolve the [`Sleep`] to a [`TimerError`],
//! and a [`Timeout`] to [`Elapsed::TimerFailed`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::{ScheduleError, TimerId, TimerService};

/// Why a [`Sleep`] (or an [`Interval`](crate::Interval)'s tick) ended without the service
/// reaching its deadline.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    /// The service refused the timer: shut down, `max_pending` reached, or a full ring
    /// ([`ScheduleError::Saturated`], reported at once rather than waited out).
    #[error("the timer service refused the timer: {0}")]
    Refused(ScheduleError),
    /// The service shut down before the deadline: its timer was dropped unrun, or run as a
    /// handed-back [`Unfired`](crate::Unfired).
    #[error("the timer service dropped the timer unrun (it was shut down)")]
    Abandoned,
}

/// Why a [`Timeout`] gave up on its future.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Elapsed {
    /// The deadline passed before the future completed.
    #[error("deadline has elapsed")]
    Deadline,
    /// The deadline cannot be kept: the service refused or dropped the timer. Reported at
    /// once rather than letting the future run without its deadline.
    #[error("the timeout's timer failed: {0}")]
    TimerFailed(TimerError),
}

const PENDING: u8 = 0;
const FIRED: u8 = 1;
const ABANDONED: u8 = 2;

/// The waker of the task waiting on a future, shared with the timer callback that wakes it.
///
/// The waiting side [`register`](Self::register)s its waker and then reads the outcome; the
/// callback records the outcome and then [`wake`](Self::wake)s. The lock orders the two, so a
/// callback racing with a poll either finds the new waker or its outcome is seen by that poll:
/// no wake-up is lost.
#[derive(Default)]
pub(super) struct WakerSlot(Mutex<Option<Waker>>);

impl WakerSlot {
    /// Stores `waker`, unless the stored one wakes the same task (sparing a clone per poll).
    pub(super) fn register(&self, waker: &Waker) {
        let mut slot = self.lock();
        match slot.as_ref() {
            Some(stored) if stored.will_wake(waker) => {}
            _ => *slot = Some(waker.clone()),
        }
    }

    /// Stores `waker`, replacing any other: a waker taken from another slot, moved over.
    pub(super) fn put(&self, waker: Waker) {
        *self.lock() = Some(waker);
    }

    /// Takes the stored waker: the task is woken by the caller, or forgotten (a future being
    /// dropped, whose timer's end must wake nobody).
    pub(super) fn take(&self) -> Option<Waker> {
        self.lock().take()
    }

    /// Wakes the stored waker, if any, and forgets it: the woken task registers again when it
    /// polls.
    pub(super) fn wake(&self) {
        if let Some(waker) = self.take() {
            waker.wake();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Waker>> {
        // A waker's `clone` or `drop` that panicked leaves a usable slot behind.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Shared by a [`Sleep`] and its timer's callback: the outcome and the waker to call.
#[derive(Default)]
struct Signal {
    state: AtomicU8,
    waker: WakerSlot,
}

impl Signal {
    /// Records the outcome (the first one wins) and wakes the waiting task.
    fn settle(&self, outcome: u8) {
        if self
            .state
            .compare_exchange(PENDING, outcome, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.waker.wake();
        }
    }

    /// Stores the task's waker, then reads the outcome (see [`WakerSlot`]).
    fn poll_outcome(&self, cx: &mut Context<'_>) -> Poll<Result<(), TimerError>> {
        self.waker.register(cx.waker());
        match self.state.load(Ordering::Acquire) {
            PENDING => Poll::Pending,
            FIRED => Poll::Ready(Ok(())),
            _ => Poll::Ready(Err(TimerError::Abandoned)),
        }
    }
}

/// When a future's timer is due: a delay from now, or an instant. One type, so that each
/// future has a single constructor and [`Sleep`] a single reset for both kinds of deadline.
#[derive(Debug, Clone, Copy)]
enum Due {
    After(Duration),
    At(Instant),
}

impl Due {
    /// Schedules `task` for this deadline without waiting for ring room: the callers are async
    /// tasks, which must not block their runtime thread.
    fn try_schedule(
        self,
        timers: &TimerService,
        task: impl FnOnce() + Send + 'static,
    ) -> Result<TimerId, ScheduleError> {
        match self {
            Due::After(delay) => timers.try_schedule(delay, task),
            Due::At(deadline) => timers.try_schedule_at(deadline, task),
        }
    }

    /// Moves the pending timer `id` to this deadline; `false` when it is no longer pending.
    fn reschedule(self, timers: &TimerService, id: TimerId) -> bool {
        match self {
            Due::After(delay) => timers.reschedule(id, delay),
            Due::At(deadline) => timers.reschedule_at(id, deadline),
        }
    }
}

/// The timer's callback. Run by the service, it fires the signal; dropped unrun (by `cancel`,
/// or by the service on shutdown) or run by [`Unfired::run`](crate::Unfired::run) after a
/// shutdown (before its deadline, as likely as not), it abandons it: a waiting task is never
/// left hanging, and never woken early.
struct Alarm(Arc<Signal>);

impl Alarm {
    fn ring(self) {
        let outcome = if crate::timer::running_unfired() {
            ABANDONED
        } else {
            FIRED
        };
        self.0.settle(outcome);
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        // After `ring` this is a no-op: the first outcome wins.
        self.0.settle(ABANDONED);
    }
}

/// A future that completes when its timer in a [`TimerService`] fires, never earlier than
/// the requested delay or instant. Dropping it cancels the timer (counted in
/// `Stats::cancelled`).
///
/// Resolves to `Ok(())` when the timer fired, or to a [`TimerError`] when the service refused
/// or dropped it. It holds a handle to the service, so a pending `Sleep` keeps the service
/// running after the caller's own handles are dropped.
#[must_use = "a Sleep does nothing unless awaited; dropping it cancels its timer"]
pub struct Sleep {
    timers: TimerService,
    signal: Arc<Signal>,
    /// `None` once fired or cancelled, or when `schedule` refused the timer.
    timer: Option<TimerId>,
    refused: Option<ScheduleError>,
}

impl Future for Sleep {
    type Output = Result<(), TimerError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(error) = self.refused.clone() {
            return Poll::Ready(Err(TimerError::Refused(error)));
        }
        let outcome = self.signal.poll_outcome(cx);
        if outcome.is_ready() {
            // The timer is over: nothing left to cancel on drop.
            self.timer = None;
        }
        outcome
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(id) = self.timer.take() {
            // Forget the waker first so the cancelled callback's drop wakes nobody.
            drop(self.signal.waker.take());
            self.timers.cancel(id);
        }
    }
}

impl Sleep {
    /// Moves the deadline to `delay` from now, whatever the sleep's state: pending, completed
    /// (it completes again), or refused (the timer is asked for again). It then completes after
    /// `delay`, never earlier, as a new [`TimerService::sleep`] would, and a task that polled
    /// it before is woken by the new deadline without polling again first.
    ///
    /// While its timer is pending this is a [`TimerService::reschedule`]: postponing costs no
    /// wake-up and no message, which suits an idle timeout reset on every read. Otherwise (the
    /// timer fired, or is firing as this runs) a new timer takes its place, scheduled without
    /// blocking: a refusal resolves the next poll to [`TimerError::Refused`]. An outcome of
    /// the old timer that has not been polled yet is dropped.
    ///
    /// ```
    /// # async fn connection(timers: wheel_shard::TimerService) {
    /// use std::time::Duration;
    /// let idle = timers.sleep(Duration::from_secs(30));
    /// tokio::pin!(idle);
    /// loop {
    ///     tokio::select! {
    ///         _ = &mut idle => break, // 30 s without a read: close
    ///         read = next_read() => {
    ///             if !read { break; }
    ///             idle.as_mut().get_mut().reset(Duration::from_secs(30));
    ///         }
    ///     }
    /// }
    /// # }
    /// # async fn next_read() -> bool { false }
    /// ```
    pub fn reset(&mut self, delay: Duration) {
        self.reset_to(Due::After(delay));
    }

    /// [`reset`](Self::reset) to an instant: the sleep then completes at the first tick at or
    /// after `deadline`, never earlier, as a new [`TimerService::sleep_until`] would; with an
    /// instant already past it completes at the service's next tick. Everything else is as
    /// `reset` says: while its timer is pending this is a [`TimerService::reschedule_at`].
    ///
    /// ```
    /// # async fn request(timers: wheel_shard::TimerService) {
    /// use std::time::{Duration, Instant};
    /// // A deadline for the whole exchange, extended once when the server asks for more time.
    /// let started = Instant::now();
    /// let mut deadline = timers.sleep_until(started + Duration::from_secs(5));
    /// if server_asked_for_more_time().await {
    ///     deadline.reset_at(started + Duration::from_secs(10));
    /// }
    /// let _ = deadline.await;
    /// # }
    /// # async fn server_asked_for_more_time() -> bool { false }
    /// ```
    pub fn reset_at(&mut self, deadline: Instant) {
        self.reset_to(Due::At(deadline));
    }

    /// Moves the deadline to `due`: see [`reset`](Self::reset).
    fn reset_to(&mut self, due: Due) {
        // A timer that moves has not been claimed to run, so its signal is still unsettled.
        if self
            .timer
            .is_some_and(|id| due.reschedule(&self.timers, id))
        {
            return;
        }
        // The old timer ran, is running, was refused or dropped: its callback (if it is still
        // on its way) settles the old signal, which nobody polls any more.
        let waker = self.signal.waker.take();
        if let Some(id) = self.timer.take() {
            self.timers.cancel(id);
        }
        *self = self.timers.sleep_to(due);
        if let Some(waker) = waker {
            self.signal.waker.put(waker);
            // The new timer may have settled before its waker was in, or been refused: the
            // task has an outcome to poll.
            if self.refused.is_some() || self.signal.state.load(Ordering::Acquire) != PENDING {
                self.signal.waker.wake();
            }
        }
    }
}

impl std::fmt::Debug for Sleep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleep")
            .field("timer", &self.timer)
            .field("state", &self.signal.state.load(Ordering::Relaxed))
            .field("refused", &self.refused)
            .finish()
    }
}

/// A future that runs `F` to completion unless its deadline passes first. If both are ready
/// at the same poll, the future's output wins (its timer then counts as fired). Like any
/// future, it is not to be polled again once it has completed: it would poll `F` again. The
/// inner future is boxed so that `F` need not be `Unpin` (this crate has no `unsafe` and no
/// pin-projection dependency).
#[must_use = "a Timeout does nothing unless awaited"]
pub struct Timeout<F> {
    future: Pin<Box<F>>,
    sleep: Sleep,
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(output) = self.future.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match Pin::new(&mut self.sleep).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(Err(Elapsed::Deadline)),
            Poll::Ready(Err(error)) => Poll::Ready(Err(Elapsed::TimerFailed(error))),
        }
    }
}

impl<F> std::fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeout")
            .field("sleep", &self.sleep)
            .finish_non_exhaustive()
    }
}

impl TimerService {
    /// A future that completes after `delay` (rounded up to the tick, never early). The timer
    /// is scheduled now, without blocking: if the service refuses it (a full ring included),
    /// the future resolves at its first poll to [`TimerError::Refused`]. Use
    /// [`try_sleep`](Self::try_sleep) to see the refusal here.
    pub fn sleep(&self, delay: Duration) -> Sleep {
        self.sleep_to(Due::After(delay))
    }

    /// Like [`sleep`](Self::sleep), but a refused timer is an error now. Never blocks: a full
    /// ring is [`ScheduleError::Saturated`] at once, not after `saturation_timeout`.
    pub fn try_sleep(&self, delay: Duration) -> Result<Sleep, ScheduleError> {
        self.try_sleep_to(Due::After(delay))
    }

    /// A future that completes at `deadline`: at the first tick at or after it, never earlier.
    /// An instant already past is due at once: the sleep completes when the service's next
    /// tick runs its timer (its first poll may still be pending, as with a zero
    /// [`sleep`](Self::sleep)). Scheduled as [`sleep`](Self::sleep) is, with
    /// [`try_schedule_at`](Self::try_schedule_at): a refusal resolves the first poll to
    /// [`TimerError::Refused`].
    ///
    /// An instant keeps a deadline exact across steps that each wait: a request's budget
    /// shared by its retries, say, where a `sleep` would recompute the time left at each step.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use wheel_shard::{Config, TimerService};
    ///
    /// let timers = TimerService::new(Config::default()).unwrap();
    /// # let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// # runtime.block_on(async {
    /// let at = Instant::now() + Duration::from_millis(20);
    /// timers.sleep_until(at).await.unwrap();
    /// assert!(Instant::now() >= at);
    /// # });
    /// ```
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        self.sleep_to(Due::At(deadline))
    }

    /// Like [`sleep_until`](Self::sleep_until), but a refused timer is an error now. Never
    /// blocks: a full ring is [`ScheduleError::Saturated`] at once.
    pub fn try_sleep_until(&self, deadline: Instant) -> Result<Sleep, ScheduleError> {
        self.try_sleep_to(Due::At(deadline))
    }

    /// Runs `future` with a deadline `delay` from now: its output, or [`Elapsed::Deadline`]
    /// once the deadline passed (never before). Dropping the `Timeout` cancels its timer.
    /// Schedules like [`sleep`](Self::sleep), without blocking: a refused timer (a full ring
    /// included) gives [`Elapsed::TimerFailed`] at the first poll.
    pub fn timeout<F: Future>(&self, delay: Duration, future: F) -> Timeout<F> {
        self.timeout_to(Due::After(delay), future)
    }

    /// Runs `future` with a deadline at `deadline`: its output, or [`Elapsed::Deadline`] once
    /// the first tick at or after `deadline` passed (never before; with an instant already
    /// past, `Deadline` comes at the service's next tick, unless the future is ready first).
    /// Otherwise as [`timeout`](Self::timeout): dropping it cancels its timer, and a refused
    /// timer gives [`Elapsed::TimerFailed`] at the first poll.
    ///
    /// ```
    /// # async fn example(timers: wheel_shard::TimerService) {
    /// use std::time::{Duration, Instant};
    /// // One budget for a request and its retries: each attempt gets what is left of it.
    /// let budget = Instant::now() + Duration::from_millis(500);
    /// for _ in 0..3 {
    ///     match timers.timeout_at(budget, attempt()).await {
    ///         Ok(true) => break,    // done
    ///         Ok(false) => continue, // failed in time: retry within the same budget
    ///         Err(_) => break,      // the budget is spent (or the service cannot keep it)
    ///     }
    /// }
    /// # }
    /// # async fn attempt() -> bool { true }
    /// ```
    pub fn timeout_at<F: Future>(&self, deadline: Instant, future: F) -> Timeout<F> {
        self.timeout_to(Due::At(deadline), future)
    }

    /// The one constructor of [`Sleep`] that does not fail: a refusal becomes its first
    /// outcome.
    fn sleep_to(&self, due: Due) -> Sleep {
        self.try_sleep_to(due).unwrap_or_else(|error| Sleep {
            timers: self.clone(),
            signal: Arc::default(),
            timer: None,
            refused: Some(error),
        })
    }

    /// Arms a timer whose callback settles a new sleep's signal.
    fn try_sleep_to(&self, due: Due) -> Result<Sleep, ScheduleError> {
        let signal = Arc::new(Signal::default());
        let alarm = Alarm(Arc::clone(&signal));
        let id = due.try_schedule(self, move || alarm.ring())?;
        Ok(Sleep {
            timers: self.clone(),
            signal,
            timer: Some(id),
            refused: None,
        })
    }

    fn timeout_to<F: Future>(&self, due: Due, future: F) -> Timeout<F> {
        Timeout {
            future: Box::pin(future),
            sleep: self.sleep_to(due),
        }
    }
}
