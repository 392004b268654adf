//! `shutdown` and the end of a service: it hands back every unfired timer once (repeating ones
//! too), waits for running tasks and is idempotent; it returns when called from callbacks, from a
//! task's `Drop`, from several threads at once, during an `advance` or while producers keep
//! scheduling; handed-back ids are dead; dropping the last handle (from a callback too, or a weak
//! handle's timer) stops and joins the threads.
//!
//! Every body that could hang runs under [`within`](crate::common::within) or a bounded wait, which
//! fails the test instead.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, OnceLock};
use std::time::Duration;

use wheel_shard::{Config, ScheduleError, TimerId, TimerService};

use crate::common::{
    counter, eventually, flag, manual, service, single, wheel_tasks, within, DropFlag, SOON,
};
use crate::{common, skip};

#[test]
fn shutdown_hands_back_waits_for_running_tasks_and_is_idempotent() {
    let timers = service();
    let finished = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = mpsc::channel();
    {
        let finished = Arc::clone(&finished);
        timers
            .schedule(Duration::ZERO, move || {
                started_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(200));
                finished.store(true, Ordering::SeqCst);
            })
            .unwrap();
    }
    let ran = Arc::new(AtomicBool::new(false));
    let later = {
        let ran = Arc::clone(&ran);
        timers
            .schedule(Duration::from_secs(60), move || {
                ran.store(true, Ordering::SeqCst)
            })
            .unwrap()
    };
    let cancelled = timers.schedule(Duration::from_secs(60), || {}).unwrap();
    assert!(timers.cancel(cancelled));
    started_rx.recv_timeout(SOON).unwrap();
    let unfired = timers.shutdown();
    assert!(
        finished.load(Ordering::SeqCst),
        "shutdown waited for the running task"
    );
    assert_eq!(unfired.iter().map(|u| u.id).collect::<Vec<_>>(), [later]);
    assert!(timers.shutdown().is_empty(), "idempotent");
    assert_eq!(
        timers.schedule(Duration::ZERO, || {}).unwrap_err(),
        ScheduleError::Shutdown
    );
    assert!(
        !timers.cancel(later),
        "handed back: no longer the service's"
    );
    unfired.into_iter().for_each(|u| u.run());
    assert!(ran.load(Ordering::SeqCst), "Unfired::run runs the task");
    let stats = timers.stats();
    assert_eq!(stats.scheduled, 3);
    assert_eq!(stats.fired + stats.cancelled + 1, stats.scheduled);
    assert_eq!(stats.rejected, 1);
}

#[test]
fn shutdown_hands_back_repeating_timers() {
    let timers = service();
    let id = timers
        .schedule_repeating(Duration::from_millis(3), || {})
        .unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let unfired = timers.shutdown();
    assert_eq!(unfired.len(), 1);
    assert_eq!(unfired[0].id, id);
}

// Guards: ids handed back by shutdown are dead (cancel/reschedule false); an Unfired dropped
// instead of run drops its task unrun; a one-shot Unfired::run that panics unwinds into its
// caller (it runs on the caller's thread) and still drops what the task captured.
#[test]
fn handed_back_timers_are_dead_ids_and_run_or_drop_exactly_once() {
    let timers = single(Config::default());
    let (runs, make) = counter();
    let (run_dropped, run_flag) = flag();
    let (unrun_dropped, unrun_flag) = flag();
    let (panic_dropped, panic_flag) = flag();
    let to_run = {
        let task = make();
        timers
            .schedule(Duration::from_secs(60), move || {
                let _keep = &run_flag;
                task();
            })
            .unwrap()
    };
    let to_drop = {
        let task = make();
        timers
            .schedule(Duration::from_secs(60), move || {
                let _keep = &unrun_flag;
                task();
            })
            .unwrap()
    };
    let to_panic = timers
        .schedule(Duration::from_secs(60), move || {
            let _keep = &panic_flag;
            panic!("a failing handed-back run");
        })
        .unwrap();
    let mut unfired = timers.shutdown();
    assert_eq!(unfired.len(), 3);
    for id in [to_run, to_drop, to_panic] {
        assert!(
            !timers.cancel(id),
            "{id:?} was handed back: not the service's"
        );
        assert!(!timers.reschedule(id, Duration::ZERO));
    }
    let take = |unfired: &mut Vec<wheel_shard::Unfired>, id| {
        let at = unfired
            .iter()
            .position(|u| u.id == id)
            .expect("handed back");
        unfired.swap_remove(at)
    };
    take(&mut unfired, to_run).run();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(run_dropped.load(Ordering::SeqCst));
    drop(take(&mut unfired, to_drop));
    assert!(unrun_dropped.load(Ordering::SeqCst), "dropped unrun");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a dropped Unfired never runs"
    );
    let failing = take(&mut unfired, to_panic);
    assert!(catch_unwind(AssertUnwindSafe(|| failing.run())).is_err());
    assert!(panic_dropped.load(Ordering::SeqCst), "captures dropped");
    let stats = timers.stats();
    assert_eq!((stats.fired, stats.cancelled, stats.pending), (0, 0, 0));
}

