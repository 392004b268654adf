//! [`TimerTable`]: a shard's timer records, addressed by the slot a `TimerId` carries, and the
//! free slots that come back to the threads that schedule.
//!
//! Records never move, so any thread reaches one from an id in O(1) without a lock: the table
//! is a fixed directory of 1 Mi-record segments, each allocated on first use, so a big
//! service never copies. A segment comes zeroed, which is what a fresh record is, so its pages
//! become resident only as its records are first written (fresh slots go out lowest first):
//! a small service stays small, and no allocation writes a whole segment while a producer
//! waits. For `Config::capacity` the pages are written up front instead, and as a table grows
//! past that, idle workers write its next records ahead of the producers
//! ([`TimerTable::grow`]).
//!
//! Free slots travel in words of 64 neighbouring slots. Every thread keeps a cache of free
//! slots per shard. A producer takes a new timer's slot from the cache's group for the
//! timer's deadline ([`Group`]): a word of the table's [`FreeMap`], so timers due together
//! get neighbouring records, and the worker that fires them finds a tick's records on a few
//! pages instead of one page each. A thread that ends a timer (a worker that fired it, a
//! caller that cancelled it) puts the slot back into its own cache: into the group it came
//! from while that group still hands out its word, else into a list that overflows into the
//! map a batch at a time. A group that runs dry takes the next word from the map, in address
//! order, or else fresh slots. A thread's cache goes back to the map when the thread ends.

use std::alloc::Layout;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use crossbeam_utils::CachePadded;

use super::free_map::FreeMap;
use super::lane::LaneHold;
use super::record::Record;

/// Records per segment: 1 Mi, 48 MiB. Large, because an allocator may round a large
/// allocation up to whole huge pages and keep the remainder resident (mimalloc kept 1.08 ×
/// the bytes of the 4 MiB segments used before; see docs/performance.md), and the remainder
/// is relatively smaller the larger the allocation; pages beyond the records in use are never
/// touched. And above 32 MiB, because glibc's `calloc` serves a request below its mmap
/// threshold, which rises up to 32 MiB as large blocks are freed, from memory it has to
/// zero itself: every page of the segment written at once.
#[cfg(not(miri))]
const SEGMENT_BITS: u32 = 20;
/// Under Miri, 256 records (12 KiB, a [`BATCH`]): the interpreter checks a whole segment's
/// records each time a reference to them is made, and the tests that cross a segment
/// boundary claim a segment's worth of slots.
#[cfg(miri)]
const SEGMENT_BITS: u32 = 8;
const SEGMENT_LEN: usize = 1 << SEGMENT_BITS;
// A word of the free map, 64 slots, never straddles two segments (see `Group::records`).
const _: () = assert!(SEGMENT_LEN.is_multiple_of(64));
/// 256 segments of 1 Mi records: 2^28 (268 million) timers per shard at once.
const SEGMENTS: usize = 1 << 8;
/// Records that fit in one 4 KiB page (85 of 48 bytes): [`TimerTable::write_records`] writes
/// every this-many-th record, less than a page apart, so every page of a range is written.
const RECORDS_PER_PAGE: usize = 4096 / std::mem::size_of::<Record>();
/// One past the highest slot a shard hands out.
const SLOTS: u32 = (SEGMENTS * SEGMENT_LEN) as u32;

/// Records an idle worker writes ahead of the fresh slots handed out, in steps of about 2 MiB
/// (a huge page's worth): see [`TimerTable::grow`].
#[cfg(not(miri))]
const GROW_STEP: u32 = ((2 << 20) / std::mem::size_of::<Record>()) as u32;
/// Under Miri, a quarter of its smaller segment: a step stays shorter than a segment.
#[cfg(miri)]
const GROW_STEP: u32 = (SEGMENT_LEN / 4) as u32;

/// Free slots moved between a thread's cache and the free map at a time.
pub(crate) const BATCH: usize = 256;

pub(crate) struct TimerTable {
    /// Names this table's caches in every thread (see [`Caches`]).
    id: u64,
    segments: Box<[OnceLock<Segment>]>,
    /// The lowest slot never handed out.
    fresh: CachePadded<AtomicU32>,
    /// Every record below this slot has been written, or is being written by a growing
    /// thread, so its page is resident (see [`TimerTable::grow`]). Only growth reads it.
    written: AtomicU32,
    /// One past the highest slot handed out: [`SLOTS`], lower in tests of a full table.
    limit: u32,
    /// The free slots not in any thread's cache.
    map: Arc<FreeMap>,
    /// The hold of the shard's lane, when it has one: a thread's cache takes it
    /// ([`Claimed::holds_lane`]).
    lane: Option<Arc<LaneHold>>,
}

/// A free slot [`TimerTable::claim_for_schedule`] took, its record, and whether the calling
/// thread holds the shard's lane (so it sends the timer there instead of the shared ring).
pub(crate) struct Claimed<'t> {
    pub(crate) slot: u32,
    pub(crate) record: &'t Record,
    pub(crate) holds_lane: bool,
}

/// One thread's free slots of one table.
struct Cache {
    /// Which table this cache belongs to (`TimerTable::id`).
    table: u64,
    /// Where the slots go when the thread ends (if the table is still there).
    map: Weak<FreeMap>,
    /// Slots of timers this thread ended, on their way to the map; claims take them only
    /// when the table has no other free slot.
    slots: Vec<u32>,
    /// The slots new timers take, [`GROUPS`] words of them, by deadline (see [`Group`]). An
    /// array, so that [`Group::index`] needs no bounds check.
    groups: Box<[Group; GROUPS]>,
    /// Words taken from the map or fresh, not yet given to a group, lowest last.
    spare: Vec<(u32, u64)>,
    /// The shard's lane's hold, when this thread holds the lane: let go when the thread ends.
    lane: Option<Weak<LaneHold>>,
    /// Times `spare` was refilled: [`BATCH`] claims each.
    refills: u32,
}

/// A thread takes a free lane once it has claimed this many [`BATCH`]es of slots on the
/// shard (at a refill, so the check costs the common path nothing): a producer that schedules
/// in bulk gets it, not the first thread that schedules a timer or two.
const LANE_AFTER_REFILLS: u32 = 2;

