//! [`Wheel`], the hierarchical timing wheel.

use std::collections::TryReserveError;
use std::fmt;

use crate::key::{StaleKey, TimerKey};
use crate::level::{Geometry, Level};
use crate::slab::{Node, Slab};

/// An entry handed out by [`Wheel::poll`], [`Wheel::advance`] or [`Wheel::drain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<T> {
    /// The key the entry had; it is stale now.
    pub key: TimerKey,
    /// The deadline tick the entry was inserted (or last rescheduled) with.
    pub deadline: u64,
    /// The payload.
    pub value: T,
}

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

/// A hierarchical hashed timing wheel holding values of type `T`, each due at a tick.
///
/// Invariants, which every method keeps:
/// - the wheel's clock ([`Wheel::now`]) only moves forward, and only as far as every entry due by
///   then has been handed out or is waiting in the current level-0 slot;
/// - an entry placed with deadline `d > now` (inserted, brought forward, or placed again) sits
///   in the slot named by digit `k` of `d` on a level `k` no higher than that of the highest
///   base-`slots` digit in which `d` and `now` differ (see the crate docs): on that level when
///   placed, lower once the early cascade moved it into the level below's next rotation; an
///   entry with `d <= now` sits in the current level-0 slot; a postponed entry stays where it
///   was, in a slot that starts before its old deadline, until that slot is reached;
/// - so every entry is in a slot whose start is at or before its deadline, and the earliest
///   due slot is found by one bitmap search per level (plus a look at each next rotation),
///   never by scanning;
/// - `len` counts the live entries; a key is live until its entry is removed or handed out.
///
/// ```
/// use wheel_core::Wheel;
///
/// let mut wheel = Wheel::new();
/// let a = wheel.insert(10, "ten");
/// wheel.insert(3, "three");
/// assert_eq!(wheel.next_expiration(), Some(3));
///
/// let due: Vec<_> = wheel.advance(5).map(|e| e.value).collect();
/// assert_eq!(due, ["three"]);
///
/// wheel.reschedule(a, 7).unwrap();
/// assert_eq!(wheel.poll(6), None); // never early
/// assert_eq!(wheel.poll(7).map(|e| e.value), Some("ten"));
/// assert!(wheel.is_empty());
/// ```
pub struct Wheel<T> {
    /// Two `Level`s per level of the hierarchy, numbered `k` and `k + depth`: the one `current`
    /// names holds the level's current rotation, the other its next rotation as the early
    /// cascade fills it in.
    levels: Box<[Level]>,
    /// For each level `k`, which of its two `Level`s is current: `k` or `k + depth`.
    current: Box<[usize]>,
    /// Levels in the hierarchy.
    depth: usize,
    /// Entries inserted or handed out since the early cascade last ran: its budget.
    work: u32,
    slab: Slab<T>,
    geometry: Geometry,
    now: u64,
}

/// Bits per level for `slots` slots (rounded up to a power of two; one slot becomes two).
fn slot_bits(slots: usize) -> u32 {
    slots.next_power_of_two().trailing_zeros().max(1)
}

/// What falls due next: a slot of a level's current rotation, or the start of a level's next
/// rotation, which the early cascade has begun to fill.
#[derive(Clone, Copy, Debug)]
enum Due {
    Slot { level: usize, slot: usize },
    Rotation { level: usize },
}

