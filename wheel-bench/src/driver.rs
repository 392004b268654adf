//! The one driver every in-process system runs under: producer threads schedule (and cancel or
//! reschedule) the scenario's timers, then the driver waits for the callbacks and gathers the
//! figures. Everything here is the same for every system, so the systems differ only in what
//! they do inside [`Timers`].

use std::time::{Duration, Instant};

use crate::probe::{RunGuard, Samples};
use crate::proc;
use crate::producer::{produce_all, Totals};
use crate::result::{CpuFigures, MemoryFigures, RunResult};
use crate::scenario::Scenario;
use crate::systems::{Plan, Timers};

/// How long past the last deadline the driver waits for callbacks before it gives up.
const GRACE: Duration = Duration::from_secs(30);
/// How often the driver looks at the progress of callbacks.
const POLL: Duration = Duration::from_millis(20);
/// With no count to wait for, callbacks are done once none ran for this long past the last
/// deadline.
const QUIET_PERIOD: Duration = Duration::from_millis(500);

/// Runs `plan` on a fresh `T` and measures it.
pub fn drive<T: Timers>(plan: &Plan<'_>) -> Result<RunResult, String> {
    let guard = RunGuard::start(plan.timers as usize, plan.scenario == Scenario::Heartbeat);
    let cpu_before = proc::thread_times();
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
    let rss_before = proc::memory().rss;
    if !proc::reset_peak_memory() {
        result
            .notes
            .push("peak RSS is the process's peak (clear_refs refused)".into());
    }
    let wakeups_before = system.wakeups();
    let started = Instant::now();
    let totals = produce_all(&system, plan, &guard.handle());
    let rss_scheduled = proc::memory().rss;
    let fired_then = guard.fired();
    let finished_waiting = wait_for_callbacks(&system, &guard, &totals, plan);
    result.wall_secs = started.elapsed().as_secs_f64();
    let cpu_after = proc::thread_times();
    let wakeups_after = system.wakeups();
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
    result.cpu = cpu_figures(&cpu_before, &cpu_after, roles.timer, roles.executor);
    result.wakeups = wakeups_before.zip(wakeups_after).map(|(b, a)| a - b);
    if !finished_waiting {
        result.problems.push(format!(
            "callbacks still missing {} s after the last deadline",
            GRACE.as_secs()
        ));
    }
    count(
        &mut result,
        &totals,
        &samples,
        finished.unfired,
        finished.cancelled,
    );
    if let Some((fired, cancelled)) = finished.counted {
        let c = result.counts;
        if fired != c.fired + c.duplicates || cancelled != c.cancelled {
            result.problems.push(format!(
                "the system counts {fired} fired / {cancelled} cancelled, the callbacks {} / {}",
                c.fired + c.duplicates,
                c.cancelled
            ));
        }
    }
    result.problems.extend(finished.problems);
    let blocked = (plan.scenario == Scenario::Slow).then(|| samples.blocked.clone());
    result.set_lateness(samples.lateness, blocked);
    Ok(result)
}

/// The `idle` scenario: start the system, schedule nothing, and watch it for `idle_for`.
fn idle<T: Timers>(system: T, plan: &Plan<'_>, guard: RunGuard, result: &mut RunResult) {
    let cpu_before = proc::thread_times();
    let wakeups_before = system.wakeups();
    let bar = plan
        .progress
        .timer(plan.idle_for, &format!("{} idle", T::NAME));
    std::thread::sleep(plan.idle_for);
    bar.finish_and_clear();
    let cpu_after = proc::thread_times();
    let wakeups_after = system.wakeups();
    let roles = system.threads();
    let finished = system.finish();
    drop(guard);
    result.wall_secs = plan.idle_for.as_secs_f64();
    result.cpu = cpu_figures(&cpu_before, &cpu_after, roles.timer, roles.executor);
    result.wakeups = wakeups_before.zip(wakeups_after).map(|(b, a)| a - b);
    result.problems.extend(finished.problems);
}

/// Waits until every callback the run expects has run; false if it gave up.
fn wait_for_callbacks<T: Timers>(
    system: &T,
    guard: &RunGuard,
    totals: &Totals,
    plan: &Plan<'_>,
) -> bool {
    let expected = totals.expected_fires();
    let label = format!("{} {}: firing", T::NAME, plan.scenario);
    let bar = plan
        .progress
        .counter(expected.unwrap_or(totals.scheduled), &label);
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
            (Some(outstanding), _) => outstanding == 0,
            (None, Some(expected)) => fired >= expected,
            (None, None) => now > totals.max_deadline && now - last.1 > QUIET_PERIOD,
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

/// CPU time of the timer and executor threads between two snapshots.
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
