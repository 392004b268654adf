//! report.md: machine, run, method, config, systems, the tables, notes and problems, and
//! links to the plots and histograms.

use std::fmt::Write as _;

use crate::harness::result::RunResult;
use crate::host::machine::Machine;
use crate::options::Options;
use crate::report::format::bytes_text;
use crate::report::lines::{problems, run_label, warm_up_text};
use crate::report::table::Table;
use crate::systems;

/// report.md, section by section.
pub(crate) fn markdown(
    options: &Options,
    machine: &Machine,
    tables: &[Table],
    results: &[RunResult],
    files: &[String],
) -> String {
    let mut md = String::from("# wheel bench report\n\n");
    machine_section(&mut md, machine);
    run_section(&mut md, options);
    md.push_str(METHOD);
    config_section(&mut md, options);
    systems_section(&mut md, options);
    md.push_str("\n## Results\n\n");
    for table in tables {
        md.push_str(&table.to_markdown());
        md.push('\n');
    }
    notes_section(&mut md, results);
    files_section(&mut md, files);
    md
}

fn machine_section(md: &mut String, machine: &Machine) {
    md.push_str("## Machine\n\n");
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
    if let Some(ns) = machine.dram_miss_ns {
        let _ = writeln!(
            md,
            "- memory floor: a load that misses every cache took {ns:.0} ns (a pointer chase \
             through 256 MiB at start; the per-timer figures of a 10 M run move with it)"
        );
    }
    if let Some(p) = machine.wake_prices {
        let cpus = if p.across_cpus {
            "another CPU"
        } else {
            "the same CPU"
        };
        let _ = writeln!(
            md,
            "- wake-up floor: a thread that sleeps until its next millisecond is charged {:.1} µs \
             of CPU a wake-up beyond its work; waking a thread on {cpus} {:.1} µs (waker) + \
             {:.1} µs (woken). The CPU tables' \"wake floor\" prices each run's sleeps at these \
             (see `host/wake_floor.rs`)",
            p.timed_sleep_ns / 1e3,
            p.waker_ns / 1e3,
            p.wakee_ns / 1e3
        );
    }
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
}

fn run_section(md: &mut String, options: &Options) {
    md.push_str("## Run\n\n");
    let scenarios: Vec<&str> = options.scenarios.iter().map(|s| s.name()).collect();
    let _ = writeln!(
        md,
        "- wheel: {} timers, delays uniform over [0, {}), seed {}, {} producer thread(s); scenarios: {}",
        options.timers,
        humantime::format_duration(options.spread),
        options.seed,
        options.producers,
        scenarios.join(", ")
    );
    let _ = writeln!(
        md,
        "- side by side: wheel and every peer at {} timers over {} (same seed, so the same delays)",
        options.peer_timers,
        humantime::format_duration(options.peer_spread)
    );
    let _ = writeln!(md, "- warm-up: {}", warm_up_text(options));
    let probe = if options.stall_probe {
        "on (`--stall-probe on`): a thread per vCPU wakes every 250 µs during each measured round"
    } else {
        "off (the default; `--stall-probe on` measures them): host stalls are not measured"
    };
    let _ = writeln!(md, "- host stall probe: {probe}");
}

fn config_section(md: &mut String, options: &Options) {
    md.push_str("\n## wheel config\n\n");
    let source = options
        .config_file
        .as_ref()
        .map_or("defaults".to_string(), |p| p.display().to_string());
    let config = serde_json::to_string_pretty(&options.config).unwrap_or_default();
    let _ = writeln!(md, "From {source}:\n\n```json\n{config}\n```\n");
}

fn systems_section(md: &mut String, options: &Options) {
    md.push_str("## Systems\n\n");
    let mut systems = vec![systems::wheel()];
    systems.extend(options.peers.iter().map(|p| p.system()));
    for system in &systems {
        let _ = writeln!(md, "- **{}**: {}", system.name(), system.method());
    }
}

fn notes_section(md: &mut String, results: &[RunResult]) {
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
            let _ = writeln!(md, "- {}: {note}", run_label(run));
        }
    }
    for problem in problems(results) {
        let _ = writeln!(md, "- **PROBLEM** {problem}");
    }
    md.push('\n');
}

