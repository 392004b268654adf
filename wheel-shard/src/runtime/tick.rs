//! [`ShardTick`]: one shard's part of a tick thread, the only owner of the shard's `Wheel`.
//!
//! Each pass: move a chunk of new references from the rings into the wheel (those due soon
//! first: `Shard::push`), place every notice's reference, hand due references to the
//! executor, then plan the sleep until the wheel's next due slot — or no sleep at all while
//! the rings still have work, or forever while the wheel is empty. Chunks are small, so a flood
//! of new timers delays an expiry by a fraction of a millisecond; over one tick at most
//! `transfer_batch` references move (Netty's rule), after which the ring waits for the next
//! tick. The thread that drives one or more shards' passes, wakes the workers and sleeps is
//! `runtime/tick_thread.rs`.
//!
//! The tick thread never runs a callback and never reads a timer's record while the service
//! runs: what it needs to place a timer (deadline, slot) comes with the reference, and
//! whether a due reference still names a live timer is the worker's question (`Record::claim`).
//! Only at shutdown does it read records, to hand back the timers still pending.

use std::sync::atomic::Ordering;

use wheel_core::Wheel;

use crate::executor::Run;
use crate::runtime::core::Core;
use crate::shard::{
    ticket_of, Notice, Placement, PopTurn, Shard, ShardWheel, TimerRef, CLEANUP_TICKS, IDLE,
    PREFAULT_AHEAD_BYTES,
};

/// Due references handed out per pass of the loop (each pass also drains the ring).
const EXPIRE_BATCH: usize = 8192;

/// How often a transfer lets producers waiting for room in.
const ROOM_SIGNAL_EVERY: usize = 1024;

/// Ring commands moved between two looks for due timers (a few hundred microseconds of work).
const TRANSFER_CHUNK: usize = 4096;

/// Commands moved since the last sleep from which the tick thread treats the ring as flooded:
/// it then wakes at the next tick to drain it again, instead of sleeping until its next due
/// timer while producers fill the ring and end up waiting for room (see `Shard::push`).
const FLOOD: usize = 1024;

/// Due references handed out between two reads of the real clock (for `Stats::queue_delay`).
const HAND_OUT_BATCH: usize = 64;

/// References a compaction sweep examines per pass at most: each costs a look at its record,
/// so a pass stays within a fraction of a millisecond.
const COMPACT_PER_PASS: usize = 4096;

/// Stale references a wheel may hold before a sweep starts, at least: below this a sweep is
/// not worth its record reads.
const COMPACT_MIN_STALE: usize = 4096;

/// One shard's part of a tick thread (`runtime/tick_thread.rs` drives one or more): the only
/// owner of the shard's wheel, and the budgets and counts that go with it.
pub(crate) struct ShardTick<'a> {
    core: &'a Core,
    shard: &'a Shard,
    wheel: ShardWheel,
    /// Under a manual clock, virtual time waits for everything queued (see
    /// [`ShardTick::end_pass`]).
    manual: bool,
    /// `Config::transfer_batch`: the most commands moved during one tick.
    batch: usize,
    /// The tick the transfer budget is counted for, and what is left of it.
    budget_tick: u64,
    budget_left: usize,
    /// `Shard::cancelled` as of the last pass: cancels since leave stale references behind.
    seen_cancels: u64,
    /// References in the wheel that went stale since the current or last sweep began (an
    /// estimate: a cancel or an earlier deadline each leave one).
    stale: usize,
    /// References the current compaction sweep has yet to examine (0: no sweep).
    sweep_left: usize,
    /// Commands moved from the ring since the thread last slept: a flood while it is large.
    moved_since_sleep: usize,
    /// Where the moves from the shard's rings stand (`Shard::pop_new`).
    pop_turn: PopTurn,
    /// `wheel.chunk_bytes_written()` when the wheel's next fresh memory was last posted for an idle
    /// worker to make resident (`shard/prefault.rs`); `None` before the first post, or when
    /// the workers do not prepare memory.
    posted_at: Option<usize>,
    /// The table's fresh mark (`TimerTable::runs_low`) when this thread last asked a worker to
    /// grow it.
    table_low_at: Option<u32>,
}

/// What a shard's pass found as it took in new work ([`ShardTick::take_in`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Intake {
    /// Budget is left for this tick's transfers.
    may_transfer: bool,
    /// Notices or cancels arrived.
    busy: bool,
}

