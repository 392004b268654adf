//! [`Chunks`]: where every slot's entries live. A slot's array is a list of fixed-size
//! [`Chunk`]s of inline entries; chunks are allocated in blocks that never move, and a chunk a
//! slot lets go of goes on a free list (the pool) that every slot of the wheel draws from.
//!
//! With a plain `Vec` per slot, a slot that filled up doubled and copied its array (a level-2
//! slot of a 1 ms wheel holds every timer due in a 4-second stretch: millions), stalling the
//! caller while fresh memory was faulted in, and every slot kept the capacity of the largest
//! load it ever had. Chunks never move, a slot holds at most a partly filled chunk at each end
//! beyond its entries, and an emptied slot's chunks serve whichever slot fills next. One pool
//! for the whole wheel, rather than one per level, because an entry moves down the levels as it
//! cascades: room reserved for it has to be usable wherever it is.
//!
//! A chunk is 16 bytes of header and 63 entries, 1 KiB with 8-byte values, aligned to a cache
//! line so no entry straddles two. The header links the chunk into its slot's list and says
//! which of its entries are live (`start..end`); an epoch, bumped whenever the chunk goes back
//! to the pool, lets a cursor kept across calls (`Wheel::retain`'s) tell whether the chunk it
//! remembers still holds what it did.

use std::collections::TryReserveError;
use std::mem::{size_of, MaybeUninit};

use crate::entry::Entry;

/// "No chunk": the end of a list.
pub(crate) const NIL: u32 = u32::MAX;

/// Entries per chunk: with the 16-byte header, a chunk of 16-byte entries is exactly 1 KiB.
pub(crate) const CHUNK: usize = 63;

/// Chunks per block: blocks are what is allocated, 64 KiB of 1 KiB chunks.
const BLOCK_BITS: u32 = 6;
const BLOCK: usize = 1 << BLOCK_BITS;
const BLOCK_MASK: u32 = BLOCK as u32 - 1;

/// Up to [`CHUNK`] entries of one slot, in order, and the link to the slot's next chunk.
///
/// Invariant (what makes reading entries sound): every position below `end` has been written
/// since the chunk last left the pool, and `start <= end <= CHUNK`. Positions `start..end` are
/// the live entries; those below `start` were taken already (or compacted away) but are still
/// initialized, so moving `start` down again is sound too.
#[repr(C, align(64))]
pub(crate) struct Chunk<T> {
    /// The slot's next chunk, or the pool's next free chunk; [`NIL`] at the end.
    next: u32,
    start: u32,
    end: u32,
    /// Bumped each time the chunk goes back to the pool.
    epoch: u32,
    entries: [MaybeUninit<Entry<T>>; CHUNK],
}

impl<T: Copy> Clone for Chunk<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Copy> Copy for Chunk<T> {}

impl<T: Copy> Chunk<T> {
    fn vacant(next: u32) -> Self {
        Chunk {
            next,
            start: 0,
            end: 0,
            epoch: 0,
            entries: [MaybeUninit::uninit(); CHUNK],
        }
    }

    pub(crate) fn next(&self) -> u32 {
        self.next
    }

    pub(crate) fn set_next(&mut self, next: u32) {
        self.next = next;
    }

    pub(crate) fn start(&self) -> usize {
        self.start as usize
    }

    pub(crate) fn end(&self) -> usize {
        self.end as usize
    }

    pub(crate) fn epoch(&self) -> u32 {
        self.epoch
    }

    pub(crate) fn is_full(&self) -> bool {
        self.end() == CHUNK
    }

    /// Every initialized position, `0..end`.
    fn initialized(&self) -> &[Entry<T>] {
        let written = &self.entries[..self.end()];
        // SAFETY: positions below `end` are initialized (the type's invariant), and
        // `MaybeUninit<E>` has the layout of `E`.
        unsafe { &*(written as *const [MaybeUninit<Entry<T>>] as *const [Entry<T>]) }
    }

