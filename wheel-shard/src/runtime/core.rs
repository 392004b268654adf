//! [`Core`]: everything the service's threads share.

use std::cell::Cell;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::clock::Clock;
use crate::error::ConfigError;
use crate::executor::Executor;
use crate::memory;
use crate::shard::{Lane, PendingRing, Shard, URGENT_CAPACITY};
use crate::sync;
use crate::Config;

pub(crate) struct Core {
    /// This service's tag, carried by every id it hands out (see `TimerId`).
    pub(crate) tag: u32,
    pub(crate) config: Config,
    pub(crate) clock: Clock,
    pub(crate) shards: Box<[Shard]>,
    pub(crate) executor: Executor,
    pub(crate) closed: AtomicBool,
    /// Set once `shutdown` has collected every timer it hands back: from then on nobody reads
    /// the notice queues, so a repeating timer whose run ends later is not re-armed.
    pub(crate) collected: AtomicBool,
    /// Panics from dropping user code that the service contained (`Stats::drop_panics`).
    pub(crate) drop_panics: AtomicU64,
    /// References found out of step with their timer's record (`Stats::strays`).
    pub(crate) strays: AtomicU64,
    /// Timers handed back by `shutdown`.
    pub(crate) handed_back: AtomicU64,
    /// Repeating timers whose run was in progress when a `shutdown_timeout`'s pass came by:
    /// that run is their last (see `runtime/hand_back.rs`).
    pub(crate) ended_with_run: AtomicU64,
    /// The service's threads still running their bodies, and the signal each sends as it
    /// leaves: how a `shutdown_timeout` waits for them with a deadline.
    pub(crate) exits: Exits,
    /// Tick threads the OS let run under real-time priority (`Stats::realtime_ticks`).
    pub(crate) realtime_ticks: AtomicUsize,
    pub(crate) limit: PendingLimit,
    pub(crate) rejected: AtomicU64,
    /// A worker is preparing memory ahead of use (see [`Core::prepare_memory`]).
    preparing: AtomicBool,
    /// How a manual clock's `advance` learns that the service has caught up with virtual time.
    pub(crate) settle: Settle,
}

/// The hand-shake between a manual clock's `advance` and the service's threads (unused on a
/// real clock). `advance` opens a round by bumping `round` and waking every tick thread; a tick
/// thread that has taken in everything queued and handed out everything due at the current
/// virtual now records the round it started its pass in (`Shard::settled_round`) before it
/// sleeps, and workers count the runs they finished. Both then signal `changed`.
#[derive(Default)]
pub(crate) struct Settle {
    pub(crate) round: AtomicU64,
    lock: Mutex<()>,
    changed: Condvar,
    /// One `advance` at a time.
    turn: Mutex<()>,
}

impl Settle {
    /// Waits for any other `advance` to finish; the turn lasts as long as the guard.
    pub(crate) fn take_turn(&self) -> MutexGuard<'_, ()> {
        self.turn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells a waiting `advance` that a thread's progress changed.
    pub(crate) fn signal(&self) {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.changed.notify_all();
    }

