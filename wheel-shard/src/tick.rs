//! [`TickLoop`]: the body of a shard's tick thread, the only owner of the shard's `Wheel`.
//!
//! Each pass: move a chunk of new timers from the ring into the wheel, apply every notice
//! (cancels, earlier deadlines, re-arms), hand due timers to the executor, then sleep until the
//! wheel's next due slot — or not at all while the ring still has work, or forever while the
//! wheel is empty. Chunks are small, so a flood of new timers delays an expiry by a fraction of
//! a millisecond; over one tick at most `transfer_batch` commands move (Netty's rule), after
//! which the ring waits for the next tick. It never runs a callback.

use std::sync::atomic::Ordering;

use wheel_core::{TimerKey, Wheel};

use crate::contain::drop_contained;
use crate::core::Core;
use crate::executor::Run;
use crate::job::{Armed, NewTimer};
use crate::shard::{Notice, Shard, CLEANUP_TICKS, IDLE};
use crate::state::{previous_generation, widen, Admission, Ended, Expiry, TimerCell};
use crate::table::Recycler;
use crate::timer::{TimerId, Unfired};

/// Due timers handed out per pass of the loop (each pass also drains the ring).
const EXPIRE_BATCH: usize = 8192;

/// How often a transfer lets producers waiting for room in.
const ROOM_SIGNAL_EVERY: usize = 1024;

/// Ring commands moved between two looks for due timers (a few hundred microseconds of work).
const TRANSFER_CHUNK: usize = 2048;

/// Timers taken from the ring or the wheel at a time, their cells warmed together before any
/// is worked on. Each cell is a cache miss (it went cold while its slot was free or its timer
/// waited, or a `cancel` on another core wrote it); touching a batch first lets those misses
/// overlap instead of stalling the loop one by one. Profiling the 1 M-timer bench showed three
/// quarters of the tick loop's own time waiting on that one load in `expire`.
const WARM_BATCH: usize = 32;

pub(crate) struct TickLoop<'a> {
    core: &'a Core,
    shard: &'a Shard,
    wheel: Wheel<Armed>,
    /// Where the slots of ended timers go back to producers.
    recycler: Recycler,
    /// `Config::transfer_batch`: the most commands moved during one tick.
    batch: usize,
    /// The tick the transfer budget is counted for, and what is left of it.
    budget_tick: u64,
    budget_left: usize,
    /// Scratch for one warm batch each way, kept to reuse the allocation.
    incoming: Vec<NewTimer>,
    due: Vec<Armed>,
    /// Timers found out of step with their state cell (a bug if ever non-empty), each with
    /// the tick it was due at: never run, handed back at shutdown.
    set_aside: Vec<(u64, Armed)>,
}

impl<'a> TickLoop<'a> {
    /// The loop of shard `shard`, owning `wheel` (see [`TickLoop::wheel`]).
    pub(crate) fn new(core: &'a Core, shard: usize, wheel: Wheel<Armed>) -> Self {
        TickLoop {
            core,
            shard: &core.shards[shard],
            wheel,
            recycler: Recycler::new(),
            batch: transfer_budget(core),
            budget_tick: 0,
            budget_left: transfer_budget(core),
            incoming: Vec::with_capacity(WARM_BATCH),
            due: Vec::with_capacity(WARM_BATCH),
            set_aside: Vec::new(),
        }
    }

    /// A shard's empty wheel, with room for its share of `Config::capacity` already made
    /// (built by the thread that starts the service, so `TimerService::new` returns with the
    /// memory in place). The room is allocated fallibly: a refusal is an error naming
    /// `capacity`, never an abort.
    pub(crate) fn wheel(core: &Core) -> Result<Wheel<Armed>, crate::ConfigError> {
        let mut wheel = Wheel::with_slots(core.config.wheel_slots)
            .expect("Config::validate bounds wheel_slots");
        wheel
            .try_reserve(core.capacity_per_shard())
            .map_err(|_| crate::memory::refused(&core.config, "capacity"))?;
        Ok(wheel)
    }

    /// Runs until the shard is stopped, then hands back every timer that had not fired.
    pub(crate) fn run(mut self) -> Vec<Unfired> {
        let shard = self.shard;
        let manual = self.core.clock.is_manual();
        loop {
            shard.mark_awake();
            if shard.stop.load(Ordering::SeqCst) {
                break;
            }
            // Read before anything queued is looked at: a pass that began after `advance`
            // opened this round has seen all it queued (see `Settle`).
            let round = self.core.settle.round.load(Ordering::SeqCst);
            let now = self.core.clock.now();
            let may_transfer = self.transfer(now);
            let touched = self.apply_notices();
            self.expire(now);
            self.recycler.top_up(&shard.table);
            self.publish();
            let ring_waits = !shard.ring.is_empty();
            let next = self.wheel.next_expiration();
            if (ring_waits && may_transfer) || next.is_some_and(|t| t <= now) {
                continue;
            }
            if manual {
                // Virtual time moves only by `advance`, which wakes this thread: report that
                // this round is caught up and sleep until then.
                shard.next_due.store(next.unwrap_or(IDLE), Ordering::SeqCst);
                shard.settled_round.store(round, Ordering::SeqCst);
                self.core.settle.signal();
                self.sleep(now, IDLE, ring_waits);
                continue;
            }
            self.sleep(now, wake_tick(next, now, touched, ring_waits), ring_waits);
        }
        self.hand_back()
    }

