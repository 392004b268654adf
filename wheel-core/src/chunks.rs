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
//! A chunk is 1 KiB, aligned to a cache line: 16 bytes of header and as many entries as fit in
//! the rest (126 of 8 bytes, 84 of 12, 63 of 16; see [`Stored`]), so no 8- or 16-byte entry
//! straddles two lines. The header links the chunk into its slot's list and says
//! which of its entries are live (`start..end`); an epoch, bumped whenever the chunk goes back
//! to the pool, lets a cursor kept across calls (`Wheel::retain`'s) tell whether the chunk it
//! remembers still holds what it did.
//!
//! Blocks double in size from 64 chunks up to 32 Ki chunks (32 MiB of 1 KiB chunks), so a
//! small wheel stays small and a big one is made of few large mappings. A block comes zeroed,
//! which is what an unused chunk is; a large one comes from the operating system, so its pages
//! become resident only as its chunks are first used, or when a caller makes them resident
//! ahead of use ([`Chunks::untouched_ahead`]; see `block.rs`).

use std::collections::TryReserveError;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, MaybeUninit};
use std::ops::Range;

use crate::block::{Block, Zeroable};
use crate::entry::Stored;

/// "No chunk": the end of a list.
pub(crate) const NIL: u32 = u32::MAX;

/// Chunk ids per block: a chunk's id is its block's index above these bits and its place in
/// the block below them. The largest block holds this many, 32 MiB of 1 KiB chunks.
const BLOCK_BITS: u32 = 15;
const BLOCK: usize = 1 << BLOCK_BITS;
const BLOCK_MASK: u32 = BLOCK as u32 - 1;
/// Chunks in the first block; each next one holds twice as many, up to [`BLOCK`].
const FIRST_BLOCK: usize = 64;
/// Blocks there can be: the last id of one more would be [`NIL`].
const MAX_BLOCKS: usize = (NIL >> BLOCK_BITS) as usize;

/// Blocks before the first of [`BLOCK`] chunks: [`FIRST_BLOCK`] doubles to it in this many.
const GROWING_BLOCKS: usize = (BLOCK.trailing_zeros() - FIRST_BLOCK.trailing_zeros()) as usize;

/// How many chunks block `index` holds. (A shift is no way past [`GROWING_BLOCKS`]: shifted
/// by 58 or more, `FIRST_BLOCK`'s bit leaves the word and the length reads 0.)
fn block_len(index: usize) -> usize {
    if index >= GROWING_BLOCKS {
        BLOCK
    } else {
        FIRST_BLOCK << index
    }
}

/// The id after `id` in the order chunks are first handed out: the next place in its block,
/// or the first of the next block.
fn next_fresh(id: u32) -> u32 {
    let block = (id >> BLOCK_BITS) as usize;
    if ((id & BLOCK_MASK) as usize) + 1 < block_len(block) {
        id + 1
    } else {
        ((block + 1) << BLOCK_BITS) as u32
    }
}

/// Blocks that hold the first `chunks` chunks: the growing ones while they suffice, then
/// whole [`BLOCK`]s.
fn blocks_for(chunks: usize) -> usize {
    let mut held = 0;
    for blocks in 0.. {
        let len = block_len(blocks);
        if held >= chunks {
            return blocks;
        }
        if len == BLOCK {
            return blocks + (chunks - held).div_ceil(BLOCK);
        }
        held += len;
    }
    unreachable!("blocks grow to BLOCK")
}

/// Bytes of a chunk's entries: with its 16-byte header, a chunk is 1 KiB.
const ROOM: usize = 1008;