#[test]
fn shutdown_from_a_callback_during_another_shutdown_returns() {
    within(SOON * 2, || {
        let timers = single(Config::default());
        let entered = Arc::new(Barrier::new(2));
        let (done_tx, done) = mpsc::channel();
        {
            let timers = timers.clone();
            let entered = Arc::clone(&entered);
            timers
                .clone()
                .schedule(Duration::ZERO, move || {
                    entered.wait();
                    // Let the outer shutdown get to joining this worker.
                    std::thread::sleep(Duration::from_millis(50));
                    done_tx.send(timers.shutdown().len()).unwrap();
                })
                .unwrap();
        }
        timers.schedule(Duration::from_secs(60), || {}).unwrap();
        entered.wait();
        let unfired = timers.shutdown();
        assert_eq!(
            unfired.len(),
            1,
            "the outer call hands back the pending timer"
        );
        assert_eq!(
            done.recv_timeout(SOON).unwrap(),
            0,
            "the inner call hands back nothing"
        );
        assert_eq!(
            timers.schedule(Duration::ZERO, || {}),
            Err(ScheduleError::Shutdown)
        );
    });
}

#[test]
fn shutdown_from_two_callbacks_at_once_returns() {
    within(SOON * 2, || {
        let timers = TimerService::new(Config {
            shards: 1,
            executor_threads: 2,
            pin_threads: false,
            ..Config::default()
        })
        .unwrap();
        let both = Arc::new(Barrier::new(2));
        let (tx, rx) = mpsc::channel();
        for _ in 0..2 {
            let (service, both, tx) = (timers.clone(), Arc::clone(&both), tx.clone());
            timers
                .schedule(Duration::from_millis(5), move || {
                    both.wait();
                    tx.send(service.shutdown().len()).unwrap();
                })
                .unwrap();
        }
        timers.schedule(Duration::from_secs(60), || {}).unwrap();
        let handed: usize = (0..2).map(|_| rx.recv_timeout(SOON).unwrap()).sum();
        assert_eq!(handed, 1, "the pending timer comes back exactly once");
        assert!(
            timers.shutdown().is_empty(),
            "and a later call returns nothing"
        );
    });
}

