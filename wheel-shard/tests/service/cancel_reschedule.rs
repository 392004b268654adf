//! `cancel` and `reschedule` of one-shot timers: a cancel is definitive, both reach a timer still
//! on its way to its shard, a reschedule postpones or advances (to `Duration::MAX` and to zero
//! too), and the stale "twin" references a move leaves behind never fire a timer twice or early.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{counter, eventually, manual, service, within, SOON};

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

// Guards: reschedule to Duration::MAX makes a timer that never fires and comes back at
// shutdown; reschedule to zero fires it on the current tick, never before the reschedule.
#[test]
fn reschedule_to_duration_max_and_to_zero() {
    within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let (never_runs, make) = counter();
        let never = timers.schedule(Duration::from_millis(10), make()).unwrap();
        assert!(timers.reschedule(never, Duration::MAX));
        clock.advance(Duration::from_secs(24 * 3600));
        assert_eq!(never_runs.load(Ordering::SeqCst), 0);
        assert_eq!(timers.pending(), 1);

        let start = clock.now();
        let (tx, rx) = mpsc::channel();
        let now_id = {
            let clock = clock.clone();
            timers
                .schedule(Duration::from_secs(3600), move || {
                    tx.send(clock.now()).unwrap()
                })
                .unwrap()
        };
        clock.advance(Duration::from_millis(7));
        assert!(timers.reschedule(now_id, Duration::ZERO));
        clock.advance(Duration::ZERO);
        let fired_at = rx
            .recv_timeout(SOON)
            .expect("due at once after the reschedule");
        assert!(fired_at >= start + Duration::from_millis(7), "early");
        assert!(
            fired_at <= start + Duration::from_millis(8),
            "late: {:?}",
            fired_at - start
        );

        let unfired = timers.shutdown();
        assert_eq!(unfired.len(), 1);
        assert_eq!(unfired[0].id, never);
        assert!(unfired[0].deadline > clock.now() + Duration::from_secs(50 * 365 * 24 * 3600));
        assert_eq!(never_runs.load(Ordering::SeqCst), 0);
    });
}

// Guards: "twin" references (a timer moved earlier by a multiple of 256 ticks, a slot reused
// for the same tick after a cancel) never fire a timer early nor twice.
#[test]
fn twin_references_fire_once_and_never_early() {
    within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let start = clock.now();
        let fired = Arc::new(Mutex::new(Vec::<(u32, Duration)>::new()));
        let task = |n: u32| {
            let (fired, clock) = (Arc::clone(&fired), clock.clone());
            move || fired.lock().unwrap().push((n, clock.now() - start))
        };
        // 600 and 344 ticks share their low 8 bits.
        let a = timers
            .schedule(Duration::from_millis(600), task(1))
            .unwrap();
        assert!(timers.reschedule(a, Duration::from_millis(344)));
        // Postponed by exactly 256 ticks: its one reference keeps its ticket.
        let b = timers
            .schedule(Duration::from_millis(100), task(2))
            .unwrap();
        assert!(timers.reschedule(b, Duration::from_millis(356)));
        // Cancelled, then (likely) the same slot armed again for the same tick.
        for _ in 0..8 {
            let c = timers
                .schedule(Duration::from_millis(50), task(99))
                .unwrap();
            assert!(timers.cancel(c));
        }
        timers.schedule(Duration::from_millis(50), task(3)).unwrap();
        clock.advance(Duration::from_millis(343));
        assert_eq!(
            fired
                .lock()
                .unwrap()
                .iter()
                .map(|&(n, _)| n)
                .collect::<Vec<_>>(),
            [3]
        );
        clock.advance(Duration::from_secs(2));
        let mut all = fired.lock().unwrap().clone();
        all.sort();
        assert_eq!(
            all,
            [
                (1, Duration::from_millis(344)),
                (2, Duration::from_millis(356)),
                (3, Duration::from_millis(50)),
            ]
        );
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.cancelled, stats.strays), (3, 8, 0));
        assert!(timers.shutdown().is_empty());
    });
}
