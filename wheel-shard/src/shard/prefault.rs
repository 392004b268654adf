//! [`Prefault`]: the memory a shard's wheel grows into next, posted by its tick thread for an
//! idle worker to make resident before the wheel first writes it.
//!
//! Why: the wheel keeps its references in 1 KiB chunks from a pool that grows into fresh
//! memory whenever the shard holds more timers than it ever did (a first burst, or a burst
//! past the earlier peak). The first write to a fresh page faults: the kernel zeroes a page
//! (2 MiB with transparent huge pages) and, on a VM whose host has not backed that memory yet,
//! the host faults too. On the tick thread such a fault delays every timer of its shards: one
//! traced on a virtual machine took 5.6 ms (docs/performance.md). The records' table has the
//! same problem and idle workers write its records ahead (`TimerTable::grow`); the wheel's
//! chunks belong to the tick thread, so a worker may not write them. Instead the tick thread
//! posts the address ranges its wheel takes next (`Wheel::untouched_ahead`, [`AHEAD_BYTES`]
//! of them), and a worker asks the kernel to populate them with
//! `madvise(MADV_POPULATE_WRITE)`: the pages become resident and writable as a write fault
//! would make them, and their contents (zeros, which the tick thread may write at any moment)
//! stay as they are, so the two threads never race on a byte.
//!
//! Ground rules:
//! - The ranges belong to a wheel that lives on the tick thread. The worker holds the lock
//!   while the kernel populates them, and the tick thread takes the lock and clears the ranges
//!   before it drops its wheel ([`Prefault::retire`]): no populate runs on memory that has
//!   been freed.
//! - The tick thread never waits for the lock while the service runs: it posts with
//!   `try_lock`, and a busy lock means it posts on a later pass.
//! - Where the kernel lacks `MADV_POPULATE_WRITE` (Linux before 5.14, or another system),
//!   nothing is populated, and the tick thread faults the pages in as it writes them.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// Bytes of the wheel's next fresh memory posted at a time: two huge pages, which the tick
/// thread fills in about 30 ms at the fastest rate it takes in timers (10 M/s of 8-byte
/// references, in chunks). It is also how far resident memory may run ahead of what the wheel
/// reports as allocated.
pub(crate) const AHEAD_BYTES: usize = 4 << 20;

/// The address ranges a shard's tick thread posted: none, or where its wheel grows next.
#[derive(Debug, Default)]
pub(crate) struct Prefault {
    posted: Mutex<Vec<Range<usize>>>,
    /// Posts populated so far.
    populated: AtomicU64,
}

impl Prefault {
    /// Tick thread: posts `ranges` (memory of its own wheel, as `Wheel::untouched_ahead` names
    /// it), replacing what was posted before; `false` when a worker holds the lock, and
    /// nothing changed.
    pub(crate) fn post(&self, ranges: Vec<Range<usize>>) -> bool {
        let Some(mut posted) = self.try_lock() else {
            return false;
        };
        *posted = ranges;
        true
    }

    /// Worker: makes the posted ranges resident and clears them; `true` when there were any.
    /// The lock is held until the kernel is done, so the tick thread cannot free them
    /// meanwhile ([`Prefault::retire`]).
    pub(crate) fn populate(&self) -> bool {
        let Some(mut posted) = self.try_lock() else {
            return false;
        };
        if posted.iter().all(Range::is_empty) {
            return false;
        }
        for range in std::mem::take(&mut *posted) {
            wheel_platform::pages::populate_write(range);
        }
        self.populated.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Posts populated so far (for the service's tests, which do not run under loom).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn populated(&self) -> u64 {
        self.populated.load(Ordering::Relaxed)
    }

    /// Tick thread, before it drops its wheel: clears what it posted, waiting for a populate
    /// in progress to end.
    pub(crate) fn retire(&self) {
        self.lock().clear();
    }

    /// Whether ranges wait to be populated.
    #[cfg(test)]
    pub(crate) fn is_posted(&self) -> bool {
        !self.lock().iter().all(Range::is_empty)
    }

    /// The posted ranges, waiting for the lock. Nothing panics while it is held (a populate
    /// only calls the kernel), so a poisoned lock still guards consistent ranges.
    fn lock(&self) -> MutexGuard<'_, Vec<Range<usize>>> {
        self.posted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The posted ranges, unless another thread holds the lock (see [`Prefault::lock`]).
    fn try_lock(&self) -> Option<MutexGuard<'_, Vec<Range<usize>>>> {
        match self.posted.try_lock() {
            Ok(posted) => Some(posted),
            Err(TryLockError::WouldBlock) => None,
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_posted_range_is_populated_once_and_keeps_its_contents() {
        let mut memory = vec![0u8; 3 * 4096 + 100];
        memory[5000] = 7;
        let start = memory.as_ptr() as usize + 10;
        let prefault = Prefault::default();
        assert!(!prefault.populate(), "nothing posted");
        assert!(prefault.post(std::iter::once(start..start + 3 * 4096).collect()));
        assert!(prefault.is_posted());
        assert!(prefault.populate());
        assert!(!prefault.is_posted(), "cleared once populated");
        assert!(!prefault.populate());
        assert_eq!(memory[5000], 7, "contents kept");
        assert_eq!(memory.iter().map(|&b| b as usize).sum::<usize>(), 7);
    }

    #[test]
    fn retiring_clears_what_was_posted_and_a_busy_lock_refuses_a_post() {
        let prefault = Prefault::default();
        let memory = vec![0u8; 4096];
        let start = memory.as_ptr() as usize;
        assert!(prefault.post(std::iter::once(start..start + 4096).collect()));
        prefault.retire();
        assert!(!prefault.is_posted());
        let held = prefault.posted.lock().unwrap();
        assert!(
            !prefault.post(std::iter::once(start..start + 4096).collect()),
            "the tick thread does not wait"
        );
        assert!(!prefault.populate(), "nor does a worker");
        drop(held);
        assert!(!prefault.is_posted());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn populating_makes_fresh_pages_resident() {
        // A fresh anonymous mapping, none of its pages touched.
        let len = 64 * wheel_platform::pages::page_size();
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let resident = || {
            let mut pages = vec![0u8; 64];
            // SAFETY: `map` is a mapping of `len` bytes and `pages` has a byte per page.
            let done = unsafe { libc::mincore(map, len, pages.as_mut_ptr()) };
            assert_eq!(done, 0);
            pages.iter().filter(|&&p| p & 1 == 1).count()
        };
        assert_eq!(resident(), 0);
        let prefault = Prefault::default();
        let start = map as usize;
        prefault.post(std::iter::once(start..start + len / 2).collect());
        prefault.populate();
        let now = resident();
        // SAFETY: the mapping is ours and no reference to it remains.
        assert_eq!(unsafe { libc::munmap(map, len) }, 0);
        if !wheel_platform::pages::populate_write_known() {
            // A kernel before 5.14: the request is refused, nothing is populated, and it is not
            // made again.
            assert_eq!(now, 0);
        } else {
            assert!(now >= 32, "the posted half is resident: {now} of 64 pages");
        }
    }
}