    /// Sleeps until tick `wake`, unless work arrived while it was deciding to.
    fn sleep(&self, now: u64, wake: u64, ring_waits: bool) {
        if !self.shard.plan_sleep(now, wake, !ring_waits) {
            return;
        }
        self.shard.park(wake, || self.core.clock.until(wake));
        self.shard.wakeups.fetch_add(1, Ordering::Relaxed);
    }

    fn cell(&self, slot: u32) -> &'a TimerCell {
        self.shard
            .table
            .cell(slot)
            .expect("a slot in flight has a cell")
    }

    /// Moves up to one chunk of new timers from the ring into the wheel, within what is left of
    /// this tick's budget, letting waiting producers in as room appears. Returns whether budget
    /// is left for this tick.
    fn transfer(&mut self, now: u64) -> bool {
        if self.budget_tick != now {
            self.budget_tick = now;
            self.budget_left = self.batch;
        }
        let limit = self.budget_left.min(TRANSFER_CHUNK);
        let ring = &self.shard.ring;
        let mut incoming = std::mem::take(&mut self.incoming);
        let (mut moved, mut unsignalled) = (0, 0);
        while moved < limit {
            incoming.extend(std::iter::from_fn(|| ring.pop()).take(WARM_BATCH.min(limit - moved)));
            if incoming.is_empty() {
                break;
            }
            moved += incoming.len();
            unsignalled += incoming.len();
            self.warm(incoming.iter().map(|timer| timer.armed.slot));
            for timer in incoming.drain(..) {
                self.arrive(timer);
            }
            if unsignalled >= ROOM_SIGNAL_EVERY {
                unsignalled = 0;
                self.shard.signal_room();
            }
        }
        self.incoming = incoming;
        self.budget_left -= moved;
        self.shard.signal_room();
        self.budget_left > 0
    }

    /// Touches the cells of `slots` so their cache misses overlap (see [`WARM_BATCH`]).
    fn warm(&self, slots: impl Iterator<Item = u32>) {
        for slot in slots {
            if let Some(cell) = self.shard.table.cell(slot) {
                cell.warm();
            }
        }
    }

    /// Applies every notice; `true` when any was a cancel or an earlier deadline.
    fn apply_notices(&mut self) -> bool {
        let mut touched = false;
        while let Some(notice) = self.shard.notices.steal().success() {
            match notice {
                Notice::Touch { slot, gen } => {
                    self.touch(slot, gen);
                    touched = true;
                }
                Notice::Rearm(armed) => self.admit(armed),
            }
        }
        touched
    }

    /// A new timer from the ring: into the wheel, unless cancelled on the way.
    fn arrive(&mut self, timer: NewTimer) {
        let NewTimer {
            armed,
            deadline,
            repeating,
        } = timer;
        let admission = self.cell(armed.slot).arrive(armed.gen, deadline, repeating);
        self.take_in(admission, armed, deadline);
    }

    /// A repeating timer a worker re-armed: back into the wheel, unless cancelled meanwhile.
    fn admit(&mut self, armed: Armed) {
        let cell = self.cell(armed.slot);
        let admission = cell.admit(armed.gen);
        self.take_in(admission, armed, cell.deadline());
    }

    /// `deadline`: the one the timer came with, for a timer set aside.
    fn take_in(&mut self, admission: Admission, armed: Armed, deadline: u64) {
        match admission {
            Admission::Pending(deadline) => self.insert(deadline, armed),
            Admission::Cancelled => self.end_cancelled(armed),
            Admission::Stray => {
                self.set_aside(deadline, armed, "arrived (kept unrun until shutdown)")
            }
        }
    }

    fn insert(&mut self, deadline: u64, armed: Armed) {
        let cell = self.cell(armed.slot);
        let key = self.wheel.insert(deadline, armed);
        cell.set_wheel_key(Some(key.to_u64()));
    }

    /// The wheel key of timer `(slot, gen)`, if that timer is in the wheel.
    fn key_of(&self, slot: u32, gen: u32) -> Option<TimerKey> {
        let key = TimerKey::from_u64(self.cell(slot).wheel_key()?);
        (self.wheel.get(key)?.gen == gen).then_some(key)
    }

    /// A cancel or an earlier deadline for a timer: apply it now rather than at its old deadline,
    /// so a cancelled timer's memory comes back within a tick.
    fn touch(&mut self, slot: u32, gen: u32) {
        let Some(key) = self.key_of(slot, gen) else {
            return; // not in the wheel yet (the ring will bring it) or no longer
        };
        let cell = self.cell(slot);
        if cell.is_cancelled(gen) {
            cell.set_wheel_key(None);
            if let Some(armed) = self.wheel.remove(key) {
                self.end_cancelled(armed);
            }
        } else if self.wheel.deadline(key) != Some(cell.deadline()) {
            let _ = self.wheel.reschedule(key, cell.deadline());
        }
    }

    /// Hands due timers to the executor, at most [`EXPIRE_BATCH`] per pass so that a flood of
    /// expiries never keeps the ring from being drained for long; the loop comes straight back
    /// while more are due.
    fn expire(&mut self, now: u64) {
        let mut due = std::mem::take(&mut self.due);
        let (mut polled, mut handed) = (0, 0);
        while polled < EXPIRE_BATCH {
            // When these runs reach the executor, in real time: one clock read per warm batch.
            let handed_at = self.core.clock.real_nanos();
            let take = WARM_BATCH.min(EXPIRE_BATCH - polled);
            due.extend(self.wheel.advance(now).take(take).map(|entry| entry.value));
            if due.is_empty() {
                break;
            }
            polled += due.len();
            self.warm(due.iter().map(|armed| armed.slot));
            for armed in due.drain(..) {
                if let Some(run) = self.expire_one(armed, now, handed_at) {
                    self.core.executor.submit(self.shard.index, run);
                    handed += 1;
                }
            }
        }
        self.due = due;
        if handed > 0 {
            self.shard.handed.fetch_add(handed as u64, Ordering::SeqCst);
        }
        self.core.executor.notify(handed);
    }

    /// One timer the wheel handed out: the run to give the executor, or `None` when it was
    /// cancelled on the way or has moved to a later deadline (then it is back in the wheel).
    fn expire_one(&mut self, armed: Armed, now: u64, handed_at: u64) -> Option<Run> {
        let cell = self.cell(armed.slot);
        let expiry = cell.expire(armed.gen, now);
        if expiry != Expiry::Stray {
            // A stray's cell belongs to another timer, whose key it keeps.
            cell.set_wheel_key(None);
        }
        match expiry {
            Expiry::Fire(deadline) => {
                self.shard.limit.release();
                // Retired by this thread just now: the generation its next timer gets.
                let next = cell.generation();
                self.recycler.recycle(&self.shard.table, armed.slot, next);
                let id = self.id(armed.slot, previous_generation(next));
                Some(Run::new(armed.job, deadline, id, false, handed_at))
            }
            Expiry::FireRepeating(deadline) => {
                let id = self.id(armed.slot, cell.generation());
                Some(Run::new(armed.job, deadline, id, true, handed_at))
            }
            Expiry::Later(deadline) => {
                self.insert(deadline, armed);
                None
            }
            Expiry::Busy => {
                self.insert(now + 1, armed);
                None
            }
            Expiry::Cancelled => {
                self.end_cancelled(armed);
                None
            }
            Expiry::Stray => {
                self.set_aside(now, armed, "came due (kept unrun until shutdown)");
                None
            }
        }
    }

    fn id(&self, slot: u32, gen: u64) -> TimerId {
        TimerId::new(self.core.tag, self.shard.index, slot, gen)
    }

    /// A timer cancelled before it could fire: retired, counted, its slot freed, its task
    /// dropped here (its `Drop` is user code: contained).
    fn end_cancelled(&mut self, armed: Armed) {
        let Armed { slot, job, .. } = armed;
        let next = self.shard.retire_cancelled(self.cell(slot));
        self.recycler.recycle(&self.shard.table, slot, next);
        drop_contained(job, "a cancelled task", &self.core.drop_panics);
    }

    /// A timer whose state cell does not match it (a bug in the service): rather than act on
    /// someone else's timer, fire early or stop the thread, keep it unrun, count it, log it and
    /// hand it back at shutdown.
    fn set_aside(&mut self, due: u64, armed: Armed, when: &'static str) {
        self.core.report_stray(self.shard.index, armed.slot, when);
        self.set_aside.push((due, armed));
    }

    fn publish(&self) {
        self.shard
            .in_wheel
            .store(self.wheel.len(), Ordering::Relaxed);
    }

    /// At shutdown: everything still in the ring, the notices and the wheel comes back as
    /// [`Unfired`], except timers cancelled on the way, which are counted as cancelled.
    fn hand_back(mut self) -> Vec<Unfired> {
        let shard = self.shard;
        shard.ring.drain_closed(|timer| self.arrive(timer));
        self.apply_notices();
        let mut unfired = Vec::with_capacity(self.wheel.len());
        let entries: Vec<Armed> = self.wheel.drain().map(|entry| entry.value).collect();
        for armed in entries {
            if let Some(timer) = hand_back(self.core, shard, armed) {
                unfired.push(timer);
            }
        }
        for (due, armed) in std::mem::take(&mut self.set_aside) {
            unfired.push(unfired_stray(self.core, shard, due, armed));
        }
        self.publish();
        unfired
    }
}

