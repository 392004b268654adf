//! [`Lane`]: a shard's single-producer ring, beside its shared
//! [`PendingRing`](super::PendingRing): new timers from the one producer thread that holds it
//! reach the tick thread without a locked instruction.
//!
//! The shared ring's claim is a SeqCst CAS on its tail, and on x86 a locked instruction waits
//! for every earlier store of its thread to reach the cache; in a loop that reads the clock
//! between schedules that wait is paid in full (`docs/performance.md`, "A lane per shard").
//! A lane has one producer, so a push is plain stores: the value, the cell's sequence
//! (Release, which hands the cell to the tick thread) and the count of pushes.
//!
//! Unlike the shared ring's, a lane's consumer never writes a cell: it reads the value and
//! moves its `head` on, and the holder knows which cells are free from `head`, which it reads
//! only once its last reading's room is used up (a lap at a time while the consumer keeps
//! up). So a cell's line goes from the holder to the tick thread and back with one transfer
//! each way and no load by the holder on its way: a cell the consumer had written back would
//! come back modified, and the holder's read of its sequence would wait for that transfer
//! before each line's first push. A cell's sequence says "full" for the position last
//! pushed there ([`Cells::full_for`]), which differs for every lap, so the consumer tells a
//! new value from the one it took a lap ago without the cell being freed in between.
//!
//! Ground rules:
//! - **One holder at a time.** A producer thread takes a free lane ([`LaneHold::try_take`])
//!   once it has scheduled a few batches on the shard, at a refill of its table cache (see
//!   `TimerTable::claim_for_schedule`), so a thread that schedules a timer or two never does;
//!   its cache remembers, and lets the lane go when the thread ends ([`LaneHold::let_go`]).
//!   Every other thread uses the shared ring. The count of pushes lives in the lane, so the
//!   next holder goes on from it.
//! - **A full lane is no refusal.** Its holder then pushes to the shared ring, with that
//!   ring's waiting and wake-ups.
//! - **Plain stores need the other side's barrier.** The wake-up handshake and the shutdown
//!   rely on a producer's push being ordered before its next read of the tick thread's plan or
//!   of the closed flag. The shared ring's SeqCst CAS gives that order; a lane push does not,
//!   so its holder issues [`crate::sync::light_barrier`] after it, and the threads on the
//!   other side issue [`crate::sync::heavy_barrier`] between their write and their read: a
//!   tick thread before it sleeps past the next tick
//!   ([`Shard::plan_sleep`](super::Shard::plan_sleep)), and the shutdown once it has closed
//!   the lanes. Where the heavy barrier is not available
//!   ([`crate::sync::heavy_barrier_available`]) no shard has a lane.
//! - **Closed is a flag read after the push.** A push that then finds the lane closed is
//!   answered as a refusal, and its caller takes its timer back from the record as after a
//!   closed ring; the reference it left in the lane is stale and the tick thread drops it.

use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::cells::{Cells, RingRefused};
use crate::sync::{AtomicBool, AtomicU64, Ordering};

/// Cells past the tail whose line a push asks for: a few lines ahead, so that each line is on
/// its way from the tick thread's cache before the holder writes it. A push only stores to its
/// cell, and stores do not start the hardware's prefetch as a stream of loads does: without
/// this, every line's first store waits for the line (`docs/performance.md`, "The lane's
/// cells: the consumer writes nothing").
const PUSH_PREFETCH_AHEAD: u64 = 8;

/// A single-producer, single-consumer bounded ring with a holder (see the module doc).
pub(crate) struct Lane<T> {
    cells: Cells<T>,
    /// Pushes so far (the next position). Written by the holder only.
    tail: CachePadded<AtomicU64>,
    /// One past the last position the holder knows to be free: `head` as it last read it,
    /// plus the capacity. Used by the holder only (the next holder takes it over through the
    /// hold's Acquire); an atomic so the lane stays `Sync`.
    room_until: AtomicU64,
    /// The next position to take. Written by the consumer only.
    head: CachePadded<AtomicU64>,
    /// Which producer thread holds the lane: shared with that thread's table cache, which
    /// lets it go when the thread ends.
    hold: Arc<LaneHold>,
    /// Set once at shutdown: later pushes are refused.
    closed: AtomicBool,
}

/// Whether a producer thread holds a [`Lane`]: the lane's, shared with the holder's table
/// cache, which lets it go when its thread ends.
pub(crate) struct LaneHold {
    held: AtomicBool,
}

impl LaneHold {
    /// Takes the lane for the calling thread if no thread holds it.
    pub(crate) fn try_take(&self) -> bool {
        // Acquire: the previous holder's pushes, and its count, happen before this one's.
        // SeqCst: a tick thread that published its plan and then found the lane free skips
        // the heavy barrier, so this thread's later read of the plan must see it.
        self.held
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }

