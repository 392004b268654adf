//! `TimerService::shutdown_timeout`: a shutdown that waits for running callbacks only so long.
//! Each test would hang, lose or double a timer, run a callback after the shutdown gave up on
//! it, or re-arm a repeating timer on a broken service; bodies that could hang run on a thread
//! and fail on a deadline instead. Timing bounds are generous (a loaded 2-core machine).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{eventually, flag, single, within, SOON};
use wheel_shard::{Config, ScheduleError, Stats, TimerId, TimerService};

/// How long the blocking callbacks block.
const BLOCK: Duration = Duration::from_secs(3);
/// The timeout the tests give `shutdown_timeout`.
const TIMEOUT: Duration = Duration::from_millis(200);
/// How soon after its timeout `shutdown_timeout` must have returned.
const RETURNS_WITHIN: Duration = Duration::from_secs(1);

/// Every accepted timer ended exactly once: fired, cancelled or handed back (one-shots only).
fn adds_up(stats: &Stats, handed_back: usize) {
    assert_eq!(
        stats.fired + stats.cancelled + handed_back as u64,
        stats.scheduled,
        "{stats:?}"
    );
    assert_eq!(stats.pending, 0, "{stats:?}");
}

/// One shard, one worker: a callback that blocks holds up everything due with it. The first of
/// `same_tick` timers due at the same instant to run blocks for [`BLOCK`] (it says which it
/// is on the returned channel when it starts, and on the second when it returns); every other
/// one counts a run in the returned counter.
fn stuck_service(
    same_tick: usize,
) -> (
    TimerService,
    Vec<TimerId>,
    mpsc::Receiver<usize>,
    mpsc::Receiver<()>,
    Arc<AtomicUsize>,
) {
    let timers = single(Config::default());
    let due = Instant::now() + Duration::from_millis(20);
    let first = Arc::new(AtomicBool::new(true));
    let runs = Arc::new(AtomicUsize::new(0));
    let (started_tx, started) = mpsc::channel();
    let (returned_tx, returned) = mpsc::channel();
    let ids = (0..same_tick)
        .map(|i| {
            let (first, runs) = (Arc::clone(&first), Arc::clone(&runs));
            let (started_tx, returned_tx) = (started_tx.clone(), returned_tx.clone());
            timers
                .schedule_at(due, move || {
                    if first.swap(false, Ordering::SeqCst) {
                        started_tx.send(i).unwrap();
                        std::thread::sleep(BLOCK);
                        returned_tx.send(()).unwrap();
                    } else {
                        runs.fetch_add(1, Ordering::SeqCst);
                    }
                })
                .unwrap()
        })
        .collect();
    (timers, ids, started, returned, runs)
}