/// Entries each level moves early per entry inserted or handed out. A level's next slot fills
/// about as fast as entries are inserted and drains as fast as they are handed out, so two
/// keep ahead of either.
const EARLY_PER_OPERATION: usize = 2;

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Wheel<T> {
    /// Slots per level of [`Wheel::new`], as in Linux and tokio: 11 levels cover all of `u64`.
    pub const DEFAULT_SLOTS: usize = 64;

    /// The most slots per level [`Wheel::with_slots`] accepts.
    pub const MAX_SLOTS: usize = 4096;

    /// An empty wheel at tick 0 with [`Wheel::DEFAULT_SLOTS`] slots per level.
    pub fn new() -> Self {
        Self::build(Geometry::new(6), 0)
    }

    /// An empty wheel at tick 0 with `slots` slots per level, rounded up to a power of two
    /// (a single slot becomes two: a level needs at least one bit).
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// assert_eq!(Wheel::<()>::with_slots(500).unwrap().slots_per_level(), 512);
    /// assert!(Wheel::<()>::with_slots(0).is_err());
    /// ```
    pub fn with_slots(slots: usize) -> Result<Self, InvalidSlots> {
        if slots == 0 || slots > Self::MAX_SLOTS {
            return Err(InvalidSlots(slots));
        }
        Ok(Self::build(Geometry::new(slot_bits(slots)), 0))
    }

    /// Bytes that `Wheel::with_slots(slots)` followed by `reserve(entries)` allocates: each
    /// level's slot table and bitmap, and `entries` places (slab nodes, in whole chunks, and
    /// their room in the stack of vacant places). What grows later as entries are placed (the
    /// slots' arrays of references, 4 bytes an entry) is not counted. For sizing wheels before
    /// building them; `slots` outside `1..=MAX_SLOTS` counts as the nearest bound.
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// let empty = Wheel::<u64>::reserved_bytes(64, 0);
    /// let full = Wheel::<u64>::reserved_bytes(64, 1_000_000);
    /// assert!(full - empty >= 1_000_000 * (8 + Wheel::<u64>::entry_footprint()));
    /// ```
    pub fn reserved_bytes(slots: usize, entries: usize) -> usize {
        let geometry = Geometry::new(slot_bits(slots.clamp(1, Self::MAX_SLOTS)));
        let depth = geometry.levels();
        let levels = 2 * depth * (std::mem::size_of::<Level>() + Level::bytes(geometry.slots()))
            + depth * std::mem::size_of::<usize>();
        levels.saturating_add(Slab::<T>::bytes_for(entries))
    }

    fn build(geometry: Geometry, capacity: usize) -> Self {
        let depth = geometry.levels();
        Wheel {
            levels: (0..2 * depth)
                .map(|number| Level::new(number, geometry.slots()))
                .collect(),
            current: (0..depth).collect(),
            depth,
            work: 0,
            slab: Slab::with_capacity(capacity),
            geometry,
            now: 0,
        }
    }

    /// Reserves room for `additional` more entries than are live now, so inserts up to there
    /// do not allocate. The room is written as well as allocated, so the kernel supplies its
    /// pages now rather than one at a time during the inserts: on a VM where a fresh page
    /// costs microseconds, that is the difference between a steady burst and a stalling one.
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// let mut wheel = Wheel::new();
    /// wheel.reserve(100_000);
    /// let capacity = wheel.capacity();
    /// for i in 0..100_000 {
    ///     wheel.insert(i, ());
    /// }
    /// assert_eq!(wheel.capacity(), capacity);
    /// ```
    ///
    /// # Panics
    /// When that would take more than `u32::MAX - 1` places.
    pub fn reserve(&mut self, additional: usize) {
        self.slab.reserve(additional);
    }

    /// [`Wheel::reserve`] that reports failure instead of aborting the process: the allocator
    /// refusing the memory, or more than `u32::MAX` places (a capacity overflow). On an
    /// error the wheel's entries are as they were; room allocated before the failure stays.
    ///
    /// ```
    /// # use wheel_core::Wheel;
    /// let mut wheel = Wheel::<()>::new();
    /// assert!(wheel.try_reserve(1000).is_ok());
    /// assert!(wheel.capacity() >= 1000);
    /// assert!(wheel.try_reserve(u32::MAX as usize + 1).is_err());
    /// ```
    pub fn try_reserve(&mut self, additional: usize) -> Result<(), TryReserveError> {
        self.slab.try_reserve(additional)
    }

    /// Bytes of bookkeeping one entry costs beside its `T`: its slab node, and its place in
    /// the slab's stack of vacant nodes (for footprint tests).
    #[doc(hidden)]
    pub fn entry_footprint() -> usize {
        std::mem::size_of::<Node<T>>() - std::mem::size_of::<T>() + std::mem::size_of::<u32>()
    }

    /// How many entries fit without allocating.
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// Slots on each level (a power of two).
    pub fn slots_per_level(&self) -> usize {
        self.geometry.slots()
    }

    /// The number of levels: enough that every `u64` deadline has one.
    pub fn levels(&self) -> usize {
        self.depth
    }

    /// The wheel's clock: the latest tick it has been fully advanced to.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The number of live entries.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.slab.len() == 0
    }

    /// Adds `value`, due at tick `deadline`. A deadline at or before [`Wheel::now`] is handed out
    /// by the next advance. O(1); no allocation once the slab has room.
    ///
    /// # Panics
    /// Only when `u32::MAX` entries would be live at once.
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let (level, slot) = self.geometry.place(self.now, deadline);
        let current = &mut self.levels[self.current[level]];
        let key = self
            .slab
            .insert(deadline, value, |index| current.push_back(slot, index));
        self.work = self.work.saturating_add(1);
        key
    }

    /// Removes the entry `key` names and returns its value, or `None` when the key is stale.
    pub fn remove(&mut self, key: TimerKey) -> Option<T> {
        let (value, level, slot) = self.slab.remove(key)?;
        self.levels[level as usize].unlink(&mut self.slab, slot as usize);
        Some(value)
    }

    /// Moves a live entry to a new deadline, earlier or later; its key stays valid.
    ///
    /// Postponing (a deadline at or after the current one: the idle timeout pushed back on
    /// every message) only writes the new deadline: the entry stays in its slot, which starts
    /// no later than the old deadline, and is placed again when that slot is reached. So a
    /// timeout pushed back a thousand times moves once, and the key's node is the only memory
    /// touched. Bringing a deadline forward moves the entry at once.
    pub fn reschedule(&mut self, key: TimerKey, deadline: u64) -> Result<(), StaleKey> {
        let index = self.slab.resolve(key).ok_or(StaleKey(key))?;
        let node = self.slab.node_mut(index);
        if deadline >= node.deadline {
            node.deadline = deadline;
            return Ok(());
        }
        self.unlink(index);
        self.slab.node_mut(index).deadline = deadline;
        self.link(index);
        Ok(())
    }

    /// The deadline of a live entry.
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        let index = self.slab.resolve(key)?;
        Some(self.slab.node(index).deadline)
    }

    /// Whether `key` names a live entry.
    pub fn contains(&self, key: TimerKey) -> bool {
        self.slab.resolve(key).is_some()
    }

    /// The value of a live entry.
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        let index = self.slab.resolve(key)?;
        self.slab.node(index).value()
    }

    /// The value of a live entry, to change in place.
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        let index = self.slab.resolve(key)?;
        self.slab.node_mut(index).value_mut()
    }

    /// The tick of the earliest slot that holds an entry: a caller that sleeps until then misses
    /// nothing. Exact when that slot is on level 0 and nothing in it was postponed; a slot on
    /// a higher level, or one whose entries were all postponed, only promises that nothing is
    /// due before it (advancing to it places its entries again, further on). Never below
    /// [`Wheel::now`]; `None` when the wheel is empty. O(levels), no scanning of empty slots.
    pub fn next_expiration(&self) -> Option<u64> {
        self.next_due().map(|(start, _)| start)
    }

    /// Hands out one entry whose deadline is at or before `now`, or `None` when none is left;
    /// the clock then moves to `now`. Entries come out in the order their slots fall due. A
    /// `now` below [`Wheel::now`] counts as [`Wheel::now`]: the clock never goes back.
    pub fn poll(&mut self, now: u64) -> Option<Entry<T>> {
        self.next_due_entry(now).map(|(_, entry)| entry)
    }

    /// The next entry due by `now` and the level-0 slot it came from. A due slot can turn out
    /// to hold only postponed entries, which [`Wheel::hand_out`] places again: then the next
    /// due slot is tried.
    fn next_due_entry(&mut self, now: u64) -> Option<(usize, Entry<T>)> {
        loop {
            let slot = self.due_slot(now)?;
            if let Some(entry) = self.hand_out(slot) {
                return Some((slot, entry));
            }
        }
    }

    /// The level-0 slot to hand out from next if one is due by `now`, after cascading every
    /// higher slot due before it; the clock moves to that slot's tick, or to `now` when
    /// nothing is due.
    fn due_slot(&mut self, now: u64) -> Option<usize> {
        // Entries due in the past wait in the slot starting at the clock: a `now` below the
        // clock must still reach them.
        let now = now.max(self.now);
        self.cascade_early();
        loop {
            let Some((start, due)) = self.next_due().filter(|&(s, _)| s <= now) else {
                self.now = self.now.max(now);
                return None;
            };
            self.now = self.now.max(start);
            match due {
                Due::Slot { level: 0, slot } => return Some(slot),
                Due::Slot { level, slot } => self.cascade(level, slot),
                Due::Rotation { level } => self.next_rotation(level),
            }
        }
    }

    /// Hands out, lazily, every entry whose deadline is at or before `now`. Stop early (with
    /// `take(budget)` or by dropping the iterator) to bound one pass: what is left stays due and
    /// comes out on the next call.
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

    /// Removes and hands out every live entry, due or not, in slab order (for shutdown). The
    /// clock stays where it is. Dropping the iterator early drops the entries not yet handed out;
    /// forgetting it (`mem::forget`) leaves the rest in the wheel, consistent.
    pub fn drain(&mut self) -> Drain<'_, T> {
        Drain {
            wheel: self,
            cursor: 0,
        }
    }

    /// Places node `index` by its deadline, relative to the clock (one lookup of the node: this
    /// runs for every insert and every cascaded entry).
    fn link(&mut self, index: u32) {
        let node = self.slab.node_mut(index);
        let (level, slot) = self.geometry.place(self.now, node.deadline);
        let current = &mut self.levels[self.current[level]];
        let (level, slot, pos) = current.push_back(slot, index);
        node.place(level, slot, pos);
    }

    /// Takes node `index` out of its slot: the node forgets its place first, so its reference
    /// there reads as stale (see `SlotList`) and the array itself is not touched.
    fn unlink(&mut self, index: u32) {
        let (level, slot) = self.slab.detach(index);
        self.levels[level as usize].unlink(&mut self.slab, slot as usize);
    }

    /// The `Level` holding `level`'s next rotation: the one of its two that is not current.
    fn upcoming(&self, level: usize) -> usize {
        2 * level + self.depth - self.current[level]
    }

    /// What falls due first, and when: the earliest occupied slot of any level's current
    /// rotation, or the start of a next rotation that already holds entries. Ties go to the
    /// lower level, so a rotation turns before the slot above it cascades into it.
    fn next_due(&self) -> Option<(u64, Due)> {
        let mut first: Option<(u64, Due)> = None;
        let mut consider = |start: u64, due: Due| {
            if first.map_or(true, |(best, _)| start < best) {
                first = Some((start, due));
            }
        };
        for level in 0..self.depth {
            let from = self.geometry.slot_for(level, self.now);
            if let Some(slot) = self.levels[self.current[level]].next_occupied(from) {
                let start = self.geometry.slot_start(level, slot, self.now);
                consider(start, Due::Slot { level, slot });
            }
            if !self.levels[self.upcoming(level)].is_empty() {
                if let Some(start) = self.geometry.next_rotation(level, self.now) {
                    consider(start, Due::Rotation { level });
                }
            }
        }
        first
    }

    /// Takes the next entry of level-0 slot `slot`, if any, and counts it for the early
    /// cascade's budget. An entry postponed since it was placed is placed again, further on,
    /// instead of handed out.
    fn hand_out(&mut self, slot: usize) -> Option<Entry<T>> {
        loop {
            let index = self.levels[self.current[0]].pop_front(&self.slab, slot)?;
            if self.slab.node(index).deadline > self.now {
                self.link(index);
                continue;
            }
            self.work = self.work.saturating_add(1);
            return Some(self.slab.take(index));
        }
    }

    /// Moves every entry of a due slot on a higher level down to where it belongs now.
    fn cascade(&mut self, level: usize, slot: usize) {
        let current = self.current[level];
        let mut taken = self.levels[current].take(slot);
        while let Some(index) = taken.next_live(&self.slab) {
            self.link(index);
        }
        self.levels[current].restore(taken);
    }

    /// The clock reached the start of `level`'s next rotation, which the early cascade filled
    /// in: it becomes the current one. The old one is empty: all of it was due before.
    fn next_rotation(&mut self, level: usize) {
        debug_assert!(self.levels[self.current[level]].is_empty());
        self.current[level] = self.upcoming(level);
    }

    /// The early cascade: a wheel that cascades a slot only when it falls due stalls for as
    /// long as moving all of it takes, and a slot high up can hold millions of entries (every
    /// timer due in a 4-second stretch, at level 2 of a 1 ms wheel), during which nothing is
    /// handed out. Instead, each level moves the entries of its next slot, a few for every
    /// entry inserted or handed out, into the next rotation of the level below (that level's
    /// second `Level`), where they are found when that rotation begins. Entries inserted
    /// meanwhile go to the slot as usual and are moved when their turn comes; what is left when
    /// the slot falls due is cascaded then.
    fn cascade_early(&mut self) {
        let budget = std::mem::take(&mut self.work) as usize * EARLY_PER_OPERATION;
        if budget == 0 {
            return;
        }
        for level in 1..self.depth {
            let next = self.geometry.slot_for(level, self.now) + 1;
            let from = self.current[level];
            if next >= self.geometry.slots() || !self.levels[from].is_occupied(next) {
                continue;
            }
            let below = level - 1;
            let into = self.upcoming(below);
            for _ in 0..budget {
                let Some(index) = self.levels[from].pop_front(&self.slab, next) else {
                    break;
                };
                let node = self.slab.node_mut(index);
                let slot = self.geometry.slot_for(below, node.deadline);
                let (level, slot, pos) = self.levels[into].push_back(slot, index);
                node.place(level, slot, pos);
            }
        }
    }
}

