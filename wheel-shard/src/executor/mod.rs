//! [`Executor`]: the worker threads that run expired callbacks, so no callback ever runs on a
//! tick thread and a slow one holds up only the worker running it.
//!
//! Each shard's tick thread pushes into its own hand-out queue (`handout.rs`: a ring with one
//! producer, no locked instruction and no allocation per push). An idle worker takes a batch
//! from a hand-out queue with one CAS, keeps the first run and puts the rest in its own queue,
//! a ring of the same kind with the worker as its one producer. While the first run goes on,
//! the other workers can steal the rest from there; then the worker takes what it keeps in
//! hand from its own queue with one CAS more. So work spreads to whoever is free, and a
//! batch costs two locked instructions, not one per run (a deque's pop is a locked
//! instruction on x86). What a worker holds in hand stays within reach too: once its run has
//! gone on for [`STUCK_AFTER`] (a slow callback, or its thread preempted), an idle worker
//! steals the rest of its hand (`hand.rs`), so a slow callback delays only itself. A worker
//! with nothing to do sleeps on a condition variable; a tick thread wakes one only when no
//! worker is free to take what it handed out (`idle.rs`).

mod durations;
mod hand;
mod handout;
mod idle;

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_deque::Steal;
use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;

use crate::shard::{RingRefused, TimerRef};
use crate::stats::new_histogram;
pub use durations::Durations;
use hand::Hand;
use handout::{HandOut, HandOutRing, STEAL_BATCH};
use idle::Idle;
pub(crate) use idle::Woken;

/// Cells of a worker's own queue: twice the largest batch, so a push finds its cell free even
/// while a stealer of the last lap's batch is still freeing it, but for a very slow stealer.
const OWN_QUEUE_CELLS: usize = 2 * STEAL_BATCH as usize;

/// The most references a worker keeps in hand (see `runtime/worker.rs` for how many it does).
pub(crate) const HAND_CAPACITY: usize = 16;

/// How long a run goes on before its worker counts as stuck, in nanoseconds: far beyond a
/// short callback, well within a tick. A stuck worker's hand is open to thieves, and a tick
/// thread wakes a sleeper for work that waits behind it (`runtime/wake_policy.rs`).
pub(crate) const STUCK_AFTER: u64 = 100_000;

/// A reference the wheel handed out, on its way to a worker, which decides on the timer's
/// record whether it fires (see `Record::claim`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub(crate) shard: u32,
    pub(crate) timer: TimerRef,
    /// The wheel's tick when it handed the reference out: a tick that has begun, so a timer
    /// due by then is never early.
    pub(crate) now: u64,
    /// When the tick thread handed it over, in real nanoseconds (`Clock::real_nanos`).
    pub(crate) handed_at: u64,
}

/// Per-worker counters and samples, merged on request by `stats()`. Only the worker writes
/// them (see [`WorkerStats::count`] and [`Durations`]): no lock and no read-modify-write on a
/// run's path.
pub(crate) struct WorkerStats {
    pub(crate) fired: AtomicU64,
    pub(crate) panicked: AtomicU64,
    /// Runs over `Config::slow_callback`.
    pub(crate) slow: AtomicU64,
    /// Timers this worker ended (retired their records) other than by a `cancel`.
    pub(crate) ended: AtomicU64,
    /// References taken (fired, deferred or stale), re-arm included: what a manual clock's
    /// `advance` waits for. Counted under a manual clock only.
    pub(crate) done: AtomicU64,
    /// References this worker took from its hand to run (fired, deferred or stale): what was
    /// handed out and is not counted here by any worker still waits, in a queue or a hand.
    pub(crate) taken: AtomicU64,
    /// When the run, or the step of table growth, in progress started (`Clock::real_nanos`,
    /// at least 1); 0 while the worker is between runs with nothing to run, or asleep. Odd
    /// for a callback's run ([`WorkerStats::publish_run`]), even for a chore
    /// ([`WorkerStats::start_chore`]): the clock's lowest bit is given up to tell them apart.
    pub(crate) running_since: AtomicU64,
    /// The slot of the timer whose run started last, and in the high half the low 32 bits of
    /// `fired` that run set: what ties the two id words to one run (see
    /// [`WorkerStats::publish_run`]).
    run_slot: AtomicU64,
    /// The `shard << 48 | generation` word of that timer's id.
    run_shard_gen: AtomicU64,
    /// Set by [`Executor::abandon`]. Here, on the line the worker writes on every run, so the
    /// check before each claim never misses the cache.
    abandoned: AtomicBool,
    pub(crate) lateness: Durations,
    pub(crate) callback_time: Durations,
    pub(crate) queue_delay: Durations,
}

