//! [`Task`]: the callback every system runs, the same for all of them.

use std::time::{Duration, Instant};

use crate::harness::probe;

/// How long a blocking callback of the `slow` scenario blocks.
pub const SLOW_BLOCK: Duration = Duration::from_millis(10);

/// One timer's callback: records its lateness (start minus the requested deadline) in the
/// running [`probe`], and in the `slow` scenario sometimes blocks. 16 bytes, `Copy`, so every
/// system carries the same payload.
#[derive(Clone, Copy, Debug)]
pub struct Task {
    deadline_ns: u64,
    index: u32,
    blocks: bool,
}

impl Task {
    /// Timer `index` with the requested deadline `deadline_ns` nanoseconds after the current
    /// run's epoch (see [`probe::RunHandle::epoch`]; producers get it by an addition to their
    /// clock reading, not by subtracting the epoch from each deadline).
    pub fn new(index: u32, deadline_ns: u64, blocks: bool) -> Task {
        Task {
            deadline_ns,
            index,
            blocks,
        }
    }

    /// The timer's index in its run.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Runs the callback: the clock is read first thing, then the sample is recorded.
    pub fn run(self) {
        let start = Instant::now();
        probe::record(start, self.index, self.deadline_ns, self.blocks);
        if self.blocks {
            std::thread::sleep(SLOW_BLOCK);
        }
    }
}
