//! `cargo xtask bench`: wheel under a real load, beside what users would use instead.
//!
//! Where things are:
//!
//! - `main.rs`: the `wheel-bench` binary that `cargo xtask bench` builds and launches; reads
//!   the command line ([`Cli`], from the one options type [`Options`]) and calls [`run()`].
//! - `run.rs` ([`run()`]): where a run starts: the runs of each scenario, wheel and every
//!   peer, each in a child process (`child.rs`) or in this one.
//! - `systems/`: wheel and its peers — tokio-util `DelayQueue`, tokio `sleep_until` tasks, a
//!   `BinaryHeap` timer thread, and Netty's `HashedWheelTimer` in a JVM.
//! - `harness/`: how one in-process run is done and measured, the same for every system: the
//!   driver, producer threads, scenarios, the lateness probe, the result of a run.
//! - `report/`: tables, `.hgrm` histograms, SVG plots, report.md and results.json.
//! - `host/`: the machine, /proc figures, the host stall probe, progress bars.
//!
//! Imports run one way: `run`/`child` → `report` → `options` → `systems` → `harness` →
//! `host`.

mod child;
mod harness;
mod host;
mod options;
mod report;
mod run;
mod systems;

use std::path::{Path, PathBuf};

pub use harness::result::{RunResult, Skipped};
pub use harness::scenario::Scenario;
pub use host::proc::{memory, Memory};
pub use host::wake_floor;
pub use options::{Cli, Options, QUICK};
pub use report::hgrm::parse_hgrm;
pub use run::{run, Outcome};
pub use systems::Peer;

/// The `--child SPEC` mode: runs the one run `spec` names and returns the JSON line the
/// parent reads back (see [`Options::isolate`]).
pub fn run_child(options: &Options, spec: &str) -> Result<String, String> {
    child::run_child(options, spec)
}

/// The default output directory of a run: `<target>/wheel-bench/<UTC date-time>`.
pub fn default_out_dir(target: &Path) -> PathBuf {
    report::outputs::default_dir(target)
}
