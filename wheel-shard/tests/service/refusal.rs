//! Refusal and back-pressure: `max_pending` is exact (under racing producers too) and frees its
//! places, a full ring makes `schedule` wait at most `saturation_timeout` and then say
//! `Saturated`, and a reserved `capacity` takes a burst at once. Each refusal is a typed
//! `ScheduleError`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use wheel_shard::{Config, ScheduleError, TimerId};

use crate::common;
use crate::common::{counter, eventually, service_with, service_with_a_full_ring, within, SOON};

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

// Guards: max_pending is exact when many threads race for the last places, and a cancel frees
// exactly one place for the next race.
#[test]
fn max_pending_is_exact_under_racing_producers() {
    within(SOON * 3, || {
        const LIMIT: usize = 500;
        const THREADS: usize = 4;
        let timers = common::service_with(Config {
            max_pending: Some(LIMIT),
            ..Config::default()
        });
        let race = |attempts: usize| -> Vec<TimerId> {
            let start = Arc::new(Barrier::new(THREADS));
            let racers: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (timers, start) = (timers.clone(), Arc::clone(&start));
                    std::thread::spawn(move || {
                        start.wait();
                        let mut ids = Vec::new();
                        for _ in 0..attempts {
                            match timers.schedule(Duration::from_secs(3600), || {}) {
                                Ok(id) => ids.push(id),
                                Err(e) => {
                                    assert_eq!(e, ScheduleError::TooManyPending { limit: LIMIT })
                                }
                            }
                        }
                        ids
                    })
                })
                .collect();
            racers
                .into_iter()
                .flat_map(|r| r.join().expect("a racer panicked"))
                .collect()
        };
        let first = race(200);
        assert_eq!(first.len(), LIMIT, "exactly the limit got in");
        assert_eq!(timers.pending(), LIMIT);
        assert_eq!(timers.stats().rejected, (THREADS * 200 - LIMIT) as u64);
        for &id in &first[..37] {
            assert!(timers.cancel(id));
        }
        let second = race(50);
        assert_eq!(second.len(), 37, "exactly the freed places");
        let all: HashSet<TimerId> = first.iter().chain(&second).copied().collect();
        assert_eq!(all.len(), LIMIT + 37, "no id handed out twice");
        let unfired = timers.shutdown();
        assert_eq!(unfired.len(), LIMIT);
        let stats = timers.stats();
        assert_eq!(stats.scheduled, (LIMIT + 37) as u64);
        assert_eq!(stats.cancelled, 37);
        assert_eq!(stats.pending, 0);
    });
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
