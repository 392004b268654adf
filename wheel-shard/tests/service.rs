//! The service's behaviour through its public API: firing, cancel, reschedule, repeating
//! timers, panics, slow callbacks, limits, shutdown and stats. Bounds are generous: these test
//! behaviour, not speed (that is what `cargo xtask bench` is for).

mod common;
mod skip;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    eventually, manual, service, service_with, service_with_a_full_ring, wheel_tasks, SOON,
};
use wheel_shard::{Config, ScheduleError, TimerId, TimerService};

fn counter() -> (Arc<AtomicUsize>, impl Fn() -> Box<dyn FnOnce() + Send>) {
    let count = Arc::new(AtomicUsize::new(0));
    let make = {
        let count = Arc::clone(&count);
        move || {
            let count = Arc::clone(&count);
            Box::new(move || {
                count.fetch_add(1, Ordering::SeqCst);
            }) as Box<dyn FnOnce() + Send>
        }
    };
    (count, make)
}

#[test]
fn public_types_have_the_promised_traits() {
    fn clone_send_sync<T: Clone + Send + Sync>() {}
    fn id_traits<T: Copy + Eq + std::hash::Hash + std::fmt::Debug + Send + Sync>() {}
    fn error<T: std::error::Error + Send + Sync + 'static>() {}
    clone_send_sync::<TimerService>();
    id_traits::<TimerId>();
    error::<ScheduleError>();
    error::<wheel_shard::ConfigError>();
    let size = std::mem::size_of::<TimerId>();
    assert!((8..=16).contains(&size), "TimerId is {size} bytes");
    let _config = Config {
        shards: 2,
        ..Config::default()
    };
}

#[test]
fn fires_never_early() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    for delay_ms in [0u64, 1, 2, 5, 13, 50, 120] {
        let tx = tx.clone();
        let requested = Instant::now() + Duration::from_millis(delay_ms);
        timers
            .schedule(Duration::from_millis(delay_ms), move || {
                tx.send((delay_ms, Instant::now() >= requested)).unwrap()
            })
            .unwrap();
    }
    for _ in 0..7 {
        let (delay, on_time) = rx.recv_timeout(SOON).expect("every timer fires");
        assert!(on_time, "timer of {delay} ms fired early");
    }
    let stats = timers.stats();
    assert_eq!((stats.scheduled, stats.fired), (7, 7));
    assert_eq!(stats.lateness.count, 7);
}

#[test]
fn schedule_at_in_the_past_fires_at_once() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    let past = Instant::now()
        .checked_sub(Duration::from_secs(5))
        .unwrap_or_else(Instant::now);
    timers
        .schedule_at(past, move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(SOON)
        .expect("a past deadline fires on the next tick");
}

#[test]
fn duration_max_is_legal_and_comes_back_at_shutdown() {
    let timers = service();
    let id = timers
        .schedule(Duration::MAX, || panic!("must never run"))
        .unwrap();
    assert!(eventually(SOON, || timers.pending() == 1));
    let unfired = timers.shutdown();
    assert_eq!(unfired.len(), 1);
    assert_eq!(unfired[0].id, id);
    assert!(unfired[0].deadline > Instant::now() + Duration::from_secs(3600 * 24 * 365));
}

/// On virtual time: the cancelled timer's 30 ms cannot run out between its schedule and its
/// cancel, however long the test thread is paused in between, and time then moves well past
/// that deadline, so "never ran" is checked after it, not merely before it.
#[test]
fn cancel_is_definitive() {
    let (timers, clock) = manual(2, 2);
    let (count, task) = counter();
    let id = timers.schedule(Duration::from_millis(30), task()).unwrap();
    assert!(timers.cancel(id));
    assert!(
        !timers.cancel(id),
        "second cancel reports it was already cancelled"
    );
    assert!(!timers.reschedule(id, Duration::from_millis(1)));
    let fired = timers.schedule(Duration::from_millis(1), task()).unwrap();
    clock.advance(Duration::from_millis(1));
    assert_eq!(count.load(Ordering::SeqCst), 1, "the other timer fired");
    assert!(!timers.cancel(fired), "cancel after firing is false");
    clock.advance(Duration::from_millis(59));
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "the cancelled task never ran, 30 ms past its deadline"
    );
    assert_eq!(timers.stats().cancelled, 1);
    assert_eq!(timers.pending(), 0, "cancelled entry freed");
    assert!(timers.shutdown().is_empty());
}

