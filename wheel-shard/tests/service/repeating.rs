//! Repeating timers: a fixed rate until cancelled, and `cancel` and `reschedule` from their own
//! callback, from another thread during a run, or racing a run already queued.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use wheel_shard::{Config, TimerId};

use crate::common::{eventually, manual, service, single, within, SOON};

#[test]
fn repeating_runs_at_a_fixed_rate_until_cancelled() {
    let timers = service();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let id = {
        let runs = Arc::clone(&runs);
        timers
            .schedule_repeating(Duration::from_millis(20), move || {
                runs.lock().unwrap().push(Instant::now())
            })
            .unwrap()
    };
    assert!(eventually(SOON, || runs.lock().unwrap().len() >= 5));
    assert!(timers.cancel(id));
    let after_cancel = runs.lock().unwrap().len();
    std::thread::sleep(Duration::from_millis(100));
    let runs = runs.lock().unwrap();
    assert!(
        runs.len() <= after_cancel + 1,
        "at most a run already in progress finishes"
    );
    for (n, at) in runs.iter().enumerate() {
        let due = start + Duration::from_millis(20 * (n as u64 + 1));
        assert!(
            *at >= due,
            "run {n} early: fixed rate means run n is due at start + n·period"
        );
    }
    assert!(!timers.cancel(id));
}

/// On virtual time: the third run, 15 ms after the schedule, cannot come before the test has
/// stored the id it cancels, however long the test thread is paused in between.
#[test]
fn repeating_timer_can_cancel_itself_from_its_callback() {
    let (timers, clock) = manual(2, 2);
    let runs = Arc::new(AtomicUsize::new(0));
    let id_cell: Arc<Mutex<Option<TimerId>>> = Arc::default();
    let cancelled = Arc::new(AtomicBool::new(false));
    let id = {
        let (timers2, runs, id_cell, cancelled) = (
            timers.clone(),
            Arc::clone(&runs),
            Arc::clone(&id_cell),
            Arc::clone(&cancelled),
        );
        timers
            .schedule_repeating(Duration::from_millis(5), move || {
                if runs.fetch_add(1, Ordering::SeqCst) == 2 {
                    let id = id_cell.lock().unwrap().expect("id stored");
                    cancelled.store(timers2.cancel(id), Ordering::SeqCst);
                }
            })
            .unwrap()
    };
    *id_cell.lock().unwrap() = Some(id);
    clock.advance(Duration::from_millis(15));
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the third run's cancel of its own timer returned true"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    clock.advance(Duration::from_millis(60));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "no run after cancel from the callback, twelve periods on"
    );
    assert_eq!(timers.pending(), 0);
    assert!(timers.shutdown().is_empty());
}

#[test]
fn cancel_during_a_slow_repeating_run_stops_it() {
    let timers = service();
    let runs = Arc::new(AtomicUsize::new(0));
    let (started_tx, started_rx) = mpsc::channel();
    let id = {
        let runs = Arc::clone(&runs);
        timers
            .schedule_repeating(Duration::from_millis(5), move || {
                runs.fetch_add(1, Ordering::SeqCst);
                let _ = started_tx.send(());
                std::thread::sleep(Duration::from_millis(100));
            })
            .unwrap()
    };
    started_rx.recv_timeout(SOON).unwrap();
    assert!(
        timers.cancel(id),
        "a repeating timer mid-run can still be stopped"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(eventually(SOON, || timers.stats().cancelled == 1));
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

/// On virtual time: the first run, 50 ms after the schedule, cannot come before the
/// reschedule that postpones it, however long the test thread is paused between the two
/// calls; and each run is checked at its exact instant.
#[test]
fn reschedule_moves_the_next_run_of_a_repeating_timer() {
    let (timers, clock) = manual(2, 2);
    let start = clock.now();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let id = {
        let (runs, clock) = (Arc::clone(&runs), clock.clone());
        timers
            .schedule_repeating(Duration::from_millis(50), move || {
                runs.lock().unwrap().push(clock.now().duration_since(start))
            })
            .unwrap()
    };
    assert!(timers.reschedule(id, Duration::from_secs(3600)));
    clock.advance(Duration::from_millis(200));
    assert!(runs.lock().unwrap().is_empty(), "next run postponed");
    assert!(timers.reschedule(id, Duration::ZERO));
    clock.advance(Duration::from_millis(100));
    assert_eq!(
        *runs.lock().unwrap(),
        [200, 250, 300].map(Duration::from_millis),
        "advanced to now, then repeats at the period from there"
    );
    assert!(timers.cancel(id));
    assert!(timers.shutdown().is_empty());
}

// Guards: a repeating timer that reschedules itself during its run gets `true` and its next
// run moves there (documented: a back-off from inside the run); one that cancels itself gets
// `true` once, and then `false` for cancel and reschedule; it runs no more and is counted
// cancelled once.
#[test]
fn a_repeating_timer_rescheduling_and_cancelling_itself_during_its_run() {
    within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let own: Arc<OnceLock<TimerId>> = Arc::new(OnceLock::new());
        let answers = Arc::new(Mutex::new(Vec::new()));
        let runs = Arc::new(AtomicUsize::new(0));
        let id = {
            let (service, own, answers, runs) = (
                timers.clone(),
                Arc::clone(&own),
                Arc::clone(&answers),
                Arc::clone(&runs),
            );
            timers
                .schedule_repeating(Duration::from_millis(10), move || {
                    let id = *own.get().unwrap();
                    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    let mut answers = answers.lock().unwrap();
                    if run == 1 {
                        answers.push((
                            "reschedule",
                            service.reschedule(id, Duration::from_millis(30)),
                        ));
                    } else if run == 2 {
                        answers.push(("cancel", service.cancel(id)));
                        answers.push(("cancel again", service.cancel(id)));
                        answers.push(("reschedule after", service.reschedule(id, Duration::ZERO)));
                    }
                })
                .unwrap()
        };
        own.set(id).unwrap();
        clock.advance(Duration::from_millis(15));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        clock.advance(Duration::from_millis(24)); // 39 ms: the period's 20 and 30 passed
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "moved to 40 ms, not the period's 20"
        );
        clock.advance(Duration::from_millis(1));
        assert_eq!(runs.load(Ordering::SeqCst), 2, "at the moved deadline");
        clock.advance(Duration::from_millis(100));
        assert_eq!(runs.load(Ordering::SeqCst), 2, "cancelled during its run");
        assert_eq!(
            *answers.lock().unwrap(),
            [
                ("reschedule", true),
                ("cancel", true),
                ("cancel again", false),
                ("reschedule after", false),
            ]
        );
        assert!(!timers.cancel(id) && !timers.reschedule(id, Duration::ZERO));
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.cancelled, stats.pending), (2, 1, 0));
        assert!(timers.shutdown().is_empty());
    });
}
