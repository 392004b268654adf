//! [`Interval`]: a repeating timer an async task waits on, tick after tick
//! ([`TimerService::interval`]).
//!
//! One repeating timer serves the interval's whole life, so a tick schedules nothing: the
//! timer's callback counts the periods its run completes and wakes the waiting task, and a
//! tick takes every period counted since the previous one. A task that fell behind thus
//! learns in one tick how many periods it missed, instead of catching up in a burst of ticks.
//! A run counts one period, or more when the service skipped runs before it (a run that came
//! more than a period late skips the deadlines that passed meanwhile): the callback counts
//! from its runs' deadlines ([`due_run`]), so the periods add up to the time that passed.
//! Dropping the `Interval` cancels the timer.
//!
//! The callback holds the shared count and nothing else: no service handle, which in a
//! repeating callback would keep the service running for as long as the timer lives (see
//! [`WeakTimerService`](crate::WeakTimerService)). When the timer ends without the interval
//! cancelling it (a shutdown drops it unrun, or runs it as a handed-back
//! [`Unfired`](crate::Unfired)), dropping the callback marks the interval ended, so a waiting
//! task gets [`TimerError::Abandoned`] instead of hanging.

use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::futures::{TimerError, WakerSlot};
use crate::task::due_run;
use crate::{ScheduleError, TimerId, TimerService};

/// The bit of [`Beats::word`] that says the timer has ended.
const ENDED: u64 = 1 << 63;

/// Shared by an [`Interval`] and its timer's callback.
#[derive(Default)]
struct Beats {
    /// The periods no tick has taken yet (the low 63 bits) and [`ENDED`]. One word, so that
    /// a tick takes the periods and learns of the end in one step: a run counted before the
    /// end is never lost to a tick that sees the end.
    word: AtomicU64,
    waker: WakerSlot,
}

impl Beats {
    /// A run at its deadline, completing `periods` periods: counted, then the task woken.
    fn beat(&self, periods: u64) {
        self.word.fetch_add(periods, Ordering::AcqRel);
        self.waker.wake();
    }

    /// The timer ended: marked, then the task woken.
    fn end(&self) {
        self.word.fetch_or(ENDED, Ordering::AcqRel);
        self.waker.wake();
    }

    /// Stores the task's waker, then takes the periods counted so far (see [`WakerSlot`]):
    /// the periods when there are any, else the end when it came, else pending.
    fn poll_periods(&self, cx: &mut Context<'_>) -> Poll<Result<u64, TimerError>> {
        self.waker.register(cx.waker());
        let word = self.word.fetch_and(ENDED, Ordering::AcqRel);
        match word & !ENDED {
            0 if word & ENDED != 0 => Poll::Ready(Err(TimerError::Abandoned)),
            0 => Poll::Pending,
            periods => Poll::Ready(Ok(periods)),
        }
    }
}

/// The repeating timer's callback. A run the service makes at a deadline counts the periods
/// since its previous run's deadline (one, or more when the service skipped runs between
/// them); the first run counts one, the period from the interval's start. A run by
/// [`Unfired::run`](crate::Unfired::run) after a shutdown counts nothing (no deadline was
/// reached). Dropped, the timer has ended (cancelled by the interval's drop, dropped or run by
/// a shutdown, or a run that panicked), and it marks the interval ended.
struct Pulse {
    beats: Arc<Beats>,
    /// The tick the previous run was due at.
    last_due: Option<u64>,
}

impl Pulse {
    fn run(&mut self) {
        if crate::timer::running_unfired() {
            return;
        }
        let periods = match due_run() {
            Some(run) => {
                let periods = self.last_due.map_or(1, |last| run.periods_since(last));
                self.last_due = Some(run.due);
                periods
            }
            None => 1,
        };
        self.beats.beat(periods);
    }
}

impl Drop for Pulse {
    fn drop(&mut self) {
        self.beats.end();
    }
}

