//! An asymmetric store–load barrier: two halves for two threads that each write one location
//! and then read the other's, and must not both miss the other's write (store buffering).
//! Full fences on both sides forbid that outcome, at the price of a locked instruction on
//! each side every time. Where one side runs often and the other rarely, this pair moves the
//! whole price to the rare side:
//!
//! - the frequent side runs [`light_barrier`] between its write and its read: only the
//!   compiler is kept from reordering the two;
//! - the rare side runs [`heavy_barrier`] between its write and its read: when it returns,
//!   every other thread of the process has executed a full memory barrier since it began
//!   (Linux's `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which interrupts the CPUs running
//!   those threads; a thread not running passed a context switch, itself a full barrier).
//!
//! Of the two writes and the two reads after them, at least one read then sees the other
//! side's write, as with SeqCst on both sides: when the barrier reaches the frequent thread
//! before its read, the read sees the rare side's write; when after its write, the rare side
//! sees it. The pair holds only where [`heavy_barrier_available`] says so; elsewhere (other
//! systems than Linux, a kernel before 4.14, a build with `--cfg wheel_portable`) a caller
//! uses full fences (or another protocol) on both sides.
//!
//! ```
//! use std::sync::atomic::{fence, Ordering};
//! use wheel_platform::barrier::{heavy_barrier, heavy_barrier_available, light_barrier};
//!
//! // The frequent side's half.
//! if heavy_barrier_available() {
//!     light_barrier();
//! } else {
//!     fence(Ordering::SeqCst);
//! }
//! // The rare side's half.
//! if heavy_barrier_available() {
//!     heavy_barrier();
//! } else {
//!     fence(Ordering::SeqCst);
//! }
//! ```

use std::sync::atomic::{compiler_fence, fence, Ordering};

/// The frequent side's half: keeps the compiler from moving the later read before the
/// earlier write; [`heavy_barrier`] on the other thread does the rest. Only where
/// [`heavy_barrier_available`].
#[inline(always)]
pub fn light_barrier() {
    compiler_fence(Ordering::SeqCst);
}

/// The rare side's half: when it returns, every other thread of the process has executed a
/// full memory barrier since it began (see the module doc). Call it only where
/// [`heavy_barrier_available`] said so.
///
/// # Panics
/// Where [`heavy_barrier_available`] is false (no pair exists there to complete).
pub fn heavy_barrier() {
    fence(Ordering::SeqCst);
    #[cfg(all(target_os = "linux", not(any(wheel_portable, miri))))]
    {
        assert!(
            heavy_barrier_available(),
            "no heavy barrier is available here"
        );
        // SAFETY: `membarrier` takes two integers and touches no memory of ours.
        let status =
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) };
        // Registered by `heavy_barrier_available`, the command does not fail; the full fence
        // above is what a failure would leave this thread with in any case.
        debug_assert_eq!(status, 0, "membarrier after registration");
    }
    #[cfg(any(not(target_os = "linux"), wheel_portable, miri))]
    panic!("no heavy barrier is available here");
}

#[cfg(all(target_os = "linux", not(any(wheel_portable, miri))))]
const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
#[cfg(all(target_os = "linux", not(any(wheel_portable, miri))))]
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
#[cfg(all(target_os = "linux", not(any(wheel_portable, miri))))]
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Whether [`heavy_barrier`] works in this process: asked once, and the process registered
/// for it (Linux 4.14 and later, where no seccomp filter forbids the call). Always `false`
/// elsewhere, and in a build with `--cfg wheel_portable` (the crate's doc).
pub fn heavy_barrier_available() -> bool {
    #[cfg(all(target_os = "linux", not(any(wheel_portable, miri))))]
    {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            // SAFETY: `membarrier` takes two integers and touches no memory of ours.
            let commands = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0) };
            if commands < 0 || commands & libc::c_long::from(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0
            {
                return false;
            }
            // SAFETY: as above.
            let registered = unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                    0,
                )
            };
            registered == 0
        })
    }
    #[cfg(any(not(target_os = "linux"), wheel_portable, miri))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Store buffering on two threads, `rounds` times: thread A writes `x`, runs `frequent`,
    /// reads `y`; thread B writes `y`, runs `rare`, reads `x`. Returns the rounds in which both
    /// reads missed the other's write, the outcome the two halves must forbid.
    fn both_missed(rounds: u64, frequent: fn(), rare: fn()) -> u64 {
        let x = Arc::new(AtomicU64::new(0));
        let y = Arc::new(AtomicU64::new(0));
        let seen_by_a = Arc::new(AtomicU64::new(0));
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let a = {
            let (x, y, seen, barrier) = (x.clone(), y.clone(), seen_by_a.clone(), barrier.clone());
            std::thread::spawn(move || {
                for round in 1..=rounds {
                    barrier.wait();
                    x.store(round, Ordering::Relaxed);
                    frequent();
                    seen.store(y.load(Ordering::Relaxed), Ordering::Relaxed);
                    barrier.wait();
                }
            })
        };
        let mut both_missed = 0;
        for round in 1..=rounds {
            barrier.wait();
            y.store(round, Ordering::Relaxed);
            rare();
            let seen_by_b = x.load(Ordering::Relaxed);
            barrier.wait();
            if seen_by_b < round && seen_by_a.load(Ordering::Relaxed) < round {
                both_missed += 1;
            }
        }
        a.join().unwrap();
        both_missed
    }

    /// The real pair on two threads, many rounds ([`both_missed`]). A smoke test: it shows
    /// that `membarrier` registers and runs here and that the outcome does not appear, but
    /// this harness rarely provokes it even without the barriers (0–1 in 200 000 rounds
    /// measured), so the ordering argument is the kernel's contract and `wheel-shard`'s loom
    /// models', not this test's.
    #[test]
    #[cfg(all(target_os = "linux", not(any(wheel_portable, miri))))]
    fn the_pair_runs_and_store_buffering_does_not_show() {
        assert!(heavy_barrier_available(), "membarrier on this machine");
        assert_eq!(both_missed(20_000, light_barrier, heavy_barrier), 0);
    }

    /// Where there is no heavy barrier (elsewhere than Linux, and under `--cfg
    /// wheel_portable`): the pair says so, its rare half refuses to run, and the fallback the
    /// module doc gives, a full fence on both sides, runs the same rounds.
    #[test]
    #[cfg(any(not(target_os = "linux"), wheel_portable, miri))]
    fn without_membarrier_the_pair_is_unavailable_and_full_fences_stand_in() {
        assert!(!heavy_barrier_available());
        assert!(
            std::panic::catch_unwind(heavy_barrier).is_err(),
            "the heavy half panics where it is unavailable"
        );
        let full = || fence(Ordering::SeqCst);
        let rounds = if cfg!(miri) { 20 } else { 20_000 };
        assert_eq!(both_missed(rounds, full, full), 0);
    }
}
