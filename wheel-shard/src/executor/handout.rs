//! [`HandOut`]: a shard's queue of due references, from its tick thread to the workers.
//!
//! The tick thread hands out up to a million references a second and the workers take them
//! in batches. A general queue costs that path twice. crossbeam's `Injector` pays two locked
//! instructions per push. It also allocates a block every 63 items, which the workers free
//! from other threads. Under mimalloc a single push then took 5–14 ms now and then (the
//! allocator's slow path), and every timer due meanwhile was late by as much. So the common
//! path is a fixed ring with one producer:
//!
//! - The tick thread writes a cell and publishes it with a Release store of the cell's
//!   sequence. There is no locked instruction and no allocation.
//! - A worker finds the run of published cells at the head (up to [`STEAL_BATCH`]) and claims
//!   them all with one CAS on `head`. It then moves them out and frees each cell for the next
//!   lap.
//!
//! A full ring (workers held up by slow callbacks) sends further references to an unbounded
//! overflow queue, and keeps sending them there until the overflow is empty again, so nothing
//! handed out is ever refused or waits. Workers take from the ring first (its references are
//! the older ones), then from the overflow.
//!
//! Its cells and their counting are the pending ring's (`shard/cells.rs`): a cell is "free" or
//! "full" for a position, and freeing moves it to the next lap. A new ring is all zeros.

use crossbeam_deque::{Injector, Steal};
use crossbeam_utils::CachePadded;

use crate::shard::{Cells, RingRefused};
use crate::sync::{AtomicU64, Ordering};

/// The most references a worker takes at once from the ring (it asks for as many as it keeps
/// in hand, at most this): enough to keep its prefetch window full, few enough to leave the
/// rest to the other workers.
pub(crate) const STEAL_BATCH: u64 = 32;

/// Cells per shard's ring: eight ticks of a million timers a second due on one shard, before
/// the overflow queue is needed.
#[cfg(not(miri))]
pub(crate) const HAND_OUT_CELLS: usize = 1 << 13;
/// Under Miri, 64 cells: the tests fill the ring and overflow it with a few hundred values.
#[cfg(miri)]
pub(crate) const HAND_OUT_CELLS: usize = 1 << 6;

/// The single-producer ring at the heart of [`HandOut`].
pub(crate) struct HandOutRing<T> {
    cells: Cells<T>,
    /// The next position the producer writes. Written by the producer only.
    tail: CachePadded<AtomicU64>,
    /// The next position a consumer takes; consumers move it with a CAS.
    head: CachePadded<AtomicU64>,
}

// SAFETY: values move between threads through the ring, so `T: Send` is required and enough:
// a cell's value is written by the one producer before its Release publish, and moved out by
// the one consumer whose CAS on `head` claimed it, before that consumer frees the cell.
unsafe impl<T: Send> Send for HandOutRing<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for HandOutRing<T> {}

impl<T> HandOutRing<T> {
    /// A ring of `capacity` cells (rounded up to a power of two, at least 2), zeroed by the
    /// allocator; `RingRefused` when the allocator refuses them.
    pub(crate) fn try_new(capacity: usize) -> Result<Self, RingRefused> {
        Ok(HandOutRing {
            cells: Cells::try_new(capacity)?,
            tail: CachePadded::new(AtomicU64::new(0)),
            head: CachePadded::new(AtomicU64::new(0)),
        })
    }

    /// [`HandOutRing::try_new`] for tests, where the allocator does not refuse.
    #[cfg(all(test, not(loom)))]
    fn new(capacity: usize) -> Self {
        Self::try_new(capacity).expect("a test ring fits in memory")
    }

    /// Producer only: appends `value`, or gives it back when the ring is full.
    pub(crate) fn try_push(&self, value: T) -> Result<(), T> {
        let tail = self.tail.load(Ordering::Relaxed);
        let cell = self.cells.at(tail);
        let free = self.cells.free_for(tail);
        if cell.sequence.load(Ordering::Acquire) != free {
            // The cell still holds (or is being emptied of) the value of one lap ago.
            return Err(value);
        }
        // SAFETY: the sequence says the consumer of the previous lap has moved its value out
        // (Release, seen by the Acquire above), and only this producer writes cells.
        unsafe { cell.write(value) };
        cell.sequence
            .store(Cells::<T>::full_after(free), Ordering::Release);
        self.tail.store(tail + 1, Ordering::Release);
        Ok(())
    }

