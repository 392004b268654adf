//! The body of a worker thread: take references the tick threads handed out, decide on each
//! timer's record whether it fires (`Record::claim`), run the callbacks, and put the slots of
//! ended timers back.
//!
//! A worker is the first thread to touch a timer's record after the producer wrote it. It
//! keeps references in hand ahead of the one it runs, their records prefetched as it took
//! them, so the misses of the next ones overlap the current callback instead of stalling one
//! by one; taking the next from the hand costs no locked instruction.
//!
//! A slow callback delays only itself: once a run has gone on for
//! [`STUCK_AFTER`](crate::executor::STUCK_AFTER) (a callback that blocks, or the thread
//! preempted by the kernel), what its worker holds in hand is open to the other workers
//! (`executor/hand.rs`), and a tick thread wakes a sleeping one to take it
//! (`runtime/wake_policy.rs`). The hand holds [`DEEP`] references while runs are short, enough to
//! overlap the misses (which pays at millions of timers, where nearly every record is a
//! miss); one run over [`SHORT_RUN`] drops it to [`SHALLOW`] for the next [`SHALLOW_RUNS`]
//! runs, so a service whose callbacks block now and then leaves its work in the queues,
//! where any worker takes it at once, rather than in a hand that waits to be stolen.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::contain::{drop_contained, drop_payload, panic_message};
use crate::executor::{Run, WorkerStats, HAND_CAPACITY};
use crate::runtime::core::Core;
use crate::shard::{Claim, Notice, Placement, Shard};
use crate::stopwatch::Stopwatch;
use crate::task::{next_run, Task};
use crate::timer::TimerId;

/// References a worker keeps in hand, their records prefetched, ahead of the one it runs,
/// while its callbacks are short: enough to overlap the records' misses (8 is not), and
/// few enough that little waits for a thief behind a preempted worker (`docs/performance.md`,
/// "Executor: references in hand").
const DEEP: usize = HAND_CAPACITY;
/// References in hand after a run longer than [`SHORT_RUN`].
const SHALLOW: usize = 4;
/// The longest run that keeps a worker at [`DEEP`].
const SHORT_RUN: u64 = 1_000_000;
/// Runs a worker stays at [`SHALLOW`] after one longer than [`SHORT_RUN`].
const SHALLOW_RUNS: u32 = 1024;
/// The bounds of how long a run may wait in the queues (nanoseconds) before its worker wakes
/// another to help: half a tick ([`HelpCalls::new`]), at least [`BEHIND_MIN`] so that a tiny
/// tick does not turn every run into a call, at most [`BEHIND_MAX`] so that a long tick does
/// not leave a backlog to one worker for long.
const BEHIND_MIN: u64 = 50_000;
/// See [`BEHIND_MIN`]: half a default tick, more than one worker needs for a busy tick's
/// batch (1 000 runs of a short callback take it about 200 µs).
const BEHIND_MAX: u64 = 500_000;

/// What a worker keeps to itself between runs.
///
/// A run's time is measured from its start to the start of the worker's next run (or to the
/// moment the worker finds nothing left to run), so a run costs one clock read, not two: the
/// measure includes the worker's own bookkeeping between the two, a few hundred nanoseconds
/// at most, which the watchdog's millisecond scale does not notice.
struct WorkerOwn {
    index: usize,
    slow_log: SlowLog,
    /// The last run started, not yet measured.
    last_run: Option<LastRun>,
    /// The runs taken from the queues to put in hand (kept to reuse its memory).
    batch: Vec<Run>,
    /// Runs left at the shallow depth (see the module doc).
    shallow_for: u32,
    /// Times runs for the statistics.
    stopwatch: Stopwatch,
    /// When it may wake another worker to help (see [`HelpCalls`]).
    help_calls: HelpCalls,
    /// Slots of ended one-shot timers, not yet given back (see [`Released`]).
    released: Released,
    manual: bool,
}

/// The slots of one-shot timers that ended on a worker, one batch a shard, given back to
/// their shard's map [`RELEASE_BATCH`] at a time and whenever the worker runs out of work
/// (before it sleeps or exits). A slot given back one at a time goes through the worker
/// thread's cache of the table (a thread-local, a cache lookup and a deadline-group check:
/// about half of what a release costs), which serves threads that schedule, not a worker.
struct Released {
    by_shard: Box<[Vec<u32>]>,
}

