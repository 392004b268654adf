//! [`Options`]: what one `cargo xtask bench` run does.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use wheel_shard::Config;

use crate::scenario::Scenario;
use crate::systems::Peer;

/// Everything a bench run needs; [`Options::default`] is the documented default run.
#[derive(Clone, Debug, Serialize)]
pub struct Options {
    /// Timers of wheel's own run.
    pub timers: u64,
    /// Delays are uniform over `[0, spread)`.
    #[serde(with = "crate::format::duration_text")]
    pub spread: Duration,
    /// Scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// Threads that schedule.
    pub producers: usize,
    /// Seed of the delays and choices.
    pub seed: u64,
    /// Output directory; `None` is `target/wheel-bench/<run>/`.
    pub out: Option<PathBuf>,
    /// Peers measured beside wheel.
    pub peers: Vec<Peer>,
    /// Timers of the side-by-side runs (wheel again, and every peer).
    pub peer_timers: u64,
    /// Spread of the side-by-side runs.
    #[serde(with = "crate::format::duration_text")]
    pub peer_spread: Duration,
    /// How long the `idle` scenario waits.
    #[serde(with = "crate::format::duration_text")]
    pub idle_for: Duration,
    /// The service's config.
    pub config: Config,
    /// Where the config came from (`None`: defaults).
    pub config_file: Option<PathBuf>,
    /// Warm-up rounds the JVM runs before Netty's measured round.
    pub jvm_warmup_rounds: u32,
    /// Unmeasured rounds of the same plan wheel and the Rust peers run, on the same instance in
    /// the same process, before their measured round (0: they start cold).
    pub warmup_rounds: u32,
    /// No progress bars and no tables on stdout.
    pub quiet: bool,
    /// Run each system in a child process of this executable (its `bench --child` mode), so
    /// every run starts from a clean heap; `None` runs them in this process.
    pub isolate: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            timers: 10_000_000,
            spread: Duration::from_secs(10),
            scenarios: vec![Scenario::Fire],
            producers: 1,
            seed: 0x5EED,
            out: None,
            peers: Peer::ALL.to_vec(),
            peer_timers: 1_000_000,
            peer_spread: Duration::from_secs(1),
            idle_for: Duration::from_secs(3),
            config: Config::default(),
            config_file: None,
            jvm_warmup_rounds: 2,
            warmup_rounds: 1,
            quiet: false,
            isolate: None,
        }
    }
}

impl Options {
    /// The `--quick` run: 100 000 timers over 1 s for wheel and peers alike.
    pub fn quick() -> Options {
        Options {
            timers: 100_000,
            spread: Duration::from_secs(1),
            peer_timers: 100_000,
            peer_spread: Duration::from_secs(1),
            idle_for: Duration::from_secs(1),
            jvm_warmup_rounds: 1,
            warmup_rounds: 1,
            ..Options::default()
        }
    }

    /// Checks the numbers are usable; the message names the option.
    pub fn validate(&self) -> Result<(), String> {
        let max = u64::from(u32::MAX);
        if self.timers == 0 || self.timers > max {
            return Err(format!("--timers must be in 1..={max}"));
        }
        if self.peer_timers == 0 || self.peer_timers > max {
            return Err(format!("--peer-timers must be in 1..={max}"));
        }
        if self.spread.is_zero() || self.peer_spread.is_zero() {
            return Err("--spread must be above zero".into());
        }
        if self.producers == 0 || self.producers > 256 {
            return Err("--producers must be in 1..=256".into());
        }
        if self.scenarios.is_empty() {
            return Err("--scenario names no scenario".into());
        }
        self.config.validate().map_err(|e| e.to_string())
    }
}
