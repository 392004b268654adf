//! Producer threads: each schedules its share of the timers in batches, and follows each batch
//! up as the scenario says (cancel 90 % of it, or postpone it three times). Every operation is
//! timed per batch, so the clock costs two reads per 1024 calls.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use crate::harness::bitset::Bitset;
use crate::harness::delays::Draws;
use crate::harness::plan::Plan;
use crate::harness::probe::{nanos, nanos_since, RunHandle};
use crate::harness::result::Throughput;
use crate::harness::scenario::{
    Scenario, HEARTBEAT_RESCHEDULES, RPC_CANCEL_PER_10000, SLOW_PER_10000,
};
use crate::harness::task::Task;
use crate::harness::timers::{Outcome, Timers};
use crate::host::proc;

/// Timers scheduled between two follow-ups (and timed together).
const BATCH: u32 = 1024;
/// Timers scheduled between two reads of the clock for their deadlines.
const CLOCK_EVERY: u32 = 64;

/// What all producers did, added up.
#[derive(Debug)]
pub struct Totals {
    pub scheduled: u64,
    pub rejected: u64,
    pub first_error: Option<String>,
    pub cancel_calls: u64,
    pub cancels_done: u64,
    pub cancels_queued: u64,
    pub reschedule_calls: u64,
    pub reschedules_done: u64,
    pub reschedules_queued: u64,
    /// Timers whose cancel returned [`Outcome::Done`] (rpc only).
    pub cancelled: Option<Bitset>,
    /// The latest deadline any timer was given.
    pub max_deadline: Instant,
    pub schedule_rate: Option<f64>,
    pub cancel_rate: Option<f64>,
    pub reschedule_rate: Option<f64>,
    /// CPU time of the producer threads from their first schedule to their last follow-up,
    /// added up (`None` where a thread's could not be read).
    pub producer_cpu_ns: Option<u64>,
}

impl Totals {
    /// Callbacks the run must see, when every cancel was synchronous.
    pub fn expected_fires(&self) -> Option<u64> {
        (self.cancels_queued == 0).then(|| self.scheduled - self.cancels_done)
    }

    /// Throughput of each operation, summed over producers.
    pub fn throughput(&self) -> Throughput {
        Throughput {
            schedule_per_sec: self.schedule_rate,
            cancel_per_sec: self.cancel_rate,
            reschedule_per_sec: self.reschedule_rate,
        }
    }
}

/// One producer's tallies.
struct Tally {
    scheduled: u64,
    rejected: u64,
    first_error: Option<String>,
    schedule_time: Duration,
    cancel: Ops,
    reschedule: Ops,
    cancelled: Option<Bitset>,
    max_deadline: Instant,
    /// This thread's CPU time over its share.
    cpu_ns: Option<u64>,
}

#[derive(Default)]
struct Ops {
    calls: u64,
    done: u64,
    queued: u64,
    time: Duration,
}

impl Ops {
    fn note(&mut self, outcome: Outcome) -> bool {
        self.calls += 1;
        match outcome {
            Outcome::Done => self.done += 1,
            Outcome::Queued => self.queued += 1,
            Outcome::TooLate => {}
        }
        outcome == Outcome::Done
    }
}

/// A scheduled timer the producer will come back to.
struct Kept<Id> {
    id: Id,
    index: u32,
    delay: Duration,
}

/// A batch waiting for its follow-ups, and how many it has had.
struct FollowUp<Id> {
    rounds: usize,
    timers: Vec<Kept<Id>>,
}

/// Runs `plan.producers` producer threads over `system` and adds up what they did; `label`
/// names the round on the progress bar.
pub fn produce_all<T: Timers>(system: &T, plan: &Plan<'_>, run: &RunHandle, label: &str) -> Totals {
    let bar = plan
        .progress
        .counter(plan.timers, &format!("{label}: scheduling"));
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.producers)
            .map(|p| {
                let range = share(plan.timers, plan.producers, p);
                let bar = bar.clone();
                std::thread::Builder::new()
                    .name(format!("bench-prod-{p}"))
                    .spawn_scoped(scope, move || produce(system, plan, p, range, run, &bar))
                    .expect("spawn a producer thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("producer thread panicked"))
            .collect()
    });
    bar.finish_and_clear();
    add_up(tallies, plan.timers as usize)
}

/// Producer `p`'s timer indices out of `timers` shared by `producers`.
fn share(timers: u64, producers: usize, p: usize) -> Range<u32> {
    let bound = |i: usize| (timers * i as u64 / producers as u64) as u32;
    bound(p)..bound(p + 1)
}

