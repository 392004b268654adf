//! [`Rouser`]: a tick thread's side of waking workers for the references it hands out.
//!
//! A wake-up costs more than the work it brings at a few hundred references a tick, so the
//! tick thread wakes one worker, and only when no worker is free to take them
//! (`executor/idle.rs`). Two things can still leave references waiting while a worker sleeps:
//!
//! - the free worker, or the one woken, gets stuck in a long run (a slow callback, or its
//!   thread preempted) while references wait in the queues others can take from — among them
//!   the rest of the batch it took, in its own queue and in its hand, which other workers may
//!   take once it is stuck (`executor/hand.rs`);
//! - the workers awake fall behind: references handed out a tick ago are still queued.
//!
//! So whenever it relied on a free worker, or left two or more references waiting, the tick
//! thread looks again by the next tick, and goes on looking each tick while any wait and a
//! worker sleeps. A look counts the references still waiting — handed out by every shard, less
//! those the workers took from their hands to run — wakes one worker when every awake one is
//! stuck (its run began more than [`STUCK_AFTER`] ago), and every sleeper when some of the
//! references waiting were handed out a tick or more ago.
//!
//! For example, two callbacks that meet at a barrier are due at tick 5, and both workers
//! sleep. At tick 5 the tick thread hands out both and wakes worker A, which takes both into
//! its hand and blocks at the barrier in the first. At tick 6 one reference still waits and
//! A's run has gone on for a millisecond: worker B is woken, steals the second from A's hand,
//! and both callbacks pass the barrier.

use crate::executor::{Roused, STUCK_AFTER};
use crate::runtime::core::Core;

/// One tick thread's state for waking workers (see the module doc).
pub(crate) struct Rouser {
    /// The tick of the last look at the backlog, and the references every shard had handed
    /// out by then.
    mark_tick: u64,
    mark_handed: u64,
    /// Whether to look again by the next tick.
    watching: bool,
}

impl Rouser {
    pub(crate) fn new() -> Self {
        Rouser {
            mark_tick: 0,
            mark_handed: 0,
            watching: false,
        }
    }

    /// After a pass at tick `now` that handed out `handed` references (already submitted):
    /// wakes workers as the module doc says. Returns whether the tick thread should look again
    /// by the next tick.
    pub(crate) fn after_pass(&mut self, core: &Core, handed: usize, now: u64) -> bool {
        if handed == 0 && !self.watching {
            return false;
        }
        // Taken before handed: both only grow, so the difference never counts too few.
        let taken = core.executor.taken();
        let handed_all = core.handed();
        let waiting = handed_all.saturating_sub(taken);
        if waiting == 0 {
            self.watching = false;
            return false;
        }
        // Once a tick: whether references handed out by the last look's tick still wait.
        let backlog = now > self.mark_tick && {
            let behind = taken < self.mark_handed;
            (self.mark_tick, self.mark_handed) = (now, handed_all);
            behind
        };
        let roused = core
            .executor
            .rouse(core.clock.real_nanos(), STUCK_AFTER, backlog);
        self.watching = match roused {
            Roused::NoneAsleep => false,
            Roused::Free => true,
            // The one woken takes the first; any other may end up behind it.
            Roused::One | Roused::All => waiting >= 2,
        };
        self.watching
    }
}
