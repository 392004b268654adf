//! [`PendingRing`]: the bounded multi-producer, single-consumer queue between producers and a
//! shard's tick thread.
//!
//! It is Dmitry Vyukov's bounded queue: every cell carries a sequence number that says whose turn
//! it is. A producer claims position `p` by moving `tail` from `p` to `p + 1` with a CAS, but only
//! when cell `p mod capacity` says "free for `p`"; it writes the value and publishes it by
//! marking the cell "full for `p`". The consumer takes the cell when it reads that and frees it
//! for the next lap, `p + capacity`. A full ring shows up as a cell still holding the previous
//! lap, so `try_push` fails at once instead of blocking.
//!
//! The cells and their counting are `cells.rs`'s: a new ring is all zero bytes, so its pages
//! cost memory only once a burst reaches them, and a generous ring is cheap until it is used.
//!
//! Closing sets the top bit of `tail`, so no claim succeeds afterwards, while every claim made
//! before still publishes its value and counts in [`PendingRing::pushed`]. At shutdown the ring
//! is dropped unread: a value in it names a timer's record, and the shutdown takes the timer
//! back by that record (`runtime/hand_back.rs`), so nothing pushed successfully is lost.

use crossbeam_utils::CachePadded;

use super::cells::{Cells, RingRefused};
use crate::sync::{AtomicU64, Ordering};

const CLOSED: u64 = 1 << 63;

/// Why a push did not happen; the value comes back to the caller.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PushError<T> {
    Full(T),
    Closed(T),
}

pub(crate) struct PendingRing<T> {
    cells: Cells<T>,
    /// The next position to claim, with [`CLOSED`] once closed. Its count is every push ever.
    tail: CachePadded<AtomicU64>,
    /// The next position to take. Written by the consumer only.
    head: CachePadded<AtomicU64>,
}

// SAFETY: values move between threads through the ring, so `T: Send` is required and enough;
// each cell's value is accessed by one thread at a time, as its sequence number hands it over
// (Release on publish, Acquire on take), so no `&T` is ever shared.
unsafe impl<T: Send> Send for PendingRing<T> {}
// SAFETY: as above: shared access only moves whole values in and out under the sequence protocol.
unsafe impl<T: Send> Sync for PendingRing<T> {}

impl<T> PendingRing<T> {
    /// [`PendingRing::try_new`] for tests, which expect the allocation to succeed.
    #[cfg(test)]
    pub(crate) fn new(capacity: usize) -> Self {
        Self::try_new(capacity).expect("a test ring fits in memory")
    }

    /// A ring of `capacity` cells, rounded up to a power of two (at least 2), or the
    /// allocator's refusal instead of an abort (a ring is one allocation, up to gigabytes with
    /// a large `ring_capacity`).
    pub(crate) fn try_new(capacity: usize) -> Result<Self, RingRefused> {
        Ok(PendingRing {
            cells: Cells::try_new(capacity)?,
            tail: CachePadded::new(AtomicU64::new(0)),
            head: CachePadded::new(AtomicU64::new(0)),
        })
    }