// Guards: a callback that shuts the service down while timers of the same tick (postponed by
// `reschedule`) are already handed to its worker must not lose them: each is handed back or
// fires.
#[test]
fn shutdown_from_a_callback_keeps_postponed_timers_of_the_same_batch() {
    let report = within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let due = clock.now() + Duration::from_millis(10);
        let (tx, rx) = mpsc::channel();
        {
            let service = timers.clone();
            timers
                .schedule_at(due, move || {
                    let unfired = service.shutdown();
                    tx.send(unfired.iter().map(|u| u.id).collect::<Vec<_>>())
                        .unwrap();
                })
                .unwrap();
        }
        let (runs, make) = counter();
        let postponed: Vec<TimerId> = (0..4)
            .map(|_| timers.schedule_at(due, make()).unwrap())
            .collect();
        for &id in &postponed {
            assert!(timers.reschedule(id, Duration::from_secs(3600)));
        }
        let far = timers.schedule(Duration::from_secs(7200), || {}).unwrap();
        clock.advance(Duration::from_millis(10));
        let handed: HashSet<TimerId> = rx.recv_timeout(SOON).unwrap().into_iter().collect();
        assert!(timers.shutdown().is_empty(), "the callback's call did it");
        // Let the worker finish its batch.
        std::thread::sleep(Duration::from_millis(100));
        let lost: Vec<TimerId> = postponed
            .iter()
            .copied()
            .filter(|id| !handed.contains(id))
            .collect();
        let still_cancellable = lost.iter().filter(|&&id| timers.cancel(id)).count();
        (
            handed.contains(&far),
            lost.len(),
            still_cancellable,
            runs.load(Ordering::SeqCst),
        )
    });
    let (far_back, lost, still_cancellable, runs) = report;
    assert!(far_back, "the far timer is handed back");
    assert_eq!(runs, 0, "postponed an hour: none may run");
    assert_eq!(
        lost, 0,
        "{lost} postponed timers were neither handed back nor fired \
         ({still_cancellable} of them still cancellable after shutdown)"
    );
}

#[test]
fn shutdown_from_many_threads_at_once_hands_back_each_timer_once() {
    within(SOON * 2, || {
        let timers = single(Config::default());
        for _ in 0..100 {
            timers.schedule(Duration::from_secs(60), || {}).unwrap();
        }
        let callers: Vec<_> = (0..8)
            .map(|_| {
                let timers = timers.clone();
                std::thread::spawn(move || timers.shutdown().len())
            })
            .collect();
        let handed: usize = callers.into_iter().map(|c| c.join().unwrap()).sum();
        assert_eq!(handed, 100);
        assert_eq!(
            timers.pending(),
            0,
            "every caller returned after the service stopped"
        );
    });
}

// Guards: shutdowns from several threads while producers keep scheduling: every accepted
// timer is handed back exactly once (none lost, none twice), every refusal is typed, and
// every producer ends with `Shutdown`, at the latest on its first call begun after every
// shutdown had returned.
#[test]
fn concurrent_shutdowns_while_producers_schedule_lose_nothing() {
    within(SOON * 3, || {
        let timers = common::service();
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..3)
            .map(|_| {
                let (timers, stop) = (timers.clone(), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut ids = Vec::new();
                    let mut saturated = 0usize;
                    // A valve on memory should the shutdown never come.
                    for _ in 0..5_000_000 {
                        // Read before the call: a call that began before every shutdown had
                        // returned may still be accepted; one that began after must not be.
                        let after_shutdown = stop.load(Ordering::Acquire);
                        match timers.schedule(Duration::from_secs(3600), || {}) {
                            Ok(id) => ids.push(id),
                            Err(ScheduleError::Saturated) => saturated += 1,
                            Err(ScheduleError::Shutdown) => return (ids, saturated, true),
                            Err(other) => panic!("unexpected refusal {other:?}"),
                        }
                        if after_shutdown {
                            break;
                        }
                    }
                    (ids, saturated, false)
                })
            })
            .collect();
        assert!(
            eventually(SOON, || timers.stats().scheduled >= 20_000),
            "the producers got going"
        );
        let shutters: Vec<_> = (0..3)
            .map(|_| {
                let timers = timers.clone();
                std::thread::spawn(move || timers.shutdown())
            })
            .collect();
        let handed: Vec<TimerId> = shutters
            .into_iter()
            .flat_map(|s| s.join().unwrap())
            .map(|u| u.id)
            .collect();
        // Release: a producer that reads it also sees the service shut down.
        stop.store(true, Ordering::Release);
        let mut accepted = Vec::new();
        let mut saw_shutdown = 0;
        for producer in producers {
            let (ids, _saturated, ended_by_shutdown) = producer.join().unwrap();
            accepted.extend(ids);
            saw_shutdown += usize::from(ended_by_shutdown);
        }
        assert_eq!(saw_shutdown, 3, "every producer was told Shutdown");
        let handed_set: HashSet<TimerId> = handed.iter().copied().collect();
        assert_eq!(handed_set.len(), handed.len(), "a timer handed back twice");
        let accepted_set: HashSet<TimerId> = accepted.iter().copied().collect();
        assert_eq!(accepted_set.len(), accepted.len(), "an id handed out twice");
        let lost = accepted_set.difference(&handed_set).count();
        let unknown = handed_set.difference(&accepted_set).count();
        assert_eq!((lost, unknown), (0, 0), "accepted {}", accepted.len());
        let stats = timers.stats();
        assert_eq!(stats.scheduled, accepted.len() as u64);
        assert_eq!((stats.fired, stats.pending), (0, 0));
    });
}

