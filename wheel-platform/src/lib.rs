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

pub mod barrier;
pub mod hint;
pub mod pages;
