//! The one driver every in-process system runs under: producer threads schedule (and cancel or
//! reschedule) the scenario's timers, then the driver waits for the callbacks and gathers the
//! figures. Everything here is the same for every system, so the systems differ only in what
//! they do inside [`Timers`].

use std::time::{Duration, Instant};

use crate::harness::plan::Plan;
use crate::harness::probe::{RunGuard, Samples};
use crate::harness::producer::{produce_all, Totals};
use crate::harness::result::{CpuFigures, MemoryFigures, RunResult};
use crate::harness::scenario::Scenario;
use crate::harness::task::SLOW_BLOCK;
use crate::harness::timers::{OwnCounts, ThreadRoles, Timers};
use crate::host::proc;
use crate::host::stalls::StallProbe;

/// How long past the last deadline the driver waits for callbacks before it gives up.
const GRACE: Duration = Duration::from_secs(30);
/// How often the driver looks at the progress of callbacks.
const POLL: Duration = Duration::from_millis(20);
/// With no count to wait for, callbacks are done once none ran for this long past the last
/// deadline.
const QUIET_PERIOD: Duration = Duration::from_millis(500);

/// Runs `plan` on a fresh `T`: its warm-up rounds, then the measured round.
pub fn drive<T: Timers>(plan: &Plan<'_>) -> Result<RunResult, String> {
    let mut guard = RunGuard::start(plan.timers as usize, plan.scenario == Scenario::Heartbeat);
    let system = T::start(plan.config, &guard.handle())?;
    let mut result = RunResult::new(
        T::NAME,
        plan.scenario,
        plan.timers,
        plan.spread,
        plan.producers,
    );
    if plan.scenario == Scenario::Idle {
        idle(system, plan, guard, &mut result);
        return Ok(result);
    }
    // Read before any round: B/timer is what the measured round's pending timers hold over
    // the started, empty system. Read after a warm-up it would be near zero (the pages are
    // already resident), which says nothing about the footprint.
    let rss_before = proc::memory().rss;
    warm_up(&system, plan, &mut guard, &mut result);
    measure(system, plan, guard, rss_before, &mut result);
    Ok(result)
}

/// Runs the plan's warm-up rounds on `system`: the same timers, spread, scenario and
/// producers, unmeasured. What a round leaves behind is the point — tables and rings grown
/// to size, the allocator's pages faulted in — but none of its timers, commands or samples:
/// each round waits until the system holds none of its timers and every callback has
/// recorded (and a blocking one has returned) before the probe moves to the next round.
fn warm_up<T: Timers>(system: &T, plan: &Plan<'_>, guard: &mut RunGuard, result: &mut RunResult) {
    for round in 1..=plan.warmup_rounds {
        let label = format!(
            "{} {} warm-up {round}/{}",
            T::NAME,
            plan.scenario,
            plan.warmup_rounds
        );
        let totals = produce_all(system, plan, &guard.handle(), &label);
        if !wait_for_callbacks(system, guard, &totals, plan, &label) {
            result
                .problems
                .push(format!("warm-up round {round}: {}", missing()));
        }
        std::thread::sleep(SLOW_BLOCK);
        guard.next_round();
    }
}

