//! [`Refs`]: a slot's array of slab indices, stored in fixed-size chunks that come from, and go
//! back to, a pool its level keeps.
//!
//! With a plain `Vec` per slot, a slot that filled up doubled and copied its array (a level-2
//! slot of a 1 ms wheel holds every timer due in a 4-second stretch: millions), stalling the
//! caller for milliseconds while fresh memory was faulted in, and every slot kept the capacity
//! of the largest load it ever had, so a long-running wheel's memory crept towards the sum of
//! all slots' peaks. Chunks never move, and an emptied slot's chunks serve whichever slot of
//! the level fills next, so a level holds about as much memory as its references at their peak.

/// References per chunk (4 KiB of them).
const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNK_MASK: usize = CHUNK - 1;

type Chunk = Box<[u32; CHUNK]>;

/// A level's spare chunks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pool(Vec<Chunk>);

impl Pool {
    fn chunk(&mut self) -> Chunk {
        self.0.pop().unwrap_or_else(|| Box::new([0; CHUNK]))
    }

    /// Chunks held for reuse (for tests).
    #[cfg(test)]
    pub(crate) fn spare(&self) -> usize {
        self.0.len()
    }
}

/// A growable array of `u32` in chunks from a [`Pool`]. Positions are stable: pushing never
/// moves what is there.
#[derive(Clone, Debug, Default)]
pub(crate) struct Refs {
    chunks: Vec<Chunk>,
    len: usize,
}

impl Refs {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The reference at `pos`, if `pos < len`.
    pub(crate) fn get(&self, pos: usize) -> Option<u32> {
        (pos < self.len).then(|| self.chunks[pos >> CHUNK_BITS][pos & CHUNK_MASK])
    }

    /// Appends `index` and returns its position, taking a chunk from `pool` when the last one
    /// is full.
    pub(crate) fn push(&mut self, pool: &mut Pool, index: u32) -> u32 {
        let pos = self.len;
        if pos >> CHUNK_BITS == self.chunks.len() {
            self.chunks.push(pool.chunk());
        }
        self.len += 1;
        self.set(pos, index);
        pos as u32
    }

    /// Overwrites the reference at `pos` (`pos < len`).
    pub(crate) fn set(&mut self, pos: usize, index: u32) {
        debug_assert!(pos < self.len);
        self.chunks[pos >> CHUNK_BITS][pos & CHUNK_MASK] = index;
    }

    /// Keeps the first `len` references and gives the chunks no longer needed back to `pool`.
    pub(crate) fn truncate(&mut self, pool: &mut Pool, len: usize) {
        debug_assert!(len <= self.len);
        self.len = len;
        let needed = len.div_ceil(CHUNK);
        pool.0.extend(self.chunks.drain(needed..));
    }

    /// Empties the array, giving every chunk back to `pool`.
    pub(crate) fn clear(&mut self, pool: &mut Pool) {
        self.truncate(pool, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_drawn_from_the_pool_and_go_back_to_it() {
        let mut pool = Pool::default();
        let mut a = Refs::default();
        for i in 0..(2 * CHUNK + 5) as u32 {
            assert_eq!(a.push(&mut pool, i), i, "positions count up");
        }
        assert_eq!(a.len(), 2 * CHUNK + 5);
        assert_eq!(
            a.get(CHUNK),
            Some(CHUNK as u32),
            "a chunk boundary reads right"
        );
        assert_eq!(a.get(2 * CHUNK + 5), None);
        a.set(3, 99);
        assert_eq!(a.get(3), Some(99));

        a.truncate(&mut pool, CHUNK);
        assert_eq!(
            (a.len(), pool.spare()),
            (CHUNK, 2),
            "the two chunks past it go back"
        );
        assert_eq!(a.get(CHUNK - 1), Some(CHUNK as u32 - 1));

        let mut b = Refs::default();
        b.push(&mut pool, 7);
        assert_eq!(pool.spare(), 1, "another array reuses a spare chunk");
        a.clear(&mut pool);
        b.clear(&mut pool);
        assert_eq!((a.len(), b.len(), pool.spare()), (0, 0, 3));
    }
}
