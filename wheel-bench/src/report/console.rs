//! What the terminal shows at the end of a run.

use std::fmt::Write as _;

use crate::harness::result::RunResult;
use crate::host::machine::Machine;
use crate::options::Options;
use crate::report::format::count_text;
use crate::report::lines::{machine_line, problems, warm_up_text};
use crate::report::table::Table;

/// The machine, the run's size, every table and every problem.
pub(crate) fn console_text(
    options: &Options,
    machine: &Machine,
    tables: &[Table],
    results: &[RunResult],
) -> String {
    let mut out = format!("\nwheel bench on {}\n", machine_line(machine));
    let _ = writeln!(
        out,
        "{} timers over {} from {} producer(s), seed {}; peers at {} over {}; warm-up: {}\n",
        count_text(options.timers),
        humantime::format_duration(options.spread),
        options.producers,
        options.seed,
        count_text(options.peer_timers),
        humantime::format_duration(options.peer_spread),
        warm_up_text(options)
    );
    for table in tables {
        out.push_str(&table.to_text());
        out.push('\n');
    }
    for problem in problems(results) {
        let _ = writeln!(out, "PROBLEM: {problem}");
    }
    out
}
