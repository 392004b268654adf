//! [`WakePolicy`]: a tick thread's side of waking workers for the references it hands out.
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

use crate::executor::{Woken, STUCK_AFTER};
use crate::runtime::core::Core;

/// What the policy reads of the service and asks of it: the counts of references handed out
/// and taken to run, and a wake-up of workers for those waiting.
pub(crate) trait Workers {
    /// References every shard has handed out so far.
    fn handed(&self) -> u64;
    /// References the workers have taken from their hands to run so far.
    fn taken(&self) -> u64;
    /// Wakes workers for references that wait: one when every awake worker is stuck (its run
    /// began over [`STUCK_AFTER`] ago), every sleeper when `backlog`.
    fn wake_for_waiting(&self, backlog: bool) -> Woken;
}

impl Workers for Core {
    fn handed(&self) -> u64 {
        Core::handed(self)
    }

    fn taken(&self) -> u64 {
        self.executor.taken()
    }

    fn wake_for_waiting(&self, backlog: bool) -> Woken {
        self.executor
            .wake_for_waiting(self.clock.real_nanos(), STUCK_AFTER, backlog)
    }
}

/// One tick thread's state for waking workers (see the module doc).
pub(crate) struct WakePolicy {
    /// The tick of the last look at the backlog, and the references every shard had handed
    /// out by then.
    mark_tick: u64,
    mark_handed: u64,
    /// Whether to look again by the next tick.
    watching: bool,
}

impl WakePolicy {
    pub(crate) fn new() -> Self {
        WakePolicy {
            mark_tick: 0,
            mark_handed: 0,
            watching: false,
        }
    }

    /// After a pass at tick `now` that handed out `handed` references (already submitted):
    /// wakes workers as the module doc says. Returns whether the tick thread should look again
    /// by the next tick.
    pub(crate) fn after_pass(&mut self, workers: &impl Workers, handed: usize, now: u64) -> bool {
        if handed == 0 && !self.watching {
            return false;
        }
        // Taken before handed: both only grow, so the difference never counts too few.
        let taken = workers.taken();
        let handed_all = workers.handed();
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
        self.watching = match workers.wake_for_waiting(backlog) {
            Woken::NoneAsleep => false,
            Woken::Free => true,
            // The one woken takes the first; any other may end up behind it.
            Woken::One | Woken::All => waiting >= 2,
        };
        self.watching
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    /// Counts the policy reads and answers wake-ups as told, recording each `backlog` asked.
    struct FakeWorkers {
        handed: Cell<u64>,
        taken: Cell<u64>,
        answer: Cell<Woken>,
        asked: RefCell<Vec<bool>>,
    }

    impl FakeWorkers {
        fn new() -> Self {
            FakeWorkers {
                handed: Cell::new(0),
                taken: Cell::new(0),
                answer: Cell::new(Woken::One),
                asked: RefCell::new(Vec::new()),
            }
        }

        /// A pass hands out `n` references.
        fn hand_out(&self, n: u64) -> usize {
            self.handed.set(self.handed.get() + n);
            n as usize
        }
    }

    impl Workers for FakeWorkers {
        fn handed(&self) -> u64 {
            self.handed.get()
        }
        fn taken(&self) -> u64 {
            self.taken.get()
        }
        fn wake_for_waiting(&self, backlog: bool) -> Woken {
            self.asked.borrow_mut().push(backlog);
            self.answer.get()
        }
    }

    #[test]
    fn a_quiet_pass_wakes_nobody_and_does_not_look_again() {
        let workers = FakeWorkers::new();
        let mut wake_policy = WakePolicy::new();
        assert!(!wake_policy.after_pass(&workers, 0, 1));
        assert!(workers.asked.borrow().is_empty());
    }

    #[test]
    fn references_taken_at_once_need_no_second_look() {
        let workers = FakeWorkers::new();
        let mut wake_policy = WakePolicy::new();
        let handed = workers.hand_out(5);
        workers.taken.set(5);
        assert!(!wake_policy.after_pass(&workers, handed, 1));
        assert!(
            workers.asked.borrow().is_empty(),
            "nothing waits: no wake-up"
        );
    }

    #[test]
    fn relying_on_a_free_worker_means_looking_again_until_nothing_waits() {
        let workers = FakeWorkers::new();
        let mut wake_policy = WakePolicy::new();
        workers.answer.set(Woken::Free);
        let handed = workers.hand_out(3);
        assert!(
            wake_policy.after_pass(&workers, handed, 1),
            "look again by the next tick"
        );
        // The free worker got stuck: a later empty pass looks and wakes one.
        workers.answer.set(Woken::One);
        assert!(
            wake_policy.after_pass(&workers, 0, 2),
            "two or more still wait"
        );
        workers.taken.set(3);
        assert!(
            !wake_policy.after_pass(&workers, 0, 3),
            "all taken: stop looking"
        );
        assert_eq!(workers.asked.borrow().len(), 2);
    }

    #[test]
    fn one_woken_for_a_single_reference_needs_no_second_look() {
        let workers = FakeWorkers::new();
        let mut wake_policy = WakePolicy::new();
        let handed = workers.hand_out(1);
        assert!(!wake_policy.after_pass(&workers, handed, 1));
        let handed = workers.hand_out(2);
        assert!(
            wake_policy.after_pass(&workers, handed, 2),
            "three wait, one woken"
        );
    }

    #[test]
    fn nobody_asleep_means_nobody_to_wake_and_no_second_look() {
        let workers = FakeWorkers::new();
        let mut wake_policy = WakePolicy::new();
        workers.answer.set(Woken::NoneAsleep);
        let handed = workers.hand_out(10);
        assert!(!wake_policy.after_pass(&workers, handed, 1));
    }

    /// The backlog is judged once a tick: references handed out by the last look's tick and
    /// still not taken a tick later mean the awake workers fall behind.
    #[test]
    fn references_still_waiting_a_tick_later_are_a_backlog() {
        let workers = FakeWorkers::new();
        let mut wake_policy = WakePolicy::new();
        workers.answer.set(Woken::Free);
        let handed = workers.hand_out(4);
        wake_policy.after_pass(&workers, handed, 1);
        workers.taken.set(2);
        wake_policy.after_pass(&workers, 0, 1); // the same tick: not judged again
        wake_policy.after_pass(&workers, 0, 2); // a tick later, two of the four still wait
        workers.taken.set(4);
        let handed = workers.hand_out(1);
        wake_policy.after_pass(&workers, handed, 3); // those four were all taken by then
        assert_eq!(*workers.asked.borrow(), vec![false, false, true, false]);
    }
}
