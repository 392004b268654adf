//! The systems under test behind one trait, [`System`], so the runner treats wheel and its
//! peers alike. In-process systems implement the smaller [`Timers`] and share one driver
//! ([`crate::driver`]); Netty runs in a JVM and implements [`System`] itself.

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use wheel_shard::Config;

use crate::options::Options;
use crate::probe::RunHandle;
use crate::progress::Progress;
use crate::result::RunResult;
use crate::scenario::Scenario;
use crate::task::Task;

pub mod binary_heap;
pub mod delay_queue;
pub mod netty;
pub mod tokio_sleep;
pub mod wheel;

/// One run's parameters, the same for every system.
pub struct Plan<'a> {
    pub scenario: Scenario,
    pub timers: u64,
    pub spread: Duration,
    pub producers: usize,
    pub seed: u64,
    pub idle_for: Duration,
    /// wheel's config; peers take their thread counts and tick from it.
    pub config: &'a Config,
    /// Where a system may write build products (Netty's compiled harness).
    pub work_dir: &'a Path,
    pub jvm_warmup_rounds: u32,
    /// Unmeasured rounds of this plan an in-process system runs, on the same instance,
    /// before the measured one.
    pub warmup_rounds: u32,
    pub progress: &'a Progress,
}

impl<'a> Plan<'a> {
    /// The plan of one run of `scenario` at `timers` over `spread`, the rest from `options`.
    pub fn new(
        options: &'a Options,
        scenario: Scenario,
        timers: u64,
        spread: Duration,
        work_dir: &'a Path,
        progress: &'a Progress,
    ) -> Plan<'a> {
        Plan {
            scenario,
            timers,
            spread,
            producers: options.producers,
            seed: options.seed,
            idle_for: options.idle_for,
            config: &options.config,
            work_dir,
            jvm_warmup_rounds: options.jvm_warmup_rounds,
            warmup_rounds: options.warmup_rounds,
            progress,
        }
    }
}

/// A timer system the bench can measure.
pub trait System {
    /// Its name in tables and file names.
    fn name(&self) -> &'static str;
    /// Why it cannot run `plan` on this machine, if it cannot.
    fn skip_reason(&self, plan: &Plan<'_>) -> Option<String>;
    /// Runs `plan` and measures it.
    fn run(&self, plan: &Plan<'_>) -> Result<RunResult, String>;
    /// How the system is driven, for the report.
    fn method(&self) -> &'static str;
}

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

/// An in-process system as a [`System`].
pub struct InProcess<T>(std::marker::PhantomData<T>);

impl<T: Timers> InProcess<T> {
    /// The adapter for `T`.
    pub fn new() -> InProcess<T> {
        InProcess(std::marker::PhantomData)
    }
}

impl<T: Timers> Default for InProcess<T> {
    fn default() -> Self {
        InProcess::new()
    }
}

impl<T: Timers> System for InProcess<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn skip_reason(&self, plan: &Plan<'_>) -> Option<String> {
        T::unsupported(plan.scenario)
    }

    fn run(&self, plan: &Plan<'_>) -> Result<RunResult, String> {
        crate::driver::drive::<T>(plan)
    }

    fn method(&self) -> &'static str {
        T::METHOD
    }
}

/// The peers wheel is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    DelayQueue,
    TokioSleep,
    BinaryHeap,
    Netty,
}

impl Peer {
    /// Every peer, in table order.
    pub const ALL: [Peer; 4] = [
        Peer::DelayQueue,
        Peer::TokioSleep,
        Peer::BinaryHeap,
        Peer::Netty,
    ];

    /// The peer's system.
    pub fn system(self) -> Box<dyn System> {
        match self {
            Peer::DelayQueue => Box::new(InProcess::<delay_queue::DelayQueueTimers>::new()),
            Peer::TokioSleep => Box::new(InProcess::<tokio_sleep::TokioSleepTimers>::new()),
            Peer::BinaryHeap => Box::new(InProcess::<binary_heap::HeapTimers>::new()),
            Peer::Netty => Box::new(netty::Netty),
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Peer::DelayQueue => delay_queue::DelayQueueTimers::NAME,
            Peer::TokioSleep => tokio_sleep::TokioSleepTimers::NAME,
            Peer::BinaryHeap => binary_heap::HeapTimers::NAME,
            Peer::Netty => netty::NAME,
        }
    }
}

impl FromStr for Peer {
    type Err = String;

    fn from_str(s: &str) -> Result<Peer, String> {
        Peer::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Peer::ALL.iter().map(|p| p.name()).collect();
                format!("unknown peer {s:?} (one of {}, or none)", names.join(", "))
            })
    }
}

/// Parses `--peers`: `none`, `all`, or a comma-separated list.
pub fn parse_peers(text: &str) -> Result<Vec<Peer>, String> {
    match text.trim() {
        "none" | "" => Ok(Vec::new()),
        "all" => Ok(Peer::ALL.to_vec()),
        list => {
            let mut peers = Vec::new();
            for name in list.split(',').map(str::trim) {
                let peer: Peer = name.parse()?;
                if !peers.contains(&peer) {
                    peers.push(peer);
                }
            }
            Ok(peers)
        }
    }
}

/// wheel itself, as a [`System`].
pub fn wheel() -> Box<dyn System> {
    Box::new(InProcess::<wheel::WheelTimers>::new())
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

    #[test]
    fn peer_lists_parse() {
        assert!(parse_peers("none").unwrap().is_empty());
        assert_eq!(parse_peers("all").unwrap().len(), 4);
        assert_eq!(
            parse_peers("netty, binary-heap").unwrap(),
            vec![Peer::Netty, Peer::BinaryHeap]
        );
        assert!(parse_peers("kafka").unwrap_err().contains("kafka"));
    }
}
