//! One level of the hierarchy, and the arithmetic that places a deadline on a level.
//!
//! With `2^b` slots per level, level `k` has slots `2^(k·b)` ticks wide and spans `2^((k+1)·b)`
//! ticks. Read a tick count as a number in base `2^b`: digit `k` of a deadline is its slot on
//! level `k`. An entry goes on the level of the highest digit in which its deadline differs from
//! the wheel's current tick, in the slot given by that digit of the deadline. All higher digits
//! are equal, so the slot lies within the level's current rotation, strictly after the current
//! tick's slot: a level never wraps, and finding the next due slot is one masked
//! `trailing_zeros` on the level's occupancy bitmap.

use crate::refs::{Pool, Refs};
use crate::slab::Slab;

/// One slot: the slab indices of its entries in arrival order, FIFO.
///
/// Removing an entry does not touch the array (that would be a second cache miss beside the
/// node's): the reference stays behind, *stale*, and is skipped when the slot is walked. A
/// reference at position `p` of slot `s` on level `l` is live exactly when its node says it is
/// at `(l, s, p)`. A freed node is vacant; a node reused into another slot names that slot;
/// a node reused into this same slot sits at a later position, because positions are never
/// handed out twice while stale references remain (the array only grows until it is cleared,
/// taken, or compacted, and each of those drops the stale references). Stale references go
/// when the slot empties, and are compacted away once they outnumber the live ones: a few at a
/// time (see [`Compaction`]), because a slot can hold millions of references.
///
/// An array rather than an intrusive list because walking it issues independent loads: a
/// cascade over cold entries overlaps its cache misses instead of paying them one after
/// another along a chain of `next` pointers. It is kept in chunks from the level's pool (see
/// [`Refs`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotList {
    items: Refs,
    /// References before `head` were handed out already.
    head: u32,
    live: u32,
}

/// How far ahead of the entry in hand a slot walk prefetches nodes: enough to overlap the
/// misses of a few entries, few enough that the prefetched lines are still in L1 when used.
const LOOKAHEAD: usize = 24;

/// References a compaction looks at per entry removed from its level. Compaction starts when a
/// slot's references number twice its live entries; looking at four per removal finishes it
/// before removals could double the slot again, so memory stays within a small factor of the
/// live entries.
const COMPACT_PER_UNLINK: usize = 4;

/// The references a compaction looks at in one go, once removals have earned it that many.
/// Interleaving a few with every removal cost 30 % more per removal than a tight walk does
/// (the walk's prefetches overlap best in a run); batches keep the walk tight and still bound
/// what one removal can pay to some microseconds.
const COMPACT_BATCH: usize = 256;

/// A compaction in progress on one slot of a level: it walks the slot's references from `read`
/// on and moves the live ones down to `write`, in order, updating the positions their nodes
/// record.
///
/// It runs a few steps per removal rather than all at once: a level-2 slot of a 1 ms wheel can
/// hold millions of references, and compacting one whole stalled the caller for tens of
/// milliseconds (24 ms measured at 1 M pending), long enough to make every timer of a shard
/// late. In between, the slot stays usable as it is: positions before `write` hold live
/// references in order, those from `write` to `read` only references whose nodes have moved
/// down (or were stale already), so they read as stale, and the rest is as it was. Appends go
/// to the end, and a walk from the head sees the live entries in their order.
#[derive(Clone, Copy, Debug)]
struct Compaction {
    slot: usize,
    read: usize,
    write: usize,
    /// References the removals since the last batch have earned.
    credit: usize,
}

/// `2^bits` slot lists and a bitmap of the non-empty ones. The wheel keeps two per level (see
/// `Wheel`'s early cascade), each with its own number for nodes to record.
#[derive(Clone)]
pub(crate) struct Level {
    /// The number nodes on this level record.
    number: u8,
    lists: Box<[SlotList]>,
    occupied: Box<[u64]>,
    /// How many bits of `occupied` are set.
    occupied_slots: u32,
    /// Chunks for the slots' arrays, shared by the slots of this level.
    pool: Pool,
    /// The slot being compacted, if any: one at a time per level.
    compaction: Option<Compaction>,
}

