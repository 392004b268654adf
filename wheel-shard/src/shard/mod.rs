//! [`Shard`]: the part of a shard that every thread shares — its pending ring, its notice
//! queue, its table of timer records and the protocol that wakes its tick thread.
//!
//! Producers put new timers' references in the bounded ring; one due within a few dozen
//! milliseconds, while that ring has a backlog, goes into a second, small ring that the tick
//! thread empties first, so that it does not wait behind the backlog (see
//! [`Shard::push_from`]). The producer thread that schedules most holds the shard's lane, a
//! single-producer ring beside the shared one, and sends its timers there without a locked
//! instruction (`lane.rs`).
//! An earlier `reschedule`, a worker that found a timer postponed and a worker re-arming a
//! repeating timer leave a [`Notice`] in an unbounded queue instead: those calls have already
//! decided their outcome on the timer's record, so they must not fail on a full ring, and
//! their number is bounded by the timers that exist. A `cancel` leaves nothing: it ends the
//! timer on its record, and the reference left in the wheel is stale; it only counts
//! (`cancelled`), so the tick thread knows when to compact.
//!
//! The tick thread publishes the tick it plans to wake at (`wake_at`) before it sleeps, then
//! looks at the ring once more; a producer pushes, then reads `wake_at` and unparks the thread
//! only when its deadline is earlier. Both sides use SeqCst, so at least one sees the other: a
//! wake-up is never lost, and a producer whose deadline is not earlier costs no syscall. A
//! lane push is not SeqCst: its holder's light barrier and the tick thread's heavy barrier
//! before a sleep past the next tick give the same guarantee (see [`Shard::plan_sleep`]).
//! A flood of far timers would then fill the ring while the thread sleeps, and producers would
//! wait for room; so a push that leaves the ring half full wakes a sleeping tick thread
//! whatever its deadline, and a tick thread that moved a flood of commands since it last slept
//! wakes again at the next tick to take the rest.
//! [`TickWaker`] holds that handshake, and its loom models check it.

mod cells;
mod free_map;
mod lane;
mod prefault;
mod record;
mod ring;
mod table;
mod wake;
#[cfg(not(loom))]
mod zeroed;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_deque::Injector;
use crossbeam_utils::CachePadded;

use crate::error::ScheduleError;
use crate::sync;
pub(crate) use cells::{Cells, RingRefused};
pub(crate) use lane::Lane;
pub(crate) use prefault::{Prefault, AHEAD_BYTES as PREFAULT_AHEAD_BYTES};
pub(crate) use record::{
    ticket_of, AtShutdown, Cancelled, Claim, Moved, Record, Ticket, GENERATION_BITS,
};
pub(crate) use ring::{PendingRing, PushError};
pub(crate) use table::{Claimed, TimerTable};
use wake::TickWaker;
pub(crate) use wake::{CLEANUP_TICKS, IDLE};

/// A shard's wheel: it holds each reference as its record's slot, due at the reference's
/// deadline, whose low bits (which the wheel's arrays keep anyway) are its ticket: 8 bytes a
/// reference.
pub(crate) type ShardWheel = wheel_core::Wheel<u32>;

/// A reference to a timer as the wheel hands it out to the workers: its record's slot and the
/// reference's ticket (see `Record`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerRef {
    pub(crate) slot: u32,
    pub(crate) ticket: Ticket,
}

impl TimerRef {
    /// The reference to the record at `slot` due at `deadline`.
    pub(crate) fn due_at(slot: u32, deadline: u64) -> Self {
        TimerRef {
            slot,
            ticket: ticket_of(deadline),
        }
    }
}

/// Why [`Shard::push_from`] did not take a timer, and whether its push counted in
/// [`Shard::pushed`] all the same (a lane push that then found the lane closed): a producer
/// that takes such a timer back counts it in [`Shard::withdrawn`].
#[derive(Debug)]
pub(crate) struct PushRefused {
    pub(crate) error: ScheduleError,
    pub(crate) counted: bool,
}

