//! [`Idle`]: how the executor's workers sleep when they find nothing to run, and how tick
//! threads and shutdown wake them.
//!
//! A worker going to sleep takes the lock, counts itself in `sleepers`, then looks for work
//! and at `stop` once more before it waits. A tick thread queues its tasks, then reads
//! `sleepers` and takes the lock to notify only when someone is counted. A SeqCst fence on each
//! side between its write and its read makes at least one see the other, so a task is never
//! left queued with every worker asleep; and since a counted worker holds the lock until it
//! waits, a notify never arrives before the wait it is meant for.
//!
//! The lock, the condition variable and the atomics come from [`crate::sync`], so the models
//! below check the protocol under loom, with a loom atomic standing in for the queues.

use crate::sync::{fence, AtomicBool, AtomicUsize, Condvar, Mutex, Ordering};

/// The executor's sleeping workers: how many there are, and how to wake them.
pub(crate) struct Idle {
    sleepers: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
}

impl Idle {
    pub(crate) fn new() -> Self {
        Idle {
            sleepers: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        }
    }

    /// Wakes up to `handed` sleeping workers for tasks just queued.
    #[inline]
    pub(crate) fn notify(&self, handed: usize) {
        // Pairs with the fence in `sleep`: a worker going to sleep either sees the tasks or is
        // counted in `sleepers` here.
        fence(Ordering::SeqCst);
        let sleepers = self.sleepers.load(Ordering::SeqCst);
        if sleepers == 0 || handed == 0 {
            return;
        }
        let _guard = self.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
        if handed >= sleepers {
            self.wake.notify_all();
        } else {
            (0..handed).for_each(|_| self.wake.notify_one());
        }
    }

    /// Lets workers exit once the queues are empty, waking every sleeper to see it.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _guard = self.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.wake.notify_all();
    }

    /// Whether [`Idle::stop`] was called.
    #[inline]
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Worker: sleeps until notified, unless `has_work` (which reads the queues with SeqCst)
    /// finds a task queued meanwhile or the executor is stopping. It may return without a
    /// task: the caller looks again.
    pub(crate) fn sleep(&self, has_work: impl FnOnce() -> bool) {
        let guard = self.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !has_work() && !self.stop.load(Ordering::SeqCst) {
            drop(self.wake.wait(guard).unwrap_or_else(|e| e.into_inner()));
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
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
    /// executor is stopped with nothing queued. A notify lost while it waits leaves it waiting
    /// for good, and loom reports the deadlock.
    fn worker(idle: &Idle, queued: &AtomicUsize, take: usize) -> usize {
        let mut taken = 0;
        while taken < take {
            let mut n = queued.load(Ordering::SeqCst);
            while n > 0 {
                match queued.compare_exchange(n, n - 1, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => break,
                    Err(current) => n = current,
                }
            }
            if n > 0 {
                taken += 1;
            } else if idle.stopped() {
                break;
            } else {
                idle.sleep(|| queued.load(Ordering::SeqCst) > 0);
            }
        }
        taken
    }

    /// A tick thread submits a task and notifies, racing a worker on its way to sleep: the
    /// worker never stays asleep with the task queued. (The queue is written Relaxed: the
    /// fences carry it, as they do the hand-out ring's push.)
    #[test]
    fn submit_racing_sleep_wakes_the_worker() {
        loom::model(|| {
            let (idle, queued, mut sleepers) = workers(1);
            let sleeper = sleepers.remove(0);
            queued.fetch_add(1, Ordering::Relaxed);
            idle.notify(1);
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
            idle.notify(2);
            for sleeper in sleepers {
                assert_eq!(sleeper.join().unwrap(), 1);
            }
        });
    }

    /// Two tick threads each submit a task and notify one worker, racing two workers on their
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
                    idle.notify(1);
                })
            };
            queued.fetch_add(1, Ordering::Relaxed);
            idle.notify(1);
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
}
