//! [`Task`]: the callback every system runs, the same for all of them.

use std::time::{Duration, Instant};

use crate::harness::probe::{self, nanos_since};

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
    /// Timer `index` with the requested `deadline` of the current run (`epoch` is the run's
    /// time origin, see [`probe::RunHandle::epoch`]).
    pub fn new(index: u32, deadline: Instant, epoch: Instant, blocks: bool) -> Task {
        Task {
            deadline_ns: nanos_since(epoch, deadline),
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