    /// The holder lets the lane go (its thread ends).
    pub(crate) fn let_go(&self) {
        self.held.store(false, Ordering::Release);
    }

    /// Whether a producer thread holds the lane. A lane let go is seen with every push its
    /// holder made; SeqCst, for the tick thread's plan (see [`LaneHold::try_take`]).
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Ordering::SeqCst)
    }
}

// SAFETY: as for `PendingRing`: values move between threads through the cells, handed over by
// each cell's sequence (Release on publish, Acquire on take), so `T: Send` is enough.
unsafe impl<T: Send> Send for Lane<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Lane<T> {}

impl<T> Lane<T> {
    /// A lane of `capacity` cells, rounded up to a power of two, or the allocator's refusal.
    pub(crate) fn try_new(capacity: usize) -> Result<Self, RingRefused> {
        Ok(Lane {
            cells: Cells::try_new(capacity)?,
            tail: CachePadded::new(AtomicU64::new(0)),
            room_until: AtomicU64::new(0),
            head: CachePadded::new(AtomicU64::new(0)),
            hold: Arc::new(LaneHold {
                held: AtomicBool::new(false),
            }),
            closed: AtomicBool::new(false),
        })
    }

    /// Bytes a lane asked for `capacity` allocates for its cells.
    pub(crate) fn bytes_for(capacity: usize) -> usize {
        Cells::<T>::bytes_for(capacity)
    }

    /// Who holds the lane.
    pub(crate) fn hold(&self) -> &Arc<LaneHold> {
        &self.hold
    }

    /// Holder: appends `value` unless the lane is full; returns the position it took. The
    /// caller then issues [`crate::sync::light_barrier`] and asks [`Lane::is_closed`] (see the
    /// module doc).
    #[inline]
    pub(crate) fn try_push(&self, value: T) -> Result<u64, T> {
        let tail = self.tail.load(Ordering::Relaxed);
        if tail >= self.room_until.load(Ordering::Relaxed) && !self.has_room_at(tail) {
            return Err(value);
        }
        let cell = self.cells.at(tail);
        crate::sync::prefetch_for_write(self.cells.at(tail + PUSH_PREFETCH_AHEAD));
        // SAFETY: the holder alone pushes, and `head` said the consumer has moved the value of
        // one lap ago out of this cell, so no one else touches it until the Release store
        // below hands it to the consumer.
        unsafe { cell.write(value) };
        cell.sequence
            .store(self.cells.full_for(tail), Ordering::Release);
        // Release: a reader of the count (`pending()`) that counts this push sees what came
        // before it, as the shared ring's count is read.
        self.tail.store(tail + 1, Ordering::Release);
        Ok(tail)
    }

    /// Holder: reads the consumer's `head` again and notes the room it leaves; whether the
    /// cell of `position` is free.
    #[cold]
    fn has_room_at(&self, position: u64) -> bool {
        // Acquire: the consumer moved every value before `head` out of its cell before it
        // published `head` (Release), so those cells may be written again.
        let room_until = self.head.load(Ordering::Acquire) + self.cells.len() as u64;
        self.room_until.store(room_until, Ordering::Relaxed);
        position < room_until
    }

    /// Holder, after a push and [`crate::sync::light_barrier`]: whether the lane was closed.
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Refuses later pushes; the caller then issues [`crate::sync::heavy_barrier`] before it
    /// reads the records (see the module doc).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether the push that took `position` left the lane at least half full, with `beside`
    /// more waiting in the shard's shared ring: see [`Cells::half_full_after`].
    #[inline]
    pub(crate) fn half_full_after(&self, position: u64, beside: impl FnOnce() -> usize) -> bool {
        self.cells.half_full_after(position, &self.head, beside)
    }

    /// Consumer: takes the oldest value, if it has been published.
    pub(crate) fn pop(&self) -> Option<T> {
        let position = self.head.load(Ordering::Relaxed);
        // SAFETY: the tick thread is the lane's single consumer, and `head` moves past
        // `position` below; the holder writes the cell again only after that store.
        let value = unsafe { self.cells.take_published(position) }?;
        // Release: hands the cell back to the holder (see `Lane::has_room_at`).
        self.head.store(position + 1, Ordering::Release);
        Some(value)
    }

    /// Consumer: whether [`Lane::pop`] has a published value to take.
    pub(crate) fn head_published(&self) -> bool {
        self.cells.published_at(&self.head)
    }

    /// Every push so far.
    pub(crate) fn pushed(&self) -> u64 {
        self.tail.load(Ordering::Acquire)
    }

    /// Values pushed and not yet taken (a snapshot).
    pub(crate) fn len(&self) -> usize {
        let head = self.head.load(Ordering::Acquire);
        self.pushed().saturating_sub(head) as usize
    }

