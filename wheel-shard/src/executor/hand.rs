//! [`Hand`]: the references a worker keeps in hand ahead of the one it runs, their records
//! prefetched, which another worker may take over once the holder is stuck in a long run.
//!
//! A worker takes references from the stealable queues a batch at a time (one CAS) and runs
//! them one by one from its hand. Taking one from the hand must cost no locked instruction:
//! that is the batching's gain. But a callback that blocks (or a thread the kernel preempts)
//! must not keep the rest of the hand from workers that sit idle. So the hand is stealable,
//! by a protocol whose price falls on the thief, which steals only from a stuck holder:
//!
//! - `front` is the index the holder takes next; only the holder writes it.
//! - `back` packs `epoch | BUSY | end`: the hand holds cells `front..end`. A thief lowers
//!   `end`; the holder raises it only when it refills an empty hand, under a new epoch.
//! - **Take (holder)**: store `front = i + 1`, a store–load barrier, load `back`. When `i <
//!   end` and no thief is busy, cell `i` is the holder's. The barrier is the light half of the
//!   asymmetric pair (`wheel_platform::barrier`): a compiler fence, no locked instruction.
//! - **Steal (thief)**: load `back` and `front`; CAS `back` to `(epoch, BUSY, front)`, which
//!   shuts out other thieves and the holder's refill; the heavy half of the barrier
//!   (`membarrier`); load `front` again as `F`; take cells `max(F, front)..end`; store `back
//!   = (epoch, F')` without BUSY, where `F'` is where the stolen range began.
//! - A holder whose take finds BUSY waits until the thief is done (a few microseconds: the
//!   thief's system call) and decides by the final `end`.
//!
//! Why nothing is taken twice or lost: of the holder's store of `front = i + 1` and the
//! thief's CAS, the barrier pair makes at least one side see the other's write. If the thief
//! sees it (`F > i`), the stolen range starts above `i` and the final `end` lets the holder
//! take `i`. If it does not, the holder's load of `back` sees the thief's CAS: it waits for the
//! final `end = F <= i`, leaves `i`, and the thief takes it. The holder refills only an empty
//! hand, first moving `back` to a new epoch with a CAS (which fails while a thief is busy), so
//! a thief that read an older state fails its own CAS and never reads a cell being written.
//!
//! The loom models below check both sides, the refill and two thieves.

use std::mem::MaybeUninit;

use crossbeam_utils::Backoff;

use crate::sync::{
    fence, heavy_barrier, heavy_barrier_available, light_barrier, spin_wait, AtomicU64, Ordering,
    UnsafeCell,
};

/// A thief is between its CAS and its final store of `back`.
const BUSY: u64 = 1 << 32;
/// The bits of `back` that hold `end`.
const END: u64 = BUSY - 1;
/// The lowest bit of `back`'s epoch. The epoch (31 bits) wraps after 2^31 refills; a thief
/// could mistake a later fill for the one it read only if it stalled between its read and its
/// CAS for all of them (billions of runs), and even then `front` and `end` would have to match.
const EPOCH_ONE: u64 = 1 << 33;

fn end_of(back: u64) -> u64 {
    back & END
}

fn is_busy(back: u64) -> bool {
    back & BUSY != 0
}

/// A worker's hand of up to `capacity` references (see the module doc).
pub(crate) struct Hand<T> {
    cells: Box<[UnsafeCell<MaybeUninit<T>>]>,
    /// The index the holder takes next. Written by the holder only.
    front: AtomicU64,
    /// `epoch | BUSY | end` (see the module doc).
    back: AtomicU64,
    /// Whether the barrier pair is there; without it both sides use a full fence.
    asymmetric: bool,
}

// SAFETY: values move between threads through the hand, so `T: Send` is required and enough:
// cells are written by the holder only while no thief can read them (a refill, under a new
// epoch), and read by the holder or by the one thief whose CAS gave it their range.
unsafe impl<T: Send> Send for Hand<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Hand<T> {}

impl<T: Copy> Hand<T> {
    /// An empty hand of `capacity` cells (at most 2^32 - 1).
    pub(crate) fn new(capacity: usize) -> Self {
        assert!(
            (capacity as u64) < END,
            "a hand's capacity fits its end bits"
        );
        Hand {
            cells: (0..capacity)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            front: AtomicU64::new(0),
            back: AtomicU64::new(0),
            asymmetric: heavy_barrier_available(),
        }
    }