/// The measured round: every figure is its own (the probe's samples since the last
/// [`RunGuard::next_round`], CPU, wake-ups and the system's counts as differences of
/// snapshots, peak RSS reset at its start, host stalls watched from its first schedule to its
/// last callback), except B/timer's baseline (see [`drive`]).
fn measure<T: Timers>(
    system: T,
    plan: &Plan<'_>,
    guard: RunGuard,
    rss_before: u64,
    result: &mut RunResult,
) {
    let before = Snapshot::take(&system);
    if !proc::reset_peak_memory() {
        result
            .notes
            .push("peak RSS is the process's peak (clear_refs refused)".into());
    }
    let label = format!("{} {}", T::NAME, plan.scenario);
    let stalls = plan.stall_probe.then(StallProbe::start);
    let started = Instant::now();
    let totals = produce_all(&system, plan, &guard.handle(), &label);
    let rss_scheduled = proc::memory().rss;
    let fired_then = guard.fired();
    let finished_waiting = wait_for_callbacks(&system, &guard, &totals, plan, &label);
    result.wall_secs = started.elapsed().as_secs_f64();
    result.host_stalls = stalls.map(StallProbe::finish);
    let after = Snapshot::take(&system);
    let roles = system.threads();
    let finished = system.finish();
    let peak_rss = proc::memory().peak;
    let samples = guard.finish();

    result.throughput = totals.throughput();
    result.memory = Some(memory_figures(
        rss_before,
        rss_scheduled,
        peak_rss,
        &totals,
        fired_then,
    ));
    set_usage(result, &before, &after, roles);
    result.cpu.producer_ns = totals.producer_cpu_ns;
    result.cpu.set_per_timer(totals.scheduled);
    if !finished_waiting {
        result.problems.push(missing());
    }
    let own = finished.counts.since(before.own);
    count(result, &totals, &samples, finished.unfired, own.cancelled);
    check_own_counts(result, own);
    result.problems.extend(finished.problems);
    let blocked = (plan.scenario == Scenario::Slow).then(|| samples.blocked.clone());
    result.set_lateness(samples.lateness, blocked);
}

/// The `idle` scenario: start the system, schedule nothing, and watch it for `idle_for`.
fn idle<T: Timers>(system: T, plan: &Plan<'_>, guard: RunGuard, result: &mut RunResult) {
    let before = Snapshot::take(&system);
    let bar = plan
        .progress
        .timer(plan.idle_for, &format!("{} idle", T::NAME));
    std::thread::sleep(plan.idle_for);
    bar.finish_and_clear();
    let after = Snapshot::take(&system);
    let roles = system.threads();
    let finished = system.finish();
    drop(guard);
    result.wall_secs = plan.idle_for.as_secs_f64();
    set_usage(result, &before, &after, roles);
    result.problems.extend(finished.problems);
}

/// What a system's threads had used and it had counted at one moment; a round's figures are
/// the difference of two.
struct Snapshot {
    cpu: proc::ThreadTimes,
    wakeups: Option<u64>,
    own: OwnCounts,
}

impl Snapshot {
    fn take<T: Timers>(system: &T) -> Snapshot {
        Snapshot {
            cpu: proc::thread_times(),
            wakeups: system.wakeups(),
            own: system.own_counts(),
        }
    }
}

/// Fills CPU time and wake-ups between two snapshots.
fn set_usage(result: &mut RunResult, before: &Snapshot, after: &Snapshot, roles: ThreadRoles) {
    result.cpu = cpu_figures(&before.cpu, &after.cpu, roles.timer, roles.executor);
    result.wakeups = before.wakeups.zip(after.wakeups).map(|(b, a)| a - b);
}

/// Checks the system's own counts of the measured round against the probe's.
fn check_own_counts(result: &mut RunResult, own: OwnCounts) {
    let Some((fired, cancelled)) = own.counted else {
        return;
    };
    let c = result.counts;
    if fired != c.fired + c.duplicates || cancelled != c.cancelled {
        result.problems.push(format!(
            "the system counts {fired} fired / {cancelled} cancelled, the callbacks {} / {}",
            c.fired + c.duplicates,
            c.cancelled
        ));
    }
}

/// The problem reported when the driver gave up waiting for a round's callbacks.
fn missing() -> String {
    format!(
        "callbacks still missing {} s after the last deadline",
        GRACE.as_secs()
    )
}

