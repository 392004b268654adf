//! The lateness probe: where every [`Task`](crate::harness::task::Task) records its sample.
//!
//! Callbacks run on threads the bench does not own (executor workers, runtime threads), so each
//! thread records into its own histograms and list of fired timers, found through a thread-local
//! and merged when the run ends. The hot path touches only thread-owned data plus one read of a
//! global generation number that changes once per run: no shared counter to fight over.
//!
//! What a callback records is charged to whichever system runs it, so the recording is lean: the
//! histograms are [`Durations`] (a plain load and store of one counter, readable by the merge
//! without a lock), and only the fired list sits behind a lock, which the run's owner takes to
//! clear the list between rounds, and a callback takes without a locked instruction
//! ([`SampleLock`]).
//!
//! A callback appends its timer's index to its thread's [`FiredList`], a sequential write
//! into memory made resident when the run started; which timers fired, and which more than
//! once, is worked out from the lists when the run ends. (A bitset of every timer, set as
//! callbacks run, would cost each callback a cache miss at 10 M timers, and the bench would
//! charge that to the system under test.)
//!
//! A run can have several rounds ([`RunGuard::next_round`]): warm-up rounds on the same
//! system instance before the measured one. Each round starts with fresh samples, so the
//! measured round's figures are its own.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use wheel_shard::{Durations, InstantNanos};

use crate::harness::bitset::Bitset;
use crate::harness::fired::{FiredChunks, FiredList, FiredPool};
use crate::harness::histogram::new_histogram;
use crate::harness::sample_lock::SampleLock;

/// Bumped when a run starts or ends; a thread whose cached run has another generation
/// re-attaches.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The run callbacks record into, if any.
static CURRENT: Mutex<Option<Arc<Run>>> = Mutex::new(None);
/// One run at a time per process (tests run in parallel threads).
static EXCLUSIVE: Mutex<()> = Mutex::new(());
/// Samples that arrived while no run (or another run) was current.
static STRAYS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static LOCAL: RefCell<Option<Attached>> = const { RefCell::new(None) };
}

/// What one run shares with its callbacks.
pub struct Run {
    generation: u64,
    /// The run's epoch, which every sample's nanoseconds count from.
    epoch: InstantNanos,
    timers: usize,
    /// Latest requested deadline per timer, for scenarios that reschedule; shared by every
    /// round, so a handle a system took at start keeps writing to the current table.
    deadlines: Option<Arc<[AtomicU64]>>,
    /// This round's share-out of the run's fired lists' memory.
    fired: Arc<FiredChunks>,
    threads: Mutex<Vec<Arc<ThreadSlot>>>,
}

/// One thread's samples of one round. Only that thread records into them (the counters are
/// single-writer: a plain load and store each).
struct ThreadSlot {
    fired: AtomicU64,
    lateness: Durations,
    blocked: Durations,
    early: AtomicU64,
    /// The index of every timer whose callback ran on this thread, in the order they ran.
    list: SampleLock<FiredList>,
}

struct Attached {
    generation: u64,
    run: Arc<Run>,
    slot: Arc<ThreadSlot>,
}

/// Everything the callbacks of one run recorded.
pub struct Samples {
    /// Lateness of every callback that does not block (nanoseconds).
    pub lateness: Histogram<u64>,
    /// Lateness of the callbacks that block (`slow` scenario).
    pub blocked: Histogram<u64>,
    /// Which timers ran at least once.
    pub seen: Bitset,
    /// Callback runs beyond the first for the same timer.
    pub duplicates: u64,
    /// Callbacks that started before their requested deadline.
    pub early: u64,
    /// Samples that arrived outside the run.
    pub strays: u64,
}

/// A cheap clone of the run for systems and producer threads.
#[derive(Clone)]
pub struct RunHandle {
    run: Arc<Run>,
}

impl RunHandle {
    /// The run's time origin.
    pub fn epoch(&self) -> Instant {
        self.run.epoch.origin()
    }

    /// Records that timer `index` now wants to fire at `deadline` (after a reschedule); the
    /// callback measures its lateness from the latest deadline recorded.
    pub fn set_deadline(&self, index: u32, deadline: Instant) {
        if let Some(table) = &self.run.deadlines {
            let nanos = self.run.epoch.since_origin(deadline);
            table[index as usize].store(nanos, Ordering::Relaxed);
        }
    }
}

