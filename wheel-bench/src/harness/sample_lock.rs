//! [`SampleLock`]: the lock around one callback thread's samples.
//!
//! Its thread takes it for every sample it records; the run's owner takes it once a round, to
//! merge or clear the samples. So it is almost never contended, and what it costs a callback is
//! its locked instructions: `std::sync::Mutex` pays two on x86 (the lock's CAS and the unlock's
//! swap, which tells whether a sleeper needs waking), charged to whichever system's thread runs
//! the callback (docs/performance.md has what that costs). Nobody sleeps on this lock, so its
//! unlock is a plain release store: one locked instruction a sample.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Spins before a waiter yields its CPU to the holder (which may be preempted).
const SPINS_BEFORE_YIELD: u32 = 64;

/// A spin lock around `T` (see the module doc).
pub(crate) struct SampleLock<T> {
    locked: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is reached only through `with`, which holds the lock: one thread at a time,
// with the Acquire that took the lock seeing the Release that freed it. So sharing the lock
// shares `T` as a `Mutex` does, which needs `T: Send`.
unsafe impl<T: Send> Sync for SampleLock<T> {}

impl<T> SampleLock<T> {
    pub(crate) fn new(data: T) -> Self {
        SampleLock {
            locked: AtomicBool::new(false),
            data: UnsafeCell::new(data),
        }
    }

    /// Runs `f` on the data with the lock held; the lock is freed when `f` returns or unwinds.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.lock();
        let _unlock = Unlock(&self.locked);
        // SAFETY: the lock is held until `_unlock` drops, after `f` is done with the reference,
        // so no other `with` reaches `data` meanwhile.
        f(unsafe { &mut *self.data.get() })
    }

    fn lock(&self) {
        let mut spins = 0;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.locked.load(Ordering::Relaxed) {
                spins += 1;
                if spins % SPINS_BEFORE_YIELD == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

struct Unlock<'a>(&'a AtomicBool);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Increments that are not atomic themselves come out exact when every one is under the
    /// lock, from several threads at once.
    #[test]
    fn the_lock_excludes() {
        const THREADS: u64 = 4;
        const EACH: u64 = 100_000;
        let lock = Arc::new(SampleLock::new(0u64));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let lock = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..EACH {
                        lock.with(|count| *count += 1);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(lock.with(|count| *count), THREADS * EACH);
    }

    /// A panic inside frees the lock.
    #[test]
    fn a_panic_inside_frees_the_lock() {
        let lock = SampleLock::new(1);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lock.with(|_| panic!("inside"));
        }));
        assert!(caught.is_err());
        assert_eq!(lock.with(|value| *value), 1);
    }
}