/// Waits until the round is over: the system holds none of its timers (where it can tell)
/// and every callback the round expects has recorded (where the count is known); false if
/// it gave up. Both, because a system can let go of a timer before its callback has run.
fn wait_for_callbacks<T: Timers>(
    system: &T,
    guard: &RunGuard,
    totals: &Totals,
    plan: &Plan<'_>,
    label: &str,
) -> bool {
    let expected = totals.expected_fires();
    let bar = plan.progress.counter(
        expected.unwrap_or(totals.scheduled),
        &format!("{label}: firing"),
    );
    let give_up = totals.max_deadline + GRACE;
    let mut last = (guard.fired(), Instant::now());
    let done = loop {
        let fired = guard.fired();
        bar.set_position(fired);
        let now = Instant::now();
        if fired != last.0 {
            last = (fired, now);
        }
        let complete = match (system.outstanding(), expected) {
            (None, None) => now > totals.max_deadline && now - last.1 > QUIET_PERIOD,
            (outstanding, expected) => {
                outstanding.is_none_or(|o| o == 0) && expected.is_none_or(|e| fired >= e)
            }
        };
        if complete {
            break true;
        }
        if now > give_up {
            break false;
        }
        std::thread::sleep(POLL);
    };
    bar.finish_and_clear();
    done
}

fn memory_figures(
    rss_before: u64,
    rss_scheduled: u64,
    peak_rss: u64,
    totals: &Totals,
    fired_then: u64,
) -> MemoryFigures {
    let grown = rss_scheduled.saturating_sub(rss_before);
    MemoryFigures {
        rss_before,
        rss_scheduled,
        pending_then: totals.scheduled.saturating_sub(fired_then),
        peak_rss,
        bytes_per_timer: grown as f64 / totals.scheduled.max(1) as f64,
    }
}

/// CPU time of the timer and executor threads between two snapshots (the producers' and the
/// per-timer figures are filled in by the caller).
fn cpu_figures(
    before: &proc::ThreadTimes,
    after: &proc::ThreadTimes,
    timer: &str,
    executor: Option<&str>,
) -> CpuFigures {
    CpuFigures {
        timer_ns: after.since(before, timer),
        executor_ns: executor.map(|prefix| after.since(before, prefix)),
        threads: describe_roles(timer, executor),
        timer_sleeps: after.sleeps_since(before, timer),
        executor_sleeps: executor.and_then(|prefix| after.sleeps_since(before, prefix)),
        ..CpuFigures::default()
    }
}

fn describe_roles(timer: &str, executor: Option<&str>) -> String {
    match executor {
        Some(executor) => format!("timer: {timer}*, callbacks: {executor}*"),
        None => format!("{timer}* (callbacks run there too)"),
    }
}

/// Fills the counts and checks them: every timer fired or was cancelled exactly once.
fn count(
    result: &mut RunResult,
    totals: &Totals,
    samples: &Samples,
    unfired: u64,
    async_cancelled: Option<u64>,
) {
    let counts = &mut result.counts;
    counts.scheduled = totals.scheduled;
    counts.rejected = totals.rejected;
    counts.fired = samples.seen.count();
    counts.duplicates = samples.duplicates;
    counts.early = samples.early;
    counts.unfired = unfired;
    counts.cancel_calls = totals.cancel_calls;
    counts.reschedule_calls = totals.reschedule_calls;
    counts.rescheduled = totals.reschedules_done;
    counts.cancelled = totals.cancels_done
        + match async_cancelled {
            Some(cancelled) => cancelled,
            None if totals.cancels_queued > 0 => {
                result.notes.push("cancels are asynchronous and not counted by the system: cancelled = scheduled - fired - unfired".into());
                totals
                    .scheduled
                    .saturating_sub(counts.fired + unfired + totals.cancels_done)
            }
            None => 0,
        };
    if totals.reschedules_queued > 0 {
        counts.rescheduled += totals.reschedules_queued;
        result
            .notes
            .push("reschedules are asynchronous: counted as requested".into());
    }
    if let Some(error) = &totals.first_error {
        result.problems.push(format!(
            "{} schedules refused, first: {error}",
            totals.rejected
        ));
    }
    let ran_after_cancel = totals
        .cancelled
        .as_ref()
        .map_or(0, |set| set.overlap(&samples.seen));
    if ran_after_cancel > 0 {
        result.problems.push(format!(
            "{ran_after_cancel} timers ran although cancel returned true"
        ));
    }
    if samples.strays > 0 {
        result.notes.push(format!(
            "{} callbacks ran outside the run (after it ended)",
            samples.strays
        ));
    }
    result.check_counts();
}