/// Slots a worker holds per shard before it gives them back.
const RELEASE_BATCH: usize = 256;

impl Released {
    fn new(shards: usize) -> Released {
        Released {
            by_shard: (0..shards)
                .map(|_| Vec::with_capacity(RELEASE_BATCH))
                .collect(),
        }
    }

    /// Holds `slot` of `shard` (its record retired) to give back with the next batch.
    #[inline]
    fn push(&mut self, shard: &Shard, slot: u32) {
        let batch = &mut self.by_shard[shard.index];
        batch.push(slot);
        if batch.len() >= RELEASE_BATCH {
            shard.table.release_batch(batch);
            batch.clear();
        }
    }

    /// Gives back every slot held.
    fn flush(&mut self, core: &Core) {
        for (shard, batch) in core.shards.iter().zip(self.by_shard.iter_mut()) {
            if !batch.is_empty() {
                shard.table.release_batch(batch);
                batch.clear();
            }
        }
    }
}

struct LastRun {
    /// When it started (`Stopwatch::real_nanos`).
    started: u64,
    id: TimerId,
}

/// A worker's rate limit for the slow-callback log: at most one line per second, which says
/// how many it held back.
struct SlowLog {
    last: Option<Instant>,
    held_back: u64,
}

const SLOW_LOG_EVERY: Duration = Duration::from_secs(1);

/// The body of worker thread `index`: run what the tick threads hand out until stopped and
/// drained.
pub(crate) fn work(core: &Core, index: usize) {
    core.enter_thread();
    let executor = &core.executor;
    let mut own = WorkerOwn {
        index,
        slow_log: SlowLog {
            last: None,
            held_back: 0,
        },
        last_run: None,
        batch: Vec::with_capacity(DEEP),
        shallow_for: 0,
        stopwatch: Stopwatch::new(),
        help_calls: HelpCalls::new(core.clock.tick_nanos()),
        released: Released::new(core.shards.len()),
        manual: core.clock.is_manual(),
    };
    loop {
        if let Some(run) = executor.take_from_hand(index) {
            WorkerStats::count(&executor.workers[index].taken);
            own.shallow_for = own.shallow_for.saturating_sub(1);
            take(core, run, &mut own);
            if own.manual {
                // SeqCst, as `advance` reads it (manual clock only).
                let done = &executor.workers[index].done;
                done.store(done.load(Ordering::Relaxed) + 1, Ordering::SeqCst);
                core.settle.signal();
            }
            continue;
        }
        if fill_hand(core, &mut own) {
            continue;
        }
        end_last_run(core, &mut own);
        own.released.flush(core);
        let running_since = &executor.workers[index].running_since;
        if executor.stopped() && !executor.has_work() {
            running_since.store(0, Ordering::Release);
            return;
        }
        // Preparing memory counts as a run: it faults fresh memory, which can take a virtual
        // machine milliseconds, and the tick threads must see this worker stuck in it and wake
        // another for what they hand out meanwhile, not count on it as free.
        executor.workers[index].start_chore(own.stopwatch.real_nanos(&core.clock));
        let prepared = core.prepare_memory();
        running_since.store(0, Ordering::Release);
        if prepared {
            // A step done: look for work again before the next.
            continue;
        }
        executor.sleep();
    }
}

/// Puts runs in the worker's empty hand: the rest of its last batch from its own queue (their
/// records were prefetched as the batch was taken), else a new batch (see
/// [`Executor::find_task`](crate::executor::Executor::find_task)). `false` when there is
/// nothing to run.
fn fill_hand(core: &Core, own: &mut WorkerOwn) -> bool {
    let executor = &core.executor;
    let depth = depth(own);
    let (batch, stopwatch) = (&mut own.batch, &mut own.stopwatch);
    batch.clear();
    if executor.take_own(own.index, depth, |run| batch.push(run)) == 0 {
        executor.find_task(
            own.index,
            depth,
            || stopwatch.real_nanos(&core.clock),
            |run| prefetch(core, run),
            |run| batch.push(run),
        );
    }
    if batch.is_empty() {
        return false;
    }
    executor.fill_hand(own.index, batch);
    true
}

