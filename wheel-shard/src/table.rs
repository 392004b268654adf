//! [`TimerTable`]: a shard's timer cells, addressed by the slot a `TimerId` carries.
//!
//! Cells never move, so any thread can reach one from an id in O(1) without a lock: the table is
//! a fixed directory of 64 Ki-cell segments, each allocated on first use, so a small service
//! stays small, a big one never copies, and no single allocation stalls a producer for long.
//! Producers claim free slots from a lock-free queue that retiring timers refill, or take a
//! fresh slot past the highest one used. A queued slot carries the generation its next timer
//! gets, so a producer never touches the cell at all (see `TimerCell::arrive`).

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

pub(crate) struct TimerTable {
    segments: Box<[OnceLock<Box<[TimerCell]>>]>,
    /// The lowest slot never handed out.
    fresh: CachePadded<AtomicU32>,
    /// Free slots, each with the generation its next timer gets: `generation << 32 | slot`.
    free: Injector<u64>,
}

/// (segment, offset within it) of `slot`.
fn locate(slot: u32) -> (usize, usize) {
    (
        (slot >> SEGMENT_BITS) as usize,
        slot as usize & (SEGMENT_LEN - 1),
    )
}

/// The table ran out of its 2^28 slots (268 million live timers in one shard).
#[derive(Debug)]
pub(crate) struct TableFull;

impl TimerTable {
    pub(crate) fn new() -> Self {
        TimerTable {
            segments: (0..SEGMENTS).map(|_| OnceLock::new()).collect(),
            fresh: CachePadded::new(AtomicU32::new(0)),
            free: Injector::new(),
        }
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
    pub(crate) fn claim(&self) -> Result<(u32, u32), TableFull> {
        let (slot, gen) = loop {
            match self.free.steal() {
                Steal::Success(entry) => break (entry as u32, (entry >> 32) as u32),
                Steal::Retry => continue,
                Steal::Empty => break (self.claim_fresh()?, 0),
            }
        };
        self.segments[locate(slot).0]
            .get_or_init(|| (0..SEGMENT_LEN).map(|_| TimerCell::new()).collect());
        Ok((slot, gen))
    }

    fn claim_fresh(&self) -> Result<u32, TableFull> {
        self.fresh
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < SLOTS).then_some(n + 1)
            })
            .map_err(|_| TableFull)
    }

    /// Puts back a slot whose timer of generation `gen` has ended (its cell retired).
    pub(crate) fn recycle(&self, slot: u32, gen: u32) {
        self.unclaim(slot, gen.wrapping_add(1));
    }

    /// Puts back a claimed slot whose generation `gen` was never handed out in an id.
    pub(crate) fn unclaim(&self, slot: u32, gen: u32) {
        self.free.push(u64::from(gen) << 32 | u64::from(slot));
    }

    /// One past the highest slot ever handed out.
    #[cfg(test)]
    pub(crate) fn high_water(&self) -> u32 {
        self.fresh.load(Ordering::Relaxed)
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
    fn recycled_slots_are_claimed_again() {
        let table = TimerTable::new();
        let (a, gen_a) = table.claim().unwrap();
        let (b, _) = table.claim().unwrap();
        assert_ne!(a, b);
        assert_eq!(gen_a, 0, "a fresh slot starts at generation 0");
        table.recycle(a, gen_a);
        assert_eq!(
            table.claim().unwrap(),
            (a, gen_a + 1),
            "an ended timer's slot moves on"
        );
        table.unclaim(a, gen_a + 1);
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
}
