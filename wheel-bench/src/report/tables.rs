//! The tables a run prints and puts in report.md, built from its results.

use crate::harness::result::{RunResult, Skipped};
use crate::harness::scenario::Scenario;
use crate::host::stalls::HostStalls;
use crate::options::Options;
use crate::report::format::{bytes_text, count_text, nanos_text, rate_text, ratio_text};
use crate::report::table::Table;

/// Every table of the run, in print order.
pub(crate) fn all_tables(
    options: &Options,
    results: &[RunResult],
    skipped: &[Skipped],
) -> Vec<Table> {
    let mut tables: Vec<Table> = options
        .scenarios
        .iter()
        .flat_map(|s| scenario_tables(*s, results, options.peer_timers))
        .collect();
    tables.extend(skipped_table(skipped));
    tables
}

/// Every table for `scenario`: all its runs, then (when peers ran) the side-by-side at
/// `peer_timers` with ratios to wheel, then blocked callbacks for `slow`.
pub fn scenario_tables(scenario: Scenario, results: &[RunResult], peer_timers: u64) -> Vec<Table> {
    let mut runs: Vec<&RunResult> = results.iter().filter(|r| r.scenario == scenario).collect();
    // wheel first, biggest run first; peers keep their order.
    runs.sort_by_key(|r| (r.system != "wheel", std::cmp::Reverse(r.timers)));
    if runs.is_empty() {
        return Vec::new();
    }
    if scenario == Scenario::Idle {
        return vec![idle_table(&runs)];
    }
    let mut tables = vec![main_table(scenario, &runs)];
    tables.extend(host_stalls_table(scenario, &runs));
    let side: Vec<&RunResult> = runs
        .iter()
        .copied()
        .filter(|r| r.timers == side_size(&runs, peer_timers))
        .collect();
    if side.iter().any(|r| r.system != "wheel") {
        if let Some(wheel) = side.iter().find(|r| r.system == "wheel") {
            tables.push(side_by_side(scenario, wheel, &side));
        }
    }
    if scenario == Scenario::Slow {
        tables.push(blocked_table(&runs));
    }
    tables
}

/// The size the peers ran at (the slow scenario caps it below `peer_timers`).
fn side_size(runs: &[&RunResult], peer_timers: u64) -> u64 {
    runs.iter()
        .find(|r| r.system != "wheel")
        .map_or(peer_timers, |r| r.timers)
}

fn op_rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| "–".into(), rate_text)
}

/// The follow-up operation whose rate the scenario's main table shows, if any.
fn follow_up(scenario: Scenario) -> Option<&'static str> {
    match scenario {
        Scenario::Rpc => Some("cancel/s"),
        Scenario::Heartbeat => Some("resched/s"),
        _ => None,
    }
}

/// Every run of the scenario: rates, lateness (beside the longest host stall, when the probe
/// watched), memory, CPU per timer by thread role, wake-ups and whether the counts added up.
fn main_table(scenario: Scenario, runs: &[&RunResult]) -> Table {
    let stalls = runs.iter().any(|r| r.host_stalls.is_some());
    let mut headers = vec!["system", "timers", "spread", "schedule/s"];
    headers.extend(follow_up(scenario));
    headers.extend(["p50", "p90", "p99", "p99.9", "p99.99", "max"]);
    if stalls {
        headers.push("stall max");
    }
    headers.extend([
        "peak RSS",
        "B/timer",
        "prod ns/timer",
        "tick ns/timer",
        "exec ns/timer",
        "wake floor",
        "wake-ups",
        "counts",
    ]);
    let mut table = Table::new(format!("{scenario}: {}", scenario.describe()), &headers);
    for run in runs {
        let mut row = vec![
            run.system.clone(),
            count_text(run.timers),
            humantime::format_duration(run.spread).to_string(),
            op_rate(run.throughput.schedule_per_sec),
        ];
        match scenario {
            Scenario::Rpc => row.push(op_rate(run.throughput.cancel_per_sec)),
            Scenario::Heartbeat => row.push(op_rate(run.throughput.reschedule_per_sec)),
            _ => {}
        }
        row.extend(lateness_cells(run));
        if stalls {
            row.push(
                run.host_stalls
                    .map_or("–".into(), |s| nanos_text(s.longest_ns)),
            );
        }
        row.extend(memory_cells(run));
        row.extend(cpu_per_timer_cells(run));
        row.push(run.wakeups.map_or("–".into(), |w| w.to_string()));
        row.push(if run.problems.is_empty() {
            "ok".into()
        } else {
            "FAIL".into()
        });
        table.push(row);
    }
    table
}

