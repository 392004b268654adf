//! [`Idle`]: how the executor's workers sleep when they find nothing to run, and how tick
//! threads and shutdown wake them.
//!
//! A worker going to sleep takes the lock, counts itself in `sleepers`, then looks for work
//! and at `stop` once more before it waits. A tick thread queues its tasks, then reads
//! `sleepers` and takes the lock to wake someone only when someone is counted. A SeqCst fence
//! on each side between its write and its read makes at least one see the other, so a task is
//! never left queued with every worker asleep; and since a counted worker holds the lock until
//! it waits, a wake-up never arrives before the wait it is meant for. The waker decides whom to
//! wake under the lock and wakes them after releasing it, so the worker woken finds the lock
//! free: the worker it counted is inside the wait already, and if it came back on its own
//! meanwhile it took itself off the count and looks at the queues anyway (the wake-up then
//! reaches, at worst, one worker that finds nothing).
//!
//! On a virtual machine every wake-up of a sleeping thread costs 5–20 µs, as much as a
//! hundred short callbacks (`docs/performance.md`, "Wake-ups: the price of a sleep"), so a tick thread wakes one worker for what it
//! queues, and only when no worker is free to take it ([`Idle::wake_for_waiting`]): free means awake and
//! not stuck in a long run, or woken already and on its way. Under the lock the count of
//! waiting and of woken-but-not-yet-back workers is exact, and a worker that is awake will look
//! at the queues before it sleeps again, so relying on it loses nothing. A free worker may
//! still get stuck in its next run; the tick thread then looks again a tick later
//! (`runtime/wake_policy.rs`). A worker that finds its runs falling behind calls for help itself
//! ([`Idle::wake_helper`]), so a load one worker cannot carry gets a second within the tick;
//! a tick thread does the same for a chore it leaves to idle workers (`shard/prefault.rs`).
//!
//! The lock, the condition variable and the atomics come from [`crate::sync`], so the models
//! below check the protocol under loom, with a loom atomic standing in for the queues.

use crate::sync::{fence, AtomicBool, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering};

/// The executor's sleeping workers: how many there are, and how to wake them.
pub(crate) struct Idle {
    sleepers: AtomicUsize,
    asleep: Mutex<Asleep>,
    wake: Condvar,
    stop: AtomicBool,
}

/// Who is waiting, under [`Idle`]'s lock.
#[derive(Default)]
struct Asleep {
    /// Workers inside the condition variable's wait.
    waiting: usize,
    /// Of those, how many were woken and have not yet come back (at most `waiting`; a worker
    /// that comes back without being woken takes one off too, so this never counts more).
    woken: usize,
}

/// What [`Idle::wake_for_waiting`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Nobody sleeps: the awake workers will find the tasks.
    NoneAsleep,
    /// A worker is free to take the tasks, so nobody was woken.
    Free,
    /// One worker was woken.
    One,
    /// Every sleeping worker was woken.
    All,
}

/// Whom to wake once the lock is released: decided under it, done after it, so a woken
/// worker does not run only to block on the lock its waker still holds (and be woken a second
/// time by the unlock: a quarter of all worker wake-ups otherwise: `docs/performance.md`,
/// "No futile wake-ups").
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wake {
    Nobody,
    One,
    All,
}

impl Wake {
    /// Wakes whom it names; call after dropping the lock.
    fn send(self, wake: &Condvar) {
        match self {
            Wake::Nobody => {}
            Wake::One => wake.notify_one(),
            Wake::All => wake.notify_all(),
        }
    }
}

impl Asleep {
    /// Counts one waiting worker not woken already as woken, if there is one.
    fn pick_one(&mut self) -> Wake {
        if self.woken < self.waiting {
            self.woken += 1;
            Wake::One
        } else {
            Wake::Nobody
        }
    }

    /// Counts every waiting worker as woken.
    fn pick_all(&mut self) -> Wake {
        self.woken = self.waiting;
        Wake::All
    }
}