#[test]
fn a_stuck_callback_is_named_and_every_other_timer_comes_back() {
    within(SOON * 2, || {
        let (timers, same_tick, started, returned, runs) = stuck_service(50);
        let far: Vec<TimerId> = (0..20)
            .map(|i| {
                timers
                    .schedule(Duration::from_secs(60 + i), || unreachable!())
                    .unwrap()
            })
            .collect();
        let stuck = same_tick[started.recv_timeout(SOON).expect("a callback started")];

        let begun = Instant::now();
        let report = timers.shutdown_timeout(TIMEOUT);
        let took = begun.elapsed();
        assert!(
            took >= TIMEOUT,
            "returned after {took:?}, before the timeout"
        );
        assert!(took < TIMEOUT + RETURNS_WITHIN, "returned after {took:?}");

        assert!(!report.is_complete());
        assert_eq!(report.still_running.len(), 1, "{report:?}");
        assert_eq!(report.still_running[0].id, stuck);
        assert!(report.still_running[0].running_for >= TIMEOUT);
        assert!(report.still_running[0].running_for < BLOCK);
        let handed: HashSet<TimerId> = report.unfired.iter().map(|u| u.id).collect();
        assert_eq!(handed.len(), report.unfired.len(), "each handed back once");
        let expected: HashSet<TimerId> = same_tick
            .iter()
            .chain(&far)
            .copied()
            .filter(|&id| id != stuck)
            .collect();
        assert_eq!(
            handed, expected,
            "the far ones and those queued behind the stuck callback"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran behind it");
        assert_eq!(
            timers.schedule(Duration::ZERO, || {}),
            Err(ScheduleError::Shutdown)
        );
        assert!(!timers.cancel(stuck), "it is running");
        assert!(!timers.cancel(far[0]), "handed back");

        // The callback returns; its worker starts nothing more, and a later `shutdown` from
        // outside the service waits for it and joins it.
        assert!(timers.shutdown().is_empty());
        assert!(
            begun.elapsed() >= BLOCK - Duration::from_millis(500),
            "shutdown returned before the stuck callback"
        );
        returned
            .recv_timeout(SOON)
            .expect("the stuck callback returned");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran after it");
        let stats = timers.stats();
        assert_eq!(stats.fired, 1, "only the stuck callback");
        adds_up(&stats, report.unfired.len());
        drop(report);
    });
}

#[test]
fn without_a_slow_callback_it_is_shutdown() {
    within(SOON * 2, || {
        let timed = common::service();
        let plain = common::service();
        for timers in [&timed, &plain] {
            let (tx, rx) = mpsc::channel();
            for _ in 0..100 {
                let tx = tx.clone();
                timers
                    .schedule(Duration::from_millis(1), move || tx.send(()).unwrap())
                    .unwrap();
            }
            for i in 0..30 {
                timers
                    .schedule(Duration::from_secs(60 + i), || unreachable!())
                    .unwrap();
            }
            let cancelled = timers.schedule(Duration::from_secs(60), || {}).unwrap();
            assert!(timers.cancel(cancelled));
            (0..100).for_each(|_| rx.recv_timeout(SOON).unwrap());
        }
        let begun = Instant::now();
        let report = timed.shutdown_timeout(Duration::from_secs(5));
        assert!(begun.elapsed() < RETURNS_WITHIN, "{:?}", begun.elapsed());
        assert!(report.is_complete(), "{report:?}");
        let unfired = plain.shutdown();
        assert_eq!(report.unfired.len(), 30);
        assert_eq!(unfired.len(), 30);
        for timers in [&timed, &plain] {
            let stats = timers.stats();
            assert_eq!((stats.fired, stats.cancelled), (100, 1));
            adds_up(&stats, 30);
            assert!(timers.shutdown().is_empty(), "idempotent");
            let again = timers.shutdown_timeout(TIMEOUT);
            assert!(again.unfired.is_empty() && again.is_complete(), "{again:?}");
            assert_eq!(
                timers.schedule(Duration::ZERO, || {}),
                Err(ScheduleError::Shutdown)
            );
        }
    });
}

#[test]
fn a_repeating_timer_stuck_at_the_timeout_is_not_rearmed() {
    let (dropped, on_drop) = flag();
    let runs = Arc::new(AtomicUsize::new(0));
    within(SOON * 2, {
        let runs = Arc::clone(&runs);
        move || {
            let timers = single(Config::default());
            let (started_tx, started) = mpsc::channel();
            let (release_tx, release) = mpsc::channel::<()>();
            let id = timers
                .schedule_repeating(Duration::from_millis(5), {
                    let runs = Arc::clone(&runs);
                    move || {
                        let _keep = &on_drop;
                        runs.fetch_add(1, Ordering::SeqCst);
                        let _ = started_tx.send(());
                        let _ = release.recv_timeout(BLOCK);
                    }
                })
                .unwrap();
            let far = timers.schedule(Duration::from_secs(60), || {}).unwrap();
            started.recv_timeout(SOON).expect("the first run started");

            let begun = Instant::now();
            let report = timers.shutdown_timeout(TIMEOUT);
            assert!(begun.elapsed() < TIMEOUT + RETURNS_WITHIN);
            assert_eq!(report.still_running.len(), 1, "{report:?}");
            assert_eq!(report.still_running[0].id, id);
            assert_eq!(
                report.unfired.iter().map(|u| u.id).collect::<Vec<_>>(),
                vec![far]
            );
            assert_eq!(timers.pending(), 0, "the run in progress is its last");
            assert!(!timers.cancel(id), "it has ended");
            assert!(!dropped.load(Ordering::SeqCst), "its task is with the run");

            release_tx.send(()).unwrap();
            assert!(
                eventually(SOON, || dropped.load(Ordering::SeqCst)),
                "its task is dropped when the run returns"
            );
            assert!(timers.shutdown().is_empty());
            assert_eq!(timers.pending(), 0);
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "re-armed after the timeout");
}

#[test]
fn called_from_a_callback_it_does_not_wait_for_its_own_worker() {
    within(SOON * 2, || {
        let timers = TimerService::new(Config {
            shards: 1,
            executor_threads: 2,
            pin_threads: false,
            ..Config::default()
        })
        .unwrap();
        let both = Arc::new(Barrier::new(2));
        let (returned_tx, returned) = mpsc::channel();
        // One callback blocks its worker; the other, on the second worker, shuts down.
        let blocker = timers
            .schedule(Duration::from_millis(5), {
                let both = Arc::clone(&both);
                move || {
                    both.wait();
                    std::thread::sleep(Duration::from_secs(2));
                    returned_tx.send(()).unwrap();
                }
            })
            .unwrap();
        let far = timers.schedule(Duration::from_secs(60), || {}).unwrap();
        let (report_tx, report_rx) = mpsc::channel();
        let me: Arc<OnceLock<TimerId>> = Arc::default();
        let caller = timers
            .schedule(Duration::from_millis(5), {
                let (service, both, me) = (timers.downgrade(), Arc::clone(&both), Arc::clone(&me));
                move || {
                    both.wait();
                    let timers = service.upgrade().unwrap();
                    let begun = Instant::now();
                    let report = timers.shutdown_timeout(TIMEOUT);
                    let took = begun.elapsed();
                    let still: Vec<TimerId> = report.still_running.iter().map(|r| r.id).collect();
                    let unfired: Vec<TimerId> = report.unfired.iter().map(|u| u.id).collect();
                    assert!(
                        !still.contains(me.get().unwrap()),
                        "its own run is not listed"
                    );
                    report_tx.send((took, still, unfired)).unwrap();
                }
            })
            .unwrap();
        me.set(caller).unwrap();
        let (took, still, unfired) = report_rx.recv_timeout(SOON).expect("the call returned");
        assert!(took < TIMEOUT + RETURNS_WITHIN, "{took:?}");
        assert_eq!(still, vec![blocker], "the other worker's callback");
        assert_eq!(unfired, vec![far]);
        // A later call from outside waits for the blocked callback.
        assert!(timers.shutdown().is_empty());
        assert!(
            returned.try_recv().is_ok(),
            "shutdown returned before the callback"
        );
        adds_up(&timers.stats(), 1);
    });
}

#[test]
fn called_from_a_callback_with_nothing_else_running_it_returns_at_once() {
    within(SOON, || {
        let timers = single(Config::default());
        let far = timers.schedule(Duration::from_secs(60), || {}).unwrap();
        let (tx, rx) = mpsc::channel();
        {
            let service = timers.downgrade();
            timers
                .schedule(Duration::ZERO, move || {
                    let begun = Instant::now();
                    let report = service
                        .upgrade()
                        .unwrap()
                        .shutdown_timeout(Duration::from_secs(30));
                    tx.send((begun.elapsed(), report)).unwrap();
                })
                .unwrap();
        }
        let (took, report) = rx.recv_timeout(SOON).unwrap();
        assert!(
            took < RETURNS_WITHIN,
            "it waited for its own worker: {took:?}"
        );
        assert!(report.is_complete(), "{report:?}");
        assert_eq!(report.unfired.len(), 1);
        assert_eq!(report.unfired[0].id, far);
        assert!(timers.shutdown().is_empty());
        adds_up(&timers.stats(), 1);
    });
}

#[test]
fn a_second_call_hands_back_nothing_and_names_what_still_runs() {
    within(SOON * 2, || {
        let (timers, same_tick, started, returned, runs) = stuck_service(10);
        let stuck = same_tick[started.recv_timeout(SOON).unwrap()];
        let first = timers.shutdown_timeout(TIMEOUT);
        assert_eq!(first.unfired.len(), 9);
        let begun = Instant::now();
        let second = timers.shutdown_timeout(TIMEOUT);
        let took = begun.elapsed();
        assert!(
            took >= TIMEOUT && took < TIMEOUT + RETURNS_WITHIN,
            "{took:?}"
        );
        assert!(second.unfired.is_empty(), "handed back once");
        assert_eq!(
            second
                .still_running
                .iter()
                .map(|r| r.id)
                .collect::<Vec<_>>(),
            vec![stuck]
        );
        returned.recv_timeout(SOON).unwrap();
        // Once the straggler has finished, a later call waits for nothing.
        let third = timers.shutdown_timeout(Duration::from_secs(5));
        assert!(third.unfired.is_empty() && third.is_complete(), "{third:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        adds_up(&timers.stats(), 9);
    });
}

#[test]
fn concurrent_with_shutdown_each_timer_comes_back_once() {
    for round in 0..3 {
        within(SOON * 2, move || {
            let (timers, same_tick, started, returned, runs) = stuck_service(10);
            let stuck = same_tick[started.recv_timeout(SOON).unwrap()];
            for _ in 0..10 {
                timers.schedule(Duration::from_secs(60), || {}).unwrap();
            }
            let go = Arc::new(Barrier::new(2));
            let bounded = std::thread::spawn({
                let (timers, go) = (timers.clone(), Arc::clone(&go));
                move || {
                    go.wait();
                    let begun = Instant::now();
                    (timers.shutdown_timeout(TIMEOUT), begun.elapsed())
                }
            });
            let plain = std::thread::spawn({
                let timers = timers.clone();
                move || {
                    go.wait();
                    let unfired = timers.shutdown();
                    (unfired, returned.try_recv().is_ok())
                }
            });
            let (report, took) = bounded.join().unwrap();
            let (unfired, after_the_callback) = plain.join().unwrap();
            assert!(took < TIMEOUT + RETURNS_WITHIN, "round {round}: {took:?}");
            assert!(
                after_the_callback,
                "round {round}: shutdown returned before the stuck callback"
            );
            assert_eq!(
                report
                    .still_running
                    .iter()
                    .map(|r| r.id)
                    .collect::<Vec<_>>(),
                vec![stuck],
                "round {round}"
            );
            let handed: HashSet<TimerId> = report
                .unfired
                .iter()
                .chain(&unfired)
                .map(|u| u.id)
                .collect();
            assert_eq!(handed.len(), report.unfired.len() + unfired.len());
            // When `shutdown` came first, it let the callbacks queued behind the stuck one
            // run once it returned; when `shutdown_timeout` did, they came back.
            let ran = runs.load(Ordering::SeqCst);
            assert_eq!(handed.len() + ran, 19, "round {round}: {ran} ran");
            assert!(ran == 0 || ran == 9, "round {round}: {ran} ran");
            adds_up(&timers.stats(), handed.len());
        });
    }
}

/// Many short callbacks due at once on several workers, some slow: the shutdown gives up in
/// the middle of the batch, while workers are claiming. Every timer either ran once or came
/// back once.
#[test]
fn giving_up_in_the_middle_of_a_batch_ends_each_timer_once() {
    for round in 0..5 {
        within(SOON * 2, move || {
            let timers = common::service_with(Config {
                shards: 2,
                executor_threads: 3,
                ..Config::default()
            });
            let timers_count = 20_000;
            let ran: Arc<Vec<AtomicUsize>> =
                Arc::new((0..timers_count).map(|_| AtomicUsize::new(0)).collect());
            let due = Instant::now() + Duration::from_millis(30);
            let mut ids = Vec::with_capacity(timers_count);
            for i in 0..timers_count {
                let ran = Arc::clone(&ran);
                ids.push(
                    timers
                        .schedule_at(due, move || {
                            ran[i].fetch_add(1, Ordering::SeqCst);
                            if i % 1000 == 0 {
                                std::thread::sleep(Duration::from_millis(20));
                            } else {
                                std::hint::black_box((0..200).sum::<u64>());
                            }
                        })
                        .unwrap(),
                );
            }
            let index: std::collections::HashMap<TimerId, usize> =
                ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
            std::thread::sleep(Duration::from_millis(30 + 5 * round));
            let report = timers.shutdown_timeout(Duration::from_millis(5));
            assert!(timers.shutdown().is_empty(), "waits for the stragglers");
            let mut handed = vec![0usize; timers_count];
            for unfired in &report.unfired {
                handed[index[&unfired.id]] += 1;
            }
            for i in 0..timers_count {
                let runs = ran[i].load(Ordering::SeqCst);
                assert_eq!(
                    runs + handed[i],
                    1,
                    "round {round}: timer {i} ran {runs} times and came back {} times",
                    handed[i]
                );
            }
            adds_up(&timers.stats(), report.unfired.len());
        });
    }
}

#[test]
fn dropping_the_last_handle_after_giving_up_does_not_wait() {
    let (finished, on_drop) = flag();
    let runs = Arc::new(AtomicUsize::new(0));
    within(SOON, {
        let runs = Arc::clone(&runs);
        move || {
            let timers = single(Config::default());
            let (started_tx, started) = mpsc::channel();
            timers
                .schedule(Duration::ZERO, move || {
                    let _keep = on_drop;
                    started_tx.send(()).unwrap();
                    std::thread::sleep(Duration::from_secs(1));
                })
                .unwrap();
            started.recv_timeout(SOON).unwrap();
            // Due while the only worker is stuck.
            for _ in 0..5 {
                let runs = Arc::clone(&runs);
                timers
                    .schedule(Duration::ZERO, move || {
                        runs.fetch_add(1, Ordering::SeqCst);
                    })
                    .unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
            let report = timers.shutdown_timeout(Duration::from_millis(50));
            assert_eq!(report.still_running.len(), 1);
            let begun = Instant::now();
            drop(timers);
            assert!(
                begun.elapsed() < Duration::from_millis(500),
                "the drop waited for the stuck callback"
            );
        }
    });
    assert!(eventually(SOON, || finished.load(Ordering::SeqCst)));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "nothing ran after the timeout"
    );
}

/// No time at all: the threads are told to stop and not waited for, and still every timer
/// comes back once; whatever has not finished is left to the drop.
#[test]
fn a_zero_timeout_still_hands_back_every_timer() {
    within(SOON, || {
        for _ in 0..20 {
            let timers = common::service();
            let ids: HashSet<TimerId> = (0..500)
                .map(|i| {
                    timers
                        .schedule(Duration::from_secs(60 + i), || unreachable!())
                        .unwrap()
                })
                .collect();
            let report = timers.shutdown_timeout(Duration::ZERO);
            let handed: HashSet<TimerId> = report.unfired.iter().map(|u| u.id).collect();
            assert_eq!(handed, ids);
            assert_eq!(report.unfired.len(), ids.len());
            assert!(report.is_complete(), "{:?}", report.still_running);
            adds_up(&timers.stats(), ids.len());
        }
    });
}