/// What a shard's pass leaves to do ([`ShardTick::end_pass`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Go round again at once: commands it may take now, or timers due.
    pub(crate) again: bool,
    /// The tick to sleep until otherwise ([`IDLE`]: until woken).
    pub(crate) wake: u64,
    /// New timers wait in the rings (this tick's transfer budget is spent, or a cell is not
    /// written yet): they must not keep the thread awake.
    pub(crate) ring_waits: bool,
}

impl<'a> ShardTick<'a> {
    /// Shard `shard`'s part, owning `wheel` (see [`ShardTick::wheel`]).
    pub(crate) fn new(core: &'a Core, shard: usize, wheel: ShardWheel) -> Self {
        ShardTick {
            core,
            shard: &core.shards[shard],
            wheel,
            manual: core.clock.is_manual(),
            batch: transfer_budget(core),
            budget_tick: 0,
            budget_left: transfer_budget(core),
            seen_cancels: 0,
            stale: 0,
            sweep_left: 0,
            moved_since_sleep: 0,
            pop_turn: PopTurn::default(),
            posted_at: None,
            table_low_at: None,
        }
    }

    /// A shard's empty wheel, with room for its share of `Config::capacity` already made
    /// (built by the thread that starts the service, so `TimerService::new` returns with the
    /// memory in place). The room is allocated fallibly: a refusal is an error naming
    /// `capacity`, never an abort.
    pub(crate) fn wheel(core: &Core) -> Result<ShardWheel, crate::ConfigError> {
        let mut wheel = Wheel::with_slots(core.config.wheel_slots)
            .expect("Config::validate bounds wheel_slots");
        wheel
            .try_reserve(core.capacity_per_shard())
            .map_err(|_| crate::memory::refused(&core.config, "capacity"))?;
        Ok(wheel)
    }