/// Up to [`Chunk::CAPACITY`] entries of one slot, in order, and the link to the slot's next
/// chunk.
///
/// Invariant (what makes reading entries sound): every position below `end` has been written
/// since the chunk last left the pool, and `start <= end <= CAPACITY`. Positions `start..end`
/// are the live entries; those below `start` were taken already (or compacted away) but are
/// still initialized, so moving `start` down again is sound too.
#[repr(C, align(64))]
pub(crate) struct Chunk<V> {
    /// The slot's next chunk, or the pool's next free chunk; [`NIL`] at the end.
    next: u32,
    start: u32,
    end: u32,
    /// Bumped each time the chunk goes back to the pool.
    epoch: u32,
    /// The entries, `Stored<V>` each, from the chunk's 16th byte (so 16-byte aligned).
    room: [MaybeUninit<u64>; ROOM / 8],
    held: PhantomData<V>,
}

// SAFETY: an all-zero chunk is a valid, empty one (four `u32`s, and entries that are
// `MaybeUninit`); its alignment is 64.
unsafe impl<V> Zeroable for Chunk<V> {}

impl<V: Copy> Clone for Chunk<V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V: Copy> Copy for Chunk<V> {}

impl<V: Copy> Chunk<V> {
    /// Entries a chunk holds: 126 of 8 bytes, 84 of 12, 63 of 16.
    pub(crate) const CAPACITY: usize = {
        assert!(
            align_of::<Stored<V>>() <= 16 && size_of::<Stored<V>>() <= ROOM,
            "wheel-core: a value must be small (at most 16-byte aligned, 1000 bytes)"
        );
        ROOM / size_of::<Stored<V>>()
    };

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

    fn entries(&self) -> *const Stored<V> {
        self.room.as_ptr().cast()
    }

    fn entries_mut(&mut self) -> *mut Stored<V> {
        self.room.as_mut_ptr().cast()
    }

    /// Every initialized position, `0..end`.
    fn initialized(&self) -> &[Stored<V>] {
        // SAFETY: positions below `end` are initialized (the type's invariant) and lie within
        // `room` (`end <= CAPACITY`); `room` starts 16 bytes into a 64-byte aligned chunk,
        // which suits `Stored<V>`'s alignment (at most 16, checked by `CAPACITY`).
        unsafe { std::slice::from_raw_parts(self.entries(), self.end()) }
    }

    /// Every initialized position, `0..end`, to write in place.
    pub(crate) fn initialized_mut(&mut self) -> &mut [Stored<V>] {
        let end = self.end();
        // SAFETY: as in `initialized`; writing a `Stored<V>` through the slice keeps the
        // positions initialized.
        unsafe { std::slice::from_raw_parts_mut(self.entries_mut(), end) }
    }

    /// The initialized entries from position `at` on, `at..end` (`at <= end`).
    pub(crate) fn from(&self, at: usize) -> &[Stored<V>] {
        &self.initialized()[at..]
    }

    /// The live entries, `start..end`.
    pub(crate) fn live(&self) -> &[Stored<V>] {
        &self.initialized()[self.start()..]
    }

    /// Appends `entry` (the chunk is not full).
    #[inline]
    pub(crate) fn push(&mut self, entry: Stored<V>) {
        self.push_at(self.end(), entry);
    }

    /// [`Chunk::push`] for a caller that knows `end` already (`end` is the chunk's end): the
    /// header is written, not read.
    #[inline]
    pub(crate) fn push_at(&mut self, end: usize, entry: Stored<V>) {
        debug_assert_eq!(
            end,
            self.end(),
            "the caller's copy of the end is the chunk's"
        );
        assert!(end < Self::CAPACITY, "a push onto a full chunk");
        // SAFETY: position `end` lies within `room` and is aligned (see `initialized`).
        unsafe { self.entries_mut().add(end).write(entry) };
        self.end = end as u32 + 1;
    }

    /// Appends `entries` (there is room for them).
    pub(crate) fn extend(&mut self, entries: &[Stored<V>]) {
        for &entry in entries {
            self.push(entry);
        }
    }

