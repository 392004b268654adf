//! [`RunResult`]: everything one run of one system measured (the rows of every table and of
//! results.json), and [`Skipped`]: a run that did not happen. The harness and the Netty peer
//! fill them in; [`crate::report`] reads them.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::harness::histogram::Percentiles;
use crate::harness::scenario::Scenario;
use crate::host::stalls::HostStalls;
use crate::host::wake_floor::WakePrices;

/// One system's run of one scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    pub system: String,
    pub scenario: Scenario,
    /// Timers the run was asked to schedule.
    pub timers: u64,
    #[serde(with = "duration_text")]
    pub spread: Duration,
    pub producers: usize,
    pub counts: Counts,
    pub throughput: Throughput,
    /// Lateness of every callback that does not block.
    pub lateness: Percentiles,
    /// Lateness of the blocking callbacks (`slow` scenario).
    pub blocked_lateness: Option<Percentiles>,
    pub memory: Option<MemoryFigures>,
    pub cpu: CpuFigures,
    /// Tick-thread wake-ups during the run, where the system counts them.
    pub wakeups: Option<u64>,
    /// What the host stall probe saw during the measured round (`None`: it did not watch).
    #[serde(default)]
    pub host_stalls: Option<HostStalls>,
    /// Wall time from the first schedule to the last callback.
    pub wall_secs: f64,
    /// Why the counts do not add up, if they do not (empty: all good).
    pub problems: Vec<String>,
    /// How this run was measured, where it differs from the others.
    pub notes: Vec<String>,
    #[serde(skip)]
    pub histogram: Option<Histogram<u64>>,
    #[serde(skip)]
    pub blocked_histogram: Option<Histogram<u64>>,
}

/// What happened to the timers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Accepted by the system.
    pub scheduled: u64,
    /// Refused by the system.
    pub rejected: u64,
    /// Distinct timers whose callback ran.
    pub fired: u64,
    /// Timers whose cancel took effect (they never ran).
    pub cancelled: u64,
    /// Cancel calls made.
    pub cancel_calls: u64,
    /// Reschedule calls that moved a pending timer.
    pub rescheduled: u64,
    /// Reschedule calls made.
    pub reschedule_calls: u64,
    /// Still pending when the system stopped.
    pub unfired: u64,
    /// Callback runs beyond the first for one timer.
    pub duplicates: u64,
    /// Callbacks that started before their requested deadline.
    pub early: u64,
}

impl Counts {
    /// True when every timer is accounted for exactly once and none ran early.
    pub fn add_up(&self, timers: u64) -> bool {
        self.scheduled + self.rejected == timers
            && self.fired + self.cancelled + self.unfired == self.scheduled
            && self.duplicates == 0
            && self.early == 0
    }
}

/// Operations per second, each timed on the producer threads (summed over producers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub schedule_per_sec: Option<f64>,
    pub cancel_per_sec: Option<f64>,
    pub reschedule_per_sec: Option<f64>,
}

/// Resident memory around the moment every timer was scheduled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryFigures {
    /// RSS after the system started, before the first timer.
    pub rss_before: u64,
    /// RSS right after the last timer was scheduled.
    pub rss_scheduled: u64,
    /// Timers pending at that moment (scheduled minus fired so far).
    pub pending_then: u64,
    /// Peak RSS of the run (VmHWM, reset at its start).
    pub peak_rss: u64,
    /// `(rss_scheduled - rss_before) / scheduled`.
    pub bytes_per_timer: f64,
}