/// Commands moved into the wheel per tick at most: `Config::transfer_batch`, which spreads a
/// burst over real ticks. Virtual time stands still until everything queued is in, so under a
/// manual clock there is no limit.
fn transfer_budget(core: &Core) -> usize {
    if core.clock.is_manual() {
        usize::MAX
    } else {
        core.config.transfer_batch
    }
}

/// The tick to sleep until ([`IDLE`]: until woken): the wheel's next due slot `next`, or sooner.
fn wake_tick(next: Option<u64>, now: u64, touched: bool, ring_waits: bool) -> u64 {
    let mut wake = next.unwrap_or(IDLE);
    if touched {
        // Cancels are arriving: look again soon instead of being woken by each one, so a
        // steady stream costs one wake-up per CLEANUP_TICKS, not one per cancel.
        wake = wake.min(now.saturating_add(CLEANUP_TICKS));
    }
    if ring_waits {
        // This tick's transfer budget is spent: the rest waits for the next tick.
        wake = wake.min(now.saturating_add(1));
    }
    wake
}

/// Takes one timer back from the service at shutdown: `Some` unless it was cancelled (its task
/// is dropped then, contained).
pub(crate) fn hand_back(core: &Core, shard: &Shard, armed: Armed) -> Option<Unfired> {
    let deadline = shard.cell(armed.slot).map_or(0, TimerCell::deadline);
    match shard.close_out(armed.slot, armed.gen) {
        Ended::Live(gen) => Some(Unfired {
            id: TimerId::new(core.tag, shard.index, armed.slot, gen),
            deadline: core.clock.instant(deadline),
            job: armed.job,
        }),
        Ended::Cancelled => {
            drop_contained(armed.job, "a cancelled task", &core.drop_panics);
            None
        }
        Ended::Stray => {
            core.report_stray(shard.index, armed.slot, "handed back");
            Some(unfired_stray(core, shard, deadline, armed))
        }
    }
}

