//! [`FiredList`]: the indices of the timers whose callbacks ran on one thread.
//!
//! Appending is a sequential write, so a callback's bookkeeping stays off the cache misses a
//! per-timer structure would cost it at 10 M timers (work the bench would charge to the
//! system under test).
//!
//! The lists' memory is one [`FiredPool`] per run, mapped and written when the run starts,
//! before the system starts and before the bench reads its memory baseline. Each round shares
//! the pool out afresh ([`FiredChunks`]): a list takes a chunk of [`CHUNK`] indices at a time,
//! under a lock taken once per chunk. So:
//!
//! - no callback faults a page in: a list mapped lazily did, once per 1 024 callbacks, inside
//!   the measured round, on the system's threads;
//! - the bytes-per-timer figure, which reads the process's RSS against that baseline, holds
//!   none of the lists' memory.
//!
//! The pool holds a round's timers plus [`SPARE_CHUNKS`], for the chunks threads leave part
//! full. A list that finds the pool empty (more threads than that, or a stray callback after
//! its round closed) goes on in memory of its own, so nothing is lost, only slower.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

/// Indices in a chunk: 16 KiB.
pub(crate) const CHUNK: usize = 4096;
/// Indices in one 64-byte cache line of a chunk (chunks start on a line).
const PER_LINE: usize = 64 / std::mem::size_of::<u32>();
/// Chunks in the pool beyond a round's timers: room for that many threads' part-full ones.
pub(crate) const SPARE_CHUNKS: usize = 64;

/// The memory of a run's fired lists, resident from its creation (see the module doc).
pub(crate) struct FiredPool {
    /// `chunks * CHUNK` indices, mapped for the pool alone (dangling when `chunks` is 0).
    start: NonNull<u32>,
    chunks: usize,
}

// SAFETY: the pool is plain memory; a chunk of it is written only by the one list a round's
// `FiredChunks` handed it to, and read by others only under that list's owner's lock.
unsafe impl Send for FiredPool {}
// SAFETY: as for `Send`: `&FiredPool` gives no access to the memory by itself.
unsafe impl Sync for FiredPool {}

impl FiredPool {
    /// A pool for rounds of `timers` timers, every page of it written now. One the OS refuses
    /// has no chunks, and the lists then use memory of their own.
    pub(crate) fn new(timers: usize) -> FiredPool {
        let chunks = timers.div_ceil(CHUNK) + SPARE_CHUNKS;
        let empty = FiredPool {
            start: NonNull::dangling(),
            chunks: 0,
        };
        let Some(bytes) = chunks.checked_mul(CHUNK * 4) else {
            return empty;
        };
        // SAFETY: an anonymous private mapping at an address of the OS's choice; no existing
        // memory is affected.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return empty;
        }
        // SAFETY: the mapping is `bytes` long, writable, and this pool's alone. Writing it
        // makes its pages resident now rather than in a callback.
        unsafe { std::ptr::write_bytes(address.cast::<u8>(), 0, bytes) };
        FiredPool {
            start: NonNull::new(address.cast()).expect("mmap never maps at address 0"),
            chunks,
        }
    }

    /// Chunk `index`'s first index (`index < chunks`).
    fn chunk(&self, index: usize) -> NonNull<u32> {
        debug_assert!(index < self.chunks);
        // SAFETY: `index < chunks`, so the offset lies within the mapping.
        unsafe { self.start.add(index * CHUNK) }
    }
}

impl Drop for FiredPool {
    fn drop(&mut self) {
        if self.chunks > 0 {
            // SAFETY: the mapping was made by `new` with exactly this length, and no list
            // outlives the pool (each holds it through its round's `FiredChunks`).
            unsafe { libc::munmap(self.start.as_ptr().cast(), self.chunks * CHUNK * 4) };
        }
    }
}