    /// Holder only: the next value, oldest first; `None` once the hand is empty (taken, or
    /// stolen by a thief).
    #[inline]
    pub(crate) fn take(&self) -> Option<T> {
        let i = self.front.load(Ordering::Relaxed);
        let back = self.back.load(Ordering::Relaxed);
        if i >= end_of(back) && !is_busy(back) {
            // Empty as the holder itself last left it, or as a thief did: nothing to claim.
            return None;
        }
        self.front.store(i + 1, Ordering::Relaxed);
        self.store_load_barrier();
        let mut back = self.back.load(Ordering::Acquire);
        if is_busy(back) {
            back = self.wait_for_thief();
        }
        if i >= end_of(back) {
            return None;
        }
        // SAFETY: cell `i` lies below `end`, written by this holder's last refill; a thief
        // takes only cells at or above the `front` it saw after its barrier, which is above
        // `i` since the final `end` is (module doc), and nobody writes a cell but this holder.
        Some(self.cells[i as usize].with(|cell| unsafe { (*cell).assume_init_read() }))
    }

    /// Holder only, on an empty hand ([`Hand::take`] returned `None`): puts `values` in hand,
    /// oldest first (at most the capacity).
    pub(crate) fn refill(&self, values: &[T]) {
        assert!(values.len() <= self.cells.len(), "a refill fits the hand");
        // A new epoch with nothing in hand: a thief that read an older state now fails its
        // CAS, and one that reads this state finds nothing to steal.
        let backoff = Backoff::new();
        let epoch = loop {
            let back = self.back.load(Ordering::Acquire);
            if is_busy(back) {
                spin_wait(&backoff);
                continue;
            }
            let next = (back & !(BUSY | END)).wrapping_add(EPOCH_ONE);
            if self
                .back
                .compare_exchange(back, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                break next;
            }
        };
        for (cell, value) in self.cells.iter().zip(values) {
            // SAFETY: the hand is empty under an epoch no thief has seen with anything in it,
            // so no thief reads a cell until the Release store below publishes them.
            cell.with_mut(|cell| unsafe { (*cell).write(*value) });
        }
        self.front.store(0, Ordering::Relaxed);
        self.back
            .store(epoch | values.len() as u64, Ordering::Release);
    }

    /// A thief: takes every value the holder has not yet claimed and passes them to `take`,
    /// oldest first; returns how many. Expensive (a `membarrier`): only for a holder that is
    /// stuck. 0 when the hand is empty or another thief or a refill got there first.
    pub(crate) fn steal(&self, mut take: impl FnMut(T)) -> usize {
        let back = self.back.load(Ordering::Acquire);
        let front = self.front.load(Ordering::Acquire);
        let end = end_of(back);
        if is_busy(back) || front >= end {
            return 0;
        }
        let claimed = (back & !END) | BUSY | front;
        if self
            .back
            .compare_exchange(back, claimed, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return 0;
        }
        if self.asymmetric {
            heavy_barrier();
        } else {
            fence(Ordering::SeqCst);
        }
        // Within an epoch `front` only grows, and a refill cannot begin while BUSY is set.
        let from = self.front.load(Ordering::Acquire).clamp(front, end);
        for i in from..end {
            // SAFETY: the CAS on `back` (Acquire) saw the refill's Release store, so cells
            // below `end` are written; the holder no longer takes cells at or above `from`
            // (module doc), and no refill writes them while BUSY is set.
            take(self.cells[i as usize].with(|cell| unsafe { (*cell).assume_init_read() }));
        }
        self.back.store((back & !END) | from, Ordering::Release);
        (end - from) as usize
    }

    /// Values in hand not yet claimed by the holder (a snapshot, for statistics and for
    /// whether a thief should look).
    pub(crate) fn len(&self) -> usize {
        let back = self.back.load(Ordering::Acquire);
        let front = self.front.load(Ordering::Acquire);
        end_of(back).saturating_sub(front) as usize
    }

