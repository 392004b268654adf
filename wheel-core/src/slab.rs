//! Entry storage: chunks of nodes that never move, a free list threaded through the vacant
//! ones, and a generation per node so stale keys are caught.
//!
//! A node records where it is (level, slot, position in the slot's array), which is what tells
//! a live slot reference from a stale one; while vacant, `pos` links the free list. So a
//! node's whole bookkeeping is 24 bytes beside the payload and an insert after warm-up allocates
//! nothing.

use crate::key::TimerKey;
use crate::wheel::Entry;

/// "No node": the end of a list, or an empty free list.
pub(crate) const NIL: u32 = u32::MAX;

/// `Node::level` of a vacant node.
pub(crate) const VACANT: u8 = u8::MAX;

pub(crate) struct Node<T> {
    pub(crate) deadline: u64,
    /// Index in its slot's array; while vacant, the next vacant node.
    pub(crate) pos: u32,
    pub(crate) generation: u32,
    /// The slot within `level` whose list holds this node.
    pub(crate) slot: u16,
    /// The level holding this node, or [`VACANT`].
    pub(crate) level: u8,
    pub(crate) value: Option<T>,
}

impl<T: Clone> Clone for Node<T> {
    fn clone(&self) -> Self {
        Node {
            deadline: self.deadline,
            pos: self.pos,
            generation: self.generation,
            slot: self.slot,
            level: self.level,
            value: self.value.clone(),
        }
    }
}

/// Nodes per chunk. Chunks are never moved or copied once allocated, so the slab grows in
/// steps of this many nodes and no insert ever waits for a whole-slab reallocation (copying
/// 10 M nodes would stall the caller for a good fraction of a second).
const CHUNK_BITS: u32 = 14;
const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNK_MASK: u32 = CHUNK as u32 - 1;

#[derive(Clone)]
pub(crate) struct Slab<T> {
    /// Fixed-capacity chunks of `CHUNK` nodes; node `i` is `chunks[i / CHUNK][i % CHUNK]`.
    chunks: Vec<Vec<Node<T>>>,
    /// Nodes ever created (live or vacant).
    created: usize,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let mut slab = Slab {
            chunks: Vec::new(),
            created: 0,
            free_head: NIL,
            len: 0,
        };
        slab.reserve(capacity);
        slab
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        let vacant = self.created - self.len;
        let needed = self.created + additional.saturating_sub(vacant);
        while self.capacity() < needed {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
    }

    /// Stores a value in a vacant node (reusing a freed one first). The node is not yet in any
    /// slot list: the caller links it.
    ///
    /// # Panics
    /// When `u32::MAX` entries are live at once (the index space is exhausted), as `Vec` panics
    /// on capacity overflow.
    pub(crate) fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        self.len += 1;
        if self.free_head != NIL {
            let index = self.free_head;
            let node = self.node_mut(index);
            let next_free = node.pos;
            node.deadline = deadline;
            node.value = Some(value);
            let generation = node.generation;
            self.free_head = next_free;
            return TimerKey { index, generation };
        }
        let index = u32::try_from(self.created)
            .ok()
            .filter(|&i| i != NIL)
            .expect("wheel-core: more than u32::MAX - 1 live entries");
        let chunk = self.created / CHUNK;
        if chunk == self.chunks.len() {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        self.chunks[chunk].push(Node {
            deadline,
            pos: NIL,
            generation: 0,
            slot: 0,
            level: VACANT,
            value: Some(value),
        });
        self.created += 1;
        TimerKey {
            index,
            generation: 0,
        }
    }

    /// Frees a live node (already unlinked from its slot list) and returns its value. The
    /// generation moves on, so every key to the old entry is stale from now on.
    pub(crate) fn free(&mut self, index: u32) -> T {
        self.take(index).value
    }

    /// Frees a live node (already unlinked) and hands out its entry under the key it had.
    pub(crate) fn take(&mut self, index: u32) -> Entry<T> {
        let free_head = self.free_head;
        let node = self.node_mut(index);
        debug_assert_ne!(node.level, VACANT);
        let key = TimerKey {
            index,
            generation: node.generation,
        };
        node.level = VACANT;
        node.generation = node.generation.wrapping_add(1);
        node.pos = free_head;
        let entry = Entry {
            key,
            deadline: node.deadline,
            value: node.value.take().expect("live node holds a value"),
        };
        self.free_head = index;
        self.len -= 1;
        entry
    }

    /// The index of the live node `key` names, if it is not stale.
    pub(crate) fn resolve(&self, key: TimerKey) -> Option<u32> {
        let node = self
            .chunks
            .get((key.index >> CHUNK_BITS) as usize)?
            .get((key.index & CHUNK_MASK) as usize)?;
        (node.generation == key.generation && node.level != VACANT).then_some(key.index)
    }

    /// The first live node at or after `from`.
    pub(crate) fn next_live(&self, from: u32) -> Option<u32> {
        (from as usize..self.created)
            .map(|i| i as u32)
            .find(|&i| self.node(i).level != VACANT)
    }

    /// Records that live node `index` is at position `pos` of `slot` on `level`.
    pub(crate) fn place(&mut self, index: u32, level: u8, slot: u16, pos: u32) {
        let node = self.node_mut(index);
        node.level = level;
        node.slot = slot;
        node.pos = pos;
    }

    /// Makes live node `index` forget its position, so no slot reference to it is live, and
    /// returns the (level, slot) it was in.
    pub(crate) fn detach(&mut self, index: u32) -> (u8, u16) {
        let node = self.node_mut(index);
        node.pos = NIL;
        (node.level, node.slot)
    }

    /// Whether node `index` is live at position `pos` of `slot` on `level`: what tells a live
    /// slot reference from a stale one.
    pub(crate) fn is_at(&self, index: u32, level: u8, slot: u16, pos: u32) -> bool {
        let node = self.node(index);
        node.pos == pos && node.slot == slot && node.level == level
    }

    /// Asks the CPU to start loading node `index` into cache: a slot walk calls this a few
    /// entries ahead so the misses of cold nodes overlap instead of queueing.
    #[inline]
    pub(crate) fn prefetch(&self, index: u32) {
        #[cfg(target_arch = "x86_64")]
        if let Some(node) = self
            .chunks
            .get((index >> CHUNK_BITS) as usize)
            .and_then(|chunk| chunk.get((index & CHUNK_MASK) as usize))
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch is only a hint: it never faults and changes no memory, and the
            // address is a live reference anyway. SSE, which the instruction belongs to, is part
            // of the x86_64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>((node as *const Node<T>).cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = index;
    }

    pub(crate) fn node(&self, index: u32) -> &Node<T> {
        &self.chunks[(index >> CHUNK_BITS) as usize][(index & CHUNK_MASK) as usize]
    }

    pub(crate) fn node_mut(&mut self, index: u32) -> &mut Node<T> {
        &mut self.chunks[(index >> CHUNK_BITS) as usize][(index & CHUNK_MASK) as usize]
    }
}