/// Cancels and reschedules issued right after `schedule` mostly find the timer still on its
/// way through the ring (the producer never touches its state; the tick thread takes it in):
/// they must act on it all the same.
#[test]
fn cancel_and_reschedule_reach_a_timer_still_on_its_way() {
    // Generous delays, so that on a loaded machine no timer can fire between its schedule and
    // the cancel or reschedule that follows it at once.
    const FIRST: Duration = Duration::from_millis(500);
    const MOVED: Duration = Duration::from_millis(800);
    let timers = service();
    let (count, task) = counter();
    let start = Instant::now();
    let mut kept = Vec::new();
    for i in 0..2_000 {
        let id = timers.schedule(FIRST, task()).unwrap();
        if i % 2 == 0 {
            assert!(timers.cancel(id), "timer {i}: cancel on its way");
        } else {
            assert!(
                timers.reschedule(id, MOVED),
                "timer {i}: reschedule on its way"
            );
            kept.push(id);
        }
    }
    std::thread::sleep(FIRST + Duration::from_millis(100));
    if start.elapsed() < MOVED {
        assert_eq!(
            count.load(Ordering::SeqCst),
            0,
            "nothing runs before the rescheduled deadline"
        );
    }
    assert!(eventually(SOON * 4, || count.load(Ordering::SeqCst) == 1_000));
    assert!(kept.iter().all(|&id| !timers.cancel(id)), "all fired");
    assert!(eventually(SOON, || timers.stats().cancelled == 1_000));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(count.load(Ordering::SeqCst), 1_000, "no cancelled task ran");
}

#[test]
fn cancel_of_an_unknown_id_is_false() {
    let a = service();
    let b = service_with(Config {
        ..Config::default()
    });
    let id = b.schedule(Duration::from_secs(60), || {}).unwrap();
    let own = a.schedule(Duration::from_secs(60), || {}).unwrap();
    // An id from another service is unknown here, whatever `a` holds in that slot.
    assert!(!a.cancel(id));
    assert!(!a.reschedule(id, Duration::from_millis(1)));
    assert!(b.cancel(id));
    assert!(a.cancel(own), "a's own timer was untouched");
    assert!(eventually(SOON, || a.stats().cancelled == 1
        && b.stats().cancelled == 1));
}

/// `n` timers an hour away, once the shards hold them all.
fn far_timers(timers: &TimerService, n: usize) -> Vec<TimerId> {
    let ids: Vec<_> = (0..n)
        .map(|_| timers.schedule(Duration::from_secs(3600), || {}).unwrap())
        .collect();
    assert!(eventually(SOON, || timers.pending() == n));
    ids
}

#[test]
fn cancelled_memory_is_reclaimed_within_about_a_tick() {
    let timers = service();
    let ids = far_timers(&timers, 10_000);
    for id in ids {
        assert!(timers.cancel(id));
    }
    // The shards sleep until an hour from now; the cancels must wake them to free the entries.
    assert!(eventually(Duration::from_secs(2), || timers.pending() == 0));
    assert_eq!(timers.stats().cancelled, 10_000);
}

/// On virtual time: the 20 ms of the timer that is postponed cannot run out before its
/// reschedule, however long the test thread is paused between the two calls, so each timer is
/// checked against its exact new deadline, and the postponed one also against its old one.
#[test]
fn reschedule_postpones_and_advances() {
    let (timers, clock) = manual(2, 2);
    let (tx, rx) = mpsc::channel();
    let start = clock.now();
    let report = |name: &'static str| {
        let (tx, clock) = (tx.clone(), clock.clone());
        move || tx.send((name, clock.now())).unwrap()
    };
    let later = timers
        .schedule(Duration::from_millis(20), report("later"))
        .unwrap();
    let sooner = timers
        .schedule(Duration::from_secs(3600), report("sooner"))
        .unwrap();
    assert!(timers.reschedule(later, Duration::from_millis(300)));
    assert!(timers.reschedule(sooner, Duration::from_millis(10)));
    clock.advance(Duration::from_millis(299));
    assert_eq!(
        rx.try_recv(),
        Ok(("sooner", start + Duration::from_millis(10))),
        "the advanced timer fires at its new deadline"
    );
    assert!(
        rx.try_recv().is_err(),
        "postponed timer fired at its old deadline"
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        rx.try_recv(),
        Ok(("later", start + Duration::from_millis(300))),
        "the postponed timer fires at its new deadline"
    );
    assert!(
        !timers.reschedule(later, Duration::from_millis(5)),
        "already fired"
    );
    assert!(timers.shutdown().is_empty());
}

