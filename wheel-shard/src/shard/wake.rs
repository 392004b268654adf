//! [`TickWaker`]: the handshake by which a shard's tick thread goes to sleep and producers
//! wake it (the protocol is described in `shard.rs`).
//!
//! The tick thread marks itself awake, works, then publishes the tick it plans to wake at and
//! looks for work once more before it parks. A producer publishes its work, then reads the
//! plan and unparks the thread only when its deadline is earlier. `wake_requested` lets only
//! the first of several producers pay the unpark until the thread marks itself awake again.
//!
//! The atomics and the parking come from [`crate::sync`], so the models below check the
//! handshake itself under loom, with a loom atomic standing in for the ring and the notices.

use std::sync::OnceLock;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::sync::{self, fence, AtomicBool, AtomicU64, Ordering, Thread};

/// `wake_at` while the tick thread is awake: no producer needs to wake it.
const AWAKE: u64 = 0;
/// `wake_at` while it sleeps with nothing pending: any deadline wakes it.
pub(crate) const IDLE: u64 = u64::MAX;
/// A tick thread that sleeps longer than this is woken to free a cancelled timer's entry.
pub(crate) const CLEANUP_TICKS: u64 = 2;

/// A shard's tick-thread wake-up: the plan it sleeps on, and the handle producers unpark.
pub(crate) struct TickWaker {
    wake_at: CachePadded<AtomicU64>,
    /// The tick at which the tick thread last planned its sleep.
    slept_at: AtomicU64,
    wake_requested: AtomicBool,
    /// `std`'s even under loom: it is set before any thread that unparks starts, so there is
    /// nothing for loom to order.
    thread: OnceLock<Thread>,
}

impl TickWaker {
    pub(crate) fn new() -> Self {
        TickWaker {
            wake_at: CachePadded::new(AtomicU64::new(AWAKE)),
            slept_at: AtomicU64::new(0),
            wake_requested: AtomicBool::new(false),
            thread: OnceLock::new(),
        }
    }

    /// The tick thread to unpark; set once, before producers can reach it.
    pub(crate) fn set_thread(&self, thread: impl Into<Thread>) {
        let _ = self.thread.set(thread.into());
    }

    /// Wakes the tick thread if it sleeps past tick `due`. Call after publishing the work with a
    /// SeqCst write (the ring's push); after any other write, call [`TickWaker::fence_and_wake_for`].
    #[inline]
    pub(crate) fn wake_for(&self, due: u64) {
        sync::store_load_fence();
        if due < self.wake_at.load(Ordering::SeqCst)
            && !self.wake_requested.swap(true, Ordering::AcqRel)
        {
            self.unpark();
        }
    }

    /// [`TickWaker::wake_for`] after work published by a write that need not be SeqCst (a notice):
    /// the fence orders it before the read of the plan.
    #[inline]
    pub(crate) fn fence_and_wake_for(&self, due: u64) {
        fence(Ordering::SeqCst);
        self.wake_for(due);
    }

    /// Wakes the tick thread for a cancel, published before the call: it should free the entry
    /// within about a tick, so it is woken only when it went to sleep for longer than that.
    /// Reads no clock.
    #[inline]
    pub(crate) fn wake_for_cleanup(&self) {
        fence(Ordering::SeqCst);
        let wake_at = self.wake_at.load(Ordering::SeqCst);
        let slept_at = self.slept_at.load(Ordering::Relaxed);
        if wake_at != AWAKE
            && wake_at > slept_at.saturating_add(CLEANUP_TICKS)
            && !self.wake_requested.swap(true, Ordering::AcqRel)
        {
            self.unpark();
        }
    }

    /// Wakes the tick thread now.
    #[inline]
    pub(crate) fn wake(&self) {
        self.wake_requested.store(true, Ordering::Release);
        self.unpark();
    }

    /// Wakes the tick thread unless it is awake or already being woken: for a ring filling
    /// up while the thread sleeps until a later deadline. Call after publishing the work with a
    /// SeqCst write (the ring's push), as for [`TickWaker::wake_for`]: an awake thread then looks
    /// at the ring again before it sleeps, so nothing is missed when this finds it awake.
    pub(crate) fn wake_if_asleep(&self) {
        // Every sleep is planned past tick 0 (`AWAKE`), so this is a wake_for for tick 0.
        self.wake_for(AWAKE);
    }