/// p50 … max of the lateness.
fn lateness_cells(run: &RunResult) -> [String; 6] {
    let l = run.lateness;
    [
        l.p50_ns, l.p90_ns, l.p99_ns, l.p999_ns, l.p9999_ns, l.max_ns,
    ]
    .map(nanos_text)
}

/// Peak RSS and bytes per timer.
fn memory_cells(run: &RunResult) -> [String; 2] {
    match run.memory {
        Some(m) => [bytes_text(m.peak_rss), format!("{:.1}", m.bytes_per_timer)],
        None => ["–".into(), "–".into()],
    }
}

/// CPU ns per timer of the producer, tick and executor threads, and the machine's price of
/// the tick and executor threads' sleeps.
fn cpu_per_timer_cells(run: &RunResult) -> [String; 4] {
    let cpu = &run.cpu;
    let executor = match (cpu.executor_ns, cpu.executor_ns_per_timer) {
        (None, _) => "inline".to_string(),
        (Some(_), per_timer) => per_timer_text(per_timer),
    };
    [
        per_timer_text(cpu.producer_ns_per_timer),
        per_timer_text(cpu.tick_ns_per_timer),
        executor,
        per_timer_text(cpu.wake_floor_ns_per_timer),
    ]
}

/// A per-timer cost: "312", or "n/a" where it could not be measured.
fn per_timer_text(ns: Option<f64>) -> String {
    ns.map_or("n/a".into(), |ns| format!("{ns:.0}"))
}

/// What the host stall probe saw in each run, beside the lateness tail it may explain: a
/// callback on a stopped vCPU starts late by the whole stall.
fn host_stalls_table(scenario: Scenario, runs: &[&RunResult]) -> Option<Table> {
    if runs.iter().all(|r| r.host_stalls.is_none()) {
        return None;
    }
    let mut table = Table::new(
        format!("{scenario}: host stalls during each measured round, beside the lateness tail"),
        &[
            "system",
            "timers",
            "p99.99",
            "max",
            "stall max",
            "p99.99 past it",
            "worst 10 ms",
            "stalls >200µs",
            "lost",
            "steal",
            "probe preempted",
            "sleeper p99.9",
            "sleeper max",
            "relay p99.9",
            "relay max",
            "watched",
        ],
    );
    for run in runs {
        let Some(s) = run.host_stalls else {
            continue;
        };
        table.push(vec![
            run.system.clone(),
            count_text(run.timers),
            nanos_text(run.lateness.p9999_ns),
            nanos_text(run.lateness.max_ns),
            nanos_text(s.longest_ns),
            nanos_text(run.lateness.p9999_ns.saturating_sub(s.longest_ns)),
            nanos_text(s.worst_10ms_ns),
            s.gaps_over_200us.to_string(),
            nanos_text(s.lost_ns),
            s.steal_ns.map_or("–".into(), nanos_text),
            format!("{} ({})", s.preempted_gaps, nanos_text(s.preempted_ns)),
            sleeper_text(s.sleeper_wakes, s.sleeper_p999_ns),
            sleeper_text(s.sleeper_wakes, s.sleeper_max_ns),
            sleeper_text(s.sleeper_wakes, s.relay_p999_ns),
            sleeper_text(s.sleeper_wakes, s.relay_max_ns),
            watched_text(&s),
        ]);
    }
    Some(table)
}

/// How long the probe watched, and how many of its watchers ran at real-time priority.
fn watched_text(s: &HostStalls) -> String {
    let observed = nanos_text(s.observed_ns);
    if s.realtime_watchers == 0 {
        observed
    } else {
        format!("{observed} ({} real-time)", s.realtime_watchers)
    }
}

/// A figure of the sleeper's, or "–" where no sleeper ran.
fn sleeper_text(wakes: u64, ns: u64) -> String {
    if wakes == 0 {
        "–".into()
    } else {
        nanos_text(ns)
    }
}

