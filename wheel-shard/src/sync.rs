//! The atomics, locks and parking the concurrent parts use: `std`'s normally, loom's under
//! `--cfg loom` so the models in `ring.rs`, `lane.rs`, `record.rs`, `free_map.rs`, `wake.rs`,
//! `idle.rs`, `handout.rs` and `hand.rs` explore every interleaving.

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::park;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread::{park, park_timeout, Thread};

pub(crate) use wheel_platform::hint::{prefetch, prefetch_for_write};

/// Waits a moment for another thread that is inside a short critical step.
pub(crate) fn spin_wait(backoff: &crossbeam_utils::Backoff) {
    #[cfg(loom)]
    {
        let _ = backoff;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    backoff.snooze();
}

/// Orders this thread's SeqCst write before its SeqCst read of another location that follows.
///
/// Nothing outside loom: SeqCst accesses share one total order, which already forbids two
/// threads each missing the other's write (store buffering). Loom treats SeqCst accesses as
/// AcqRel (its README, "Unsupported features") and would report exactly that outcome as a lost
/// wake-up; its `fence(SeqCst)` is modelled in full and gives the order the real code has.
#[inline(always)]
pub(crate) fn store_load_fence() {
    #[cfg(loom)]
    fence(Ordering::SeqCst);
}

/// Loom has no timed park: a timed sleep parks until unparked. A model in which no one wakes
/// the thread then deadlocks, which is how the models see a thread sleep past work it should
/// have been woken for.
#[cfg(loom)]
pub(crate) fn park_timeout(_timeout: std::time::Duration) {
    loom::thread::park();
}

/// A thread to unpark: one a loom model runs, or one of the service's own threads (the service
/// is built under loom too, though no model starts it).
#[cfg(loom)]
#[derive(Clone, Debug)]
pub(crate) enum Thread {
    Model(loom::thread::Thread),
    Os(std::thread::Thread),
}

#[cfg(loom)]
impl Thread {
    pub(crate) fn unpark(&self) {
        match self {
            Thread::Model(thread) => thread.unpark(),
            Thread::Os(thread) => thread.unpark(),
        }
    }
}

#[cfg(loom)]
impl From<loom::thread::Thread> for Thread {
    fn from(thread: loom::thread::Thread) -> Self {
        Thread::Model(thread)
    }
}

#[cfg(loom)]
impl From<std::thread::Thread> for Thread {
    fn from(thread: std::thread::Thread) -> Self {
        Thread::Os(thread)
    }
}

/// Runs loom model `f` with at most `bound` preemptions per execution (unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise), for models with three or more threads whose
/// exhaustive runs take minutes. Lost wake-ups need only a preemption or two to show.
#[cfg(all(test, loom))]
pub(crate) fn model_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound.get_or_insert(bound);
    builder.check(f);
}

/// `std`'s `UnsafeCell` with loom's closure-based access API, so one body serves both.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// The asymmetric store–load barrier pair (`wheel_platform::barrier`): the cheap half runs
/// on every lane push (`shard/lane.rs`), the expensive half (`membarrier`) on the rare side.
/// Under loom, which has no such pair, both halves are full SeqCst fences, the order the pair
/// gives, and the pair is always available.
#[cfg(not(loom))]
pub(crate) use wheel_platform::barrier::{heavy_barrier, heavy_barrier_available, light_barrier};

/// Loom's stand-in for the cheap half of the barrier pair: a full fence.
#[cfg(loom)]
pub(crate) fn light_barrier() {
    fence(Ordering::SeqCst);
}

/// Loom's stand-in for the expensive half of the barrier pair: a full fence.
#[cfg(loom)]
pub(crate) fn heavy_barrier() {
    fence(Ordering::SeqCst);
}

/// Under loom the pair is always there.
#[cfg(loom)]
pub(crate) fn heavy_barrier_available() -> bool {
    true
}