    /// Every initialized position, `0..end`, to write in place.
    pub(crate) fn initialized_mut(&mut self) -> &mut [Entry<T>] {
        let end = self.end();
        let written = &mut self.entries[..end];
        // SAFETY: as in `initialized`; writing an `Entry<T>` through the slice keeps the
        // positions initialized.
        unsafe { &mut *(written as *mut [MaybeUninit<Entry<T>>] as *mut [Entry<T>]) }
    }

    /// The initialized entries from position `at` on, `at..end` (`at <= end`).
    pub(crate) fn from(&self, at: usize) -> &[Entry<T>] {
        &self.initialized()[at..]
    }

    /// The live entries, `start..end`.
    pub(crate) fn live(&self) -> &[Entry<T>] {
        &self.initialized()[self.start()..]
    }

    /// Appends `entry` (the chunk is not full).
    pub(crate) fn push(&mut self, entry: Entry<T>) {
        let end = self.end();
        self.entries[end] = MaybeUninit::new(entry);
        self.end += 1;
    }

    /// Appends `entries` (there is room for them).
    pub(crate) fn extend(&mut self, entries: &[Entry<T>]) {
        let end = self.end();
        for (place, &entry) in self.entries[end..end + entries.len()]
            .iter_mut()
            .zip(entries)
        {
            *place = MaybeUninit::new(entry);
        }
        self.end += entries.len() as u32;
    }

    /// Takes the first live entry, if any.
    pub(crate) fn pop_front(&mut self) -> Option<Entry<T>> {
        let entry = *self.initialized().get(self.start())?;
        self.start += 1;
        Some(entry)
    }

    /// Makes `start..end` the live entries (`start <= end <=` the current end): positions
    /// past the new end are forgotten, and those below the new start were written already.
    pub(crate) fn set_live(&mut self, start: usize, end: usize) {
        assert!(
            start <= end && end <= self.end(),
            "a chunk's live range only shrinks"
        );
        self.start = start as u32;
        self.end = end as u32;
    }
}

/// Every chunk of a wheel: blocks of [`BLOCK`] chunks that never move, and a free list of the
/// chunks no slot holds (the pool), most recently freed first, so a chunk that was just
/// emptied, still in cache, is the next one filled.
pub(crate) struct Chunks<T> {
    blocks: Vec<Box<[Chunk<T>; BLOCK]>>,
    /// The first free chunk, or [`NIL`].
    free: u32,
    /// How many chunks are free.
    spare: usize,
}

impl<T: Copy> Default for Chunks<T> {
    fn default() -> Self {
        Chunks {
            blocks: Vec::new(),
            free: NIL,
            spare: 0,
        }
    }
}

impl<T: Copy> Clone for Chunks<T> {
    fn clone(&self) -> Self {
        // Through a `Vec` rather than `Box::clone`, which would build the 64 KiB block on the
        // stack first.
        let blocks = self
            .blocks
            .iter()
            .map(|block| boxed_block(block.to_vec()))
            .collect();
        Chunks {
            blocks,
            free: self.free,
            spare: self.spare,
        }
    }
}

/// A block's chunks in a `Vec` of exactly [`BLOCK`], boxed as an array.
fn boxed_block<T>(chunks: Vec<Chunk<T>>) -> Box<[Chunk<T>; BLOCK]> {
    match chunks.into_boxed_slice().try_into() {
        Ok(block) => block,
        Err(_) => unreachable!("a block is built with exactly BLOCK chunks"),
    }
}

/// The error `Vec` gives for a size past what it can address, for a request past the `u32`
/// chunk ids: std offers no other way to make a `TryReserveError`.
fn capacity_overflow() -> TryReserveError {
    Vec::<u8>::new()
        .try_reserve(usize::MAX)
        .expect_err("no Vec holds usize::MAX bytes")
}