/// A new reference on its way to the tick thread: 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) deadline: u64,
    pub(crate) slot: u32,
}

/// Work for the tick thread that does not go through the ring.
pub(crate) enum Notice {
    /// Place a new reference: a timer found postponed when its old deadline came, or
    /// re-armed after a run.
    Place(Placement),
    /// Place the new reference of a timer moved earlier; its previous one is stale.
    Earlier(Placement),
}

impl Notice {
    /// The reference to place.
    pub(crate) fn placement(&self) -> Placement {
        match *self {
            Notice::Place(placement) | Notice::Earlier(placement) => placement,
        }
    }
}

/// Cells of a shard's ring for new timers due soon (see [`Shard::push_from`]): 24 KiB.
pub(crate) const URGENT_CAPACITY: usize = 1024;

/// References in the main ring from which a timer due soon goes past them (see
/// [`Shard::push_from`]): below this the backlog is a fraction of a millisecond of the tick
/// thread's work.
pub(crate) const URGENT_BACKLOG: usize = 1024;

/// Pops of new timers [`Shard::pop_new`] takes from one source before it looks at the ring for
/// timers due soon again and turns to the other source first: a few microseconds of the tick
/// thread's work.
pub(crate) const POP_TURN: u32 = 64;

/// The tick thread's place in [`Shard::pop_new`]'s turns, kept from one pop to the next.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PopTurn {
    /// Pops left in this turn; 0 begins a new one at the next pop.
    left: u32,
    /// Whether the ring for timers due soon may still hold some this turn.
    urgent: bool,
    /// Whether the lane goes before the shared ring.
    lane_first: bool,
}

impl PopTurn {
    /// A new turn at the next pop, which looks at the ring for timers due soon first: at the
    /// start of every pass, so that a pass takes what is due soon before anything else.
    pub(crate) fn restart(&mut self) {
        self.left = 0;
    }

    fn begin(&mut self) {
        self.left = POP_TURN;
        self.urgent = true;
        self.lane_first = !self.lane_first;
    }
}

/// A new timer due within this long of the tick thread's last pass goes to the ring for
/// timers due soon: about as long as a reference can wait in a full ring during a burst.
const URGENT_WITHIN: Duration = Duration::from_millis(32);