fn produce<T: Timers>(
    system: &T,
    plan: &Plan<'_>,
    producer: usize,
    range: Range<u32>,
    run: &RunHandle,
    bar: &ProgressBar,
) -> Tally {
    let cpu_before = proc::this_thread_cpu_ns();
    let mut draws = Draws::new(plan.seed, producer as u64, plan.spread);
    let mut tally = Tally {
        scheduled: 0,
        rejected: 0,
        first_error: None,
        schedule_time: Duration::ZERO,
        cancel: Ops::default(),
        reschedule: Ops::default(),
        cancelled: (plan.scenario == Scenario::Rpc).then(|| Bitset::new(plan.timers as usize)),
        max_deadline: Instant::now(),
        cpu_ns: None,
    };
    let mut pending: VecDeque<FollowUp<T::Id>> = VecDeque::new();
    let mut start = range.start;
    while start < range.end {
        let end = range.end.min(start.saturating_add(BATCH));
        let kept = schedule_batch(
            system,
            plan.scenario,
            &mut draws,
            start..end,
            run,
            &mut tally,
        );
        follow_up(system, plan.scenario, &mut pending, run, &mut tally);
        if !kept.is_empty() {
            pending.push_back(FollowUp {
                rounds: 0,
                timers: kept,
            });
        }
        bar.inc(u64::from(end - start));
        start = end;
    }
    while !pending.is_empty() {
        follow_up(system, plan.scenario, &mut pending, run, &mut tally);
    }
    tally.cpu_ns = cpu_before
        .zip(proc::this_thread_cpu_ns())
        .map(|(before, after)| after.saturating_sub(before));
    tally
}

/// A producer's clock reading, taken again every [`CLOCK_EVERY`] timers: as an `Instant` for
/// the system's deadlines, and in nanoseconds since the run's epoch for the tasks', so that
/// each timer's task deadline costs an addition, as in the Java harness, not a subtraction of
/// two `Instant`s (a call into std).
struct Reading {
    epoch: Instant,
    at: Instant,
    ns: u64,
}

impl Reading {
    fn now(epoch: Instant) -> Reading {
        let at = Instant::now();
        Reading {
            epoch,
            at,
            ns: nanos_since(epoch, at),
        }
    }

    /// Reads the clock again before the `i`th timer of a batch when a reading is due.
    fn refresh_before(&mut self, i: u32) {
        if i.is_multiple_of(CLOCK_EVERY) {
            *self = Reading::now(self.epoch);
        }
    }

    /// `delay` after this reading: the `Instant`, and its nanoseconds since the epoch.
    fn after(&self, delay: Duration) -> (Instant, u64) {
        (self.at + delay, self.ns.saturating_add(nanos(delay)))
    }
}

/// Schedules timers `indices`; returns those the scenario comes back to.
fn schedule_batch<T: Timers>(
    system: &T,
    scenario: Scenario,
    draws: &mut Draws,
    indices: Range<u32>,
    run: &RunHandle,
    tally: &mut Tally,
) -> Vec<Kept<T::Id>> {
    let mut kept = Vec::new();
    let mut now = Reading::now(run.epoch());
    let started = now.at;
    for index in indices {
        now.refresh_before(index);
        let delay = draws.delay();
        let (blocks, keep) = match scenario {
            Scenario::Slow => (draws.chance(SLOW_PER_10000), false),
            Scenario::Rpc => (false, draws.chance(RPC_CANCEL_PER_10000)),
            Scenario::Heartbeat => (false, true),
            Scenario::Fire | Scenario::Idle => (false, false),
        };
        let (deadline, deadline_ns) = now.after(delay);
        tally.max_deadline = tally.max_deadline.max(deadline);
        match system.schedule_at(deadline, Task::new(index, deadline_ns, blocks)) {
            Ok(id) if keep => kept.push(Kept { id, index, delay }),
            Ok(_) => {}
            Err(error) => {
                tally.rejected += 1;
                tally.first_error.get_or_insert(error);
                continue;
            }
        }
        tally.scheduled += 1;
    }
    tally.schedule_time += started.elapsed();
    kept
}

/// Does the scenario's follow-up on the batches waiting for one.
fn follow_up<T: Timers>(
    system: &T,
    scenario: Scenario,
    pending: &mut VecDeque<FollowUp<T::Id>>,
    run: &RunHandle,
    tally: &mut Tally,
) {
    match scenario {
        Scenario::Rpc => {
            if let Some(batch) = pending.pop_front() {
                cancel_batch(system, &batch.timers, tally);
            }
        }
        Scenario::Heartbeat => {
            for batch in pending.iter_mut() {
                postpone_batch(system, &batch.timers, run, tally);
                batch.rounds += 1;
            }
            pending.retain(|batch| batch.rounds < HEARTBEAT_RESCHEDULES);
        }
        Scenario::Fire | Scenario::Slow | Scenario::Idle => pending.clear(),
    }
}

