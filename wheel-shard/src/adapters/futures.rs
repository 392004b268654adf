//! Futures on top of the service: [`TimerService::sleep`] and [`TimerService::timeout`].
//!
//! Built only on the public API (`try_schedule` and `cancel`): the timer's callback marks a
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
use std::time::Duration;

use crate::{ScheduleError, TimerId, TimerService};

/// Why a [`Sleep`] ended without the service reaching its deadline.
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

/// Shared by a [`Sleep`] and its timer's callback: the outcome and the waker to call.
#[derive(Default)]
struct Signal {
    state: AtomicU8,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    /// Records the outcome (the first one wins) and wakes the waiting task.
    fn settle(&self, outcome: u8) {
        if self
            .state
            .compare_exchange(PENDING, outcome, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            if let Some(waker) = self.take_waker() {
                waker.wake();
            }
        }
    }

    fn take_waker(&self) -> Option<Waker> {
        self.waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Stores the task's waker, then reads the outcome. Storing first means a `settle` racing
    /// with this poll either finds the waker or is seen here.
    fn poll_outcome(&self, cx: &mut Context<'_>) -> Poll<Result<(), TimerError>> {
        {
            let mut slot = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
            match slot.as_ref() {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
        }
        match self.state.load(Ordering::Acquire) {
            PENDING => Poll::Pending,
            FIRED => Poll::Ready(Ok(())),
            _ => Poll::Ready(Err(TimerError::Abandoned)),
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
/// the requested delay. Dropping it cancels the timer (counted in `Stats::cancelled`).
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
            drop(self.signal.take_waker());
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
        // A timer that moves has not been claimed to run, so its signal is still unsettled.
        if self
            .timer
            .is_some_and(|id| self.timers.reschedule(id, delay))
        {
            return;
        }
        // The old timer ran, is running, was refused or dropped: its callback (if it is still
        // on its way) settles the old signal, which nobody polls any more.
        let waker = self.signal.take_waker();
        if let Some(id) = self.timer.take() {
            self.timers.cancel(id);
        }
        *self = self.timers.sleep(delay);
        if let Some(waker) = waker {
            *self
                .signal
                .waker
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(waker);
            // The new timer may have settled before its waker was in, or been refused: the
            // task has an outcome to poll.
            if self.refused.is_some() || self.signal.state.load(Ordering::Acquire) != PENDING {
                if let Some(waker) = self.signal.take_waker() {
                    waker.wake();
                }
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
        self.try_sleep(delay).unwrap_or_else(|error| Sleep {
            timers: self.clone(),
            signal: Arc::default(),
            timer: None,
            refused: Some(error),
        })
    }

    /// Like [`sleep`](Self::sleep), but a refused timer is an error now. Never blocks: a full
    /// ring is [`ScheduleError::Saturated`] at once, not after `saturation_timeout`.
    pub fn try_sleep(&self, delay: Duration) -> Result<Sleep, ScheduleError> {
        let signal = Arc::new(Signal::default());
        let alarm = Alarm(Arc::clone(&signal));
        // try_schedule: the caller is an async task, which must not wait for ring room.
        let id = self.try_schedule(delay, move || alarm.ring())?;
        Ok(Sleep {
            timers: self.clone(),
            signal,
            timer: Some(id),
            refused: None,
        })
    }

    /// Runs `future` with a deadline `delay` from now: its output, or [`Elapsed::Deadline`]
    /// once the deadline passed (never before). Dropping the `Timeout` cancels its timer.
    /// Schedules like [`sleep`](Self::sleep), without blocking: a refused timer (a full ring
    /// included) gives [`Elapsed::TimerFailed`] at the first poll.
    pub fn timeout<F: Future>(&self, delay: Duration, future: F) -> Timeout<F> {
        Timeout {
            future: Box::pin(future),
            sleep: self.sleep(delay),
        }
    }
}