impl WorkerStats {
    fn new() -> Self {
        WorkerStats {
            fired: AtomicU64::new(0),
            panicked: AtomicU64::new(0),
            slow: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            done: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            running_since: AtomicU64::new(0),
            run_slot: AtomicU64::new(0),
            run_shard_gen: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
            lateness: Durations::new(),
            callback_time: Durations::new(),
            queue_delay: Durations::new(),
        }
    }

    /// Adds one to `counter`, one of this worker's own: a plain load and store, since no other
    /// thread writes it (no locked instruction: on x86 a SeqCst store would be one). Release,
    /// so a reader that saw what the worker did next (a callback's effect) sees the count.
    #[inline]
    pub(crate) fn count(counter: &AtomicU64) {
        Self::add(counter, 1);
    }

    /// [`WorkerStats::count`] by `n`.
    #[inline]
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Release);
    }

    /// Worker: counts the run of timer `id` that starts at `started` (real nanoseconds) in
    /// `fired` and publishes it, so that [`WorkerStats::current_run`] can name it from another
    /// thread.
    ///
    /// What it costs the run beyond the count and the start time it always stored: two plain
    /// stores of the id's words and a release fence (nothing on x86, no locked instruction).
    /// The order is a sequence lock with `fired` as its sequence: the count first (run `n`),
    /// then the fence, the start time and the generation word, and last, with Release, the
    /// slot word that carries `n`'s low bits. A reader that finds those bits equal to the
    /// count it reads after the other words saw nothing of a later run (whose writes all
    /// follow its count), and nothing of an earlier one (the slot word's Release brings run
    /// `n`'s writes along). A re-check of the start time alone would not do: a reader could see
    /// the new id words with the old start time, or one new id word and one old.
    #[inline]
    pub(crate) fn publish_run(&self, slot: u32, shard_gen: u64, started: u64) {
        let runs = self.fired.load(Ordering::Relaxed) + 1;
        self.fired.store(runs, Ordering::Release);
        fence(Ordering::Release);
        self.run_shard_gen.store(shard_gen, Ordering::Relaxed);
        self.running_since.store(started | 1, Ordering::Release);
        self.run_slot.store(
            u64::from(runs as u32) << 32 | u64::from(slot),
            Ordering::Release,
        );
    }

    /// Worker: a chore that counts as a run for the tick threads' watch over stuck workers
    /// (it may take milliseconds), started at `now`; not a callback, so an even time.
    pub(crate) fn start_chore(&self, now: u64) {
        self.running_since
            .store((now & !1).max(2), Ordering::Release);
    }

    /// The callback this worker runs now, if it runs one: its timer's slot and
    /// `shard << 48 | generation` word, and when the run started (`Clock::real_nanos`, odd).
    /// `None` while the worker is idle, asleep, gone, or busy with a chore.
    ///
    /// Any thread; the read side of [`WorkerStats::publish_run`]'s sequence lock. A worker
    /// that starts run after run meanwhile makes it read again; after a bounded number of
    /// tries (the worker would be starting a run every few hundred nanoseconds for the whole
    /// time) it gives up with `None`.
    pub(crate) fn current_run(&self) -> Option<(u32, u64, u64)> {
        const TRIES: u32 = 1000;
        for attempt in 0..TRIES {
            let slot = self.run_slot.load(Ordering::Acquire);
            let since = self.running_since.load(Ordering::Relaxed);
            let shard_gen = self.run_shard_gen.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            let runs = self.fired.load(Ordering::Relaxed);
            if (slot >> 32) as u32 == runs as u32 {
                return (since & 1 == 1).then_some((slot as u32, shard_gen, since));
            }
            if attempt % 64 == 63 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        None
    }
}