// Guards: a shutdown from another thread while `ManualClock::advance` waits for a long
// callback: both return, and the pending timer is handed back.
#[test]
fn shutdown_during_an_advance_waiting_for_a_callback_returns() {
    within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let (started_tx, started) = mpsc::channel();
        timers
            .schedule(Duration::from_millis(10), move || {
                started_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(200));
            })
            .unwrap();
        let far = timers.schedule(Duration::from_secs(3600), || {}).unwrap();
        let advancing = {
            let clock = clock.clone();
            std::thread::spawn(move || clock.advance(Duration::from_millis(20)))
        };
        started.recv_timeout(SOON).unwrap();
        let unfired = timers.shutdown();
        assert_eq!(unfired.iter().map(|u| u.id).collect::<Vec<_>>(), [far]);
        advancing.join().unwrap();
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.pending), (1, 0));
    });
}

#[test]
fn a_repeating_timer_that_shuts_down_the_service_is_not_rearmed_and_is_freed() {
    let dropped = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicUsize::new(0));
    within(SOON * 2, {
        let (dropped, runs) = (Arc::clone(&dropped), Arc::clone(&runs));
        move || {
            let timers = single(Config::default());
            let (tx, rx) = mpsc::channel();
            {
                let service = timers.clone();
                let flag = DropFlag(dropped);
                timers
                    .schedule_repeating(Duration::from_millis(2), move || {
                        let _keep = &flag;
                        runs.fetch_add(1, Ordering::SeqCst);
                        let _ = tx.send(service.shutdown().len());
                    })
                    .unwrap();
            }
            assert_eq!(
                rx.recv_timeout(SOON).unwrap(),
                0,
                "nothing else was pending"
            );
            drop(timers);
        }
    });
    // Its closure held a handle to the service: dropping it is what lets the service go.
    assert!(
        eventually(SOON, || dropped.load(Ordering::SeqCst)),
        "the task was kept after shutdown"
    );
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "re-armed after shutdown");
}

#[test]
fn a_cancelled_task_whose_drop_shuts_down_the_service() {
    within(SOON * 2, || {
        let timers = single(Config::default());
        struct ShutsDownOnDrop(TimerService);
        impl Drop for ShutsDownOnDrop {
            fn drop(&mut self) {
                self.0.shutdown();
            }
        }
        let on_drop = ShutsDownOnDrop(timers.clone());
        let id = timers
            .schedule(Duration::from_secs(60), move || drop(on_drop))
            .unwrap();
        // `cancel` drops the task on the calling thread, whose drop shuts the service down there.
        assert!(timers.cancel(id));
        assert!(eventually(SOON, || timers.schedule(Duration::ZERO, || {})
            == Err(ScheduleError::Shutdown)));
        assert!(timers.shutdown().is_empty());
    });
}