/// Starts loading the record `run` refers to.
fn prefetch(core: &Core, run: &Run) {
    if let Some(record) = core.shards[run.shard as usize].table.record(run.timer.slot) {
        record.prefetch();
    }
}

/// How many references the worker keeps in hand now (see the module doc), and so how many it
/// takes from a hand-out queue at once.
fn depth(own: &WorkerOwn) -> usize {
    if own.shallow_for > 0 {
        SHALLOW
    } else {
        DEEP
    }
}

/// One reference: fire its timer, send it back to the wheel if it was postponed, or drop it
/// if it is stale.
fn take(core: &Core, run: Run, own: &mut WorkerOwn) {
    // A `shutdown_timeout` stopped waiting: the reference is dropped unclaimed, its timer (if
    // still pending) handed back by that call's pass over the records.
    if core.executor.abandoned(own.index) {
        // Not running a callback any more, whatever `running_since` says of the last run.
        let running_since = &core.executor.workers[own.index].running_since;
        running_since.store(0, Ordering::Release);
        return;
    }
    let shard = &core.shards[run.shard as usize];
    let Some(record) = shard.table.record(run.timer.slot) else {
        core.report_stray(shard.index, run.timer.slot, "handed out without a record");
        return;
    };
    match record.claim(run.timer.ticket, run.now) {
        Claim::Stale => {}
        Claim::Later { deadline } => {
            let slot = run.timer.slot;
            shard.post(Notice::Place(Placement { deadline, slot }));
        }
        Claim::Fire {
            deadline,
            gen,
            task,
            repeating,
        } => {
            let id = TimerId::new(core.tag, shard.index, run.timer.slot, gen);
            if repeating {
                execute_repeating(core, shard, run, id, deadline, task, own);
            } else {
                // The record is retired already: its slot can serve the next timer (once
                // its batch goes back) while this one's callback runs.
                own.released.push(shard, run.timer.slot);
                end_live(core, own.index);
                execute_once(core, run, id, deadline, task, own);
            }
        }
    }
}

/// Counts a timer that ended without a cancel and gives back its `max_pending` place.
fn end_live(core: &Core, worker: usize) {
    WorkerStats::count(&core.executor.workers[worker].ended);
    core.limit.release();
}

fn execute_once(
    core: &Core,
    run: Run,
    id: TimerId,
    deadline: u64,
    task: Task,
    own: &mut WorkerOwn,
) {
    start_run(core, &run, id, deadline, own);
    // A one-shot's closure is consumed by its call, which drops what it captured.
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| task.run())) {
        panicked(core, own.index, payload, id, false);
    }
}

fn execute_repeating(
    core: &Core,
    shard: &Shard,
    run: Run,
    id: TimerId,
    deadline: u64,
    mut task: Task,
    own: &mut WorkerOwn,
) {
    start_run(core, &run, id, deadline, own);
    let ok = match catch_unwind(AssertUnwindSafe(|| task.run_due(deadline))) {
        Ok(()) => true,
        Err(payload) => {
            panicked(core, own.index, payload, id, true);
            false
        }
    };
    let record = shard.table.record_of(run.timer.slot);
    let gen = id.gen();
    // Once shutdown has collected what it hands back, nobody reads the notices: a timer
    // whose run ends later (its callback called `shutdown`, say) ends here instead, and so
    // does one whose run ends after a `shutdown_timeout` gave up on its worker (that call's
    // pass marks a run it finds in progress as the last, so a re-arm that read the flag
    // too early ends it too). A run that panicked ends its timer, as the JDK's
    // `ScheduledThreadPoolExecutor` does.
    if ok && !core.collected.load(Ordering::SeqCst) && !core.executor.abandoned(own.index) {
        let period = task.period().unwrap_or(1);
        let next = next_run(deadline, period, core.clock.now());
        match record.finish_run(gen, next, task) {
            // `next`, or where a reschedule during the run moved it.
            Ok(deadline) => shard.post(Notice::Place(Placement {
                deadline,
                slot: run.timer.slot,
            })),
            Err(task) => end_repeating(core, shard, run.timer.slot, task),
        }
        return;
    }
    if !record.end_run(gen) {
        end_live(core, own.index);
    }
    end_repeating(core, shard, run.timer.slot, task);
}

