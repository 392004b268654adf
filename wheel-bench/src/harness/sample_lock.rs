//! [`SampleLock`]: the lock around one callback thread's samples.
//!
//! Its thread takes it for every sample it records; the run's owner takes it once a round, to
//! merge or clear the samples. What it costs a callback is charged to whichever system's thread
//! runs the callback, so the side taken on every sample is the cheap one of an asymmetric pair:
//!
//! - the sample's thread ([`SampleLock::write`]) stores "writing", then reads whether the owner
//!   holds the lock, with only the compiler kept from reordering the two: no locked
//!   instruction, whose wait for every earlier store to reach the cache cost a callback more
//!   than the rest of its recording (docs/performance.md);
//! - the owner ([`SampleLock::exclusive`]) stores "held", then has the kernel run a full memory
//!   barrier on every thread of the process (Linux's `membarrier`), then waits until the
//!   sample's thread is not writing.
//!
//! Of the two stores and the two reads after them, at least one read sees the other side's
//! store, as with a full fence on both sides: when the barrier reaches the sample's thread
//! before its read, the read sees "held"; when after its store, the owner sees "writing". So
//! the two never both go ahead. Where `membarrier` is not available, both sides use a full
//! fence (a locked instruction a sample, as a plain lock would).
//!
//! Only one thread may call [`SampleLock::write`] on a lock, the thread whose samples it holds:
//! that is its safety contract.

use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use wheel_platform::barrier;

/// Spins before a waiter yields its CPU to the other side (which may be preempted).
const SPINS_BEFORE_YIELD: u32 = 64;

/// A lock around `T` for one writing thread and a rare owner (see the module doc).
pub(crate) struct SampleLock<T> {
    /// The writing thread is between its store of `true` and its store of `false`.
    writing: AtomicBool,
    /// The owner holds the lock, or is about to.
    held: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is reached only through `write` (one thread, the lock's own) and `exclusive`,
// and the protocol in the module doc keeps the two apart; each side's Acquire sees the other's
// Release that ended its access. So sharing the lock shares `T` as a `Mutex` does, which needs
// `T: Send`.
unsafe impl<T: Send> Sync for SampleLock<T> {}

impl<T> SampleLock<T> {
    pub(crate) fn new(data: T) -> Self {
        SampleLock {
            writing: AtomicBool::new(false),
            held: AtomicBool::new(false),
            data: UnsafeCell::new(data),
        }
    }

    /// Runs `f` on the data for the lock's own thread, once the owner does not hold it.
    ///
    /// # Safety
    /// No other thread calls `write` on this lock, ever: two writers would both find the
    /// owner away and reach the data at once.
    pub(crate) unsafe fn write<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut spins = 0;
        loop {
            self.writing.store(true, Ordering::Relaxed);
            light_barrier();
            if !self.held.load(Ordering::Acquire) {
                break;
            }
            self.writing.store(false, Ordering::Release);
            while self.held.load(Ordering::Relaxed) {
                wait(&mut spins);
            }
        }
        let _done = Release(&self.writing);
        // SAFETY: `writing` is set and the owner does not hold the lock, so `exclusive` waits
        // until `_done` drops, after `f` is done with the reference; no other thread calls
        // `write` (the caller's promise).
        f(unsafe { &mut *self.data.get() })
    }

    /// Runs `f` on the data while the lock's thread is not writing, for the run's owner.
    pub(crate) fn exclusive<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut spins = 0;
        while self
            .held
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            wait(&mut spins);
        }
        let _done = Release(&self.held);
        heavy_barrier();
        while self.writing.load(Ordering::Acquire) {
            wait(&mut spins);
        }
        // SAFETY: `held` is set, and after the barrier the writing thread either is seen
        // writing (waited out above) or sees `held` and stays out until `_done` drops.
        f(unsafe { &mut *self.data.get() })
    }
}

/// Clears its flag with Release when dropped, also when `f` unwinds.
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn wait(spins: &mut u32) {
    *spins += 1;
    if (*spins).is_multiple_of(SPINS_BEFORE_YIELD) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// The writing side's half of the pair: the compiler's order where the owner's barrier does
/// the rest, a full fence otherwise.
#[inline(always)]
fn light_barrier() {
    if barrier::heavy_barrier_available() {
        barrier::light_barrier();
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The owner's half: a full memory barrier on every thread of the process, where that is
/// available; a full fence otherwise, matching the writing side's.
fn heavy_barrier() {
    if barrier::heavy_barrier_available() {
        barrier::heavy_barrier();
    } else {
        fence(Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Increments that are not atomic themselves come out exact when the lock's thread and an
    /// owner both make them, many times each, at once.
    #[test]
    fn the_writer_and_the_owner_exclude_each_other() {
        const WRITES: u64 = 1_000_000;
        const OWNER_TURNS: u64 = 2_000;
        let lock = Arc::new(SampleLock::new(0u64));
        let writer = {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                for _ in 0..WRITES {
                    // SAFETY: this thread is the lock's only writer.
                    unsafe { lock.write(|count| *count += 1) };
                }
            })
        };
        for _ in 0..OWNER_TURNS {
            lock.exclusive(|count| *count += 1);
        }
        writer.join().unwrap();
        assert_eq!(lock.exclusive(|count| *count), WRITES + OWNER_TURNS);
    }

    #[test]
    #[cfg(all(target_os = "linux", not(wheel_portable)))]
    fn this_machine_takes_the_asymmetric_path() {
        assert!(barrier::heavy_barrier_available());
    }

    /// `--cfg wheel_portable` (no membarrier): the lock's both sides take full fences.
    #[test]
    #[cfg(wheel_portable)]
    fn the_portable_build_takes_the_full_fences() {
        assert!(!barrier::heavy_barrier_available());
    }

    /// A panic inside frees the lock, on either side.
    #[test]
    fn a_panic_inside_frees_the_lock() {
        let lock = SampleLock::new(1);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: this thread is the lock's only writer.
            unsafe { lock.write(|_| panic!("inside")) };
        }));
        assert!(caught.is_err());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lock.exclusive(|_| panic!("inside"));
        }));
        assert!(caught.is_err());
        // SAFETY: this thread is the lock's only writer.
        assert_eq!(unsafe { lock.write(|value| *value) }, 1);
        assert_eq!(lock.exclusive(|value| *value), 1);
    }
}