fn side_by_side(scenario: Scenario, wheel: &RunResult, runs: &[&RunResult]) -> Table {
    let headers = [
        "system",
        "schedule/s",
        "p50",
        "p99",
        "p99.99",
        "max",
        "B/timer",
        "CPU total",
    ];
    let title = format!(
        "{scenario} side by side at {} timers over {}: each figure and its ratio to wheel",
        count_text(wheel.timers),
        humantime::format_duration(wheel.spread)
    );
    let mut table = Table::new(title, &headers);
    let cpu_total = |r: &RunResult| (r.cpu.timer_ns + r.cpu.executor_ns.unwrap_or(0)) as f64;
    for run in runs {
        let with_ratio =
            |text: String, value: f64, base: f64| format!("{text} ({})", ratio_text(value, base));
        let rate = |r: &RunResult| r.throughput.schedule_per_sec.unwrap_or(0.0);
        let ns = |get: fn(&RunResult) -> u64| {
            with_ratio(nanos_text(get(run)), get(run) as f64, get(wheel) as f64)
        };
        let bytes = match (run.memory, wheel.memory) {
            (Some(m), Some(w)) => with_ratio(
                format!("{:.1}", m.bytes_per_timer),
                m.bytes_per_timer,
                w.bytes_per_timer,
            ),
            _ => "–".into(),
        };
        table.push(vec![
            run.system.clone(),
            with_ratio(
                op_rate(run.throughput.schedule_per_sec),
                rate(run),
                rate(wheel),
            ),
            ns(|r| r.lateness.p50_ns),
            ns(|r| r.lateness.p99_ns),
            ns(|r| r.lateness.p9999_ns),
            ns(|r| r.lateness.max_ns),
            bytes,
            with_ratio(
                nanos_text(cpu_total(run) as u64),
                cpu_total(run),
                cpu_total(wheel),
            ),
        ]);
    }
    table
}

fn blocked_table(runs: &[&RunResult]) -> Table {
    let mut table = Table::new(
        "slow: lateness of the blocking callbacks themselves",
        &["system", "timers", "blocking", "p50", "p99", "max"],
    );
    for run in runs {
        if let Some(b) = run.blocked_lateness {
            table.push(vec![
                run.system.clone(),
                count_text(run.timers),
                b.count.to_string(),
                nanos_text(b.p50_ns),
                nanos_text(b.p99_ns),
                nanos_text(b.max_ns),
            ]);
        }
    }
    table
}

fn idle_table(runs: &[&RunResult]) -> Table {
    let mut table = Table::new(
        format!("idle: {}", Scenario::Idle.describe()),
        &[
            "system",
            "idle for",
            "CPU timer",
            "CPU exec",
            "wake-ups",
            "wake-ups/s",
        ],
    );
    for run in runs {
        let per_sec = run.wakeups.map_or("–".into(), |w| {
            format!("{:.1}", w as f64 / run.wall_secs.max(1e-9))
        });
        table.push(vec![
            run.system.clone(),
            format!("{:.1} s", run.wall_secs),
            nanos_text(run.cpu.timer_ns),
            run.cpu.executor_ns.map_or("(inline)".into(), nanos_text),
            run.wakeups.map_or("–".into(), |w| w.to_string()),
            per_sec,
        ]);
    }
    table
}

