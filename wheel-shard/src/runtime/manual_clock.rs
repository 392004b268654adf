//! [`ManualClock`]: virtual time for tests, driving a service's real tick threads and executor.
//!
//! `advance` walks virtual time from one due tick to the next. At each stop it waits until the
//! service has caught up: every tick thread has taken in what was queued and handed out what is
//! due, and every callback handed out has finished (see `Settle` for the hand-shake). Only then
//! does time move on, so the callbacks of one tick complete before those of a later tick start,
//! across shards, and a callback that schedules a timer due within the same advance sees it run
//! in that same call.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::core::Core;
use crate::shard::IDLE;

/// The virtual clock of a service built with
/// [`TimerService::with_manual_clock`](crate::TimerService::with_manual_clock). Cheap to clone;
/// all clones move the same time.
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use wheel_shard::{Config, TimerService};
///
/// let (timers, clock) = TimerService::with_manual_clock(Config::default()).unwrap();
/// let (tx, rx) = mpsc::channel();
/// let start = clock.now();
/// timers.schedule(Duration::from_secs(30), move || tx.send("idle").unwrap()).unwrap();
/// clock.advance(Duration::from_secs(29));
/// assert!(rx.try_recv().is_err()); // 29 virtual seconds: not yet
/// assert_eq!(clock.advance_to_next(), Some(start + Duration::from_secs(30)));
/// assert_eq!(rx.try_recv().unwrap(), "idle"); // ran before advance_to_next returned
/// assert_eq!(clock.advance_to_next(), None);
/// ```
#[derive(Clone)]
pub struct ManualClock {
    core: Arc<Core>,
}

impl ManualClock {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        ManualClock { core }
    }

    /// Virtual now: the real now when the service was created, plus every advance since.
    pub fn now(&self) -> Instant {
        self.core.clock.now_instant()
    }

    /// Moves virtual time forward by `by`, through every due deadline in order, and returns
    /// once every callback due by the new now has completed (re-armed repeating timers and
    /// timers scheduled by those callbacks included).
    ///
    /// Called from one of the service's own callbacks it cannot wait for callbacks (its own
    /// would never complete): it then only moves the time and wakes the tick threads. After
    /// `shutdown` it only moves the time.
    ///
    /// Virtual time ends 584 years past its start (nanoseconds in a `u64`): an advance beyond
    /// stops there (`Duration::MAX` is legal), and a timer due later, or scheduled after time
    /// reached the end, never fires; `shutdown` hands it back.
    pub fn advance(&self, by: Duration) {
        let clock = &self.core.clock;
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        if self.core.is_own_thread() {
            // An `advance` in progress may be waiting for this very callback: do not queue
            // behind it.
            clock.set_nanos(clock.elapsed_nanos().saturating_add(by));
            self.wake_tick_threads();
            return;
        }
        let _turn = self.core.settle.take_turn();
        let target = clock.elapsed_nanos().saturating_add(by);
        loop {
            if self.stopped() {
                // No thread runs timers any more, and what tick threads last reported is stale.
                break;
            }
            self.settle();
            match self.next_due().map(|tick| self.tick_start(tick)) {
                Some(start) if start <= target => clock.set_nanos(start),
                _ => break,
            }
        }
        clock.set_nanos(target);
        self.settle();
    }

    /// Moves virtual time to the earliest pending deadline and returns it, once the callbacks
    /// due then have completed; `None` (time unchanged) when no timer is pending. A timer
    /// whose deadline virtual time cannot reach (`Duration::MAX`, or anything past the 584
    /// years its `u64` nanoseconds hold) is not counted as pending here.
    ///
    /// Called from one of the service's own callbacks it returns `None` at once (it cannot
    /// wait for the callback it is called from); after `shutdown` too.
    pub fn advance_to_next(&self) -> Option<Instant> {
        if self.core.is_own_thread() {
            return None;
        }
        let _turn = self.core.settle.take_turn();
        loop {
            if self.stopped() {
                return None;
            }
            self.settle();
            // The tick the wheel must look at next: a deadline, or where a coarser level's
            // slot begins and its timers move down to be placed by their exact deadlines.
            let tick = self.next_due()?;
            let fired = self.core.executor.fired();
            self.core.clock.set_nanos(self.tick_start(tick));
            self.settle();
            if self.core.executor.fired() != fired {
                return Some(self.core.clock.instant(tick));
            }
        }
    }

    /// Whether the service has shut down.
    fn stopped(&self) -> bool {
        self.core.closed.load(Ordering::SeqCst)
    }

    /// The earliest tick any shard's wheel has due, as the tick threads last reported, if
    /// virtual time can reach it. Virtual time is nanoseconds in a `u64` (584 years), so a
    /// tick that begins later is never reached: a `Duration::MAX` timer's, which the wheel
    /// keeps beyond its levels and reports by where that rotation begins, and any deadline
    /// within the last tick. Moving time there would leave the tick unreached and the wheel
    /// reporting it again, without end.
    fn next_due(&self) -> Option<u64> {
        let last = u64::MAX / self.core.clock.tick_nanos();
        self.core
            .shards
            .iter()
            .map(|shard| shard.next_due.load(Ordering::SeqCst))
            .min()
            .filter(|&tick| tick != IDLE && tick <= last)
    }

    fn tick_start(&self, tick: u64) -> u64 {
        tick.saturating_mul(self.core.clock.tick_nanos())
    }

    fn wake_tick_threads(&self) {
        for shard in self.core.shards.iter() {
            shard.wake();
        }
    }

    /// Runs handed to the executor and not finished yet.
    fn in_flight(&self) -> u64 {
        self.core.handed().saturating_sub(self.core.executor.done())
    }

    /// Waits until the service has caught up with the current virtual now: rounds of "wake
    /// every tick thread, wait until each has caught up and no run is in flight", until a
    /// round in which nothing was handed out and nothing is left queued.
    fn settle(&self) {
        let core = &self.core;
        let stopped = || self.stopped();
        loop {
            // No callback runs when a round opens, so only runs handed out in it can queue work.
            core.settle
                .wait_until(|| stopped() || self.in_flight() == 0);
            let handed = self.core.handed();
            let round = core.settle.round.fetch_add(1, Ordering::SeqCst) + 1;
            self.wake_tick_threads();
            core.settle.wait_until(|| {
                stopped()
                    || (self.in_flight() == 0
                        && core
                            .shards
                            .iter()
                            .all(|shard| shard.settled_round.load(Ordering::SeqCst) >= round))
            });
            if stopped() {
                return;
            }
            let quiet = self.core.handed() == handed
                && core
                    .shards
                    .iter()
                    .all(|shard| shard.rings_empty() && shard.notices.is_empty());
            if quiet {
                return;
            }
        }
    }
}

impl std::fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now())
            .finish()
    }
}
