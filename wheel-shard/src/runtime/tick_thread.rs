//! [`TickThread`]: the body of a tick thread, which drives one or more shards' passes
//! (`runtime/tick.rs`), wakes workers for what they hand out, and sleeps once for all of them.
//!
//! Why several shards to a thread: a tick thread with timers pending sleeps and wakes once a
//! tick, and on a virtual machine each costs about 20 µs of CPU (`docs/performance.md`, "Wake-ups: the
//! price of a sleep") whatever the work it wakes to — at a few hundred timers a tick, more
//! than the work. Shards are there so producers on different threads do not contend for one
//! ring and one table; that needs no thread per shard. So a thread drives every
//! `tick_threads`-th shard (`Config::tick_thread_count`) and pays the sleep once a tick for
//! all of them.
//!
//! A pass reads the clock once; it takes new references into each shard's wheel, then hands
//! out what is due in each, then wakes workers for all of it (`runtime/wake_policy.rs`), and ends
//! each shard's pass (a step of compaction, what is left). It goes round again while any shard
//! has work now, and otherwise sleeps until the earliest tick any shard needs.
//!
//! A pass that handed out runs and goes straight round again (a flood of new timers, or more
//! due) ends with a yield of the CPU. The kernel puts a woken worker on its waker's CPU, and
//! while producers keep both CPUs of a small machine busy, that worker would otherwise wait
//! there for the rest of this thread's slice, milliseconds, with its runs already due. The
//! yield lets it run now; workers then take smaller batches, which costs them a little CPU a
//! timer (what it buys and costs: `docs/performance.md`, "A yield after a pass that
//! handed out runs").
//!
//! The sleep is `shard/wake.rs`'s handshake made on every shard: the thread publishes the same
//! planned tick on each shard's waker, then looks at each shard's queues once more, and a
//! producer of any shard whose deadline comes before the plan unparks the thread. For each
//! shard that is the one-shard handshake (a SeqCst store of the plan, a fence, a load of the
//! queue; on the producer's side the mirror image), so no shard's wake-up is lost; the loom
//! model `a_thread_driving_two_shards_misses_no_push` in `shard/wake.rs` checks it with a
//! producer on each shard.

use std::sync::atomic::Ordering;

use crate::runtime::core::Core;
use crate::runtime::tick::{Intake, ShardTick};
use crate::runtime::wake_policy::WakePolicy;
use crate::shard::{ShardWheel, IDLE};

/// A tick thread's state: the shards it drives, and its side of waking workers.
pub(crate) struct TickThread<'a> {
    core: &'a Core,
    /// Never empty.
    shards: Vec<ShardTick<'a>>,
    /// Each shard's intake in the current pass, in `shards`' order.
    intakes: Vec<Intake>,
    /// Whether new timers wait in each shard's rings after the current pass (see
    /// [`Plan::ring_waits`](crate::runtime::tick::Plan::ring_waits)).
    ring_waits: Vec<bool>,
    wake_policy: WakePolicy,
}

impl<'a> TickThread<'a> {
    /// The thread driving `shards`, each given as its index and its wheel (at least one).
    pub(crate) fn new(core: &'a Core, shards: Vec<(usize, ShardWheel)>) -> Self {
        assert!(
            !shards.is_empty(),
            "a tick thread drives at least one shard"
        );
        let count = shards.len();
        TickThread {
            core,
            shards: shards
                .into_iter()
                .map(|(index, wheel)| ShardTick::new(core, index, wheel))
                .collect(),
            intakes: vec![Intake::default(); count],
            ring_waits: vec![false; count],
            wake_policy: WakePolicy::new(),
        }
    }

    /// Runs until every shard it drives is stopped. Its wheels then go without a look at their
    /// references: the shutdown's pass over the records (`runtime/hand_back.rs`) takes back
    /// every timer still pending, in address order, where a walk of the wheels would miss the
    /// cache on every record.
    pub(crate) fn run(mut self) {
        let core = self.core;
        let manual = core.clock.is_manual();
        loop {
            for tick in &self.shards {
                tick.shard().mark_awake();
            }
            // `shutdown` stops the shards one after another, each after closing its rings:
            // the thread stops once all of its own are, so no shard of it takes new timers
            // once the thread has gone.
            if self.all_stopped() {
                break;
            }
            // Read before anything queued is looked at: a pass that began after `advance`
            // opened this round has seen all it queued (see `Settle`).
            let round = core.settle.round.load(Ordering::SeqCst);
            let now = core.clock.now();
            for (tick, intake) in self.shards.iter_mut().zip(&mut self.intakes) {
                *intake = tick.take_in(now);
            }
            // Every shard hands out before any worker is woken: a worker woken for the first
            // shard's would take its core from this thread (the kernel puts a wakee on its
            // waker's core) and, done with them, sleep again before the next shard's.
            let handed: usize = self.shards.iter_mut().map(|tick| tick.expire(now)).sum();
            let watch_workers = if manual {
                // Virtual time stands still until every run is done: wake all it may need.
                core.executor.wake_for_handed(handed);
                false
            } else {
                self.wake_policy.after_pass(core, handed, now)
            };
            let mut again = false;
            let mut wake = IDLE;
            for ((tick, intake), ring_waits) in self
                .shards
                .iter_mut()
                .zip(&self.intakes)
                .zip(&mut self.ring_waits)
            {
                let plan = tick.end_pass(now, *intake, round);
                again |= plan.again;
                wake = wake.min(plan.wake);
                *ring_waits = plan.ring_waits;
            }
            if again {
                if handed > 0 && !manual {
                    // Going straight round (a flood, or more due): the workers just woken for
                    // this pass's runs get the CPU first (see the module doc).
                    std::thread::yield_now();
                }
                continue;
            }
            if manual {
                // Every shard reported this round caught up: tell `advance`, and sleep until
                // it moves the time (which wakes this thread).
                core.settle.signal();
            } else if watch_workers {
                wake = wake.min(now.saturating_add(1));
            }
            self.sleep(now, wake);
        }
    }

    fn all_stopped(&self) -> bool {
        self.shards
            .iter()
            .all(|tick| tick.shard().stop.load(Ordering::SeqCst))
    }

    /// Sleeps until tick `wake`, unless work arrived for any shard while it was deciding to
    /// (see the module doc).
    fn sleep(&mut self, now: u64, wake: u64) {
        let may_sleep = self
            .shards
            .iter()
            .zip(&self.ring_waits)
            .all(|(tick, &ring_waits)| tick.shard().plan_sleep(now, wake, !ring_waits));
        if !may_sleep {
            // The plans published so far are undone by `mark_awake` as the next pass begins.
            return;
        }
        for tick in &mut self.shards {
            tick.going_to_sleep();
        }
        // Every shard's waker unparks this same thread; one parks it.
        let first = self.shards[0].shard();
        first.park(wake, || self.core.clock.until(wake));
        first.wakeups.fetch_add(1, Ordering::Relaxed);
    }
}