/// CPU time of the system's threads during the measured round, by thread role, in total and
/// per timer scheduled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuFigures {
    /// Threads that keep time (tick threads, timer threads, runtime workers).
    pub timer_ns: u64,
    /// Threads that run callbacks, when they are not the timer threads.
    pub executor_ns: Option<u64>,
    /// The producer threads, while they schedule (and cancel or reschedule, as the scenario
    /// says), where their CPU time could be read.
    #[serde(default)]
    pub producer_ns: Option<u64>,
    /// How the threads were told apart.
    pub threads: String,
    /// `producer_ns` per timer scheduled.
    #[serde(default)]
    pub producer_ns_per_timer: Option<f64>,
    /// `timer_ns` per timer scheduled (for systems without an executor, callbacks included).
    #[serde(default)]
    pub tick_ns_per_timer: Option<f64>,
    /// `executor_ns` per timer scheduled (`None` when callbacks run on the timer threads).
    #[serde(default)]
    pub executor_ns_per_timer: Option<f64>,
    /// Times the timer threads slept (voluntary context switches), where the kernel counts
    /// them.
    #[serde(default)]
    pub timer_sleeps: Option<u64>,
    /// Times the executor threads slept, as `timer_sleeps`.
    #[serde(default)]
    pub executor_sleeps: Option<u64>,
    /// What the machine charges for those sleeps and the wake-ups that end them, per timer
    /// scheduled (see [`CpuFigures::price_sleeps`]): the part of `tick_ns_per_timer +
    /// executor_ns_per_timer` that is the price of sleeping on this machine, not work.
    #[serde(default)]
    pub wake_floor_ns_per_timer: Option<f64>,
}

impl CpuFigures {
    /// Fills the per-timer figures from the totals, for `timers` scheduled.
    pub fn set_per_timer(&mut self, timers: u64) {
        self.producer_ns_per_timer = self.producer_ns.and_then(|ns| per_timer(ns, timers));
        self.tick_ns_per_timer = per_timer(self.timer_ns, timers);
        self.executor_ns_per_timer = self.executor_ns.and_then(|ns| per_timer(ns, timers));
    }

    /// Prices the round's sleeps at this machine's `prices`, for `timers` scheduled: each
    /// sleep of a timer thread as a timed sleep (a tick thread sleeps until its next tick),
    /// each of an executor thread as a wake-up of it by another thread, both sides. An
    /// estimate: a sleep counted here can also be a wait for a lock, and an executor woken by
    /// a timeout, not a thread, is charged a wake-up's price instead of a timed sleep's.
    pub fn price_sleeps(&mut self, prices: Option<&WakePrices>, timers: u64) {
        self.wake_floor_ns_per_timer = prices.zip(self.timer_sleeps).and_then(|(p, sleeps)| {
            let executor = match self.executor_ns {
                None => 0.0,
                Some(_) => self.executor_sleeps? as f64 * p.wake_ns(),
            };
            let ns = sleeps as f64 * p.timed_sleep_ns + executor;
            (timers > 0).then(|| ns.max(0.0) / timers as f64)
        });
    }
}

/// `ns` spread over `timers` (`None` when there were none).
fn per_timer(ns: u64, timers: u64) -> Option<f64> {
    (timers > 0).then(|| ns as f64 / timers as f64)
}

/// A run that did not happen, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub system: String,
    pub scenario: Scenario,
    pub reason: String,
}

impl RunResult {
    /// A result with only its identity filled in.
    pub fn new(
        system: &str,
        scenario: Scenario,
        timers: u64,
        spread: Duration,
        producers: usize,
    ) -> RunResult {
        RunResult {
            system: system.to_string(),
            scenario,
            timers,
            spread,
            producers,
            counts: Counts::default(),
            throughput: Throughput::default(),
            lateness: Percentiles::default(),
            blocked_lateness: None,
            memory: None,
            cpu: CpuFigures::default(),
            wakeups: None,
            host_stalls: None,
            wall_secs: 0.0,
            problems: Vec::new(),
            notes: Vec::new(),
            histogram: None,
            blocked_histogram: None,
        }
    }

    /// Sets the lateness histograms and their percentiles.
    pub fn set_lateness(&mut self, lateness: Histogram<u64>, blocked: Option<Histogram<u64>>) {
        self.lateness = Percentiles::of(&lateness);
        self.blocked_lateness = blocked.as_ref().map(Percentiles::of);
        self.histogram = Some(lateness);
        self.blocked_histogram = blocked;
    }

