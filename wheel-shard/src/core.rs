//! [`Core`]: everything the service's threads share.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::clock::Clock;
use crate::error::ConfigError;
use crate::executor::Executor;
use crate::memory;
use crate::ring::PendingRing;
use crate::shard::Shard;
use crate::Config;

pub(crate) struct Core {
    pub(crate) config: Config,
    pub(crate) clock: Clock,
    pub(crate) shards: Box<[Shard]>,
    pub(crate) executor: Executor,
    pub(crate) closed: AtomicBool,
    pub(crate) limit: Arc<PendingLimit>,
    pub(crate) rejected: AtomicU64,
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
        if self.limit.is_some() {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Core {
    /// Everything but the wheels (see `TickLoop::wheel`). The rings and the timer cells for
    /// `Config::capacity` are allocated fallibly: a refusal is `ConfigError::OutOfMemory`,
    /// never an abort.
    pub(crate) fn new(
        config: Config,
    ) -> Result<(Core, Vec<crossbeam_deque::Worker<crate::executor::Run>>), ConfigError> {
        let limit = Arc::new(PendingLimit::new(config.max_pending));
        let shards = (0..config.shards)
            .map(|i| {
                let ring = PendingRing::try_new(config.ring_capacity)
                    .map_err(|_| memory::refused(&config, "ring_capacity"))?;
                Ok(Shard::new(i, ring, Arc::clone(&limit)))
            })
            .collect::<Result<_, ConfigError>>()?;
        let (executor, locals) = Executor::new(config.shards, config.executor_threads);
        let core = Core {
            clock: Clock::new(config.tick),
            shards,
            executor,
            closed: AtomicBool::new(false),
            limit,
            rejected: AtomicU64::new(0),
            config,
        };
        for shard in core.shards.iter() {
            shard
                .table
                .try_reserve(core.capacity_per_shard())
                .map_err(|_| memory::refused(&core.config, "capacity"))?;
        }
        Ok((core, locals))
    }

    /// `Config::capacity` split evenly over the shards (rounded up).
    pub(crate) fn capacity_per_shard(&self) -> usize {
        self.config.capacity.div_ceil(self.config.shards)
    }

    /// The shard for the next timer a thread schedules: a hash of a per-thread sequence, so
    /// producers spread over shards without sharing a counter.
    pub(crate) fn pick_shard(&self) -> &Shard {
        use std::cell::Cell;
        thread_local! {
            static SEQUENCE: Cell<u64> = Cell::new(thread_seed());
        }
        let n = self.shards.len();
        if n == 1 {
            return &self.shards[0];
        }
        let x = SEQUENCE.with(|s| {
            let x = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
            s.set(x);
            x
        });
        &self.shards[(mix(x) % n as u64) as usize]
    }
}

fn thread_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::thread::current().id())
}

/// SplitMix64's finaliser: consecutive sequence numbers land on unrelated shards.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