/// The current run; ends (and stops accepting samples) when dropped or finished.
pub struct RunGuard {
    run: Arc<Run>,
    strays_at_start: u64,
    _exclusive: MutexGuard<'static, ()>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RunGuard {
    /// Starts a run of `timers` timers; waits for any other run in the process to end.
    /// `track_deadlines` keeps a per-timer deadline table for scenarios that reschedule.
    pub fn start(timers: usize, track_deadlines: bool) -> RunGuard {
        let exclusive = lock(&EXCLUSIVE);
        let deadlines = track_deadlines.then(|| {
            // Written now, so its pages are resident before the memory baseline is taken.
            (0..timers).map(|_| AtomicU64::new(0)).collect::<Arc<[_]>>()
        });
        // Likewise the fired lists' memory (see `fired`).
        let pool = Arc::new(FiredPool::new(timers));
        RunGuard {
            run: begin(InstantNanos::new(Instant::now()), timers, deadlines, pool),
            strays_at_start: STRAYS.load(Ordering::Relaxed),
            _exclusive: exclusive,
        }
    }

    /// Ends this round and starts the next one of the same run: same epoch, same deadline
    /// table (cleared), fresh samples; what callbacks recorded so far is dropped. Call it once
    /// every callback of the round has recorded: one that records later counts in the next
    /// round. Handles taken earlier stay valid.
    pub fn next_round(&mut self) {
        if let Some(table) = &self.run.deadlines {
            table
                .iter()
                .for_each(|deadline| deadline.store(0, Ordering::Relaxed));
        }
        let run = &self.run;
        // The round's samples are dropped now, not when each thread next records, and its
        // chunks of the pool with them, so the next round can hand them out again. Closed
        // first: a callback of this round that records late then uses memory of its own.
        run.fired.close();
        for slot in lock(&run.threads).iter() {
            slot.list.exclusive(FiredList::clear);
        }
        let pool = Arc::clone(run.fired.pool());
        self.run = begin(run.epoch, run.timers, run.deadlines.clone(), pool);
        self.strays_at_start = STRAYS.load(Ordering::Relaxed);
    }

    /// Callbacks run so far (a cheap sum for progress bars).
    pub fn fired(&self) -> u64 {
        lock(&self.run.threads)
            .iter()
            .map(|slot| slot.fired.load(Ordering::Relaxed))
            .sum()
    }

    /// A handle systems and producers use while the run is on.
    pub fn handle(&self) -> RunHandle {
        RunHandle {
            run: Arc::clone(&self.run),
        }
    }

    /// Ends the run and merges every thread's samples. Call it once the system has stopped
    /// running callbacks; later samples count as strays.
    pub fn finish(self) -> Samples {
        end_current();
        let mut samples = Samples {
            lateness: new_histogram(),
            blocked: new_histogram(),
            seen: Bitset::new(self.run.timers),
            duplicates: 0,
            early: 0,
            strays: 0,
        };
        for slot in lock(&self.run.threads).iter() {
            merge_into(&mut samples, slot, self.run.timers);
        }
        samples.strays = STRAYS.load(Ordering::Relaxed) - self.strays_at_start;
        samples
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        end_current();
    }
}

/// Makes a new run (or round) current under a new generation, so every callback thread
/// attaches to it on its next sample.
fn begin(
    epoch: InstantNanos,
    timers: usize,
    deadlines: Option<Arc<[AtomicU64]>>,
    pool: Arc<FiredPool>,
) -> Arc<Run> {
    let mut current = lock(&CURRENT);
    let generation = GENERATION.load(Ordering::Relaxed) + 1;
    let run = Arc::new(Run {
        generation,
        epoch,
        timers,
        deadlines,
        fired: FiredChunks::new(pool),
        threads: Mutex::new(Vec::new()),
    });
    *current = Some(Arc::clone(&run));
    GENERATION.store(generation, Ordering::Release);
    run
}

fn end_current() {
    let mut current = lock(&CURRENT);
    *current = None;
    GENERATION.fetch_add(1, Ordering::Release);
}

/// Adds one thread's samples of a run of `timers` timers.
fn merge_into(samples: &mut Samples, slot: &ThreadSlot, timers: usize) {
    slot.lateness.add_to(&mut samples.lateness);
    slot.blocked.add_to(&mut samples.blocked);
    slot.list.exclusive(|fired| {
        // A thread cannot fire more distinct timers than the run has: what did not fit
        // repeated.
        samples.duplicates += fired.dropped() as u64;
        for index in fired.iter() {
            // An index outside the run is not a timer of it (a stray from another run's task).
            if (index as usize) < timers && samples.seen.insert(index as usize) {
                samples.duplicates += 1;
            }
        }
    });
    samples.early += slot.early.load(Ordering::Acquire);
}