/// The merged distributions of every worker (see `Stats`).
pub(crate) struct Distributions {
    pub(crate) lateness: Histogram<u64>,
    pub(crate) callback_time: Histogram<u64>,
    pub(crate) queue_delay: Histogram<u64>,
}

pub(crate) struct Executor {
    /// Each shard's due references, from its tick thread.
    hand_outs: Box<[HandOut<Run>]>,
    /// Each worker's own queue: the rest of the last batch it took, which any worker can take.
    /// Only its worker pushes, and only while it is empty.
    own_queues: Box<[HandOutRing<Run>]>,
    /// Each worker's hand: what it runs next, stealable once the worker is stuck.
    hands: Box<[CachePadded<Hand<Run>>]>,
    pub(crate) workers: Box<[CachePadded<WorkerStats>]>,
    idle: Idle,
    /// `Config::slow_callback` in nanoseconds.
    pub(crate) slow_callback: u64,
}

impl Executor {
    /// The executor for `shards` tick threads and `threads` workers.
    /// Callbacks running longer than `slow_callback` are counted and logged.
    /// `RingRefused` when the allocator refuses a hand-out ring or a worker's queue.
    pub(crate) fn try_new(
        shards: usize,
        threads: usize,
        slow_callback: Duration,
    ) -> Result<Executor, RingRefused> {
        Ok(Executor {
            hand_outs: (0..shards)
                .map(|_| HandOut::try_new())
                .collect::<Result<_, _>>()?,
            own_queues: (0..threads)
                .map(|_| HandOutRing::try_new(OWN_QUEUE_CELLS))
                .collect::<Result<_, _>>()?,
            hands: (0..threads)
                .map(|_| CachePadded::new(Hand::new(HAND_CAPACITY)))
                .collect(),
            workers: (0..threads)
                .map(|_| CachePadded::new(WorkerStats::new()))
                .collect(),
            idle: Idle::new(),
            slow_callback: u64::try_from(slow_callback.as_nanos()).unwrap_or(u64::MAX),
        })
    }

    /// Queues a due reference from its shard's tick thread (each shard has its own hand-out
    /// queue, and only its tick thread calls this for it). Call [`Executor::wake_for_handed`] after a
    /// batch.
    #[inline]
    pub(crate) fn submit(&self, run: Run) {
        self.hand_outs[run.shard as usize].push(run);
    }

    /// Bytes each shard's hand-out queue takes.
    pub(crate) fn hand_out_bytes() -> usize {
        HandOut::<Run>::bytes()
    }

    /// Wakes up to `handed` sleeping workers for tasks just submitted.
    pub(crate) fn wake_for_handed(&self, handed: usize) {
        self.idle.wake_for_handed(handed);
    }

    /// For tasks just submitted or still queued, at real time `now`: wakes one sleeping worker
    /// unless one is free to take them, or every sleeper when `backlog` (see [`Idle::wake_for_waiting`]).
    /// A worker counts as stuck once its run has gone on for `stuck_after` nanoseconds.
    pub(crate) fn wake_for_waiting(&self, now: u64, stuck_after: u64, backlog: bool) -> Woken {
        let stuck = self
            .workers
            .iter()
            .filter(|w| {
                let since = w.running_since.load(Ordering::Acquire);
                since != 0 && now.saturating_sub(since) > stuck_after
            })
            .count();
        self.idle
            .wake_for_waiting(self.workers.len(), stuck, backlog)
    }

    /// Wakes one sleeping worker to help, unless one is on its way already (see
    /// `Idle::wake_helper`): for a worker whose runs start late, or a chore a tick thread
    /// left for idle workers (a sleeping worker does not look for chores).
    pub(crate) fn wake_helper(&self) {
        self.idle.wake_helper();
    }

