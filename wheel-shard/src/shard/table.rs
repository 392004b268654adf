//! [`TimerTable`]: a shard's timer records, addressed by the slot a `TimerId` carries, and the
//! free slots that come back to the threads that schedule.
//!
//! Records never move, so any thread reaches one from an id in O(1) without a lock: the table
//! is a fixed directory of 512 Ki-record segments, each allocated on first use, so a big
//! service never copies. A segment comes zeroed, which is what a fresh record is, so its pages
//! become resident only as its records are first written (fresh slots go out lowest first):
//! a small service stays small, and no allocation writes a whole segment while a producer
//! waits. For `Config::capacity` the pages are written up front instead, and as a table grows
//! past that, idle workers write its next records ahead of the producers
//! ([`TimerTable::grow`]).
//!
//! Free slots travel in batches. Every thread keeps a small cache of free slots per shard: a
//! producer takes its slots from there, and a thread that ends a timer (a worker that fired
//! it, a caller that cancelled it) puts the slot back into its own cache. A cache that
//! overflows puts a batch into the table's [`FreeMap`], a bit per slot, and a cache about to
//! run dry takes about a batch from it, in address order, or else a block of fresh slots: so
//! a producer writes records that neighbour each other (see `free_map.rs` for why that
//! pays), and a slot it cancelled itself goes straight back out from its cache. A thread's
//! cache goes back to the map when the thread ends.

use std::alloc::Layout;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use crossbeam_utils::CachePadded;

use super::free_map::FreeMap;
use super::record::Record;

/// Records per segment: 1 Mi, 48 MiB. Large, because an allocator may round a large
/// allocation up to whole huge pages and keep the remainder resident (mimalloc kept 1.08 ×
/// the bytes of the 4 MiB segments used before; see docs/performance.md), and the remainder
/// is relatively smaller the larger the allocation; pages beyond the records in use are never
/// touched. And above 32 MiB, because glibc's `calloc` serves a request below its mmap
/// threshold, which rises up to 32 MiB as large blocks are freed, from memory it has to
/// zero itself: every page of the segment written at once.
const SEGMENT_BITS: u32 = 20;
const SEGMENT_LEN: usize = 1 << SEGMENT_BITS;
/// 256 segments of 1 Mi records: 2^28 (268 million) timers per shard at once.
const SEGMENTS: usize = 1 << 8;
/// Records that fit in one 4 KiB page (85 of 48 bytes): [`TimerTable::write_records`] writes
/// every this-many-th record, less than a page apart, so every page of a range is written.
const RECORDS_PER_PAGE: usize = 4096 / std::mem::size_of::<Record>();
/// One past the highest slot a shard hands out.
const SLOTS: u32 = (SEGMENTS * SEGMENT_LEN) as u32;

/// Records an idle worker writes ahead of the fresh slots handed out, in steps of about 2 MiB
/// (a huge page's worth): see [`TimerTable::grow`].
const GROW_STEP: u32 = ((2 << 20) / std::mem::size_of::<Record>()) as u32;

/// Free slots moved between a thread's cache and the free map at a time.
pub(crate) const BATCH: usize = 256;

/// How many claims ahead a producer starts loading the record it will write. A recycled
/// record was last written by another thread (the worker that fired its timer), so writing it
/// misses the cache; started a few schedules early, the miss overlaps the work in between
/// instead of stalling the producer (the ring's CAS would otherwise wait for it).
const PREFETCH_AHEAD: usize = 16;

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
}