/// In real time, what virtual time cannot show: a timer moved from an hour away to 10 ms from
/// now wakes its tick thread, which planned to sleep until the far deadline, and fires within
/// `SOON` (10 s) instead of an hour. The never-early bound counts from an instant taken just
/// before the reschedule, the earliest moment the reschedule can read as its now, so it holds
/// exactly whatever pauses the test thread or the service's threads.
#[test]
fn an_earlier_deadline_wakes_a_tick_thread_asleep_until_a_far_one() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    let id = timers
        .schedule(Duration::from_secs(3600), move || {
            tx.send(Instant::now()).unwrap()
        })
        .unwrap();
    // Out of the ring and into the wheel: its tick thread plans its sleep by it, and the
    // moment after lets it fall asleep (one still awake would not need the wake-up this test
    // is about, and would pass all the same).
    assert!(eventually(SOON, || timers
        .stats()
        .ring_depths
        .iter()
        .all(|&depth| depth == 0)));
    std::thread::sleep(Duration::from_millis(20));
    let before = Instant::now();
    assert!(timers.reschedule(id, Duration::from_millis(10)));
    let fired_at = rx
        .recv_timeout(SOON)
        .expect("the earlier deadline woke the tick thread");
    assert!(
        fired_at >= before + Duration::from_millis(10),
        "fired {:?} after the instant before the reschedule, before the 10 ms it asked for",
        fired_at - before
    );
    assert!(!timers.reschedule(id, Duration::from_millis(5)), "fired");
}

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

#[test]
fn a_panicking_callback_is_counted_and_the_service_goes_on() {
    let timers = service();
    timers
        .schedule(Duration::from_millis(1), || panic!("boom"))
        .unwrap();
    let (tx, rx) = mpsc::channel();
    timers
        .schedule(Duration::from_millis(5), move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(SOON).unwrap();
    assert!(eventually(SOON, || timers.stats().panicked == 1));
    let runs = Arc::new(AtomicUsize::new(0));
    {
        let runs = Arc::clone(&runs);
        timers
            .schedule_repeating(Duration::from_millis(2), move || {
                runs.fetch_add(1, Ordering::SeqCst);
                panic!("repeating boom");
            })
            .unwrap();
    }
    assert!(eventually(SOON, || timers.stats().panicked == 2));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a panic ends a repeating timer"
    );
}

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

#[test]
fn max_pending_is_exact_and_frees_places() {
    let timers = service_with(Config {
        max_pending: Some(10),
        ..Config::default()
    });
    let ids: Vec<_> = (0..10)
        .map(|_| timers.schedule(Duration::from_secs(60), || {}).unwrap())
        .collect();
    assert_eq!(
        timers.schedule(Duration::from_secs(60), || {}).unwrap_err(),
        ScheduleError::TooManyPending { limit: 10 }
    );
    assert!(timers.cancel(ids[0]));
    let (tx, rx) = mpsc::channel();
    timers
        .schedule(Duration::ZERO, move || tx.send(()).unwrap())
        .expect("a successful cancel frees its place at once");
    rx.recv_timeout(SOON).unwrap();
    // The fired timer's place is free again once the tick thread handed it out.
    timers
        .schedule(Duration::from_secs(60), || {})
        .expect("a fired timer frees its place");
    assert!(timers.schedule(Duration::from_secs(60), || {}).is_err());
    assert_eq!(timers.stats().rejected, 2);
}