/// A slot's references, taken out whole by [`Level::take`] for a cascade.
pub(crate) struct Taken {
    items: Refs,
    level: u8,
    slot: u16,
    head: usize,
}

impl Taken {
    /// The next live node, in order, prefetching ahead. A node relinked elsewhere stops saying
    /// it is here, but its reference here has been passed by then: a node's latest place in a
    /// slot is its last reference there.
    pub(crate) fn next_live<T>(&mut self, slab: &Slab<T>) -> Option<u32> {
        while self.head < self.items.len() {
            let pos = self.head;
            self.head += 1;
            if let Some(index) = live_at(slab, &self.items, pos, self.level, self.slot) {
                return Some(index);
            }
        }
        None
    }
}

impl Level {
    pub(crate) fn new(number: usize, slots: usize) -> Self {
        Level {
            number: number as u8,
            lists: (0..slots).map(|_| SlotList::default()).collect(),
            occupied: vec![0; slots.div_ceil(64)].into_boxed_slice(),
            occupied_slots: 0,
            pool: Pool::default(),
            compaction: None,
        }
    }

    /// Bytes [`Level::new`] allocates for `slots` slots (their arrays grow later, as entries
    /// arrive).
    pub(crate) fn bytes(slots: usize) -> usize {
        slots * std::mem::size_of::<SlotList>() + slots.div_ceil(64) * std::mem::size_of::<u64>()
    }

