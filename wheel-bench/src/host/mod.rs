//! The host: facts about the machine and this process that every run reads, whatever system
//! it measures. Nothing here knows about timers.
//!
//! - [`machine`]: cores, CPU model, memory, kernel, and how busy the machine was at start.
//! - [`floor`]: the memory floor, one load that misses every cache.
//! - [`proc`]: resident memory, per-thread CPU time, run-queue wait and steal time.
//! - [`stalls`]: the host stall probe, which tells the VM's stalls from a service's lateness.
//! - [`progress`]: the progress bars.

pub(crate) mod floor;
pub(crate) mod machine;
pub(crate) mod proc;
pub(crate) mod progress;
pub(crate) mod stalls;