impl Idle {
    pub(crate) fn new() -> Self {
        Idle {
            sleepers: AtomicUsize::new(0),
            asleep: Mutex::new(Asleep::default()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        }
    }

    /// Wakes up to `handed` sleeping workers for tasks just queued.
    #[inline]
    pub(crate) fn wake_for_handed(&self, handed: usize) {
        // Pairs with the fence in `sleep`: a worker going to sleep either sees the tasks or is
        // counted in `sleepers` here.
        fence(Ordering::SeqCst);
        let sleepers = self.sleepers.load(Ordering::SeqCst);
        if sleepers == 0 || handed == 0 {
            return;
        }
        let mut asleep = self.lock();
        if handed >= asleep.waiting {
            let wake = asleep.pick_all();
            drop(asleep);
            wake.send(&self.wake);
        } else {
            let woken = (0..handed)
                .filter(|_| asleep.pick_one() == Wake::One)
                .count();
            drop(asleep);
            (0..woken).for_each(|_| Wake::One.send(&self.wake));
        }
    }

    /// For tasks just queued, of `workers` workers of which `stuck` are in long runs: wakes one
    /// sleeping worker unless a worker is free to take them (see the module doc), or every
    /// sleeping worker when `backlog` says the queued tasks are falling behind.
    pub(crate) fn wake_for_waiting(&self, workers: usize, stuck: usize, backlog: bool) -> Woken {
        // Pairs with the fence in `sleep`, as in `wake_for_handed`.
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) == 0 {
            return Woken::NoneAsleep;
        }
        let mut asleep = self.lock();
        let (wake, woken) = if backlog {
            (asleep.pick_all(), Woken::All)
        } else {
            let awake = workers.saturating_sub(asleep.waiting);
            if awake.saturating_sub(stuck) + asleep.woken > 0 {
                return Woken::Free;
            }
            (asleep.pick_one(), Woken::One)
        };
        drop(asleep);
        wake.send(&self.wake);
        woken
    }

    /// Wakes one sleeping worker to help, unless one is on its way already: for a worker
    /// whose runs are falling behind, or a chore left to idle workers.
    pub(crate) fn wake_helper(&self) {
        // A hint, so no fence: the guarantee that no task is left with every worker asleep
        // is the tick threads' (`wake_for_waiting`, `wake_for_handed`).
        if self.sleepers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut asleep = self.lock();
        let wake = if asleep.woken == 0 {
            asleep.pick_one()
        } else {
            Wake::Nobody
        };
        drop(asleep);
        wake.send(&self.wake);
    }

