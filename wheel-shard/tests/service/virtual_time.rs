//! Virtual time through the public API: `TimerService::with_manual_clock` and `ManualClock`.
//! Nothing here sleeps for the durations it tests: an hour of timers takes milliseconds. Also
//! the ends of virtual time (`advance(Duration::MAX)`, a deadline in the last tick before
//! `u64::MAX` nanoseconds) and every call made from a callback under virtual time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use wheel_shard::{ManualClock, TimerId, TimerService};

use crate::common;
use crate::common::{counter, flag, manual, within, SOON};

/// Runs of a repeating timer, as virtual time since the test's start.
type Runs = Arc<Mutex<Vec<Duration>>>;

/// Schedules a repeating timer every `period` whose run notes when it ran (since `start`) and
/// then calls `then(runs so far, service, own id)`, with the service upgraded from a weak
/// handle: a timer that moves itself. Returns its id and its runs.
fn self_moving(
    timers: &TimerService,
    clock: &ManualClock,
    start: Instant,
    period: Duration,
    then: impl Fn(usize, &TimerService, TimerId) + Send + 'static,
) -> (TimerId, Runs) {
    let runs: Runs = Arc::default();
    let me = Arc::new(std::sync::OnceLock::new());
    let id = timers
        .schedule_repeating(period, {
            let (weak, clock, me, runs) = (
                timers.downgrade(),
                clock.clone(),
                Arc::clone(&me),
                Arc::clone(&runs),
            );
            move || {
                let n = {
                    let mut runs = runs.lock().unwrap();
                    runs.push(clock.now().duration_since(start));
                    runs.len()
                };
                if let (Some(timers), Some(&id)) = (weak.upgrade(), me.get()) {
                    then(n, &timers, id);
                }
            }
        })
        .unwrap();
    me.set(id).unwrap();
    (id, runs)
}

#[test]
fn the_manual_clock_has_the_promised_traits() {
    fn clone_send_sync<T: Clone + Send + Sync>() {}
    clone_send_sync::<ManualClock>();
}

