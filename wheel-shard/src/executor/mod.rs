//! [`Executor`]: the worker threads that run expired callbacks, so no callback ever runs on a
//! tick thread and a slow one holds up only the worker running it.
//!
//! Each shard's tick thread pushes into its own hand-out queue (`handout.rs`: a ring with one
//! producer, no locked instruction and no allocation per push). Idle workers take batches from
//! the hand-out queues and steal from each other's deques (crossbeam-deque), so work spreads to
//! whoever is free. A worker with nothing to do sleeps on a condition variable; a tick thread
//! wakes one only when no worker is free to take what it handed out (`idle.rs`).

mod durations;
mod handout;
mod idle;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_deque::{Steal, Stealer, Worker};
use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;

use crate::shard::{RingRefused, TimerRef};
use crate::stats::new_histogram;
pub(crate) use durations::Durations;
use handout::HandOut;
use idle::Idle;
pub(crate) use idle::Roused;

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
    /// References this worker took out of the queues others can take from (the hand-out
    /// queues and the workers' deques) into its own hands: the rest of what was handed out is
    /// still there for any worker.
    pub(crate) taken: AtomicU64,
    /// When the run, or the step of table growth, in progress started (`Clock::real_nanos`,
    /// at least 1); 0 while the worker is between runs with nothing to run, or asleep.
    pub(crate) running_since: AtomicU64,
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
    stealers: Box<[Stealer<Run>]>,
    pub(crate) workers: Box<[CachePadded<WorkerStats>]>,
    idle: Idle,
    /// `Config::slow_callback` in nanoseconds.
    pub(crate) slow_callback: u64,
}

impl Executor {
    /// The executor for `shards` tick threads and `threads` workers, and the workers' own deques
    /// (one for each worker thread to take).
    /// Callbacks running longer than `slow_callback` are counted and logged.
    /// `RingRefused` when the allocator refuses a hand-out ring.
    pub(crate) fn try_new(
        shards: usize,
        threads: usize,
        slow_callback: Duration,
    ) -> Result<(Executor, Vec<Worker<Run>>), RingRefused> {
        let locals: Vec<Worker<Run>> = (0..threads).map(|_| Worker::new_fifo()).collect();
        let executor = Executor {
            hand_outs: (0..shards)
                .map(|_| HandOut::try_new())
                .collect::<Result<_, _>>()?,
            stealers: locals.iter().map(Worker::stealer).collect(),
            workers: (0..threads)
                .map(|_| CachePadded::new(WorkerStats::new()))
                .collect(),
            idle: Idle::new(),
            slow_callback: u64::try_from(slow_callback.as_nanos()).unwrap_or(u64::MAX),
        };
        Ok((executor, locals))
    }

    /// Queues a due reference from its shard's tick thread (each shard has its own hand-out
    /// queue, and only its tick thread calls this for it). Call [`Executor::notify`] after a
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
    pub(crate) fn notify(&self, handed: usize) {
        self.idle.notify(handed);
    }

    /// For tasks just submitted or still queued, at real time `now`: wakes one sleeping worker
    /// unless one is free to take them, or every sleeper when `backlog` (see [`Idle::rouse`]).
    /// A worker counts as stuck once its run has gone on for `stuck_after` nanoseconds.
    pub(crate) fn rouse(&self, now: u64, stuck_after: u64, backlog: bool) -> Roused {
        let stuck = self
            .workers
            .iter()
            .filter(|w| {
                let since = w.running_since.load(Ordering::Acquire);
                since != 0 && now.saturating_sub(since) > stuck_after
            })
            .count();
        self.idle.rouse(self.workers.len(), stuck, backlog)
    }

    /// Wakes one sleeping worker to help, unless one is on its way already (see
    /// `Idle::wake_a_helper`): for a worker whose runs start late, or a chore a tick thread
    /// left for idle workers (a sleeping worker does not look for chores).
    pub(crate) fn wake_a_helper(&self) {
        self.idle.wake_a_helper();
    }

    /// References the workers took into their own hands, over all workers (see
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

    /// Tasks queued and not yet started.
    pub(crate) fn queued(&self) -> usize {
        self.hand_outs.iter().map(HandOut::len).sum::<usize>()
            + self.stealers.iter().map(Stealer::len).sum::<usize>()
    }

    pub(crate) fn has_work(&self) -> bool {
        self.hand_outs.iter().any(|q| !q.is_empty()) || self.stealers.iter().any(|s| !s.is_empty())
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

    /// The next run for worker `index`: from its own deque, else a batch of up to `batch` from
    /// the hand-out queues (each run of it passed to `seen` as it is taken), else a batch
    /// stolen from another worker.
    pub(crate) fn find_task(
        &self,
        index: usize,
        local: &Worker<Run>,
        batch: usize,
        mut seen: impl FnMut(&Run),
    ) -> Option<Run> {
        if let Some(run) = local.pop() {
            return Some(run);
        }
        let hand_outs = self.hand_outs.len();
        let stealers = self.stealers.len();
        loop {
            let mut retry = false;
            for i in 0..hand_outs {
                match self.hand_outs[(index + i) % hand_outs]
                    .steal_batch_and_pop(local, batch, &mut seen)
                {
                    Steal::Success(run) => return Some(run),
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            for i in 1..stealers {
                match self.stealers[(index + i) % stealers].steal_batch_and_pop(local) {
                    Steal::Success(run) => return Some(run),
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if !retry {
                return None;
            }
        }
    }

    pub(crate) fn sleep(&self) {
        self.idle.sleep(|| self.has_work());
    }
}