/// One round's share-out of a [`FiredPool`]: each chunk goes to one list, until the round is
/// closed.
pub(crate) struct FiredChunks {
    pool: Arc<FiredPool>,
    /// The next chunk to hand out; `None` once the round is closed.
    next: Mutex<Option<usize>>,
}

impl FiredChunks {
    /// A round that hands out `pool`'s chunks from the first. The previous round's must be
    /// closed, and its lists cleared, before this one hands out anything.
    pub(crate) fn new(pool: Arc<FiredPool>) -> Arc<FiredChunks> {
        Arc::new(FiredChunks {
            pool,
            next: Mutex::new(Some(0)),
        })
    }

    /// The pool the round shares out.
    pub(crate) fn pool(&self) -> &Arc<FiredPool> {
        &self.pool
    }

    /// Hands out no more chunks: a list of this round that needs room now uses its own.
    pub(crate) fn close(&self) {
        *self.next.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// A chunk no other list of this round has, if one is left and the round is open.
    fn take(&self) -> Option<NonNull<u32>> {
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        let index = next.filter(|&index| index < self.pool.chunks)?;
        *next = Some(index + 1);
        Some(self.pool.chunk(index))
    }
}

/// The indices one thread's callbacks appended in one round (see the module doc).
pub(crate) struct FiredList {
    round: Arc<FiredChunks>,
    /// Chunks filled, in the order taken.
    full: Vec<NonNull<u32>>,
    /// The chunk being filled (dangling while `room` is 0).
    current: NonNull<u32>,
    /// Indices in `current`.
    filled: usize,
    /// `current`'s length: [`CHUNK`], or 0 before the first chunk.
    room: usize,
    /// What arrived when the round had no chunk for the list; at most `limit` indices.
    overflow: Vec<u32>,
    /// The most indices `overflow` keeps: a round's timers.
    limit: usize,
    /// Indices `overflow` had no room for.
    dropped: usize,
}

// SAFETY: the chunks a list holds were handed to it alone (`FiredChunks::take`); moving the
// list to another thread moves that ownership.
unsafe impl Send for FiredList {}

impl FiredList {
    /// An empty list of `round`, whose memory of its own holds up to `limit` indices.
    pub(crate) fn new(round: Arc<FiredChunks>, limit: usize) -> FiredList {
        FiredList {
            round,
            full: Vec::new(),
            current: NonNull::dangling(),
            filled: 0,
            room: 0,
            overflow: Vec::new(),
            limit,
            dropped: 0,
        }
    }

    /// Appends `index`.
    #[inline]
    pub(crate) fn push(&mut self, index: u32) {
        if self.filled < self.room {
            // SAFETY: `filled < room`, so the slot lies within `current`, a chunk this list
            // alone was handed (`&mut self`).
            unsafe { self.current.add(self.filled).write(index) };
            if self.filled.is_multiple_of(PER_LINE) && self.filled + PER_LINE < self.room {
                // The next line is this core's before the callback that writes it: a line
                // written without the hint waits for memory at the worker's next locked
                // instruction (docs/performance.md).
                // SAFETY: as above, for the next line's first slot, also within `current`.
                let next = unsafe { self.current.add(self.filled + PER_LINE) };
                wheel_platform::hint::prefetch_for_write(next.as_ptr());
            }
            self.filled += 1;
            return;
        }
        self.push_past_chunk(index);
    }

    /// [`FiredList::push`] when the current chunk is full: into a new chunk, or into the
    /// list's own memory when the round has none left.
    #[cold]
    fn push_past_chunk(&mut self, index: u32) {
        let chunk = if self.overflow.is_empty() {
            self.round.take()
        } else {
            None
        };
        match chunk {
            Some(chunk) => {
                if self.room > 0 {
                    self.full.push(self.current);
                }
                self.current = chunk;
                self.room = CHUNK;
                self.filled = 0;
                self.push(index);
            }
            None if self.overflow.len() < self.limit => self.overflow.push(index),
            None => self.dropped += 1,
        }
    }

