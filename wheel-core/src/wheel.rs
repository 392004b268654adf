//! [`Wheel`], the hierarchical timing wheel, and its iterators.

use std::collections::TryReserveError;
use std::fmt;
use std::iter::FusedIterator;
use std::mem::size_of;
use std::ops::Range;

use crate::chunks::{Chunk, Chunks, NIL};
use crate::entry::{Entry, Stored, Wide};
use crate::geometry::Geometry;
use crate::level::Level;
use crate::rotation::{Resume, Rotation};

/// `slots` was zero or, rounded up to a power of two, above [`Wheel::MAX_SLOTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidSlots(pub usize);

impl fmt::Display for InvalidSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} slots per level: must be between 1 and {} (rounded up to a power of two)",
            self.0,
            Wheel::<()>::MAX_SLOTS
        )
    }
}

impl std::error::Error for InvalidSlots {}

/// A hierarchical hashed timing wheel of `(deadline, value)` entries, stored inline.
///
/// Invariants, which every method keeps:
/// - the wheel's clock ([`Wheel::now`]) only moves forward, and only as far as every entry due by
///   then has been handed out or is waiting in the current level-0 slot;
/// - an entry with deadline `d >= now` sits in the slot named by digit `k` of `d` on a level `k`
///   no higher than that of the highest base-`slots` digit in which `d` and `now` differ (see
///   the crate docs): on that level when placed, one lower once the early cascade moved it
///   into the next rotation of the level below; an entry due at `now` sits in the current
///   level-0 slot;
/// - an entry that no level holds waits outside them, with its whole deadline: one inserted
///   with `d < now` in the *overdue* list, handed out first by the next advance, and one whose
///   `d` lies beyond the top level's current rotation in a *beyond* bucket, chosen by the
///   highest bit in which `d`'s top rotation differs from the buckets' base (a rotation at or
///   before the clock's); the clock stops at the earliest deadline of the lowest bucket and
///   places its entries again from there, each into the levels or a lower bucket, so an entry
///   moves at most once per bit of the rotation number however many rotations hold entries;
/// - so every entry is in a slot whose first tick is at or before its deadline, and the
///   earliest due slot is found by one bitmap search per level (plus a look at each next
///   rotation), never by scanning;
/// - within a slot, entries keep the order they arrived in.
///
/// ```
/// use wheel_core::Wheel;
///
/// let mut wheel = Wheel::new();
/// wheel.insert(10, 'a');
/// wheel.insert(3, 'b');
/// assert_eq!(wheel.next_expiration(), Some(3));
/// let due: Vec<char> = wheel.advance(5).map(|e| e.value).collect();
/// assert_eq!(due, ['b']);
/// assert_eq!(wheel.advance(9).count(), 0); // never early
/// assert_eq!(wheel.advance(10).next().map(|e| e.value), Some('a'));
/// assert!(wheel.is_empty());
/// ```
#[derive(Clone)]
pub struct Wheel<T: Copy> {
    levels: Box<[Level]>,
    /// Every slot's entries, in chunks from one pool.
    chunks: Chunks<T>,
    /// The entries outside the levels, with their whole deadlines: slot [`OVERDUE`] and the
    /// beyond buckets after it (see [`Wheel::beyond_slot`]), in chunks of their own.
    outside: Rotation,
    wide_chunks: Chunks<Wide<T>>,
    /// The top-level rotation the beyond buckets are sorted against: at or before the clock's,
    /// and before every beyond entry's.
    beyond_base: u64,
    /// Per beyond bucket (indexed by its slot in `outside`): no entry there is due before
    /// this (the earliest deadline pushed since the bucket was last empty, or lower once
    /// `retain` removed that one). Meaningful only while the bucket holds entries.
    beyond_from: [u64; OUTSIDE_SLOTS],
    geometry: Geometry,
    now: u64,
    /// Entries held.
    len: usize,
    /// Entries inserted or handed out since the early cascade last ran: its budget. Inserts
    /// only count; the cascade runs on the way to handing entries out.
    work: u32,
    /// Where [`Wheel::retain`] goes on.
    retain: Cursor,
    /// Room for a chunk's worth of entries, for moving them a chunk at a time.
    scratch: Vec<Stored<T>>,
    /// The same for the entries outside the levels.
    wide_scratch: Vec<Stored<Wide<T>>>,
}

/// The slot of [`Wheel::outside`] that holds the entries inserted due already, in order.
const OVERDUE: usize = 0;
/// The slots of [`Wheel::outside`]: [`OVERDUE`], then one beyond bucket per bit of a top-level
/// rotation number. The levels span at least 2^33 ticks (see `Geometry::levels`), so a rotation
/// number has at most 31 bits: buckets 1 to 31.
const OUTSIDE_SLOTS: usize = 32;

