//! [`TimerId`] and [`Unfired`]: what callers hold of a timer.

use std::fmt;
use std::time::Instant;

use crate::job::BoxedJob;

/// Names one scheduled timer: its shard, its slot in that shard's table, and the slot's
/// generation when it was scheduled. 12 bytes, `Copy`; an id outlives its timer harmlessly:
/// once the timer ended, every call with the id reports that (`cancel` → `false`), even after
/// the slot holds a newer timer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId {
    shard: u32,
    slot: u32,
    gen: u32,
}

impl TimerId {
    pub(crate) fn new(shard: usize, slot: u32, gen: u32) -> Self {
        TimerId {
            shard: shard as u32,
            slot,
            gen,
        }
    }

    /// The shard that owns the timer.
    pub fn shard(&self) -> usize {
        self.shard as usize
    }

    pub(crate) fn slot(&self) -> u32 {
        self.slot
    }

    pub(crate) fn gen(&self) -> u32 {
        self.gen
    }
}

impl fmt::Debug for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimerId({}:{}v{})", self.shard, self.slot, self.gen)
    }
}

/// A timer that had not fired when the service shut down, handed back to the caller.
pub struct Unfired {
    /// The id `schedule` returned for it.
    pub id: TimerId,
    /// When it was due (a deadline beyond what `Instant` can show is pinned a century out).
    pub deadline: Instant,
    pub(crate) job: BoxedJob,
}

impl Unfired {
    /// Runs the callback now, on this thread (a repeating timer runs once).
    pub fn run(mut self) {
        self.job.run();
    }
}

impl fmt::Debug for Unfired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unfired")
            .field("id", &self.id)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}
