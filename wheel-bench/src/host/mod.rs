//! The host: facts about the machine and this process that every run reads, whatever system
//! it measures. Nothing here knows about timers.
//!
//! - [`machine`]: cores, CPU model, memory, kernel, and how busy the machine was at start.
//! - [`floor`]: the memory floor, one load that misses every cache.
//! - [`proc`]: resident memory, per-thread CPU time, run-queue wait and steal time.
//! - [`stalls`]: the host stall probe, which tells the VM's stalls from a service's lateness.
//! - [`wake_floor`]: the price of a sleep and a wake-up, which tells the VM's share of a
//!   service's CPU from its own work.
//! - [`progress`]: the progress bars.

pub(crate) mod floor;
pub(crate) mod machine;
pub(crate) mod proc;
pub(crate) mod progress;
pub(crate) mod stalls;
pub mod wake_floor;
