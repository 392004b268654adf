//! The printed summary and report.md.

use std::fmt::Write as _;

use crate::format::{bytes_text, count_text};
use crate::machine::Machine;
use crate::options::Options;
use crate::result::RunResult;
use crate::systems::{self, Peer, System};
use crate::table::Table;
use crate::tables::{scenario_tables, skipped_table, Skipped};

/// Every table of the run, in print order.
pub fn all_tables(options: &Options, results: &[RunResult], skipped: &[Skipped]) -> Vec<Table> {
    let mut tables: Vec<Table> = options
        .scenarios
        .iter()
        .flat_map(|s| scenario_tables(*s, results, options.peer_timers))
        .collect();
    tables.extend(skipped_table(skipped));
    tables
}

/// One line on the machine.
pub fn machine_line(machine: &Machine) -> String {
    let busy = if machine.was_busy() {
        " — WARNING: the machine was busy, figures are not representative"
    } else {
        ""
    };
    format!(
        "{} cores ({}), {} RAM, Linux {}, {:.0} % busy and load average {} at start{busy}",
        machine.cores,
        machine.cpu_model,
        bytes_text(machine.memory_bytes),
        machine.kernel,
        machine.busy_before * 100.0,
        machine.load_average
    )
}

/// What the terminal shows at the end of a run.
pub fn console_text(
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

/// How many unmeasured rounds each system ran first.
fn warm_up_text(options: &Options) -> String {
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
pub fn problems(results: &[RunResult]) -> Vec<String> {
    results
        .iter()
        .flat_map(|r| {
            r.problems.iter().map(move |p| {
                format!(
                    "{} {} ({}): {p}",
                    r.system,
                    r.scenario,
                    count_text(r.timers)
                )
            })
        })
        .collect()
}

/// report.md: machine, config, method, tables, notes and links to the plots and histograms.
pub fn markdown(
    options: &Options,
    machine: &Machine,
    tables: &[Table],
    results: &[RunResult],
    files: &[String],
) -> String {
    let mut md = String::from("# wheel bench report\n\n## Machine\n\n");
    let _ = writeln!(
        md,
        "- cores: {} available ({} in /proc/cpuinfo)",
        machine.cores, machine.cpuinfo_processors
    );
    let _ = writeln!(md, "- CPU: {}", machine.cpu_model);
    let _ = writeln!(
        md,
        "- memory: {}; kernel: Linux {}",
        bytes_text(machine.memory_bytes),
        machine.kernel
    );
    let busy = if machine.was_busy() {
        " (**busy: figures are not representative**)"
    } else {
        ""
    };
    let _ = writeln!(
        md,
        "- at start: {:.0} % of the cores busy with other work, load average {}{busy}\n",
        machine.busy_before * 100.0,
        machine.load_average
    );
    md.push_str("## Run\n\n");
    let _ = writeln!(
        md,
        "- wheel: {} timers, delays uniform over [0, {}), seed {}, {} producer thread(s); scenarios: {}",
        options.timers,
        humantime::format_duration(options.spread),
        options.seed,
        options.producers,
        options.scenarios.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
    );
    let _ = writeln!(
        md,
        "- side by side: wheel and every peer at {} timers over {} (same seed, so the same delays)",
        options.peer_timers,
        humantime::format_duration(options.peer_spread)
    );
    let _ = writeln!(md, "- warm-up: {}", warm_up_text(options));
    md.push_str(METHOD);
    md.push_str("\n## wheel config\n\n");
    let source = options
        .config_file
        .as_ref()
        .map_or("defaults".to_string(), |p| p.display().to_string());
    let config = serde_json::to_string_pretty(&options.config).unwrap_or_default();
    let _ = writeln!(md, "From {source}:\n\n```json\n{config}\n```\n");
    md.push_str("## Systems\n\n");
    let mut systems: Vec<Box<dyn System>> = vec![systems::wheel()];
    systems.extend(options.peers.iter().map(|p| p.system()));
    for system in &systems {
        let _ = writeln!(md, "- **{}**: {}", system.name(), system.method());
    }
    md.push_str("\n## Results\n\n");
    for table in tables {
        md.push_str(&table.to_markdown());
        md.push('\n');
    }
    notes(&mut md, results);
    md.push_str("## Files\n\n");
    for file in files.iter().filter(|f| f.ends_with(".svg")) {
        let _ = writeln!(md, "![{file}]({file})\n");
    }
    for file in files.iter().filter(|f| !f.ends_with(".svg")) {
        let _ = writeln!(md, "- [{file}]({file})");
    }
    md
}

fn notes(md: &mut String, results: &[RunResult]) {
    let noted: Vec<&RunResult> = results
        .iter()
        .filter(|r| !r.notes.is_empty() || !r.problems.is_empty())
        .collect();
    if noted.is_empty() {
        return;
    }
    md.push_str("## Notes and problems\n\n");
    for run in noted {
        for note in &run.notes {
            let _ = writeln!(
                md,
                "- {} {} ({}): {note}",
                run.system,
                run.scenario,
                count_text(run.timers)
            );
        }
    }
    for problem in problems(results) {
        let _ = writeln!(md, "- **PROBLEM** {problem}");
    }
    md.push('\n');
}

const METHOD: &str = "
## How it is measured

- Lateness is callback start minus the *requested* deadline, read with the same code inside
  every callback (the JVM's is the same arithmetic on `System.nanoTime`). Each callback thread
  records into its own HdrHistogram (1 ns – 1 h, 3 significant digits); they are merged at the
  end. A bitset per thread checks that every timer ran exactly once and none ran early.
- Schedule, cancel and reschedule throughput are timed on the producer threads per batch of
  1024 calls (and summed over producers). Deadlines are `now + delay`, the clock read every 64
  timers.
- Warm-up (`--warmup-rounds`, default 1): wheel and the Rust peers first run that many
  unmeasured rounds of the same plan (timers, spread, scenario, producers) on the same
  instance in the same process, each waited out until the system holds none of its timers
  and every callback has run, so the measured round finds its memory warm, as a long-running
  service's is; Netty's JVM gets `--jvm-warmup-rounds` and a pre-touched heap. The measured
  round's figures are its own: the probe starts fresh samples for it, CPU time, wake-ups and
  the systems' own counts are differences of snapshots taken around it. With 0 rounds the
  Rust systems start cold, and their schedule figures include the kernel's first-touch page
  faults for the memory the timers take (at 10 M timers most of the producer's time). The
  `idle` scenario has no warm-up.
- Memory: RSS after the measured round's last timer was scheduled minus RSS of the started
  system before its first timer (before any warm-up round), divided by the timers scheduled
  (some have fired by then; freed memory the allocator keeps still counts). Peak RSS is
  VmHWM, reset at the start of the measured round. The allocator is mimalloc.
- CPU time is each thread's schedstat run time, by thread name, over the measured round.
- `cargo xtask bench` runs every system in its own child process (`--in-process` turns that
  off), so no run inherits another's heap, threads or runtimes.
- `slow` is capped so its blocking callbacks need at most a quarter of the executor threads'
  time; `rpc` cancels 90 % of timers one batch after scheduling them; `heartbeat` postpones
  every timer 3 times (to now + its delay) and measures lateness from the last deadline.
";