/// A timer set aside as out of step with its cell, handed back. Its id is the newest one the
/// slot could have given it.
fn unfired_stray(core: &Core, shard: &Shard, due: u64, armed: Armed) -> Unfired {
    let current = shard.cell(armed.slot).map_or(0, TimerCell::generation);
    let gen = widen(armed.gen, current);
    Unfired {
        id: TimerId::new(core.tag, shard.index, armed.slot, gen),
        deadline: core.clock.instant(due),
        job: armed.job,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::job::Once;
    use crate::state::short;
    use crate::Config;

    fn core() -> Core {
        let config = Config {
            shards: 1,
            executor_threads: 1,
            pin_threads: false,
            ..Config::default()
        };
        let clock = crate::clock::Clock::new(config.tick);
        Core::new(config, clock).unwrap().0
    }

    fn timer(slot: u32, gen: u32, deadline: u64) -> NewTimer {
        NewTimer {
            armed: Armed {
                slot,
                gen,
                job: Box::new(Once(Some(|| {}))),
            },
            deadline,
            repeating: false,
        }
    }

    #[test]
    fn a_timer_out_of_step_with_its_cell_is_set_aside_and_handed_back() {
        let core = core();
        let shard = &core.shards[0];
        let mut tick = TickLoop::new(&core, 0, TickLoop::wheel(&core).unwrap());
        let (slot, gen) = shard.table.claim().unwrap();
        let wrong = short(gen).wrapping_add(1);
        assert!(shard.ring.try_push(timer(slot, wrong, 5)).is_ok());
        tick.transfer(0);
        assert_eq!(core.strays.load(Ordering::Relaxed), 1, "counted");
        assert_eq!(tick.wheel.len(), 0, "not in the wheel: never fired");
        assert_eq!(
            shard.cell(slot).unwrap().generation(),
            gen,
            "the cell was left alone"
        );
        // The slot's real timer still arrives and fires in the usual way.
        assert!(shard.ring.try_push(timer(slot, short(gen), 5)).is_ok());
        tick.transfer(0);
        assert_eq!(tick.wheel.len(), 1);
        let unfired = tick.hand_back();
        assert_eq!(unfired.len(), 2, "both come back at shutdown: nothing lost");
        assert!(unfired.iter().all(|timer| timer.id.slot() == slot));
    }
}