    /// Waits until `done` holds. A signal between the check and the wait is caught by the
    /// lock; the short timeout only bounds a signal from a thread that skipped the lock.
    pub(crate) fn wait_until(&self, mut done: impl FnMut() -> bool) {
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while !done() {
            guard = self
                .changed
                .wait_timeout(guard, Duration::from_millis(1))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Which of the service's threads are still in their bodies (std's `JoinHandle` has no timed
/// join): each thread holds a [`ThreadGuard`], counted here from before the thread is
/// spawned, whose drop (at the end of the body, or as a panic unwinds it) takes it off the
/// count, notes its id and signals. A `shutdown_timeout` waits on the signal with its
/// deadline, and then joins only threads that have finished.
#[derive(Default)]
pub(crate) struct Exits {
    state: Mutex<Live>,
    changed: Condvar,
}

/// The threads of a service still in their bodies, under [`Exits`]' lock.
#[derive(Default)]
pub(crate) struct Live {
    pub(crate) ticks: usize,
    pub(crate) workers: usize,
    /// The threads that have left their bodies.
    pub(crate) left: Vec<ThreadId>,
}

/// The kind of a service thread, for [`Exits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ThreadKind {
    Tick,
    Worker,
}

impl Exits {
    fn lock(&self) -> MutexGuard<'_, Live> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `done` holds of the live threads, or until `deadline` passes (`None`: no
    /// deadline). Returns whether `done` held.
    pub(crate) fn wait_until(
        &self,
        deadline: Option<Instant>,
        mut done: impl FnMut(&Live) -> bool,
    ) -> bool {
        let mut live = self.lock();
        loop {
            if done(&live) {
                return true;
            }
            let Some(deadline) = deadline else {
                live = self.changed.wait(live).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                return false;
            }
            live = self
                .changed
                .wait_timeout(live, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Whether thread `id` has left its body.
    pub(crate) fn has_left(&self, id: ThreadId) -> bool {
        self.lock().left.contains(&id)
    }
}

/// What a service thread holds while it runs its body (see [`Exits`]): the service's core,
/// and its place in the count of live threads.
pub(crate) struct ThreadGuard {
    core: Arc<Core>,
    kind: ThreadKind,
}

impl ThreadGuard {
    /// Counts a thread of `kind` about to be spawned: the guard goes into its body (a
    /// refused spawn drops it, and the count goes back).
    pub(crate) fn new(core: Arc<Core>, kind: ThreadKind) -> ThreadGuard {
        {
            let mut live = core.exits.lock();
            match kind {
                ThreadKind::Tick => live.ticks += 1,
                ThreadKind::Worker => live.workers += 1,
            }
        }
        ThreadGuard { core, kind }
    }
}

impl Deref for ThreadGuard {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        let exits = &self.core.exits;
        let mut live = exits.lock();
        match self.kind {
            ThreadKind::Tick => live.ticks -= 1,
            ThreadKind::Worker => live.workers -= 1,
        }
        live.left.push(std::thread::current().id());
        drop(live);
        exits.changed.notify_all();
    }
}

/// `Config::max_pending`: one exact global count, touched only when a limit is set.
pub(crate) struct PendingLimit {
    limit: Option<usize>,
    count: CachePadded<AtomicUsize>,
}

impl PendingLimit {
    pub(crate) fn new(limit: Option<usize>) -> Self {
        PendingLimit {
            limit,
            count: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Takes a place for a new timer; `Err(limit)` when all are taken.
    pub(crate) fn acquire(&self) -> Result<(), usize> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            })
            .map(drop)
            .map_err(|_| limit)
    }

    /// Gives back the place of a timer that ended.
    pub(crate) fn release(&self) {
        self.release_many(1);
    }

    /// Gives back the places of `timers` timers that ended.
    pub(crate) fn release_many(&self, timers: usize) {
        if self.limit.is_some() && timers > 0 {
            self.count.fetch_sub(timers, Ordering::AcqRel);
        }
    }
}

impl Core {
    /// The shared state of a service running on `clock` (see [`Clock::manual`]): everything
    /// but the wheels (see `ShardTick::wheel`). The rings and the timer cells for
    /// `Config::capacity` are allocated fallibly: a refusal is `ConfigError::OutOfMemory`,
    /// never an abort.
    pub(crate) fn new(config: Config, clock: Clock) -> Result<Core, ConfigError> {
        let limit = PendingLimit::new(config.max_pending);
        let shards = (0..config.shards)
            .map(|i| {
                let ring = |capacity| {
                    PendingRing::try_new(capacity)
                        .map_err(|_| memory::refused(&config, "ring_capacity"))
                };
                let lane = sync::heavy_barrier_available()
                    .then(|| {
                        Lane::try_new(config.ring_capacity)
                            .map_err(|_| memory::refused(&config, "ring_capacity"))
                    })
                    .transpose()?;
                Ok(Shard::new(
                    i,
                    config.tick,
                    ring(config.ring_capacity)?,
                    ring(URGENT_CAPACITY)?,
                    lane,
                ))
            })
            .collect::<Result<_, ConfigError>>()?;
        let executor =
            Executor::try_new(config.shards, config.executor_threads, config.slow_callback)
                .map_err(|_| memory::refused(&config, "shards"))?;
        let core = Core {
            tag: next_service_tag(),
            collected: AtomicBool::new(false),
            drop_panics: AtomicU64::new(0),
            strays: AtomicU64::new(0),
            handed_back: AtomicU64::new(0),
            ended_with_run: AtomicU64::new(0),
            exits: Exits::default(),
            realtime_ticks: AtomicUsize::new(0),
            clock,
            settle: Settle::default(),
            shards,
            executor,
            closed: AtomicBool::new(false),
            limit,
            rejected: AtomicU64::new(0),
            preparing: AtomicBool::new(false),
            config,
        };
        for shard in core.shards.iter() {
            shard
                .table
                .try_reserve(core.capacity_per_shard())
                .map_err(|_| memory::refused(&core.config, "capacity"))?;
        }
        Ok(core)
    }

    /// An idle worker's chore: writes ahead the records of one shard whose table runs low
    /// (see `TimerTable::grow`), else makes resident the memory a shard's wheel grows into
    /// next (see `shard/prefault.rs`); `true` when it did either. One worker at a time, so the
    /// others stay free for callbacks that come due meanwhile; and not with a single worker,
    /// whose callbacks would wait behind the page faults (then producers write fresh records
    /// and tick threads fault their wheels' pages in themselves, see [`Core::prepares_memory`]).
    pub(crate) fn prepare_memory(&self) -> bool {
        if !self.prepares_memory() || self.preparing.swap(true, Ordering::Acquire) {
            return false;
        }
        let done = self.shards.iter().any(|shard| shard.table.grow())
            || self.shards.iter().any(|shard| shard.prefault.populate());
        self.preparing.store(false, Ordering::Release);
        done
    }

    /// Whether idle workers prepare memory ahead of use ([`Core::prepare_memory`]): with more
    /// than one of them.
    pub(crate) fn prepares_memory(&self) -> bool {
        self.config.executor_threads >= 2
    }

    /// Whether a worker is preparing memory now: it looks for more before it sleeps, so
    /// waking another for a new chore would only wake one that finds the chore taken.
    pub(crate) fn preparing_memory(&self) -> bool {
        self.preparing.load(Ordering::Relaxed)
    }

    /// Timers scheduled and not yet ended (`TimerService::pending`). The pushes are read
    /// first, with Acquire, and the ends after: every end is counted before its timer's
    /// `max_pending` place is given back, so an end that let a counted push in is counted
    /// too, and the figure never passes `max_pending`.
    pub(crate) fn pending(&self) -> usize {
        let scheduled: u64 = self.shards.iter().map(Shard::scheduled).sum();
        let cancelled: u64 = self
            .shards
            .iter()
            .map(|s| s.cancelled.load(Ordering::Relaxed))
            .sum();
        let ended = self.executor.ended()
            + self.handed_back.load(Ordering::Relaxed)
            + self.ended_with_run.load(Ordering::Relaxed);
        scheduled.saturating_sub(cancelled + ended) as usize
    }

    /// Runs the tick threads handed to the executor, all shards together.
    pub(crate) fn handed(&self) -> u64 {
        self.shards
            .iter()
            .map(|shard| shard.handed.load(Ordering::SeqCst))
            .sum()
    }

    /// `Config::capacity` split evenly over the shards (rounded up).
    pub(crate) fn capacity_per_shard(&self) -> usize {
        self.config.capacity.div_ceil(self.config.shards)
    }

    /// Counts and logs a timer found out of step with its record (a bug in the service):
    /// `what` says what was being done with it.
    pub(crate) fn report_stray(&self, shard: usize, slot: u32, what: &str) {
        self.strays.fetch_add(1, Ordering::Relaxed);
        tracing::error!(shard, slot, "a timer {what} out of step with its state");
    }

    /// Marks the calling thread as one of this service's own (a tick thread or a worker).
    pub(crate) fn enter_thread(&self) {
        OWN_SERVICE.with(|own| own.set(self.tag));
    }

    /// Whether the calling thread is one of this service's own threads, where a `shutdown`
    /// must not wait for the service's threads to stop (it may be one of them).
    pub(crate) fn is_own_thread(&self) -> bool {
        OWN_SERVICE.with(Cell::get) == self.tag
    }

    /// Marks the calling thread as this service's worker `index`.
    pub(crate) fn enter_worker(&self, index: usize) {
        self.enter_thread();
        OWN_WORKER.with(|own| own.set(index));
    }

    /// The index of this service's worker that is the calling thread, if it is one (a
    /// `shutdown_timeout` from a callback does not wait for its own worker, nor name its own
    /// run as still running).
    pub(crate) fn own_worker(&self) -> Option<usize> {
        let index = OWN_WORKER.with(Cell::get);
        (self.is_own_thread() && index != usize::MAX).then_some(index)
    }

    /// The shard for the next timer a thread schedules: a hash of a per-thread sequence that
    /// moves on every [`SHARD_RUN`] timers, so producers spread over shards without sharing a
    /// counter, and a producer's consecutive timers go to one shard (one ring tail, one cache of
    /// free slots and its prefetched records stay hot) before it moves on.
    pub(crate) fn pick_shard(&self) -> &Shard {
        thread_local! {
            /// (this thread's next sequence number, the hash of its current run of
            /// [`SHARD_RUN`]); sequence 0 means not yet seeded. Initialised as a constant, so
            /// that a schedule does not check whether it is initialised.
            static SEQUENCE: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
        }
        let n = self.shards.len();
        if n == 1 {
            return &self.shards[0];
        }
        let hash = SEQUENCE.with(|s| {
            let (x, hash) = s.get();
            let (x, hash) = if x % SHARD_RUN == 0 {
                next_run(x)
            } else {
                (x, hash)
            };
            s.set((x.wrapping_add(1), hash));
            hash
        });
        &self.shards[scale(hash, n)]
    }
}

/// Timers a thread sends to one shard before its sequence picks the next.
const SHARD_RUN: u64 = 64;

thread_local! {
    /// The tag of the service whose thread this is; 0 (never a tag) on other threads.
    static OWN_SERVICE: Cell<u32> = const { Cell::new(0) };
    /// The index of the worker this thread is, for the service `OWN_SERVICE` names;
    /// `usize::MAX` on other threads.
    static OWN_WORKER: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// A tag no other service of this process has (until 2^32 − 1 services have been started).
fn next_service_tag() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    loop {
        let tag = NEXT.fetch_add(1, Ordering::Relaxed);
        if tag != 0 {
            return tag;
        }
    }
}

fn thread_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::thread::current().id())
}

/// The start of a thread's next run of [`SHARD_RUN`] timers at sequence number `x` (a
/// multiple of it): `x` and the run's hash; a thread's first run starts at a random multiple.
#[cold]
fn next_run(x: u64) -> (u64, u64) {
    let x = if x == 0 {
        (thread_seed() & !(SHARD_RUN - 1)) | SHARD_RUN
    } else {
        x
    };
    (x, mix(x / SHARD_RUN))
}

/// `hash` scaled to `0..n` (the high word of `hash · n`): uniform for a uniform hash, and a
/// multiplication where `hash % n` would be a division on every schedule.
fn scale(hash: u64, n: usize) -> usize {
    ((u128::from(hash) * n as u128) >> 64) as usize
}

/// SplitMix64's finaliser: consecutive sequence numbers land on unrelated shards.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