    /// Takes the first live entry, if any.
    pub(crate) fn pop_front(&mut self) -> Option<Stored<V>> {
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

/// Every chunk of a wheel: blocks that never move, and a free list of the chunks no slot
/// holds (the pool), most recently freed first, so a chunk that was just emptied, still in
/// cache, is the next one filled.
///
/// Chunks are handed out from the free list, else in id order from the never-used ones
/// (`fresh` on). The never-used ones [`Chunks::try_reserve_spare`] wrote ahead of use run from
/// `fresh` to `written`; chunks from `written` on are zeros no one has touched, and a zeroed
/// chunk is a valid, empty one.
pub(crate) struct Chunks<T> {
    /// Block `i` holds `block_len(i)` chunks.
    blocks: Vec<Block<Chunk<T>>>,
    /// The first free chunk, or [`NIL`].
    free: u32,
    /// How many chunks are on the free list.
    freed: usize,
    /// The first chunk never handed out.
    fresh: u32,
    /// The first chunk never written.
    written: u32,
    /// Chunks written, in use or spare.
    total: usize,
    /// Never-used chunks written ahead of use (`fresh..written`).
    reserved: usize,
}

impl<T: Copy> Default for Chunks<T> {
    fn default() -> Self {
        Chunks {
            blocks: Vec::new(),
            free: NIL,
            freed: 0,
            fresh: 0,
            written: 0,
            total: 0,
            reserved: 0,
        }
    }
}

impl<T: Copy> Clone for Chunks<T> {
    fn clone(&self) -> Self {
        let blocks = self
            .blocks
            .iter()
            .enumerate()
            .map(|(index, block)| {
                let mut copy = Block::zeroed(block.len()).expect("memory for a copy of a wheel");
                // Only what was written: the rest is zeros in both.
                let first = (index << BLOCK_BITS) as u32;
                let written = self.written.saturating_sub(first) as usize;
                copy[..written.min(block.len())]
                    .copy_from_slice(&block[..written.min(block.len())]);
                copy
            })
            .collect();
        Chunks {
            blocks,
            free: self.free,
            freed: self.freed,
            fresh: self.fresh,
            written: self.written,
            total: self.total,
            reserved: self.reserved,
        }
    }
}

/// The error `Vec` gives for a size past what it can address, for a request past the `u32`
/// chunk ids or refused by the allocator: std offers no other way to make a `TryReserveError`.
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
        if id != NIL {
            wheel_platform::hint::prefetch_lines(self.get(id));
        }
    }

    /// An empty chunk from the pool, linked to nothing; a new block when the pool is empty.
    ///
    /// # Panics
    /// When the wheel would hold more than about 4 G chunks (4 TiB), or the allocator refuses
    /// a block.
    pub(crate) fn alloc(&mut self) -> u32 {
        if self.free != NIL {
            let id = self.free;
            let chunk = self.get_mut(id);
            let next = chunk.next;
            chunk.next = NIL;
            debug_assert!(chunk.start == 0 && chunk.end == 0);
            self.free = next;
            self.freed -= 1;
            return id;
        }
        self.alloc_fresh()
    }

    /// The first chunk never handed out (after adding a block if it begins one).
    #[cold]
    fn alloc_fresh(&mut self) -> u32 {
        let id = self.fresh;
        if id == self.written {
            self.write_next()
                .expect("wheel-core: no more chunk ids, or no memory for a block");
        }
        self.reserved -= 1;
        self.fresh = next_fresh(id);
        id
    }

    /// Writes the first chunk never written, adding its block first if it begins one.
    fn write_next(&mut self) -> Result<(), TryReserveError> {
        let id = self.written;
        let block = (id >> BLOCK_BITS) as usize;
        if block == self.blocks.len() {
            if block >= MAX_BLOCKS {
                return Err(capacity_overflow());
            }
            self.add_block()?;
        }
        // A zeroed chunk is empty, but links to chunk 0.
        self.get_mut(id).next = NIL;
        self.written = next_fresh(id);
        self.total += 1;
        self.reserved += 1;
        Ok(())
    }