/// A repeating timer after its last run, its record retired: its slot goes back and its task
/// is dropped, containing a panic in the task's `Drop`.
fn end_repeating(core: &Core, shard: &Shard, slot: u32, task: Task) {
    shard.table.release(slot);
    drop_contained(
        task,
        "a repeating task after its last run",
        &core.drop_panics,
    );
}

fn panicked(
    core: &Core,
    worker: usize,
    payload: Box<dyn std::any::Any + Send>,
    id: TimerId,
    repeating: bool,
) {
    WorkerStats::count(&core.executor.workers[worker].panicked);
    tracing::error!(
        panic = panic_message(payload.as_ref()),
        timer = ?id,
        repeating,
        "timer callback panicked; the service goes on"
    );
    drop_payload(payload, &core.drop_panics);
}

/// Counts and samples a run about to start, and measures the worker's previous one.
fn start_run(core: &Core, run: &Run, id: TimerId, deadline: u64, own: &mut WorkerOwn) {
    let stats = &core.executor.workers[own.index];
    let started = own.stopwatch.real_nanos(&core.clock);
    // Counted in `fired` here, before the run, so `stats()` counts a run as soon as it has
    // started; published with its id, so a `shutdown_timeout` can name it.
    stats.publish_run(id.slot(), id.shard_gen(), started);
    stats
        .lateness
        .record(core.clock.lateness(deadline, started));
    let queued_for = started.saturating_sub(run.handed_at);
    stats.queue_delay.record(queued_for);
    if queued_for > own.help_calls.behind {
        call_for_help(core, own, started);
    }
    let slow = measure_last_run(core, own, stats, started);
    report_slow(core, own, slow);
    own.last_run = Some(LastRun { started, id });
}

/// A run of this worker started over [`HelpCalls::behind`] late, at `now`: wakes a sleeping
/// worker to help when [`HelpCalls::may_call`] says so.
fn call_for_help(core: &Core, own: &mut WorkerOwn, now: u64) {
    if own.help_calls.may_call(now, || core.executor.has_work()) {
        core.executor.wake_helper();
    }
}

/// When a worker whose runs start late wakes another to help.
///
/// When a run waited in the queues over `behind` (half a tick, within [`BEHIND_MIN`] ..=
/// [`BEHIND_MAX`]): a run that waited that long is on its way to a tick late. A wake-up costs
/// a virtual machine 20–40 µs of CPU, as much as a hundred short callbacks, so a worker that can get
/// through a busy tick's batch alone within the tick calls no one: at a fifth of a tick, calls
/// for a batch one worker finishes in time woke the other worker on nearly every second tick
/// (`docs/performance.md`, "A call for help once a run has waited half a tick").
///
/// Only when there is work the helper could take — references in the hand-out queues or in
/// a worker's own queue, not only those in the caller's hand, which another worker takes
/// only once the caller is stuck — and at most once every `behind`. Without the two conditions a worker whose hand holds
/// runs that all waited long (handed out while it was preempted) called on every run: the
/// worker it woke found nothing, slept, and was woken again by the next run, tens of futile
/// wake-ups a tick on one CPU (`docs/performance.md`, "No futile wake-ups").
struct HelpCalls {
    /// When this worker last called (`Stopwatch::real_nanos`), if it ever did.
    last: Option<u64>,
    /// How long a run waits before its worker calls, and the least time between two calls.
    behind: u64,
}

impl HelpCalls {
    /// A worker's calls for a service ticking every `tick_nanos`.
    fn new(tick_nanos: u64) -> Self {
        HelpCalls {
            last: None,
            behind: (tick_nanos / 2).clamp(BEHIND_MIN, BEHIND_MAX),
        }
    }