    /// Whether no slot holds an entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.occupied_slots == 0
    }

    /// Whether `slot` holds an entry.
    pub(crate) fn is_occupied(&self, slot: usize) -> bool {
        self.occupied[slot / 64] & (1 << (slot % 64)) != 0
    }

    fn mark_occupied(&mut self, slot: usize) {
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.occupied_slots += 1;
    }

    fn mark_empty(&mut self, slot: usize) {
        self.occupied[slot / 64] &= !(1 << (slot % 64));
        self.occupied_slots -= 1;
    }

    /// The first non-empty slot at or after `from`.
    pub(crate) fn next_occupied(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        let mut bits = self.occupied.get(word)? & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            bits = *self.occupied.get(word)?;
        }
    }

    /// Appends node `index` to `slot` and returns where it now is, (level number, slot,
    /// position): what the caller records in the node.
    pub(crate) fn push_back(&mut self, slot: usize, index: u32) -> (u8, u16, u32) {
        if self.lists[slot].live == 0 {
            self.mark_occupied(slot);
        }
        let list = &mut self.lists[slot];
        list.live += 1;
        let pos = list.items.push(&mut self.pool, index);
        (self.number, slot as u16, pos)
    }

    /// Counts one of `slot`'s entries gone (its node no longer says it is here). Its reference
    /// stays, stale, until the slot empties or is compacted; a slot whose stale references
    /// outnumber the live ones starts a compaction, and every removal moves the level's
    /// compaction on by a few references (walked in batches).
    pub(crate) fn unlink<T>(&mut self, slab: &mut Slab<T>, slot: usize) {
        let list = &mut self.lists[slot];
        list.live -= 1;
        if list.live == 0 {
            self.empty(slot);
        } else if self.compaction.is_none()
            && list.items.len() - list.head as usize > 2 * list.live as usize + 32
        {
            // Positions before the head were walked already: every reference there is stale,
            // so the live ones can move all the way down.
            self.compaction = Some(Compaction {
                slot,
                read: list.head as usize,
                write: 0,
                credit: 0,
            });
            list.head = 0;
        }
        if let Some(at) = &mut self.compaction {
            at.credit += COMPACT_PER_UNLINK;
            if at.credit >= COMPACT_BATCH {
                at.credit -= COMPACT_BATCH;
                self.compact_some(slab, COMPACT_BATCH);
            }
        }
    }

    /// Moves the level's compaction on by up to `budget` references, and ends it once it has
    /// looked at all of its slot's.
    fn compact_some<T>(&mut self, slab: &mut Slab<T>, budget: usize) {
        let Some(mut at) = self.compaction else {
            return;
        };
        let list = &mut self.lists[at.slot];
        // A walk from the head may have gone past the cursors meanwhile.
        at.write = at.write.max(list.head as usize);
        at.read = at.read.max(at.write);
        let end = list.items.len().min(at.read + budget);
        for pos in at.read..end {
            if let Some(index) = live_at(slab, &list.items, pos, self.number, at.slot as u16) {
                slab.place(index, self.number, at.slot as u16, at.write as u32);
                list.items.set(at.write, index);
                at.write += 1;
            }
        }
        at.read = end;
        if at.read == list.items.len() {
            debug_assert!(at.write - list.head as usize >= list.live as usize);
            list.items.truncate(&mut self.pool, at.write);
            self.compaction = None;
        } else {
            self.compaction = Some(at);
        }
    }

    /// Forgets the compaction of `slot`, whose references are going away whole.
    fn drop_compaction(&mut self, slot: usize) {
        if self.compaction.is_some_and(|at| at.slot == slot) {
            self.compaction = None;
        }
    }

    /// Takes the first live entry of `slot`, if any.
    pub(crate) fn pop_front<T>(&mut self, slab: &Slab<T>, slot: usize) -> Option<u32> {
        let list = &mut self.lists[slot];
        while (list.head as usize) < list.items.len() {
            let pos = list.head as usize;
            list.head += 1;
            if let Some(index) = live_at(slab, &list.items, pos, self.number, slot as u16) {
                list.live -= 1;
                if list.live == 0 {
                    self.empty(slot);
                }
                return Some(index);
            }
        }
        None
    }

    /// Empties `slot`, handing over its references. Give them back with [`Level::restore`]
    /// so their chunks are reused.
    pub(crate) fn take(&mut self, slot: usize) -> Taken {
        let list = &mut self.lists[slot];
        let taken = Taken {
            items: std::mem::take(&mut list.items),
            level: self.number,
            slot: slot as u16,
            head: list.head as usize,
        };
        list.head = 0;
        list.live = 0;
        self.mark_empty(slot);
        self.drop_compaction(slot);
        taken
    }

    /// Takes back the references [`Level::take`] handed over, their chunks into the pool.
    pub(crate) fn restore(&mut self, taken: Taken) {
        let mut items = taken.items;
        items.clear(&mut self.pool);
    }

    fn empty(&mut self, slot: usize) {
        let list = &mut self.lists[slot];
        list.items.clear(&mut self.pool);
        list.head = 0;
        self.mark_empty(slot);
        self.drop_compaction(slot);
    }
}

/// The node referenced at `pos` of a slot's `items`, if that reference is live; every slot walk
/// goes through here, and it starts loading the node `LOOKAHEAD` references on.
fn live_at<T>(slab: &Slab<T>, items: &Refs, pos: usize, level: u8, slot: u16) -> Option<u32> {
    if let Some(ahead) = items.get(pos + LOOKAHEAD) {
        slab.prefetch(ahead);
    }
    let index = items
        .get(pos)
        .expect("a walk stays below the array's length");
    slab.is_at(index, level, slot, pos as u32).then_some(index)
}

/// The level arithmetic for `2^bits` slots per level.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub(crate) bits: u32,
    /// The level of each bit position of a tick: `bit / bits`, looked up because placing an
    /// entry is on every insert and cascade, and a division by a runtime value is not cheap.
    level_of_bit: [u8; 64],
}

impl Geometry {
    pub(crate) const fn new(bits: u32) -> Self {
        let mut level_of_bit = [0; 64];
        let mut bit = 0;
        while bit < 64 {
            level_of_bit[bit] = (bit as u32 / bits) as u8;
            bit += 1;
        }
        Geometry { bits, level_of_bit }
    }

