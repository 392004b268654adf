//! Sleeps and timeouts the service cannot keep: refused at once (never blocking the task) by a
//! shut-down service, by `max_pending` or by a full ring, with a typed error, counted exactly,
//! and asked again after a `reset`.

use std::task::Poll;
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wheel_shard::{Config, Elapsed, ScheduleError, Sleep, TimerError, TimerService};

use super::*;
use crate::common;
use crate::common::{service_with_a_full_ring, within, SOON};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shut_down_service_refuses_sleeps_and_timeouts() {
    let timers = service();
    timers.shutdown();
    assert_eq!(
        timers.try_sleep(Duration::from_millis(1)).err(),
        Some(ScheduleError::Shutdown)
    );
    let refused = Err(TimerError::Refused(ScheduleError::Shutdown));
    assert_eq!(timers.sleep(Duration::from_millis(1)).await, refused);
    let result = timers
        .timeout(Duration::from_secs(1), std::future::pending::<()>())
        .await;
    assert_eq!(
        result,
        Err(Elapsed::TimerFailed(TimerError::Refused(
            ScheduleError::Shutdown
        )))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_pending_refusal_is_reported() {
    let timers = service_with(Config {
        max_pending: Some(1),
        ..Config::default()
    });
    let first = timers
        .try_sleep(Duration::from_secs(10))
        .expect("room for one");
    assert_eq!(
        timers.try_sleep(Duration::from_secs(10)).err(),
        Some(ScheduleError::TooManyPending { limit: 1 })
    );
    drop(first);
    timers
        .sleep(Duration::from_millis(1))
        .await
        .expect("room again after the first was cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ring_refuses_sleeps_and_timeouts_at_once() {
    // A sleep that blocked its runtime thread would wait for the ring's next tick (3 s).
    let at_once = Duration::from_secs(1);
    let timers = service_with_a_full_ring(Duration::from_secs(3), Duration::from_secs(30));
    let saturated = TimerError::Refused(ScheduleError::Saturated);

    let start = Instant::now();
    assert_eq!(
        timers.try_sleep(Duration::from_millis(10)).err(),
        Some(ScheduleError::Saturated)
    );
    assert!(
        start.elapsed() < at_once,
        "try_sleep waited {:?}",
        start.elapsed()
    );

    let start = Instant::now();
    assert_eq!(
        timers.sleep(Duration::from_millis(10)).await,
        Err(saturated.clone())
    );
    assert!(
        start.elapsed() < at_once,
        "sleep waited {:?}",
        start.elapsed()
    );

    let start = Instant::now();
    let result = timers
        .timeout(Duration::from_secs(10), std::future::pending::<()>())
        .await;
    assert_eq!(result, Err(Elapsed::TimerFailed(saturated)));
    assert!(
        start.elapsed() < at_once,
        "timeout waited {:?}",
        start.elapsed()
    );
    assert_eq!(timers.stats().rejected, 3, "each refusal is counted");

    // From the next tick on, the ring drains and sleeps work again.
    let give_up = Instant::now() + Duration::from_secs(10);
    let sleep = loop {
        match timers.try_sleep(Duration::from_millis(1)) {
            Ok(sleep) => break sleep,
            Err(error) => assert!(Instant::now() < give_up, "still refused: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(sleep.await, Ok(()));
}

/// `try_sleep_until` and `timeout_at` schedule with `try_schedule_at`: a full ring refuses
/// them at once instead of blocking the runtime thread for `saturation_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ring_refuses_sleep_until_and_timeout_at_at_once() {
    let timers = service_with_a_full_ring(Duration::from_secs(3), Duration::from_secs(30));
    let start = Instant::now();
    let at = Instant::now() + Duration::from_millis(10);
    assert_eq!(
        timers.try_sleep_until(at).err(),
        Some(ScheduleError::Saturated)
    );
    let saturated = TimerError::Refused(ScheduleError::Saturated);
    assert_eq!(timers.sleep_until(at).await, Err(saturated.clone()));
    let never = std::future::pending::<()>();
    assert_eq!(
        timers.timeout_at(at, never).await,
        Err(Elapsed::TimerFailed(saturated))
    );
    assert_eq!(
        timers.try_schedule_at(at, || {}).err(),
        Some(ScheduleError::Saturated)
    );
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "waited {:?}",
        start.elapsed()
    );
    assert_eq!(timers.stats().rejected, 4, "each refusal is counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleeps_refused_by_a_full_ring_succeed_again_soon() {
    let timers = TimerService::new(Config {
        shards: 1,
        executor_threads: 1,
        ring_capacity: 64,
        pin_threads: false,
        ..Config::default()
    })
    .expect("valid config");
    // The tick thread now sleeps until this timer is due, 20 s away; later deadlines do not
    // wake it.
    let _far = timers.sleep(Duration::from_secs(20));
    settle().await;
    let mut held = Vec::new();
    let refused_at = loop {
        match timers.try_sleep(Duration::from_secs(60)) {
            Ok(sleep) => held.push(sleep),
            Err(error) => {
                assert_eq!(error, ScheduleError::Saturated);
                break Instant::now();
            }
        }
        assert!(held.len() <= 10_000, "the ring never filled");
    };
    let give_up = refused_at + Duration::from_secs(5);
    while timers.try_sleep(Duration::from_secs(60)).is_err() {
        assert!(
            Instant::now() < give_up,
            "still refused after 5 s: nothing drains the full ring"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("room again {:?} after the refusal", refused_at.elapsed());
}

/// `Sleep::reset` on a sleep the service refused asks again, and on a shut-down service
/// resolves to the refusal instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_after_a_refusal_asks_again() {
    let timers = service_with(Config {
        max_pending: Some(1),
        ..Config::default()
    });
    let hold = timers.sleep(Duration::from_secs(60));
    let mut refused = timers.sleep(Duration::from_millis(1));
    assert_eq!(
        (&mut refused).await,
        Err(TimerError::Refused(ScheduleError::TooManyPending {
            limit: 1
        }))
    );
    drop(hold); // cancels: room for one again
    assert!(common::eventually(common::SOON, || timers.pending() == 0));
    refused.reset(Duration::from_millis(20));
    let start = Instant::now();
    assert_eq!((&mut refused).await, Ok(()));
    assert!(start.elapsed() >= Duration::from_millis(20), "never early");
    drop(timers.shutdown());
    refused.reset(Duration::from_millis(1));
    assert_eq!(
        (&mut refused).await,
        Err(TimerError::Refused(ScheduleError::Shutdown))
    );
}

// ---- by hand ----

// Guards: sleeps and timeouts racing for max_pending places from four threads, with
// random drops freeing places: every refusal is the typed TooManyPending (the same at
// every re-poll, and a refused sleep's drop cancels nothing), the limit is never passed,
// and the counters are exact (scheduled + rejected = attempts, cancelled = drops of
// accepted ones, pending 0).
#[test]
fn sleeps_racing_for_max_pending_places_are_refused_typed_and_counted_exactly() {
    within(SOON * 3, || {
        const LIMIT: usize = 64;
        const THREADS: u64 = 4;
        const ATTEMPTS: usize = 2_000;
        let timers = common::service_with(Config {
            max_pending: Some(LIMIT),
            ..Config::default()
        });
        let refusal = ScheduleError::TooManyPending { limit: LIMIT };
        let racers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (timers, refusal) = (timers.clone(), refusal.clone());
                thread::spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(0x4A7 + t);
                    let mut held: Vec<Sleep> = Vec::new();
                    let (mut accepted, mut refused) = (0u64, 0u64);
                    for _ in 0..ATTEMPTS {
                        if rng.random_bool(0.25) {
                            let mut timeout = timers
                                .timeout(Duration::from_secs(3600), std::future::pending::<()>());
                            match poll_fresh(&mut timeout).0 {
                                Poll::Pending => accepted += 1,
                                Poll::Ready(outcome) => {
                                    let want = Err(Elapsed::TimerFailed(TimerError::Refused(
                                        refusal.clone(),
                                    )));
                                    assert_eq!(outcome, want);
                                    refused += 1;
                                }
                            }
                            continue; // dropped at once
                        }
                        let mut sleep = timers.sleep(Duration::from_secs(3600));
                        match sleep_state(&mut sleep) {
                            Poll::Pending => {
                                accepted += 1;
                                held.push(sleep);
                            }
                            Poll::Ready(outcome) => {
                                let want = Err(TimerError::Refused(refusal.clone()));
                                assert_eq!(outcome, want);
                                assert_eq!(sleep_state(&mut sleep), Poll::Ready(want));
                                refused += 1;
                            }
                        }
                        while !held.is_empty() && rng.random_bool(0.4) {
                            let at = rng.random_range(0..held.len());
                            drop(held.swap_remove(at));
                        }
                        assert!(timers.pending() <= LIMIT, "max_pending passed");
                    }
                    (accepted, refused, held)
                })
            })
            .collect();
        let mut accepted = 0;
        let mut refused = 0;
        let mut held = Vec::new();
        for r in racers {
            let (a, f, h) = r.join().expect("a racer failed");
            accepted += a;
            refused += f;
            held.extend(h);
        }
        assert!(refused > 0, "the limit was never reached");
        assert_eq!(accepted + refused, THREADS * ATTEMPTS as u64);
        let still_held = held.len() as u64;
        assert_eq!(timers.pending() as u64, still_held);
        drop(held);
        let stats = timers.stats();
        assert_eq!(stats.scheduled, accepted, "{stats:?}");
        assert_eq!(stats.rejected, refused);
        assert_eq!(
            stats.cancelled, accepted,
            "every accepted one ended by its drop"
        );
        assert_eq!((stats.fired, stats.pending), (0, 0));
    });
}