/// The iterator of [`Wheel::advance`].
pub struct Advance<'a, T> {
    wheel: &'a mut Wheel<T>,
    now: u64,
    /// The due level-0 slot being handed out. Nothing else can touch the wheel while the
    /// iterator lives, so it stays the earliest due slot until it is empty: no search per entry.
    draining: Option<usize>,
}

impl<T> Iterator for Advance<'_, T> {
    type Item = Entry<T>;

    fn next(&mut self) -> Option<Entry<T>> {
        let wheel = &mut *self.wheel;
        if let Some(entry) = self.draining.and_then(|slot| wheel.hand_out(slot)) {
            return Some(entry);
        }
        let (slot, entry) = match wheel.next_due_entry(self.now) {
            Some(due) => due,
            None => {
                self.draining = None;
                return None;
            }
        };
        self.draining = Some(slot);
        Some(entry)
    }
}

/// The iterator of [`Wheel::drain`].
pub struct Drain<'a, T> {
    wheel: &'a mut Wheel<T>,
    cursor: u32,
}

impl<T> Iterator for Drain<'_, T> {
    type Item = Entry<T>;

    fn next(&mut self) -> Option<Entry<T>> {
        let index = self.wheel.slab.next_live(self.cursor)?;
        self.cursor = index + 1;
        // Unlinked one by one rather than clearing every level up front, so the wheel stays
        // whole however the iterator ends.
        self.wheel.unlink(index);
        Some(self.wheel.slab.take(index))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let len = self.wheel.len();
        (len, Some(len))
    }
}

impl<T> Drop for Drain<'_, T> {
    fn drop(&mut self) {
        self.for_each(drop);
    }
}

impl<T: Clone> Clone for Wheel<T> {
    fn clone(&self) -> Self {
        Wheel {
            levels: self.levels.clone(),
            current: self.current.clone(),
            depth: self.depth,
            work: self.work,
            slab: self.slab.clone(),
            geometry: self.geometry,
            now: self.now,
        }
    }
}

impl<T> fmt::Debug for Wheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wheel")
            .field("now", &self.now)
            .field("len", &self.len())
            .field("slots_per_level", &self.slots_per_level())
            .field("levels", &self.levels())
            .field("next_expiration", &self.next_expiration())
            .finish()
    }
}