    /// Adds the next block, zeroed (below [`MAX_BLOCKS`]).
    fn add_block(&mut self) -> Result<(), TryReserveError> {
        self.blocks.try_reserve_exact(1)?;
        let new = Block::zeroed(block_len(self.blocks.len())).ok_or_else(capacity_overflow)?;
        self.blocks.push(new);
        Ok(())
    }

    /// Empties chunk `id` of a list being taken apart: copies its live entries into `into`
    /// (cleared first), gives the chunk back to the pool, and returns the next chunk of the
    /// list, which it starts loading.
    pub(crate) fn move_out(&mut self, id: u32, into: &mut Vec<Stored<T>>) -> u32 {
        let chunk = self.get(id);
        into.clear();
        into.extend_from_slice(chunk.live());
        let next = chunk.next();
        self.prefetch(next);
        self.release(id);
        next
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
        self.freed += 1;
    }

    /// Chunks in the pool that are written already: freed ones, and never-used ones that
    /// [`Chunks::try_reserve_spare`] wrote.
    pub(crate) fn spare(&self) -> usize {
        self.freed + self.reserved
    }

    /// Chunks written (and so resident), in use or spare.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Makes at least `spare` chunks spare, adding blocks as needed and writing the never-used
    /// chunks it counts, so their pages are faulted in now, not by the inserts that use them.
    /// Reports an allocation the allocator refuses (or chunk ids running out) instead of
    /// aborting; on an error the blocks added before it stay.
    pub(crate) fn try_reserve_spare(&mut self, spare: usize) -> Result<(), TryReserveError> {
        let missing = spare.saturating_sub(self.spare());
        if self.total.saturating_add(missing) >= MAX_BLOCKS * BLOCK {
            return Err(capacity_overflow());
        }
        for _ in 0..missing {
            self.write_next()?;
        }
        Ok(())
    }

    /// Where the never-written chunks handed out next lie, up to `chunks` of them, as address
    /// ranges, one per block they span, in the order they are handed out; adds (untouched)
    /// the blocks they reach into. The blocks never move while the pool lives, and the pool
    /// writes those chunks whenever it hands them out, so another thread may only do to them
    /// what keeps their contents (make their pages resident); see `Wheel::untouched_ahead`.
    /// A block the allocator refuses, or more chunks than ids are left for, is an error, and
    /// then nothing changes: the blocks this call added go again (nothing refers to them).
    pub(crate) fn untouched_ahead(
        &mut self,
        chunks: usize,
    ) -> Result<Vec<Range<usize>>, TryReserveError> {
        if self.total.saturating_add(chunks) >= MAX_BLOCKS * BLOCK {
            return Err(capacity_overflow());
        }
        let blocks_before = self.blocks.len();
        let mut ranges = Vec::new();
        let (mut id, mut left) = (self.written, chunks);
        while left > 0 && ((id >> BLOCK_BITS) as usize) < MAX_BLOCKS {
            let block = (id >> BLOCK_BITS) as usize;
            if block == self.blocks.len() {
                if let Err(error) = self.add_block() {
                    self.blocks.truncate(blocks_before);
                    return Err(error);
                }
            }
            let at = (id & BLOCK_MASK) as usize;
            let len = (block_len(block) - at).min(left);
            let first = self.blocks[block][at..].as_ptr() as usize;
            ranges.push(first..first + len * size_of::<Chunk<T>>());
            left -= len;
            id = ((block + 1) << BLOCK_BITS) as u32;
        }
        Ok(ranges)
    }

    /// Bytes [`Chunks::try_reserve_spare`]`(chunks)` writes in an empty pool: the chunks
    /// themselves and the blocks' pointers.
    pub(crate) fn bytes_for(chunks: usize) -> usize {
        chunks
            .saturating_mul(size_of::<Chunk<T>>())
            .saturating_add(blocks_for(chunks).saturating_mul(size_of::<Block<Chunk<T>>>()))
    }