/// `pending()` read while other threads cancel timers and take their places never passes
/// `max_pending`: a cancel is counted before its place is given back.
#[test]
fn pending_never_reads_above_max_pending_while_places_change_hands() {
    const LIMIT: usize = 8;
    let timers = service_with(Config {
        max_pending: Some(LIMIT),
        ..Config::default()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let churners: Vec<_> = (0..2)
        .map(|_| {
            let (timers, stop) = (timers.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut held = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match timers.schedule(Duration::from_secs(3600), || {}) {
                        Ok(id) => held.push(id),
                        Err(error) => {
                            assert_eq!(error, ScheduleError::TooManyPending { limit: LIMIT });
                            if let Some(id) = held.pop() {
                                assert!(timers.cancel(id));
                            }
                        }
                    }
                }
                held
            })
        })
        .collect();
    let started = Instant::now();
    let mut reads = 0u64;
    while started.elapsed() < Duration::from_millis(500) {
        let pending = timers.pending();
        assert!(
            pending <= LIMIT,
            "pending() read {pending}, above max_pending {LIMIT}"
        );
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let held: usize = churners.into_iter().map(|c| c.join().unwrap().len()).sum();
    assert!(reads > 1_000, "the reader ran ({reads} reads)");
    assert_eq!(timers.pending(), held);
}

#[test]
fn a_full_ring_waits_then_reports_saturated() {
    let timers = service_with_a_full_ring(Duration::from_secs(2), Duration::from_millis(50));
    let start = Instant::now();
    assert_eq!(
        timers.schedule(Duration::from_secs(60), || {}).unwrap_err(),
        ScheduleError::Saturated
    );
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(50),
        "gave up before the saturation timeout"
    );
    assert!(
        waited < Duration::from_millis(700),
        "waited past the saturation timeout: {waited:?}"
    );
    assert_eq!(timers.stats().rejected, 1);
    assert_eq!(timers.stats().ring_full, 1);
    assert_eq!(timers.stats().ring_depths, [2], "the ring stays full");
    // try_schedule and its instant and repeating forms do not wait at all.
    let minute = Duration::from_secs(60);
    let at = Instant::now() + minute;
    for name in ["try_schedule", "try_schedule_at", "try_schedule_repeating"] {
        let start = Instant::now();
        let refused = match name {
            "try_schedule" => timers.try_schedule(minute, || {}),
            "try_schedule_at" => timers.try_schedule_at(at, || {}),
            _ => timers.try_schedule_repeating(minute, || {}),
        };
        assert_eq!(refused.unwrap_err(), ScheduleError::Saturated, "{name}");
        let waited = start.elapsed();
        assert!(
            waited < Duration::from_millis(40),
            "{name} waited {waited:?}"
        );
    }
    assert_eq!(timers.stats().rejected, 4);
    // Once the tick thread is back, the ring drains and scheduling works again.
    assert!(eventually(SOON, || timers
        .schedule(Duration::from_secs(60), || {})
        .is_ok()));
    assert_eq!(timers.shutdown().len(), 4, "nothing lost");
}

#[test]
fn a_filling_ring_wakes_a_tick_thread_asleep_until_a_far_deadline() {
    let timers = TimerService::new(Config {
        shards: 1,
        executor_threads: 1,
        ring_capacity: 1024,
        pin_threads: false,
        ..Config::default()
    })
    .unwrap();
    // The tick thread plans its sleep up to this timer's slot, more than a minute away...
    timers.schedule(Duration::from_secs(100), || {}).unwrap();
    assert!(eventually(SOON, || timers.stats().ring_depths == [0]));
    std::thread::sleep(Duration::from_millis(50));
    // ...and later far timers do not nudge it: only the ring passing half full (512) does.
    // Woken, it drains what is there; pushes that come after it went back to sleep may wait
    // for its plan, as far timers do, as long as they leave the ring less than half full.
    for _ in 0..600 {
        timers.schedule(Duration::from_secs(100), || {}).unwrap();
    }
    assert!(
        eventually(Duration::from_secs(5), || timers.stats().ring_depths[0]
            < 512),
        "the ring still holds {:?} commands",
        timers.stats().ring_depths
    );
    assert_eq!(
        timers.stats().ring_full,
        0,
        "no schedule found the ring full"
    );
    assert_eq!(timers.shutdown().len(), 601, "nothing lost");
}

#[test]
fn an_idle_service_does_not_wake() {
    let timers = service();
    std::thread::sleep(Duration::from_millis(1500));
    let wakeups = timers.stats().wakeups;
    assert!(
        wakeups <= 4,
        "{wakeups} wake-ups in 1.5 s with nothing pending"
    );
    // A far timer costs no periodic wake-ups either.
    timers.schedule(Duration::from_secs(3600), || {}).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let wakeups = timers.stats().wakeups;
    assert!(
        wakeups <= 8,
        "{wakeups} wake-ups with one timer an hour away"
    );
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

#[test]
fn stats_report_lateness_percentiles() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    for i in 0..200u64 {
        let tx = tx.clone();
        timers
            .schedule(Duration::from_millis(i % 40), move || tx.send(()).unwrap())
            .unwrap();
    }
    for _ in 0..200 {
        rx.recv_timeout(SOON).unwrap();
    }
    assert!(eventually(SOON, || timers.stats().lateness.count == 200));
    let stats = timers.stats();
    let l = &stats.lateness;
    assert!(
        l.p50 <= l.p90
            && l.p90 <= l.p99
            && l.p99 <= l.p999
            && l.p999 <= l.p9999
            && l.p9999 <= l.max
    );
    assert!(
        l.p50 < Duration::from_secs(1),
        "median lateness {:?}",
        l.p50
    );
    assert_eq!(l.histogram.len(), 200);
    assert_eq!(stats.ring_depths.len(), 2);
    assert_eq!(stats.executor_queue, 0);
}

