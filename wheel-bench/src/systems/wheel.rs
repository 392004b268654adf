//! wheel itself, through `wheel_shard`'s public API only.

use std::time::Instant;

use wheel_shard::{Config, Stats, TimerId, TimerService};

use crate::harness::probe::RunHandle;
use crate::harness::task::Task;
use crate::harness::timers::{Finished, Outcome, OwnCounts, ThreadRoles, Timers};

/// A [`TimerService`] built from the run's config.
pub struct WheelTimers {
    service: TimerService,
}

impl Timers for WheelTimers {
    type Id = TimerId;
    const NAME: &'static str = "wheel";
    const METHOD: &'static str = "TimerService::schedule_at / cancel / reschedule from the producer threads; callbacks on its executor";

    fn start(config: &Config, _run: &RunHandle) -> Result<WheelTimers, String> {
        let service = TimerService::new(config.clone()).map_err(|e| e.to_string())?;
        Ok(WheelTimers { service })
    }

    #[inline(always)]
    fn schedule_at(&self, deadline: Instant, task: Task) -> Result<TimerId, String> {
        self.service
            .schedule_at(deadline, move || task.run())
            .map_err(|e| e.to_string())
    }

    fn cancel(&self, id: &TimerId) -> Outcome {
        if self.service.cancel(*id) {
            Outcome::Done
        } else {
            Outcome::TooLate
        }
    }

    fn reschedule_at(&self, id: &TimerId, deadline: Instant, _task: Task) -> Outcome {
        let delay = deadline.saturating_duration_since(Instant::now());
        if self.service.reschedule(*id, delay) {
            Outcome::Done
        } else {
            Outcome::TooLate
        }
    }

    /// Timers in the rings and wheels: 0 once every timer of a round has been handed to the
    /// executor or cancelled (the driver also waits for their callbacks' samples).
    fn outstanding(&self) -> Option<u64> {
        Some(self.service.pending() as u64)
    }

    fn wakeups(&self) -> Option<u64> {
        Some(self.service.stats().wakeups)
    }

    fn own_counts(&self) -> OwnCounts {
        own_counts(&self.service.stats())
    }

    fn threads(&self) -> ThreadRoles {
        ThreadRoles {
            timer: "wheel-tick-",
            executor: Some("wheel-exec-"),
        }
    }

    fn finish(self) -> Finished {
        let unfired = self.service.shutdown();
        let stats = self.service.stats();
        let mut problems = Vec::new();
        if stats.pending != 0 {
            problems.push(format!(
                "Stats::pending is {} after shutdown",
                stats.pending
            ));
        }
        if stats.panicked != 0 {
            problems.push(format!("{} callbacks panicked", stats.panicked));
        }
        Finished {
            unfired: unfired.len() as u64,
            counts: own_counts(&stats),
            problems,
        }
    }
}

/// `Stats::fired` and `Stats::cancelled`, running totals over the service's life.
fn own_counts(stats: &Stats) -> OwnCounts {
    OwnCounts {
        cancelled: None,
        counted: Some((stats.fired, stats.cancelled)),
    }
}