    /// Enough levels that every `u64` tick has a level: no overflow list is needed.
    pub(crate) fn levels(self) -> usize {
        (63 / self.bits + 1) as usize
    }

    pub(crate) fn slots(self) -> usize {
        1 << self.bits
    }

    fn shift(self, level: usize) -> u32 {
        self.bits * level as u32
    }

    /// Digit `level` of `tick`: its slot on that level.
    pub(crate) fn slot_for(self, level: usize, tick: u64) -> usize {
        ((tick >> self.shift(level)) & (self.slots() as u64 - 1)) as usize
    }

    /// The (level, slot) where an entry due at `deadline` belongs when the clock reads `now`:
    /// the current level-0 slot if it is due already.
    pub(crate) fn place(self, now: u64, deadline: u64) -> (usize, usize) {
        if deadline <= now {
            return (0, self.slot_for(0, now));
        }
        let level = self.level_for(now, deadline);
        (level, self.slot_for(level, deadline))
    }

    /// The level for `deadline` seen from `now` (`deadline > now`): the level of the highest
    /// digit in which they differ.
    pub(crate) fn level_for(self, now: u64, deadline: u64) -> usize {
        let significant = 63 - ((now ^ deadline) | (self.slots() as u64 - 1)).leading_zeros();
        self.level_of_bit[significant as usize] as usize
    }

    /// The first tick of `level`'s next rotation after the one that contains `now` (`None`
    /// past `u64`).
    pub(crate) fn next_rotation(self, level: usize, now: u64) -> Option<u64> {
        let span_bits = self.shift(level) + self.bits;
        if span_bits >= 64 {
            return None;
        }
        ((now >> span_bits) + 1).checked_mul(1 << span_bits)
    }