    /// Whether to call for help at `now`, with `stealable` telling whether other workers
    /// could take any of the queued work (read only when the time allows a call). A `true`
    /// counts as the call.
    fn may_call(&mut self, now: u64, stealable: impl FnOnce() -> bool) -> bool {
        if self
            .last
            .is_some_and(|last| now.saturating_sub(last) < self.behind)
        {
            return false;
        }
        if !stealable() {
            return false;
        }
        self.last = Some(now);
        true
    }
}

/// Measures the worker's last run, ended by `now` (see [`WorkerOwn`]), into `stats` (the
/// worker's), and drops the worker to [`SHALLOW`] when the run was long. Returns the run to
/// report as slow, if it was.
fn measure_last_run(
    core: &Core,
    own: &mut WorkerOwn,
    stats: &WorkerStats,
    now: u64,
) -> Option<(TimerId, u64)> {
    let last = own.last_run.take()?;
    let took = now.saturating_sub(last.started);
    stats.callback_time.record(took);
    if took > SHORT_RUN {
        own.shallow_for = SHALLOW_RUNS;
    }
    (took > core.executor.slow_callback).then_some((last.id, took))
}

/// Counts and logs a slow run that [`measure_last_run`] found. Inlined, so the common case (no
/// slow run) costs a run a test, not a call.
#[inline]
fn report_slow(core: &Core, own: &mut WorkerOwn, slow: Option<(TimerId, u64)>) {
    if let Some((id, took)) = slow {
        count_and_log_slow(core, own, id, took);
    }
}

#[cold]
#[inline(never)]
fn count_and_log_slow(core: &Core, own: &mut WorkerOwn, id: TimerId, took: u64) {
    WorkerStats::count(&core.executor.workers[own.index].slow);
    own.slow_log.report(id, took);
}

/// Measures the last run before the worker sleeps, so an idle worker's stats are complete.
fn end_last_run(core: &Core, own: &mut WorkerOwn) {
    if own.last_run.is_none() {
        return;
    }
    let now = own.stopwatch.real_nanos(&core.clock);
    let slow = measure_last_run(core, own, &core.executor.workers[own.index], now);
    report_slow(core, own, slow);
}

impl SlowLog {
    /// Logs a slow run of timer `id` that took `nanos`, unless a line went out less than
    /// [`SLOW_LOG_EVERY`] ago (then it is held back and counted in the next line).
    fn report(&mut self, id: TimerId, nanos: u64) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < SLOW_LOG_EVERY)
        {
            self.held_back += 1;
            return;
        }
        tracing::warn!(
            timer = ?id,
            took = ?Duration::from_nanos(nanos),
            held_back = self.held_back,
            "slow timer callback (over Config::slow_callback); it delays the callbacks queued behind it on its worker"
        );
        self.last = Some(now);
        self.held_back = 0;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A default tick's.
    const TICK: u64 = 1_000_000;

    #[test]
    fn a_late_worker_calls_for_help_only_for_work_others_can_take() {
        let mut calls = HelpCalls::new(TICK);
        // Everything queued is in the caller's own hands: no call, and none counted.
        assert!(!calls.may_call(1_000_000, || false));
        assert!(calls.may_call(1_000_001, || true));
    }

    #[test]
    fn a_late_worker_calls_at_most_once_every_behind() {
        let mut calls = HelpCalls::new(TICK);
        let behind = calls.behind;
        let start = 5_000_000;
        assert!(calls.may_call(start, || true));
        let mut asked = false;
        assert!(!calls.may_call(start + behind - 1, || {
            asked = true;
            true
        }));
        assert!(
            !asked,
            "the queues are not read while the time forbids a call"
        );
        assert!(calls.may_call(start + behind, || true));
        // A clock read that went backwards (another CPU's) does not allow a call either.
        assert!(!calls.may_call(start, || true));
    }

    #[test]
    fn a_run_is_behind_after_half_a_tick_within_bounds() {
        assert_eq!(HelpCalls::new(1_000_000).behind, 500_000);
        assert_eq!(HelpCalls::new(400_000).behind, 200_000);
        assert_eq!(HelpCalls::new(10_000).behind, BEHIND_MIN);
        assert_eq!(HelpCalls::new(3_600_000_000_000).behind, BEHIND_MAX);
    }
}