/// A position of [`Wheel::retain`]: rotation `rotation % 2` of level `rotation / 2` (by where
/// it is stored), or past the levels the entries outside them; the slot there, and where in
/// that slot it stopped, if it stopped inside one.
#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    rotation: usize,
    slot: usize,
    resume: Option<Resume>,
}

/// What falls due next: a slot of a level's current rotation, or the start of a level's next
/// rotation, which the early cascade has begun to fill.
#[derive(Clone, Copy, Debug)]
enum Due {
    Slot {
        level: usize,
        slot: usize,
    },
    Rotation {
        level: usize,
    },
    /// The earliest deadline of the lowest beyond bucket (`slot` of `outside`): its entries
    /// are placed again.
    Beyond {
        slot: usize,
    },
}

/// Entries each level moves early per entry inserted or handed out. A level's next slot fills
/// about as fast as entries are inserted and drains as fast as they are handed out, so two
/// keep ahead of either.
const EARLY_PER_OPERATION: usize = 2;

/// Entries handed out between two runs of the early cascade while one advance hands out many:
/// often enough that no run moves more than a few dozen entries per level, seldom enough that
/// looking at every level costs little. (Every advance also runs it once, with whatever the
/// inserts since earned.)
const EARLY_EVERY: u32 = 32;

/// The partly filled chunks [`Wheel::try_reserve`] makes room for, per slot of a level: one in
/// each slot of the two rotations of levels 0 and 1, which are all a dense wheel keeps busy at
/// once...
const PARTLY_FILLED_PER_SLOT: usize = 4;

/// ...and this many more: the few slots of the levels above, the slots the early cascade and
/// a hand-out are taking from (a partly used chunk at their front), and `retain`'s.
const PARTLY_FILLED_BEYOND: usize = 64;

impl<T: Copy> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> Wheel<T> {
    /// Slots per level of [`Wheel::new`], as in Linux and tokio: 11 levels cover all of `u64`.
    pub const DEFAULT_SLOTS: usize = 64;

    /// The most slots per level [`Wheel::with_slots`] accepts.
    pub const MAX_SLOTS: usize = 4096;

    /// An empty wheel at tick 0 with [`Wheel::DEFAULT_SLOTS`] slots per level.
    pub fn new() -> Self {
        Self::build(Geometry::for_slots(Self::DEFAULT_SLOTS))
    }

    /// An empty wheel at tick 0 with `slots` slots per level, rounded up to a power of two
    /// (a single slot becomes two: a level needs at least one bit).
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// assert_eq!(Wheel::<u64>::with_slots(500).unwrap().slots_per_level(), 512);
    /// assert!(Wheel::<u64>::with_slots(0).is_err());
    /// ```
    pub fn with_slots(slots: usize) -> Result<Self, InvalidSlots> {
        if slots == 0 || slots > Self::MAX_SLOTS {
            return Err(InvalidSlots(slots));
        }
        Ok(Self::build(Geometry::for_slots(slots)))
    }

    fn build(geometry: Geometry) -> Self {
        Wheel {
            levels: (0..geometry.levels())
                .map(|_| Level::new(geometry.slots()))
                .collect(),
            chunks: Chunks::default(),
            outside: Rotation::new(OUTSIDE_SLOTS),
            wide_chunks: Chunks::default(),
            beyond_base: 0,
            beyond_from: [u64::MAX; OUTSIDE_SLOTS],
            geometry,
            now: 0,
            len: 0,
            work: 0,
            retain: Cursor::default(),
            scratch: Vec::with_capacity(Chunk::<T>::CAPACITY),
            wide_scratch: Vec::new(),
        }
    }

    /// Bytes one entry takes in its slot's array: the value and the low 32 bits of the
    /// deadline, inline (the slot implies the rest). Chunk headers add 16 bytes per chunk of
    /// 1 KiB, and each busy slot has a partly filled chunk at its ends:
    /// [`Wheel::reserved_bytes`] counts those. Entries outside the levels (due already when
    /// inserted, or beyond the top level) take 4 bytes more.
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// assert_eq!(Wheel::<u32>::entry_footprint(), 8);
    /// assert_eq!(Wheel::<[u32; 2]>::entry_footprint(), 12);
    /// assert_eq!(Wheel::<u64>::entry_footprint(), 16);
    /// ```
    pub fn entry_footprint() -> usize {
        size_of::<Stored<T>>()
    }

    /// Chunks that hold `entries` entries, plus room for as many partly filled chunks as a
    /// dense wheel has at once (never more than one per entry: each holds one at least).
    fn chunks_for(slots: usize, entries: usize) -> usize {
        let partly_filled = PARTLY_FILLED_PER_SLOT * slots + PARTLY_FILLED_BEYOND;
        entries
            .div_ceil(Chunk::<T>::CAPACITY)
            .saturating_add(entries.min(partly_filled))
    }