    /// References the workers took from their hands to run, over all workers (see
    /// [`WorkerStats::taken`]).
    pub(crate) fn taken(&self) -> u64 {
        self.sum(|w| &w.taken)
    }

    /// Whether workers should exit once the queues are empty.
    pub(crate) fn stopped(&self) -> bool {
        self.idle.stopped()
    }

    /// Lets workers exit once the queues are empty.
    pub(crate) fn stop(&self) {
        self.idle.stop();
    }

    /// Gives up on everything queued or in a worker's hands: from now on a worker drops every
    /// reference it takes without a look at its record, so no callback starts; the workers
    /// still empty the queues that way, and exit. For a shutdown that stopped waiting for its
    /// workers, whose pass over the records then takes back every timer still pending (a
    /// claim already under way when the flag goes up is decided against the pass by the
    /// record's CAS, as ever).
    pub(crate) fn abandon(&self) {
        for worker in self.workers.iter() {
            worker.abandoned.store(true, Ordering::SeqCst);
        }
    }

    /// Whether [`Executor::abandon`] was called, as worker `index` reads it: a hint read
    /// before each claim, Relaxed, as the record's CAS, not this flag, decides whether a run
    /// starts.
    #[inline]
    pub(crate) fn abandoned(&self, index: usize) -> bool {
        self.workers[index].abandoned.load(Ordering::Relaxed)
    }

    /// Tasks queued and not yet started, those in the workers' hands included.
    pub(crate) fn queued(&self) -> usize {
        self.hand_outs.iter().map(HandOut::len).sum::<usize>()
            + self.own_queues.iter().map(HandOutRing::len).sum::<usize>()
            + self.hands.iter().map(|hand| hand.len()).sum::<usize>()
    }

    pub(crate) fn has_work(&self) -> bool {
        self.hand_outs.iter().any(|q| !q.is_empty()) || self.own_queues.iter().any(|q| q.len() > 0)
    }

    /// A counter summed over every worker.
    fn sum(&self, counter: impl Fn(&WorkerStats) -> &AtomicU64) -> u64 {
        self.workers
            .iter()
            .map(|w| counter(w).load(Ordering::SeqCst))
            .sum()
    }

    pub(crate) fn fired(&self) -> u64 {
        self.sum(|w| &w.fired)
    }

    pub(crate) fn panicked(&self) -> u64 {
        self.sum(|w| &w.panicked)
    }

    /// Callback runs that took longer than `Config::slow_callback`.
    pub(crate) fn slow_callbacks(&self) -> u64 {
        self.sum(|w| &w.slow)
    }

    /// References taken, over all workers (manual clock only).
    pub(crate) fn done(&self) -> u64 {
        self.sum(|w| &w.done)
    }

    /// Timers workers ended other than by a `cancel`.
    pub(crate) fn ended(&self) -> u64 {
        self.sum(|w| &w.ended)
    }

    /// Every worker's samples, merged.
    pub(crate) fn distributions(&self) -> Distributions {
        let mut merged = Distributions {
            lateness: new_histogram(),
            callback_time: new_histogram(),
            queue_delay: new_histogram(),
        };
        for worker in self.workers.iter() {
            worker.lateness.add_to(&mut merged.lateness);
            worker.callback_time.add_to(&mut merged.callback_time);
            worker.queue_delay.add_to(&mut merged.queue_delay);
        }
        merged
    }

    /// Worker `index`: takes up to `limit` runs from its own queue with one CAS and passes
    /// them to `keep`, oldest first; returns how many.
    pub(crate) fn take_own(&self, index: usize, limit: usize, mut keep: impl FnMut(Run)) -> usize {
        loop {
            match self.own_queues[index].steal(limit as u64, &mut keep) {
                Steal::Success(taken) => return taken,
                Steal::Empty => return 0,
                Steal::Retry => {}
            }
        }
    }

    /// Worker `index`: the next run from its hand, if it holds one (see `hand.rs`).
    #[inline]
    pub(crate) fn take_from_hand(&self, index: usize) -> Option<Run> {
        self.hands[index].take()
    }