    /// Bytes written now: the chunks written and the blocks' pointers (a block's chunks past
    /// those are untouched zeros).
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.total * size_of::<Chunk<T>>() + self.blocks.capacity() * size_of::<Block<Chunk<T>>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(deadline: u64) -> Stored<[u32; 2]> {
        Stored::new(deadline, [deadline as u32, 7])
    }

    const CHUNK: usize = Chunk::<[u32; 2]>::CAPACITY;

    #[test]
    fn a_chunk_is_1_kib_and_holds_what_fits() {
        assert_eq!(size_of::<Chunk<[u32; 2]>>(), 1024);
        assert_eq!(size_of::<Chunk<u64>>(), 1024);
        assert_eq!(align_of::<Chunk<u64>>(), 64);
        assert_eq!(Chunk::<u32>::CAPACITY, 126);
        assert_eq!(CHUNK, 84);
        assert_eq!(Chunk::<u64>::CAPACITY, 63);
    }

    #[test]
    fn the_pool_hands_back_the_chunk_freed_last() {
        let mut chunks = Chunks::<[u32; 2]>::default();
        let a = chunks.alloc();
        let b = chunks.alloc();
        assert_eq!((a, b), (0, 1), "never-used chunks in id order");
        assert_eq!((chunks.total(), chunks.spare()), (2, 0));
        let epoch = chunks.get(a).epoch();
        chunks.get_mut(a).push(entry(1));
        chunks.release(a);
        assert_eq!(chunks.get(a).epoch(), epoch.wrapping_add(1));
        assert_eq!(chunks.spare(), 1);
        assert_eq!(chunks.alloc(), a, "most recently freed first");
        assert!(chunks.get(a).live().is_empty(), "a chunk comes back empty");
        assert_eq!(chunks.get(a).next(), NIL, "linked to nothing");
        for _ in 2..FIRST_BLOCK {
            chunks.alloc();
        }
        assert_eq!(chunks.blocks.len(), 1);
        let c = chunks.alloc();
        assert_eq!(c as usize, BLOCK, "a new block when the first is used up");
        assert_eq!(chunks.blocks.len(), 2);
        assert_eq!(chunks.blocks[1].len(), 2 * FIRST_BLOCK, "twice as large");
        assert_eq!(chunks.get(c).next(), NIL);
        assert!(chunks.get(c).live().is_empty());
    }