    /// Bytes a wheel built with `Wheel::with_slots(slots)` takes once `try_reserve(entries)` has
    /// made its room: each level's slot tables and bitmaps, and the chunks for `entries`
    /// (written; the rest of their blocks stays untouched). Exactly what [`Wheel::allocated_bytes`] reports for such a
    /// wheel. For sizing wheels before building them; `slots` outside `1..=MAX_SLOTS` counts
    /// as the nearest bound.
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// let mut wheel = Wheel::<u64>::with_slots(64).unwrap();
    /// wheel.try_reserve(100_000).unwrap();
    /// assert_eq!(wheel.allocated_bytes(), Wheel::<u64>::reserved_bytes(64, 100_000));
    /// ```
    pub fn reserved_bytes(slots: usize, entries: usize) -> usize {
        let geometry = Geometry::for_slots(slots.clamp(1, Self::MAX_SLOTS));
        let tables = geometry.levels() * (size_of::<Level>() + Level::bytes(geometry.slots()))
            + Rotation::bytes(OUTSIDE_SLOTS)
            + Chunk::<T>::CAPACITY * size_of::<Stored<T>>();
        tables.saturating_add(Chunks::<T>::bytes_for(Self::chunks_for(
            geometry.slots(),
            entries,
        )))
    }

    /// Bytes the wheel has allocated and written: slot tables, bitmaps and chunks, in use or
    /// spare. The chunks of a block that were never used are untouched zeros, not counted.
    pub fn allocated_bytes(&self) -> usize {
        let slots = self.geometry.slots();
        self.levels.len() * (size_of::<Level>() + Level::bytes(slots))
            + Rotation::bytes(OUTSIDE_SLOTS)
            + self.scratch.capacity() * size_of::<Stored<T>>()
            + self.wide_scratch.capacity() * size_of::<Stored<Wide<T>>>()
            + self.chunks.allocated_bytes()
            + self.wide_chunks.allocated_bytes()
    }

    /// Makes room for `additional` more entries, so that inserting them, and cascading them
    /// down the levels later, takes chunks from the pool instead of allocating: enough chunks
    /// for the entries themselves (126 to a chunk with 4-byte values, 84 with 8-byte ones),
    /// and for the partly filled chunks at the ends of the slots they land in, up to
    /// `4 × slots + 64` of them (every slot of the two rotations of levels 0 and 1, and a few
    /// more). A wheel whose entries are spread thinner than that over more slots may still
    /// allocate a chunk now and then. The room is written as well as allocated, so the kernel
    /// supplies its pages now rather than one at a time during the inserts. Room allocated
    /// before a failure stays; the entries are as they were.
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// let mut wheel = Wheel::new();
    /// wheel.try_reserve(100_000).unwrap();
    /// let bytes = wheel.allocated_bytes();
    /// for i in 0..100_000 {
    ///     wheel.insert(i, i);
    /// }
    /// assert_eq!(wheel.advance(u64::MAX).count(), 100_000);
    /// assert_eq!(wheel.allocated_bytes(), bytes);
    /// assert!(wheel.try_reserve(usize::MAX).is_err());
    /// ```
    pub fn try_reserve(&mut self, additional: usize) -> Result<(), TryReserveError> {
        let chunks = Self::chunks_for(self.geometry.slots(), additional);
        self.chunks.try_reserve_spare(chunks)
    }

    /// Where the wheel's memory grows next: the never-used chunks it takes next, up to
    /// `bytes` of them in whole chunks, as address ranges (one per block of chunks they span;
    /// blocks not allocated yet are allocated, untouched).
    ///
    /// For a caller that wants those pages resident before the wheel first writes them, so
    /// that the write does not wait for the kernel to supply a page (a huge page zeroed; on a
    /// VM, perhaps the host's fault too). It may hand the ranges to another thread that asks
    /// the kernel to populate them (Linux: `madvise(MADV_POPULATE_WRITE)`). Only an operation
    /// that keeps the memory's contents is sound there: the bytes are zeros the wheel writes
    /// whenever it needs to. The ranges stay allocated until the wheel is dropped; after that,
    /// nothing may be done to them. A block the allocator refuses is an error, and nothing
    /// changes.
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// let mut wheel = Wheel::<u64>::new();
    /// let ahead = wheel.untouched_ahead(1 << 20).unwrap();
    /// assert_eq!(ahead.iter().map(|range| range.len()).sum::<usize>(), 1 << 20);
    /// assert_eq!(wheel.chunk_bytes_written(), 0, "named, not written");
    /// ```
    pub fn untouched_ahead(&mut self, bytes: usize) -> Result<Vec<Range<usize>>, TryReserveError> {
        self.chunks.untouched_ahead(bytes / size_of::<Chunk<T>>())
    }