// Guards: shutdown called from a task's Drop on a worker (a repeating timer that cancels
// itself: its task is dropped there when the run returns) hands back every other timer once.
#[test]
fn shutdown_from_a_repeating_tasks_drop_on_a_worker_hands_back_the_rest() {
    struct ShutsDownOnDrop(TimerService, mpsc::Sender<usize>);
    impl Drop for ShutsDownOnDrop {
        fn drop(&mut self) {
            let _ = self.1.send(self.0.shutdown().len());
        }
    }
    let (handed, runs) = within(SOON, || {
        let (timers, clock) = manual(2, 2);
        for _ in 0..5 {
            timers.schedule(Duration::from_secs(3600), || {}).unwrap();
        }
        let (tx, rx) = mpsc::channel();
        let own: Arc<OnceLock<TimerId>> = Arc::new(OnceLock::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let own_cancel = Arc::new(AtomicBool::new(false));
        let on_drop = ShutsDownOnDrop(timers.clone(), tx);
        let id = {
            let (service, own, runs, own_cancel) = (
                timers.clone(),
                Arc::clone(&own),
                Arc::clone(&runs),
                Arc::clone(&own_cancel),
            );
            timers
                .schedule_repeating(Duration::from_millis(10), move || {
                    let _keep = &on_drop;
                    runs.fetch_add(1, Ordering::SeqCst);
                    let cancelled = service.cancel(*own.get().unwrap());
                    own_cancel.store(cancelled, Ordering::SeqCst);
                })
                .unwrap()
        };
        own.set(id).unwrap();
        clock.advance(Duration::from_millis(50));
        let handed = rx.recv_timeout(SOON).expect("the Drop's shutdown returned");
        assert!(
            own_cancel.load(Ordering::SeqCst),
            "cancel from its own run is true"
        );
        assert!(timers.shutdown().is_empty(), "done already");
        let stats = timers.stats();
        assert_eq!(stats.cancelled, 1);
        assert_eq!(stats.pending, 0);
        (handed, runs.load(Ordering::SeqCst))
    });
    assert_eq!(handed, 5, "the five far timers, once");
    assert_eq!(runs, 1, "cancelled during its first run: no second");
}

// Guards: a repeating task that holds the service's last handle and cancels itself drops
// that handle on its worker when its last run returns: the service stops (unfired tasks
// dropped) and nothing hangs.
#[test]
fn a_repeating_task_holding_the_last_handle_that_cancels_itself_stops_the_service() {
    let (far_dropped, far_flag) = flag();
    let (own_dropped, own_flag) = flag();
    let runs = Arc::new(AtomicUsize::new(0));
    {
        let runs = Arc::clone(&runs);
        within(SOON, move || {
            let timers = single(Config::default());
            timers
                .schedule(Duration::from_secs(3600), move || drop(far_flag))
                .unwrap();
            let own: Arc<OnceLock<TimerId>> = Arc::new(OnceLock::new());
            let id = {
                let (service, own) = (timers.clone(), Arc::clone(&own));
                timers
                    .schedule_repeating(Duration::from_millis(2), move || {
                        let _keep = &own_flag;
                        if runs.fetch_add(1, Ordering::SeqCst) + 1 >= 3 {
                            if let Some(&id) = own.get() {
                                assert!(service.cancel(id));
                            }
                        }
                    })
                    .unwrap()
            };
            own.set(id).unwrap();
            // The repeating task's handle is now the last one.
            drop(timers);
        });
    }
    assert!(
        eventually(SOON, || own_dropped.load(Ordering::SeqCst)),
        "the cancelled task was never dropped"
    );
    assert!(
        eventually(SOON, || far_dropped.load(Ordering::SeqCst)),
        "the service never stopped: its unfired task was not dropped"
    );
    let settled = runs.load(Ordering::SeqCst);
    assert!(settled >= 3);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(runs.load(Ordering::SeqCst), settled, "ran after its cancel");
}

#[test]
fn threads_are_named_and_joined_when_the_last_handle_drops() {
    fn wheel_threads() -> Vec<String> {
        wheel_tasks().into_iter().map(|(name, _)| name).collect()
    }
    if !std::path::Path::new("/proc/self/task").exists() {
        skip::record(
            "no /proc/self/task on this platform: thread names cannot be read",
            "run it on Linux",
        );
        return;
    }
    let timers = TimerService::new(Config {
        shards: 3,
        tick_threads: Some(3),
        executor_threads: 2,
        pin_threads: true, // more tick threads than cores here: pinning wraps around
        ..Config::default()
    })
    .unwrap();
    // A thread names itself as it starts: give them a moment.
    let expected = [
        "wheel-tick-0",
        "wheel-tick-1",
        "wheel-tick-2",
        "wheel-exec-0",
        "wheel-exec-1",
    ];
    assert!(
        eventually(SOON, || {
            let names = wheel_threads();
            expected.iter().all(|e| names.iter().any(|n| n == e))
        }),
        "threads missing from {:?}",
        wheel_threads()
    );
    let clone = timers.clone();
    drop(timers);
    assert!(
        !wheel_threads().is_empty(),
        "a clone keeps the service running"
    );
    clone.schedule(Duration::from_secs(60), || {}).unwrap();
    drop(clone);
    // Other tests in this binary run services of their own: count only this one's shard 2.
    assert!(eventually(SOON, || !wheel_threads()
        .iter()
        .any(|n| n == "wheel-tick-2")));
}

#[test]
fn a_callback_may_drop_the_last_handle() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    let inner = timers.clone();
    timers
        .schedule(Duration::from_millis(5), move || {
            drop(inner); // shuts the service down from its own worker thread
            tx.send(()).unwrap();
        })
        .unwrap();
    drop(timers);
    rx.recv_timeout(SOON)
        .expect("the callback ran and its shutdown did not deadlock");
}