#[test]
fn nothing_fires_while_virtual_time_stands_still() {
    let (timers, clock) = manual(2, 2);
    let fired = Arc::new(AtomicUsize::new(0));
    let start = clock.now();
    for ms in [0u64, 1, 5, 50] {
        let fired = Arc::clone(&fired);
        timers
            .schedule(Duration::from_millis(ms + 1), move || {
                fired.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(fired.load(Ordering::SeqCst), 0, "real time moved nothing");
    assert_eq!(clock.now(), start, "virtual time stood still");
    assert_eq!(timers.pending(), 4);
    clock.advance(Duration::from_millis(6));
    assert_eq!(
        fired.load(Ordering::SeqCst),
        3,
        "due by 6 ms: run when advance returns"
    );
    clock.advance(Duration::from_millis(100));
    assert_eq!(fired.load(Ordering::SeqCst), 4);
    assert_eq!(clock.now(), start + Duration::from_millis(106));
    assert_eq!(timers.stats().fired, 4);
    assert!(timers.shutdown().is_empty());
}

#[test]
fn callbacks_run_in_deadline_order_across_shards_never_early() {
    let (timers, clock) = manual(4, 2);
    let order = Arc::new(Mutex::new(Vec::new()));
    let start = clock.now();
    // Scheduled in reverse, spread over four shards and two workers.
    for i in (1..=200u64).rev() {
        let (order, clock2) = (Arc::clone(&order), clock.clone());
        timers
            .schedule(Duration::from_millis(i * 3), move || {
                let at = clock2.now();
                order.lock().unwrap().push((i, at));
            })
            .unwrap();
    }
    clock.advance(Duration::from_secs(1));
    let order = order.lock().unwrap();
    assert_eq!(order.len(), 200);
    for (k, &(i, at)) in order.iter().enumerate() {
        assert_eq!(i, k as u64 + 1, "deadline order");
        assert_eq!(
            at,
            start + Duration::from_millis(i * 3),
            "at the deadline, not early"
        );
    }
}

#[test]
fn a_callback_that_schedules_within_the_same_advance_sees_it_run() {
    let (timers, clock) = manual(2, 2);
    let (tx, rx) = mpsc::channel();
    let start = clock.now();
    {
        let (timers2, clock2, tx) = (timers.clone(), clock.clone(), tx.clone());
        timers
            .schedule(Duration::from_secs(1), move || {
                let (clock3, tx) = (clock2.clone(), tx.clone());
                timers2
                    .schedule(Duration::from_secs(2), move || {
                        tx.send(clock3.now()).unwrap();
                    })
                    .unwrap();
            })
            .unwrap();
    }
    clock.advance(Duration::from_secs(5));
    assert_eq!(rx.try_recv(), Ok(start + Duration::from_secs(3)));
    assert_eq!(clock.now(), start + Duration::from_secs(5));
}

// Guards: schedule, cancel, reschedule, stats, pending and advance_to_next called from a
// callback all work (no deadlock), and `advance` runs what they set up within the same call.
#[test]
fn every_call_from_a_callback_works_under_virtual_time() {
    within(SOON, || {
        let (timers, clock) = manual(2, 2);
        let start = clock.now();
        let ran_at = Arc::new(Mutex::new(Vec::<(&'static str, Duration)>::new()));
        let log = |name: &'static str| {
            let (ran_at, clock) = (Arc::clone(&ran_at), clock.clone());
            move || ran_at.lock().unwrap().push((name, clock.now() - start))
        };
        let (victim_dropped, victim_flag) = flag();
        let victim = timers
            .schedule(Duration::from_secs(3600), move || {
                let _keep = &victim_flag;
                panic!("a cancelled timer ran");
            })
            .unwrap();
        let moved = timers
            .schedule(Duration::from_secs(3600), log("moved"))
            .unwrap();
        let (tx, rx) = mpsc::channel();
        {
            let (service, clock2) = (timers.clone(), clock.clone());
            let scheduled = log("scheduled");
            let me = log("callback");
            timers
                .schedule(Duration::from_millis(10), move || {
                    me();
                    let cancelled = service.cancel(victim);
                    let again = service.cancel(victim);
                    let rescheduled = service.reschedule(moved, Duration::from_millis(5));
                    let new = service
                        .schedule(Duration::from_millis(3), scheduled)
                        .is_ok();
                    let stats = service.stats();
                    let next = clock2.advance_to_next();
                    tx.send((
                        cancelled,
                        again,
                        rescheduled,
                        new,
                        stats.scheduled,
                        stats.cancelled,
                        service.pending(),
                        next,
                    ))
                    .unwrap();
                })
                .unwrap();
        }
        clock.advance(Duration::from_millis(20));
        let (cancelled, again, rescheduled, new, scheduled, n_cancelled, pending, next) =
            rx.recv_timeout(SOON).unwrap();
        assert!(cancelled && !again, "cancel true once");
        assert!(rescheduled && new);
        assert_eq!(scheduled, 4, "victim, moved, callback, the new one");
        assert_eq!(n_cancelled, 1);
        assert_eq!(
            pending, 2,
            "moved and the new one (the running one-shot has ended)"
        );
        assert_eq!(next, None, "advance_to_next from a callback returns None");
        assert!(
            victim_dropped.load(Ordering::SeqCst),
            "the cancelled task was dropped"
        );
        let mut ran = ran_at.lock().unwrap().clone();
        ran.sort_by_key(|&(_, at)| at);
        assert_eq!(
            ran,
            [
                ("callback", Duration::from_millis(10)),
                ("scheduled", Duration::from_millis(13)),
                ("moved", Duration::from_millis(15)),
            ],
            "each ran within the same advance, at its own deadline"
        );
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.cancelled, stats.pending), (3, 1, 0));
        assert!(timers.shutdown().is_empty());
    });
}

#[test]
fn repeating_timers_keep_the_fixed_rate() {
    let (timers, clock) = manual(2, 2);
    let runs = Arc::new(AtomicUsize::new(0));
    {
        let runs = Arc::clone(&runs);
        timers
            .schedule_repeating(Duration::from_secs(10), move || {
                runs.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
    }
    for _ in 0..100 {
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 10, "100 s at a 10 s period");
    assert_eq!(timers.shutdown().len(), 1, "still pending: handed back");
}

/// A repeating timer that moves its own next run from its callback (an exponential back-off:
/// 1, 2, 4, 8 s after each run) runs exactly there, and the period takes over from the last
/// move: the runs after a move keep the period from the moved one.
#[test]
fn a_repeating_timer_moves_its_own_next_run() {
    let (timers, clock) = manual(2, 2);
    let start = clock.now();
    let (id, runs) = self_moving(
        &timers,
        &clock,
        start,
        Duration::from_secs(1),
        |n, timers, id| {
            if n <= 3 {
                assert!(timers.reschedule(id, Duration::from_secs(2u64.pow(n as u32))));
            }
        },
    );
    while clock.now().duration_since(start) < Duration::from_secs(20) {
        clock.advance(Duration::from_millis(500));
    }
    // 1; then 1 + 2 = 3; 3 + 4 = 7; 7 + 8 = 15; then the period of 1 s again from 15.
    assert_eq!(
        *runs.lock().unwrap(),
        [1, 3, 7, 15, 16, 17, 18, 19, 20].map(Duration::from_secs)
    );
    assert!(timers.cancel(id));
    assert!(timers.shutdown().is_empty());
}

/// A run that moves its timer's next run and then panics ends the timer (a panicking run is
/// its last): the move is dropped, nothing runs again, and the timer is counted once.
#[test]
fn a_run_that_moves_its_next_run_and_panics_ends_the_timer() {
    let (timers, clock) = manual(1, 1);
    let start = clock.now();
    let (id, runs) = self_moving(
        &timers,
        &clock,
        start,
        Duration::from_secs(1),
        |n, timers, id| {
            assert!(timers.reschedule(id, Duration::from_secs(3)));
            if n == 2 {
                panic!("deliberate: a run that panics after moving its next run");
            }
        },
    );
    clock.advance(Duration::from_secs(20));
    assert_eq!(*runs.lock().unwrap(), [1, 4].map(Duration::from_secs));
    let stats = timers.stats();
    assert_eq!((stats.panicked, stats.pending), (1, 0), "{stats:?}");
    assert!(
        !timers.cancel(id) && !timers.reschedule(id, Duration::ZERO),
        "ended"
    );
    assert!(timers.shutdown().is_empty());
}

/// A reschedule from another thread while a repeating timer's run is in progress moves the
/// next run as it would between runs; a cancel after it still ends the timer at the run's end.
#[test]
fn a_reschedule_during_a_run_from_another_thread_moves_the_next_run() {
    let (timers, clock) = manual(1, 1);
    let start = clock.now();
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let runs = Arc::new(Mutex::new(Vec::new()));
    let id = timers
        .schedule_repeating(Duration::from_secs(10), {
            let (clock, runs) = (clock.clone(), Arc::clone(&runs));
            move || {
                let at = clock.now().duration_since(start).as_secs();
                runs.lock().unwrap().push(at);
                if at == 10 {
                    entered_tx.send(()).unwrap();
                    release_rx.lock().unwrap().recv().unwrap();
                }
            }
        })
        .unwrap();
    let advancing = {
        let clock = clock.clone();
        std::thread::spawn(move || clock.advance(Duration::from_secs(10)))
    };
    entered.recv().unwrap();
    // The first run (at 10 s) is in progress: its next run moves to 3 s from now (13 s).
    assert!(timers.reschedule(id, Duration::from_secs(3)));
    release.send(()).unwrap();
    advancing.join().unwrap();
    clock.advance(Duration::from_secs(12)); // to 22 s: runs at 13 (moved), then 23 is ahead
    assert_eq!(*runs.lock().unwrap(), [10, 13]);
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        *runs.lock().unwrap(),
        [10, 13, 23],
        "the period from the moved run"
    );
    assert!(timers.cancel(id));
    assert!(!timers.reschedule(id, Duration::from_secs(1)), "ended");
    assert!(timers.shutdown().is_empty());
}

#[test]
fn advance_to_next_walks_deadline_by_deadline() {
    let (timers, clock) = manual(2, 1);
    let start = clock.now();
    assert_eq!(clock.advance_to_next(), None, "nothing pending");
    assert_eq!(clock.now(), start);
    let fired = Arc::new(Mutex::new(Vec::new()));
    for s in [30u64, 10, 20] {
        let fired = Arc::clone(&fired);
        timers
            .schedule(Duration::from_secs(s), move || {
                fired.lock().unwrap().push(s)
            })
            .unwrap();
    }
    let cancelled = timers.schedule(Duration::from_secs(5), || {}).unwrap();
    assert!(timers.cancel(cancelled));
    for s in [10u64, 20, 30] {
        assert_eq!(
            clock.advance_to_next(),
            Some(start + Duration::from_secs(s))
        );
        assert_eq!(*fired.lock().unwrap().last().unwrap(), s);
    }
    assert_eq!(clock.advance_to_next(), None);
    assert_eq!(clock.now(), start + Duration::from_secs(30));
}

/// Stale references (of a cancelled timer, or of one moved earlier) do not move virtual time:
/// with nothing live left, `advance_to_next` returns `None` and the time stays where it was.
#[test]
fn advance_to_next_leaves_time_alone_when_only_stale_references_are_left() {
    let (timers, clock) = manual(2, 2);
    let start = clock.now();
    let hour = Duration::from_secs(3600);
    let cancelled = timers.schedule(hour, || {}).unwrap();
    assert!(timers.cancel(cancelled));
    assert_eq!(clock.advance_to_next(), None, "only a cancelled timer");
    assert_eq!(clock.now(), start, "time unchanged");

    // A cancelled timer before a live one: the live one's deadline, reached directly.
    let cancelled = timers.schedule(hour, || {}).unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let live = {
        let fired = Arc::clone(&fired);
        timers
            .schedule(2 * hour, move || {
                fired.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap()
    };
    assert!(timers.cancel(cancelled));
    assert_eq!(clock.advance_to_next(), Some(start + 2 * hour));
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    assert!(!timers.cancel(live), "it fired");

    // A timer moved earlier leaves a stale reference at its old deadline.
    let now = clock.now();
    let moved = timers.schedule(hour, || {}).unwrap();
    assert!(timers.reschedule(moved, Duration::from_secs(60)));
    assert_eq!(clock.advance_to_next(), Some(now + Duration::from_secs(60)));
    assert_eq!(clock.advance_to_next(), None, "the old deadline is stale");
    assert_eq!(clock.now(), now + Duration::from_secs(60));
    assert!(timers.shutdown().is_empty());
}

/// A deadline far beyond a century (virtual time reaches 584 years) is reported as it is:
/// `advance_to_next` returns the deadline itself, which is virtual now once it returns.
#[test]
fn advance_to_next_reports_a_far_deadline_exactly() {
    let (timers, clock) = manual(1, 1);
    let year = Duration::from_secs(365 * 24 * 3600);
    let deadline = clock.now() + 150 * year;
    let fired = Arc::new(AtomicUsize::new(0));
    {
        let fired = Arc::clone(&fired);
        timers
            .schedule_at(deadline, move || {
                fired.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
    }
    let reached = clock.advance_to_next().expect("a timer is pending");
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    assert!(
        reached >= deadline,
        "{reached:?} before the deadline {deadline:?}"
    );
    assert!(
        reached - deadline < Duration::from_millis(1),
        "within its tick"
    );
    assert_eq!(clock.now(), reached);
    assert_eq!(clock.advance_to_next(), None);
}

// Guards: advance(Duration::MAX) walks to the end of virtual time and returns, firing what
// is reachable (1 s and 400 years out).
#[test]
fn advance_by_duration_max_fires_what_is_reachable_and_returns() {
    within(SOON, || {
        let (timers, clock) = manual(2, 1);
        let (runs, make) = counter();
        timers.schedule(Duration::from_secs(1), make()).unwrap();
        let centuries = Duration::from_secs(400 * 365 * 24 * 3600);
        timers.schedule(centuries, make()).unwrap();
        clock.advance(Duration::MAX);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(timers.stats().pending, 0);
        assert!(timers.shutdown().is_empty());
    });
}

// Guards: the documented "a timer with an unreachable deadline (Duration::MAX) is not counted
// as pending here": advance_to_next must return None and leave virtual time where it was.
#[test]
fn advance_to_next_with_only_a_duration_max_timer_returns_none() {
    let (next, moved) = within(Duration::from_secs(5), || {
        let (timers, clock) = manual(1, 1);
        let start = clock.now();
        timers.schedule(Duration::MAX, || {}).unwrap();
        let next = clock.advance_to_next();
        let moved = clock.now() - start;
        assert_eq!(timers.shutdown().len(), 1);
        (next, moved)
    });
    assert_eq!(next, None);
    assert_eq!(moved, Duration::ZERO, "time unchanged");
}

// Guards: advance(Duration::MAX) with a Duration::MAX timer pending must return.
#[test]
fn advance_by_duration_max_with_a_duration_max_timer_returns() {
    let handed = within(Duration::from_secs(5), || {
        let (timers, clock) = manual(1, 1);
        timers.schedule(Duration::MAX, || {}).unwrap();
        clock.advance(Duration::MAX);
        timers.shutdown().len()
    });
    assert_eq!(handed, 1);
}

// Guards: advance_to_next with a timer due in the last tick before u64::MAX nanoseconds
// (a delay just short of Duration's u64-nanosecond range) must return, not spin forever.
#[test]
fn advance_to_next_with_a_deadline_in_the_last_tick_of_virtual_time_returns() {
    let (next, runs, handed) = within(Duration::from_secs(5), || {
        let (timers, clock) = manual(1, 1);
        let (runs, make) = counter();
        timers
            .schedule(Duration::from_nanos(u64::MAX - 1), make())
            .unwrap();
        let next = clock.advance_to_next();
        let handed = timers.shutdown().len();
        (next, runs.load(Ordering::SeqCst), handed)
    });
    assert_eq!(
        next, None,
        "a tick past the last virtual nanosecond is unreachable"
    );
    assert_eq!((runs, handed), (0, 1), "handed back, exactly once");
}

#[test]
fn reschedule_and_schedule_at_use_virtual_time() {
    let (timers, clock) = manual(1, 1);
    let start = clock.now();
    let (tx, rx) = mpsc::channel();
    let id = {
        let (tx, clock2) = (tx.clone(), clock.clone());
        timers
            .schedule(Duration::from_secs(10), move || {
                tx.send(("moved", clock2.now())).unwrap()
            })
            .unwrap()
    };
    clock.advance(Duration::from_secs(5));
    assert!(
        timers.reschedule(id, Duration::from_secs(60)),
        "postponed to 65 s"
    );
    {
        let clock2 = clock.clone();
        timers
            .schedule_at(start + Duration::from_secs(20), move || {
                tx.send(("at", clock2.now())).unwrap()
            })
            .unwrap();
    }
    clock.advance(Duration::from_secs(30));
    assert_eq!(rx.try_recv(), Ok(("at", start + Duration::from_secs(20))));
    assert!(rx.try_recv().is_err(), "the postponed one waits");
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        rx.try_recv(),
        Ok(("moved", start + Duration::from_secs(65)))
    );
    let lateness = timers.stats().lateness;
    assert_eq!(lateness.count, 2);
    assert_eq!(
        lateness.max,
        Duration::from_nanos(1),
        "on time in virtual time"
    );
}

/// `reschedule_at` moves a timer to an instant: later, earlier, into the past (due at the next
/// advance), a repeating timer's next run from inside its run, and a century out (it never
/// fires, and comes back at shutdown with that deadline); an id that ended moves nothing.
#[test]
fn reschedule_at_moves_timers_to_instants() {
    let (timers, clock) = manual(2, 1);
    let start = clock.now();
    let fired = Arc::new(Mutex::new(Vec::new()));
    let at = |name: &'static str| {
        let (fired, clock) = (Arc::clone(&fired), clock.clone());
        move || {
            fired
                .lock()
                .unwrap()
                .push((name, clock.now().duration_since(start)))
        }
    };
    let later = timers
        .schedule(Duration::from_secs(10), at("later"))
        .unwrap();
    let earlier = timers
        .schedule(Duration::from_secs(10), at("earlier"))
        .unwrap();
    let past = timers
        .schedule(Duration::from_secs(10), at("past"))
        .unwrap();
    let far = timers.schedule(Duration::from_secs(10), at("far")).unwrap();
    assert!(timers.reschedule_at(later, start + Duration::from_secs(30)));
    assert!(timers.reschedule_at(earlier, start + Duration::from_secs(4)));
    clock.advance(Duration::from_secs(2));
    assert!(timers.reschedule_at(past, start)); // already past: due now
    let century = Duration::from_secs(100 * 365 * 24 * 3600);
    assert!(timers.reschedule_at(far, start + century));
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        *fired.lock().unwrap(),
        [("past", Duration::from_secs(2))],
        "a past instant is due at once (the next tick)"
    );
    clock.advance(Duration::from_secs(28));
    assert_eq!(
        *fired.lock().unwrap(),
        [
            ("past", Duration::from_secs(2)),
            ("earlier", Duration::from_secs(4)),
            ("later", Duration::from_secs(30)),
        ]
    );
    assert!(!timers.reschedule_at(later, start), "ended: nothing moves");

    // A repeating timer's next run, moved to an instant from inside its run.
    let (id, runs) = self_moving(
        &timers,
        &clock,
        start,
        Duration::from_secs(5),
        move |n, timers, id| {
            if n == 1 {
                assert!(timers.reschedule_at(id, start + Duration::from_secs(50)));
            }
        },
    );
    clock.advance(Duration::from_secs(30)); // from 30.001 s: runs at 35.001, 50, 55, 60
    assert_eq!(
        *runs.lock().unwrap(),
        [35_001, 50_000, 55_000, 60_000].map(Duration::from_millis),
        "the run after the first moved to 50 s, and the period went on from there"
    );
    assert!(timers.cancel(id));
    let unfired = timers.shutdown();
    assert_eq!(unfired.len(), 1, "the century-out timer comes back");
    assert_eq!(unfired[0].id, far);
    assert!(unfired[0].deadline >= start + century);
}

#[test]
fn an_hour_of_timers_takes_no_real_hour() {
    let (timers, clock) = manual(2, 2);
    let fired = Arc::new(AtomicUsize::new(0));
    for i in 0..1_000u64 {
        let fired = Arc::clone(&fired);
        timers
            .schedule(Duration::from_secs(i * 36 / 10 + 1), move || {
                fired.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
    }
    let real = Instant::now();
    clock.advance(Duration::from_secs(3600));
    assert_eq!(fired.load(Ordering::SeqCst), 1_000);
    assert!(
        real.elapsed() < Duration::from_secs(60),
        "took {:?}",
        real.elapsed()
    );
}

#[test]
fn advance_from_a_callback_does_not_deadlock() {
    let (timers, clock) = manual(1, 1);
    let (tx, rx) = mpsc::channel();
    {
        let clock2 = clock.clone();
        timers
            .schedule(Duration::from_secs(1), move || {
                clock2.advance(Duration::from_secs(1));
                tx.send(()).unwrap();
            })
            .unwrap();
    }
    let done = std::thread::spawn(move || clock.advance(Duration::from_secs(1)));
    assert!(rx.recv_timeout(common::SOON).is_ok());
    done.join().unwrap();
    assert!(timers.shutdown().is_empty());
}

#[test]
fn advance_after_shutdown_only_moves_time() {
    let (timers, clock) = manual(1, 1);
    timers.schedule(Duration::from_secs(1), || {}).unwrap();
    // Settled once: the tick thread has reported the 1 s deadline, which shutdown leaves stale.
    clock.advance(Duration::ZERO);
    assert_eq!(timers.shutdown().len(), 1);
    let start = clock.now();
    let advancing = clock.clone();
    let done = std::thread::spawn(move || {
        advancing.advance(Duration::from_secs(5));
        advancing.advance_to_next()
    });
    let deadline = Instant::now() + common::SOON;
    while !done.is_finished() {
        assert!(
            Instant::now() < deadline,
            "advance after shutdown did not return"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        done.join().unwrap(),
        None,
        "nothing runs timers after shutdown"
    );
    assert_eq!(clock.now(), start + Duration::from_secs(5));
}