    /// Bytes of chunks the wheel has written so far, in use or spare. The count grows only
    /// while the wheel holds more entries than it ever did: it tells a caller of
    /// [`Wheel::untouched_ahead`] when the memory named there is being used.
    pub fn chunk_bytes_written(&self) -> usize {
        self.chunks.total() * size_of::<Chunk<T>>()
    }

    /// Slots on each level (a power of two).
    pub fn slots_per_level(&self) -> usize {
        self.geometry.slots()
    }

    /// The number of levels: as many as have slots at most 2^32 ticks wide (6 of 64 slots,
    /// spanning 2^36 ticks). Deadlines further ahead wait outside the levels until the clock
    /// comes that close.
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// The wheel's clock: the latest tick it has been advanced to.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The number of entries held, including any the caller considers stale until
    /// [`Wheel::retain`] removes them or they are handed out.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the wheel holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `value`, due at tick `deadline`: any `u64`; one at or before [`Wheel::now`] is
    /// handed out by the next advance. O(1): an append to the slot's array, no allocation
    /// while the pool has a chunk.
    ///
    /// # Panics
    ///
    /// When the pool must grow and the allocator refuses its next block, or the pool's chunk
    /// ids (about 4 G chunks, 4 TiB) run out. [`Wheel::try_reserve`] reports both as an error
    /// instead, ahead of the inserts.
    #[inline]
    pub fn insert(&mut self, deadline: u64, value: T) {
        self.place(Entry { deadline, value });
        self.len += 1;
        // Earned here, spent when advancing: an insert stays an append.
        self.work = self.work.saturating_add(1);
    }

    /// Puts `entry` where it belongs with the clock where it is: a slot, or outside the levels.
    #[inline]
    fn place(&mut self, entry: Entry<T>) {
        if entry.deadline < self.now {
            return self.put_outside(OVERDUE, entry);
        }
        let (level, slot) = self.geometry.place(self.now, entry.deadline);
        match self.levels.get_mut(level) {
            Some(level) => level.current_mut().push(
                &mut self.chunks,
                slot,
                Stored::new(entry.deadline, entry.value),
            ),
            None => self.put_beyond(entry),
        }
    }

    #[cold]
    fn put_outside(&mut self, list: usize, entry: Entry<T>) {
        self.outside
            .push(&mut self.wide_chunks, list, Stored::wide(entry));
    }

    #[cold]
    fn put_beyond(&mut self, entry: Entry<T>) {
        let slot = self.beyond_slot(entry.deadline);
        // A bound `retain` left behind counts only while its bucket still holds entries.
        self.beyond_from[slot] = match self.outside.is_occupied(slot) {
            true => self.beyond_from[slot].min(entry.deadline),
            false => entry.deadline,
        };
        self.put_outside(slot, entry);
    }

    /// The beyond bucket of `deadline` (after the clock's top-level rotation): one more than
    /// the highest bit in which its top-level rotation differs from the base's. Every rotation
    /// in bucket `b` agrees with the base above bit `b - 1` and has that bit set where the base
    /// has it clear, so every rotation in a lower bucket comes before every one in a higher
    /// bucket; and a new base taken from bucket `b` (any rotation there) keeps every higher
    /// bucket's entries where they are and sends bucket `b`'s own to lower buckets.
    fn beyond_slot(&self, deadline: u64) -> usize {
        let rotation = deadline >> self.geometry.span_bits();
        let slot = (u64::BITS - (rotation ^ self.beyond_base).leading_zeros()) as usize;
        debug_assert!(
            (1..OUTSIDE_SLOTS).contains(&slot),
            "a beyond entry's rotation comes after the base"
        );
        slot
    }

    /// The tick of the earliest slot that holds an entry: a caller that sleeps until then misses
    /// nothing. Exact when that slot is on level 0; a slot on a higher level only promises
    /// that nothing is due before it (advancing to it cascades its entries, further on).
    /// Never below [`Wheel::now`]; `None` when the wheel is empty. O(levels), no scanning of
    /// empty slots.
    pub fn next_expiration(&self) -> Option<u64> {
        if self.outside.is_occupied(OVERDUE) {
            return Some(self.now);
        }
        self.next_due().map(|(start, _)| start)
    }

