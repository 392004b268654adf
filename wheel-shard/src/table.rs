//! [`TimerTable`]: a shard's timer cells, addressed by the slot a `TimerId` carries.
//!
//! Cells never move, so any thread can reach one from an id in O(1) without a lock: the table is
//! a fixed directory of 64 Ki-cell segments, each allocated on first use, so a small service
//! stays small, a big one never copies, and no single allocation stalls a producer for long.
//! Producers claim free slots from a lock-free queue that retiring timers refill, or take a
//! fresh slot past the highest one used. A queued slot carries the generation its next timer
//! gets, so a producer never touches the cell at all (see `TimerCell::arrive`).
//!
//! The shared queue is kept short: past [`SHARED_FREE_TARGET`] slots, the tick thread keeps
//! the slots it retires in its own [`Recycler`] and tops the queue up once per pass (see there
//! for why).

use std::collections::TryReserveError;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crossbeam_deque::{Injector, Steal};
use crossbeam_utils::CachePadded;

use crate::state::TimerCell;

const SEGMENT_BITS: u32 = 16;
const SEGMENT_LEN: usize = 1 << SEGMENT_BITS;
/// 4 Ki segments of 64 Ki cells: 2^28 (268 million) timers per shard at once.
const SEGMENTS: usize = 1 << 12;
/// One past the highest slot a shard hands out.
const SLOTS: u32 = (SEGMENTS * SEGMENT_LEN) as u32;

/// Free slots the shared queue holds for producers, at most; the tick thread keeps the rest.
pub(crate) const SHARED_FREE_TARGET: usize = 1 << 16;

/// Free slots moved from the tick thread's store to the shared queue per pass, at most, so a
/// top-up never holds up expiries for long.
const TOP_UP_PER_PASS: usize = 8192;

/// Free slots per chunk of a [`Recycler`]'s store.
const SPARE_CHUNK: usize = 4096;

pub(crate) struct TimerTable {
    segments: Box<[OnceLock<Box<[TimerCell]>>]>,
    /// The lowest slot never handed out.
    fresh: CachePadded<AtomicU32>,
    /// One past the highest slot handed out: [`SLOTS`], lower in tests of a full table.
    limit: u32,
    /// Free slots, each with the generation its next timer gets.
    free: Injector<FreeSlot>,
    /// Free slots whose generation does not fit a [`FreeSlot`] (2^36 timers went through them).
    free_wide: Injector<(u32, u64)>,
}

/// A free slot as the queues hold it, in 8 bytes (as many free slots wait as the most timers
/// ever pending): `gen << 28 | slot`. A slot is below 2^28 ([`SLOTS`]); the generation its next
/// timer gets fits the other 36 bits until 2^36 timers (68 billion) went through that one slot,
/// after which the slot waits in the table's wide queue instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FreeSlot(u64);

const FREE_SLOT_BITS: u32 = 28;

impl FreeSlot {
    /// `None` when `gen` is too wide to pack.
    fn new(slot: u32, gen: u64) -> Option<FreeSlot> {
        debug_assert!(slot < SLOTS);
        (gen >> (64 - FREE_SLOT_BITS) == 0)
            .then_some(FreeSlot(gen << FREE_SLOT_BITS | u64::from(slot)))
    }

    fn slot(self) -> u32 {
        (self.0 & ((1 << FREE_SLOT_BITS) - 1)) as u32
    }

    fn gen(self) -> u64 {
        self.0 >> FREE_SLOT_BITS
    }
}

/// A segment of fresh cells, written whole.
fn new_segment() -> Box<[TimerCell]> {
    (0..SEGMENT_LEN).map(|_| TimerCell::new()).collect()
}

/// [`new_segment`] that reports an allocation failure instead of aborting.
fn try_new_segment() -> Result<Box<[TimerCell]>, TryReserveError> {
    let mut cells = Vec::new();
    cells.try_reserve_exact(SEGMENT_LEN)?;
    cells.extend((0..SEGMENT_LEN).map(|_| TimerCell::new()));
    Ok(cells.into_boxed_slice())
}