/// One thread's free slots of one table.
struct Cache {
    /// Which table this cache belongs to (`TimerTable::id`).
    table: u64,
    /// Where the slots go when the thread ends (if the table is still there).
    map: Weak<FreeMap>,
    slots: Vec<u32>,
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
        if let Some(map) = self.map.upgrade() {
            map.put(&self.slots);
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

    /// A free slot for a new timer, owned by the caller until it arms the record or gives it
    /// back with [`TimerTable::release`]. Its record exists by the time this returns.
    #[inline]
    pub(crate) fn claim(&self) -> Result<u32, TableFull> {
        let cached = CACHES.try_with(|caches| {
            let mut caches = caches.borrow_mut();
            let cache = self.cache(&mut caches);
            if let Some(slot) = cache.slots.pop() {
                if cache.slots.len() < PREFETCH_AHEAD {
                    self.top_up(&mut cache.slots);
                }
                if let Some(&ahead) = cache
                    .slots
                    .len()
                    .checked_sub(PREFETCH_AHEAD)
                    .and_then(|i| cache.slots.get(i))
                {
                    if let Some(record) = self.record(ahead) {
                        record.prefetch_for_write();
                    }
                }
                return Ok(slot);
            }
            self.refill(&mut cache.slots)?;
            Ok(cache.slots.pop().expect("a refill brings slots"))
        });
        // Without thread-local storage (a thread being torn down): straight from the map.
        cached.unwrap_or_else(|_| self.claim_uncached())
    }

    fn claim_uncached(&self) -> Result<u32, TableFull> {
        let mut batch = Vec::new();
        self.refill(&mut batch)?;
        let slot = batch.pop().expect("a refill brings slots");
        self.map.put(&batch);
        Ok(slot)
    }

    /// Gives back the slot of a timer that ended (its record retired) or of a claim that
    /// was never armed, to this thread's cache.
    pub(crate) fn release(&self, slot: u32) {
        let cached = CACHES.try_with(|caches| {
            let mut caches = caches.borrow_mut();
            let cache = self.cache(&mut caches);
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

    /// Puts a batch under the last few `slots`, whose records are already being loaded, so
    /// the prefetch [`PREFETCH_AHEAD`] claims ahead runs on into the batch instead of the
    /// batch's first claims each waiting for a miss. Nothing happens when the table is full:
    /// the cache then runs dry and the claim reports it.
    #[cold]
    fn top_up(&self, slots: &mut Vec<u32>) {
        let left = slots.len();
        if self.refill(slots).is_ok() {
            // Claims pop from the end: the slots left go there, above the batch.
            slots.rotate_left(left);
        }
    }

    /// Adds about a batch of free slots from the map to `slots` (whole words of 64, so up to
    /// [`BATCH`] + 63), or else a block of fresh slots; the map's last few free slots only
    /// when there is no fresh one left, since a sweep for them may cross the whole map. A
    /// cache's buffer has room for them (see [`TimerTable::release`]), so this never
    /// allocates.
    #[cold]
    fn refill(&self, slots: &mut Vec<u32>) -> Result<(), TableFull> {
        if self.map.free() >= BATCH && self.map.take(BATCH, slots) > 0 {
            return Ok(());
        }
        match self.claim_fresh(slots) {
            Err(TableFull) if self.map.take(BATCH, slots) > 0 => Ok(()),
            result => result,
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
                });
                caches.list.len() - 1
            }
        };
        caches.last = index;
        &mut caches.list[index]
    }

    /// Takes a block of up to [`BATCH`] slots never handed out into `slots`, creating their
    /// segments.
    fn claim_fresh(&self, slots: &mut Vec<u32>) -> Result<(), TableFull> {
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
        // Handed out lowest first.
        slots.extend((start..end).rev());
        Ok(())
    }

    /// Writes records past the written mark, up to a [`GROW_STEP`] boundary, when fewer than
    /// a step of written records (or fewer than the slots handed out, while that is less) is
    /// left beyond the fresh slots handed out; returns whether it wrote any. Idle workers
    /// call it before they sleep.
    ///
    /// Why: a fresh record's page becomes resident when the record is first written, and a
    /// producer that writes it pays for the page: a fault, a 2 MiB huge page zeroed, and on a
    /// VM whose host reclaims freed memory the host's faults too (0.12 ms to over 4 ms a huge
    /// page on the benchmark VM; docs/performance.md). Written ahead by a thread with nothing
    /// else to do, the records are resident before a burst past the table's earlier peak
    /// reaches them. A producer that outruns the growth writes the records itself, as
    /// without it. Beyond the slots ever handed out, at most two steps of records (4 MiB) are
    /// written, and a small table's records stay within its first step.
    pub(crate) fn grow(&self) -> bool {
        let fresh = self.fresh.load(Ordering::Relaxed);
        let written = self.written.load(Ordering::Relaxed);
        let goal = fresh
            .saturating_add(fresh.min(GROW_STEP))
            .div_ceil(GROW_STEP)
            .saturating_mul(GROW_STEP)
            .min(self.limit);
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
    fn stored(&self) -> usize {
        self.map.free()
    }

    /// The written mark (see [`TimerTable::grow`]).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn written(&self) -> u32 {
        self.written.load(Ordering::Relaxed)
    }

    /// One past the highest slot ever handed out.
    #[cfg(all(test, not(loom)))]
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
        assert_eq!(locate(1_048_575), (0, 1_048_575));
        assert_eq!(locate(1_048_576), (1, 0));
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
        assert_eq!(table.claim().unwrap(), 0, "claims still start at slot 0");
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
    fn growth_writes_the_next_records_ahead_of_the_fresh_slots() {
        let step = GROW_STEP as usize;
        let table = TimerTable::new();
        assert!(!table.grow(), "an empty table has nothing to grow");

        // A small table: its records stay within the first step.
        table.claim().unwrap();
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
            let mut slots = Vec::new();
            table.claim_fresh(&mut slots).unwrap();
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
        let claimed: Vec<_> = (0..3).map(|_| table.claim().unwrap()).collect();
        assert_eq!(claimed, [0, 1, 2]);
        assert_eq!(table.claim(), Err(TableFull), "the limit is reached");
        assert_eq!(table.claim(), Err(TableFull), "and stays so");
        assert_eq!(table.high_water(), 3, "no slot past the limit");
        table.release(1);
        assert_eq!(table.claim(), Ok(1), "a released slot is claimed again");
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

    #[test]
    fn released_slots_come_back_in_batches_across_threads() {
        let table = Arc::new(TimerTable::new());
        // Another thread claims and ends timers: its cache overflows into the map, and what
        // is left goes back when the thread ends.
        let claimed = {
            let table = Arc::clone(&table);
            std::thread::spawn(move || {
                let slots: Vec<u32> = (0..3 * BATCH).map(|_| table.claim().unwrap()).collect();
                for &slot in &slots {
                    table.release(slot);
                }
                slots
            })
            .join()
            .unwrap()
        };
        // The thread's cache took one batch more than it claimed (see `top_up`).
        let high = table.high_water();
        assert_eq!(high as usize, 4 * BATCH, "a batch beyond what was claimed");
        assert_eq!(
            table.stored(),
            high as usize,
            "every slot handed out is back in the map, released or never claimed"
        );
        let mut again: Vec<u32> = (0..3 * BATCH).map(|_| table.claim().unwrap()).collect();
        again.sort_unstable();
        again.dedup();
        assert_eq!(again.len(), 3 * BATCH, "each handed out once");
        assert!(again.iter().all(|&slot| slot < high));
        assert!(
            claimed
                .iter()
                .filter(|slot| again.binary_search(slot).is_ok())
                .count()
                >= 2 * BATCH,
            "mostly the released ones"
        );
        assert_eq!(table.high_water(), high, "no fresh slot needed");
    }

    /// Ends the timers of `slots` on a thread of its own, which ends with them: its cache
    /// overflows into the map, and what is left goes there when the thread ends.
    fn release_elsewhere(table: &Arc<TimerTable>, slots: Vec<u32>) {
        let table = Arc::clone(table);
        std::thread::spawn(move || slots.into_iter().for_each(|slot| table.release(slot)))
            .join()
            .unwrap();
    }

    /// Slots that timers ended in another thread, in whatever order, come back out in
    /// address order: each once, no fresh slot needed, and the claiming cache's buffer never
    /// grows.
    #[test]
    fn released_slots_come_back_in_address_order() {
        let table = Arc::new(TimerTable::new());
        let claimed: Vec<u32> = (0..8 * BATCH).map(|_| table.claim().unwrap()).collect();
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
        // This thread's cache still holds the slots its last refill brought; then the map's.
        let left = (high as usize) - claimed.len();
        let again: Vec<u32> = (0..left + 7 * BATCH)
            .map(|_| table.claim().unwrap())
            .collect();
        let from_map = &again[left..];
        assert!(
            from_map.windows(2).all(|w| w[0] < w[1]),
            "in address order: {from_map:?}"
        );
        let mut sorted = again.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), again.len(), "each handed out once");
        assert_eq!(table.high_water(), high, "no fresh slot needed");
        let capacity = CACHES.with(|caches| {
            let caches = caches.borrow();
            caches.list.iter().map(|c| c.slots.capacity()).max()
        });
        assert_eq!(capacity, Some(2 * BATCH), "the cache never grew its buffer");
    }

