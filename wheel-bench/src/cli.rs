//! The command line of `cargo xtask bench`, as clap arguments that become [`Options`].

use std::path::PathBuf;
use std::time::Duration;

use wheel_shard::Config;

use crate::options::Options;
use crate::scenario::parse_scenarios;
use crate::systems::parse_peers;

/// `cargo xtask bench [options]`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct BenchArgs {
    /// Timers of wheel's own run [default: 10000000; --quick: 100000].
    #[arg(long)]
    pub timers: Option<u64>,
    /// Delays are uniform over [0, SPREAD), e.g. "10s", "500ms" [default: 10s; --quick: 1s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub spread: Option<Duration>,
    /// fire, rpc, heartbeat, slow, idle, a comma-separated list, or all.
    #[arg(long, default_value = "fire")]
    pub scenario: String,
    /// Threads that schedule.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Seed of the delays and choices [default: 24301].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output directory (default: `target/wheel-bench/<date-time>`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Peers: all, none, or a list of delay-queue, tokio-sleep, binary-heap, netty.
    #[arg(long, default_value = "all")]
    pub peers: String,
    /// Timers of the side-by-side runs [default: 1000000; --quick: 100000].
    #[arg(long)]
    pub peer_timers: Option<u64>,
    /// Spread of the side-by-side runs [default: 1s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub peer_spread: Option<Duration>,
    /// How long the idle scenario watches [default: 3s; --quick: 1s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub idle_for: Option<Duration>,
    /// wheel's config as a TOML file (Config::from_file) [default: Config::default()].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// 100 000 timers over 1 s for wheel and peers; done in well under 30 s.
    #[arg(long)]
    pub quick: bool,
    /// No progress bars and no tables (for scripts; read results.json).
    #[arg(long)]
    pub quiet: bool,
    /// Warm-up rounds of the JVM before Netty's measured round [default: 2; --quick: 1].
    #[arg(long)]
    pub jvm_warmup_rounds: Option<u32>,
    /// Unmeasured rounds of the same run (timers, spread, scenario, producers) that wheel and
    /// the Rust peers do on the same instance, in the same process, before the measured round,
    /// so their memory is warm as a long-running service's is; 0 measures them cold
    /// [default: 1; --quick: 1].
    #[arg(long)]
    pub warmup_rounds: Option<u32>,
    /// Run every system in the calling process instead of one child process per run.
    #[arg(long)]
    pub in_process: bool,
    /// Internal: run one `system:scenario:timers:spread_ns` and print its result as JSON.
    #[arg(long, hide = true)]
    pub child: Option<String>,
}

impl BenchArgs {
    /// The options these arguments ask for.
    pub fn to_options(&self) -> Result<Options, String> {
        let base = if self.quick {
            Options::quick()
        } else {
            Options::default()
        };
        let config = match &self.config {
            Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
            None => Config::default(),
        };
        let options = Options {
            timers: self.timers.unwrap_or(base.timers),
            spread: self.spread.unwrap_or(base.spread),
            scenarios: parse_scenarios(&self.scenario)?,
            producers: self.producers,
            seed: self.seed.unwrap_or(base.seed),
            out: self.out.clone(),
            peers: parse_peers(&self.peers)?,
            peer_timers: self.peer_timers.unwrap_or(base.peer_timers),
            peer_spread: self.peer_spread.unwrap_or(base.peer_spread),
            idle_for: self.idle_for.unwrap_or(base.idle_for),
            config,
            config_file: self.config.clone(),
            quiet: self.quiet,
            jvm_warmup_rounds: self.jvm_warmup_rounds.unwrap_or(base.jvm_warmup_rounds),
            warmup_rounds: self.warmup_rounds.unwrap_or(base.warmup_rounds),
            ..base
        };
        options.validate()?;
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::scenario::Scenario;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn options(argv: &[&str]) -> Result<Options, String> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.args.to_options()
    }

    #[test]
    fn defaults_are_the_documented_run() {
        let o = options(&[]).unwrap();
        assert_eq!(
            (o.timers, o.spread, o.peer_timers),
            (10_000_000, Duration::from_secs(10), 1_000_000)
        );
        assert_eq!(o.scenarios, vec![Scenario::Fire]);
        assert_eq!(o.peers.len(), 4);
        assert_eq!((o.warmup_rounds, o.jvm_warmup_rounds), (1, 2));
        assert_eq!(options(&["--warmup-rounds", "0"]).unwrap().warmup_rounds, 0);
    }

    #[test]
    fn quick_and_overrides() {
        let o = options(&[
            "--quick",
            "--peers",
            "none",
            "--scenario",
            "all",
            "--timers",
            "5000",
            "--spread",
            "200ms",
        ])
        .unwrap();
        assert_eq!(
            (o.timers, o.spread, o.peer_timers),
            (5_000, Duration::from_millis(200), 100_000)
        );
        assert!(o.peers.is_empty());
        assert_eq!(o.scenarios.len(), 5);
        assert!(options(&["--producers", "0"])
            .unwrap_err()
            .contains("producers"));
        assert!(options(&["--config", "/nonexistent.toml"]).is_err());
    }
}
