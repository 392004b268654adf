//! [`Options`]: what one bench run does, and the command line it is read from. The defaults
//! are written once, in the `#[arg]` attributes: [`Options::default`] is the command line with
//! no arguments, so `--help` shows the very values a run uses.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::error::ErrorKind;
use clap::{ArgAction, CommandFactory, Parser};
use serde::Serialize;
use wheel_shard::Config;

use crate::harness::plan::Plan;
use crate::harness::result::duration_text;
use crate::harness::scenario::{parse_scenarios, Scenario};
use crate::host::progress::Progress;
use crate::systems::{parse_peers, Peer};

/// What `--quick` stands for: these arguments, before the ones given (which win).
pub const QUICK: [&str; 5] = [
    "--timers=100000",
    "--spread=1s",
    "--peer-timers=100000",
    "--idle-for=1s",
    "--jvm-warmup-rounds=1",
];

/// A list of scenarios, as `--scenario` reads it (an alias, so clap takes the whole list as
/// one value).
pub type ScenarioList = Vec<Scenario>;
/// A list of peers, as `--peers` reads it.
pub type PeerList = Vec<Peer>;

/// The command line of the `wheel-bench` binary (what `cargo xtask bench` runs): a run's
/// [`Options`] and how to run it.
#[derive(Parser, Debug)]
#[command(
    name = "wheel-bench",
    about = "Measures wheel under load beside its peers; usually run as `cargo xtask bench [OPTIONS]`.\nWrites tables, .hgrm histograms, SVG plots, report.md and results.json to target/wheel-bench/<run>/.",
    args_override_self = true
)]
pub struct Cli {
    #[command(flatten)]
    pub options: Options,
    /// Run every system in this process instead of one child process per run.
    #[arg(long)]
    pub in_process: bool,
    /// Internal: run one `system:scenario:timers:spread_ns` and print its result as JSON.
    #[arg(long, hide = true)]
    pub child: Option<String>,
}

impl Cli {
    /// Reads the command line `args` (the program name first): `--quick` puts [`QUICK`] before
    /// the arguments given, a later argument overrides an earlier one, then `--config` is
    /// loaded and the options checked. Errors print as clap's (exit code 2).
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        if args.iter().skip(1).any(|arg| arg == "--quick") {
            let at = args.len().min(1);
            args.splice(at..at, QUICK.iter().map(OsString::from));
        }
        let mut cli = Cli::try_parse_from(args)?;
        cli.options
            .load_config()
            .and_then(|()| cli.options.validate())
            .map_err(|e| Cli::command().error(ErrorKind::ValueValidation, e))?;
        Ok(cli)
    }
}

fn quick_help() -> String {
    format!(
        "A small run for checking, done in well under 30 s: {}",
        QUICK.join(" ")
    )
}

/// Everything a bench run needs; [`Options::default`] is the documented default run.
#[derive(clap::Args, Clone, Debug, Serialize)]
pub struct Options {
    /// Timers of wheel's own run.
    #[arg(long, default_value_t = 10_000_000)]
    pub timers: u64,
    /// Delays are uniform over [0, SPREAD), e.g. "10s", "500ms".
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    #[serde(with = "duration_text")]
    pub spread: Duration,
    /// Scenarios, in order: fire, rpc, heartbeat, slow, idle, a comma-separated list, or all.
    #[arg(long = "scenario", value_name = "LIST", value_parser = parse_scenarios, default_value = "fire")]
    pub scenarios: ScenarioList,
    /// Threads that schedule.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Seed of the delays and choices.
    #[arg(long, default_value_t = 0x5EED)]
    pub seed: u64,
    /// Output directory [default: target/wheel-bench/DATE-TIME, in UTC].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Peers measured beside wheel: all, none, or a list of delay-queue, tokio-sleep,
    /// binary-heap, netty.
    #[arg(long, value_name = "LIST", value_parser = parse_peers, default_value = "all")]
    pub peers: PeerList,
    /// Timers of the side-by-side runs (wheel again, and every peer).
    #[arg(long, default_value_t = 1_000_000)]
    pub peer_timers: u64,
    /// Spread of the side-by-side runs.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    #[serde(with = "duration_text")]
    pub peer_spread: Duration,
    /// How long the idle scenario watches.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    #[serde(with = "duration_text")]
    pub idle_for: Duration,
    /// wheel's config as a TOML file (Config::from_file) [default: Config::default()].
    #[arg(long = "config", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// The service's config: `--config`'s, or the default.
    #[arg(skip)]
    pub config: Config,
    /// The quick run: the arguments of [`QUICK`] before the ones given.
    #[arg(long, help = quick_help())]
    pub quick: bool,
    /// Warm-up rounds the JVM runs before Netty's measured round.
    #[arg(long, default_value_t = 2)]
    pub jvm_warmup_rounds: u32,
    /// Unmeasured rounds of the same run (timers, spread, scenario, producers) that wheel and
    /// the Rust peers do on the same instance, in the same process, before the measured round,
    /// so their memory is warm as a long-running service's is; 0 measures them cold.
    #[arg(long, default_value_t = 1)]
    pub warmup_rounds: u32,
    /// The host stall probe (on or off): a thread per vCPU that wakes every 250 µs during each
    /// measured round and notes how late, so the report tells the VM's stalls from the
    /// service's lateness.
    /// Off by default: its wake-ups take a little of the service's CPU, which shows in the
    /// p99 beside it (see report.md, "How it is measured").
    #[arg(
        long,
        value_name = "on|off",
        value_parser = BoolishValueParser::new(),
        action = ArgAction::Set,
        default_value = "off",
        hide_possible_values = true
    )]
    pub stall_probe: bool,
    /// No progress bars and no tables (for scripts; read results.json).
    #[arg(long)]
    pub quiet: bool,
    /// Run each system in a child process of this executable (its `--child` mode), so every
    /// run starts from a clean heap; `None` runs them in this process.
    #[arg(skip)]
    pub isolate: Option<PathBuf>,
}