    /// The holder's half of the store–load barrier (see the module doc).
    #[inline(always)]
    fn store_load_barrier(&self) {
        if self.asymmetric {
            light_barrier();
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// Holder: waits until a busy thief has stored its final `back`, and returns it.
    #[cold]
    fn wait_for_thief(&self) -> u64 {
        let backoff = Backoff::new();
        loop {
            let back = self.back.load(Ordering::Acquire);
            if !is_busy(back) {
                return back;
            }
            spin_wait(&backoff);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn drain(hand: &Hand<u64>) -> Vec<u64> {
        std::iter::from_fn(|| hand.take()).collect()
    }

    #[test]
    fn the_holder_takes_what_it_put_in_hand_oldest_first() {
        let hand = Hand::new(4);
        assert_eq!(hand.take(), None, "a new hand is empty");
        hand.refill(&[1, 2, 3]);
        assert_eq!(hand.len(), 3);
        assert_eq!(drain(&hand), vec![1, 2, 3]);
        assert_eq!(hand.take(), None, "and stays empty");
        hand.refill(&[4, 5, 6, 7]);
        assert_eq!(drain(&hand), vec![4, 5, 6, 7]);
    }

    #[test]
    fn a_thief_takes_what_the_holder_has_not_claimed() {
        let hand = Hand::new(8);
        hand.refill(&[10, 11, 12, 13, 14]);
        assert_eq!(hand.take(), Some(10));
        assert_eq!(hand.take(), Some(11));
        let mut stolen = Vec::new();
        assert_eq!(hand.steal(|v| stolen.push(v)), 3);
        assert_eq!(stolen, vec![12, 13, 14]);
        assert_eq!(hand.take(), None, "the holder finds its hand empty");
        assert_eq!(hand.steal(|v| stolen.push(v)), 0, "nothing left to steal");
        hand.refill(&[20, 21]);
        assert_eq!(drain(&hand), vec![20, 21], "a refill after a steal");
    }

    #[test]
    fn an_empty_hand_has_nothing_to_steal() {
        let hand = Hand::<u64>::new(4);
        assert_eq!(hand.steal(|_| panic!("nothing")), 0);
        hand.refill(&[1]);
        assert_eq!(hand.take(), Some(1));
        assert_eq!(hand.steal(|_| panic!("nothing")), 0);
    }

    /// A holder taking and refilling as fast as it can while two thieves steal whenever they
    /// can: every value is taken exactly once, over many rounds on real threads.
    #[test]
    fn holder_and_thieves_take_every_value_exactly_once() {
        const ROUNDS: u64 = if cfg!(miri) { 20 } else { 20_000 };
        const CAPACITY: u64 = 16;
        let hand = Arc::new(Hand::new(CAPACITY as usize));
        let done = Arc::new(AtomicBool::new(false));
        let thieves: Vec<_> = (0..2)
            .map(|_| {
                let (hand, done) = (Arc::clone(&hand), Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while !done.load(std::sync::atomic::Ordering::Acquire) {
                        hand.steal(|v| got.push(v));
                        std::thread::yield_now();
                    }
                    got
                })
            })
            .collect();
        let mut got = Vec::new();
        let mut next = 0;
        for _ in 0..ROUNDS {
            let values: Vec<u64> = (next..next + CAPACITY).collect();
            next += CAPACITY;
            hand.refill(&values);
            got.extend(std::iter::from_fn(|| hand.take()));
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        for thief in thieves {
            got.extend(thief.join().unwrap());
        }
        got.sort_unstable();
        assert_eq!(got, (0..next).collect::<Vec<_>>());
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// The holder takes from a hand of three while a thief steals: each value is taken once.
    #[test]
    fn holder_and_thief_share_a_hand() {
        loom::model(|| {
            let hand = Arc::new(Hand::new(3));
            hand.refill(&[1u64, 2, 3]);
            let thief = {
                let hand = Arc::clone(&hand);
                thread::spawn(move || {
                    let mut got = Vec::new();
                    hand.steal(|v| got.push(v));
                    got
                })
            };
            let mut got: Vec<u64> = std::iter::from_fn(|| hand.take()).collect();
            got.extend(thief.join().unwrap());
            got.sort_unstable();
            assert_eq!(got, vec![1, 2, 3]);
        });
    }

    /// A thief that read the hand before the holder emptied and refilled it cannot take from
    /// the refill's cells as they are written, and a second thief competes with the first:
    /// every value of both fills is taken exactly once.
    #[test]
    fn a_refill_shuts_out_thieves_of_the_last_fill() {
        crate::sync::model_bounded(2, || {
            let hand = Arc::new(Hand::new(2));
            hand.refill(&[1u64, 2]);
            let thieves: Vec<_> = (0..2)
                .map(|_| {
                    let hand = Arc::clone(&hand);
                    thread::spawn(move || {
                        let mut got = Vec::new();
                        hand.steal(|v| got.push(v));
                        got
                    })
                })
                .collect();
            let mut got: Vec<u64> = std::iter::from_fn(|| hand.take()).collect();
            hand.refill(&[3, 4]);
            got.extend(std::iter::from_fn(|| hand.take()));
            for thief in thieves {
                got.extend(thief.join().unwrap());
            }
            got.sort_unstable();
            assert_eq!(got, vec![1, 2, 3, 4]);
        });
    }
}