    /// Hands out, lazily, every entry whose deadline is at or before `now`, and never one
    /// due later. Entries come out in the order their slots fall due, so in deadline order
    /// across ticks, and in the order they were inserted within a tick; entries inserted
    /// already due (at or before [`Wheel::now`]) come first, in the order they were inserted,
    /// whatever their deadlines. Stop early (with
    /// `take(budget)` or by dropping the iterator) to bound one pass: what is left stays due and
    /// comes out on the next call. A `now` below [`Wheel::now`] counts as [`Wheel::now`]: the
    /// clock never goes back.
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// let mut wheel = Wheel::new();
    /// for i in 0..10 {
    ///     wheel.insert(i, i);
    /// }
    /// assert_eq!(wheel.advance(100).take(4).count(), 4);
    /// assert_eq!(wheel.advance(100).count(), 6);
    /// ```
    pub fn advance(&mut self, now: u64) -> Advance<'_, T> {
        Advance {
            wheel: self,
            now,
            draining: None,
        }
    }

    /// Removes and hands out every entry, due or not, in no particular order (for shutdown).
    /// The clock stays where it is. Dropping the iterator early removes the entries not handed
    /// out yet all the same.
    pub fn drain(&mut self) -> Drain<'_, T> {
        Drain {
            wheel: self,
            rotation: 0,
            slot: 0,
        }
    }

    /// Incremental compaction: examines up to `budget` entries, going on where the previous
    /// call stopped, and removes those for which `keep(deadline, &value)` is false; the others
    /// stay where they are, in order. Returns how many it examined. (The entries outside the
    /// levels come last in the order.)
    ///
    /// Calls walk the wheel's slots in a fixed order, from the first to the last and round
    /// again. A call returns less than `budget` only when it reached the end of that order: the
    /// calls since the previous such return examined, together, every entry that stayed in its
    /// slot meanwhile, once each (an entry that moved, cascading to a lower level or into
    /// another rotation, may be seen twice or wait for the next round). No call costs more
    /// than O(`budget`), plus O(levels × slots / 64) for skipping empty slots, plus moving one
    /// chunk's worth (at most 126) of entries: the entries kept move down into the room the removed
    /// ones left, so the chunks this empties go back to the pool.
    ///
    /// A panic in `keep` (or in [`Wheel::retain_prefetched`]'s `prefetch`) comes back to the
    /// caller once the wheel is whole again: the entries examined before it are kept or removed
    /// as `keep` said, the one it was about and those after it stay, `len` counts what is
    /// there, and the next call goes on from there.
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// let mut wheel = Wheel::new();
    /// for i in 0..1000u64 {
    ///     wheel.insert(i, i);
    /// }
    /// let mut examined = 0;
    /// loop {
    ///     let n = wheel.retain(64, |_, &value| value % 2 == 0);
    ///     examined += n;
    ///     if n < 64 {
    ///         break;
    ///     }
    /// }
    /// assert_eq!((examined, wheel.len()), (1000, 500));
    /// ```
    pub fn retain(&mut self, budget: usize, mut keep: impl FnMut(u64, &T) -> bool) -> usize {
        self.retain_with::<false>(budget, &mut |_| {}, &mut keep)
    }

    /// [`Wheel::retain`], calling `prefetch(&value)` on the entry about a dozen ahead of the one
    /// `keep` is called on: a caller whose `keep` reads memory that is likely cold (the record
    /// a reference points to) can start loading it there, so the misses of consecutive entries
    /// overlap instead of queueing.
    ///
    /// Measure before choosing it: when `keep` is a single load and compare, the processor
    /// overlaps those misses by itself, and the crate's bench (one 64-byte record per entry,
    /// 1 M and 10 M of them) finds plain `retain` faster.
    pub fn retain_prefetched(
        &mut self,
        budget: usize,
        mut prefetch: impl FnMut(&T),
        mut keep: impl FnMut(u64, &T) -> bool,
    ) -> usize {
        self.retain_with::<true>(budget, &mut prefetch, &mut keep)
    }

    fn retain_with<const PREFETCH: bool>(
        &mut self,
        budget: usize,
        prefetch: &mut impl FnMut(&T),
        keep: &mut impl FnMut(u64, &T) -> bool,
    ) -> usize {
        let mut examined = 0;
        let outside = 2 * self.levels.len();
        while examined < budget {
            let cursor = self.retain;
            let rotation = match cursor.rotation {
                r if r < outside => self.levels[r / 2].rotation_mut(r % 2),
                _ => &mut self.outside,
            };
            let Some(slot) = rotation.next_occupied(cursor.slot) else {
                self.retain = Cursor {
                    rotation: cursor.rotation + 1,
                    slot: 0,
                    resume: None,
                };
                if self.retain.rotation > outside {
                    // The end of the order: a round is complete.
                    self.retain.rotation = 0;
                    break;
                }
                continue;
            };
            let resume = cursor.resume.filter(|_| slot == cursor.slot);
            let left = budget - examined;
            let done = if cursor.rotation < outside {
                let start = self.slot_start(cursor.rotation, slot);
                let rotation = self.levels[cursor.rotation / 2].rotation_mut(cursor.rotation % 2);
                rotation.retain_slot::<T, PREFETCH>(
                    &mut self.chunks,
                    slot,
                    resume,
                    left,
                    &mut self.scratch,
                    prefetch,
                    &mut |stored| keep(stored.deadline_in(start), &stored.value),
                )
            } else {
                self.outside.retain_slot::<Wide<T>, PREFETCH>(
                    &mut self.wide_chunks,
                    slot,
                    resume,
                    left,
                    &mut self.wide_scratch,
                    &mut |wide| prefetch(&wide.value),
                    &mut |stored| {
                        let entry = stored.entry();
                        keep(entry.deadline, &entry.value)
                    },
                )
            };
            examined += done.examined;
            self.len -= done.removed;
            let panic = done.panic;
            self.retain = match done.resume {
                Some(resume) => Cursor {
                    slot,
                    resume: Some(resume),
                    ..cursor
                },
                None => Cursor {
                    slot: slot + 1,
                    resume: None,
                    ..cursor
                },
            };
            if let Some(payload) = panic {
                // The slot is whole and the count and the cursor are settled: the wheel
                // stays usable, and the caller gets its closure's panic.
                std::panic::resume_unwind(payload);
            }
        }
        examined
    }

    /// The first tick of `slot` in rotation `rotation % 2` of level `rotation / 2` (numbered
    /// by where it is stored, as [`Cursor`] numbers them), current or next.
    fn slot_start(&self, rotation: usize, slot: usize) -> u64 {
        let (level, which) = (rotation / 2, rotation % 2);
        let in_rotation = if self.levels[level].is_current(which) {
            self.now
        } else {
            // An empty next rotation past `u64` has no slots to ask about.
            self.geometry
                .next_rotation(level, self.now)
                .unwrap_or(self.now)
        };
        self.geometry.slot_start(level, slot, in_rotation)
    }

    /// Counts one entry handed out towards the early cascade, and runs the cascade once the
    /// entries inserted or handed out since it last ran reach [`EARLY_EVERY`], so a long
    /// hand-out interleaves it in small runs.
    #[inline]
    fn count_work(&mut self) {
        self.work = self.work.saturating_add(1);
        if self.work >= EARLY_EVERY {
            self.cascade_early();
        }
    }

    /// The level-0 slot to hand out from next if one is due by `now`, after cascading every
    /// higher slot due before it and turning every rotation that began; the clock moves to
    /// that slot's tick, or to `now` when nothing is due.
    fn due_slot(&mut self, now: u64) -> Option<usize> {
        // Entries a partial hand-out left wait in the slot starting at the clock: a `now`
        // below the clock must still reach them.
        let now = now.max(self.now);
        self.cascade_early();
        loop {
            let Some((start, due)) = self.next_due().filter(|&(s, _)| s <= now) else {
                self.now = now;
                return None;
            };
            self.now = self.now.max(start);
            match due {
                Due::Slot { level: 0, slot } => return Some(slot),
                Due::Slot { level, slot } => self.cascade(level, slot),
                Due::Rotation { level } => self.levels[level].turn(),
                Due::Beyond { slot } => self.place_beyond(slot),
            }
        }
    }

    /// What falls due first, and when: the earliest occupied slot of any level's current
    /// rotation, or the start of a next rotation that already holds entries. Ties go to the
    /// lower level, so a rotation turns before the slot above it cascades into it.
    fn next_due(&self) -> Option<(u64, Due)> {
        let mut first: Option<(u64, Due)> = None;
        let mut consider = |start: u64, due: Due| {
            if first.is_none_or(|(best, _)| start < best) {
                first = Some((start, due));
            }
        };
        for (number, level) in self.levels.iter().enumerate() {
            let from = self.geometry.slot_for(number, self.now);
            if let Some(slot) = level.current().next_occupied(from) {
                let start = self.geometry.slot_start(number, slot, self.now);
                consider(
                    start,
                    Due::Slot {
                        level: number,
                        slot,
                    },
                );
            }
            if !level.upcoming().is_empty() {
                if let Some(start) = self.geometry.next_rotation(number, self.now) {
                    consider(start, Due::Rotation { level: number });
                }
            }
        }
        if let Some(slot) = self.outside.next_occupied(OVERDUE + 1) {
            let top = self.levels.len() - 1;
            consider(
                self.geometry.rotation_start(top, self.beyond_from[slot]),
                Due::Beyond { slot },
            );
        }
        first
    }

    /// Takes the next entry of level-0 slot `slot`, if any: the slot of the clock's tick.
    #[inline]
    fn hand_out(&mut self, slot: usize) -> Option<Entry<T>> {
        let entry = self.levels[0]
            .current_mut()
            .pop_front(&mut self.chunks, slot)?
            .entry_in(self.now);
        debug_assert_eq!(entry.deadline, self.now, "handed out early, or late");
        self.len -= 1;
        self.count_work();
        Some(entry)
    }

    /// Takes the next entry inserted due already, if any.
    #[inline]
    fn hand_out_overdue(&mut self) -> Option<Entry<T>> {
        if !self.outside.is_occupied(OVERDUE) {
            return None;
        }
        let entry = self
            .outside
            .pop_front(&mut self.wide_chunks, OVERDUE)?
            .entry();
        self.len -= 1;
        self.count_work();
        Some(entry)
    }

    /// Moves every entry of a due slot on a higher level down to where it belongs now, a
    /// chunk at a time; each chunk goes back to the pool once copied out, so the slots it fills
    /// reuse it.
    fn cascade(&mut self, level: usize, slot: usize) {
        let start = self.geometry.slot_start(level, slot, self.now);
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut id = self.levels[level].current_mut().take(slot);
        while id != NIL {
            id = self.chunks.move_out(id, &mut scratch);
            for stored in &scratch {
                // Due at or after the slot's start, where the clock is: on a lower level.
                let deadline = stored.deadline_in(start);
                let (level, slot) = self.geometry.place(self.now, deadline);
                self.levels[level]
                    .current_mut()
                    .push(&mut self.chunks, slot, *stored);
            }
        }
        self.scratch = scratch;
    }

    /// The clock reached the top level's rotation that holds the earliest deadline of the
    /// lowest beyond bucket, `slot`: that rotation becomes the base, and the bucket's entries
    /// are placed again from here, on the levels (those in this rotation) or in lower buckets.
    fn place_beyond(&mut self, slot: usize) {
        self.beyond_base = self.beyond_from[slot] >> self.geometry.span_bits();
        debug_assert_eq!(self.beyond_base, self.now >> self.geometry.span_bits());
        let mut scratch = std::mem::take(&mut self.wide_scratch);
        let mut id = self.outside.take(slot);
        while id != NIL {
            id = self.wide_chunks.move_out(id, &mut scratch);
            for stored in &scratch {
                self.place(stored.entry());
            }
        }
        self.wide_scratch = scratch;
    }

    /// The early cascade: a wheel that cascades a slot only when it falls due stalls for as
    /// long as moving all of it takes, and a slot high up can hold millions of entries (every
    /// timer due in a 4-second stretch, at level 2 of a 1 ms wheel), during which nothing is
    /// handed out. Instead, each level moves the entries of its next slot, a few for every
    /// entry inserted or handed out, into the next rotation of the level below, where they
    /// are found when that rotation begins. Entries inserted meanwhile go to the slot as usual
    /// and are moved when their turn comes; what is left when the slot falls due is cascaded
    /// then.
    fn cascade_early(&mut self) {
        let budget = std::mem::take(&mut self.work) as usize * EARLY_PER_OPERATION;
        if budget == 0 {
            return;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        for level in 1..self.levels.len() {
            let next = self.geometry.slot_for(level, self.now) + 1;
            if next >= self.geometry.slots() || !self.levels[level].current().is_occupied(next) {
                continue;
            }
            let start = self.geometry.slot_start(level, next, self.now);
            let (below, from) = self.levels.split_at_mut(level);
            let (from, into) = (from[0].current_mut(), below[level - 1].upcoming_mut());
            let mut left = budget;
            while left > 0 {
                scratch.clear();
                let moved = from.take_front(&mut self.chunks, next, left, &mut scratch);
                if moved == 0 {
                    break;
                }
                left -= moved;
                for stored in &scratch {
                    let slot = self.geometry.slot_for(level - 1, stored.deadline_in(start));
                    into.push(&mut self.chunks, slot, *stored);
                }
            }
        }
        self.scratch = scratch;
    }
}