/// A repeating timer for an async task: [`tick`](Interval::tick) completes once a period,
/// with how many periods passed since the previous tick. Made by [`TimerService::interval`].
///
/// - **The first tick is one period after creation.** tokio's `interval` completes its first
///   tick at once; here, do the first round's work before the first `tick().await` for that.
/// - **Periods are never early and ticks never burst.** The periods are those of
///   [`TimerService::schedule_repeating`] (rounded up to whole ticks, fixed rate: run `n` is
///   due at `start + n·period`). A tick gives `Ok(n)`, `n ≥ 1` the periods whose deadlines
///   the timer's runs reached since the previous tick completed: a task that was busy for
///   three and a half periods gets `Ok(3)` from one tick, and the next tick waits for the
///   next deadline (tokio's `MissedTickBehavior::Skip`, with the count of what was skipped).
///   The periods whose runs the service itself skipped (a run that came more than a period
///   late skips the deadlines that passed meanwhile) count too, in the run after them: the
///   ticks' periods add up to the time that passed, whoever fell behind.
/// - **One timer for its whole life**, cancelled when the `Interval` is dropped (counted in
///   `Stats::cancelled`); a tick costs no schedule.
/// - **It ends with an error, never by hanging.** A refused timer (shut down, `max_pending`,
///   a full ring: the timer is scheduled without waiting for ring room) makes every tick
///   [`TimerError::Refused`]. A timer that ends without the interval's drop (the service
///   shut down; or a run panicked, which only a panicking waker can cause) makes every tick
///   after the periods already counted [`TimerError::Abandoned`].
///
/// It holds a handle to the service, as a [`Sleep`](crate::Sleep) does: the service runs while
/// an `Interval` lives, also after the caller's own handles are dropped.
///
/// ```
/// use std::time::Duration;
/// use wheel_shard::{Config, TimerError, TimerService};
///
/// let (timers, clock) = TimerService::with_manual_clock(Config::default()).unwrap();
/// let mut heartbeat = timers.interval(Duration::from_secs(1));
/// # let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # runtime.block_on(async {
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(heartbeat.tick().await, Ok(1));
/// clock.advance(Duration::from_millis(3_500)); // the task was busy for 3.5 periods
/// assert_eq!(heartbeat.tick().await, Ok(3)); // one tick says so
/// drop(timers.shutdown());
/// assert_eq!(heartbeat.tick().await, Err(TimerError::Abandoned));
/// # });
/// ```
#[must_use = "an Interval does nothing unless ticked; dropping it cancels its timer"]
pub struct Interval {
    timers: TimerService,
    beats: Arc<Beats>,
    /// `None` once the timer ended, or when the service refused it.
    timer: Option<TimerId>,
    refused: Option<ScheduleError>,
    period: Duration,
}

impl Interval {
    /// Waits for the next deadline: `Ok(n)` with `n ≥ 1` the periods that passed since the
    /// previous tick completed (all of them at once, no burst), or the [`TimerError`] that
    /// ended the interval (the same at every later tick; see [`Interval`]).
    ///
    /// Cancel safe: a tick dropped before it completes (the losing arm of a `select!`) loses
    /// no run; the next tick counts it.
    ///
    /// ```
    /// # async fn report(timers: wheel_shard::TimerService) {
    /// use std::time::Duration;
    /// let mut every_minute = timers.interval(Duration::from_secs(60));
    /// while let Ok(periods) = every_minute.tick().await {
    ///     if periods > 1 {
    ///         eprintln!("{} reports skipped: the task was busy", periods - 1);
    ///     }
    ///     send_report().await;
    /// }
    /// # }
    /// # async fn send_report() {}
    /// ```
    pub async fn tick(&mut self) -> Result<u64, TimerError> {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// [`tick`](Self::tick) for hand-written futures and `poll` functions: `Pending` with
    /// `cx`'s waker stored (the latest waker is the one woken), or the tick's outcome.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Result<u64, TimerError>> {
        if let Some(error) = &self.refused {
            return Poll::Ready(Err(TimerError::Refused(error.clone())));
        }
        let outcome = self.beats.poll_periods(cx);
        if let Poll::Ready(Err(_)) = outcome {
            // The timer has ended: nothing left to cancel on drop.
            self.timer = None;
        }
        outcome
    }

    /// The period it was made with (its runs are due at whole ticks, rounded up).
    pub fn period(&self) -> Duration {
        self.period
    }
}

impl Drop for Interval {
    fn drop(&mut self) {
        if let Some(id) = self.timer.take() {
            // Forget the waker first so the cancelled callback's drop wakes nobody.
            drop(self.beats.waker.take());
            self.timers.cancel(id);
        }
    }
}

impl std::fmt::Debug for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let word = self.beats.word.load(Ordering::Relaxed);
        f.debug_struct("Interval")
            .field("period", &self.period)
            .field("timer", &self.timer)
            .field("periods", &(word & !ENDED))
            .field("ended", &(word & ENDED != 0))
            .field("refused", &self.refused)
            .finish()
    }
}

impl TimerService {
    /// An [`Interval`] of `period`: its first tick one period from now (not at once, as
    /// tokio's is), then one a period, each saying how many periods passed since the last.
    /// Its one repeating timer is scheduled now, without blocking: if the service refuses it
    /// (a full ring included), every tick resolves to [`TimerError::Refused`]. Use
    /// [`try_interval`](Self::try_interval) to see the refusal here.
    pub fn interval(&self, period: Duration) -> Interval {
        self.try_interval(period).unwrap_or_else(|error| Interval {
            timers: self.clone(),
            beats: Arc::default(),
            timer: None,
            refused: Some(error),
            period,
        })
    }

    /// Like [`interval`](Self::interval), but a refused timer is an error now. Never blocks: a
    /// full ring is [`ScheduleError::Saturated`] at once, not after `saturation_timeout`.
    pub fn try_interval(&self, period: Duration) -> Result<Interval, ScheduleError> {
        let beats = Arc::new(Beats::default());
        let mut pulse = Pulse {
            beats: Arc::clone(&beats),
            last_due: None,
        };
        let id = self.try_schedule_repeating(period, move || pulse.run())?;
        Ok(Interval {
            timers: self.clone(),
            beats,
            timer: Some(id),
            refused: None,
            period,
        })
    }
}
