//! Lines both the terminal and report.md show: the machine, the warm-up, the problems.

use crate::harness::result::RunResult;
use crate::host::machine::Machine;
use crate::options::Options;
use crate::report::format;
use crate::systems::Peer;

/// One line on the machine.
pub(crate) fn machine_line(machine: &Machine) -> String {
    let busy = if machine.was_busy() {
        " — WARNING: the machine was busy, figures are not representative"
    } else {
        ""
    };
    let miss = machine.dram_miss_ns.map_or(String::new(), |ns| {
        format!(", a dependent DRAM miss {ns:.0} ns")
    });
    let wake = machine.wake_prices.map_or(String::new(), |p| {
        format!(
            ", a timed sleep {:.0} µs and a wake-up {:.0} µs of CPU",
            p.timed_sleep_ns / 1e3,
            p.wake_ns() / 1e3
        )
    });
    format!(
        "{} cores ({}), {} RAM{miss}{wake}, Linux {}, {:.0} % busy and load average {} at start{busy}",
        machine.cores,
        machine.cpu_model,
        format::bytes_text(machine.memory_bytes),
        machine.kernel,
        machine.busy_before * 100.0,
        machine.load_average
    )
}

/// How many unmeasured rounds each system ran first.
pub(crate) fn warm_up_text(options: &Options) -> String {
    let rust = match options.warmup_rounds {
        0 => "none for wheel and the Rust peers (they start cold)".to_string(),
        n => format!("{n} unmeasured round(s) for wheel and the Rust peers"),
    };
    if !options.peers.contains(&Peer::Netty) {
        return rust;
    }
    format!(
        "{rust}, {} JVM round(s) for Netty",
        options.jvm_warmup_rounds
    )
}

/// Every problem of every run, labelled.
pub(crate) fn problems(results: &[RunResult]) -> Vec<String> {
    results
        .iter()
        .flat_map(|r| {
            r.problems
                .iter()
                .map(move |p| format!("{}: {p}", run_label(r)))
        })
        .collect()
}

/// A run as notes and problems name it: "wheel fire (10M)".
pub(crate) fn run_label(run: &RunResult) -> String {
    format!(
        "{} {} ({})",
        run.system,
        run.scenario,
        format::count_text(run.timers)
    )
}
