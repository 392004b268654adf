//! Slow callbacks: what one can delay (only itself: timers due with it run on the other workers,
//! including those its worker had already taken in hand, `executor/hand.rs`), and the callback
//! watchdog (slow callbacks counted and logged, callback run times and queue delays in `Stats`).
//! Bounds are generous: they test what is measured, not how fast.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use wheel_shard::{Config, Lateness, TimerService};

use crate::common;
use crate::common::{eventually, service, SOON};

#[test]
fn a_slow_callback_delays_only_its_worker() {
    let timers = service(); // two workers
    let (tx, rx) = mpsc::channel();
    timers
        .schedule(Duration::ZERO, || {
            std::thread::sleep(Duration::from_millis(1500))
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let start = Instant::now();
    for i in 0..50u64 {
        let tx = tx.clone();
        let due = start + Duration::from_millis(5 + i);
        timers
            .schedule(Duration::from_millis(5 + i), move || {
                tx.send(Instant::now() - due).unwrap()
            })
            .unwrap();
    }
    for _ in 0..50 {
        let late = rx.recv_timeout(SOON).unwrap();
        assert!(
            late < Duration::from_millis(700),
            "held up behind the slow callback: {late:?}"
        );
    }
}

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

/// Samples of `distribution` over `limit`: those certainly over it, and those whose bucket
/// straddles it (at 3 significant digits a bucket near 20 ms is 16 µs wide), either way.
fn samples_over(distribution: &Lateness, limit: Duration) -> (u64, u64) {
    let histogram = &distribution.histogram;
    let limit = u64::try_from(limit.as_nanos()).unwrap();
    let (mut certainly, mut straddling) = (0, 0);
    for bucket in histogram.iter_recorded() {
        let value = bucket.value_iterated_to();
        if histogram.lowest_equivalent(value) > limit {
            certainly += bucket.count_at_value();
        } else if histogram.highest_equivalent(value) > limit {
            straddling += bucket.count_at_value();
        }
    }
    (certainly, straddling)
}

/// Three callbacks that sleep 40 ms and ten empty ones, over a 20 ms `slow_callback`, on one
/// worker. A run's time is measured from its start to the start of the worker's next run, so
/// a host pause or a preemption of the worker inside that window makes an empty callback
/// slow, and it is rightly counted. So the test checks that the counter agrees with the
/// measured distribution, and holds to "measured short, not counted" only the empty runs
/// whose measure it can bound from outside.
///
/// On virtual time, so that all thirteen reach the wheel before their tick and the tick
/// thread hands them out in one pass, however long the test thread is paused between its
/// schedules; run times and queue delays stay real time under a manual clock.
#[test]
fn slow_callbacks_are_counted_and_timed() {
    const SLOW: Duration = Duration::from_millis(20);
    const SLEEP: Duration = Duration::from_millis(40);
    let (timers, clock) = TimerService::with_manual_clock(Config {
        shards: 1,
        executor_threads: 1,
        pin_threads: false,
        slow_callback: SLOW,
        ..Config::default()
    })
    .unwrap();
    // Each callback's entry, in run order (there is one worker), and whether it sleeps.
    let entries: Arc<Mutex<Vec<(bool, Instant)>>> = Arc::default();
    for sleeps in [true; 3].into_iter().chain([false; 10]) {
        let entries = Arc::clone(&entries);
        timers
            .schedule(Duration::from_millis(1), move || {
                entries.lock().unwrap().push((sleeps, Instant::now()));
                if sleeps {
                    std::thread::sleep(SLEEP);
                }
            })
            .unwrap();
    }
    let before_hand_out = Instant::now();
    clock.advance(Duration::from_millis(1));
    assert_eq!(timers.stats().fired, 13, "all ran before advance returned");
    assert!(eventually(SOON, || timers.stats().callback_time.count == 13));
    let stats = timers.stats();
    let entries = entries.lock().unwrap();
    assert_eq!(entries.len(), 13);

    // Run i's measure starts after run i - 1 entered its callback, and ends (at the start of
    // run i + 1, or earlier if the worker ran out of work) before run i + 1 enters its own.
    // So an empty run whose neighbours entered less than SLOW / 2 apart was measured under
    // SLOW / 2, whatever paused where (the half leaves the stopwatch's nanoseconds of error
    // no say). The first run's "previous entry" is the instant before `advance`, which hands
    // it out; the last run's measure ends after every entry, so it is never bounded.
    let mut previous = before_hand_out;
    let mut certainly_short = 0;
    for (i, &(sleeps, entered)) in entries.iter().enumerate() {
        if let Some(&(_, next)) = entries.get(i + 1) {
            if !sleeps && next.duration_since(previous) < SLOW / 2 {
                certainly_short += 1;
            }
        }
        previous = entered;
    }

    let slow = stats.slow_callbacks;
    let (over, straddling) = samples_over(&stats.callback_time, SLOW);
    assert!(
        (over..=over + straddling).contains(&slow),
        "{slow} slow callbacks counted, {over} (+{straddling} at the edge) runs measured over {SLOW:?}"
    );
    let (sleep_or_more, sleep_straddling) =
        samples_over(&stats.callback_time, SLEEP - Duration::from_nanos(1));
    assert!(
        sleep_or_more + sleep_straddling >= 3,
        "the three sleeping runs measure at least their {SLEEP:?}: {} do",
        sleep_or_more + sleep_straddling
    );
    assert!(slow >= 3, "the three sleeping runs are slow: {slow}");
    let (over_half, _) = samples_over(&stats.callback_time, SLOW / 2);
    assert!(
        13 - over_half >= certainly_short,
        "{certainly_short} empty runs took under {:?}, yet only {} samples are",
        SLOW / 2,
        13 - over_half
    );
    assert!(
        slow <= 13 - certainly_short,
        "{slow} slow callbacks, yet {certainly_short} empty runs took under {:?}",
        SLOW / 2
    );
    assert!(stats.callback_time.max >= SLEEP);
    // The tick thread hands all thirteen out in one pass, which reads the real clock once for
    // up to 64 hand-outs, so they share one hand-out instant; the worker runs them one after
    // the other, so the last to start waited behind at least two sleeping runs that both
    // started after that instant.
    assert!(
        stats.queue_delay.max >= 2 * SLEEP,
        "queue delay {:?}",
        stats.queue_delay.max
    );
    assert_eq!(stats.queue_delay.count, 13);
    assert!(timers.shutdown().is_empty());
}

#[test]
fn queue_delay_tells_a_busy_executor_from_a_late_wheel() {
    let timers = TimerService::new(Config {
        shards: 1,
        executor_threads: 1,
        pin_threads: false,
        ..Config::default()
    })
    .unwrap();
    timers
        .schedule(Duration::ZERO, || {
            std::thread::sleep(Duration::from_millis(200))
        })
        .unwrap();
    timers.schedule(Duration::from_millis(10), || {}).unwrap();
    assert!(eventually(SOON, || timers.stats().callback_time.count == 2));
    let stats = timers.stats();
    // The second callback started late because its worker was busy: its queue delay carries
    // nearly all of its lateness.
    assert!(stats.lateness.max >= Duration::from_millis(150));
    assert!(stats.queue_delay.max >= Duration::from_millis(150));
    assert_eq!(stats.slow_callbacks, 1, "200 ms is over the 100 ms default");
}