    fn unpark(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Tick thread: it is awake and will look at everything queued.
    #[inline]
    pub(crate) fn mark_awake(&self) {
        self.wake_at.store(AWAKE, Ordering::SeqCst);
        self.wake_requested.store(false, Ordering::Release);
    }

    /// Tick thread: at tick `now` it means to sleep until `tick` ([`IDLE`]: until woken).
    /// Publishes the plan, then asks `idle` (which reads the queues with SeqCst) whether it
    /// still may; `false` means work arrived meanwhile and it must not sleep.
    #[inline]
    pub(crate) fn plan_sleep(&self, now: u64, tick: u64, idle: impl FnOnce() -> bool) -> bool {
        self.slept_at.store(now, Ordering::Relaxed);
        self.wake_at.store(tick.max(1), Ordering::SeqCst);
        sync::store_load_fence();
        idle()
    }

    /// Tick thread, after [`TickWaker::plan_sleep`] said it may: sleeps until woken, and for a
    /// planned tick (not [`IDLE`]) at most `timeout()`.
    #[inline]
    pub(crate) fn park(&self, tick: u64, timeout: impl FnOnce() -> Duration) {
        match tick {
            IDLE => sync::park(),
            _ => sync::park_timeout(timeout()),
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;
    use loom::thread::{self, JoinHandle};

    /// The tick thread's loop cut down to the handshake, on a thread of its own: `work` counts
    /// the items published to the ring or the notices. It plans to sleep until `tick` whenever
    /// it has seen fewer than `want`, and ends once it has seen them all. A wake-up lost while
    /// it is parked leaves it parked for good (loom's timed park never times out), and loom
    /// reports the deadlock. Its handle goes to the waker before any producer starts, as the
    /// service does it. (The model's main thread is a producer, not the tick thread: loom lets
    /// an unpark end a `join`, which a real tick thread never waits in.)
    fn tick_thread(want: usize, tick: u64) -> (Arc<TickWaker>, Arc<AtomicUsize>, JoinHandle<()>) {
        let waker = Arc::new(TickWaker::new());
        let work = Arc::new(AtomicUsize::new(0));
        let handle = {
            let (waker, work) = (Arc::clone(&waker), Arc::clone(&work));
            thread::spawn(move || loop {
                waker.mark_awake();
                if work.load(Ordering::SeqCst) >= want {
                    return;
                }
                if waker.plan_sleep(0, tick, || work.load(Ordering::SeqCst) < want) {
                    waker.park(tick, || Duration::from_millis(1));
                }
            })
        };
        waker.set_thread(handle.thread().clone());
        (waker, work, handle)
    }

    /// A producer pushes, then wakes for its deadline, racing the tick thread that plans to sleep with nothing
    /// pending and looks again: the timer is never left unseen with the thread parked.
    #[test]
    fn push_wakes_an_idle_tick_thread() {
        loom::model(|| {
            let (waker, work, tick) = tick_thread(1, IDLE);
            work.fetch_add(1, Ordering::SeqCst);
            waker.wake_for(5);
            tick.join().unwrap();
        });
    }

    /// The same while the tick thread plans to sleep until tick 10 and the producer's deadline
    /// is tick 5: it is woken rather than left to sleep past the deadline.
    #[test]
    fn earlier_deadline_wakes_a_timed_sleep() {
        loom::model(|| {
            let (waker, work, tick) = tick_thread(1, 10);
            work.fetch_add(1, Ordering::SeqCst);
            waker.wake_for(5);
            tick.join().unwrap();
        });
    }

    /// An earlier deadline sent as a notice, whose queue is not written with SeqCst: `fence_and_wake_for`'s
    /// fence carries it (a Relaxed write stands for the notice).
    #[test]
    fn notice_wakes_a_timed_sleep() {
        loom::model(|| {
            let (waker, work, tick) = tick_thread(1, 10);
            work.fetch_add(1, Ordering::Relaxed);
            waker.fence_and_wake_for(5);
            tick.join().unwrap();
        });
    }

    /// A cancel's notice reaches a tick thread that sleeps longer than [`CLEANUP_TICKS`].
    #[test]
    fn cancel_wakes_a_long_sleep() {
        loom::model(|| {
            let (waker, work, tick) = tick_thread(1, CLEANUP_TICKS + 1);
            work.fetch_add(1, Ordering::Relaxed);
            waker.wake_for_cleanup();
            tick.join().unwrap();
        });
    }

    /// Two producers each publish an item, then wake the tick thread planning to sleep until
    /// `plan`, one by `first` and the other by `second`, racing it and each other. Both share
    /// `wake_requested`: the one whose unpark it skips never strands its item, whichever pass
    /// of the tick thread it meets.
    fn two_producers(plan: u64, first: fn(&TickWaker), second: fn(&TickWaker)) {
        crate::sync::model_bounded(3, move || {
            let (waker, work, tick) = tick_thread(2, plan);
            let other = {
                let (waker, work) = (Arc::clone(&waker), Arc::clone(&work));
                thread::spawn(move || {
                    work.fetch_add(1, Ordering::SeqCst);
                    second(&waker);
                })
            };
            work.fetch_add(1, Ordering::SeqCst);
            first(&waker);
            other.join().unwrap();
            tick.join().unwrap();
        });
    }

    /// Two producers wake_for an idle tick thread.
    #[test]
    fn two_producers_share_one_wake_request() {
        two_producers(IDLE, |waker| waker.wake_for(5), |waker| waker.wake_for(5));
    }

    /// A push that leaves the ring half full wakes a tick thread planning to sleep until tick
    /// 10 although its own deadline (20) is later: `wake_if_asleep`, where `wake_for` would not.
    #[test]
    fn a_filling_ring_wakes_a_timed_sleep() {
        loom::model(|| {
            let (waker, work, tick) = tick_thread(1, 10);
            work.fetch_add(1, Ordering::SeqCst);
            waker.wake_if_asleep();
            tick.join().unwrap();
        });
    }

    /// A filling ring's wake-up and an earlier deadline's wake_for, from two producers.
    #[test]
    fn a_filling_ring_and_an_earlier_deadline_share_one_wake_request() {
        two_producers(10, |waker| waker.wake_for(5), TickWaker::wake_if_asleep);
    }

    /// Shutdown's stop flag and `wake` reach a tick thread on its way to an idle sleep.
    #[test]
    fn wake_reaches_a_tick_thread_going_to_sleep() {
        loom::model(|| {
            let (waker, stop, tick) = tick_thread(1, IDLE);
            stop.store(1, Ordering::SeqCst);
            waker.wake();
            tick.join().unwrap();
        });
    }

    /// A tick thread driving two shards (`runtime/tick_thread.rs`): it marks itself awake on
    /// both wakers, publishes one plan on each, looks at both shards' queues, and parks once.
    /// A producer on each shard pushes and wakes for its deadline, racing the thread and each other; neither
    /// push is left unseen with the thread parked.
    #[test]
    fn a_thread_driving_two_shards_misses_no_push() {
        crate::sync::model_bounded(3, || {
            let wakers = Arc::new([TickWaker::new(), TickWaker::new()]);
            let work = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
            let tick = {
                let (wakers, work) = (Arc::clone(&wakers), Arc::clone(&work));
                thread::spawn(move || {
                    // What the thread has taken from each shard's queue.
                    let mut taken = [0, 0];
                    loop {
                        wakers.iter().for_each(TickWaker::mark_awake);
                        for (taken, work) in taken.iter_mut().zip(work.iter()) {
                            *taken = work.load(Ordering::SeqCst);
                        }
                        if taken == [1, 1] {
                            return;
                        }
                        let may_sleep = wakers.iter().zip(work.iter()).zip(taken).all(
                            |((waker, work), taken)| {
                                waker.plan_sleep(0, 10, || work.load(Ordering::SeqCst) == taken)
                            },
                        );
                        if may_sleep {
                            wakers[0].park(10, || Duration::from_millis(1));
                        }
                    }
                })
            };
            for waker in wakers.iter() {
                waker.set_thread(tick.thread().clone());
            }
            let other = {
                let (wakers, work) = (Arc::clone(&wakers), Arc::clone(&work));
                thread::spawn(move || {
                    work[1].fetch_add(1, Ordering::SeqCst);
                    wakers[1].wake_for(5);
                })
            };
            work[0].fetch_add(1, Ordering::SeqCst);
            wakers[0].wake_for(5);
            other.join().unwrap();
            tick.join().unwrap();
        });
    }
}
