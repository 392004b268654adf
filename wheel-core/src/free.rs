//! [`FreeStack`]: the slab's vacant places, a stack of `u32` indices in fixed blocks.
//!
//! One `Vec<u32>` sized to the slab had to grow with it, and growing a `Vec` reallocates and
//! copies it whole: at 5 M places per shard that is 20 MB copied into freshly faulted pages, a
//! stall of tens of milliseconds for the insert that added a slab chunk. Blocks never move: the
//! stack gains one block per slab chunk, when the chunk is added, and pushing or popping never
//! allocates.

use std::collections::TryReserveError;
use std::mem::size_of;

/// Indices per block: one per node of a slab chunk.
const BLOCK_BITS: u32 = 14;
const BLOCK: usize = 1 << BLOCK_BITS;
const BLOCK_MASK: usize = BLOCK - 1;

#[derive(Clone, Debug, Default)]
pub(crate) struct FreeStack {
    blocks: Vec<Box<[u32]>>,
    len: usize,
}

impl FreeStack {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    /// Places the stack can hold without allocating.
    pub(crate) fn capacity(&self) -> usize {
        self.blocks.len() * BLOCK
    }

    /// Makes room for at least `capacity` indices, a block at a time.
    pub(crate) fn grow_to(&mut self, capacity: usize) {
        while self.capacity() < capacity {
            self.blocks.push(vec![0; BLOCK].into_boxed_slice());
        }
    }

    /// [`FreeStack::grow_to`] that reports an allocation failure instead of aborting; the
    /// blocks added before a failure stay.
    pub(crate) fn try_grow_to(&mut self, capacity: usize) -> Result<(), TryReserveError> {
        while self.capacity() < capacity {
            self.blocks.try_reserve(1)?;
            let mut block = Vec::new();
            block.try_reserve_exact(BLOCK)?;
            block.resize(BLOCK, 0);
            self.blocks.push(block.into_boxed_slice());
        }
        Ok(())
    }

    /// Bytes the stack allocates to hold `capacity` indices.
    pub(crate) fn bytes_for(capacity: usize) -> usize {
        let blocks = capacity.div_ceil(BLOCK);
        blocks.saturating_mul(BLOCK * size_of::<u32>() + size_of::<Box<[u32]>>())
    }

    /// Pushes `index`; the caller has made room with [`FreeStack::grow_to`].
    pub(crate) fn push(&mut self, index: u32) {
        let at = self.len;
        self.blocks[at >> BLOCK_BITS][at & BLOCK_MASK] = index;
        self.len += 1;
    }

    /// The most recently pushed index, taken off the stack.
    pub(crate) fn pop(&mut self) -> Option<u32> {
        let at = self.len.checked_sub(1)?;
        self.len = at;
        Some(self.blocks[at >> BLOCK_BITS][at & BLOCK_MASK])
    }

    /// The index `depth` places below the top (0: the top), if the stack is that deep: the one
    /// that many pops from now will return.
    pub(crate) fn below_top(&self, depth: usize) -> Option<u32> {
        let at = self.len.checked_sub(depth + 1)?;
        Some(self.blocks[at >> BLOCK_BITS][at & BLOCK_MASK])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_across_blocks() {
        let mut stack = FreeStack::default();
        stack.grow_to(BLOCK + 3);
        assert_eq!(stack.capacity(), 2 * BLOCK);
        for i in 0..(BLOCK + 3) as u32 {
            stack.push(i);
        }
        assert_eq!(stack.below_top(0), Some(BLOCK as u32 + 2));
        assert_eq!(
            stack.below_top(3),
            Some(BLOCK as u32 - 1),
            "across the block edge"
        );
        assert_eq!(stack.below_top(BLOCK + 3), None);
        for i in (0..(BLOCK + 3) as u32).rev() {
            assert_eq!(stack.pop(), Some(i));
        }
        assert_eq!((stack.pop(), stack.len()), (None, 0));
        stack.grow_to(BLOCK);
        assert_eq!(
            stack.capacity(),
            2 * BLOCK,
            "growing never shrinks or reallocates"
        );
    }
}
