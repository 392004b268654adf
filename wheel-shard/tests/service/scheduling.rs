//! Scheduling and firing: the public types, never early, instants in the past and far in the
//! future, `Duration::MAX`, one shard or many, and the lateness the stats report. Bounds are
//! generous: these test behaviour, not speed (that is what `cargo xtask bench` is for).

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use wheel_shard::{Config, ScheduleError, TimerId, TimerService};

use crate::common::{counter, eventually, manual, service, service_with, within, SOON};

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

// Guards: schedule_at an instant long before the service existed fires on the first settle;
// one a thousand years out never fires (not even after ten virtual years) and comes back at
// shutdown.
#[test]
fn schedule_at_far_past_and_far_future() {
    within(SOON, || {
        let (timers, clock) = manual(2, 1);
        let (runs, make) = counter();
        let now = clock.now();
        let past = [
            now.checked_sub(Duration::from_secs(3600)),
            now.checked_sub(Duration::from_secs(1)),
            Some(now),
        ];
        let past: Vec<Instant> = past.into_iter().flatten().collect();
        for &at in &past {
            timers.schedule_at(at, make()).unwrap();
        }
        let far = now
            .checked_add(Duration::from_secs(1000 * 365 * 24 * 3600))
            .expect("Instant reaches a thousand years out");
        let far_id = timers.schedule_at(far, make()).unwrap();
        clock.advance(Duration::ZERO);
        assert_eq!(runs.load(Ordering::SeqCst), past.len(), "due at once");
        clock.advance(Duration::from_secs(10 * 365 * 24 * 3600));
        let unfired = timers.shutdown();
        assert_eq!(unfired.iter().map(|u| u.id).collect::<Vec<_>>(), [far_id]);
        assert_eq!(runs.load(Ordering::SeqCst), past.len());
    });
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