/// The iterator of [`Wheel::advance`].
pub struct Advance<'a, T: Copy> {
    wheel: &'a mut Wheel<T>,
    now: u64,
    /// The due level-0 slot being handed out. Nothing else can touch the wheel while the
    /// iterator lives, so it stays the earliest due slot until it is empty: no search per entry.
    draining: Option<usize>,
}

impl<T: Copy> Iterator for Advance<'_, T> {
    type Item = Entry<T>;

    #[inline]
    fn next(&mut self) -> Option<Entry<T>> {
        if let Some(entry) = self.draining.and_then(|slot| self.wheel.hand_out(slot)) {
            return Some(entry);
        }
        // Entries inserted due already come first (no advance moves an entry there).
        if let Some(entry) = self.wheel.hand_out_overdue() {
            return Some(entry);
        }
        self.draining = self.wheel.due_slot(self.now);
        self.wheel.hand_out(self.draining?)
    }
}

impl<T: Copy> FusedIterator for Advance<'_, T> {}

/// The iterator of [`Wheel::drain`].
pub struct Drain<'a, T: Copy> {
    wheel: &'a mut Wheel<T>,
    /// The rotation being emptied, numbered as `Cursor` numbers them, and the slot there.
    rotation: usize,
    slot: usize,
}

impl<T: Copy> Iterator for Drain<'_, T> {
    type Item = Entry<T>;

    fn next(&mut self) -> Option<Entry<T>> {
        let wheel = &mut *self.wheel;
        let outside = 2 * wheel.levels.len();
        while self.rotation <= outside {
            let rotation = match self.rotation {
                r if r < outside => wheel.levels[r / 2].rotation_mut(r % 2),
                _ => &mut wheel.outside,
            };
            let Some(slot) = rotation.next_occupied(self.slot) else {
                self.rotation += 1;
                self.slot = 0;
                continue;
            };
            self.slot = slot;
            let entry = if self.rotation < outside {
                let start = wheel.slot_start(self.rotation, slot);
                let rotation = wheel.levels[self.rotation / 2].rotation_mut(self.rotation % 2);
                rotation.pop_front(&mut wheel.chunks, slot)?.entry_in(start)
            } else {
                wheel
                    .outside
                    .pop_front(&mut wheel.wide_chunks, slot)?
                    .entry()
            };
            wheel.len -= 1;
            return Some(entry);
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.wheel.len, Some(self.wheel.len))
    }
}