fn files_section(md: &mut String, files: &[String]) {
    md.push_str("## Files\n\n");
    for file in files.iter().filter(|f| f.ends_with(".svg")) {
        let _ = writeln!(md, "![{file}]({file})\n");
    }
    for file in files.iter().filter(|f| !f.ends_with(".svg")) {
        let _ = writeln!(md, "- [{file}]({file})");
    }
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
- CPU time is each thread's schedstat run time over the measured round, by role, and per
  timer scheduled (`ns/timer` columns; results.json `cpu.*_ns_per_timer`):
  - *producer*: the scheduling threads, read by each thread itself from its first schedule to
    its last follow-up, so cancels (`rpc`) and reschedules (`heartbeat`) are in it, and so is
    the harness's own work per timer (drawing the delay, making the task, a clock read every
    64 timers); Netty's is its main thread's, from the JVM.
  - *tick*: the threads that keep time, by thread name (wheel: `wheel-tick-*`); for the peers
    whose callbacks run on those same threads (every peer here), callbacks included.
  - *exec*: the threads that run callbacks when they are others (wheel: `wheel-exec-*`);
    `inline` where they are the timer threads.
  - *wake floor*: what this machine charges the tick and exec threads for their sleeps, per
    timer: each sleep of a timer thread (its voluntary context switches over the round) at
    the price of a timed sleep, each of an executor thread at the price of a wake-up by
    another thread, both sides, the prices measured at the start of the run (see the
    machine section). On a VM a vCPU that halts and is woken exits to the hypervisor, so
    these prices are several times a bare machine's, and a service that sleeps every tick
    pays them whatever it does: the tick and exec columns less this one are the service's
    own work. An estimate: a voluntary switch can also be a wait for a lock.
- Host stalls (`--stall-probe on`; off by default, see below): during each measured round a
  watcher thread pinned to each vCPU (`bench-watch-N`) sleeps to every 250 µs boundary and
  notes how late it wakes. A late wake-up is either the vCPU not running (the host stopped
  it, or the guest kernel held interrupts off: every thread on it is late by as much, the
  service's callbacks included) or the guest kernel running other threads on that CPU first
  (the watcher's own run-queue wait, from its schedstat, tells how much). The watchers run at
  the lowest real-time priority where the kernel allows it (*watched* says how many did), so
  they do not wait behind the bench's or the service's threads: at normal priority a stall
  that came while a watcher waited for its CPU was booked as that wait, and a busy round's
  stalls went largely unseen. *stall max* is the
  latest wake-up less that wait, over all vCPUs; the `host stalls` table adds the stalls
  over 200 µs, the time lost in them, the late wake-ups that were run-queue waits (not
  stalls) and the kernel's steal time over the round. Compare a run's lateness tail with its
  stall max: a p99.99 or max about as long as the longest stall is the machine's, not the
  service's (*p99.99 past it* is the difference). Stalls also come two or three in a row, and
  a timer held up by each is late by their sum: *worst 10 ms* is the most stall time one vCPU
  lost within any 10 ms, the figure to hold a tail against when it exceeds the stall max.
  A stall can read up to 250 µs short (it is
  measured from the boundary the watcher slept to, not from its start), so the stall max is
  a lower bound. Earlier reports came from one spinning `SCHED_IDLE` thread, which ran only
  on an idle CPU: it saw no stall while the bench kept both vCPUs busy, and kept a vCPU busy
  itself.
  - Beside the watchers a thread (`bench-sleeper`) sleeps to every millisecond boundary at
    normal priority, as a timer thread does, and notes how late it wakes (*sleeper p99.9*,
    *sleeper max*). Host stalls delay it, and so does the guest kernel when the bench's and
    the service's threads keep every CPU busy: its lateness is what any thread that sleeps
    until a deadline meets on this machine under this load. A service's tail near the
    sleeper's is the machine's; the tail beyond it is the service's own.
  - The sleeper hands each boundary it woke for to a third thread (`bench-relay`), asleep on
    a channel, which notes how late the boundary reached it (*relay p99.9*, *relay max*): two
    wake-ups in a row, as in a service whose timer thread wakes the thread that runs the
    callback (wheel's tick thread and worker, Netty's worker and executor). A two-hop
    service's tail near the relay's is the machine's.
  - Why it is off by default: its threads wake about 10 000 times a second on a 2-core machine
    and take their CPUs from the service for a few microseconds each time. On the 2-core AMD
    VM, three alternated pairs at 10 M timers gave wheel a p99 of 1.41 / 1.36 / 1.35 ms with
    the probe against 1.27 / 1.23 / 1.27 ms without. Use `--stall-probe on` to tell stalls
    from lateness, and a run without it for cost and the p99.
- `cargo xtask bench` runs every system in its own child process (`--in-process` turns that
  off), so no run inherits another's heap, threads or runtimes.
- `slow` is capped so its blocking callbacks need at most a quarter of the executor threads'
  time; `rpc` cancels 90 % of timers one batch after scheduling them; `heartbeat` postpones
  every timer 3 times (to now + its delay) and measures lateness from the last deadline.
";