/// (segment, offset within it) of `slot`.
fn locate(slot: u32) -> (usize, usize) {
    (
        (slot >> SEGMENT_BITS) as usize,
        slot as usize & (SEGMENT_LEN - 1),
    )
}

/// The table ran out of its 2^28 slots (268 million live timers in one shard).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TableFull;

impl TimerTable {
    pub(crate) fn new() -> Self {
        Self::with_limit(SLOTS)
    }

    /// A table that hands out slots below `limit` only: a full table, for tests, without
    /// 2^28 cells.
    fn with_limit(limit: u32) -> Self {
        TimerTable {
            segments: (0..SEGMENTS).map(|_| OnceLock::new()).collect(),
            fresh: CachePadded::new(AtomicU32::new(0)),
            limit: limit.min(SLOTS),
            free: Injector::new(),
            free_wide: Injector::new(),
        }
    }

    /// Bytes a new table takes, with the segments of its first `slots` slots created (see
    /// [`TimerTable::try_reserve`]).
    pub(crate) fn bytes_for(slots: usize) -> usize {
        let directory = SEGMENTS * std::mem::size_of::<OnceLock<Box<[TimerCell]>>>();
        let segments = slots.div_ceil(SEGMENT_LEN).min(SEGMENTS);
        directory + segments * SEGMENT_LEN * std::mem::size_of::<TimerCell>()
    }

    /// The cell of `slot`, if that slot was ever handed out.
    pub(crate) fn cell(&self, slot: u32) -> Option<&TimerCell> {
        let (segment, offset) = locate(slot);
        self.segments
            .get(segment)?
            .get()
            .map(|cells| &cells[offset])
    }

    /// A slot for a new timer, owned by the caller until it sends the timer to the tick thread,
    /// with the generation the timer gets. The cell is not touched (see `TimerCell::arrive`);
    /// its segment exists by the time this returns.
    pub(crate) fn claim(&self) -> Result<(u32, u64), TableFull> {
        let (slot, gen) = loop {
            match self.free.steal() {
                Steal::Success(free) => break (free.slot(), free.gen()),
                Steal::Retry => continue,
                Steal::Empty => match self.free_wide.steal() {
                    Steal::Success(wide) => break wide,
                    Steal::Retry => continue,
                    Steal::Empty => break (self.claim_fresh()?, 0),
                },
            }
        };
        self.segments[locate(slot).0].get_or_init(new_segment);
        Ok((slot, gen))
    }

    /// Creates the segments for the first `slots` slots now (`Config::capacity`), so producers
    /// do not create and fault them in during a burst. An allocation the allocator refuses
    /// comes back as an error (the segments made before it stay) rather than aborting.
    pub(crate) fn try_reserve(&self, slots: usize) -> Result<(), TryReserveError> {
        for segment in self.segments.iter().take(slots.div_ceil(SEGMENT_LEN)) {
            if segment.get().is_none() {
                // A racing claim may have created it meanwhile; then ours is dropped.
                let _ = segment.set(try_new_segment()?);
            }
        }
        Ok(())
    }

    fn claim_fresh(&self) -> Result<u32, TableFull> {
        self.fresh
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .map_err(|_| TableFull)
    }

    /// Puts `slot` back on the free list; its next timer gets generation `gen`. For a slot
    /// whose timer ended, that is the generation its retired cell moved on to; for a claim
    /// whose id never got out, the one it was claimed with.
    pub(crate) fn put_back(&self, slot: u32, gen: u64) {
        match FreeSlot::new(slot, gen) {
            Some(free) => self.free.push(free),
            None => self.free_wide.push((slot, gen)),
        }
    }

    /// Slots in the shared queue.
    fn queued(&self) -> usize {
        self.free.len()
    }

    /// One past the highest slot ever handed out.
    #[cfg(test)]
    pub(crate) fn high_water(&self) -> u32 {
        self.fresh.load(Ordering::Relaxed)
    }
}

