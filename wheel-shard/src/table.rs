//! [`TimerTable`]: a shard's timer cells, addressed by the slot a `TimerId` carries.
//!
//! Cells never move, so any thread can reach one from an id in O(1) without a lock: the table is
//! a fixed array of segments that double in size (1 Ki, 1 Ki, 2 Ki, 4 Ki, … cells) and are
//! allocated on first use, so a small service stays small and a big one never copies. Producers
//! claim free slots from a lock-free queue that retiring timers refill, or take a fresh slot past
//! the highest one used.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crossbeam_deque::{Injector, Steal};
use crossbeam_utils::CachePadded;

use crate::state::TimerCell;

const FIRST_SEGMENT_BITS: u32 = 10;
/// Segments 0 and 1 hold 2^10 cells each, segment k > 1 holds 2^(k+9): 23 cover every u32 slot.
const SEGMENTS: usize = 33 - FIRST_SEGMENT_BITS as usize;

pub(crate) struct TimerTable {
    segments: [OnceLock<Box<[TimerCell]>>; SEGMENTS],
    /// The lowest slot never handed out.
    fresh: CachePadded<AtomicU32>,
    free: Injector<u32>,
}

/// (segment, offset within it) of `slot`.
fn locate(slot: u32) -> (usize, usize) {
    if slot < 1 << FIRST_SEGMENT_BITS {
        return (0, slot as usize);
    }
    let top = 31 - slot.leading_zeros();
    let segment = (top - FIRST_SEGMENT_BITS + 1) as usize;
    (segment, (slot - (1 << top)) as usize)
}

fn segment_len(segment: usize) -> usize {
    1 << (FIRST_SEGMENT_BITS as usize + segment.saturating_sub(1))
}

/// The table ran out of its 2^32 slots (about 4 billion live timers in one shard).
#[derive(Debug)]
pub(crate) struct TableFull;

impl TimerTable {
    pub(crate) fn new() -> Self {
        TimerTable {
            segments: [const { OnceLock::new() }; SEGMENTS],
            fresh: CachePadded::new(AtomicU32::new(0)),
            free: Injector::new(),
        }
    }

    /// The cell of `slot`, if that slot was ever handed out.
    pub(crate) fn cell(&self, slot: u32) -> Option<&TimerCell> {
        let (segment, offset) = locate(slot);
        self.segments[segment].get().map(|cells| &cells[offset])
    }

    /// A slot for a new timer, free and owned by the caller until it arms it.
    pub(crate) fn claim(&self) -> Result<(u32, &TimerCell), TableFull> {
        let slot = loop {
            match self.free.steal() {
                Steal::Success(slot) => break slot,
                Steal::Retry => continue,
                Steal::Empty => break self.claim_fresh()?,
            }
        };
        let (segment, offset) = locate(slot);
        let cells = self.segments[segment].get_or_init(|| {
            (0..segment_len(segment))
                .map(|_| TimerCell::new())
                .collect()
        });
        Ok((slot, &cells[offset]))
    }

    fn claim_fresh(&self) -> Result<u32, TableFull> {
        self.fresh
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
            .map_err(|_| TableFull)
    }

    /// Puts a retired slot back for reuse.
    pub(crate) fn recycle(&self, slot: u32) {
        self.free.push(slot);
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
        assert_eq!(locate(1023), (0, 1023));
        assert_eq!(locate(1024), (1, 0));
        assert_eq!(locate(2047), (1, 1023));
        assert_eq!(locate(2048), (2, 0));
        assert_eq!(
            locate(u32::MAX),
            (SEGMENTS - 1, segment_len(SEGMENTS - 1) - 1)
        );
        for slot in [5u32, 1500, 3000, 1 << 20, (1 << 20) + 7] {
            let (segment, offset) = locate(slot);
            assert!(offset < segment_len(segment));
        }
    }

    #[test]
    fn recycled_slots_are_claimed_again() {
        let table = TimerTable::new();
        let (a, _) = table.claim().unwrap();
        let (b, _) = table.claim().unwrap();
        assert_ne!(a, b);
        table.recycle(a);
        assert_eq!(table.claim().unwrap().0, a);
        assert!(table.cell(b).is_some());
        assert!(table.cell(5000).is_none());
        assert_eq!(table.high_water(), 2);
    }
}