/// [`URGENT_WITHIN`] in ticks of `tick`, rounded up: at least one.
pub(crate) fn urgent_ticks(tick: Duration) -> u64 {
    let ticks = URGENT_WITHIN.as_nanos().div_ceil(tick.as_nanos().max(1));
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

pub(crate) struct Shard {
    pub(crate) index: usize,
    pub(crate) ring: PendingRing<Placement>,
    /// New timers due within [`URGENT_WITHIN`]: the tick thread takes these first.
    pub(crate) urgent: PendingRing<Placement>,
    /// New timers from the one producer thread that holds the lane (see `lane.rs`); `None`
    /// where the process has no heavy barrier.
    lane: Option<Lane<Placement>>,
    /// [`URGENT_WITHIN`] in ticks.
    urgent_ticks: u64,
    /// The tick of the tick thread's latest pass, which "due soon" counts from.
    tick_seen: CachePadded<AtomicU64>,
    pub(crate) notices: Injector<Notice>,
    pub(crate) table: TimerTable,
    /// Where the wheel grows next, for an idle worker to make resident.
    pub(crate) prefault: Prefault,
    waker: TickWaker,
    /// Producers waiting for room in a full ring.
    waiters: CachePadded<AtomicUsize>,
    room_lock: Mutex<()>,
    room: Condvar,
    pub(crate) stop: AtomicBool,
    pub(crate) wakeups: AtomicU64,
    /// Pushes that found the ring full (see [`Stats::ring_full`](crate::Stats::ring_full)).
    pub(crate) ring_full: AtomicU64,
    /// Timers ended by `cancel`.
    pub(crate) cancelled: CachePadded<AtomicU64>,
    /// Timers whose lane push counted in [`Shard::pushed`] but found the lane closed, and
    /// which their producer took back (`PushRefused::counted`): never scheduled.
    pub(crate) withdrawn: AtomicU64,
    /// Timers whose push was refused without counting in [`Shard::pushed`], but which a stale
    /// twin fired before their producer could take them back (see `Record::withdraw`):
    /// scheduled all the same.
    pub(crate) taken_by_twins: AtomicU64,
    /// Runs the tick thread handed to the executor.
    pub(crate) handed: AtomicU64,
    /// Manual clock only: the `Settle` round in which the tick thread last caught up, and the
    /// wheel's next due tick then ([`IDLE`]: none).
    pub(crate) settled_round: AtomicU64,
    pub(crate) next_due: AtomicU64,
}

impl Shard {
    /// Shard `index` of a service ticking every `tick`, with its rings made by the caller
    /// (fallible allocations): `ring` for new timers, `urgent` for new timers due soon, and
    /// `lane` for those of the thread that holds it.
    pub(crate) fn new(
        index: usize,
        tick: Duration,
        ring: PendingRing<Placement>,
        urgent: PendingRing<Placement>,
        lane: Option<Lane<Placement>>,
    ) -> Self {
        let hold = lane.as_ref().map(|lane| Arc::clone(lane.hold()));
        Shard {
            index,
            ring,
            urgent,
            lane,
            urgent_ticks: urgent_ticks(tick),
            tick_seen: CachePadded::new(AtomicU64::new(0)),
            notices: Injector::new(),
            table: TimerTable::with_lane(hold),
            prefault: Prefault::default(),
            waker: TickWaker::new(),
            waiters: CachePadded::new(AtomicUsize::new(0)),
            room_lock: Mutex::new(()),
            room: Condvar::new(),
            stop: AtomicBool::new(false),
            wakeups: AtomicU64::new(0),
            ring_full: AtomicU64::new(0),
            cancelled: CachePadded::new(AtomicU64::new(0)),
            withdrawn: AtomicU64::new(0),
            taken_by_twins: AtomicU64::new(0),
            handed: AtomicU64::new(0),
            settled_round: AtomicU64::new(0),
            next_due: AtomicU64::new(IDLE),
        }
    }

    pub(crate) fn set_thread(&self, thread: std::thread::Thread) {
        self.waker.set_thread(thread);
    }

    /// [`Shard::push_to_ring`], for tests of the rings.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn push(&self, timer: Placement, timeout: Duration) -> Result<(), ScheduleError> {
        self.push_to_ring(timer, timeout)
    }

    /// Sends a new timer to the tick thread, waiting up to `timeout` for room. From the
    /// thread that holds the shard's lane (`holds_lane`, from
    /// [`TimerTable::claim_for_schedule`]) it goes into the lane, without a locked
    /// instruction, while the lane has room, and past the lane's backlog into the urgent ring
    /// when it is due soon; from any other thread, or when the lane is full, into the shared
    /// ring ([`Shard::push_to_ring`]).
    #[inline]
    pub(crate) fn push_from(
        &self,
        timer: Placement,
        timeout: Duration,
        holds_lane: bool,
    ) -> Result<(), PushRefused> {
        let refused = |error| PushRefused {
            error,
            counted: false,
        };
        if holds_lane {
            if let Some(lane) = &self.lane {
                return match self.push_to_lane(lane, timer) {
                    Ok(None) => Ok(()),
                    Ok(Some(timer)) => self.push_to_ring(timer, timeout).map_err(refused),
                    Err(refusal) => Err(refusal),
                };
            }
        }
        self.push_to_ring(timer, timeout).map_err(refused)
    }

    /// The lane holder's push: `Ok(Some(timer))` gives the timer back when the lane is full.
    #[inline]
    fn push_to_lane(
        &self,
        lane: &Lane<Placement>,
        timer: Placement,
    ) -> Result<Option<Placement>, PushRefused> {
        let past_backlog = self.push_past_backlog(timer, || lane.backlog_with_room(URGENT_BACKLOG));
        let Some(timer) = past_backlog.map_err(|error| PushRefused {
            error,
            counted: false,
        })?
        else {
            return Ok(None);
        };
        let Ok(position) = lane.try_push(timer) else {
            return Ok(Some(timer));
        };
        // Orders the push before the reads of the closed flag here and of the tick thread's
        // plan in the caller's wake_for; the other side's heavy barrier does the rest (`lane.rs`).
        sync::light_barrier();
        if lane.is_closed() {
            return Err(PushRefused {
                error: ScheduleError::Shutdown,
                counted: true,
            });
        }
        if lane.half_full_after(position, || self.ring.len()) {
            self.waker.wake_if_asleep();
        }
        Ok(None)
    }

    /// Puts a new timer in the shared ring, waiting up to `timeout` for room when it is full.
    ///
    /// Waiting producers sleep on a condition variable that the tick thread signals as it makes
    /// room, so they leave the CPU to it; and while anyone waits, newcomers queue behind them
    /// instead of taking the freed cells first, so no producer starves under a burst.
    ///
    /// A timer due within [`URGENT_WITHIN`] of the tick thread's latest pass goes into a small
    /// ring of its own, which the tick thread takes before the main one: in a burst the main
    /// ring can hold tens of thousands of references, milliseconds of the tick thread's work,
    /// and a timer due sooner than that would otherwise reach the wheel late. It is a way past
    /// a backlog, not more room: the small ring is used only while the main one holds at
    /// least [`URGENT_BACKLOG`] references and has room, so a small or empty main ring, a full
    /// one and the producers waiting for room behave exactly as without it. When the small
    /// ring is full, the timer takes the main ring like any other.
    ///
    /// Inlined into the caller for the common case, a ring with room and no one waiting; the
    /// rest is out of line.
    #[inline]
    fn push_to_ring(&self, timer: Placement, timeout: Duration) -> Result<(), ScheduleError> {
        // A caller that does not wait takes a free cell even while others wait.
        if timeout.is_zero() || self.waiters.load(Ordering::SeqCst) == 0 {
            let Some(timer) = self.push_past_ring_backlog(timer)? else {
                return Ok(());
            };
            return match self.ring.try_push(timer) {
                Ok(position) => {
                    if self
                        .ring
                        .half_full_after(position, || self.lane.as_ref().map_or(0, Lane::len))
                    {
                        // Far deadlines do not wake_for the tick thread: wake it before the ring
                        // is full, so no producer has to wait for room.
                        self.waker.wake_if_asleep();
                    }
                    Ok(())
                }
                Err(PushError::Closed(_)) => Err(ScheduleError::Shutdown),
                Err(PushError::Full(timer)) => self.push_to_full_ring(timer, timeout),
            };
        }
        self.wait_for_room(timer, timeout)
    }

    /// Whether a timer due at tick `deadline` is due soon (see [`Shard::push_from`]). The tick read
    /// may be old (a sleeping tick thread publishes none): then fewer timers count as due soon,
    /// and a sleeping thread has no backlog for them to wait behind.
    #[inline]
    fn due_soon(&self, deadline: u64) -> bool {
        deadline
            <= self
                .tick_seen
                .load(Ordering::Relaxed)
                .saturating_add(self.urgent_ticks)
    }

    /// Puts `timer` into the ring for timers due soon when it is due soon and the queue it
    /// would otherwise wait in (the shared ring or the lane) `has_backlog` with room (see
    /// [`Shard::push_from`]); otherwise gives it back.
    #[inline]
    fn push_past_backlog(
        &self,
        timer: Placement,
        has_backlog: impl FnOnce() -> bool,
    ) -> Result<Option<Placement>, ScheduleError> {
        if !self.due_soon(timer.deadline) || !has_backlog() {
            return Ok(Some(timer));
        }
        match self.urgent.try_push(timer) {
            Ok(_) => Ok(None),
            Err(PushError::Closed(_)) => Err(ScheduleError::Shutdown),
            Err(PushError::Full(timer)) => Ok(Some(timer)),
        }
    }

    /// [`Shard::push_past_backlog`] past the shared ring's backlog.
    #[inline]
    fn push_past_ring_backlog(&self, timer: Placement) -> Result<Option<Placement>, ScheduleError> {
        self.push_past_backlog(timer, || self.ring.backlog_with_room(URGENT_BACKLOG))
    }

    /// Tick thread: publishes the tick of the pass it begins (see [`Shard::due_soon`]).
    pub(crate) fn set_tick_seen(&self, tick: u64) {
        self.tick_seen.store(tick, Ordering::Relaxed);
    }

    /// Tick thread: the next new timer, from the ring for timers due soon first, then from the
    /// lane and the shared ring in turns of [`POP_TURN`] (see [`PopTurn`]), so that neither
    /// starves the other and a pop does not first look into a source that is empty.
    #[inline]
    pub(crate) fn pop_new(&self, turn: &mut PopTurn) -> Option<Placement> {
        if turn.left == 0 {
            turn.begin();
        }
        turn.left -= 1;
        if turn.urgent {
            if let Some(timer) = self.urgent.pop() {
                return Some(timer);
            }
            turn.urgent = false;
        }
        let Some(lane) = &self.lane else {
            return self.ring.pop();
        };
        let pop_from = |from_lane: bool| {
            if from_lane {
                lane.pop()
            } else {
                self.ring.pop()
            }
        };
        pop_from(turn.lane_first).or_else(|| {
            // The preferred source is empty: the other one for the rest of the turn.
            turn.lane_first = !turn.lane_first;
            pop_from(turn.lane_first)
        })
    }

    /// The lane, for tests elsewhere in the crate.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn lane(&self) -> Option<&Lane<Placement>> {
        self.lane.as_ref()
    }

    /// Whether both rings and the lane of new timers are empty, as far as this thread sees
    /// (see [`Shard::plan_sleep`] for the lane).
    pub(crate) fn rings_empty(&self) -> bool {
        self.urgent.is_empty()
            && self.ring.is_empty()
            && self.lane.as_ref().is_none_or(Lane::is_empty)
    }

    /// Tick thread: whether [`Shard::pop_new`] has a published timer to take.
    pub(crate) fn rings_published(&self) -> bool {
        self.urgent.head_published()
            || self.ring.head_published()
            || self.lane.as_ref().is_some_and(Lane::head_published)
    }

    /// Refuses every later new timer (see [`PendingRing::close`] and [`Lane::close`]). With a
    /// lane, the caller issues [`sync::heavy_barrier`] before it reads the records.
    pub(crate) fn close_rings(&self) {
        self.urgent.close();
        self.ring.close();
        if let Some(lane) = &self.lane {
            lane.close();
        }
    }

    /// Whether this shard has a lane (see [`Shard::close_rings`]).
    pub(crate) fn has_lane(&self) -> bool {
        self.lane.is_some()
    }

    /// Every timer ever scheduled on this shard: those queued, less those a producer took
    /// back after its lane push found the lane closed, and those a stale twin fired before
    /// their refused push could be taken back.
    pub(crate) fn scheduled(&self) -> u64 {
        (self.pushed() + self.taken_by_twins.load(Ordering::Relaxed))
            - self.withdrawn.load(Ordering::Relaxed)
    }

    /// Every new timer ever queued.
    pub(crate) fn pushed(&self) -> u64 {
        self.urgent.pushed() + self.ring.pushed() + self.lane.as_ref().map_or(0, Lane::pushed)
    }

    /// New timers queued now.
    pub(crate) fn queued(&self) -> usize {
        self.urgent.len() + self.ring.len() + self.lane.as_ref().map_or(0, Lane::len)
    }

    /// [`Shard::push_from`] when the ring was full.
    #[cold]
    fn push_to_full_ring(&self, timer: Placement, timeout: Duration) -> Result<(), ScheduleError> {
        self.ring_full.fetch_add(1, Ordering::Relaxed);
        if timeout.is_zero() {
            // The tick thread may sleep until a far deadline: let it drain the ring.
            self.wake();
            return Err(ScheduleError::Saturated);
        }
        self.wait_for_room(timer, timeout)
    }

    /// [`Shard::push_from`] that queues behind the producers already waiting for room.
    #[cold]
    fn wait_for_room(&self, timer: Placement, timeout: Duration) -> Result<(), ScheduleError> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = self.push_waiting(timer, Instant::now() + timeout);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    fn push_waiting(&self, mut timer: Placement, give_up: Instant) -> Result<(), ScheduleError> {
        let mut guard = self.room_lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let Some(unplaced) = self.push_past_ring_backlog(timer)? else {
                return Ok(());
            };
            timer = match self.ring.try_push(unplaced) {
                Ok(_) => return Ok(()),
                Err(PushError::Closed(_)) => return Err(ScheduleError::Shutdown),
                Err(PushError::Full(timer)) => timer,
            };
            let now = Instant::now();
            if now >= give_up {
                return Err(ScheduleError::Saturated);
            }
            self.wake();
            // The tick thread signals as it makes room; the short cap only bounds a missed signal.
            let nap = (give_up - now).min(Duration::from_millis(1));
            guard = self
                .room
                .wait_timeout(guard, nap)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Tick thread, after taking from the ring: lets waiting producers in.
    pub(crate) fn signal_room(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.room_lock.lock().unwrap_or_else(|e| e.into_inner());
            self.room.notify_all();
        }
    }

    /// Tells the tick thread about `notice`, waking it if it sleeps past the reference's
    /// deadline.
    pub(crate) fn post(&self, notice: Notice) {
        let due = notice.placement().deadline;
        self.notices.push(notice);
        self.waker.fence_and_wake_for(due);
    }

    /// Tells the tick thread about a cancel: it should free the entry within about a tick, so
    /// it is woken only when it went to sleep for longer than that. Reads no clock.
    pub(crate) fn wake_for_cleanup(&self) {
        self.waker.wake_for_cleanup();
    }

    /// Wakes the tick thread if it sleeps past tick `due`. Call after publishing the work.
    pub(crate) fn wake_for(&self, due: u64) {
        self.waker.wake_for(due);
    }

    /// Wakes the tick thread now.
    pub(crate) fn wake(&self) {
        self.waker.wake();
    }

    /// Tick thread: it is awake and will look at everything queued.
    pub(crate) fn mark_awake(&self) {
        self.waker.mark_awake();
    }

    /// Tick thread: at tick `now` it means to sleep until `tick` ([`IDLE`]: until woken).
    /// Returns `false` when work arrived meanwhile and it must not sleep; new timers in the
    /// ring count only when `ring_matters` (not when this tick's transfer budget is spent).
    ///
    /// A lane push is not ordered before its holder's read of the plan by the push itself
    /// (`lane.rs`): so before a sleep past the next tick, while a thread holds the lane, the
    /// heavy barrier makes every such push visible here or the plan visible to its holder. A
    /// sleep until the next tick needs none: what it might miss is seen when it wakes, at
    /// most a tick after a deadline due at once.
    pub(crate) fn plan_sleep(&self, now: u64, tick: u64, ring_matters: bool) -> bool {
        self.waker.plan_sleep(now, tick, || {
            if ring_matters
                && tick > now.saturating_add(1)
                && self.lane.as_ref().is_some_and(|lane| lane.hold().is_held())
            {
                sync::heavy_barrier();
            }
            (!ring_matters || self.rings_empty())
                && self.notices.is_empty()
                && !self.stop.load(Ordering::SeqCst)
        })
    }

    /// Tick thread, after [`Shard::plan_sleep`] said it may: sleeps until woken, and until
    /// tick `tick` at most, `timeout()` from now.
    pub(crate) fn park(&self, tick: u64, timeout: impl FnOnce() -> Duration) {
        self.waker.park(tick, timeout);
    }
}