/// The skipped systems as a table (empty when none were).
fn skipped_table(skipped: &[Skipped]) -> Option<Table> {
    if skipped.is_empty() {
        return None;
    }
    let mut table = Table::new("skipped", &["system", "scenario", "reason"]);
    for s in skipped {
        table.push(vec![
            s.system.clone(),
            s.scenario.to_string(),
            s.reason.clone(),
        ]);
    }
    Some(table)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::harness::result::MemoryFigures;

    fn run(system: &str, timers: u64, rate: f64, p99: u64) -> RunResult {
        let mut r = RunResult::new(system, Scenario::Fire, timers, Duration::from_secs(1), 1);
        r.throughput.schedule_per_sec = Some(rate);
        r.lateness.p99_ns = p99;
        r.memory = Some(MemoryFigures {
            bytes_per_timer: 50.0,
            ..MemoryFigures::default()
        });
        r
    }

    #[test]
    fn side_by_side_gives_ratios_to_wheel() {
        let results = vec![
            run("wheel", 10_000_000, 10e6, 1_000_000),
            run("wheel", 1_000_000, 10e6, 1_000_000),
            run("binary-heap", 1_000_000, 2e6, 3_000_000),
        ];
        let tables = scenario_tables(Scenario::Fire, &results, 1_000_000);
        assert_eq!(tables.len(), 2);
        assert_eq!(tables[0].rows.len(), 3);
        let side = &tables[1];
        assert_eq!(side.rows.len(), 2);
        assert_eq!(side.rows[1][1], "2.00 M/s (×0.20)");
        assert_eq!(side.rows[1][3], "3.00 ms (×3.00)");
    }

    #[test]
    fn wheel_alone_has_no_side_by_side() {
        let results = vec![run("wheel", 100_000, 10e6, 1_000_000)];
        assert_eq!(scenario_tables(Scenario::Fire, &results, 100_000).len(), 1);
        assert!(scenario_tables(Scenario::Rpc, &results, 100_000).is_empty());
    }

    #[test]
    fn main_table_shows_cost_per_timer_by_role_and_the_longest_stall() {
        let mut wheel = run("wheel", 100_000, 10e6, 1_000_000);
        wheel.cpu.executor_ns = Some(1);
        wheel.cpu.producer_ns_per_timer = Some(95.4);
        wheel.cpu.tick_ns_per_timer = Some(40.0);
        wheel.cpu.executor_ns_per_timer = Some(120.0);
        wheel.cpu.wake_floor_ns_per_timer = Some(61.6);
        wheel.host_stalls = Some(HostStalls {
            longest_ns: 7_500_000,
            gaps_over_200us: 3,
            lost_ns: 9_000_000,
            worst_10ms_ns: 8_250_000,
            ..HostStalls::default()
        });
        wheel.lateness.p9999_ns = 9_000_000;
        let mut heap = run("binary-heap", 100_000, 2e6, 3_000_000);
        heap.cpu.tick_ns_per_timer = Some(700.0);
        let tables = scenario_tables(Scenario::Fire, &[wheel, heap], 100_000);
        let main = &tables[0];
        let cell = |row: usize, header: &str| {
            let column = main.headers.iter().position(|h| h == header).unwrap();
            main.rows[row][column].clone()
        };
        assert_eq!(cell(0, "prod ns/timer"), "95");
        assert_eq!(cell(0, "tick ns/timer"), "40");
        assert_eq!(cell(0, "exec ns/timer"), "120");
        assert_eq!(cell(0, "wake floor"), "62");
        assert_eq!(cell(0, "stall max"), "7.50 ms");
        assert_eq!(cell(1, "prod ns/timer"), "n/a");
        assert_eq!(cell(1, "tick ns/timer"), "700");
        assert_eq!(cell(1, "exec ns/timer"), "inline");
        assert_eq!(cell(1, "wake floor"), "n/a");
        assert_eq!(cell(1, "stall max"), "–");
        // The stall column sits right after the lateness max.
        let max = main.headers.iter().position(|h| h == "max").unwrap();
        assert_eq!(main.headers[max + 1], "stall max");
        let stalls = tables
            .iter()
            .find(|t| t.title.contains("host stalls"))
            .expect("a host stalls table");
        let unwatched = [run("wheel", 100_000, 10e6, 1_000_000)];
        let tables = scenario_tables(Scenario::Fire, &unwatched, 100_000);
        assert!(!tables[0].headers.iter().any(|h| h == "stall max"));
        assert!(!tables.iter().any(|t| t.title.contains("host stalls")));
        assert_eq!(stalls.rows.len(), 1, "only the runs the probe watched");
        // How far the lateness tail reaches past the longest stall.
        assert_eq!(stalls.rows[0][2], "9.00 ms");
        assert_eq!(stalls.rows[0][4], "7.50 ms");
        assert_eq!(stalls.headers[5], "p99.99 past it");
        assert_eq!(stalls.rows[0][5], "1.50 ms");
        assert_eq!(stalls.headers[6], "worst 10 ms");
        assert_eq!(stalls.rows[0][6], "8.25 ms");
        assert_eq!(stalls.rows[0][7], "3");
        assert_eq!(stalls.rows[0][8], "9.00 ms");
    }
}