    #[test]
    fn live_entries_push_pop_and_shrink() {
        let mut chunks = Chunks::<[u32; 2]>::default();
        let id = chunks.alloc();
        let chunk = chunks.get_mut(id);
        for d in 0..CHUNK as u64 {
            assert!(chunk.end() < Chunk::<[u32; 2]>::CAPACITY);
            chunk.push(entry(d));
        }
        assert_eq!(chunk.end(), Chunk::<[u32; 2]>::CAPACITY);
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
    #[cfg_attr(miri, ignore = "arithmetic only, no unsafe: 131 071 block lengths")]
    fn blocks_double_up_to_the_largest() {
        assert_eq!(block_len(0), FIRST_BLOCK);
        assert_eq!(block_len(1), 2 * FIRST_BLOCK);
        assert_eq!(block_len(100), BLOCK);
        assert!(
            (0..MAX_BLOCKS).all(|i| block_len(i) > 0),
            "no block past the 58th is empty (a shift would make it so)"
        );
        assert_eq!(blocks_for(0), 0);
        assert_eq!(blocks_for(FIRST_BLOCK), 1);
        assert_eq!(blocks_for(FIRST_BLOCK + 1), 2);
        let growing: usize = (0..).map(block_len).take_while(|&len| len < BLOCK).sum();
        let growing_blocks = (0..).take_while(|&i| block_len(i) < BLOCK).count();
        assert_eq!(blocks_for(growing), growing_blocks);
        assert_eq!(blocks_for(growing + 1), growing_blocks + 1);
        assert_eq!(blocks_for(growing + BLOCK + 1), growing_blocks + 2);
        assert!(
            blocks_for(usize::MAX) > MAX_BLOCKS,
            "no loop over the blocks"
        );
        assert_eq!(next_fresh(0), 1);
        assert_eq!(
            next_fresh(FIRST_BLOCK as u32 - 1),
            BLOCK as u32,
            "on to block 1"
        );
    }

    #[test]
    fn untouched_ahead_names_the_chunks_handed_out_next() {
        let mut chunks = Chunks::<u64>::default();
        let size = size_of::<Chunk<u64>>();
        let ranges = chunks.untouched_ahead(10).unwrap();
        assert_eq!(chunks.blocks.len(), 1, "the first block, added");
        assert_eq!(ranges.len(), 1);
        assert_eq!(ranges[0].start, chunks.get(0) as *const _ as usize);
        assert_eq!(ranges[0].len(), 10 * size);
        assert_eq!(chunks.total(), 0, "nothing written");
        let id = chunks.alloc();
        assert_eq!(id, 0, "the first chunk named is the first handed out");
        for _ in 1..FIRST_BLOCK - 3 {
            chunks.alloc();
        }
        let ranges = chunks.untouched_ahead(3 + 2 * FIRST_BLOCK + 7).unwrap();
        assert_eq!(
            chunks.blocks.len(),
            3,
            "the next blocks, added ahead of use"
        );
        let [rest, next, after] = <[_; 3]>::try_from(ranges).unwrap();
        assert_eq!(
            rest.start,
            chunks.get(FIRST_BLOCK as u32 - 3) as *const _ as usize
        );
        assert_eq!(rest.len(), 3 * size, "the rest of the first block");
        assert_eq!(next.start, chunks.get(BLOCK as u32) as *const _ as usize);
        assert_eq!(next.len(), 2 * FIRST_BLOCK * size, "the whole second");
        assert_eq!(
            after.start,
            chunks.get(2 * BLOCK as u32) as *const _ as usize
        );
        assert_eq!(after.len(), 7 * size, "the start of the third");
        for _ in 0..3 {
            chunks.alloc();
        }
        assert_eq!(
            chunks.alloc(),
            BLOCK as u32,
            "the block added ahead is used next"
        );
        assert_eq!(chunks.blocks.len(), 3);
        assert!(chunks.untouched_ahead(0).unwrap().is_empty());
    }

    #[test]
    fn reserving_writes_the_chunks_it_counts() {
        let mut chunks = Chunks::<u64>::default();
        // Under Miri, which checks every chunk written and every byte of the copy below,
        // the first three blocks and a chunk of the fourth.
        let n = if cfg!(miri) {
            7 * FIRST_BLOCK + 1
        } else {
            3 * BLOCK + 1
        };
        chunks.try_reserve_spare(n).unwrap();
        assert_eq!((chunks.spare(), chunks.total()), (n, n));
        assert_eq!(chunks.blocks.len(), blocks_for(n));
        assert_eq!(
            (0..chunks.blocks.len()).map(block_len).sum::<usize>(),
            chunks.blocks.iter().map(|b| b.len()).sum::<usize>()
        );
        assert_eq!(chunks.allocated_bytes(), Chunks::<u64>::bytes_for(n));
        chunks.try_reserve_spare(10).unwrap();
        assert_eq!(chunks.total(), n, "enough already");
        let id = chunks.alloc();
        assert_eq!(
            (id, chunks.spare()),
            (0, n - 1),
            "reserved chunks are used first"
        );
        chunks.get_mut(id).push(Stored::new(3, 4));
        let copy = chunks.clone();
        assert_eq!(copy.spare(), chunks.spare());
        assert_eq!(copy.get(id).live(), chunks.get(id).live());
        let blocks = chunks.blocks.len();
        assert!(chunks.try_reserve_spare(NIL as usize).is_err());
        assert_eq!(chunks.blocks.len(), blocks, "nothing added for a refusal");
    }
}