    /// Whether at least `backlog` values wait and a cell is free, as of a moment ago (a hint).
    pub(crate) fn backlog_with_room(&self, backlog: usize) -> bool {
        let queued = self.len();
        queued >= backlog && queued < self.cells.len()
    }

    /// Whether nothing is waiting, as far as this thread sees: after a
    /// [`crate::sync::heavy_barrier`], every push whose holder went on to read the plan unseen.
    pub(crate) fn is_empty(&self) -> bool {
        self.pushed() == self.head.load(Ordering::Relaxed)
    }
}

impl<T> Drop for Lane<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_next_goes_on_from_the_count() {
        let lane = Lane::<u64>::try_new(4).unwrap();
        assert!(lane.hold().try_take());
        assert!(!lane.hold().try_take(), "held");
        assert_eq!(lane.try_push(7), Ok(0));
        lane.hold().let_go();
        assert!(!lane.hold().is_held());
        assert!(lane.hold().try_take());
        assert_eq!(lane.try_push(8), Ok(1));
        assert_eq!((lane.pushed(), lane.len()), (2, 2));
        assert_eq!(
            (lane.pop(), lane.pop(), lane.pop()),
            (Some(7), Some(8), None)
        );
        assert!(lane.is_empty());
    }

    #[test]
    fn a_full_lane_gives_the_value_back_and_takes_more_once_emptied() {
        let lane = Lane::<u64>::try_new(4).unwrap();
        assert!(lane.hold().try_take());
        for v in 0..4 {
            assert_eq!(lane.try_push(v), Ok(v));
        }
        assert_eq!(lane.try_push(4), Err(4));
        assert!(!lane.backlog_with_room(1), "full: no room");
        assert!(lane.head_published());
        assert_eq!(lane.pop(), Some(0));
        assert_eq!(lane.try_push(4), Ok(4));
        let rest: Vec<_> = std::iter::from_fn(|| lane.pop()).collect();
        assert_eq!(rest, [1, 2, 3, 4]);
        assert!(!lane.head_published());
    }

    #[test]
    fn closing_is_seen_by_the_holder() {
        let lane = Lane::<u64>::try_new(4).unwrap();
        assert!(!lane.is_closed());
        lane.close();
        assert!(lane.is_closed());
    }

    #[test]
    fn half_full_is_looked_at_sixteen_times_a_lap() {
        let lane = Lane::<u64>::try_new(64).unwrap();
        assert!(lane.hold().try_take());
        let woken: Vec<u64> = (0..64)
            .filter_map(|v| lane.try_push(v).ok())
            .filter(|&position| lane.half_full_after(position, || 0))
            .collect();
        assert_eq!(woken, [32, 36, 40, 44, 48, 52, 56, 60]);
    }

    /// One holder pushing, one consumer taking, on two threads: every value once, in order.
    #[test]
    fn values_cross_threads_once_in_order() {
        let lane = std::sync::Arc::new(Lane::<u64>::try_new(64).unwrap());
        // Under Miri, a few dozen laps.
        const N: u64 = if cfg!(miri) { 2_000 } else { 200_000 };
        let consumer = {
            let lane = std::sync::Arc::clone(&lane);
            std::thread::spawn(move || {
                let mut next = 0;
                while next < N {
                    match lane.pop() {
                        Some(v) => {
                            assert_eq!(v, next);
                            next += 1;
                        }
                        None => std::hint::spin_loop(),
                    }
                }
            })
        };
        assert!(lane.hold().try_take());
        let mut v = 0;
        while v < N {
            if lane.try_push(v).is_ok() {
                v += 1;
            } else {
                std::hint::spin_loop();
            }
        }
        consumer.join().unwrap();
        assert_eq!(lane.pushed(), N);
        assert!(lane.is_empty());
    }
}