impl Cache {
    /// Takes the shard's lane for this thread if it has one that no thread holds.
    #[cold]
    fn try_take_lane(&mut self, lane: Option<&Arc<LaneHold>>) {
        if let Some(hold) = lane.filter(|hold| hold.try_take()) {
            self.lane = Some(Arc::downgrade(hold));
        }
    }
}

/// Deadline groups in a thread's cache of a table. With [`GROUP_TICKS_LOG2`], 128 groups of
/// 64 ticks span 8 192 ticks (8.2 s at the default 1 ms tick) before a later deadline wraps
/// round into the group of an earlier one, which costs locality, never correctness. 512
/// groups of 16 ticks and 1 024 of 8 measured no better, and hold more free slots per thread
/// (docs/performance.md).
const GROUPS: usize = 128;
/// A group spans 2^this ticks of deadline.
const GROUP_TICKS_LOG2: u32 = 6;
/// Words a cache takes at once for its groups: [`BATCH`] slots, so the map's and the fresh
/// counter's shared lines are touched once per four words.
const SPARE_WORDS: usize = BATCH / 64;

/// The free slots a cache gives to new timers of one deadline group: those of one word of
/// the free map, 64 neighbouring records (3 KiB).
///
/// Why group by deadline: the worker that fires a timer is the first thread to touch its
/// record after the producer, and it runs a tick's timers together. Records handed out in
/// address order regardless of deadline put a tick's timers on as many pages as there are
/// timers, spread over the whole table (480 MiB at 10 M timers), and on a VM a load from a
/// page the TLB does not hold costs a nested page walk: 170 ns at a 256 MiB span on the
/// benchmark VM even when the line itself is cached (docs/performance.md). Records of one
/// group are due within 64 ticks of each other: at a million timers a second, a tick's
/// timers lie among the 3 MiB of about a thousand words, not across the table. The price:
/// a producer writes the next record in one of up to [`GROUPS`] places instead of the next
/// record along, and a thread holds up to `(GROUPS + SPARE_WORDS) × 64` free slots (8 448,
/// 400 KiB of records) of each table it schedules on, where it held 512; they go back to
/// the map when the thread ends.
#[derive(Clone, Copy)]
struct Group {
    /// The word's first slot (a multiple of 64).
    base: u32,
    /// Bit `b` set: slot `base + b` is free, this cache's to hand out.
    free: u64,
    /// The word's 64 records, from the record of slot `base` on, so a claim finds its record
    /// without looking up the segment (null while the group has no word). Taken from the
    /// slice of all 64 ([`TimerTable::word_records`]), not from a reference to the first
    /// record, which would let it reach that record alone. The word's records lie in one
    /// segment (a segment holds a multiple of 64), which lives as long as the table, and a
    /// cache is used only with its own table (see [`TimerTable::record_in`]).
    records: *const Record,
}

impl Default for Group {
    fn default() -> Self {
        Group {
            base: 0,
            free: 0,
            records: std::ptr::null(),
        }
    }
}

impl Group {
    /// The group of timers due at tick `deadline`.
    fn index(deadline: u64) -> usize {
        (deadline >> GROUP_TICKS_LOG2) as usize & (GROUPS - 1)
    }

    /// Takes the lowest free slot.
    fn pop(&mut self) -> Option<u32> {
        let slot = self.peek()?;
        self.free &= self.free - 1;
        Some(slot)
    }

    /// The slot [`Group::pop`] takes next.
    fn peek(&self) -> Option<u32> {
        (self.free != 0).then(|| self.base + self.free.trailing_zeros())
    }

    /// The slot [`Group::pop`] takes after the next one.
    fn peek_second(&self) -> Option<u32> {
        let rest = self.free & self.free.wrapping_sub(1);
        (rest != 0).then(|| self.base + rest.trailing_zeros())
    }

    /// Takes `slot` back if it lies in this group's word: a timer claimed and ended
    /// meanwhile (cancelled, withdrawn) leaves its place in the group free for the next.
    fn give_back(&mut self, slot: u32) -> bool {
        let mine = self.free != 0 && slot & !63 == self.base;
        if mine {
            self.free |= 1 << (slot & 63);
        }
        mine
    }
}

/// A thread's caches, one per table it used (a handful: one per shard of each service), and
/// the one it used last: a producer sends a run of timers to one shard, so the next call
/// usually wants the same cache again.
struct Caches {
    list: Vec<Cache>,
    last: usize,
}

impl Drop for Cache {
    fn drop(&mut self) {
        if let Some(hold) = self.lane.as_ref().and_then(Weak::upgrade) {
            hold.let_go();
        }
        if let Some(map) = self.map.upgrade() {
            map.put(&self.slots);
            let groups = self.groups.iter().map(|group| (group.base, group.free));
            map.put_words(groups.chain(self.spare.iter().copied()));
        }
    }
}

thread_local! {
    /// This thread's caches. Caches of tables that are gone are pruned when a new one is
    /// added.
    static CACHES: RefCell<Caches> = const {
        RefCell::new(Caches {
            list: Vec::new(),
            last: 0,
        })
    };
}

/// A number no other table of this process has.
fn next_table_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A segment's memory layout.
fn segment_layout() -> Layout {
    Layout::array::<Record>(SEGMENT_LEN).expect("a segment's size fits in an isize")
}

/// A segment's records, in memory that came zeroed from the allocator.
#[cfg(not(loom))]
type Segment = super::zeroed::ZeroedSlice<Record>;
#[cfg(loom)]
type Segment = Box<[Record]>;

/// A segment of fresh records.
fn new_segment() -> Segment {
    try_new_segment().unwrap_or_else(|| std::alloc::handle_alloc_error(segment_layout()))
}

/// [`new_segment`] that reports an allocation failure (`None`) instead of aborting.
///
/// The memory comes zeroed: a zeroed record is a fresh one (`Record::new` writes only zeros,
/// a test pins that), and a zeroed allocation of this size is fresh memory from the OS, whose
/// pages become resident only when a record on them is first written.
#[cfg(not(loom))]
fn try_new_segment() -> Option<Segment> {
    // SAFETY: all-zero bytes are a valid `Record`, the one `Record::new` makes; a record is 48
    // bytes.
    unsafe { Segment::new(SEGMENT_LEN) }
}