    /// Worker `index`, whose hand is empty: puts `runs` (at most [`HAND_CAPACITY`]) in hand.
    pub(crate) fn fill_hand(&self, index: usize, runs: &[Run]) {
        self.hands[index].refill(runs);
    }

    /// Finds runs for worker `index`, whose own queue is empty ([`Executor::take_own`] comes
    /// first), and passes what it is to keep in hand to `keep`, returning how many: the first
    /// of a batch of up to `batch` from the hand-out queues, else the first of a batch stolen
    /// from another worker's queue, else the first of what a stuck worker held in hand (one
    /// whose run began over [`STUCK_AFTER`] before `now()`, real nanoseconds); 0 when there is
    /// nothing to run. The rest of a batch goes to the worker's own queue, stealable, each run
    /// of it passed to `seen` as it is taken (the worker prefetches what it refers to); a run
    /// that finds the queue full (a stealer still freeing its cell) goes to `keep` too.
    pub(crate) fn find_task(
        &self,
        index: usize,
        batch: usize,
        now: impl FnOnce() -> u64,
        mut seen: impl FnMut(&Run),
        mut keep: impl FnMut(Run),
    ) -> usize {
        let queue = &self.own_queues[index];
        let mut kept = 0;
        let mut take = |run: Run| {
            seen(&run);
            if kept == 0 {
                keep(run);
                kept += 1;
            } else if let Err(run) = queue.try_push(run) {
                keep(run);
                kept += 1;
            }
        };
        let hand_outs = self.hand_outs.len();
        let workers = self.own_queues.len();
        loop {
            let mut retry = false;
            for i in 0..hand_outs {
                match self.hand_outs[(index + i) % hand_outs].take_batch(batch, &mut take) {
                    Steal::Success(_) => return kept,
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            for i in 1..workers {
                match self.own_queues[(index + i) % workers].steal(batch as u64, &mut take) {
                    Steal::Success(_) => return kept,
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if !retry {
                break;
            }
        }
        self.steal_from_stuck_hands(index, now, take);
        kept
    }

    /// Takes what a stuck worker other than `index` holds in hand, passing each run to `take`;
    /// `now` (real nanoseconds) is read only when some worker holds runs in hand.
    fn steal_from_stuck_hands(
        &self,
        index: usize,
        now: impl FnOnce() -> u64,
        mut take: impl FnMut(Run),
    ) {
        let workers = self.hands.len();
        let mut holding = (1..workers)
            .map(|i| (index + i) % workers)
            .filter(|&other| self.hands[other].len() > 0)
            .peekable();
        if holding.peek().is_none() {
            return;
        }
        let now = now();
        for other in holding {
            // 0: between runs with nothing to run, so not holding any for long.
            let since = self.workers[other].running_since.load(Ordering::Acquire);
            // One hand a call: with the first run kept and the rest in the caller's own
            // queue, even a queue that refuses every push leaves a hand's worth to keep.
            if since != 0
                && now.saturating_sub(since) > STUCK_AFTER
                && self.hands[other].steal(&mut take) > 0
            {
                return;
            }
        }
    }

    pub(crate) fn sleep(&self) {
        self.idle.sleep(|| self.has_work());
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn run(slot: u32) -> Run {
        Run {
            shard: 0,
            timer: TimerRef::due_at(slot, 0),
            now: 0,
            handed_at: 0,
        }
    }

    fn slots(runs: &[Run]) -> Vec<u32> {
        runs.iter().map(|run| run.timer.slot).collect()
    }

    /// A worker keeps the first run of a batch in hand and leaves the rest in its own queue,
    /// where another worker can steal them while the first runs (a callback that waits for
    /// another due at the same tick is not stuck behind it); then it takes the rest in hand.
    #[test]
    fn the_rest_of_a_batch_stays_stealable_until_its_worker_takes_it() {
        let executor = Executor::try_new(1, 2, Duration::from_secs(1)).unwrap();
        (0..10).for_each(|slot| executor.submit(run(slot)));
        let (mut hand, mut seen) = (Vec::new(), Vec::new());
        let kept = executor.find_task(0, 8, || 0, |run| seen.push(*run), |run| hand.push(run));
        assert_eq!((kept, slots(&hand)), (1, vec![0]));
        assert_eq!(slots(&seen), (0..8).collect::<Vec<_>>(), "a batch of 8");
        assert_eq!(executor.queued(), 9, "7 in worker 0's queue, 2 handed out");

        // Worker 1 finds the hand-out queue's two, then steals from worker 0's queue.
        let mut other = Vec::new();
        executor.find_task(1, 8, || 0, |_| {}, |run| other.push(run));
        executor.take_own(1, 8, |run| other.push(run));
        assert_eq!(slots(&other), vec![8, 9]);
        executor.find_task(1, 3, || 0, |_| {}, |run| other.push(run));
        executor.take_own(1, 8, |run| other.push(run));
        assert_eq!(slots(&other), vec![8, 9, 1, 2, 3]);

        // Worker 0 takes the rest of its batch in hand, oldest first.
        assert_eq!(executor.take_own(0, 8, |run| hand.push(run)), 4);
        assert_eq!(slots(&hand), vec![0, 4, 5, 6, 7]);
        assert!(!executor.has_work());
    }

    /// What a worker holds in hand is left alone while its run is short or it is between
    /// runs, and taken by an idle worker once its run has gone on over [`STUCK_AFTER`].
    #[test]
    fn a_stuck_worker_s_hand_goes_to_an_idle_worker() {
        let executor = Executor::try_new(1, 2, Duration::from_secs(1)).unwrap();
        executor.fill_hand(0, &[run(1), run(2), run(3)]);
        assert_eq!(executor.take_from_hand(0).map(|r| r.timer.slot), Some(1));
        let started = 1_000_000;
        let mut other = Vec::new();
        let find = |now: u64, other: &mut Vec<Run>| {
            executor.find_task(1, 8, || now, |_| {}, |run| other.push(run))
        };
        assert_eq!(find(started, &mut other), 0, "between runs");
        executor.workers[0]
            .running_since
            .store(started, Ordering::Release);
        assert_eq!(find(started + STUCK_AFTER, &mut other), 0, "not stuck yet");
        assert_eq!(executor.queued(), 2, "both still in worker 0's hand");
        assert_eq!(find(started + STUCK_AFTER + 1, &mut other), 1, "stuck");
        assert_eq!(slots(&other), vec![2]);
        assert_eq!(executor.take_own(1, 8, |run| other.push(run)), 1);
        assert_eq!(
            slots(&other),
            vec![2, 3],
            "the rest went to worker 1's own queue"
        );
        assert!(
            executor.take_from_hand(0).is_none(),
            "worker 0's hand is empty"
        );
    }

    /// A worker's own queue whose next cell a stealer has claimed and not yet freed refuses
    /// the push: the run goes into the worker's hand instead of being lost.
    #[test]
    fn a_run_that_does_not_fit_the_own_queue_is_kept_in_hand() {
        let executor = Executor::try_new(1, 2, Duration::from_secs(1)).unwrap();
        let queue = &executor.own_queues[0];
        (0..OWN_QUEUE_CELLS as u32).for_each(|slot| queue.try_push(run(slot)).unwrap());
        (100..104).for_each(|slot| executor.submit(run(slot)));
        let (mut hand, mut kept) = (Vec::new(), 0);
        // A stealer claims the whole queue and frees its cells one by one: while it holds the
        // first run, every other cell is still claimed, and worker 0 takes a batch of 4.
        let _ = queue.steal(OWN_QUEUE_CELLS as u64, |stolen| {
            if stolen.timer.slot == 0 {
                kept = executor.find_task(0, 4, || 0, |_| {}, |run| hand.push(run));
            }
        });
        // 101 went to the cell the stealer freed first; 102 and 103 found theirs claimed.
        assert_eq!((kept, slots(&hand)), (3, vec![100, 102, 103]));
        assert_eq!(executor.queued(), 1, "101 waits in worker 0's queue");
    }
}
