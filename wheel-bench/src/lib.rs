//! `cargo xtask bench`: wheel under a real load, beside what users would use instead.
//!
//! [`run`] schedules the scenario's timers into wheel's `TimerService` (and, at a smaller
//! size, into each peer: tokio-util `DelayQueue`, tokio `sleep_until` tasks, a `BinaryHeap`
//! timer thread and Netty's `HashedWheelTimer`), records every callback's lateness, and writes
//! tables, `.hgrm` histograms, SVG plots, report.md and results.json.

pub mod bitset;
pub mod child;
pub mod cli;
pub mod delays;
pub mod driver;
pub mod format;
pub mod histogram;
pub mod machine;
pub mod options;
pub mod outputs;
pub mod plot;
pub mod probe;
pub mod proc;
pub mod producer;
pub mod progress;
pub mod report;
pub mod result;
pub mod scenario;
pub mod systems;
pub mod table;
pub mod tables;
pub mod task;

use std::path::PathBuf;
use std::time::Duration;

pub use options::Options;
pub use result::RunResult;
pub use scenario::Scenario;

use machine::Machine;
use progress::Progress;
use scenario::Scenario as S;
use systems::{Plan, System};
use tables::Skipped;

/// What a finished run produced.
#[derive(Debug)]
pub struct Outcome {
    /// Where the files went.
    pub out_dir: PathBuf,
    pub results: Vec<RunResult>,
    pub skipped: Vec<Skipped>,
    /// The tables as printed.
    pub text: String,
    /// Files written, relative to `out_dir`.
    pub files: Vec<String>,
}

impl Outcome {
    /// True when every run's counts added up and nothing failed to run.
    pub fn all_ok(&self) -> bool {
        self.results.iter().all(|r| r.problems.is_empty())
            && !self.skipped.iter().any(|s| s.reason.starts_with("failed"))
    }
}

/// Pause between runs so the allocator can return the last run's memory before the next
/// run's baseline is read.
const SETTLE: Duration = Duration::from_millis(300);

/// Runs the bench described by `options` and writes its files.
pub fn run(options: &Options) -> Result<Outcome, String> {
    options.validate()?;
    let out_dir = options
        .out
        .clone()
        .unwrap_or_else(|| outputs::default_dir(std::path::Path::new("target")));
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let progress = Progress::new(options.quiet);
    let machine = Machine::read();
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    for &scenario in &options.scenarios {
        for (system, timers, spread) in schedule_of_runs(options, scenario) {
            let plan = Plan::new(options, scenario, timers, spread, &out_dir, &progress);
            run_one(system.as_ref(), &plan, options, &mut results, &mut skipped);
            std::thread::sleep(SETTLE);
        }
    }
    let tables = report::all_tables(options, &results, &skipped);
    let mut files = outputs::write_hgrms(&out_dir, &results)?;
    files.extend(outputs::write_plots(
        &out_dir,
        &results,
        &options.scenarios,
    )?);
    files.push("report.md".into());
    files.push("results.json".into());
    let markdown = report::markdown(options, &machine, &tables, &results, &files);
    outputs::write(&out_dir.join("report.md"), &markdown)?;
    let json = outputs::ResultsFile {
        machine: &machine,
        options,
        runs: &results,
        skipped: &skipped,
        files: &files,
    };
    outputs::write_json(&out_dir, &json)?;
    let text = report::console_text(options, &machine, &tables, &results);
    Ok(Outcome {
        out_dir,
        results,
        skipped,
        text,
        files,
    })
}

/// The runs of one scenario, in order: the side-by-side group (wheel at the peers' size, then
/// each peer), then wheel at its own size — smaller runs first, so memory an allocator keeps
/// from a big run does not hide a small run's growth.
fn schedule_of_runs(options: &Options, scenario: S) -> Vec<(Box<dyn System>, u64, Duration)> {
    let threads = options.config.executor_threads;
    let main_timers = scenario.timers(options.timers, options.spread, threads);
    let peer_timers = scenario.timers(options.peer_timers, options.peer_spread, threads);
    let same_size = main_timers == peer_timers && options.spread == options.peer_spread;
    let mut runs: Vec<(Box<dyn System>, u64, Duration)> = Vec::new();
    if !options.peers.is_empty() {
        if !same_size && scenario != S::Idle {
            runs.push((systems::wheel(), peer_timers, options.peer_spread));
        }
        for peer in &options.peers {
            runs.push((peer.system(), peer_timers, options.peer_spread));
        }
    }
    runs.push((systems::wheel(), main_timers, options.spread));
    runs
}

fn run_one(
    system: &dyn System,
    plan: &Plan<'_>,
    options: &Options,
    results: &mut Vec<RunResult>,
    skipped: &mut Vec<Skipped>,
) {
    let skip = |reason: String| Skipped {
        system: system.name().to_string(),
        scenario: plan.scenario,
        reason,
    };
    if let Some(reason) = system.skip_reason(plan) {
        plan.progress.say(&format!(
            "skip {} {}: {reason}",
            system.name(),
            plan.scenario
        ));
        skipped.push(skip(reason));
        return;
    }
    let size = if plan.scenario == S::Idle {
        format!("idle for {}", humantime::format_duration(plan.idle_for))
    } else {
        let spread = humantime::format_duration(plan.spread);
        format!("{} timers over {spread}", format::count_text(plan.timers))
    };
    plan.progress
        .say(&format!("run  {} {}: {size}", system.name(), plan.scenario));
    let outcome = match &options.isolate {
        Some(exe) => {
            let spec = child::ChildSpec {
                system: system.name().to_string(),
                scenario: plan.scenario,
                timers: plan.timers,
                spread: plan.spread,
            };
            child::run_in_child(exe, options, &spec, plan.work_dir)
        }
        None => system.run(plan),
    };
    match outcome {
        Ok(result) => results.push(result),
        Err(error) => skipped.push(skip(format!("failed: {error}"))),
    }
}
