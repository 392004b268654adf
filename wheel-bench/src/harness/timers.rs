//! [`Timers`]: what the driver needs from an in-process timer system. Each peer in
//! [`crate::systems`] implements it; the driver, the producers and the probe are the same for
//! all of them, so the systems differ only in what they do inside these calls.

use std::time::Instant;

use wheel_shard::Config;

use crate::harness::probe::RunHandle;
use crate::harness::scenario::Scenario;
use crate::harness::task::Task;

/// What a cancel or reschedule achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done synchronously (a cancelled task will never run).
    Done,
    /// The timer had already fired (or was firing).
    TooLate,
    /// Handed to the system's own thread; its effect is counted when the run finishes.
    Queued,
}

/// Which threads do a system's timekeeping and which run its callbacks (name prefixes).
#[derive(Clone, Copy, Debug)]
pub struct ThreadRoles {
    pub timer: &'static str,
    /// `None`: callbacks run on the timer threads.
    pub executor: Option<&'static str>,
}

/// What an in-process system counts itself. The counts are running totals over the
/// instance's life, warm-up rounds included: the driver takes the difference of two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnCounts {
    /// Cancels that took effect, for systems whose cancels are [`Outcome::Queued`].
    pub cancelled: Option<u64>,
    /// The system's own count of callbacks run and timers cancelled, if it keeps one; the
    /// driver checks it against the probe's.
    pub counted: Option<(u64, u64)>,
}

impl OwnCounts {
    /// What was counted between `earlier` and these counts.
    pub fn since(self, earlier: OwnCounts) -> OwnCounts {
        let (fired, cancelled) = earlier.counted.unwrap_or((0, 0));
        OwnCounts {
            cancelled: self
                .cancelled
                .map(|c| c.saturating_sub(earlier.cancelled.unwrap_or(0))),
            counted: self
                .counted
                .map(|(f, c)| (f.saturating_sub(fired), c.saturating_sub(cancelled))),
        }
    }
}

/// What an in-process system reports when it stops.
#[derive(Clone, Debug, Default)]
pub struct Finished {
    /// Timers still pending at shutdown.
    pub unfired: u64,
    /// Its own counts at the end, over its whole life.
    pub counts: OwnCounts,
    /// Disagreements between the system's own counters and the probe's, if any.
    pub problems: Vec<String>,
}

/// An in-process timer system, as the shared driver uses it.
pub trait Timers: Sized + Send + Sync + 'static {
    /// A scheduled timer's handle.
    type Id: Send;
    /// Name in tables and file names.
    const NAME: &'static str;
    /// How it is driven, for the report.
    const METHOD: &'static str;

    /// Starts the system (its threads) for one run.
    fn start(config: &Config, run: &RunHandle) -> Result<Self, String>;
    /// Why it cannot run `scenario`, if it cannot.
    fn unsupported(_scenario: Scenario) -> Option<String> {
        None
    }
    /// Schedules `task` to run at `deadline`.
    ///
    /// Every system marks it `#[inline(always)]`, so that the producer's loop hands the task
    /// over in registers, as an application's loop that calls the system directly does (and
    /// as the JIT gives Netty's harness). Across a call the 16-byte task goes through memory,
    /// stored in parts and loaded back whole, and such a load cannot take its bytes from the
    /// stores: it waits until all of the producer's earlier stores (the previous timer's
    /// included) have reached the cache, which the bench would charge to the system
    /// (`docs/performance.md`, "The task built in its record").
    fn schedule_at(&self, deadline: Instant, task: Task) -> Result<Self::Id, String>;
    /// Cancels a timer.
    fn cancel(&self, id: &Self::Id) -> Outcome;
    /// Moves a timer to `deadline` (its task is `task`, for systems that re-create it).
    fn reschedule_at(&self, id: &Self::Id, deadline: Instant, task: Task) -> Outcome;
    /// Timers neither fired nor cancelled yet, if the system can tell (else the driver waits
    /// for the count of callbacks it expects).
    fn outstanding(&self) -> Option<u64> {
        None
    }
    /// Times the system's timer threads woke up, if it counts them.
    fn wakeups(&self) -> Option<u64> {
        None
    }
    /// Its own counts so far (see [`Finished::counts`]).
    fn own_counts(&self) -> OwnCounts {
        OwnCounts::default()
    }
    /// Its threads' names.
    fn threads(&self) -> ThreadRoles;
    /// Stops the system; every callback it started has returned when this returns.
    fn finish(self) -> Finished;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_counts_subtract() {
        let before = OwnCounts {
            cancelled: Some(3),
            counted: Some((10, 3)),
        };
        let after = OwnCounts {
            cancelled: Some(5),
            counted: Some((25, 5)),
        };
        let expected = OwnCounts {
            cancelled: Some(2),
            counted: Some((15, 2)),
        };
        assert_eq!(after.since(before), expected);
        assert_eq!(OwnCounts::default().since(before), OwnCounts::default());
    }
}