impl<T: Copy> Chunks<T> {
    /// Chunk `id`.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> &Chunk<T> {
        &self.blocks[(id >> BLOCK_BITS) as usize][(id & BLOCK_MASK) as usize]
    }

    /// Chunk `id`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: u32) -> &mut Chunk<T> {
        &mut self.blocks[(id >> BLOCK_BITS) as usize][(id & BLOCK_MASK) as usize]
    }

    /// Starts loading chunk `id` into cache: every line of it, so a walk that reaches it finds
    /// its entries there (consecutive chunks of a slot lie anywhere in memory, where a
    /// hardware prefetcher following the walk cannot guess them).
    #[inline]
    pub(crate) fn prefetch(&self, id: u32) {
        #[cfg(target_arch = "x86_64")]
        if id != NIL {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let first = (self.get(id) as *const Chunk<T>).cast::<i8>();
            for line in (0..size_of::<Chunk<T>>()).step_by(64) {
                // SAFETY: a prefetch is only a hint: it never faults and changes no memory, and
                // the address lies within the chunk anyway. SSE is part of the x86_64 baseline.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(line)) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = id;
    }

    /// An empty chunk from the pool, linked to nothing; a new block when the pool is empty.
    ///
    /// # Panics
    /// When the wheel would hold more than `u32::MAX - 1` chunks (about 4 TiB).
    pub(crate) fn alloc(&mut self) -> u32 {
        if self.free == NIL {
            let block = self
                .new_block(Vec::with_capacity(BLOCK))
                .expect("wheel-core: more than u32::MAX - 1 chunks");
            self.blocks.push(block);
        }
        let id = self.free;
        let chunk = self.get_mut(id);
        let next = chunk.next;
        chunk.next = NIL;
        debug_assert!(chunk.start == 0 && chunk.end == 0);
        self.free = next;
        self.spare -= 1;
        id
    }

    /// Gives chunk `id`, which no slot links to any more, back to the pool.
    pub(crate) fn release(&mut self, id: u32) {
        let free = self.free;
        let chunk = self.get_mut(id);
        chunk.epoch = chunk.epoch.wrapping_add(1);
        chunk.start = 0;
        chunk.end = 0;
        chunk.next = free;
        self.free = id;
        self.spare += 1;
    }

    /// Chunks in the pool.
    pub(crate) fn spare(&self) -> usize {
        self.spare
    }

    /// Chunks allocated, in use or spare.
    pub(crate) fn total(&self) -> usize {
        self.blocks.len() * BLOCK
    }

    /// Adds blocks until at least `spare` chunks are in the pool, reporting an allocation the
    /// allocator refuses (or chunk ids running out) instead of aborting. The blocks are written
    /// whole as they are made, so their pages are faulted in now, not by the inserts that use
    /// them. On an error the blocks added before it stay.
    pub(crate) fn try_reserve_spare(&mut self, spare: usize) -> Result<(), TryReserveError> {
        if self.spare >= spare {
            return Ok(());
        }
        let blocks = (spare - self.spare).div_ceil(BLOCK);
        if blocks > (NIL as usize - self.total()) / BLOCK {
            return Err(capacity_overflow());
        }
        self.blocks.try_reserve_exact(blocks)?;
        for _ in 0..blocks {
            let mut chunks = Vec::new();
            chunks.try_reserve_exact(BLOCK)?;
            let block = self.new_block(chunks)?;
            self.blocks.push(block);
        }
        Ok(())
    }

    /// The next block (its chunks' ids follow the last block's), built in `chunks` (empty, with
    /// room for [`BLOCK`]), with all its chunks put on the free list.
    fn new_block(
        &mut self,
        mut chunks: Vec<Chunk<T>>,
    ) -> Result<Box<[Chunk<T>; BLOCK]>, TryReserveError> {
        let first = self.total();
        if first + BLOCK > NIL as usize {
            return Err(capacity_overflow());
        }
        for i in 0..BLOCK {
            let next = if i + 1 < BLOCK {
                (first + i + 1) as u32
            } else {
                self.free
            };
            chunks.push(Chunk::vacant(next));
        }
        self.free = first as u32;
        self.spare += BLOCK;
        Ok(boxed_block(chunks))
    }

    /// Bytes of the chunks themselves: what [`Chunks::try_reserve_spare`]`(chunks)` allocates in
    /// an empty store, whole blocks and their pointers.
    pub(crate) fn bytes_for(chunks: usize) -> usize {
        let blocks = chunks.div_ceil(BLOCK);
        blocks.saturating_mul(size_of::<[Chunk<T>; BLOCK]>() + size_of::<Box<[Chunk<T>; BLOCK]>>())
    }

    /// Bytes allocated now.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.blocks.len() * size_of::<[Chunk<T>; BLOCK]>()
            + self.blocks.capacity() * size_of::<Box<[Chunk<T>; BLOCK]>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(deadline: u64) -> Entry<[u32; 2]> {
        Entry {
            deadline,
            value: [deadline as u32, 7],
        }
    }

    #[test]
    fn a_chunk_of_8_byte_values_is_1_kib() {
        assert_eq!(size_of::<Chunk<[u32; 2]>>(), 1024);
        assert_eq!(size_of::<Chunk<u64>>(), 1024);
        assert_eq!(std::mem::align_of::<Chunk<u64>>(), 64);
    }

    #[test]
    fn the_pool_hands_back_the_chunk_freed_last() {
        let mut chunks = Chunks::<[u32; 2]>::default();
        let a = chunks.alloc();
        let b = chunks.alloc();
        assert_ne!(a, b);
        assert_eq!(chunks.total(), BLOCK);
        assert_eq!(chunks.spare(), BLOCK - 2);
        let epoch = chunks.get(a).epoch();
        chunks.get_mut(a).push(entry(1));
        chunks.release(a);
        assert_eq!(chunks.get(a).epoch(), epoch.wrapping_add(1));
        assert_eq!(chunks.alloc(), a, "most recently freed first");
        assert!(chunks.get(a).live().is_empty(), "a chunk comes back empty");
        for _ in 0..BLOCK - 2 {
            chunks.alloc();
        }
        assert_eq!((chunks.spare(), chunks.total()), (0, BLOCK));
        chunks.alloc();
        assert_eq!(
            chunks.total(),
            2 * BLOCK,
            "a new block when the pool is empty"
        );
    }

    #[test]
    fn live_entries_push_pop_and_shrink() {
        let mut chunks = Chunks::<[u32; 2]>::default();
        let id = chunks.alloc();
        let chunk = chunks.get_mut(id);
        for d in 0..CHUNK as u64 {
            assert!(!chunk.is_full());
            chunk.push(entry(d));
        }
        assert!(chunk.is_full());
        assert_eq!(chunk.pop_front(), Some(entry(0)));
        assert_eq!(chunk.live().len(), CHUNK - 1);
        assert_eq!(chunk.from(5)[0], entry(5));
        chunk.initialized_mut()[0] = entry(99);
        chunk.set_live(0, 3);
        assert_eq!(chunk.live(), [entry(99), entry(1), entry(2)]);
        chunk.set_live(3, 3);
        assert_eq!(chunk.pop_front(), None);
    }

    #[test]
    #[should_panic(expected = "only shrinks")]
    fn a_live_range_never_grows_past_what_was_written() {
        let mut chunks = Chunks::<u64>::default();
        let id = chunks.alloc();
        chunks.get_mut(id).set_live(0, 1);
    }

    #[test]
    fn reserving_fills_the_pool_in_whole_blocks() {
        let mut chunks = Chunks::<u64>::default();
        chunks.try_reserve_spare(BLOCK + 1).unwrap();
        assert_eq!((chunks.spare(), chunks.total()), (2 * BLOCK, 2 * BLOCK));
        assert_eq!(
            chunks.allocated_bytes(),
            Chunks::<u64>::bytes_for(BLOCK + 1)
        );
        chunks.try_reserve_spare(10).unwrap();
        assert_eq!(chunks.total(), 2 * BLOCK, "enough already");
        let copy = chunks.clone();
        assert_eq!(copy.spare(), chunks.spare());
    }
}
