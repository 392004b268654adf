//! Entry storage: chunks of nodes that never move, a stack of the vacant ones, and a
//! generation per node so stale keys are caught.
//!
//! A live node records where it is (level, slot, position in the slot's array), which is what
//! tells a live slot reference from a stale one. The whole bookkeeping is 24 bytes in the node
//! beside the payload, plus 4 in the free stack for every place the slab has: an insert after
//! warm-up allocates nothing.
//!
//! Vacant places are a stack of indices, not a list threaded through the vacant nodes: popping
//! an intrusive list must read the node it pops to learn the next one, and in a long-running
//! wheel places come back in firing order, scattered over the slab, so a burst of inserts
//! became a chain of cache misses paid one after another (about half the tick thread's time
//! in the 1 M-timer service bench). With the stack, the nodes the next inserts will use are
//! known in advance, so an insert starts loading the node a few inserts ahead and the misses
//! overlap.

use std::collections::TryReserveError;
use std::mem::size_of;
use std::num::NonZeroU8;

use crate::free::FreeStack;
use crate::key::TimerKey;
use crate::wheel::Entry;

/// "No position": a node detached from its slot, or not yet linked.
pub(crate) const NIL: u32 = u32::MAX;

#[derive(Clone)]
pub(crate) struct Node<T> {
    pub(crate) deadline: u64,
    /// Index in its slot's array, or [`NIL`].
    pub(crate) pos: u32,
    pub(crate) generation: u32,
    /// The payload and the slot holding the node; `None` while the node is vacant.
    live: Option<Live<T>>,
}

#[derive(Clone)]
struct Live<T> {
    value: T,
    slot: u16,
    /// The level plus one: `NonZeroU8` gives `Option<Live<T>>` a niche, so telling a vacant
    /// node from a live one costs no tag (and no padding) beside the payload.
    level_plus_one: NonZeroU8,
}

impl<T> Node<T> {
    /// A node never used yet.
    fn vacant() -> Self {
        Node {
            deadline: 0,
            pos: NIL,
            generation: 0,
            live: None,
        }
    }

    /// Empties a live node (`None` if it was vacant already): its generation moves on, so
    /// every key to the old entry is stale from now on, and no slot reference reads as live.
    fn vacate(&mut self) -> Option<Live<T>> {
        let live = self.live.take()?;
        self.generation = self.generation.wrapping_add(1);
        self.pos = NIL;
        Some(live)
    }

    /// Records that this live node is at position `pos` of `slot` on `level`.
    pub(crate) fn place(&mut self, level: u8, slot: u16, pos: u32) {
        let live = self.live.as_mut().expect("only a live node is placed");
        live.slot = slot;
        live.level_plus_one = level_tag(level);
        self.pos = pos;
    }

    /// Whether this node is live at position `pos` of `slot` on `level`: what tells a live slot
    /// reference from a stale one.
    fn is_at(&self, level: u8, slot: u16, pos: u32) -> bool {
        self.pos == pos
            && self
                .live
                .as_ref()
                .is_some_and(|live| live.slot == slot && live.level() == level)
    }

    pub(crate) fn value(&self) -> Option<&T> {
        self.live.as_ref().map(|live| &live.value)
    }

    pub(crate) fn value_mut(&mut self) -> Option<&mut T> {
        self.live.as_mut().map(|live| &mut live.value)
    }
}

impl<T> Live<T> {
    fn level(&self) -> u8 {
        self.level_plus_one.get() - 1
    }
}

/// The error `Vec` gives for a size past what it can address, for a request past the `u32`
/// index space: std offers no other way to make a `TryReserveError`.
fn capacity_overflow() -> TryReserveError {
    Vec::<u8>::new()
        .try_reserve(usize::MAX)
        .expect_err("no Vec holds usize::MAX bytes")
}

fn level_tag(level: u8) -> NonZeroU8 {
    NonZeroU8::new(level.wrapping_add(1)).expect("level numbers stay far below 255")
}

/// How many inserts ahead `claim` starts loading the vacant node it will hand out.
const CLAIM_LOOKAHEAD: usize = 16;

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
    /// The vacant nodes, the most recently freed last; its capacity keeps up with the slab's.
    free: FreeStack,
    len: usize,
}

