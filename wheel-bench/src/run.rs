//! Where a run starts: [`run`] goes through the scenarios and, for each, through its runs
//! (wheel and every peer), each in a child process or in this one, then hands the results to
//! [`crate::report`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::child::{run_in_child, ChildSpec};
use crate::harness::plan::Plan;
use crate::harness::result::{RunResult, Skipped};
use crate::harness::scenario::Scenario;
use crate::harness::system::System;
use crate::host::machine::Machine;
use crate::host::progress::Progress;
use crate::options::Options;
use crate::report::{self, format::count_text, outputs};
use crate::systems;

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
        .unwrap_or_else(|| outputs::default_dir(Path::new("target")));
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let progress = Progress::new(options.quiet);
    let machine = Machine::read();
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    for &scenario in &options.scenarios {
        for (system, timers, spread) in schedule_of_runs(options, scenario) {
            let plan = options.plan(scenario, timers, spread, &out_dir, &progress);
            match run_one(system.as_ref(), &plan, options) {
                Ok(mut result) => {
                    let timers = result.counts.scheduled;
                    result
                        .cpu
                        .price_sleeps(machine.wake_prices.as_ref(), timers);
                    results.push(result);
                }
                Err(reason) => skipped.push(Skipped {
                    system: system.name().to_string(),
                    scenario,
                    reason,
                }),
            }
            std::thread::sleep(SETTLE);
        }
    }
    let written = report::write_all(&out_dir, options, &machine, &results, &skipped)?;
    Ok(Outcome {
        out_dir,
        results,
        skipped,
        text: written.text,
        files: written.files,
    })
}

/// The runs of one scenario, in order: the side-by-side group (wheel at the peers' size, then
/// each peer), then wheel at its own size — smaller runs first, so memory an allocator keeps
/// from a big run does not hide a small run's growth.
fn schedule_of_runs(
    options: &Options,
    scenario: Scenario,
) -> Vec<(Box<dyn System>, u64, Duration)> {
    let threads = options.config.executor_threads;
    let main_timers = scenario.timers(options.timers, options.spread, threads);
    let peer_timers = scenario.timers(options.peer_timers, options.peer_spread, threads);
    let same_size = main_timers == peer_timers && options.spread == options.peer_spread;
    let mut runs: Vec<(Box<dyn System>, u64, Duration)> = Vec::new();
    if !options.peers.is_empty() {
        if !same_size && scenario != Scenario::Idle {
            runs.push((systems::wheel(), peer_timers, options.peer_spread));
        }
        for peer in &options.peers {
            runs.push((peer.system(), peer_timers, options.peer_spread));
        }
    }
    runs.push((systems::wheel(), main_timers, options.spread));
    runs
}

/// One system's run of the plan: its result, or why there is none ("failed: …" when it
/// should have run).
fn run_one(system: &dyn System, plan: &Plan<'_>, options: &Options) -> Result<RunResult, String> {
    if let Some(reason) = system.skip_reason(plan) {
        plan.progress.say(&format!(
            "skip {} {}: {reason}",
            system.name(),
            plan.scenario
        ));
        return Err(reason);
    }
    let size = if plan.scenario == Scenario::Idle {
        format!("idle for {}", humantime::format_duration(plan.idle_for))
    } else {
        let spread = humantime::format_duration(plan.spread);
        format!("{} timers over {spread}", count_text(plan.timers))
    };
    plan.progress
        .say(&format!("run  {} {}: {size}", system.name(), plan.scenario));
    let outcome = match &options.isolate {
        Some(exe) => {
            let spec = ChildSpec {
                system: system.name().to_string(),
                scenario: plan.scenario,
                timers: plan.timers,
                spread: plan.spread,
            };
            run_in_child(exe, options, &spec, plan.work_dir)
        }
        None => system.run(plan),
    };
    outcome.map_err(|error| format!("failed: {error}"))
}