    /// Adds a problem unless the counts add up.
    pub fn check_counts(&mut self) {
        if self.scenario != Scenario::Idle && !self.counts.add_up(self.timers) {
            let c = self.counts;
            self.problems.push(format!(
                "counts do not add up: {} timers, {} scheduled + {} rejected; {} fired + {} cancelled + {} unfired; {} duplicate runs, {} early",
                self.timers, c.scheduled, c.rejected, c.fired, c.cancelled, c.unfired, c.duplicates, c.early
            ));
        }
    }
}

/// Serde for `Duration` as humantime text ("10s", "500ms").
pub(crate) mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `d` as "10s".
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    /// Reads "10s" back.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_only_when_every_timer_is_accounted_for() {
        let good = Counts {
            scheduled: 10,
            fired: 7,
            cancelled: 2,
            unfired: 1,
            ..Counts::default()
        };
        assert!(good.add_up(10));
        assert!(!Counts {
            duplicates: 1,
            ..good
        }
        .add_up(10));
        assert!(!Counts { early: 1, ..good }.add_up(10));
        assert!(!Counts { fired: 6, ..good }.add_up(10));
        let mut run = RunResult::new("x", Scenario::Fire, 10, Duration::from_secs(1), 1);
        run.counts = Counts { fired: 6, ..good };
        run.check_counts();
        assert_eq!(run.problems.len(), 1);
    }

    #[test]
    fn cpu_per_timer_divides_each_role_by_the_timers_scheduled() {
        let mut cpu = CpuFigures {
            timer_ns: 3_000,
            executor_ns: Some(5_000),
            producer_ns: Some(1_000),
            ..CpuFigures::default()
        };
        cpu.set_per_timer(10);
        assert_eq!(
            (
                cpu.producer_ns_per_timer,
                cpu.tick_ns_per_timer,
                cpu.executor_ns_per_timer
            ),
            (Some(100.0), Some(300.0), Some(500.0))
        );
        let mut inline = CpuFigures {
            timer_ns: 3_000,
            ..CpuFigures::default()
        };
        inline.set_per_timer(10);
        assert_eq!(inline.tick_ns_per_timer, Some(300.0));
        assert_eq!(
            (inline.producer_ns_per_timer, inline.executor_ns_per_timer),
            (None, None)
        );
        cpu.set_per_timer(0);
        assert_eq!(
            cpu.tick_ns_per_timer, None,
            "idle: no timers, no per-timer cost"
        );
    }

    #[test]
    fn sleeps_are_priced_by_role() {
        let prices = WakePrices {
            timed_sleep_ns: 50_000.0,
            waker_ns: 20_000.0,
            wakee_ns: 15_000.0,
            across_cpus: true,
        };
        // 1 000 ticks' sleeps and 500 workers' wake-ups over 1 M timers: 50 + 17.5 ns.
        let mut cpu = CpuFigures {
            executor_ns: Some(1),
            timer_sleeps: Some(1_000),
            executor_sleeps: Some(500),
            ..CpuFigures::default()
        };
        cpu.price_sleeps(Some(&prices), 1_000_000);
        assert_eq!(cpu.wake_floor_ns_per_timer, Some(67.5));
        // Callbacks on the timer threads: their sleeps alone.
        let mut inline = CpuFigures {
            timer_sleeps: Some(1_000),
            ..CpuFigures::default()
        };
        inline.price_sleeps(Some(&prices), 1_000_000);
        assert_eq!(inline.wake_floor_ns_per_timer, Some(50.0));
        // Nothing to price with, nothing counted, or no timers: no figure.
        for (prices, executor_sleeps, timers) in [
            (None, Some(500), 1_000_000),
            (Some(&prices), None, 1_000_000),
            (Some(&prices), Some(500), 0),
        ] {
            let mut cpu = CpuFigures {
                executor_sleeps,
                ..cpu.clone()
            };
            cpu.price_sleeps(prices, timers);
            assert_eq!(cpu.wake_floor_ns_per_timer, None);
        }
    }
}