    /// When the fresh slots run out, the map's last few free slots (too few to be worth a
    /// sweep otherwise) still go out.
    #[test]
    fn a_full_table_hands_out_the_maps_last_slots() {
        let table = Arc::new(TimerTable::with_limit(2 * BATCH as u32));
        let claimed: Vec<u32> = (0..2 * BATCH).map(|_| table.claim().unwrap()).collect();
        assert_eq!(table.claim(), Err(TableFull));
        release_elsewhere(&table, claimed[..3].to_vec());
        assert_eq!(table.stored(), 3);
        let again: Vec<u32> = (0..3).map(|_| table.claim().unwrap()).collect();
        assert_eq!(again, [0, 1, 2]);
        assert_eq!(table.claim(), Err(TableFull));
    }

    /// Threads claim and release at random, handing slots to one another through the map: no
    /// slot is ever held by two at once, and none is lost.
    #[test]
    fn concurrent_claims_and_releases_never_share_a_slot() {
        use std::sync::atomic::AtomicBool;
        const SLOTS_USED: usize = 1 << 16;
        let table = Arc::new(TimerTable::new());
        let held: Arc<Vec<AtomicBool>> =
            Arc::new((0..SLOTS_USED).map(|_| AtomicBool::new(false)).collect());
        let threads: Vec<_> = (0..4u64)
            .map(|seed| {
                let (table, held) = (Arc::clone(&table), Arc::clone(&held));
                std::thread::spawn(move || {
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (seed + 1);
                    let mut mine = Vec::new();
                    for _ in 0..200_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if x % 3 != 0 && mine.len() < 4 * BATCH {
                            let slot = table.claim().unwrap();
                            assert!(!held[slot as usize].swap(true, Ordering::SeqCst), "{slot}");
                            mine.push(slot);
                        } else if !mine.is_empty() {
                            let slot = mine.swap_remove(x as usize % mine.len());
                            held[slot as usize].store(false, Ordering::SeqCst);
                            table.release(slot);
                        }
                    }
                    for slot in mine {
                        held[slot as usize].store(false, Ordering::SeqCst);
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

    /// A cache about to run dry takes the next batch under the slots it has left, so the
    /// claims run on from those (whose records are being loaded) into the batch.
    #[test]
    fn a_cache_is_topped_up_before_it_runs_dry() {
        let table = TimerTable::new();
        // Fewer than `PREFETCH_AHEAD` left after this many.
        let before_top_up = BATCH - PREFETCH_AHEAD + 1;
        let first: Vec<u32> = (0..before_top_up).map(|_| table.claim().unwrap()).collect();
        assert_eq!(first, (0..before_top_up as u32).collect::<Vec<_>>());
        assert_eq!(
            table.high_water(),
            2 * BATCH as u32,
            "the next batch is in the cache"
        );
        let next: Vec<u32> = (0..PREFETCH_AHEAD)
            .map(|_| table.claim().unwrap())
            .collect();
        let expected: Vec<u32> = (before_top_up as u32..=BATCH as u32).collect();
        assert_eq!(
            next, expected,
            "the old batch's last slots first, then the new batch"
        );
    }

    #[test]
    fn caches_of_tables_that_are_gone_are_pruned() {
        for _ in 0..100 {
            let table = TimerTable::new();
            let slot = table.claim().unwrap();
            table.release(slot);
        }
        let count = CACHES.with(|caches| caches.borrow().list.len());
        assert!(count <= 2, "{count} caches kept for dropped tables");
    }
}