impl<T: Copy> ExactSizeIterator for Drain<'_, T> {}

impl<T: Copy> FusedIterator for Drain<'_, T> {}

impl<T: Copy> Drop for Drain<'_, T> {
    fn drop(&mut self) {
        let wheel = &mut *self.wheel;
        for level in wheel.levels.iter_mut() {
            for which in 0..2 {
                level.rotation_mut(which).clear(&mut wheel.chunks);
            }
        }
        wheel.outside.clear(&mut wheel.wide_chunks);
        wheel.len = 0;
    }
}

impl<T: Copy> fmt::Debug for Wheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wheel")
            .field("now", &self.now)
            .field("len", &self.len)
            .field("slots_per_level", &self.slots_per_level())
            .field("levels", &self.levels())
            .field("next_expiration", &self.next_expiration())
            .field("chunks", &self.chunks.total())
            .field("spare_chunks", &self.chunks.spare())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate docs' worked example, step by step, on the wheel itself.
    #[test]
    fn worked_example_from_the_crate_doc() {
        let mut wheel = Wheel::new();
        wheel.insert(5000, 42u32);
        let at = |wheel: &Wheel<u32>, level: usize| {
            let rotation = wheel.levels[level].current();
            (0..64).find(|&s| rotation.is_occupied(s))
        };
        assert_eq!(at(&wheel, 2), Some(1), "level 2, slot 1");
        assert_eq!(wheel.next_expiration(), Some(4096));
        assert_eq!(wheel.advance(4096).count(), 0);
        assert_eq!(at(&wheel, 1), Some(14), "level 1, slot 14");
        assert_eq!(wheel.next_expiration(), Some(4992));
        assert_eq!(wheel.advance(4992).count(), 0);
        assert_eq!(at(&wheel, 0), Some(8), "level 0, slot 8");
        assert_eq!(wheel.next_expiration(), Some(5000));
        assert_eq!(wheel.advance(4999).count(), 0);
        let out: Vec<_> = wheel.advance(5000).collect();
        assert_eq!(
            out,
            [Entry {
                deadline: 5000,
                value: 42
            }]
        );
    }

    #[test]
    fn an_early_cascade_moves_the_next_slot_into_the_next_rotation_below() {
        let mut wheel = Wheel::new();
        // Level 1, slot 1 (ticks 64..128), seen from tick 0: the next slot of level 1.
        for i in 0..192u64 {
            wheel.insert(64 + i % 64, i);
        }
        assert!(wheel.levels[1].current().is_occupied(1));
        assert!(wheel.levels[0].upcoming().is_empty(), "inserts only earn");
        // Each insert earned two moves; an advance spends them, even one with nothing due.
        assert_eq!(wheel.advance(10).count(), 0);
        assert!(!wheel.levels[1].current().is_occupied(1));
        assert!(!wheel.levels[0].upcoming().is_empty());
        assert_eq!(wheel.next_expiration(), Some(64));
        let out: Vec<u64> = wheel.advance(64).map(|e| e.value).collect();
        assert_eq!(out, [0, 64, 128]);
    }

    #[test]
    fn a_cascade_gives_its_chunks_back_as_it_goes() {
        let mut wheel = Wheel::new();
        let n = 20 * Chunk::<u64>::CAPACITY as u64;
        for i in 0..n {
            wheel.insert(5_000_000 + i % 7, i); // level 3, slot 19: not the next slot
        }
        assert!(wheel.levels[3].current().is_occupied(19));
        let before = wheel.chunks.total();
        assert_eq!(wheel.advance(5_000_006).count() as u64, n);
        assert!(
            wheel.chunks.total() <= before + 7,
            "cascading took at most one chunk more per slot it filled (7 deadlines): {} after {before}",
            wheel.chunks.total()
        );
        assert_eq!(wheel.chunks.spare(), wheel.chunks.total());
    }
}