    /// The first tick of `slot` on `level`, in the rotation that contains `now`.
    pub(crate) fn slot_start(self, level: usize, slot: usize, now: u64) -> u64 {
        let span_bits = self.shift(level) + self.bits;
        let rotation = if span_bits >= 64 {
            0
        } else {
            now & !((1u64 << span_bits) - 1)
        };
        rotation | ((slot as u64) << self.shift(level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Geometry = Geometry::new(6);

    #[test]
    fn default_geometry_covers_u64() {
        assert_eq!(G.levels(), 11);
        assert_eq!(G.level_for(0, u64::MAX), 10);
        assert_eq!(G.slot_for(10, u64::MAX), 15);
        assert_eq!(G.slot_start(10, 15, 0), 15 << 60);
    }

    #[test]
    fn worked_example_from_the_crate_doc() {
        assert_eq!((G.level_for(0, 5000), G.slot_for(2, 5000)), (2, 1));
        assert_eq!(G.slot_start(2, 1, 0), 4096);
        assert_eq!((G.level_for(4096, 5000), G.slot_for(1, 5000)), (1, 14));
        assert_eq!(G.slot_start(1, 14, 4096), 4992);
        assert_eq!((G.level_for(4992, 5000), G.slot_for(0, 5000)), (0, 8));
        assert_eq!(G.slot_start(0, 8, 4992), 5000);
    }

    /// Fills one slot with `n` entries and removes every entry whose index `doomed` picks,
    /// returning the level, the slab and the survivors in order.
    fn slot_with_removals(n: u32, doomed: impl Fn(u32) -> bool) -> (Level, Slab<()>, Vec<u32>) {
        let mut level = Level::new(1, 64);
        let mut slab = Slab::with_capacity(n as usize);
        let indices: Vec<u32> = (0..n)
            .map(|_| slab.insert(0, (), |i| level.push_back(5, i)).index())
            .collect();
        let mut survivors = Vec::new();
        for index in indices {
            if doomed(index) {
                slab.detach(index);
                level.unlink(&mut slab, 5);
                slab.take(index);
            } else {
                survivors.push(index);
            }
        }
        (level, slab, survivors)
    }

    #[test]
    fn compaction_runs_a_few_references_per_removal() {
        // Removing the first 6 000 of 10 000 crosses the threshold at about 5 000: the
        // compaction then has about 10 000 references to look at, four per removal.
        let (level, _slab, survivors) = slot_with_removals(10_000, |i| i < 6_000);
        let at = level.compaction.expect("a compaction is under way");
        assert!(
            at.read < level.lists[5].items.len(),
            "not finished in one go"
        );
        assert!(at.read <= 5_100 + 4 * 1_000, "read {}", at.read);
        assert_eq!(survivors.len(), 4_000);
    }

    #[test]
    fn a_slot_being_compacted_hands_out_its_live_entries_in_order() {
        let (mut level, slab, survivors) = slot_with_removals(10_000, |i| i % 3 != 0);
        assert!(level.compaction.is_some());
        let mut out = Vec::new();
        while let Some(index) = level.pop_front(&slab, 5) {
            out.push(index);
        }
        assert_eq!(out, survivors);
        assert!(level.is_empty() && level.compaction.is_none());
    }

    #[test]
    fn hand_outs_and_removals_interleaved_with_a_compaction_lose_nothing() {
        // Hand-outs from the head overtake the compaction's cursors, removals from the back
        // keep it going: every survivor still comes out once, in order.
        let (mut level, mut slab, survivors) = slot_with_removals(10_000, |i| i % 3 != 0);
        assert!(level.compaction.is_some());
        let mut out = Vec::new();
        for _ in 0..500 {
            out.push(level.pop_front(&slab, 5).expect("live entries are left"));
        }
        let mut left: Vec<u32> = survivors[500..].to_vec();
        while level.compaction.is_some() {
            let index = left
                .pop()
                .expect("the compaction ends before the slot empties");
            slab.detach(index);
            level.unlink(&mut slab, 5);
            slab.take(index);
        }
        while let Some(index) = level.pop_front(&slab, 5) {
            out.push(index);
        }
        let mut expected = survivors[..500].to_vec();
        expected.extend(&left);
        assert_eq!(out, expected);
    }

    #[test]
    fn a_finished_compaction_leaves_only_live_references() {
        let (mut level, mut slab, survivors) = slot_with_removals(10_000, |i| i % 4 != 0);
        // Keep removing (from the front, which is compacted already) until it is done: what
        // is left is the live references plus those that went stale meanwhile, nothing older.
        let mut left = survivors.clone();
        let mut meanwhile = 0;
        while level.compaction.is_some() {
            let index = left.remove(0);
            slab.detach(index);
            level.unlink(&mut slab, 5);
            slab.take(index);
            meanwhile += 1;
        }
        let list = &level.lists[5];
        let kept = list.items.len() - list.head as usize;
        assert!(
            left.len() <= kept && kept <= left.len() + meanwhile,
            "{kept}"
        );
        assert!(
            kept < survivors.len() + 100,
            "the stale three quarters went"
        );
        let mut out = Vec::new();
        while let Some(index) = level.pop_front(&slab, 5) {
            out.push(index);
        }
        assert_eq!(out, left);
    }

    #[test]
    fn bitmap_search_spans_words() {
        let mut level = Level::new(0, 256);
        let mut slab = Slab::with_capacity(2);
        assert_eq!(level.next_occupied(0), None);
        let a = slab.insert(0, (), |i| level.push_back(200, i)).index();
        let b = slab.insert(0, (), |i| level.push_back(3, i)).index();
        assert_eq!(level.next_occupied(0), Some(3));
        assert_eq!(level.next_occupied(4), Some(200));
        assert_eq!(level.next_occupied(201), None);
        slab.take(a);
        level.unlink(&mut slab, 200);
        assert_eq!(level.next_occupied(4), None);
        assert_eq!(level.pop_front(&slab, 3), Some(b));
        assert_eq!(level.next_occupied(0), None);
    }
}
