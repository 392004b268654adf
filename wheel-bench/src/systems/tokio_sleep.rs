//! Peer: one tokio task per timer, `sleep_until(deadline)` then the callback, on a
//! multi-thread runtime with as many workers as wheel has executor threads. Producers spawn
//! through the runtime's handle; cancel is `AbortHandle::abort` (asynchronous: whether the
//! task had already run is not known to the caller).

use std::time::Instant;

use tokio::runtime::Runtime;
use tokio::task::AbortHandle;
use wheel_shard::Config;

use crate::harness::probe::RunHandle;
use crate::harness::scenario::Scenario;
use crate::harness::task::Task;
use crate::harness::timers::{Finished, Outcome, ThreadRoles, Timers};

/// The runtime whose tasks are the timers.
pub struct TokioSleepTimers {
    runtime: Runtime,
}

impl Timers for TokioSleepTimers {
    type Id = AbortHandle;
    const NAME: &'static str = "tokio-sleep";
    const METHOD: &'static str = "one task per timer, tokio::time::sleep_until then the callback, multi-thread runtime (workers = executor threads); spawned from the producer threads; cancel = abort";

    fn start(config: &Config, _run: &RunHandle) -> Result<TokioSleepTimers, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.executor_threads)
            .thread_name("tokio-sleep")
            .enable_time()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(TokioSleepTimers { runtime })
    }

    fn unsupported(scenario: Scenario) -> Option<String> {
        (scenario == Scenario::Heartbeat).then(|| {
            "a spawned sleep task cannot be moved from outside: heartbeat needs a reschedule"
                .to_string()
        })
    }

    #[inline(always)]
    fn schedule_at(&self, deadline: Instant, task: Task) -> Result<AbortHandle, String> {
        let deadline = tokio::time::Instant::from_std(deadline);
        let handle = self.runtime.spawn(async move {
            tokio::time::sleep_until(deadline).await;
            task.run();
        });
        Ok(handle.abort_handle())
    }

    fn cancel(&self, id: &AbortHandle) -> Outcome {
        id.abort();
        Outcome::Queued
    }

    fn reschedule_at(&self, _id: &AbortHandle, _deadline: Instant, _task: Task) -> Outcome {
        Outcome::TooLate
    }

    fn outstanding(&self) -> Option<u64> {
        Some(self.runtime.metrics().num_alive_tasks() as u64)
    }

    fn threads(&self) -> ThreadRoles {
        ThreadRoles {
            timer: "tokio-sleep",
            executor: None,
        }
    }

    fn finish(self) -> Finished {
        let unfired = self.runtime.metrics().num_alive_tasks() as u64;
        self.runtime
            .shutdown_timeout(std::time::Duration::from_secs(10));
        Finished {
            unfired,
            ..Finished::default()
        }
    }
}