/// A repeating timer that reschedules itself through a `WeakTimerService` does not keep the
/// service running: dropping the application's last handle shuts it down (the timer's
/// callback is dropped, nothing runs any more, `upgrade` says so); the same timer holding a
/// strong handle keeps the service up until it is cancelled.
#[test]
fn a_weak_handle_in_a_repeating_callback_lets_the_service_shut_down() {
    fn backing_off(
        timers: &TimerService,
        strong: bool,
    ) -> (TimerId, Arc<AtomicUsize>, Arc<AtomicBool>) {
        let runs = Arc::new(AtomicUsize::new(0));
        let (dropped, guard) = common::flag();
        let me = Arc::new(std::sync::OnceLock::new());
        let weak = timers.downgrade();
        let held = strong.then(|| timers.clone());
        let id = timers
            .schedule_repeating(Duration::from_millis(2), {
                let (runs, me) = (Arc::clone(&runs), Arc::clone(&me));
                move || {
                    let _ = &guard;
                    let _ = &held;
                    runs.fetch_add(1, Ordering::SeqCst);
                    if let (Some(timers), Some(&id)) = (weak.upgrade(), me.get()) {
                        assert!(timers.reschedule(id, Duration::from_millis(3)));
                    }
                }
            })
            .unwrap();
        me.set(id).unwrap();
        (id, runs, dropped)
    }

    fn clone_send_sync_debug<T: Clone + Send + Sync + std::fmt::Debug>(_: &T) {}
    let timers = service();
    let weak = timers.downgrade();
    clone_send_sync_debug(&weak);
    let (_, runs, dropped) = backing_off(&timers, false);
    assert!(eventually(SOON, || runs.load(Ordering::SeqCst) >= 3));
    drop(timers);
    // A run in progress may hold the last strong handle for a moment (its `upgrade`): the
    // service shuts down when that run lets go of it.
    assert!(
        eventually(SOON, || weak.upgrade().is_none()),
        "the last strong handle is gone"
    );
    assert!(
        eventually(SOON, || dropped.load(Ordering::SeqCst)),
        "shut down: the callback was dropped"
    );
    let after = runs.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        after,
        "nothing runs after the shutdown"
    );

    let timers = service();
    let weak = timers.downgrade();
    let (id, runs, dropped) = backing_off(&timers, true);
    let keeper = timers.clone();
    drop(timers);
    assert!(eventually(SOON, || runs.load(Ordering::SeqCst) >= 3));
    assert!(
        weak.upgrade().is_some(),
        "a strong handle in the callback keeps it up"
    );
    assert!(keeper.cancel(id));
    drop(keeper);
    assert!(
        eventually(SOON, || weak.upgrade().is_none()),
        "cancelled: the callback and its handle went, and the service with them"
    );
    assert!(dropped.load(Ordering::SeqCst));
}