impl Default for Options {
    /// The command line without arguments.
    fn default() -> Options {
        Options::from_args(&[])
    }
}

impl Options {
    /// The `--quick` run: 100 000 timers over 1 s for wheel and peers alike.
    pub fn quick() -> Options {
        Options::from_args(&["--quick"])
    }

    fn from_args(args: &[&str]) -> Options {
        let argv = std::iter::once("wheel-bench").chain(args.iter().copied());
        Cli::parse_args(argv)
            .expect("the built-in defaults are valid")
            .options
    }

    /// Reads `--config`'s file into [`Options::config`] (the default config without one).
    fn load_config(&mut self) -> Result<(), String> {
        self.config = match &self.config_file {
            Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
            None => Config::default(),
        };
        Ok(())
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

    /// The plan of one run of `scenario` at `timers` over `spread`, the rest from these options.
    pub(crate) fn plan<'a>(
        &'a self,
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
            producers: self.producers,
            seed: self.seed,
            idle_for: self.idle_for,
            config: &self.config,
            work_dir,
            jvm_warmup_rounds: self.jvm_warmup_rounds,
            warmup_rounds: self.warmup_rounds,
            stall_probe: self.stall_probe,
            progress,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(argv: &[&str]) -> Result<Options, String> {
        let argv = std::iter::once("wheel-bench").chain(argv.iter().copied());
        Cli::parse_args(argv)
            .map(|cli| cli.options)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_the_documented_run() {
        let o = options(&[]).unwrap();
        assert_eq!(
            (o.timers, o.spread, o.peer_timers, o.peer_spread),
            (
                10_000_000,
                Duration::from_secs(10),
                1_000_000,
                Duration::from_secs(1)
            )
        );
        assert_eq!(o.scenarios, vec![Scenario::Fire]);
        assert_eq!(o.peers.len(), 4);
        assert_eq!((o.warmup_rounds, o.jvm_warmup_rounds), (1, 2));
        assert_eq!((o.seed, o.producers), (24301, 1));
        assert!(!o.stall_probe && !o.quick && !o.quiet);
        assert_eq!(options(&["--warmup-rounds", "0"]).unwrap().warmup_rounds, 0);
        assert!(options(&["--stall-probe", "on"]).unwrap().stall_probe);
        assert!(!options(&["--stall-probe=off"]).unwrap().stall_probe);
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
        // Given before --quick, an argument still wins over what --quick stands for.
        assert_eq!(options(&["--timers=7", "--quick"]).unwrap().timers, 7);
        let quick = Options::quick();
        assert_eq!(
            (quick.timers, quick.idle_for, quick.jvm_warmup_rounds),
            (100_000, Duration::from_secs(1), 1)
        );
        assert!(options(&["--producers", "0"])
            .unwrap_err()
            .contains("producers"));
        assert!(options(&["--config", "/nonexistent.toml"]).is_err());
        assert!(options(&["--scenario", "fast"]).is_err());
    }

    #[test]
    fn help_shows_the_defaults_a_run_uses() {
        let help = Cli::command().render_long_help().to_string();
        for text in [
            "[default: 10000000]",
            "[default: 10s]",
            "[default: fire]",
            "[default: all]",
            "[default: 24301]",
            "--timers=100000 --spread=1s",
        ] {
            assert!(help.contains(text), "{text} missing from:\n{help}");
        }
        assert!(!help.contains("--child"));
    }
}