    /// Bytes a ring asked for `capacity` allocates for its cells.
    pub(crate) fn bytes_for(capacity: usize) -> usize {
        Cells::<T>::bytes_for(capacity)
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn capacity(&self) -> usize {
        self.cells.len()
    }

    /// Whether the push that took `position` left the ring at least half full, with `beside`
    /// more waiting elsewhere for the same consumer (its shard's lane): see
    /// [`Cells::half_full_after`].
    #[inline]
    pub(crate) fn half_full_after(&self, position: u64, beside: impl FnOnce() -> usize) -> bool {
        self.cells.half_full_after(position, &self.head, beside)
    }

    /// Appends `value` unless the ring is full or closed, and returns the position it took.
    /// Never blocks.
    pub(crate) fn try_push(&self, value: T) -> Result<u64, PushError<T>> {
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            if tail & CLOSED != 0 {
                return Err(PushError::Closed(value));
            }
            let cell = self.cells.at(tail);
            let sequence = cell.sequence.load(Ordering::Acquire);
            let lap = self.cells.free_for(tail);
            if sequence == lap {
                // SeqCst: a producer that then reads the shard's planned wake-up must not miss a
                // tick thread that is about to sleep (see `Shard::wake_for`).
                match self.tail.compare_exchange_weak(
                    tail,
                    tail + 1,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the CAS gave this thread position `tail`, and the sequence said
                        // the consumer has finished with the cell, so no one else touches it
                        // until the Release store below hands it to the consumer.
                        unsafe { cell.write(value) };
                        cell.sequence
                            .store(Cells::<T>::full_after(lap), Ordering::Release);
                        return Ok(tail);
                    }
                    Err(current) => tail = current,
                }
            } else if sequence < lap {
                // The cell still holds the value from one lap ago: the ring is full.
                return Err(PushError::Full(value));
            } else {
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest value, if it has been published. Consumer only.
    pub(crate) fn pop(&self) -> Option<T> {
        self.cells.pop_at(&self.head)
    }

    /// Whether the oldest value is published, so that [`pop`](Self::pop) takes it. Consumer
    /// only. Unlike [`is_empty`](Self::is_empty), a cell a producer has claimed but not yet
    /// written counts as nothing to take.
    pub(crate) fn head_published(&self) -> bool {
        self.cells.published_at(&self.head)
    }

    /// Refuses every later push. Values pushed before stay (and count in `pushed`).
    pub(crate) fn close(&self) {
        self.tail.fetch_or(CLOSED, Ordering::SeqCst);
    }

    /// Every successful push so far.
    pub(crate) fn pushed(&self) -> u64 {
        // Acquire: a reader that counts a push also sees what happened before it, such as the
        // count of the cancel whose `max_pending` place the push took (`Core::pending`).
        self.tail.load(Ordering::Acquire) & !CLOSED
    }

    /// Values claimed and not yet taken (a snapshot).
    pub(crate) fn len(&self) -> usize {
        let head = self.head.load(Ordering::Acquire);
        self.pushed().saturating_sub(head) as usize
    }

    /// Whether at least `backlog` values wait and a cell is free, as of a moment ago (a hint:
    /// a concurrent push or pop changes it).
    pub(crate) fn backlog_with_room(&self, backlog: usize) -> bool {
        let queued = self.len();
        queued >= backlog && queued < self.cells.len()
    }

    /// Whether every cell holds a value not yet taken, as of a moment ago (a hint).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_full(&self) -> bool {
        !self.backlog_with_room(0)
    }

    /// Whether nothing is waiting. SeqCst so a tick thread that published its sleep plan sees
    /// every push that did not see the plan.
    pub(crate) fn is_empty(&self) -> bool {
        let tail = self.tail.load(Ordering::SeqCst) & !CLOSED;
        tail == self.head.load(Ordering::Relaxed)
    }
}

impl<T> Drop for PendingRing<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn half_full_is_reported_at_sixteen_checkpoints_a_lap() {
        let ring = PendingRing::new(64);
        let push = |count: usize| {
            (0..count)
                .map(|_| ring.try_push(0u8).unwrap())
                .filter(|&position| ring.half_full_after(position, || 0))
                .collect::<Vec<u64>>()
        };
        // Looked at every 4th position; from 32 values held on, it is half full.
        assert_eq!(push(64), (32..64).step_by(4).collect::<Vec<u64>>());
        for _ in 0..40 {
            ring.pop().unwrap();
        }
        // 24 held: half full again from position 71 on, next looked at 72.
        assert_eq!(push(40), (72..104).step_by(4).collect::<Vec<u64>>());
    }

    #[test]
    fn fifo_full_and_wraparound() {
        let ring = PendingRing::new(3);
        assert_eq!(ring.capacity(), 4);
        for lap in 0..3 {
            for i in 0..4 {
                ring.try_push(lap * 10 + i).unwrap();
            }
            assert_eq!(ring.try_push(99), Err(PushError::Full(99)));
            assert_eq!(ring.len(), 4);
            for i in 0..4 {
                assert_eq!(ring.pop(), Some(lap * 10 + i));
            }
            assert_eq!(ring.pop(), None);
            assert!(ring.is_empty());
        }
        assert_eq!(ring.pushed(), 12);
    }

    /// A cell a producer has claimed but not yet written: the ring is not empty, yet nothing
    /// is published to take (the tick thread sleeps instead of spinning on it).
    #[test]
    fn a_claimed_cell_is_not_published_until_written() {
        let ring = PendingRing::new(4);
        assert!(!ring.head_published());
        ring.try_push(1u64).unwrap();
        assert!(ring.head_published());
        assert_eq!(ring.pop(), Some(1));
        // Claim position 1 as `try_push` does, without writing it yet.
        let position = ring.tail.fetch_add(1, Ordering::SeqCst);
        assert!(!ring.is_empty());
        assert!(!ring.head_published());
        assert_eq!(ring.pop(), None);
        let cell = ring.cells.at(position);
        // SAFETY: this test claimed `position` above, and nothing reads it before the store.
        unsafe { cell.write(2) };
        let free = ring.cells.free_for(position);
        cell.sequence
            .store(Cells::<u64>::full_after(free), Ordering::Release);
        assert!(ring.head_published());
        assert_eq!(ring.pop(), Some(2));
    }