fn cancel_batch<T: Timers>(system: &T, timers: &[Kept<T::Id>], tally: &mut Tally) {
    let started = Instant::now();
    for timer in timers {
        if tally.cancel.note(system.cancel(&timer.id)) {
            if let Some(set) = tally.cancelled.as_mut() {
                set.insert(timer.index as usize);
            }
        }
    }
    tally.cancel.time += started.elapsed();
}

/// Moves each timer to now + its delay, as activity on an idle-checked connection does.
fn postpone_batch<T: Timers>(
    system: &T,
    timers: &[Kept<T::Id>],
    run: &RunHandle,
    tally: &mut Tally,
) {
    let mut now = Reading::now(run.epoch());
    let started = now.at;
    for (i, timer) in timers.iter().enumerate() {
        now.refresh_before(i as u32);
        let (deadline, deadline_ns) = now.after(timer.delay);
        tally.max_deadline = tally.max_deadline.max(deadline);
        let task = Task::new(timer.index, deadline_ns, false);
        if tally
            .reschedule
            .note(system.reschedule_at(&timer.id, deadline, task))
        {
            run.set_deadline(timer.index, deadline);
        }
    }
    tally.reschedule.time += started.elapsed();
}

fn rate(ops: u64, time: Duration) -> Option<f64> {
    (ops > 0 && !time.is_zero()).then(|| ops as f64 / time.as_secs_f64())
}

fn sum_rates(rates: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    rates
        .flatten()
        .fold(None, |sum, r| Some(sum.unwrap_or(0.0) + r))
}

fn add_up(tallies: Vec<Tally>, timers: usize) -> Totals {
    let schedule_rate = sum_rates(tallies.iter().map(|t| rate(t.scheduled, t.schedule_time)));
    let cancel_rate = sum_rates(tallies.iter().map(|t| rate(t.cancel.calls, t.cancel.time)));
    let reschedule_rate = sum_rates(
        tallies
            .iter()
            .map(|t| rate(t.reschedule.calls, t.reschedule.time)),
    );
    let producer_cpu_ns = tallies.iter().map(|t| t.cpu_ns).sum();
    let mut totals = Totals {
        scheduled: 0,
        rejected: 0,
        first_error: None,
        cancel_calls: 0,
        cancels_done: 0,
        cancels_queued: 0,
        reschedule_calls: 0,
        reschedules_done: 0,
        reschedules_queued: 0,
        cancelled: None,
        max_deadline: Instant::now(),
        schedule_rate,
        cancel_rate,
        reschedule_rate,
        producer_cpu_ns,
    };
    for tally in tallies {
        totals.scheduled += tally.scheduled;
        totals.rejected += tally.rejected;
        totals.first_error = totals.first_error.or(tally.first_error);
        totals.cancel_calls += tally.cancel.calls;
        totals.cancels_done += tally.cancel.done;
        totals.cancels_queued += tally.cancel.queued;
        totals.reschedule_calls += tally.reschedule.calls;
        totals.reschedules_done += tally.reschedule.done;
        totals.reschedules_queued += tally.reschedule.queued;
        totals.max_deadline = totals.max_deadline.max(tally.max_deadline);
        if let Some(set) = tally.cancelled {
            let merged = totals.cancelled.get_or_insert_with(|| Bitset::new(timers));
            merged.union_counting_overlap(&set);
        }
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_added_in_nanoseconds_is_the_instants_own() {
        let epoch = Instant::now();
        std::thread::sleep(Duration::from_millis(1));
        let mut draws = Draws::new(3, 0, Duration::from_secs(10));
        for _ in 0..10_000 {
            let (deadline, deadline_ns) = Reading::now(epoch).after(draws.delay());
            assert_eq!(
                deadline_ns,
                nanos_since(epoch, deadline),
                "the task's deadline is the one the system is given"
            );
        }
    }

    #[test]
    fn shares_cover_every_index_once() {
        let ranges: Vec<_> = (0..3).map(|p| share(10, 3, p)).collect();
        assert_eq!(ranges, vec![0..3, 3..6, 6..10]);
    }

    #[test]
    fn rates_add_over_producers() {
        let total = sum_rates(
            [
                rate(10, Duration::from_secs(1)),
                rate(0, Duration::ZERO),
                rate(20, Duration::from_secs(2)),
            ]
            .into_iter(),
        );
        assert_eq!(total, Some(20.0));
        assert_eq!(sum_rates([None, None].into_iter()), None);
    }
}