/// The tick thread's own store of free slots, for those the shared queue should not hold yet.
///
/// The shared queue (crossbeam's `Injector`) allocates a block every 63 slots, and producers
/// free the blocks as they claim. After a burst, when timers fire by the million and nobody
/// schedules, it grew by that many blocks: fresh memory that the allocator faulted in and
/// zeroed on the tick thread, a millisecond at a time (a few percent of the tick threads' time
/// in `cargo xtask bench`'s 10 M-timer round, in episodes that made timers late). Here retired
/// slots past the target wait in chunks that are kept when emptied, so a drain allocates only
/// beyond the largest one before it and never copies.
pub(crate) struct Recycler {
    /// The chunks in use come first, the last of them partly full; emptied ones stay behind
    /// for reuse.
    chunks: Vec<Vec<FreeSlot>>,
    in_use: usize,
    /// Slots the shared queue still takes before the next top-up.
    room: usize,
    target: usize,
}

impl Recycler {
    pub(crate) fn new() -> Self {
        Self::with_target(SHARED_FREE_TARGET)
    }

    fn with_target(target: usize) -> Self {
        Recycler {
            chunks: Vec::new(),
            in_use: 0,
            room: target,
            target,
        }
    }

    /// Puts back a slot whose timer ended; its next timer gets generation `gen` (the one its
    /// retired cell moved on to).
    pub(crate) fn recycle(&mut self, table: &TimerTable, slot: u32, gen: u64) {
        let Some(entry) = FreeSlot::new(slot, gen) else {
            table.put_back(slot, gen);
            return;
        };
        if self.room > 0 {
            self.room -= 1;
            table.free.push(entry);
        } else {
            self.keep(entry);
        }
    }

    /// Once per pass: tops the shared queue up towards the target from the store, and
    /// learns how much room it has left.
    pub(crate) fn top_up(&mut self, table: &TimerTable) {
        let mut room = self.target.saturating_sub(table.queued());
        for _ in 0..room.min(TOP_UP_PER_PASS) {
            let Some(entry) = self.take() else { break };
            table.free.push(entry);
            room -= 1;
        }
        self.room = room;
    }

    fn keep(&mut self, entry: FreeSlot) {
        if self.in_use == 0 || self.chunks[self.in_use - 1].len() == SPARE_CHUNK {
            if self.in_use == self.chunks.len() {
                self.chunks.push(Vec::with_capacity(SPARE_CHUNK));
            }
            self.in_use += 1;
        }
        self.chunks[self.in_use - 1].push(entry);
    }

    fn take(&mut self) -> Option<FreeSlot> {
        let chunk = self.chunks[..self.in_use].last_mut()?;
        let entry = chunk.pop();
        if chunk.is_empty() {
            self.in_use -= 1;
        }
        entry
    }

