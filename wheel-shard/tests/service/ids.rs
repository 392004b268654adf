//! Timer ids: what an id is honoured for. An id from another service, from a service dropped
//! before this one, or of a timer that has ended (its slot since reused by a newer generation) is
//! unknown: `cancel` and `reschedule` say `false` and touch no live timer.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use wheel_shard::{Config, ScheduleError, TimerId};

use crate::common::{counter, eventually, service, service_with, single, SOON};

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

// Guards: ids of a service that was dropped are unknown to a service started after it, even
// though the new one hands out the same shard, slot and generation.
#[test]
fn ids_of_a_dropped_service_are_unknown_to_its_successor() {
    let old = single(Config::default());
    let stale: Vec<TimerId> = (0..3)
        .map(|_| old.schedule(Duration::from_secs(60), || {}).unwrap())
        .collect();
    drop(old);
    let new = single(Config::default());
    let (runs, make) = counter();
    let live: Vec<TimerId> = (0..3)
        .map(|_| new.schedule(Duration::from_millis(30), make()).unwrap())
        .collect();
    for (&stale, &live) in stale.iter().zip(&live) {
        assert_eq!(stale.shard(), live.shard());
        assert_ne!(stale, live);
        assert!(
            !new.cancel(stale),
            "a dead service's id cancelled a live timer"
        );
        assert!(!new.reschedule(stale, Duration::from_secs(3600)));
    }
    assert!(eventually(SOON, || runs.load(Ordering::SeqCst) == 3));
    let stats = new.stats();
    assert_eq!((stats.fired, stats.cancelled), (3, 0));
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
