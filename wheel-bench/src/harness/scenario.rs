//! The scenarios: what the producers do with their timers, and how big each run is.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::harness::task::SLOW_BLOCK;

/// Share of timers the `rpc` scenario cancels, per 10 000.
pub const RPC_CANCEL_PER_10000: u64 = 9_000;
/// Share of callbacks the `slow` scenario blocks, per 10 000.
pub const SLOW_PER_10000: u64 = 100;
/// Reschedules per timer in the `heartbeat` scenario.
pub const HEARTBEAT_RESCHEDULES: usize = 3;
/// Largest share of the executor's thread time the `slow` scenario's blocking callbacks may
/// take; beyond it any executor falls behind without bound and the run measures only that.
const SLOW_MAX_LOAD: f64 = 0.25;

/// A workload shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Every timer fires.
    Fire,
    /// 90 % of timers are cancelled before their deadline (request timeouts in a proxy).
    Rpc,
    /// Each timer is postponed several times before it fires (idle-connection checks).
    Heartbeat,
    /// 1 % of callbacks block for 10 ms; the others' lateness is reported apart.
    Slow,
    /// No timers for a few seconds: CPU time and wake-ups of an idle system.
    Idle,
}

impl Scenario {
    /// Every scenario, in the order `--scenario all` runs them.
    pub const ALL: [Scenario; 5] = [
        Scenario::Fire,
        Scenario::Rpc,
        Scenario::Heartbeat,
        Scenario::Slow,
        Scenario::Idle,
    ];

    /// The name used on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Fire => "fire",
            Scenario::Rpc => "rpc",
            Scenario::Heartbeat => "heartbeat",
            Scenario::Slow => "slow",
            Scenario::Idle => "idle",
        }
    }

    /// One line on what the scenario does, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Scenario::Fire => "every timer fires",
            Scenario::Rpc => "90 % of timers are cancelled about one batch (1024 timers) after they are scheduled",
            Scenario::Heartbeat => "each timer is postponed 3 times (to now + its delay), one batch apart, then fires",
            Scenario::Slow => "1 % of callbacks block for 10 ms; lateness of the others is reported apart",
            Scenario::Idle => "no timers: CPU time and wake-ups of an idle system",
        }
    }

    /// The timers a run of this scenario schedules when `requested` over `spread` were asked
    /// for: `slow` is capped so its blocking callbacks need at most a quarter of
    /// `executor_threads`' time (1 % blocking 10 ms each at 1 M/s would need 100 threads).
    pub fn timers(self, requested: u64, spread: Duration, executor_threads: usize) -> u64 {
        match self {
            Scenario::Idle => 0,
            Scenario::Slow => {
                let thread_time = spread.as_secs_f64() * executor_threads as f64 * SLOW_MAX_LOAD;
                let blocking = thread_time / SLOW_BLOCK.as_secs_f64();
                let cap = (blocking * 10_000.0 / SLOW_PER_10000 as f64) as u64;
                requested.min(cap.max(100))
            }
            _ => requested,
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Scenario, String> {
        Scenario::ALL
            .into_iter()
            .find(|scenario| scenario.name() == s)
            .ok_or_else(|| {
                format!("unknown scenario {s:?} (fire, rpc, heartbeat, slow, idle or all)")
            })
    }
}

/// Parses `--scenario`: one name, a comma-separated list, or `all`.
pub fn parse_scenarios(text: &str) -> Result<Vec<Scenario>, String> {
    if text == "all" {
        return Ok(Scenario::ALL.to_vec());
    }
    let mut scenarios = Vec::new();
    for name in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let scenario: Scenario = name.parse()?;
        if !scenarios.contains(&scenario) {
            scenarios.push(scenario);
        }
    }
    if scenarios.is_empty() {
        return Err("no scenario named".into());
    }
    Ok(scenarios)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for scenario in Scenario::ALL {
            assert_eq!(scenario.name().parse::<Scenario>().unwrap(), scenario);
        }
        assert_eq!(parse_scenarios("all").unwrap().len(), 5);
        assert_eq!(
            parse_scenarios("rpc,fire,rpc").unwrap(),
            vec![Scenario::Rpc, Scenario::Fire]
        );
        assert!(parse_scenarios("fast").unwrap_err().contains("fast"));
    }

    #[test]
    fn slow_is_capped_to_a_quarter_of_the_executor() {
        // 10 s × 2 threads × 25 % = 5 s of blocking = 500 callbacks of 10 ms = 1 % of 50 000.
        assert_eq!(
            Scenario::Slow.timers(10_000_000, Duration::from_secs(10), 2),
            50_000
        );
        assert_eq!(
            Scenario::Slow.timers(1_000, Duration::from_secs(10), 2),
            1_000
        );
        assert_eq!(
            Scenario::Fire.timers(1_000, Duration::from_secs(10), 2),
            1_000
        );
        assert_eq!(Scenario::Idle.timers(1_000, Duration::from_secs(10), 2), 0);
    }
}