    /// Claims up to `limit` published values at the head with one CAS and passes them to
    /// `take`, oldest first. `Steal::Retry` when another consumer moved the head meanwhile.
    pub(crate) fn steal(&self, limit: u64, mut take: impl FnMut(T)) -> Steal<usize> {
        let head = self.head.load(Ordering::Acquire);
        let mut count = 0;
        while count < limit {
            let position = head + count;
            let sequence = self.cells.at(position).sequence.load(Ordering::Acquire);
            if sequence != self.cells.full_for(position) {
                break;
            }
            count += 1;
        }
        if count == 0 {
            return Steal::Empty;
        }
        if self
            .head
            .compare_exchange(head, head + count, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return Steal::Retry;
        }
        for position in head..head + count {
            let cell = self.cells.at(position);
            // SAFETY: the cell was published for this lap (its sequence, read with Acquire
            // before the CAS), and the CAS gave its position to this consumer alone; the
            // producer does not write it again until the Release store below frees it.
            let value = unsafe { cell.take() };
            cell.sequence
                .store(self.cells.next_lap(position), Ordering::Release);
            take(value);
        }
        Steal::Success(count as usize)
    }

    /// Values published and not yet claimed (a snapshot).
    pub(crate) fn len(&self) -> usize {
        let head = self.head.load(Ordering::Acquire);
        self.tail.load(Ordering::Acquire).saturating_sub(head) as usize
    }
}

impl<T> Drop for HandOutRing<T> {
    fn drop(&mut self) {
        while let Steal::Success(_) | Steal::Retry = self.steal(u64::MAX, drop) {}
    }
}

/// A shard's hand-out queue: the ring, and the overflow queue for when it is full.
pub(crate) struct HandOut<T> {
    ring: HandOutRing<T>,
    overflow: Injector<T>,
}

impl<T: Send> HandOut<T> {
    /// A queue whose ring has [`HAND_OUT_CELLS`] cells, zeroed by the allocator.
    pub(crate) fn try_new() -> Result<Self, RingRefused> {
        Ok(HandOut {
            ring: HandOutRing::try_new(HAND_OUT_CELLS)?,
            overflow: Injector::new(),
        })
    }

    /// Bytes a hand-out queue allocates while its overflow is empty.
    pub(crate) fn bytes() -> usize {
        Cells::<T>::bytes_for(HAND_OUT_CELLS)
    }

    /// The shard's tick thread only: queues `value`. Never blocks, never refuses.
    #[inline]
    pub(crate) fn push(&self, value: T) {
        // Once overflowing, stay there until the workers have emptied the overflow, so the
        // ring's newer cells do not overtake it for long.
        let value = if self.overflow.is_empty() {
            match self.ring.try_push(value) {
                Ok(()) => return,
                Err(value) => value,
            }
        } else {
            value
        };
        self.overflow.push(value);
    }

    /// A worker: takes up to `batch` (at most [`STEAL_BATCH`]) and passes each to `take`,
    /// oldest first; returns how many. A worker whose callbacks run long asks for few, so few
    /// wait behind it. From the ring, one CAS claims the whole batch; from the overflow (a full
    /// ring's spill, rare), each value is its own steal.
    pub(crate) fn take_batch(&self, batch: usize, mut take: impl FnMut(T)) -> Steal<usize> {
        let limit = (batch as u64).clamp(1, STEAL_BATCH);
        match self.ring.steal(limit, &mut take) {
            Steal::Empty => self.take_overflow(limit as usize, take),
            taken => taken,
        }
    }