    #[test]
    fn a_ring_too_big_to_allocate_is_an_error() {
        assert!(PendingRing::<u64>::try_new(1 << 60).is_err());
        assert_eq!(PendingRing::<u64>::bytes_for(3), 4 * 16);
        assert_eq!(PendingRing::<u64>::try_new(3).unwrap().capacity(), 4);
        // A command (deadline, slot) and its sequence: the 24 bytes the docs quote.
        assert_eq!(PendingRing::<[u64; 2]>::bytes_for(4), 4 * 24);
    }

    #[test]
    fn a_new_ring_is_free_for_every_cell_of_its_first_lap() {
        const CELLS: u64 = if cfg!(miri) { 1 << 6 } else { 1 << 10 };
        let ring = PendingRing::new(CELLS as usize);
        for lap in 0..2u64 {
            for i in 0..CELLS {
                ring.try_push(lap << 20 | i).unwrap();
            }
            assert!(matches!(ring.try_push(0), Err(PushError::Full(0))));
            for i in 0..CELLS {
                assert_eq!(ring.pop(), Some(lap << 20 | i));
            }
        }
    }

    #[test]
    fn closed_ring_refuses_and_drains() {
        let ring = PendingRing::new(8);
        ring.try_push(1).unwrap();
        ring.try_push(2).unwrap();
        ring.close();
        assert_eq!(ring.try_push(3), Err(PushError::Closed(3)));
        assert_eq!(ring.pushed(), 2, "the refused push is not counted");
        assert_eq!(
            (ring.pop(), ring.pop(), ring.pop()),
            (Some(1), Some(2), None)
        );
    }

    #[test]
    fn drop_releases_values_left_inside() {
        let value = Arc::new(());
        let ring = PendingRing::new(4);
        ring.try_push(Arc::clone(&value)).unwrap();
        ring.try_push(Arc::clone(&value)).unwrap();
        drop(ring);
        assert_eq!(Arc::strong_count(&value), 1);
    }

    #[test]
    fn many_producers_lose_nothing() {
        const PRODUCERS: u64 = 4;
        // Under Miri, a few dozen laps of the ring.
        const PER: u64 = if cfg!(miri) { 500 } else { 50_000 };
        let ring = Arc::new(PendingRing::new(64));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let ring = Arc::clone(&ring);
                std::thread::spawn(move || {
                    for i in 0..PER {
                        let mut v = p * PER + i;
                        while let Err(PushError::Full(back)) = ring.try_push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut last = vec![None; PRODUCERS as usize];
        let mut seen = 0;
        while seen < PRODUCERS * PER {
            match ring.pop() {
                Some(v) => {
                    let (p, i) = ((v / PER) as usize, v % PER);
                    assert!(last[p].is_none_or(|l| l < i), "per-producer FIFO");
                    last[p] = Some(i);
                    seen += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        producers.into_iter().for_each(|p| p.join().unwrap());
        assert!(ring.is_empty());
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Two producers race for a two-cell ring while the consumer takes: every value that was
    /// accepted arrives exactly once, in each producer's order, and a refused one comes back.
    #[test]
    fn two_producers_one_consumer() {
        loom::model(|| {
            let ring = Arc::new(PendingRing::new(2));
            let producers: Vec<_> = (0..2u64)
                .map(|p| {
                    let ring = Arc::clone(&ring);
                    thread::spawn(move || {
                        let mut accepted = Vec::new();
                        for i in 0..2 {
                            if ring.try_push(p * 10 + i).is_ok() {
                                accepted.push(p * 10 + i);
                            }
                        }
                        accepted
                    })
                })
                .collect();
            let mut got = Vec::new();
            if let Some(v) = ring.pop() {
                got.push(v);
            }
            let mut accepted: Vec<u64> = producers
                .into_iter()
                .flat_map(|p| p.join().unwrap())
                .collect();
            while let Some(v) = ring.pop() {
                got.push(v);
            }
            for p in 0..2 {
                let mine: Vec<_> = got.iter().filter(|v| *v / 10 == p).collect();
                assert!(mine.windows(2).all(|w| w[0] < w[1]));
            }
            got.sort();
            accepted.sort();
            assert_eq!(got, accepted);
        });
    }

    /// A push racing with close either fails with `Closed` or is counted and stays in the
    /// ring: shutdown's ledger (`pushed`) and the ring agree.
    #[test]
    fn close_never_loses_an_accepted_push() {
        loom::model(|| {
            let ring = Arc::new(PendingRing::new(2));
            let producer = {
                let ring = Arc::clone(&ring);
                thread::spawn(move || ring.try_push(7).is_ok())
            };
            ring.close();
            let accepted = producer.join().unwrap();
            assert_eq!(ring.pushed(), u64::from(accepted));
            assert_eq!(ring.pop(), accepted.then_some(7));
        });
    }
}