    /// Lets workers exit once the queues are empty, waking every sleeper to see it.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let wake = self.lock().pick_all();
        wake.send(&self.wake);
    }

    /// Whether [`Idle::stop`] was called.
    #[inline]
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Worker: sleeps until woken, unless `has_work` (which reads the queues with SeqCst)
    /// finds a task queued meanwhile or the executor is stopping. It may return without a
    /// task: the caller looks again.
    pub(crate) fn sleep(&self, has_work: impl FnOnce() -> bool) {
        let mut asleep = self.lock();
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !has_work() && !self.stop.load(Ordering::SeqCst) {
            asleep.waiting += 1;
            asleep = self.wake.wait(asleep).unwrap_or_else(|e| e.into_inner());
            asleep.waiting -= 1;
            asleep.woken = asleep.woken.saturating_sub(1);
        }
        drop(asleep);
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    fn lock(&self) -> MutexGuard<'_, Asleep> {
        self.asleep.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A fresh `Idle`, its queue and `n` workers each waiting for one task (see [`worker`]).
    fn workers(n: usize) -> (Arc<Idle>, Arc<AtomicUsize>, Vec<thread::JoinHandle<usize>>) {
        let idle = Arc::new(Idle::new());
        let queued = Arc::new(AtomicUsize::new(0));
        let handles = (0..n)
            .map(|_| {
                let (idle, queued) = (Arc::clone(&idle), Arc::clone(&queued));
                thread::spawn(move || worker(&idle, &queued, 1))
            })
            .collect();
        (idle, queued, handles)
    }

    /// A worker's loop cut down to the protocol: `queued` counts the tasks in the queues. It
    /// takes at most `take` tasks, then returns how many it took once it has them or once the
    /// executor is stopped with nothing queued. A wake-up lost while it waits leaves it waiting
    /// for good, and loom reports the deadlock.
    fn worker(idle: &Idle, queued: &AtomicUsize, take: usize) -> usize {
        let mut taken = 0;
        while taken < take {
            if take_one(queued) {
                taken += 1;
            } else if idle.stopped() {
                break;
            } else {
                idle.sleep(|| queued.load(Ordering::SeqCst) > 0);
            }
        }
        taken
    }

    /// Takes one task from `queued` if there is one.
    fn take_one(queued: &AtomicUsize) -> bool {
        let mut n = queued.load(Ordering::SeqCst);
        while n > 0 {
            match queued.compare_exchange(n, n - 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(current) => n = current,
            }
        }
        false
    }

    /// A tick thread submits a task and wakes a worker, racing a worker on its way to sleep: the
    /// worker never stays asleep with the task queued. (The queue is written Relaxed: the
    /// fences carry it, as they do the hand-out ring's push.)
    #[test]
    fn submit_racing_sleep_wakes_the_worker() {
        loom::model(|| {
            let (idle, queued, mut sleepers) = workers(1);
            let sleeper = sleepers.remove(0);
            queued.fetch_add(1, Ordering::Relaxed);
            idle.wake_for_handed(1);
            assert_eq!(sleeper.join().unwrap(), 1);
        });
    }

    /// Two tasks in one batch, two workers each waiting for one: both are woken (or never
    /// sleep), whichever of them `sleepers` counted.
    #[test]
    fn batch_wakes_two_workers() {
        crate::sync::model_bounded(3, || {
            let (idle, queued, sleepers) = workers(2);
            queued.fetch_add(2, Ordering::Relaxed);
            idle.wake_for_handed(2);
            for sleeper in sleepers {
                assert_eq!(sleeper.join().unwrap(), 1);
            }
        });
    }

    /// Two tick threads each submit a task and wake one worker, racing two workers on their
    /// way to sleep: `notify_one` reaches a waiting worker even when `sleepers` still counts
    /// one that has woken, so neither task is left with a worker asleep.
    #[test]
    fn two_submits_wake_two_workers() {
        crate::sync::model_bounded(2, || {
            let (idle, queued, sleepers) = workers(2);
            let submitter = {
                let (idle, queued) = (Arc::clone(&idle), Arc::clone(&queued));
                thread::spawn(move || {
                    queued.fetch_add(1, Ordering::Relaxed);
                    idle.wake_for_handed(1);
                })
            };
            queued.fetch_add(1, Ordering::Relaxed);
            idle.wake_for_handed(1);
            submitter.join().unwrap();
            for sleeper in sleepers {
                assert_eq!(sleeper.join().unwrap(), 1);
            }
        });
    }

    /// `stop` racing two workers on their way to sleep wakes every one of them.
    #[test]
    fn stop_wakes_every_sleeper() {
        crate::sync::model_bounded(3, || {
            let (idle, _, sleepers) = workers(2);
            idle.stop();
            for sleeper in sleepers {
                assert_eq!(sleeper.join().unwrap(), 0);
            }
        });
    }

    /// What the `wake_for_waiting` models' workers took, and how the model's main thread waits for it.
    #[derive(Default)]
    struct Taken {
        count: loom::sync::Mutex<usize>,
        changed: loom::sync::Condvar,
    }

    impl Taken {
        fn add(&self) {
            *self.count.lock().unwrap() += 1;
            self.changed.notify_all();
        }

        /// Waits until `n` tasks were taken: a task left queued with every worker asleep
        /// leaves this waiting for good, and loom reports the deadlock.
        fn wait_for(&self, n: usize) {
            let mut count = self.count.lock().unwrap();
            while *count < n {
                count = self.changed.wait(count).unwrap();
            }
        }
    }

    /// `n` workers that take tasks until the executor stops, counting each in `Taken`. With
    /// `block_first`, the run of the first task taken lasts until a second has been taken (a
    /// run that blocks, as at a barrier), and the last atomic returned counts the workers in
    /// such a run.
    fn workers_to_wake(
        n: usize,
        block_first: bool,
    ) -> (
        Arc<Idle>,
        Arc<AtomicUsize>,
        Arc<Taken>,
        Arc<AtomicUsize>,
        Vec<thread::JoinHandle<()>>,
    ) {
        let idle = Arc::new(Idle::new());
        let queued = Arc::new(AtomicUsize::new(0));
        let taken = Arc::new(Taken::default());
        let blocked = Arc::new(AtomicUsize::new(0));
        let handles = (0..n)
            .map(|_| {
                let (idle, queued) = (Arc::clone(&idle), Arc::clone(&queued));
                let (taken, blocked) = (Arc::clone(&taken), Arc::clone(&blocked));
                thread::spawn(move || loop {
                    if take_one(&queued) {
                        let first = *taken.count.lock().unwrap() == 0;
                        taken.add();
                        if block_first && first {
                            // Stuck until the other task has been taken.
                            blocked.fetch_add(1, Ordering::SeqCst);
                            taken.wait_for(2);
                            blocked.fetch_sub(1, Ordering::SeqCst);
                        }
                    } else if idle.stopped() {
                        return;
                    } else {
                        idle.sleep(|| queued.load(Ordering::SeqCst) > 0);
                    }
                })
            })
            .collect();
        (idle, queued, taken, blocked, handles)
    }

    fn stop_and_join(idle: &Idle, workers: Vec<thread::JoinHandle<()>>) {
        idle.stop();
        for worker in workers {
            worker.join().unwrap();
        }
    }

    /// A tick thread queues a task and wakes for it, racing two workers on their way to sleep: it
    /// either wakes one or finds one free, and the task is taken.
    #[test]
    fn waking_for_waiting_racing_sleep_leaves_no_task_behind() {
        crate::sync::model_bounded(2, || {
            let (idle, queued, taken, _, workers) = workers_to_wake(2, false);
            queued.fetch_add(1, Ordering::Relaxed);
            idle.wake_for_waiting(2, 0, false);
            taken.wait_for(1);
            stop_and_join(&idle, workers);
        });
    }

    /// Two tick threads each queue a task and wake for it: the second may count on the worker the
    /// first woke (still on its way back), and both tasks are taken.
    #[test]
    fn two_tick_threads_waking_leave_no_task_behind() {
        crate::sync::model_bounded(2, || {
            let (idle, queued, taken, _, workers) = workers_to_wake(2, false);
            let wake_policy = {
                let (idle, queued) = (Arc::clone(&idle), Arc::clone(&queued));
                thread::spawn(move || {
                    queued.fetch_add(1, Ordering::Relaxed);
                    idle.wake_for_waiting(2, 0, false);
                })
            };
            queued.fetch_add(1, Ordering::Relaxed);
            idle.wake_for_waiting(2, 0, false);
            wake_policy.join().unwrap();
            taken.wait_for(2);
            stop_and_join(&idle, workers);
        });
    }

    /// Two tasks that meet (the first runs until the second is taken), one woken worker: once
    /// the tick thread's next look sees the awake worker stuck, it wakes the other.
    #[test]
    fn a_stuck_worker_gets_a_second_woken() {
        crate::sync::model_bounded(2, || {
            let (idle, queued, taken, blocked, workers) = workers_to_wake(2, true);
            queued.fetch_add(2, Ordering::Relaxed);
            idle.wake_for_waiting(2, 0, false);
            // The tick thread's later looks, each with the workers stuck at that moment.
            while *taken.count.lock().unwrap() < 2 {
                idle.wake_for_waiting(2, blocked.load(Ordering::SeqCst), false);
                thread::yield_now();
            }
            stop_and_join(&idle, workers);
        });
    }
}