/// Under loom a record's atomics are loom's, which zeros do not make: written one by one.
#[cfg(loom)]
fn try_new_segment() -> Option<Segment> {
    let mut records = Vec::new();
    records.try_reserve_exact(SEGMENT_LEN).ok()?;
    records.extend((0..SEGMENT_LEN).map(|_| Record::new()));
    Some(records.into_boxed_slice())
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

/// The allocator refused a segment's memory.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SegmentRefused;

impl TimerTable {
    pub(crate) fn new() -> Self {
        Self::with_limit(SLOTS)
    }

    /// A table whose shard has a lane with `hold`.
    pub(crate) fn with_lane(hold: Option<Arc<LaneHold>>) -> Self {
        TimerTable {
            lane: hold,
            ..Self::new()
        }
    }

    /// A table that hands out slots below `limit` only: a full table, for tests, without
    /// 2^28 records.
    fn with_limit(limit: u32) -> Self {
        TimerTable {
            id: next_table_id(),
            segments: (0..SEGMENTS).map(|_| OnceLock::new()).collect(),
            fresh: CachePadded::new(AtomicU32::new(0)),
            written: AtomicU32::new(0),
            limit: limit.min(SLOTS),
            map: Arc::new(FreeMap::new(SEGMENTS, SEGMENT_LEN / 64)),
            lane: None,
        }
    }

    /// Resident bytes a new table takes once [`TimerTable::try_reserve`]`(slots)` has written
    /// the records of its first `slots` slots: the directories of records and free slots, and
    /// those records. (A segment's free bits, 0.13 bytes a slot, come when its first timer
    /// ends.)
    pub(crate) fn bytes_for(slots: usize) -> usize {
        let directory = SEGMENTS * std::mem::size_of::<OnceLock<Segment>>()
            + FreeMap::directory_bytes(SEGMENTS);
        directory + slots.min(SLOTS as usize) * std::mem::size_of::<Record>()
    }

    /// The record of `slot`, if that slot was ever handed out.
    pub(crate) fn record(&self, slot: u32) -> Option<&Record> {
        let (segment, offset) = locate(slot);
        self.segments
            .get(segment)?
            .get()
            .map(|records| &records[offset])
    }

    /// The record of a slot this table handed out.
    pub(crate) fn record_of(&self, slot: u32) -> &Record {
        self.record(slot).expect("a slot handed out has a record")
    }

    /// [`TimerTable::claim_for_schedule`], the slot alone.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn claim(&self, deadline: u64) -> Result<u32, TableFull> {
        self.claim_record(deadline).map(|(slot, _)| slot)
    }

    /// [`TimerTable::claim_for_schedule`] without the lane.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn claim_record(&self, deadline: u64) -> Result<(u32, &Record), TableFull> {
        self.claim_for_schedule(deadline)
            .map(|claimed| (claimed.slot, claimed.record))
    }

    /// A free slot for a new timer due at tick `deadline`, and its record, owned by the caller
    /// until it arms the record or gives the slot back with [`TimerTable::release`]; and
    /// whether this thread holds the shard's lane. The slot comes from this thread's group for
    /// the deadline (see [`Group`]). A thread takes a free lane at a refill of its cache's
    /// spare words (every [`BATCH`] claims) once it has claimed [`LANE_AFTER_REFILLS`]
    /// batches.
    #[inline]
    pub(crate) fn claim_for_schedule(&self, deadline: u64) -> Result<Claimed<'_>, TableFull> {
        let cached = CACHES.try_with(|caches| {
            let mut caches = caches.borrow_mut();
            let cache = self.cache(&mut caches);
            let group = &mut cache.groups[Group::index(deadline)];
            if group.free == 0 {
                if cache.spare.is_empty() {
                    self.refill_spare(&mut cache.spare);
                    cache.refills = cache.refills.saturating_add(1);
                    if cache.lane.is_none() && cache.refills > LANE_AFTER_REFILLS {
                        cache.try_take_lane(self.lane.as_ref());
                    }
                }
                let group = &mut cache.groups[Group::index(deadline)];
                let Some((base, free)) = cache.spare.pop() else {
                    // No word free anywhere: a slot this thread ended, or one of its other
                    // groups' (the table is full only when every slot is taken).
                    let holds_lane = cache.lane.is_some();
                    return cache
                        .slots
                        .pop()
                        .or_else(|| cache.groups.iter_mut().find_map(Group::pop))
                        .map(|slot| Claimed {
                            slot,
                            record: self.record_of(slot),
                            holds_lane,
                        })
                        .ok_or(TableFull);
                };
                let records = self.word_records(base);
                *group = Group {
                    base,
                    free,
                    records,
                };
            }
            let holds_lane = cache.lane.is_some();
            let group = &mut cache.groups[Group::index(deadline)];
            let slot = group.pop().expect("a group with free slots");
            // The group's record after next, loaded while the timers of other groups are
            // written. Two claims ahead: with the few groups a 1 s spread uses, the next claim
            // of a group often comes sooner than memory answers, more so while the host's
            // memory is slow (the next record's load began at the previous claim).
            if let Some(next) = group.peek_second() {
                self.record_in(group, next).prefetch_for_write();
            }
            Ok(Claimed {
                slot,
                record: self.record_in(group, slot),
                holds_lane,
            })
        });
        // Without thread-local storage (a thread being torn down): straight from the map.
        cached.unwrap_or_else(|_| {
            let slot = self.claim_uncached()?;
            Ok(Claimed {
                slot,
                record: self.record_of(slot),
                holds_lane: false,
            })
        })
    }

    /// The 64 records of the word whose first slot is `base` (a multiple of 64, handed out),
    /// as a pointer to the first that reaches all 64: what [`Group::records`] holds.
    fn word_records(&self, base: u32) -> *const Record {
        debug_assert_eq!(base % 64, 0, "a word's first slot");
        let (segment, offset) = locate(base);
        let records = self.segments[segment]
            .get()
            .expect("a slot handed out has a record");
        // A word never straddles two segments (a segment holds a multiple of 64).
        records[offset..offset + 64].as_ptr()
    }

    /// The record of `slot`, one of the slots of `group`, a group of this table's cache.
    #[inline]
    fn record_in(&self, group: &Group, slot: u32) -> &Record {
        debug_assert!(slot & !63 == group.base && !group.records.is_null());
        // SAFETY: `group.records` points to the 64 records of the word from slot
        // `group.base` of this table, taken from the slice of all 64 when the group took its
        // word (a cache is used only with the table whose id it holds, and ids are never
        // reused); `slot` lies within the same word, so the offset, below 64, stays inside
        // that slice; and segments are freed only with the table, which `&self` keeps alive
        // for the returned reference's lifetime.
        unsafe { &*group.records.add((slot - group.base) as usize) }
    }

    /// Puts words of free slots for the groups into the empty `spare`, lowest last:
    /// [`SPARE_WORDS`] from the map when it holds a batch or more, else as many fresh ones,
    /// else the map's last few (a sweep for those may cross the whole map, so only when there
    /// is no fresh slot left). Puts none when every slot is taken.
    #[cold]
    fn refill_spare(&self, spare: &mut Vec<(u32, u64)>) {
        debug_assert!(spare.is_empty(), "a refill into an empty stash");
        if self.map.free() >= BATCH {
            spare.extend((0..SPARE_WORDS).map_while(|_| self.map.take_word()));
            spare.reverse();
            if !spare.is_empty() {
                return;
            }
        }
        if self.claim_fresh_words(spare).is_err() {
            spare.extend(self.map.take_word());
        }
    }

    /// Adds the words of a block of up to [`BATCH`] slots never handed out to `spare`,
    /// lowest last, creating their segments.
    fn claim_fresh_words(&self, spare: &mut Vec<(u32, u64)>) -> Result<(), TableFull> {
        let (start, end) = self.claim_fresh_block()?;
        let mut base = end.div_ceil(64) * 64;
        while base > start {
            base -= 64;
            let count = end.min(base + 64) - base;
            spare.push((base, u64::MAX >> (64 - count)));
        }
        Ok(())
    }

    /// [`TimerTable::claim_for_schedule`] without a cache: a word for this one claim, the rest
    /// of what the refill brought back to the map at once.
    fn claim_uncached(&self) -> Result<u32, TableFull> {
        let mut spare = Vec::new();
        self.refill_spare(&mut spare);
        let (base, free) = spare.pop().ok_or(TableFull)?;
        let mut group = Group {
            base,
            free,
            ..Group::default()
        };
        let slot = group.pop().expect("a word taken has a free slot");
        self.map
            .put_words(spare.into_iter().chain([(group.base, group.free)]));
        Ok(slot)
    }

    /// Gives back the slots of timers that ended (their records retired) straight to the
    /// shared map, for a thread that batches its own releases and schedules little or
    /// nothing itself (a worker): no thread cache, no deadline group, no record read.
    pub(crate) fn release_batch(&self, slots: &[u32]) {
        self.map.put(slots);
    }

    /// Gives back the slot of a timer that ended (its record retired) or of a claim that
    /// was never armed, to this thread's cache.
    ///
    /// A slot whose word is still its deadline group's in this thread's cache (a timer
    /// cancelled or withdrawn soon after it was scheduled, on the thread that scheduled it)
    /// goes back to that group, so the group's next timer takes the record this thread
    /// just wrote.
    pub(crate) fn release(&self, slot: u32) {
        let deadline = self.record_of(slot).last_deadline();
        let cached = CACHES.try_with(|caches| {
            let mut caches = caches.borrow_mut();
            let cache = self.cache(&mut caches);
            if cache.groups[Group::index(deadline)].give_back(slot) {
                return;
            }
            cache.slots.push(slot);
            if cache.slots.len() >= 2 * BATCH {
                self.map.put(&cache.slots[BATCH..]);
                cache.slots.truncate(BATCH);
            }
        });
        if cached.is_err() {
            self.map.put(&[slot]);
        }
    }

    /// This thread's cache of this table, made on first use.
    #[inline]
    fn cache<'c>(&self, caches: &'c mut Caches) -> &'c mut Cache {
        let last = caches.last;
        if caches
            .list
            .get(last)
            .is_some_and(|cache| cache.table == self.id)
        {
            return &mut caches.list[last];
        }
        self.find_cache(caches)
    }

    /// [`TimerTable::cache`] when it is not the one used last.
    #[cold]
    fn find_cache<'c>(&self, caches: &'c mut Caches) -> &'c mut Cache {
        let position = caches.list.iter().position(|cache| cache.table == self.id);
        let index = match position {
            Some(index) => index,
            None => {
                caches.list.retain(|cache| cache.map.strong_count() > 0);
                caches.list.push(Cache {
                    table: self.id,
                    map: Arc::downgrade(&self.map),
                    slots: Vec::with_capacity(2 * BATCH),
                    groups: Box::new([Group::default(); GROUPS]),
                    spare: Vec::with_capacity(SPARE_WORDS),
                    lane: None,
                    refills: 0,
                });
                caches.list.len() - 1
            }
        };
        caches.last = index;
        &mut caches.list[index]
    }

    /// Takes the slots `start..end` (up to [`BATCH`], `start` a multiple of 64) never handed
    /// out, creating their segments.
    fn claim_fresh_block(&self) -> Result<(u32, u32), TableFull> {
        let start = self
            .fresh
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.limit).then(|| n.saturating_add(BATCH as u32).min(self.limit))
            })
            .map_err(|_| TableFull)?;
        let end = start.saturating_add(BATCH as u32).min(self.limit);
        for segment in locate(start).0..=locate(end - 1).0 {
            self.segments[segment].get_or_init(new_segment);
        }
        Ok((start, end))
    }

    /// Writes records past the written mark, up to a [`GROW_STEP`] boundary, when fewer than
    /// a step of written records (or fewer than the slots handed out, while that is less) is
    /// left beyond the fresh slots handed out; returns whether it wrote any. Idle workers
    /// call it before they sleep.
    ///
    /// Why: a fresh record's page becomes resident when the record is first written, and a
    /// producer that writes it pays for the page: a fault, a 2 MiB huge page zeroed, and on a
    /// VM whose host reclaims freed memory the host's faults too (0.12 ms to over 4 ms a huge
    /// page on a virtual machine; docs/performance.md). Written ahead by a thread with nothing
    /// else to do, the records are resident before a burst past the table's earlier peak
    /// reaches them. A producer that outruns the growth writes the records itself, as
    /// without it. Beyond the slots ever handed out, at most two steps of records (4 MiB) are
    /// written, and a small table's records stay within its first step.
    pub(crate) fn grow(&self) -> bool {
        let fresh = self.fresh.load(Ordering::Relaxed);
        let written = self.written.load(Ordering::Relaxed);
        let goal = self.growth_goal(fresh);
        let from = written.max(fresh);
        if from >= goal {
            return false;
        }
        // Claims the work, so two idle workers do not write the same records.
        if self
            .written
            .compare_exchange(written, goal, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        let range = from as usize..goal as usize;
        if self.create_segments(range.clone()).is_err() {
            // Refused: the mark goes back, and a producer that gets there creates the segment
            // (and reports a refusal) as without growth.
            self.written.fetch_min(from, Ordering::Relaxed);
            return false;
        }
        self.write_records(range);
        true
    }

    /// The slot up to which [`TimerTable::grow`] writes records once `fresh` slots were handed
    /// out.
    fn growth_goal(&self, fresh: u32) -> u32 {
        fresh
            .saturating_add(fresh.min(GROW_STEP))
            .div_ceil(GROW_STEP)
            .saturating_mul(GROW_STEP)
            .min(self.limit)
    }

    /// Whether [`TimerTable::grow`] has records to write: then the mark of fresh slots it
    /// grows from, which moves on as producers take fresh slots.
    pub(crate) fn runs_low(&self) -> Option<u32> {
        let fresh = self.fresh.load(Ordering::Relaxed);
        let written = self.written.load(Ordering::Relaxed);
        (written.max(fresh) < self.growth_goal(fresh)).then_some(fresh)
    }

    /// Creates the segments of slots `range` that do not exist yet. A refusal comes back as
    /// an error; the segments made before it stay.
    fn create_segments(&self, range: std::ops::Range<usize>) -> Result<(), SegmentRefused> {
        if range.is_empty() {
            return Ok(());
        }
        for segment in &self.segments[range.start / SEGMENT_LEN..=(range.end - 1) / SEGMENT_LEN] {
            if segment.get().is_none() {
                // A racing claim may have created it meanwhile; then ours is dropped.
                let _ = segment.set(try_new_segment().ok_or(SegmentRefused)?);
            }
        }
        Ok(())
    }

    /// Writes one record on every page of slots `range`, whose segments exist.
    fn write_records(&self, range: std::ops::Range<usize>) {
        let mut slot = range.start;
        while slot < range.end {
            let (segment, offset) = locate(slot as u32);
            let records = self.segments[segment].get().expect("the segment exists");
            let upto = (range.end - segment * SEGMENT_LEN).min(SEGMENT_LEN);
            // Less than a page apart from one at or before `slot` on, and the range's last
            // record too, so every page of the range is written.
            records[offset / RECORDS_PER_PAGE * RECORDS_PER_PAGE..upto]
                .iter()
                .step_by(RECORDS_PER_PAGE)
                .chain(records[..upto].last())
                .for_each(Record::fault_in);
            slot = segment * SEGMENT_LEN + upto;
        }
    }

    /// Creates the segments for the first `slots` slots now (`Config::capacity`) and writes a
    /// record on every page of those slots, so producers do not create segments and fault
    /// pages in during a burst. An allocation the allocator refuses comes back as an error
    /// (the segments made before it stay) rather than aborting.
    pub(crate) fn try_reserve(&self, slots: usize) -> Result<(), SegmentRefused> {
        let slots = slots.min(self.limit as usize);
        self.create_segments(0..slots)?;
        self.write_records(0..slots);
        self.written.fetch_max(slots as u32, Ordering::Relaxed);
        Ok(())
    }

    /// Free slots in the map (not in threads' caches).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn stored(&self) -> usize {
        self.map.free()
    }

    /// The written mark (see [`TimerTable::grow`]).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn written(&self) -> u32 {
        self.written.load(Ordering::Relaxed)
    }

    /// One past the highest slot ever handed out: every record that ever held a timer lies
    /// below it.
    pub(crate) fn high_water(&self) -> u32 {
        self.fresh.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn segments_tile_the_slot_space() {
        assert_eq!(locate(0), (0, 0));
        let len = SEGMENT_LEN as u32;
        assert_eq!(locate(len - 1), (0, SEGMENT_LEN - 1));
        assert_eq!(locate(len), (1, 0));
        #[cfg(not(miri))]
        assert!(
            SEGMENT_LEN * std::mem::size_of::<Record>() > 32 << 20,
            "above glibc's largest mmap threshold"
        );
        assert_eq!(locate(SLOTS - 1), (SEGMENTS - 1, SEGMENT_LEN - 1));
        assert_eq!(locate(SLOTS).0, SEGMENTS, "past the table: no segment");
    }

    #[test]
    fn reserve_creates_the_segments_up_front() {
        let table = TimerTable::new();
        assert!(table.record(0).is_none());
        table.try_reserve(SEGMENT_LEN + 1).unwrap();
        assert!(table.record(0).is_some());
        let last = 2 * SEGMENT_LEN as u32 - 1;
        assert!(table.record(last).is_some(), "two whole segments");
        assert!(table.record(last + 1).is_none(), "and no more");
        assert_eq!(table.claim(0).unwrap(), 0, "claims still start at slot 0");
    }

    /// Whether the page holding `address` is this process's own, written memory: resident and
    /// exclusively mapped (bits 63 and 56 of its `/proc/self/pagemap` entry), not the kernel's
    /// shared zero page that a read of untouched memory maps.
    #[cfg(target_os = "linux")]
    fn page_written(address: usize) -> bool {
        use std::os::unix::fs::FileExt;
        let pagemap = std::fs::File::open("/proc/self/pagemap").expect("open /proc/self/pagemap");
        let mut entry = [0u8; 8];
        pagemap
            .read_exact_at(&mut entry, (address / 4096 * 8) as u64)
            .expect("read a pagemap entry");
        let entry = u64::from_ne_bytes(entry);
        entry >> 63 & 1 == 1 && entry >> 56 & 1 == 1
    }

    /// `Config::capacity`'s promise: the reserved records' pages are written, so producers do
    /// not fault them in. (An idempotent `fetch_or(0)` used to be compiled into a plain load,
    /// which mapped only the shared zero page.)
    #[test]
    #[cfg(target_os = "linux")]
    #[cfg_attr(miri, ignore = "reads /proc")]
    fn reserve_writes_every_page_of_the_reserved_records() {
        let table = TimerTable::new();
        let slots = 2048 * RECORDS_PER_PAGE + 7;
        table.try_reserve(slots).unwrap();
        for slot in (0..slots).step_by(RECORDS_PER_PAGE).chain([slots - 1]) {
            let record: *const Record = table.record(slot as u32).unwrap();
            assert!(page_written(record as usize), "the page of slot {slot}");
        }
        // Past the reserved records, and past the huge page the last of them may lie on, the
        // segment's pages were never written: it came from the allocator untouched.
        let beyond = slots + 2 * (2 << 20) / std::mem::size_of::<Record>();
        let record: *const Record = table.record(beyond as u32).unwrap();
        assert!(
            !page_written(record as usize),
            "a page past the reserved records"
        );
    }

    #[test]
    #[cfg(target_os = "linux")]
    #[cfg_attr(miri, ignore = "reads /proc")]
    fn growth_writes_the_next_records_ahead_of_the_fresh_slots() {
        let step = GROW_STEP as usize;
        let table = TimerTable::new();
        assert!(!table.grow(), "an empty table has nothing to grow");

        // A small table: its records stay within the first step.
        table.claim(0).unwrap();
        assert!(table.grow());
        assert!(!table.grow(), "written far enough");
        let written = |slot: usize| {
            let record: *const Record = table.record(slot as u32).unwrap();
            page_written(record as usize)
        };
        // From the fresh slots on: those handed out are their producers' to write.
        let fresh = table.high_water() as usize;
        assert!((fresh..step).step_by(RECORDS_PER_PAGE).all(written));
        let beyond = step + 2 * (2 << 20) / std::mem::size_of::<Record>();
        assert!(!written(beyond), "no further than the first step");

        // A table grown past a step: a whole step at least ahead of its fresh slots, even
        // across a segment boundary.
        while table.high_water() < (SEGMENT_LEN - step / 2) as u32 {
            table.claim_fresh_block().unwrap();
        }
        while table.grow() {}
        let fresh = table.high_water() as usize;
        let goal = (fresh + step).div_ceil(step) * step;
        assert!(
            goal > SEGMENT_LEN,
            "the test crosses into the second segment"
        );
        assert!((fresh..goal).step_by(RECORDS_PER_PAGE).all(written));
        assert_eq!(table.written() as usize, goal);
    }

    #[test]
    fn a_full_table_says_so() {
        let table = TimerTable::with_limit(3);
        let other_group = 1 << GROUP_TICKS_LOG2;
        assert_ne!(Group::index(0), Group::index(other_group));
        let claimed: Vec<_> = [0, other_group, 0]
            .map(|deadline| table.claim(deadline).unwrap())
            .to_vec();
        assert_eq!(claimed, [0, 1, 2], "the last word, shared by the groups");
        assert_eq!(table.claim(0), Err(TableFull), "the limit is reached");
        assert_eq!(table.claim(1 << 20), Err(TableFull), "and stays so");
        assert_eq!(table.high_water(), 3, "no slot past the limit");
        table.release(1);
        assert_eq!(table.claim(0), Ok(1), "a released slot is claimed again");
        assert_eq!(TimerTable::new().limit, SLOTS, "a real table holds 2^28");
    }

    #[test]
    fn the_directories_are_the_12_kib_the_config_docs_quote() {
        assert_eq!(TimerTable::bytes_for(0), 12 << 10);
    }

    #[test]
    fn bytes_for_counts_the_records_written() {
        let directory = TimerTable::bytes_for(0);
        let record = std::mem::size_of::<Record>();
        assert_eq!(TimerTable::bytes_for(1), directory + record);
        assert_eq!(
            TimerTable::bytes_for(SEGMENT_LEN + 1),
            directory + (SEGMENT_LEN + 1) * record
        );
        assert_eq!(
            TimerTable::bytes_for(usize::MAX),
            directory + SLOTS as usize * record,
            "never more than the whole table"
        );
    }

    /// A segment comes zeroed, and its records behave as `Record::new`'s: free, at
    /// generation 0, ready to be armed, in every part of the segment.
    #[test]
    fn a_new_segment_holds_fresh_records() {
        let segment = new_segment();
        assert_eq!(segment.len(), SEGMENT_LEN);
        for record in [
            &segment[0],
            &segment[SEGMENT_LEN / 2],
            &segment[SEGMENT_LEN - 1],
        ] {
            assert_eq!(record.generation(), 0);
            let (gen, _ticket) = record.arm(9, crate::task::Task::once(|| {}));
            assert_eq!(gen, 0);
            assert!(matches!(
                record.cancel(gen),
                crate::shard::Cancelled::Now(_)
            ));
        }
    }

    /// Claims `n` slots on a thread of its own, which ends with them unreleased: its cache
    /// (groups, spare words) goes back to the map.
    fn claim_elsewhere(
        table: &Arc<TimerTable>,
        n: usize,
        deadline: impl Fn(usize) -> u64 + Send + 'static,
    ) -> Vec<u32> {
        let table = Arc::clone(table);
        std::thread::spawn(move || (0..n).map(|i| table.claim(deadline(i)).unwrap()).collect())
            .join()
            .unwrap()
    }

    /// Ends the timers of `slots` on a thread of its own, which ends with them: its cache
    /// overflows into the map, and what is left goes there when the thread ends.
    fn release_elsewhere(table: &Arc<TimerTable>, slots: Vec<u32>) {
        let table = Arc::clone(table);
        std::thread::spawn(move || slots.into_iter().for_each(|slot| table.release(slot)))
            .join()
            .unwrap();
    }

    #[test]
    fn a_thread_that_ends_gives_back_every_slot_it_held() {
        let table = Arc::new(TimerTable::new());
        // Timers of many groups: the thread's groups and spare words hold slots when it ends.
        let claimed = claim_elsewhere(&table, 3 * BATCH, |i| (i as u64 * 37) << GROUP_TICKS_LOG2);
        release_elsewhere(&table, claimed.clone());
        let high = table.high_water();
        assert_eq!(
            table.stored(),
            high as usize,
            "every slot handed out is back in the map, released or never claimed"
        );
        let mut again: Vec<u32> = (0..3 * BATCH)
            .map(|i| table.claim(i as u64).unwrap())
            .collect();
        again.sort_unstable();
        again.dedup();
        assert_eq!(again.len(), 3 * BATCH, "each handed out once");
        assert_eq!(table.high_water(), high, "no fresh slot needed");
    }

    /// A thread takes the shard's free lane once it has claimed a few batches, keeps it while
    /// it lives (another thread meanwhile gets none), and lets it go when it ends, so the next
    /// thread that schedules in bulk takes it.
    #[test]
    fn a_thread_that_schedules_in_bulk_holds_the_lane_until_it_ends() {
        let lane = super::super::Lane::<u64>::try_new(2).unwrap();
        let table = Arc::new(TimerTable::with_lane(Some(Arc::clone(lane.hold()))));
        // Claims from one group: a refill every four words, 256 claims.
        let holds_after = |table: &TimerTable, claims: usize| {
            (0..claims)
                .map(|_| table.claim_for_schedule(0).unwrap().holds_lane)
                .collect::<Vec<bool>>()
        };
        let first = std::thread::scope(|scope| {
            let table = &table;
            let holds = scope
                .spawn(move || holds_after(table, 4 * BATCH))
                .join()
                .unwrap();
            assert!(!lane.hold().is_held(), "let go when its thread ended");
            holds
        });
        let took_at = first.iter().position(|&held| held).expect("took the lane");
        assert!(
            (BATCH..=3 * BATCH).contains(&took_at),
            "after a few batches, not on the first claims: {took_at}"
        );
        assert!(
            first[took_at..].iter().all(|&held| held),
            "kept while it lives"
        );
        std::thread::scope(|scope| {
            let table = &table;
            let holder = scope.spawn(move || {
                let holds = holds_after(table, 4 * BATCH);
                let other = std::thread::scope(|inner| {
                    inner
                        .spawn(|| holds_after(table, 4 * BATCH))
                        .join()
                        .unwrap()
                });
                (holds, other)
            });
            let (holds, other) = holder.join().unwrap();
            assert!(
                holds.last().copied().unwrap(),
                "the next bulk thread takes it"
            );
            assert!(other.iter().all(|&held| !held), "one holder at a time");
        });
    }

    /// Timers of one deadline group get the neighbouring slots of one word; timers of another
    /// group, claimed in between, get another word.
    #[test]
    fn timers_due_together_get_neighbouring_slots() {
        let table = TimerTable::new();
        let soon = 5;
        let later = soon + (1 << GROUP_TICKS_LOG2);
        assert_ne!(Group::index(soon), Group::index(later));
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..100 {
            a.push(table.claim(soon).unwrap());
            b.push(table.claim(later).unwrap());
        }
        let run = |slots: &[u32]| slots.windows(2).filter(|w| w[1] != w[0] + 1).count();
        assert_eq!(run(&a[..64]), 0, "one word, in order: {a:?}");
        assert_eq!(run(&b[..64]), 0, "one word, in order: {b:?}");
        assert_eq!(a[0] / 64 * 64, a[0], "a whole word");
        assert_ne!(a[0] / 64, b[0] / 64, "words of their own");
        assert!(
            a.iter().chain(&b).all(|&slot| slot < 4 * 64),
            "from one fresh block"
        );
        assert_eq!(
            Group::index(soon),
            Group::index(soon + ((GROUPS as u64) << GROUP_TICKS_LOG2)),
            "deadlines a lap of groups apart share one"
        );
    }

    /// A group hands out its free slots lowest first, and `peek` and `peek_second` name the
    /// next two it will (the claim prefetches the second's record).
    #[test]
    fn a_group_names_its_next_two_slots() {
        let mut group = Group {
            base: 128,
            free: 0b1010_0100,
            records: std::ptr::null(),
        };
        assert_eq!((group.peek(), group.peek_second()), (Some(130), Some(133)));
        assert_eq!(group.pop(), Some(130));
        assert_eq!((group.peek(), group.peek_second()), (Some(133), Some(135)));
        assert_eq!(group.pop(), Some(133));
        assert_eq!((group.peek(), group.peek_second()), (Some(135), None));
        assert_eq!(group.pop(), Some(135));
        assert_eq!((group.peek(), group.peek_second()), (None, None));
    }

    /// The record a claim comes with (found from its group's word, not looked up) is its
    /// slot's, in its own table: with two tables used in turn by one thread, over words from
    /// fresh blocks, from the map and from a group given back, and across a segment boundary.
    #[test]
    fn a_claim_comes_with_its_own_slot_s_record() {
        let tables = [Arc::new(TimerTable::new()), Arc::new(TimerTable::new())];
        let check = |table: &TimerTable, deadline: u64| {
            let (slot, record) = table.claim_record(deadline).unwrap();
            assert!(
                std::ptr::eq(record, table.record_of(slot)),
                "slot {slot}'s record"
            );
            slot
        };
        let mut held: Vec<Vec<u32>> = vec![Vec::new(), Vec::new()];
        for i in 0..(SEGMENT_LEN as u64 + 3 * BATCH as u64) {
            let deadline = (i % 3) << GROUP_TICKS_LOG2;
            for (table, held) in tables.iter().zip(&mut held) {
                held.push(check(table, deadline));
            }
        }
        assert!(
            held[0].iter().any(|&slot| slot as usize >= SEGMENT_LEN),
            "claims reached a second segment"
        );
        for (table, held) in tables.iter().zip(&held) {
            release_elsewhere(table, held[..4 * BATCH].to_vec());
            for deadline in (0..4 * BATCH as u64).map(|i| (i % 5) << GROUP_TICKS_LOG2) {
                check(table, deadline);
            }
        }
    }

    /// A timer cancelled on the thread that scheduled it, while its group's word is still in
    /// use, leaves its slot to the group's next timer.
    #[test]
    fn a_slot_ended_soon_goes_back_to_its_group() {
        let table = TimerTable::new();
        let deadline = 700;
        let slot = table.claim(deadline).unwrap();
        let record = table.record_of(slot);
        let (gen, _) = record.arm(deadline, crate::task::Task::once(|| {}));
        assert!(matches!(
            record.cancel(gen),
            crate::shard::Cancelled::Now(_)
        ));
        table.release(slot);
        assert_eq!(
            table.claim(deadline),
            Ok(slot),
            "the group hands it out again"
        );
        let other = table.claim(deadline + (1 << GROUP_TICKS_LOG2)).unwrap();
        assert_ne!(other, slot);
    }

    /// Slots that timers ended in another thread, in whatever order, come back out in
    /// address order: each once, no fresh slot needed, and the releasing cache's buffer never
    /// grows.
    #[test]
    fn released_slots_come_back_in_address_order() {
        let table = Arc::new(TimerTable::new());
        let claimed = claim_elsewhere(&table, 8 * BATCH, |_| 0);
        let mut shuffled = claimed.clone();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        release_elsewhere(&table, shuffled);
        let high = table.high_water();
        let again: Vec<u32> = (0..high).map(|_| table.claim(0).unwrap()).collect();
        assert!(
            again.windows(2).all(|w| w[0] < w[1]),
            "in address order: {again:?}"
        );
        assert_eq!(again, (0..high).collect::<Vec<_>>(), "each handed out once");
        assert_eq!(table.high_water(), high, "no fresh slot needed");
        // A thread that only releases keeps at most two batches before the map takes them.
        let table2 = Arc::clone(&table);
        let capacity = std::thread::spawn(move || {
            again.into_iter().for_each(|slot| table2.release(slot));
            CACHES.with(|caches| {
                let caches = caches.borrow();
                caches.list.iter().map(|c| c.slots.capacity()).max()
            })
        })
        .join()
        .unwrap();
        assert_eq!(capacity, Some(2 * BATCH), "the cache never grew its buffer");
    }

    /// When the fresh slots run out, the map's last few free slots (too few to be worth a
    /// sweep otherwise) still go out.
    #[test]
    fn a_full_table_hands_out_the_maps_last_slots() {
        let table = Arc::new(TimerTable::with_limit(2 * BATCH as u32));
        let claimed: Vec<u32> = (0..2 * BATCH).map(|_| table.claim(0).unwrap()).collect();
        assert_eq!(table.claim(0), Err(TableFull));
        release_elsewhere(&table, claimed[..3].to_vec());
        assert_eq!(table.stored(), 3);
        let again: Vec<u32> = (0..3).map(|_| table.claim(9).unwrap()).collect();
        assert_eq!(again, [0, 1, 2]);
        assert_eq!(table.claim(9), Err(TableFull));
    }

    /// Threads claim and release at random, handing slots to one another through the map: no
    /// slot is ever held by two at once, and none is lost.
    #[test]
    fn concurrent_claims_and_releases_never_share_a_slot() {
        // Under Miri, fewer rounds, enough for each thread's held slots to overflow to the
        // map; and deadlines of fewer groups, so that fewer slots wait in the caches.
        const ROUNDS: usize = if cfg!(miri) { 3_000 } else { 200_000 };
        const DEADLINES: u64 = if cfg!(miri) { 1_000 } else { 10_000 };
        const SLOTS_USED: usize = if cfg!(miri) { 1 << 14 } else { 1 << 16 };
        let table = Arc::new(TimerTable::new());
        // Bit `s % 64` of word `s / 64`: slot `s` is held. (Words, not a flag per slot: Miri
        // checks every element of the vector at each look-up.)
        let held: Arc<Vec<AtomicU64>> =
            Arc::new((0..SLOTS_USED / 64).map(|_| AtomicU64::new(0)).collect());
        let hold = |held: &[AtomicU64], slot: u32| {
            let bit = 1 << (slot % 64);
            held[slot as usize / 64].fetch_or(bit, Ordering::SeqCst) & bit == 0
        };
        let let_go = |held: &[AtomicU64], slot: u32| {
            held[slot as usize / 64].fetch_and(!(1 << (slot % 64)), Ordering::SeqCst);
        };
        let threads: Vec<_> = (0..4u64)
            .map(|seed| {
                let (table, held) = (Arc::clone(&table), Arc::clone(&held));
                std::thread::spawn(move || {
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (seed + 1);
                    let mut mine = Vec::new();
                    for _ in 0..ROUNDS {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if !x.is_multiple_of(3) && mine.len() < 4 * BATCH {
                            let slot = table.claim(x % DEADLINES).unwrap();
                            assert!(hold(&held, slot), "{slot}");
                            mine.push(slot);
                        } else if !mine.is_empty() {
                            let slot = mine.swap_remove(x as usize % mine.len());
                            let_go(&held, slot);
                            table.release(slot);
                        }
                    }
                    for slot in mine {
                        let_go(&held, slot);
                        table.release(slot);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let high = table.high_water() as usize;
        assert!(high < SLOTS_USED, "{high} slots: released ones were reused");
        assert_eq!(table.stored(), high, "every slot is back in the map");
    }

    #[test]
    fn caches_of_tables_that_are_gone_are_pruned() {
        let tables = if cfg!(miri) { 10 } else { 100 };
        for _ in 0..tables {
            let table = TimerTable::new();
            let slot = table.claim(0).unwrap();
            table.release(slot);
        }
        let count = CACHES.with(|caches| caches.borrow().list.len());
        assert!(count <= 2, "{count} caches kept for dropped tables");
    }
}