    pub(crate) fn shard(&self) -> &'a Shard {
        self.shard
    }

    /// A pass at tick `now` begins: moves a chunk of new references from the rings into the
    /// wheel (those due soon first) and places every notice's reference.
    pub(crate) fn take_in(&mut self, now: u64) -> Intake {
        self.shard.set_tick_seen(now);
        let may_transfer = self.transfer(now);
        let placed = self.apply_notices();
        let cancelled = self.note_cancels();
        Intake {
            may_transfer,
            busy: placed || cancelled,
        }
    }

    /// The pass ends, after the workers were woken: a bounded step of compaction, then
    /// what is left. Under a manual clock, a shard with nothing left to do now reports that it
    /// has caught up with the `Settle` round `round` (read before the pass looked at anything
    /// queued); telling `advance` is the caller's.
    pub(crate) fn end_pass(&mut self, now: u64, intake: Intake, round: u64) -> Plan {
        let sweeping = if self.manual {
            self.drop_stale_before_reporting();
            false
        } else {
            self.compact()
        };
        self.leave_memory_chores();
        let ring_waits = !self.shard.rings_empty();
        // Goes round again for commands it can take now. A cell a producer has claimed but
        // not yet written (preempted mid-push, perhaps on this very CPU) is not worth
        // spinning for: the push ends with a wake_for that wakes this thread if its timer is
        // due before the planned wake-up, and otherwise the next tick's pass takes it.
        // Under a manual clock `advance` waits for everything queued, so the pass goes
        // round until the cell is written.
        let ring_ready = if self.manual {
            ring_waits
        } else {
            self.shard.rings_published()
        };
        let next = self.wheel.next_expiration();
        let again = (ring_ready && intake.may_transfer) || next.is_some_and(|t| t <= now);
        if self.manual {
            if !again {
                // Virtual time moves only by `advance`, which wakes this thread: this round is
                // caught up, and the thread sleeps until then.
                self.shard
                    .next_due
                    .store(next.unwrap_or(IDLE), Ordering::SeqCst);
                self.shard.settled_round.store(round, Ordering::SeqCst);
            }
            return Plan {
                again,
                wake: IDLE,
                ring_waits,
            };
        }
        let flooded = self.moved_since_sleep >= FLOOD;
        Plan {
            again,
            wake: wake_tick(next, now, intake.busy || sweeping, ring_waits || flooded),
            ring_waits,
        }
    }

    /// Leaves this shard's memory chores to idle workers (`Core::prepare_memory`): posts the
    /// memory the wheel grows into next, and wakes a worker for a new chore (a post, or a
    /// table that runs low) unless one is at it already. Workers look for chores only before
    /// they sleep: while every timer of a burst is far off, nothing fires, and they would
    /// sleep through the growth, leaving the faults to this thread and the producers.
    fn leave_memory_chores(&mut self) {
        if !self.core.prepares_memory() {
            return;
        }
        let posted = self.post_fresh_memory();
        let table_low = self
            .shard
            .table
            .runs_low()
            .filter(|&fresh| self.table_low_at != Some(fresh));
        if table_low.is_some() {
            self.table_low_at = table_low;
        }
        if (posted || table_low.is_some()) && !self.core.preparing_memory() {
            self.core.executor.wake_helper();
        }
    }

    /// Posts the memory the wheel grows into next for an idle worker to make resident
    /// (`shard/prefault.rs`): once the wheel has written its first chunk, and again once it
    /// has written half of what was posted; `true` when it did. Nothing while the wheel
    /// stays within the memory it has, nor before it holds a timer: a service with many
    /// shards and few timers would otherwise hold [`PREFAULT_AHEAD_BYTES`] resident for
    /// every shard that never grows (64 idle shards: 385 MiB). The first blocks are small
    /// (64 KiB, then doubling), so the faults the first timers pay are small ones.
    fn post_fresh_memory(&mut self) -> bool {
        let written = self.wheel.chunk_bytes_written();
        if written == 0
            || self
                .posted_at
                .is_some_and(|at| written < at.saturating_add(PREFAULT_AHEAD_BYTES / 2))
        {
            return false;
        }
        // A block the allocator refuses now is refused again when the wheel needs it, and
        // reported then.
        let Ok(ranges) = self.wheel.untouched_ahead(PREFAULT_AHEAD_BYTES) else {
            return false;
        };
        let posted = self.shard.prefault.post(ranges);
        if posted {
            self.posted_at = Some(written);
        }
        posted
    }

    /// The thread is about to sleep: the flood count starts again.
    pub(crate) fn going_to_sleep(&mut self) {
        self.moved_since_sleep = 0;
    }

    /// Moves up to one chunk of new references from the ring into the wheel, within what is
    /// left of this tick's budget, letting waiting producers in as room appears. Returns
    /// whether budget is left for this tick.
    fn transfer(&mut self, now: u64) -> bool {
        if self.budget_tick != now {
            self.budget_tick = now;
            self.budget_left = self.batch;
        }
        let limit = self.budget_left.min(TRANSFER_CHUNK);
        let mut moved = 0;
        self.pop_turn.restart();
        while moved < limit {
            let Some(placement) = self.shard.pop_new(&mut self.pop_turn) else {
                break;
            };
            self.place(placement);
            moved += 1;
            if moved % ROOM_SIGNAL_EVERY == 0 {
                self.shard.signal_room();
            }
        }
        self.budget_left -= moved;
        self.moved_since_sleep += moved;
        self.shard.signal_room();
        self.budget_left > 0
    }

    fn place(&mut self, placement: Placement) {
        self.wheel.insert(placement.deadline, placement.slot);
    }

    /// Places every notice's reference; `true` when there was any.
    fn apply_notices(&mut self) -> bool {
        let mut placed = false;
        while let Some(notice) = self.shard.notices.steal().success() {
            match notice {
                Notice::Place(placement) => self.place(placement),
                Notice::Earlier(placement) => {
                    // The timer's previous reference is stale now.
                    self.stale += 1;
                    self.place(placement);
                }
            }
            placed = true;
        }
        placed
    }

    /// Whether timers of this shard were cancelled since the last pass (each left a stale
    /// reference behind).
    fn note_cancels(&mut self) -> bool {
        let cancels = self.shard.cancelled.load(Ordering::Relaxed);
        let new = cancels.wrapping_sub(self.seen_cancels);
        self.seen_cancels = cancels;
        self.stale = self.stale.saturating_add(new as usize);
        new > 0
    }

    /// Under a manual clock: once every new reference is in the wheel, removes every stale
    /// one (of a cancelled or moved timer) before the wheel's next due tick is reported, so
    /// `ManualClock::advance_to_next` never moves time to a deadline no timer has any more.
    /// Each removal costs a record read, which a real clock's sweeps spread over passes
    /// ([`ShardTick::compact`]); virtual time waits for it instead.
    fn drop_stale_before_reporting(&mut self) {
        if self.stale == 0 || !self.shard.rings_empty() {
            return;
        }
        self.stale = 0;
        let table = &self.shard.table;
        // Only whole rounds run under a manual clock, so this one starts at the first slot.
        self.wheel.retain(usize::MAX, |deadline, &slot| {
            table
                .record(slot)
                .is_some_and(|record| record.is_live(ticket_of(deadline)))
        });
    }

    /// Removes stale references (of cancelled or moved timers) from the wheel, so their memory
    /// comes back long before their deadlines: a sweep over the whole wheel starts once about
    /// a quarter of it may be stale (so stale references cost at most a third more than the
    /// live ones, and each cancel about four record reads), and goes [`COMPACT_PER_PASS`]
    /// references a pass. Returns whether a sweep is under way.
    fn compact(&mut self) -> bool {
        if self.sweep_left == 0 {
            if self.stale < COMPACT_MIN_STALE.max(self.wheel.len() / 4) {
                return false;
            }
            self.sweep_left = self.wheel.len();
            self.stale = 0;
        }
        let table = &self.shard.table;
        // Plain `retain`: with one load per record the processor overlaps the misses itself,
        // and explicit prefetching measured slower (see docs/performance.md).
        let examined =
            self.wheel
                .retain(COMPACT_PER_PASS.min(self.sweep_left), |deadline, &slot| {
                    table
                        .record(slot)
                        .is_some_and(|record| record.is_live(ticket_of(deadline)))
                });
        self.sweep_left = self.sweep_left.saturating_sub(examined.max(1));
        self.sweep_left > 0
    }

    /// Hands due references to the executor, at most [`EXPIRE_BATCH`] per pass so that a flood
    /// of expiries never keeps the ring from being drained for long; the loop comes straight
    /// back while more are due. Returns how many it handed out; waking workers for them is the
    /// caller's.
    pub(crate) fn expire(&mut self, now: u64) -> usize {
        let shard = self.shard.index;
        let mut handed = 0;
        while handed < EXPIRE_BATCH {
            // When these runs reach the executor, in real time: one clock read per batch.
            let handed_at = self.core.clock.real_nanos();
            let take = HAND_OUT_BATCH.min(EXPIRE_BATCH - handed);
            let before = handed;
            for entry in self.wheel.advance(now).take(take) {
                let run = Run {
                    shard: shard as u32,
                    timer: TimerRef::due_at(entry.value, entry.deadline),
                    now,
                    handed_at,
                };
                self.core.executor.submit(run);
                handed += 1;
            }
            if handed == before {
                break;
            }
        }
        if handed > 0 {
            self.shard.handed.fetch_add(handed as u64, Ordering::SeqCst);
        }
        handed
    }
}