#[test]
fn one_shard_and_many_shards_both_work() {
    for shards in [1, 7] {
        let timers = service_with(Config {
            shards,
            ..Config::default()
        });
        let (count, task) = counter();
        for i in 0..500u64 {
            timers
                .schedule(Duration::from_millis(i % 10), task())
                .unwrap();
        }
        assert!(
            eventually(SOON, || count.load(Ordering::SeqCst) == 500),
            "{shards} shards"
        );
    }
}

#[test]
fn a_stream_of_cancels_does_not_wake_a_shard_per_cancel() {
    let timers = service();
    let ids = far_timers(&timers, 2000);
    let before = timers.stats().wakeups;
    let start = Instant::now();
    for chunk in ids.chunks(10) {
        for id in chunk {
            assert!(timers.cancel(*id));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let elapsed = start.elapsed();
    assert!(eventually(SOON, || timers.pending() == 0), "all freed");
    let wakeups = timers.stats().wakeups - before;
    // At most one wake-up per shard every CLEANUP_TICKS (2 ms) while cancels keep coming, plus
    // slack for the last ones; one per cancel would be 2000.
    let bound = 2 * (elapsed.as_millis() as u64 / 2 + 20);
    assert!(
        wakeups <= bound,
        "{wakeups} wake-ups for 2000 cancels in {elapsed:?} (bound {bound})"
    );
}

/// With `capacity`, the room is made before `new` returns: a burst of that many timers right
/// after it is taken without waiting (a ring big enough to hold it, so nothing here depends
/// on how fast the tick threads move it), and every timer fires once.
#[test]
fn a_reserved_capacity_takes_a_burst_at_once() {
    let timers = service_with(Config {
        capacity: 200_000,
        ring_capacity: 1 << 17,
        ..Config::default()
    });
    let (count, make) = counter();
    for i in 0..200_000u64 {
        timers
            .schedule(Duration::from_micros(i % 50_000), make())
            .expect("room was reserved");
    }
    assert!(eventually(SOON, || count.load(Ordering::SeqCst) == 200_000));
    assert_eq!(timers.stats().fired, 200_000);
    assert!(timers.shutdown().is_empty());
}

/// Whether this process may run a thread under `SCHED_FIFO` (root, `CAP_SYS_NICE`, or an
/// `RLIMIT_RTPRIO` of at least 1): tried on a thread of its own.
#[cfg(target_os = "linux")]
fn may_use_sched_fifo() -> bool {
    std::thread::spawn(|| {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: a valid `sched_param`; changes only this short-lived thread's policy.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
    })
    .join()
    .unwrap()
}

/// Real-time tick threads are offered on Linux only (`runtime/priority.rs`).
#[cfg(not(target_os = "linux"))]
fn may_use_sched_fifo() -> bool {
    false
}

/// Tick threads of this process (named `wheel-tick-*`) that run under `SCHED_FIFO`, read from
/// each thread's `/proc` stat (its 41st field is the policy; 1 is `SCHED_FIFO`).
fn fifo_tick_threads() -> usize {
    wheel_tasks()
        .into_iter()
        .filter(|(name, _)| name.starts_with("wheel-tick-"))
        .filter_map(|(_, path)| {
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            let after_name = &stat[stat.rfind(')')? + 1..];
            after_name
                .split_whitespace()
                .nth(41 - 3)?
                .parse::<u32>()
                .ok()
        })
        .filter(|&policy| policy == 1)
        .count()
}

#[test]
fn realtime_ticks_run_the_tick_threads_under_sched_fifo_where_the_os_allows_it() {
    // Two shards (`service_with`).
    let realtime = service_with(Config {
        realtime_ticks: true,
        ..Config::default()
    });
    // Timers fire whether or not the OS allowed it.
    let (fired, ran) = mpsc::channel();
    realtime
        .schedule(Duration::from_millis(5), move || fired.send(()).unwrap())
        .unwrap();
    ran.recv_timeout(Duration::from_secs(10)).unwrap();
    let got = realtime.stats().realtime_ticks;
    if !may_use_sched_fifo() {
        assert_eq!(
            got, 0,
            "the OS refuses SCHED_FIFO here, yet {got} tick threads have it"
        );
        skip::record(
            "this process may not use SCHED_FIFO (it needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1)",
            "run it as root, or after `ulimit -r 1`",
        );
        return;
    }
    let threads = realtime.config().tick_thread_count();
    assert_eq!(got, threads);
    if std::path::Path::new("/proc/self/task").exists() {
        assert_eq!(fifo_tick_threads(), threads);
    }
    // Not asked for, not given.
    let normal = service_with(Config::default());
    assert_eq!(normal.stats().realtime_ticks, 0);
    drop(realtime);
    assert!(
        eventually(SOON, || fifo_tick_threads() == 0),
        "real-time tick threads outlive their service"
    );
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
