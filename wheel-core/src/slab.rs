//! Entry storage: one `Vec` of nodes, a free list threaded through the vacant ones, and a
//! generation per node so stale keys are caught.
//!
//! Nodes double as the links of the intrusive slot lists (`prev`/`next` are `u32` indices), so a
//! node's whole bookkeeping is 24 bytes beside the payload and an insert after warm-up allocates
//! nothing.

use crate::key::TimerKey;

/// "No node": the end of a list, or an empty free list.
pub(crate) const NIL: u32 = u32::MAX;

/// `Node::level` of a vacant node.
pub(crate) const VACANT: u8 = u8::MAX;

pub(crate) struct Node<T> {
    pub(crate) deadline: u64,
    /// Previous node in the slot list (unused while vacant).
    pub(crate) prev: u32,
    /// Next node in the slot list, or in the free list while vacant.
    pub(crate) next: u32,
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
            prev: self.prev,
            next: self.next,
            generation: self.generation,
            slot: self.slot,
            level: self.level,
            value: self.value.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Slab<T> {
    nodes: Vec<Node<T>>,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Slab {
            nodes: Vec::with_capacity(capacity),
            free_head: NIL,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.nodes.capacity()
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        let vacant = self.nodes.len() - self.len;
        self.nodes.reserve(additional.saturating_sub(vacant));
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
            let node = &mut self.nodes[index as usize];
            self.free_head = node.next;
            node.deadline = deadline;
            node.value = Some(value);
            return TimerKey {
                index,
                generation: node.generation,
            };
        }
        let index = u32::try_from(self.nodes.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("wheel-core: more than u32::MAX - 1 live entries");
        self.nodes.push(Node {
            deadline,
            prev: NIL,
            next: NIL,
            generation: 0,
            slot: 0,
            level: VACANT,
            value: Some(value),
        });
        TimerKey {
            index,
            generation: 0,
        }
    }

    /// Frees a live node (already unlinked from its slot list) and returns its value. The
    /// generation moves on, so every key to the old entry is stale from now on.
    pub(crate) fn free(&mut self, index: u32) -> T {
        let free_head = self.free_head;
        let node = &mut self.nodes[index as usize];
        debug_assert_ne!(node.level, VACANT);
        node.level = VACANT;
        node.generation = node.generation.wrapping_add(1);
        node.next = free_head;
        self.free_head = index;
        self.len -= 1;
        node.value.take().expect("live node holds a value")
    }

    /// The index of the live node `key` names, if it is not stale.
    pub(crate) fn resolve(&self, key: TimerKey) -> Option<u32> {
        match self.nodes.get(key.index as usize) {
            Some(node) if node.generation == key.generation && node.level != VACANT => {
                Some(key.index)
            }
            _ => None,
        }
    }

    pub(crate) fn key_of(&self, index: u32) -> TimerKey {
        TimerKey {
            index,
            generation: self.nodes[index as usize].generation,
        }
    }

    /// The first live node at or after `from`.
    pub(crate) fn next_live(&self, from: u32) -> Option<u32> {
        let from = from as usize;
        let offset = self
            .nodes
            .get(from..)?
            .iter()
            .position(|n| n.level != VACANT)?;
        Some((from + offset) as u32)
    }

    pub(crate) fn nodes_mut(&mut self) -> &mut [Node<T>] {
        &mut self.nodes
    }

    pub(crate) fn node(&self, index: u32) -> &Node<T> {
        &self.nodes[index as usize]
    }

    pub(crate) fn node_mut(&mut self, index: u32) -> &mut Node<T> {
        &mut self.nodes[index as usize]
    }
}