impl Drop for ShardTick<'_> {
    /// The wheel goes with this: what was posted of its memory is withdrawn first, waiting
    /// for a worker populating it (see `shard/prefault.rs`).
    fn drop(&mut self) {
        self.shard.prefault.retire();
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
/// `busy`: notices or cancels arrived during this pass. `next_tick`: the ring needs a look by
/// the next tick.
fn wake_tick(next: Option<u64>, now: u64, busy: bool, next_tick: bool) -> u64 {
    let mut wake = next.unwrap_or(IDLE);
    if busy {
        // Notices or cancels are arriving: look again soon instead of being woken by each
        // one, so a steady stream costs one wake-up per CLEANUP_TICKS, not one per call.
        wake = wake.min(now.saturating_add(CLEANUP_TICKS));
    }
    if next_tick {
        // This tick's transfer budget is spent (the rest waits for the next tick), or a flood
        // is coming in.
        wake = wake.min(now.saturating_add(1));
    }
    wake
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::runtime::hand_back::hand_back_pending;
    use crate::shard::{Cancelled, URGENT_BACKLOG, URGENT_CAPACITY};
    use crate::task::Task;
    use crate::Config;

    fn core() -> Core {
        let config = Config {
            shards: 1,
            executor_threads: 1,
            pin_threads: false,
            ..Config::default()
        };
        let clock = crate::clock::Clock::new(config.tick);
        Core::new(config, clock).unwrap()
    }

    /// Arms a record of `shard` for `deadline` and pushes its reference as `try_schedule`
    /// does.
    fn try_push(shard: &Shard, deadline: u64) -> Result<(), crate::ScheduleError> {
        let slot = shard.table.claim(deadline).unwrap();
        shard.table.record_of(slot).arm(deadline, Task::once(|| {}));
        shard.push(Placement { deadline, slot }, std::time::Duration::ZERO)
    }

    /// [`try_push`] into a shard with room.
    fn push(shard: &Shard, deadline: u64) {
        try_push(shard, deadline).unwrap();
    }

    #[test]
    fn timers_due_soon_overtake_a_ring_full_of_later_ones() {
        let core = core();
        let shard = &core.shards[0];
        let mut tick = ShardTick::new(&core, 0, ShardTick::wheel(&core).unwrap());
        let now = 1000;
        shard.set_tick_seen(now);
        for _ in 0..TRANSFER_CHUNK + 10 {
            push(shard, now + 1_000_000);
        }
        let soon = now + crate::shard::urgent_ticks(core.config.tick);
        push(shard, soon);
        assert_eq!(shard.urgent.len(), 1, "due soon: the urgent ring");
        assert_eq!(
            shard.ring.len(),
            TRANSFER_CHUNK + 10,
            "the rest: the main ring"
        );
        tick.transfer(now);
        assert_eq!(
            shard.urgent.len(),
            0,
            "moved in the first transfer, though queued last"
        );
        assert_eq!(tick.wheel.len(), TRANSFER_CHUNK, "one chunk moved");
        assert_eq!(shard.ring.len(), 11, "the main ring's last ones wait");
    }

    /// The lane and the shared ring take turns of `POP_TURN` pops, a turn that finds its
    /// source empty goes on with the other, and every turn looks at the ring for timers due
    /// soon first.
    #[test]
    fn new_timers_come_from_the_lane_and_the_ring_in_turns_due_soon_first() {
        use crate::shard::POP_TURN;
        let core = core();
        let shard = &core.shards[0];
        let Some(lane) = shard.lane() else {
            // No lane where there is no heavy barrier: due soon first, then the shared ring.
            let at = |deadline| Placement { deadline, slot: 0 };
            shard.ring.try_push(at(2_000_000)).unwrap();
            shard.urgent.try_push(at(7)).unwrap();
            let mut pop_turn = PopTurn::default();
            let mut pop = || shard.pop_new(&mut pop_turn).map(|p| p.deadline);
            assert_eq!((pop(), pop(), pop()), (Some(7), Some(2_000_000), None));
            return;
        };
        assert!(lane.hold().try_take());
        let turn = POP_TURN as u64;
        let (from_lane, from_ring) = (1_000_000, 2_000_000);
        for i in 0..3 * turn {
            lane.try_push(Placement {
                deadline: from_lane + i,
                slot: 0,
            })
            .unwrap();
        }
        for i in 0..turn - 1 {
            shard
                .ring
                .try_push(Placement {
                    deadline: from_ring + i,
                    slot: 0,
                })
                .unwrap();
        }
        let mut pop_turn = PopTurn::default();
        let mut pop = || shard.pop_new(&mut pop_turn).map(|p| p.deadline);
        let source = |deadline: u64| {
            if deadline >= from_ring {
                "ring"
            } else {
                "lane"
            }
        };
        let first: Vec<_> = (0..turn).map(|_| source(pop().unwrap())).collect();
        assert!(first.iter().all(|&s| s == first[0]), "one source a turn");
        // Due soon, queued mid-turn: taken at the start of the next turn.
        shard
            .urgent
            .try_push(Placement {
                deadline: 7,
                slot: 0,
            })
            .unwrap();
        assert_eq!(pop(), Some(7), "the ring for timers due soon first");
        let second: Vec<_> = (1..turn).map(|_| source(pop().unwrap())).collect();
        assert!(
            second.iter().all(|&s| s != first[0]),
            "then the other source"
        );
        // The ring is empty now: the rest of the lane, in the ring's turns too.
        let rest: Vec<_> = std::iter::from_fn(&mut pop).collect();
        assert_eq!(rest.len() as u64, 2 * turn);
        assert!(rest.iter().all(|&d| source(d) == "lane"));
        assert!(rest.windows(2).all(|w| w[0] < w[1]), "in order");
    }

    #[test]
    fn a_full_main_ring_takes_no_timer_due_soon_either() {
        let core = core();
        let shard = &core.shards[0];
        shard.set_tick_seen(50);
        while !shard.ring.is_full() {
            push(shard, 1_000_000);
        }
        assert_eq!(
            try_push(shard, 60),
            Err(crate::ScheduleError::Saturated),
            "the small ring is a way past the backlog, not more room"
        );
        assert_eq!(shard.urgent.len(), 0);
    }

    /// Pushes far timers until the main ring holds `backlog`.
    fn fill_main_ring(shard: &Shard, backlog: usize) {
        while shard.ring.len() < backlog {
            push(shard, 1_000_000);
        }
    }

    #[test]
    fn without_a_backlog_timers_due_soon_take_the_main_ring() {
        let core = core();
        let shard = &core.shards[0];
        shard.set_tick_seen(50);
        fill_main_ring(shard, URGENT_BACKLOG - 1);
        push(shard, 60);
        assert_eq!(shard.urgent.len(), 0, "a backlog too short to go past");
        push(shard, 60);
        assert_eq!(shard.urgent.len(), 1, "now there is one");
    }

    #[test]
    fn a_full_urgent_ring_sends_timers_due_soon_to_the_main_ring() {
        let core = core();
        let shard = &core.shards[0];
        shard.set_tick_seen(50);
        fill_main_ring(shard, URGENT_BACKLOG);
        for _ in 0..URGENT_CAPACITY + 3 {
            push(shard, 60);
        }
        assert_eq!(shard.urgent.len(), URGENT_CAPACITY);
        assert_eq!(shard.ring.len(), URGENT_BACKLOG + 3);
        assert_eq!(
            shard.pushed(),
            (URGENT_BACKLOG + URGENT_CAPACITY + 3) as u64
        );
    }

    #[test]
    fn shutdown_hands_back_the_timers_in_both_rings() {
        let core = core();
        let shard = &core.shards[0];
        let tick = ShardTick::new(&core, 0, ShardTick::wheel(&core).unwrap());
        shard.set_tick_seen(50);
        fill_main_ring(shard, URGENT_BACKLOG);
        push(shard, 60);
        assert_eq!(shard.urgent.len(), 1);
        shard.close_rings();
        drop(tick);
        let mut unfired = Vec::new();
        hand_back_pending(&core, shard, &mut unfired);
        let deadlines: Vec<_> = unfired
            .iter()
            .map(|unfired| core.clock.deadline_at(unfired.deadline))
            .collect();
        assert_eq!(deadlines.len(), URGENT_BACKLOG + 1, "nothing lost");
        assert_eq!(deadlines.iter().filter(|&&d| d == 60).count(), 1);
    }

    #[test]
    fn references_of_cancelled_timers_are_compacted_away() {
        let core = core();
        let shard = &core.shards[0];
        let mut tick = ShardTick::new(&core, 0, ShardTick::wheel(&core).unwrap());
        let n = 3 * COMPACT_MIN_STALE;
        let mut timers = Vec::new();
        for i in 0..n {
            let deadline = 1_000_000 + i as u64;
            let slot = shard.table.claim(deadline).unwrap();
            let record = shard.table.record_of(slot);
            let (gen, _) = record.arm(deadline, Task::once(|| {}));
            tick.place(Placement { deadline, slot });
            timers.push((slot, gen));
        }
        assert!(!tick.compact(), "nothing stale: no sweep");
        for &(slot, gen) in &timers[..2 * n / 3] {
            let Cancelled::Now(task) = shard.table.record_of(slot).cancel(gen) else {
                panic!("pending")
            };
            drop(task);
            shard.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        assert!(tick.note_cancels());
        let mut passes = 0;
        while tick.compact() {
            passes += 1;
        }
        assert!(passes >= 2, "a sweep goes a bounded batch per pass");
        assert_eq!(tick.wheel.len(), n / 3, "exactly the stale references went");
        drop(tick);
        let mut unfired = Vec::new();
        hand_back_pending(&core, shard, &mut unfired);
        assert_eq!(unfired.len(), n / 3, "the live timers are all still there");
    }
}
