//! What a slow callback can delay: only itself. Timers due with it run on the other workers,
//! including those its worker had already taken in hand (`executor/hand.rs`).

mod common;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wheel_shard::{Config, TimerService};

thread_local! {
    /// Callbacks run on this thread (each test's service has threads of its own).
    static RUNS_HERE: Cell<usize> = const { Cell::new(0) };
}

/// 48 timers due in one tick, 4 workers, and the first callback to be the second on its
/// worker blocks until every other callback has started (3 s at most): none of the 47 quick
/// callbacks may wait for it, though its worker had taken several of them in hand.
#[test]
fn a_blocked_callback_holds_up_none_of_the_timers_due_with_it() {
    const TIMERS: usize = 48;
    const QUICK: usize = TIMERS - 1;
    const BLOCK_AT_MOST: Duration = Duration::from_secs(3);
    for round in 0..3 {
        let timers = TimerService::new(Config {
            shards: 1,
            executor_threads: 4,
            pin_threads: false,
            ..Config::default()
        })
        .unwrap();
        let blocked = Arc::new(AtomicBool::new(false));
        let quick_done = Arc::new(AtomicUsize::new(0));
        let late = Arc::new(Mutex::new(Vec::new()));
        let deadline = Instant::now() + Duration::from_millis(50);
        for _ in 0..TIMERS {
            let (blocked, quick_done, late) = (
                Arc::clone(&blocked),
                Arc::clone(&quick_done),
                Arc::clone(&late),
            );
            timers
                .schedule_at(deadline, move || {
                    let started = Instant::now();
                    let nth = RUNS_HERE.with(|runs| {
                        runs.set(runs.get() + 1);
                        runs.get()
                    });
                    if nth == 2 && !blocked.swap(true, Ordering::SeqCst) {
                        common::eventually(BLOCK_AT_MOST, || {
                            quick_done.load(Ordering::SeqCst) == QUICK
                        });
                        return;
                    }
                    late.lock().unwrap().push(started - deadline);
                    quick_done.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
        }
        assert!(
            common::eventually(common::SOON, || quick_done.load(Ordering::SeqCst) == QUICK
                && blocked.load(Ordering::SeqCst)),
            "round {round}: every quick callback ran"
        );
        let late = late.lock().unwrap().clone();
        let worst = late.iter().max().unwrap();
        let held_up = late.iter().filter(|d| **d >= BLOCK_AT_MOST / 2).count();
        assert_eq!(
            held_up, 0,
            "round {round}: {held_up} of {QUICK} quick callbacks waited for the blocked one (worst {worst:?})"
        );
        timers.shutdown();
        assert_eq!(timers.stats().fired, TIMERS as u64);
    }
}

/// With one worker there is nobody to take over: the timers due behind a blocked callback
/// wait for it, and all of them still run, once each, never early.
#[test]
fn with_one_worker_the_timers_behind_a_blocked_callback_wait_for_it() {
    let timers = TimerService::new(Config {
        shards: 1,
        executor_threads: 1,
        pin_threads: false,
        ..Config::default()
    })
    .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_millis(20);
    for i in 0..8 {
        let ran = Arc::clone(&ran);
        timers
            .schedule_at(deadline, move || {
                assert!(Instant::now() >= deadline, "never early");
                if i == 0 {
                    std::thread::sleep(Duration::from_millis(200));
                }
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
    }
    assert!(common::eventually(common::SOON, || ran
        .load(Ordering::SeqCst)
        == 8));
    assert!(timers.shutdown().is_empty());
    assert_eq!(timers.stats().fired, 8);
}

/// Many workers whose callbacks now and then block for a few milliseconds, so hands are
/// stolen while their holders take from them: every timer runs exactly once, never early.
#[test]
fn hands_stolen_under_load_run_every_timer_exactly_once() {
    const TIMERS: usize = 20_000;
    let timers = TimerService::new(Config {
        shards: 2,
        executor_threads: 6,
        pin_threads: false,
        ..Config::default()
    })
    .unwrap();
    let runs: Arc<Vec<AtomicUsize>> = Arc::new((0..TIMERS).map(|_| AtomicUsize::new(0)).collect());
    let start = Instant::now();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..TIMERS {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let deadline = start + Duration::from_millis(seed % 400);
        let blocks = seed.is_multiple_of(97);
        let runs = Arc::clone(&runs);
        timers
            .schedule_at(deadline, move || {
                assert!(Instant::now() >= deadline, "never early");
                runs[i].fetch_add(1, Ordering::SeqCst);
                if blocks {
                    std::thread::sleep(Duration::from_millis(3));
                }
            })
            .unwrap();
    }
    assert!(common::eventually(common::SOON, || {
        runs.iter().all(|r| r.load(Ordering::SeqCst) > 0)
    }));
    assert!(timers.shutdown().is_empty());
    let twice = runs
        .iter()
        .filter(|r| r.load(Ordering::SeqCst) != 1)
        .count();
    assert_eq!(twice, 0, "timers run other than once");
    let stats = timers.stats();
    assert_eq!((stats.fired, stats.panicked), (TIMERS as u64, 0));
}