/// The lane's orderings, with the barrier pair as loom models it (a SeqCst fence on each
/// side, the order `membarrier` gives): a lane push never strands its timer behind a sleeping
/// tick thread, and a push racing the shutdown is either seen by the shutdown's pass over the
/// records or taken back by its producer.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::shard::wake::{TickWaker, IDLE};
    use crate::sync;
    use loom::sync::Arc;
    use loom::thread;
    use std::time::Duration;

    /// A tick thread that takes one value from `lane` and ends, planning to sleep until
    /// `plan` whenever the lane looks empty, with the heavy barrier while the lane is held
    /// (as `Shard::plan_sleep`). A lost wake-up leaves it parked for good, which loom reports.
    fn tick_thread(lane: &Arc<Lane<u64>>, plan: u64) -> (Arc<TickWaker>, thread::JoinHandle<()>) {
        let waker = Arc::new(TickWaker::new());
        let handle = {
            let (lane, waker) = (Arc::clone(lane), Arc::clone(&waker));
            thread::spawn(move || loop {
                waker.mark_awake();
                if lane.pop().is_some() {
                    return;
                }
                let may_sleep = waker.plan_sleep(0, plan, || {
                    if lane.hold().is_held() {
                        sync::heavy_barrier();
                    }
                    lane.is_empty()
                });
                if may_sleep {
                    waker.park(plan, || Duration::from_millis(1));
                }
            })
        };
        waker.set_thread(handle.thread().clone());
        (waker, handle)
    }

    /// Pushes `values` as the holder, retrying while the lane is full.
    fn push_all(lane: &Lane<u64>, values: std::ops::Range<u64>) {
        for v in values {
            while lane.try_push(v).is_err() {
                thread::yield_now();
            }
        }
    }

    /// Pops `count` values as the consumer, in order from `first`.
    fn pop_all(lane: &Lane<u64>, first: u64, count: u64) {
        for v in first..first + count {
            loop {
                if let Some(got) = lane.pop() {
                    assert_eq!(got, v);
                    break;
                }
                thread::yield_now();
            }
        }
    }

    /// A holder laps a two-cell lane while the consumer takes: the holder writes a cell only
    /// after the consumer's `head` says its last value is out (loom's cells report a write
    /// racing the take), and every value arrives once, in order.
    #[test]
    fn the_holder_reuses_a_cell_only_after_the_consumer_took_it() {
        loom::model(|| {
            let lane = Arc::new(Lane::<u64>::try_new(2).unwrap());
            assert!(lane.hold().try_take());
            let consumer = {
                let lane = Arc::clone(&lane);
                thread::spawn(move || pop_all(&lane, 0, 3))
            };
            push_all(&lane, 0..3);
            consumer.join().unwrap();
            assert!(lane.is_empty());
        });
    }

    /// The lane changes holders while full: the next holder goes on from the room the first
    /// one read, and reads `head` again before it writes a cell the consumer still holds.
    #[test]
    fn the_next_holder_takes_over_the_room_it_may_use() {
        loom::model(|| {
            let lane = Arc::new(Lane::<u64>::try_new(2).unwrap());
            assert!(lane.hold().try_take());
            push_all(&lane, 0..2);
            lane.hold().let_go();
            let next = {
                let lane = Arc::clone(&lane);
                thread::spawn(move || {
                    assert!(lane.hold().try_take());
                    push_all(&lane, 2..3);
                })
            };
            pop_all(&lane, 0, 3);
            next.join().unwrap();
        });
    }

    /// The holder pushes and wakes for its deadline while the tick thread plans an idle sleep.
    #[test]
    fn a_lane_push_wakes_an_idle_tick_thread() {
        loom::model(|| {
            let lane = Arc::new(Lane::<u64>::try_new(2).unwrap());
            assert!(lane.hold().try_take());
            let (waker, tick) = tick_thread(&lane, IDLE);
            lane.try_push(1).unwrap();
            sync::light_barrier();
            waker.wake_for(5);
            tick.join().unwrap();
        });
    }

    /// A thread takes the free lane and pushes while the tick thread, having found the lane
    /// free, skips the heavy barrier: the take's SeqCst still lets the wake_for see the plan.
    #[test]
    fn a_new_holder_wakes_a_tick_thread_that_skipped_the_barrier() {
        loom::model(|| {
            let lane = Arc::new(Lane::<u64>::try_new(2).unwrap());
            let (waker, tick) = tick_thread(&lane, IDLE);
            assert!(lane.hold().try_take());
            lane.try_push(1).unwrap();
            sync::light_barrier();
            waker.wake_for(5);
            tick.join().unwrap();
        });
    }

    /// The holder arms a record (a loom atomic stands for it: 1 armed, 0 taken back, 2 handed
    /// back), pushes, and takes the record back if it then finds the lane closed; the
    /// shutdown closes the lane, issues the heavy barrier and hands back an armed record.
    /// Exactly one of them ends the timer, and a producer told "scheduled" is never missed.
    #[test]
    fn a_push_racing_the_shutdown_is_handed_back_or_taken_back() {
        loom::model(|| {
            let lane = Arc::new(Lane::<u64>::try_new(2).unwrap());
            let record = Arc::new(AtomicU64::new(0));
            assert!(lane.hold().try_take());
            let shutdown = {
                let (lane, record) = (Arc::clone(&lane), Arc::clone(&record));
                thread::spawn(move || {
                    lane.close();
                    sync::heavy_barrier();
                    record
                        .compare_exchange(1, 2, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                })
            };
            record.store(1, Ordering::Release);
            lane.try_push(1).unwrap();
            sync::light_barrier();
            let scheduled = !lane.is_closed()
                || record
                    .compare_exchange(1, 0, Ordering::AcqRel, Ordering::Acquire)
                    .is_err();
            let handed_back = shutdown.join().unwrap();
            assert_eq!(scheduled, handed_back, "scheduled timers are handed back");
        });
    }
}