impl<T> Slab<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let mut slab = Slab {
            chunks: Vec::new(),
            created: 0,
            free: FreeStack::default(),
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

    /// Makes room for `additional` more live entries than there are now. The vacant nodes are
    /// created here, written whole, so the memory they take is faulted in now rather than by
    /// the inserts that use them; they go on the free stack lowest index on top, so inserts
    /// fill them in order.
    ///
    /// # Panics
    /// When that would take more than `u32::MAX - 1` places.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let needed = self.len.saturating_add(additional);
        if needed <= self.created {
            return;
        }
        assert!(
            needed <= NIL as usize,
            "wheel-core: more than u32::MAX - 1 places reserved"
        );
        while self.capacity() < needed {
            self.add_chunk();
        }
        self.create_vacant(needed);
    }

    /// [`Slab::reserve`] that reports, instead of aborting or panicking, an allocation the
    /// allocator refuses or more than `u32::MAX` places (as a capacity overflow). On an
    /// error the slab holds what it did before, perhaps with more room allocated.
    pub(crate) fn try_reserve(&mut self, additional: usize) -> Result<(), TryReserveError> {
        let needed = self.len.saturating_add(additional);
        if needed <= self.created {
            return Ok(());
        }
        if needed > NIL as usize {
            return Err(capacity_overflow());
        }
        while self.capacity() < needed {
            self.try_add_chunk()?;
        }
        self.create_vacant(needed);
        Ok(())
    }

    /// Bytes [`Slab::reserve`] allocates for `places` in an empty slab: whole chunks of nodes
    /// and the free stack's room for them.
    pub(crate) fn bytes_for(places: usize) -> usize {
        let chunks = places.div_ceil(CHUNK);
        chunks
            .saturating_mul(CHUNK * size_of::<Node<T>>() + size_of::<Vec<Node<T>>>())
            .saturating_add(FreeStack::bytes_for(chunks.saturating_mul(CHUNK)))
    }

    /// Creates vacant nodes up to `needed` in the room made for them, and stacks them.
    fn create_vacant(&mut self, needed: usize) {
        let first = self.created;
        for index in first..needed {
            self.chunks[index / CHUNK].push(Node::vacant());
        }
        self.created = needed;
        for index in (first..needed).rev() {
            self.free.push(index as u32);
        }
    }

    /// Adds room for `CHUNK` more nodes, and for as many more vacant ones in the free stack, so
    /// that freeing never allocates either.
    fn add_chunk(&mut self) {
        self.chunks.push(Vec::with_capacity(CHUNK));
        let places = self.capacity();
        self.free.grow_to(places);
    }

    /// [`Slab::add_chunk`] that reports an allocation failure instead of aborting. The free
    /// stack grows first, so a chunk is only ever added with its room there.
    fn try_add_chunk(&mut self) -> Result<(), TryReserveError> {
        self.free.try_grow_to(self.capacity() + CHUNK)?;
        self.chunks.try_reserve(1)?;
        let mut chunk = Vec::new();
        chunk.try_reserve_exact(CHUNK)?;
        self.chunks.push(chunk);
        Ok(())
    }

    /// Stores a new entry in a vacant node (reusing a freed one first), at the place `link`
    /// gives it: the caller puts the node's index in a slot's array and returns (level, slot,
    /// position).
    ///
    /// The node is written once, whole. In a long-running wheel it is cold (places come back
    /// in firing order, scattered over the slab), so `claim` starts loading it some inserts
    /// ahead.
    ///
    /// # Panics
    /// When `u32::MAX` entries are live at once (the index space is exhausted), as `Vec` panics
    /// on capacity overflow.
    pub(crate) fn insert(
        &mut self,
        deadline: u64,
        value: T,
        link: impl FnOnce(u32) -> (u8, u16, u32),
    ) -> TimerKey {
        let key = self.claim();
        let (level, slot, pos) = link(key.index);
        let node = Node {
            deadline,
            pos,
            generation: key.generation,
            live: Some(Live {
                value,
                slot,
                level_plus_one: level_tag(level),
            }),
        };
        *self.node_mut(key.index) = node;
        self.len += 1;
        key
    }

    /// A vacant node's key: the most recently freed one, or a new node.
    fn claim(&mut self) -> TimerKey {
        if let Some(index) = self.free.pop() {
            // The node a few inserts from now: load it while this insert and the next ones
            // run, so it is in cache when its turn comes (a burst of inserts into cold nodes
            // is otherwise limited by how many misses can be outstanding at once).
            if let Some(ahead) = self.free.below_top(CLAIM_LOOKAHEAD - 1) {
                self.prefetch(ahead);
            }
            return TimerKey {
                index,
                generation: self.node(index).generation,
            };
        }
        let index = u32::try_from(self.created)
            .ok()
            .filter(|&i| i != NIL)
            .expect("wheel-core: more than u32::MAX - 1 live entries");
        let chunk = self.created / CHUNK;
        if chunk == self.chunks.len() {
            self.add_chunk();
        }
        self.chunks[chunk].push(Node::vacant());
        self.created += 1;
        TimerKey {
            index,
            generation: 0,
        }
    }

    /// Frees the live node `key` names, if the key is not stale, and returns its value and the
    /// (level, slot) it was in, for the caller to count it out of that slot. One lookup of the
    /// node: this is all of a removal's random memory access.
    pub(crate) fn remove(&mut self, key: TimerKey) -> Option<(T, u8, u16)> {
        let node = self
            .chunks
            .get_mut((key.index >> CHUNK_BITS) as usize)?
            .get_mut((key.index & CHUNK_MASK) as usize)?;
        if node.generation != key.generation {
            return None;
        }
        let live = node.vacate()?;
        self.release(key.index);
        let level = live.level();
        Some((live.value, level, live.slot))
    }

    /// Frees a live node (already unlinked) and hands out its entry under the key it had.
    pub(crate) fn take(&mut self, index: u32) -> Entry<T> {
        let node = self.node_mut(index);
        let key = TimerKey {
            index,
            generation: node.generation,
        };
        let live = node.vacate().expect("only a live node is freed");
        let deadline = node.deadline;
        self.release(index);
        Entry {
            key,
            deadline,
            value: live.value,
        }
    }

    /// Puts vacated node `index` on the free stack.
    fn release(&mut self, index: u32) {
        self.free.push(index);
        self.len -= 1;
    }

    /// The index of the live node `key` names, if it is not stale.
    pub(crate) fn resolve(&self, key: TimerKey) -> Option<u32> {
        let node = self
            .chunks
            .get((key.index >> CHUNK_BITS) as usize)?
            .get((key.index & CHUNK_MASK) as usize)?;
        (node.generation == key.generation && node.live.is_some()).then_some(key.index)
    }

    /// The first live node at or after `from`.
    pub(crate) fn next_live(&self, from: u32) -> Option<u32> {
        (from as usize..self.created)
            .map(|i| i as u32)
            .find(|&i| self.node(i).live.is_some())
    }

    /// Records that live node `index` is at position `pos` of `slot` on `level`.
    pub(crate) fn place(&mut self, index: u32, level: u8, slot: u16, pos: u32) {
        self.node_mut(index).place(level, slot, pos);
    }

    /// Makes live node `index` forget its position, so no slot reference to it is live, and
    /// returns the (level, slot) it was in.
    pub(crate) fn detach(&mut self, index: u32) -> (u8, u16) {
        let node = self.node_mut(index);
        node.pos = NIL;
        let live = node.live.as_ref().expect("only a live node is detached");
        (live.level(), live.slot)
    }

    /// Whether node `index` is live at position `pos` of `slot` on `level`: what tells a live
    /// slot reference from a stale one.
    pub(crate) fn is_at(&self, index: u32, level: u8, slot: u16, pos: u32) -> bool {
        self.node(index).is_at(level, slot, pos)
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
            // A node need not sit within one cache line (24-byte nodes straddle two lines three
            // times in eight), and a walk reads it whole: load its last byte's line too, or
            // that one is a demand miss after all (expiry at 1 M pending: 102 -> 83 ns per
            // entry). Within one line the second is a no-op.
            let first = (node as *const Node<T>).cast::<i8>();
            let last = first.wrapping_add(std::mem::size_of::<Node<T>>() - 1);
            // SAFETY: a prefetch is only a hint: it never faults and changes no memory, and both
            // addresses lie within a live node anyway. SSE, which the instruction belongs to, is
            // part of the x86_64 baseline.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(first);
                _mm_prefetch::<_MM_HINT_T0>(last);
            }
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