    /// Every index appended (in the order appended, unless the list ran out of chunks).
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let current = (self.room > 0).then_some((self.current, self.filled));
        self.full
            .iter()
            .map(|&chunk| (chunk, CHUNK))
            .chain(current)
            // SAFETY: each chunk's first `len` slots were written by `push`, and the chunks
            // stay mapped while the list holds its round (and so the pool).
            .flat_map(|(chunk, len)| unsafe { std::slice::from_raw_parts(chunk.as_ptr(), len) })
            .chain(&self.overflow)
            .copied()
    }

    /// Appends that found no room: the list's own memory was full too.
    pub(crate) fn dropped(&self) -> usize {
        self.dropped
    }

    /// Forgets every index and chunk, so the chunks can serve a later round. Its round must be
    /// closed first, or the list could take a chunk again.
    pub(crate) fn clear(&mut self) {
        self.full = Vec::new();
        self.current = NonNull::dangling();
        self.filled = 0;
        self.room = 0;
        self.overflow = Vec::new();
        self.dropped = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(list: &FiredList) -> Vec<u32> {
        list.iter().collect()
    }

    #[test]
    fn keeps_the_order_across_chunks() {
        let round = FiredChunks::new(Arc::new(FiredPool::new(3 * CHUNK)));
        let mut list = FiredList::new(Arc::clone(&round), 10);
        let indices: Vec<u32> = (0..(2 * CHUNK + 5) as u32).rev().collect();
        indices.iter().for_each(|&index| list.push(index));
        assert_eq!(collect(&list), indices);
        assert_eq!(list.dropped(), 0);
        assert!(collect(&FiredList::new(round, 10)).is_empty());
    }

    #[test]
    fn two_lists_of_a_round_take_different_chunks() {
        let round = FiredChunks::new(Arc::new(FiredPool::new(CHUNK)));
        let mut first = FiredList::new(Arc::clone(&round), 0);
        let mut second = FiredList::new(Arc::clone(&round), 0);
        for index in 0..CHUNK as u32 + 1 {
            first.push(index);
            second.push(index + 100_000);
        }
        assert_eq!(collect(&first), (0..CHUNK as u32 + 1).collect::<Vec<_>>());
        assert_eq!(
            collect(&second),
            (100_000..100_000 + CHUNK as u32 + 1).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_list_goes_on_in_its_own_memory_when_the_pool_is_empty_and_counts_what_did_not_fit() {
        let round = FiredChunks::new(Arc::new(FiredPool::new(1)));
        let chunks = round.pool().chunks;
        assert_eq!(chunks, 1 + SPARE_CHUNKS);
        let mut list = FiredList::new(Arc::clone(&round), 3);
        let in_pool = chunks * CHUNK;
        for index in 0..in_pool as u32 + 4 {
            list.push(index);
        }
        let kept = collect(&list);
        assert_eq!(kept.len(), in_pool + 3);
        assert_eq!(
            kept[..in_pool + 3],
            (0..in_pool as u32 + 3).collect::<Vec<_>>()
        );
        assert_eq!(list.dropped(), 1);
    }

    #[test]
    fn a_closed_round_hands_out_no_chunk_and_a_cleared_list_is_empty() {
        let pool = Arc::new(FiredPool::new(CHUNK));
        let round = FiredChunks::new(Arc::clone(&pool));
        let mut list = FiredList::new(Arc::clone(&round), 2);
        list.push(1);
        round.close();
        list.clear();
        list.push(2);
        list.push(3);
        list.push(4);
        assert_eq!(collect(&list), [2, 3]);
        assert_eq!(list.dropped(), 1);
        // The next round hands out the pool's first chunk again, untouched by the closed one.
        let next = FiredChunks::new(pool);
        let mut list = FiredList::new(next, 0);
        list.push(9);
        assert_eq!(collect(&list), [9]);
    }
}
