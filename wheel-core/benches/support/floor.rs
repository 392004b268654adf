//! `floor`: the benchmark's operations done on a bare array of nodes, with no wheel at all: a
//! lower bound for any timer store that keeps its entries at scattered places of a slab, which
//! O(1) removal by key needs. It is measured in the same run as the wheel, so the wheel's
//! figures can be read as a ratio to what this machine's memory does at that size.
//!
//! Each node has the size of a `Wheel<u32>` node (24 bytes). Remove checks the key's generation,
//! takes the value and pushes the place on a free stack; insert pops a place (loading it a few
//! inserts ahead, as the wheel does) and writes the node; reschedule checks the key and writes
//! the new deadline; expire walks a queue of places in the order they were filled, prefetching
//! ahead, and takes each value. No levels, no slots, no cascades: whatever a real wheel adds
//! to these is bookkeeping on top.

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};

use super::{chunk, Book, Fixture, Op};

#[derive(Clone, Copy)]
struct Node {
    deadline: u64,
    generation: u32,
    live: bool,
    value: u32,
    _pad: u32,
}

#[derive(Clone, Copy)]
struct Key {
    index: u32,
    generation: u32,
}

pub(crate) struct FloorFixture {
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// Keys in the order they were filled: what an expiry hands out next (stale ones are
    /// skipped, and dropped untimed when they pile up).
    due: VecDeque<Key>,
    live: usize,
    book: Book<Key>,
    inserted: Vec<Key>,
    expired: Vec<u32>,
}

/// How many inserts ahead a place is loaded, as `Slab::claim` does.
const CLAIM_AHEAD: usize = 16;
/// How many entries ahead an expiry walk loads, as the wheel's slot walk does.
const WALK_AHEAD: usize = 24;

#[inline]
fn prefetch(node: &Node) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and changes no memory; SSE is baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((node as *const Node).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = node;
}

impl FloorFixture {
    fn insert(&mut self, deadline: u64, value: u32) -> Key {
        let index = self.free.pop().expect("room was reserved");
        if let Some(ahead) = self.free.len().checked_sub(CLAIM_AHEAD) {
            prefetch(&self.nodes[self.free[ahead] as usize]);
        }
        let node = &mut self.nodes[index as usize];
        node.deadline = deadline;
        node.live = true;
        node.value = value;
        let key = Key {
            index,
            generation: node.generation,
        };
        self.due.push_back(key);
        self.live += 1;
        key
    }

    fn remove(&mut self, key: Key) -> Option<u32> {
        let node = &mut self.nodes[key.index as usize];
        if node.generation != key.generation || !node.live {
            return None;
        }
        node.live = false;
        node.generation = node.generation.wrapping_add(1);
        self.free.push(key.index);
        self.live -= 1;
        Some(node.value)
    }

    fn pop_due(&mut self) -> Option<u32> {
        while let Some(key) = self.due.pop_front() {
            if let Some(ahead) = self.due.get(WALK_AHEAD) {
                prefetch(&self.nodes[ahead.index as usize]);
            }
            if let Some(value) = self.remove(key) {
                return Some(value);
            }
        }
        None
    }

    /// Drops stale keys from the expiry queue once they outnumber the live ones (untimed).
    fn tidy(&mut self) {
        if self.due.len() > 2 * self.live + 1_024 {
            let nodes = &self.nodes;
            self.due.retain(|key| {
                let node = &nodes[key.index as usize];
                node.live && node.generation == key.generation
            });
        }
    }
}

impl Fixture for FloorFixture {
    const NAME: &'static str = "floor";

    fn filled(n: usize) -> Self {
        let places = n + chunk(n);
        let mut book = Book::new(n);
        let node = Node {
            deadline: 0,
            generation: 0,
            live: false,
            value: 0,
            _pad: 0,
        };
        let mut fixture = FloorFixture {
            nodes: vec![node; places],
            free: (0..places as u32).rev().collect(),
            due: VecDeque::with_capacity(2 * places),
            live: 0,
            book: Book::new(0),
            inserted: Vec::new(),
            expired: Vec::new(),
        };
        for position in 0..n as u32 {
            let deadline = book.delay();
            book.keys.push(fixture.insert(deadline, position));
        }
        fixture.book = book;
        fixture
    }

    fn run_chunk(&mut self, op: Op, count: usize) -> Duration {
        self.book.prepare(count, matches!(op, Op::RemoveOldest));
        let mut book = std::mem::replace(&mut self.book, Book::new(0));
        let elapsed = match op {
            Op::Insert => {
                let start = Instant::now();
                for &delay in &book.delays {
                    let key = self.insert(delay, u32::MAX);
                    self.inserted.push(key);
                }
                let elapsed = start.elapsed();
                for key in std::mem::take(&mut self.inserted) {
                    self.remove(key);
                }
                elapsed
            }
            Op::Remove | Op::RemoveOldest => {
                let start = Instant::now();
                for &key in &book.picked {
                    black_box(self.remove(key));
                }
                let elapsed = start.elapsed();
                for (&position, &delay) in book.positions.iter().zip(&book.delays) {
                    book.keys[position as usize] = self.insert(delay, position);
                }
                elapsed
            }
            Op::Reschedule => {
                let start = Instant::now();
                for (&key, &delay) in book.picked.iter().zip(&book.delays) {
                    let node = &mut self.nodes[key.index as usize];
                    if node.generation == key.generation && node.live {
                        node.deadline = delay;
                    }
                }
                start.elapsed()
            }
            Op::Expire => {
                let start = Instant::now();
                while self.expired.len() < count {
                    let value = self.pop_due().expect("entries are pending");
                    self.expired.push(value);
                }
                let elapsed = start.elapsed();
                for (position, &delay) in std::mem::take(&mut self.expired).iter().zip(&book.delays)
                {
                    book.keys[*position as usize] = self.insert(delay, *position);
                }
                elapsed
            }
        };
        self.book = book;
        self.tidy();
        elapsed
    }
}
