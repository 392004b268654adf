//! The service used as a hostile or careless user would: ids from elsewhere, cancels that race
//! a queued run, shutdown from callbacks and from several threads at once, user code that
//! panics in a `Drop`. Each test would hang, fire early, lose a timer or kill a service thread
//! on a broken service; bodies that could hang run on a thread and fail on a deadline instead.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use common::{eventually, single, within, DropFlag, PanicsOnDrop, SOON};
use wheel_shard::{Config, ScheduleError, TimerId, TimerService};

fn fires_soon(timers: &TimerService) -> bool {
    let (tx, rx) = mpsc::channel();
    timers
        .schedule(Duration::from_millis(1), move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(SOON).is_ok()
}

#[test]
fn ids_are_16_bytes() {
    assert_eq!(std::mem::size_of::<TimerId>(), 16);
}

#[test]
fn another_services_id_does_not_touch_a_live_timer() {
    let a = single(Config::default());
    let b = single(Config::default());
    let from_a = a.schedule(Duration::from_secs(60), || {}).unwrap();
    // Both services are fresh, so b's first timer takes the same shard, slot and generation.
    let (tx, rx) = mpsc::channel();
    let live = b
        .schedule(Duration::from_millis(50), move || tx.send(()).unwrap())
        .unwrap();
    assert_ne!(from_a, live);
    assert!(!b.cancel(from_a), "a's id cancelled b's timer");
    assert!(!b.reschedule(from_a, Duration::from_secs(60)));
    assert!(rx.recv_timeout(SOON).is_ok(), "b's timer still fires");
    assert_eq!(b.stats().cancelled, 0);
    assert!(a.cancel(from_a));
}

#[test]
fn another_services_id_on_a_free_slot_changes_nothing() {
    // b's cells exist up front (capacity) and are all free: the slot a's id names is free in b.
    let a = single(Config::default());
    let b = single(Config {
        capacity: 16,
        max_pending: Some(2),
        ..Config::default()
    });
    let from_a = a.schedule(Duration::from_secs(60), || {}).unwrap();
    assert!(!b.cancel(from_a), "a free slot is not a timer on its way");
    assert!(!b.reschedule(from_a, Duration::from_millis(1)));

    // b's next timer lands in that slot: it must keep its own deadline and fire.
    let start = Instant::now();
    let (tx, rx) = mpsc::channel();
    b.schedule(Duration::from_millis(300), move || {
        tx.send(Instant::now()).unwrap()
    })
    .unwrap();
    let fired = rx.recv_timeout(SOON).expect("b's timer fires");
    assert!(
        fired - start >= Duration::from_millis(300),
        "fired early, after {:?}",
        fired - start
    );
    assert_eq!(b.stats().cancelled, 0, "nobody cancelled anything in b");

    // The max_pending count was not released by a cancel that took nothing.
    assert!(eventually(SOON, || b.pending() == 0));
    let first = b.schedule(Duration::from_secs(60), || {}).unwrap();
    let _second = b.schedule(Duration::from_secs(60), || {}).unwrap();
    assert_eq!(
        b.schedule(Duration::from_secs(60), || {}),
        Err(ScheduleError::TooManyPending { limit: 2 }),
        "exactly two places"
    );
    assert!(b.cancel(first));
    assert!(b.schedule(Duration::from_secs(60), || {}).is_ok());
    assert!(a.cancel(from_a));
}

#[test]
fn ids_of_ended_timers_stay_unknown_as_their_slot_is_reused() {
    let timers = single(Config::default());
    let mut old = Vec::new();
    for _ in 0..2_000 {
        let id = timers.schedule(Duration::from_secs(60), || {}).unwrap();
        assert!(timers.cancel(id));
        old.push(id);
    }
    let live = timers.schedule(Duration::from_secs(60), || {}).unwrap();
    for id in old {
        assert!(!timers.cancel(id), "{id:?} ended long ago");
        assert!(!timers.reschedule(id, Duration::from_millis(1)));
    }
    assert!(timers.cancel(live), "the live timer was untouched");
}

#[test]
fn cancel_skips_a_repeating_run_already_queued() {
    within(SOON * 2, || {
        let timers = single(Config::default());
        // Hold the only worker, so the repeating timer's run waits in the executor's queue.
        let (release, hold) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel();
        timers
            .schedule(Duration::ZERO, move || {
                started_tx.send(()).unwrap();
                let _ = hold.recv_timeout(Duration::from_secs(30));
            })
            .unwrap();
        started.recv_timeout(SOON).unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let id = {
            let runs = Arc::clone(&runs);
            timers
                .schedule_repeating(Duration::from_millis(5), move || {
                    runs.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap()
        };
        assert!(
            eventually(SOON, || timers.stats().executor_queue >= 1),
            "the run is queued behind the busy worker"
        );
        assert!(timers.cancel(id), "a repeating timer is cancellable");
        release.send(()).unwrap();
        assert!(eventually(SOON, || timers.stats().cancelled == 1));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(runs.load(Ordering::SeqCst), 0, "the queued run started");
        assert_eq!(timers.stats().fired, 1, "only the blocker ran");
        assert!(timers.shutdown().is_empty());
    });
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

#[test]
fn a_cancelled_task_whose_drop_panics_is_contained() {
    let timers = single(Config::default());
    let bomb = PanicsOnDrop;
    let id = timers
        .schedule(Duration::from_secs(60), move || drop(bomb))
        .unwrap();
    let kept = timers.schedule(Duration::from_secs(60), || {}).unwrap();
    assert!(timers.cancel(id));
    assert!(eventually(SOON, || timers.stats().drop_panics == 1));
    assert!(fires_soon(&timers), "the shard's tick thread still runs");
    let unfired = timers.shutdown();
    assert_eq!(unfired.len(), 1, "and hands back what it holds");
    assert_eq!(unfired[0].id, kept);
    assert_eq!(timers.stats().cancelled, 1);
}

#[test]
fn a_panic_payload_whose_drop_panics_does_not_kill_the_worker() {
    let timers = single(Config::default());
    timers
        .schedule(Duration::ZERO, || std::panic::panic_any(PanicsOnDrop))
        .unwrap();
    assert!(eventually(SOON, || timers.stats().drop_panics == 1));
    assert!(fires_soon(&timers), "the only worker still runs callbacks");
    let stats = timers.stats();
    assert_eq!(stats.panicked, 1);
    assert!(timers.shutdown().is_empty());
}

#[test]
fn a_repeating_task_whose_drop_panics_when_it_ends_does_not_kill_the_worker() {
    let timers = single(Config::default());
    // Ended by a cancel from its own run.
    let own_id = Arc::new(std::sync::Mutex::new(None::<TimerId>));
    let bomb = PanicsOnDrop;
    {
        let (service, slot) = (timers.clone(), Arc::clone(&own_id));
        let id = timers
            .schedule_repeating(Duration::from_millis(2), move || {
                let _keep = &bomb;
                if let Some(id) = *slot.lock().unwrap() {
                    service.cancel(id);
                }
            })
            .unwrap();
        *own_id.lock().unwrap() = Some(id);
    }
    assert!(eventually(SOON, || timers.stats().drop_panics == 1));
    assert!(fires_soon(&timers), "the only worker still runs callbacks");
    // Ended by a panicking run.
    let bomb = PanicsOnDrop;
    timers
        .schedule_repeating(Duration::from_millis(2), move || {
            let _keep = &bomb;
            panic!("a failing run");
        })
        .unwrap();
    assert!(eventually(SOON, || timers.stats().drop_panics == 2));
    assert!(fires_soon(&timers), "the only worker still runs callbacks");
    assert_eq!(timers.stats().panicked, 1);
    assert!(timers.shutdown().is_empty());
}

#[test]
fn unfired_tasks_whose_drop_panics_are_contained_when_the_last_handle_goes() {
    let timers = single(Config::default());
    for _ in 0..3 {
        let bomb = PanicsOnDrop;
        timers
            .schedule(Duration::from_secs(60), move || drop(bomb))
            .unwrap();
    }
    let other = timers.clone();
    // The last handle going drops the three unrun; their panics stay inside the service.
    within(SOON, move || {
        drop(other);
        drop(timers);
    });
}
