//! What the wheel's crates ask of the CPU and the operating system, written once: the bottom
//! layer of the workspace, below `wheel-core` (which maps its wheel's memory), `wheel-shard`
//! (whose lanes, records and rings use all three modules) and `wheel-bench` (whose recording
//! callbacks use the hints and the barrier).
//!
//! - [`hint`]: start loading a cache line ahead of a read or a write.
//! - [`barrier`]: an asymmetric store–load barrier, a compiler fence on the side that runs it
//!   on every operation and Linux's `membarrier` on the side that runs it rarely.
//! - [`pages`]: transparent huge pages for large arrays, and pages made resident ahead of use.
//!
//! Each function says what it does where the platform lacks the feature: a hint or an advice
//! does nothing, and [`barrier::heavy_barrier_available`] says `false`.
//!
//! # The portable switch
//!
//! Built with `--cfg wheel_portable` (`RUSTFLAGS="--cfg wheel_portable"`, as `cargo xtask
//! test-portable` does), the crate takes the paths of a platform that lacks those features on
//! any platform, Linux included: [`barrier::heavy_barrier_available`] says `false` (so callers
//! use full fences on both sides), and the page advice does nothing
//! ([`pages::kernel_has_huge_pages`] and [`pages::populate_write_known`] say `false`).
//! `wheel-shard` reads the same cfg and starts deadlines from `Instant::now()` instead of its
//! time-stamp-counter clock. So the test suite runs on Linux the fallbacks that builds for
//! other platforms take: macOS and Windows have neither membarrier nor page advice, and only
//! x86_64 Linux has the counter clock. The prefetch hints stay: a hint changes no result.

pub mod barrier;
pub mod hint;
pub mod pages;