    /// [`HandOut::take_batch`] from the overflow queue.
    fn take_overflow(&self, limit: usize, mut take: impl FnMut(T)) -> Steal<usize> {
        let mut taken = 0;
        while taken < limit {
            match self.overflow.steal() {
                Steal::Success(value) => {
                    take(value);
                    taken += 1;
                }
                Steal::Retry if taken == 0 => return Steal::Retry,
                Steal::Retry | Steal::Empty => break,
            }
        }
        if taken == 0 {
            Steal::Empty
        } else {
            Steal::Success(taken)
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ring.len() == 0 && self.overflow.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.ring.len() + self.overflow.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn take_all(ring: &HandOutRing<u64>, limit: u64) -> Vec<u64> {
        let mut got = Vec::new();
        while let Steal::Success(_) | Steal::Retry = ring.steal(limit, |v| got.push(v)) {}
        got
    }

    #[test]
    fn fifo_full_and_wraparound() {
        let ring = HandOutRing::new(4);
        for lap in 0..3 {
            for i in 0..4 {
                ring.try_push(lap * 10 + i).unwrap();
            }
            assert_eq!(ring.try_push(99), Err(99));
            assert_eq!(ring.len(), 4);
            assert_eq!(
                take_all(&ring, 3),
                (0..4).map(|i| lap * 10 + i).collect::<Vec<_>>()
            );
            assert_eq!(ring.len(), 0);
        }
    }

    #[test]
    fn a_steal_takes_at_most_its_limit() {
        let ring = HandOutRing::new(64);
        (0..50).for_each(|v| ring.try_push(v).unwrap());
        let mut got = Vec::new();
        assert!(matches!(
            ring.steal(STEAL_BATCH, |v| got.push(v)),
            Steal::Success(32)
        ));
        assert_eq!(got, (0..32).collect::<Vec<_>>());
        assert_eq!(ring.len(), 18);
    }

    #[test]
    fn a_full_ring_overflows_and_nothing_is_lost_or_reordered_for_long() {
        let queue = HandOut::<u64>::try_new().unwrap();
        let total = HAND_OUT_CELLS as u64 + 100;
        (0..total).for_each(|v| queue.push(v));
        assert_eq!(queue.len(), total as usize);
        // The ring is drained first: its values are the older ones.
        let mut got = Vec::new();
        while let Steal::Success(_) | Steal::Retry =
            queue.take_batch(STEAL_BATCH as usize, |v| got.push(v))
        {}
        assert_eq!(got, (0..total).collect::<Vec<_>>());
        assert!(queue.is_empty());
        // With the overflow empty again, new values go to the ring.
        queue.push(7);
        assert_eq!(queue.ring.len(), 1);
    }

    #[test]
    fn one_producer_many_stealers_lose_nothing() {
        // Under Miri, a few dozen laps of its smaller ring.
        const TOTAL: u64 = if cfg!(miri) { 2_000 } else { 1_000_000 };
        const STEALERS: usize = 4;
        let queue = Arc::new(HandOut::<u64>::try_new().unwrap());
        let stealers: Vec<_> = (0..STEALERS)
            .map(|_| {
                let queue = Arc::clone(&queue);
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    let mut idle = 0;
                    while idle < 1000 {
                        match queue.take_batch(STEAL_BATCH as usize, |v| got.push(v)) {
                            Steal::Success(_) => idle = 0,
                            Steal::Retry => {}
                            Steal::Empty => {
                                idle += 1;
                                std::thread::yield_now();
                            }
                        }
                    }
                    got
                })
            })
            .collect();
        for v in 0..TOTAL {
            queue.push(v);
            if v % 4096 == 0 {
                std::thread::yield_now();
            }
        }
        let mut seen = vec![false; TOTAL as usize];
        let mut count = 0;
        for stealer in stealers {
            let got = stealer.join().unwrap();
            // Each stealer sees the ring's values in order (the overflow's may interleave).
            for v in got {
                assert!(!std::mem::replace(&mut seen[v as usize], true), "{v} twice");
                count += 1;
            }
        }
        // Whatever the stealers left (they stop after a quiet spell) is still queued.
        while let Steal::Success(_) | Steal::Retry = queue.take_batch(STEAL_BATCH as usize, |v| {
            assert!(!std::mem::replace(&mut seen[v as usize], true), "{v} twice");
            count += 1;
        }) {}
        assert_eq!(count, TOTAL);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri's hand-out ring is smaller")]
    fn a_shards_ring_of_runs_is_the_320_kib_the_config_docs_quote() {
        assert_eq!(HandOut::<crate::executor::Run>::bytes(), 320 << 10);
    }

    #[test]
    fn drop_releases_values_left_inside() {
        let value = Arc::new(());
        let ring = HandOutRing::new(4);
        ring.try_push(Arc::clone(&value)).unwrap();
        ring.try_push(Arc::clone(&value)).unwrap();
        drop(ring);
        assert_eq!(Arc::strong_count(&value), 1);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// The producer pushes three values into a two-cell ring while two consumers steal:
    /// every accepted value is taken exactly once, and a refused one comes back. Three
    /// threads: bounded to two preemptions, which a lost or doubled value needs at most.
    #[test]
    fn one_producer_two_stealers() {
        crate::sync::model_bounded(2, || {
            let ring = Arc::new(HandOutRing::try_new(2).unwrap());
            let stealers: Vec<_> = (0..2)
                .map(|_| {
                    let ring = Arc::clone(&ring);
                    thread::spawn(move || {
                        let mut got = Vec::new();
                        for _ in 0..2 {
                            let _ = ring.steal(2, |v| got.push(v));
                        }
                        got
                    })
                })
                .collect();
            let accepted: Vec<u64> = (0..3).filter(|&v| ring.try_push(v).is_ok()).collect();
            let mut got: Vec<u64> = stealers
                .into_iter()
                .flat_map(|s| s.join().unwrap())
                .collect();
            while let Steal::Success(_) | Steal::Retry = ring.steal(2, |v| got.push(v)) {}
            got.sort_unstable();
            assert_eq!(got, accepted);
        });
    }
}