/// `duration` in nanoseconds, saturating (`u64` holds 584 years).
pub(crate) fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds from `epoch` to `at` (0 when `at` is earlier).
pub(crate) fn nanos_since(epoch: Instant, at: Instant) -> u64 {
    nanos(at.saturating_duration_since(epoch))
}

/// Records one callback's sample: `start` is when it began, `deadline_ns` its requested
/// deadline in nanoseconds since the run's epoch.
pub(crate) fn record(start: Instant, index: u32, deadline_ns: u64, blocks: bool) {
    let generation = GENERATION.load(Ordering::Acquire);
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        if local.as_ref().map(|a| a.generation) != Some(generation) {
            *local = attach(generation);
        }
        match local.as_ref() {
            Some(attached) => attached.record(start, index, deadline_ns, blocks),
            None => {
                STRAYS.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
}

fn attach(generation: u64) -> Option<Attached> {
    let run = lock(&CURRENT).clone()?;
    if run.generation != generation {
        return None;
    }
    let slot = Arc::new(ThreadSlot {
        fired: AtomicU64::new(0),
        lateness: Durations::new(),
        blocked: Durations::new(),
        early: AtomicU64::new(0),
        list: SampleLock::new(FiredList::new(Arc::clone(&run.fired), run.timers)),
    });
    lock(&run.threads).push(Arc::clone(&slot));
    Some(Attached {
        generation,
        run,
        slot,
    })
}

impl Attached {
    fn record(&self, start: Instant, index: u32, deadline_ns: u64, blocks: bool) {
        let deadline_ns = match &self.run.deadlines {
            Some(table) => table[index as usize]
                .load(Ordering::Relaxed)
                .max(deadline_ns),
            None => deadline_ns,
        };
        let start_ns = self.run.epoch.since_origin(start);
        let slot = &*self.slot;
        // Only this thread writes its counters (see `ThreadSlot`).
        if start_ns < deadline_ns {
            let early = slot.early.load(Ordering::Relaxed);
            slot.early.store(early + 1, Ordering::Release);
        }
        let lateness = start_ns.saturating_sub(deadline_ns);
        if blocks {
            slot.blocked.record(lateness);
        } else {
            slot.lateness.record(lateness);
        }
        // SAFETY: `attach` made this slot for this thread, which keeps it in its thread-local
        // `LOCAL`; the run's owner only takes the lock's other side.
        unsafe { slot.list.write(|fired| fired.push(index)) };
        // Readers sum it for progress.
        let fired = slot.fired.load(Ordering::Relaxed);
        slot.fired.store(fired + 1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// What a task's callback does (see `Task::run`): timer `index`, due at `deadline`.
    fn fire(index: u32, deadline: Instant, epoch: Instant) {
        record(Instant::now(), index, nanos_since(epoch, deadline), false);
    }

    #[test]
    fn samples_from_several_threads_merge() {
        let run = RunGuard::start(4, false);
        let epoch = run.handle().epoch();
        let past = epoch; // deadline at the epoch: every start is late, none early
        fire(0, past, epoch);
        std::thread::spawn(move || {
            fire(1, past, epoch);
            fire(1, past, epoch);
        })
        .join()
        .unwrap();
        assert_eq!(run.fired(), 3);
        let samples = run.finish();
        assert_eq!(samples.lateness.len(), 3);
        assert_eq!(samples.seen.count(), 2);
        assert_eq!(samples.duplicates, 1);
        assert_eq!(samples.early, 0);
    }

    #[test]
    fn a_new_round_starts_with_fresh_samples() {
        let mut run = RunGuard::start(2, true);
        let epoch = run.handle().epoch();
        let later = Instant::now() + Duration::from_secs(60);
        let handle = run.handle();
        handle.set_deadline(1, later);
        fire(0, epoch, epoch);
        fire(1, epoch, epoch);
        run.next_round();
        assert_eq!(run.fired(), 0);
        // The deadline table was cleared: timer 1 is measured from its task's deadline.
        fire(1, epoch, epoch);
        let samples = run.finish();
        assert_eq!(samples.lateness.len(), 1);
        assert_eq!(samples.seen.count(), 1);
        assert_eq!((samples.duplicates, samples.early), (0, 0));
    }

    #[test]
    fn early_callbacks_are_counted() {
        let run = RunGuard::start(2, true);
        let epoch = run.handle().epoch();
        let future = Instant::now() + Duration::from_secs(60);
        fire(0, future, epoch);
        // A reschedule moved timer 1 later: its new deadline is the one that counts.
        run.handle().set_deadline(1, future);
        fire(1, epoch, epoch);
        let samples = run.finish();
        assert_eq!(samples.early, 2);
    }
}