    /// Slots in the store.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.chunks[..self.in_use].iter().map(Vec::len).sum()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn segments_tile_the_slot_space() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(65_535), (0, 65_535));
        assert_eq!(locate(65_536), (1, 0));
        assert_eq!(locate(SLOTS - 1), (SEGMENTS - 1, SEGMENT_LEN - 1));
        assert_eq!(locate(SLOTS).0, SEGMENTS, "past the table: no segment");
    }

    #[test]
    fn reserve_creates_the_segments_up_front() {
        let table = TimerTable::new();
        assert!(table.cell(0).is_none());
        table.try_reserve(SEGMENT_LEN + 1).unwrap();
        assert!(table.cell(0).is_some());
        let last = 2 * SEGMENT_LEN as u32 - 1;
        assert!(table.cell(last).is_some(), "two whole segments");
        assert!(table.cell(last + 1).is_none(), "and no more");
        assert_eq!(
            table.claim().unwrap(),
            (0, 0),
            "claims still start at slot 0"
        );
    }

    #[test]
    fn a_full_table_says_so() {
        let table = TimerTable::with_limit(3);
        let claimed: Vec<_> = (0..3).map(|_| table.claim().unwrap()).collect();
        assert_eq!(claimed, [(0, 0), (1, 0), (2, 0)]);
        assert_eq!(table.claim(), Err(TableFull), "the limit is reached");
        assert_eq!(table.claim(), Err(TableFull), "and stays so");
        assert_eq!(table.high_water(), 3, "no slot past the limit");
        assert_eq!(TimerTable::new().limit, SLOTS, "a real table holds 2^28");
    }

    #[test]
    fn bytes_for_counts_whole_segments() {
        let directory = TimerTable::bytes_for(0);
        let segment = SEGMENT_LEN * std::mem::size_of::<TimerCell>();
        assert_eq!(TimerTable::bytes_for(1), directory + segment);
        assert_eq!(
            TimerTable::bytes_for(SEGMENT_LEN + 1),
            directory + 2 * segment
        );
        assert_eq!(
            TimerTable::bytes_for(usize::MAX),
            directory + SEGMENTS * segment,
            "never more than the whole table"
        );
    }

    #[test]
    fn recycled_slots_are_claimed_again() {
        let table = TimerTable::new();
        let (a, gen_a) = table.claim().unwrap();
        let (b, _) = table.claim().unwrap();
        assert_ne!(a, b);
        assert_eq!(gen_a, 0, "a fresh slot starts at generation 0");
        table.put_back(a, gen_a + 1);
        assert_eq!(
            table.claim().unwrap(),
            (a, gen_a + 1),
            "an ended timer's slot moves on"
        );
        table.put_back(a, gen_a + 1);
        assert_eq!(
            table.claim().unwrap(),
            (a, gen_a + 1),
            "an unused claim comes back as is"
        );
        assert!(table.cell(b).is_some());
        assert!(table.cell(70_000).is_none());
        assert!(table.cell(u32::MAX).is_none());
        assert_eq!(table.high_water(), 2);
    }

    #[test]
    fn free_slots_pack_into_8_bytes_and_wide_generations_still_come_back() {
        assert_eq!(std::mem::size_of::<FreeSlot>(), 8);
        let free = FreeSlot::new(SLOTS - 1, (1 << 36) - 1).unwrap();
        assert_eq!((free.slot(), free.gen()), (SLOTS - 1, (1 << 36) - 1));
        assert_eq!(FreeSlot::new(5, 1 << 36), None);

        let table = TimerTable::new();
        let (slot, _) = table.claim().unwrap();
        table.put_back(slot, 1 << 40);
        assert_eq!(
            table.claim().unwrap(),
            (slot, 1 << 40),
            "from the wide queue"
        );
        let mut recycler = Recycler::with_target(0);
        recycler.recycle(&table, slot, 1 << 47);
        assert_eq!(table.claim().unwrap(), (slot, 1 << 47));
    }

    #[test]
    fn the_tick_threads_store_keeps_what_the_shared_queue_should_not_hold() {
        let table = TimerTable::new();
        let mut recycler = Recycler::with_target(3);
        let slots: Vec<u32> = (0..SPARE_CHUNK as u32 + 10).collect();
        for &slot in &slots {
            recycler.recycle(&table, slot, 1);
        }
        assert_eq!(table.queued(), 3, "the shared queue gets the target");
        assert_eq!(
            recycler.kept(),
            slots.len() - 3,
            "the rest waits, over two chunks"
        );
        let claimed: Vec<_> = (0..3).map(|_| table.claim().unwrap()).collect();
        assert_eq!(claimed, [(0, 1), (1, 1), (2, 1)], "generations move on");
        recycler.top_up(&table);
        assert_eq!(table.queued(), 3, "a top-up refills to the target");
        assert_eq!(recycler.kept(), slots.len() - 6);

        let mut seen: Vec<u32> = claimed.iter().map(|&(slot, _)| slot).collect();
        loop {
            while table.queued() > 0 {
                seen.push(table.claim().unwrap().0);
            }
            recycler.top_up(&table);
            if table.queued() == 0 {
                break;
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, slots, "every slot comes back exactly once");
        assert_eq!(table.high_water(), 0, "no fresh slot was needed");

        let chunks = recycler.chunks.len();
        for &slot in &slots {
            recycler.recycle(&table, slot, 2);
        }
        assert_eq!(recycler.chunks.len(), chunks, "emptied chunks are reused");
    }
}
