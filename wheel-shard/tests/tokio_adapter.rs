//! `TimerService::sleep` / `timeout` on a multi-thread tokio runtime: never early, many at
//! once, cancelled when dropped, and a clear outcome when the service cannot keep the timer.

mod common;

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use common::service_with_a_full_ring;
use rand::Rng;
use wheel_shard::{Config, Elapsed, Interval, ScheduleError, Sleep, TimerError, TimerService};

/// Late enough to call a wake-up lost. Tests run in parallel on a 2-core machine (the 100k
/// sleeps among them), so scheduling alone can delay a wake-up by a few hundred ms.
const LOST_WAKEUP: Duration = Duration::from_secs(1);

fn service() -> TimerService {
    service_with(Config::default())
}

fn service_with(config: Config) -> TimerService {
    TimerService::new(Config {
        shards: 2,
        executor_threads: 2,
        ..config
    })
    .expect("valid config")
}

/// Polls `sleep` once, so it has registered a waker, and reports whether it was ready.
async fn poll_once(sleep: &mut Sleep) -> bool {
    poll_fn(|cx| Poll::Ready(Pin::new(&mut *sleep).poll(cx).is_ready())).await
}

/// Waits until the service's callbacks (run on its executor threads) have settled.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Moves the manual clock by `by` on a blocking thread (`advance` waits for the callbacks).
async fn advance(clock: &wheel_shard::ManualClock, by: Duration) {
    let clock = clock.clone();
    tokio::task::spawn_blocking(move || clock.advance(by))
        .await
        .unwrap();
}

/// Stats once `settled` holds, or after 2 s. `pending` and `cancelled` are counted by the
/// tick threads, so they trail the calls by about a tick (more on a loaded machine).
async fn stats_once(
    timers: &TimerService,
    settled: impl Fn(&wheel_shard::Stats) -> bool,
) -> wheel_shard::Stats {
    let give_up = Instant::now() + Duration::from_secs(2);
    loop {
        let stats = timers.stats();
        if settled(&stats) || Instant::now() > give_up {
            return stats;
        }
        settle().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleep_waits_at_least_its_delay() {
    let timers = service();
    for millis in [0, 1, 3, 10, 50, 120] {
        let delay = Duration::from_millis(millis);
        let start = Instant::now();
        timers.sleep(delay).await.expect("timer fired");
        let took = start.elapsed();
        assert!(took >= delay, "sleep({delay:?}) returned after {took:?}");
        assert!(
            took < delay + LOST_WAKEUP,
            "sleep({delay:?}) took {took:?}, service lateness max {:?}",
            timers.stats().lateness.max
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_concurrent_sleeps_all_wake_never_early() {
    const SLEEPS: u64 = 100_000;
    // A sleep never waits for ring room, so the rings hold the whole burst (2 × 64 Ki): the
    // test is about wake-ups, not about how fast the tick threads drain a burst.
    let timers = service_with(Config {
        ring_capacity: 1 << 16,
        ..Config::default()
    });
    let mut tasks = tokio::task::JoinSet::new();
    let mut rng = rand::rng();
    for _ in 0..SLEEPS {
        let delay = Duration::from_millis(rng.random_range(1..=500));
        let timers = timers.clone();
        tasks.spawn(async move {
            let start = Instant::now();
            timers.sleep(delay).await.expect("timer fired");
            start.elapsed().checked_sub(delay)
        });
    }
    let mut worst = Duration::ZERO;
    while let Some(late) = tasks.join_next().await {
        let late = late
            .expect("task ran")
            .expect("a sleep woke before its delay");
        worst = worst.max(late);
    }
    let stats = stats_once(&timers, |s| s.pending == 0).await;
    println!(
        "100k sleeps: worst wake-up after the delay {worst:?}, service p99 lateness {:?}",
        stats.lateness.p99
    );
    assert_eq!(stats.fired, SLEEPS);
    assert_eq!(stats.cancelled, 0);
    assert_eq!(stats.pending, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_sleep_cancels_its_timer_and_it_never_runs() {
    let timers = service();
    let mut polled = timers.sleep(Duration::from_millis(30));
    assert!(
        !poll_once(&mut polled).await,
        "ready long before its deadline"
    );
    drop(polled);
    drop(timers.sleep(Duration::from_millis(30))); // never polled
                                                   // Wait past both deadlines: a cancelled timer must not run then either.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stats = stats_once(&timers, |s| s.cancelled >= 2 && s.pending == 0).await;
    assert_eq!(stats.cancelled, 2, "both drops cancel");
    assert_eq!(stats.fired, 0, "a cancelled timer ran");
    assert_eq!(stats.pending, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_finished_sleep_cancels_nothing() {
    let timers = service();
    let mut sleep = timers.sleep(Duration::from_millis(5));
    (&mut sleep).await.expect("timer fired");
    drop(sleep);
    assert_eq!(timers.stats().cancelled, 0);
    assert_eq!(timers.stats().fired, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_elapses_not_before_its_deadline() {
    let timers = service();
    let deadline = Duration::from_millis(60);
    let start = Instant::now();
    let result = timers.timeout(deadline, std::future::pending::<()>()).await;
    let took = start.elapsed();
    assert_eq!(result, Err(Elapsed::Deadline));
    assert!(
        took >= deadline,
        "timed out after {took:?}, before {deadline:?}"
    );
    assert!(took < deadline + LOST_WAKEUP, "timed out after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_returns_the_output_of_a_future_that_is_in_time() {
    let timers = service();
    let (send, receive) = tokio::sync::oneshot::channel();
    let sender = timers.clone();
    tokio::spawn(async move {
        sender
            .sleep(Duration::from_millis(20))
            .await
            .expect("timer fired");
        send.send(7).expect("receiver waits");
    });
    let start = Instant::now();
    let result = timers.timeout(Duration::from_secs(2), receive).await;
    assert_eq!(result.expect("in time").expect("sent"), 7);
    assert!(start.elapsed() < Duration::from_secs(1));
    let stats = stats_once(&timers, |s| s.cancelled >= 1).await;
    assert_eq!(stats.fired, 1, "only the sender's sleep fires");
    assert_eq!(
        stats.cancelled, 1,
        "the finished timeout's timer is cancelled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_future_wins_over_a_zero_timeout() {
    let timers = service();
    let result = timers.timeout(Duration::ZERO, async { "done" }).await;
    assert_eq!(result, Ok("done"));
}

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
async fn shutdown_wakes_a_pending_sleep_with_abandoned() {
    let timers = service();
    let sleep = timers.sleep(Duration::from_secs(30));
    let waiter = tokio::spawn(async move {
        let start = Instant::now();
        (sleep.await, start.elapsed())
    });
    settle().await;
    let unfired = timers.shutdown();
    assert_eq!(unfired.len(), 1);
    drop(unfired); // drops the callback unrun
    let (outcome, took) = waiter.await.expect("task ran");
    assert_eq!(outcome, Err(TimerError::Abandoned));
    assert!(took < Duration::from_secs(5));
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
async fn a_sleep_keeps_working_after_the_other_handles_are_dropped() {
    let timers = service();
    let sleep = timers.sleep(Duration::from_millis(10));
    drop(timers);
    assert_eq!(sleep.await, Ok(()));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleep_and_timeout_follow_a_manual_clock() {
    let (timers, clock) = common::manual(2, 2);
    let mut sleep = timers.sleep(Duration::from_secs(60));
    let never = std::future::pending::<()>();
    let mut timeout = Box::pin(timers.timeout(Duration::from_secs(90), never));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !poll_once(&mut sleep).await,
        "real time moved a virtual sleep"
    );
    advance(&clock, Duration::from_secs(60)).await;
    assert!(poll_once(&mut sleep).await, "60 virtual seconds passed");
    assert!(
        poll_fn(|cx| Poll::Ready(timeout.as_mut().poll(cx).is_pending())).await,
        "the timeout is 90 s"
    );
    advance(&clock, Duration::from_secs(30)).await;
    assert_eq!(timeout.await, Err(Elapsed::Deadline));
}

/// `Sleep::reset` in virtual time: while pending it postpones (and brings forward) the
/// deadline; after completion it makes the sleep pending again until the new deadline; and a
/// task waiting on a reset sleep is woken at the new deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_moves_a_sleep_pending_or_completed() {
    let (timers, clock) = common::manual(2, 2);
    let mut sleep = timers.sleep(Duration::from_secs(10));
    assert!(!poll_once(&mut sleep).await);
    advance(&clock, Duration::from_secs(6)).await;
    sleep.reset(Duration::from_secs(10)); // due at 16 s now
    advance(&clock, Duration::from_secs(9)).await; // 15 s
    assert!(!poll_once(&mut sleep).await, "postponed past 10 s");
    sleep.reset(Duration::from_secs(2)); // brought forward: due at 17 s, not 25
    advance(&clock, Duration::from_secs(1)).await; // 16 s
    assert!(!poll_once(&mut sleep).await, "16 s: not before 17");
    advance(&clock, Duration::from_secs(1)).await; // 17 s
    assert!(poll_once(&mut sleep).await, "17 s: due");
    // Completed: a reset makes it pending again.
    sleep.reset(Duration::from_secs(5));
    assert!(!poll_once(&mut sleep).await, "pending again after a reset");
    advance(&clock, Duration::from_secs(5)).await;
    assert!(poll_once(&mut sleep).await);
    // A task that resets its sleep inside a poll (as a `select!` arm does) and then waits on
    // it is woken at the new deadline, not at the old one.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let waiter = tokio::spawn(async move {
        let mut sleep = timers.sleep(Duration::from_secs(1));
        let _ = poll_once(&mut sleep).await;
        // Wait until woken by the reset sleep's timer. The test's clock moves only once the
        // reset is made (at virtual 0 s, so due at 3 s): told before it, the test could
        // advance first and the reset would count from 2 s.
        let mut tx = Some(tx);
        poll_fn(|cx| {
            if let Some(tx) = tx.take() {
                sleep.reset(Duration::from_secs(3));
                tx.send(()).unwrap();
            }
            Pin::new(&mut sleep).poll(cx)
        })
        .await
        .unwrap();
        timers
    });
    rx.await.unwrap();
    advance(&clock, Duration::from_secs(2)).await;
    assert!(!waiter.is_finished(), "reset to 3 s: not at 2");
    advance(&clock, Duration::from_secs(1)).await;
    let timers = tokio::time::timeout(LOST_WAKEUP, waiter)
        .await
        .expect("the reset sleep woke its task")
        .unwrap();
    assert_eq!(timers.stats().pending, 0);
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

/// Resets racing the timer's firing, from many tasks at once in real time: a sleep always
/// completes, and never before `delay` after its last reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_racing_the_deadline_are_never_early() {
    let timers = service();
    let tasks: Vec<_> = (0..200)
        .map(|t| {
            let timers = timers.clone();
            tokio::spawn(async move {
                let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(t);
                let mut sleep = timers.sleep(Duration::from_millis(rng.random_range(0..3)));
                let mut last_reset = Instant::now();
                let mut delay = Duration::ZERO;
                for _ in 0..20 {
                    // Wait about as long as the deadline, so a reset often meets the firing.
                    tokio::time::sleep(Duration::from_micros(rng.random_range(0..3_000))).await;
                    delay = Duration::from_micros(rng.random_range(0..3_000));
                    last_reset = Instant::now();
                    sleep.reset(delay);
                }
                tokio::time::timeout(LOST_WAKEUP * 5, &mut sleep)
                    .await
                    .unwrap_or_else(|_| panic!("task {t}: a reset sleep never completed"))
                    .unwrap();
                let waited = last_reset.elapsed();
                assert!(
                    waited >= delay,
                    "task {t}: {waited:?} after a reset to {delay:?}"
                );
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(common::eventually(common::SOON, || timers.pending() == 0));
}

/// `sleep_until` and `timeout_at` in virtual time: not ready a tick before their instant,
/// ready at it, whatever real time passes meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleep_until_and_timeout_at_follow_a_manual_clock() {
    let (timers, clock) = common::manual(2, 2);
    let tick = timers.config().tick;
    let start = clock.now();
    let mut sleep = timers.sleep_until(start + Duration::from_secs(60));
    let never = std::future::pending::<()>();
    let mut timeout = Box::pin(timers.timeout_at(start + Duration::from_secs(90), never));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !poll_once(&mut sleep).await,
        "real time moved a virtual sleep"
    );
    advance(&clock, Duration::from_secs(60) - tick).await;
    assert!(!poll_once(&mut sleep).await, "a tick early");
    advance(&clock, tick).await;
    assert!(poll_once(&mut sleep).await, "60 virtual seconds passed");
    assert_eq!(sleep.await, Ok(()));
    assert!(
        poll_fn(|cx| Poll::Ready(timeout.as_mut().poll(cx).is_pending())).await,
        "the timeout is at 90 s"
    );
    advance(&clock, Duration::from_secs(30) - tick).await;
    assert!(
        poll_fn(|cx| Poll::Ready(timeout.as_mut().poll(cx).is_pending())).await,
        "a tick early"
    );
    advance(&clock, tick).await;
    assert_eq!(timeout.await, Err(Elapsed::Deadline));
    assert!(clock.now() >= start + Duration::from_secs(90));
}

/// An instant already past is due at once: the sleep and the timeout complete at the next
/// tick, a future that is ready wins over a past deadline, and nothing is left pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_past_instant_completes_at_the_next_tick() {
    let timers = service();
    let past = Instant::now()
        .checked_sub(Duration::from_secs(1))
        .unwrap_or_else(Instant::now);
    let start = Instant::now();
    assert_eq!(timers.sleep_until(past).await, Ok(()));
    let never = std::future::pending::<()>();
    assert_eq!(timers.timeout_at(past, never).await, Err(Elapsed::Deadline));
    assert_eq!(timers.timeout_at(past, async { 3 }).await, Ok(3));
    assert!(
        start.elapsed() < LOST_WAKEUP,
        "a past instant took {:?}",
        start.elapsed()
    );
    let mut completed = timers.sleep(Duration::from_millis(1));
    (&mut completed).await.unwrap();
    completed.reset_at(past);
    assert_eq!(completed.await, Ok(()), "reset to a past instant");
    // The other four fired. The ready future's timeout cancelled its timer, unless that timer,
    // due at the next tick, fired before the timeout was polled and dropped.
    let stats = stats_once(&timers, |s| s.pending == 0).await;
    assert_eq!(stats.fired + stats.cancelled, 5, "{stats:?}");
    assert!(stats.fired >= 4 && stats.cancelled <= 1, "{stats:?}");
}

/// `Sleep::reset_at` in virtual time, as `reset`: while pending it postpones and brings the
/// deadline forward; once completed it makes the sleep pending again; on a shut-down service
/// it resolves to the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_at_moves_a_sleep_pending_or_completed() {
    let (timers, clock) = common::manual(2, 2);
    let start = clock.now();
    let at = |secs| start + Duration::from_secs(secs);
    let mut sleep = timers.sleep_until(at(10));
    assert!(!poll_once(&mut sleep).await);
    advance(&clock, Duration::from_secs(6)).await;
    sleep.reset_at(at(16));
    advance(&clock, Duration::from_secs(9)).await; // 15 s
    assert!(!poll_once(&mut sleep).await, "postponed past 10 s");
    sleep.reset_at(at(17)); // earlier than 16 + 10, later than now
    advance(&clock, Duration::from_secs(1)).await; // 16 s
    assert!(!poll_once(&mut sleep).await, "16 s: not before 17");
    advance(&clock, Duration::from_secs(1)).await; // 17 s
    assert!(poll_once(&mut sleep).await, "17 s: due");
    sleep.reset_at(at(20));
    assert!(!poll_once(&mut sleep).await, "pending again after a reset");
    advance(&clock, Duration::from_secs(3)).await;
    assert!(poll_once(&mut sleep).await);
    assert_eq!(timers.stats().cancelled, 0, "every move was a reschedule");
    drop(timers.shutdown());
    sleep.reset_at(at(30));
    assert_eq!(
        sleep.await,
        Err(TimerError::Refused(ScheduleError::Shutdown))
    );
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

/// Polls `interval` once, so it has registered a waker; its outcome if it was ready.
async fn tick_now(interval: &mut Interval) -> Option<Result<u64, TimerError>> {
    match poll_fn(|cx| Poll::Ready(interval.poll_tick(cx))).await {
        Poll::Ready(outcome) => Some(outcome),
        Poll::Pending => None,
    }
}

/// An interval in virtual time: the first tick one period after creation (never a tick
/// early), then one a period; a task that did not tick for 3.5 periods learns of the 3
/// missed ones in one tick, and the tick after waits for the next deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_ticks_each_period_and_counts_the_missed_ones() {
    let (timers, clock) = common::manual(2, 2);
    let tick = timers.config().tick;
    let period = Duration::from_secs(10);
    let mut interval = timers.interval(period);
    assert_eq!(interval.period(), period);
    assert_eq!(
        tick_now(&mut interval).await,
        None,
        "tokio's first tick is at once; not ours"
    );
    advance(&clock, period - tick).await;
    assert_eq!(tick_now(&mut interval).await, None, "a tick early");
    advance(&clock, tick).await;
    assert_eq!(tick_now(&mut interval).await, Some(Ok(1)));
    assert_eq!(tick_now(&mut interval).await, None, "one tick a period");
    advance(&clock, period * 7 / 2).await; // busy for 3.5 periods
    assert_eq!(
        interval.tick().await,
        Ok(3),
        "the missed periods, in one tick"
    );
    assert_eq!(tick_now(&mut interval).await, None, "no burst after it");
    advance(&clock, period / 2).await;
    assert_eq!(interval.tick().await, Ok(1), "the phase is kept");
    let stats = timers.stats();
    assert_eq!(
        (stats.scheduled, stats.fired),
        (1, 5),
        "one timer, run 1 + 3 + 1 times"
    );
    assert_eq!(timers.pending(), 1);
}

/// The periods whose runs the service skipped count too: a callback that moves virtual time
/// three periods on makes the interval's first run come 2.5 periods late, the service skips
/// the two deadlines that passed meanwhile, and the run after them counts them with its own,
/// so the ticks' periods add up to the time that passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_counts_the_periods_whose_runs_the_service_skipped() {
    let (timers, clock) = common::manual(2, 2);
    let period = Duration::from_secs(10);
    let start = clock.now();
    let mut interval = timers.interval(period);
    let jump = clock.clone();
    timers
        .schedule(period / 2, move || jump.advance(period * 3))
        .unwrap();
    // To half a period; the callback there moves on to 3.5 periods, where the first run
    // (due at one period) comes, and the next is due at four periods (two skipped).
    advance(&clock, period / 2).await;
    assert_eq!(clock.now(), start + period * 7 / 2);
    assert_eq!(
        interval.tick().await,
        Ok(1),
        "the first run: the first period"
    );
    assert_eq!(tick_now(&mut interval).await, None, "no burst after it");
    advance(&clock, period / 2).await;
    assert_eq!(
        interval.tick().await,
        Ok(3),
        "the run due at four periods, after two the service skipped"
    );
    let stats = timers.stats();
    assert_eq!(
        (stats.scheduled, stats.fired),
        (2, 3),
        "the one-shot, and the interval's timer run twice"
    );
}

/// A task waiting on `tick` is woken once a period, and its ticks come in order, each one
/// period after the one before in virtual time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_on_an_interval_is_woken_each_period_in_order() {
    let (timers, clock) = common::manual(2, 2);
    let period = Duration::from_millis(250);
    let start = clock.now();
    let mut interval = timers.interval(period);
    let (ticks_tx, mut ticks) = tokio::sync::mpsc::unbounded_channel();
    let virtual_now = clock.clone();
    let ticker = tokio::spawn(async move {
        for _ in 0..5 {
            let outcome = interval.tick().await;
            ticks_tx.send((outcome, virtual_now.now())).unwrap();
        }
    });
    for n in 1..=5u32 {
        advance(&clock, period).await;
        let (outcome, at) = tokio::time::timeout(LOST_WAKEUP, ticks.recv())
            .await
            .expect("the tick woke its task")
            .unwrap();
        assert_eq!(outcome, Ok(1), "tick {n}");
        assert_eq!(at, start + period * n, "tick {n} at its own period");
    }
    ticker.await.unwrap();
    // The task ended and dropped its interval: the timer is cancelled.
    let stats = stats_once(&timers, |s| s.pending == 0).await;
    assert_eq!((stats.cancelled, stats.pending), (1, 0));
}

/// One repeating timer serves an interval's whole life, and dropping the interval cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_interval_cancels_its_one_timer() {
    let timers = service();
    let mut interval = timers.interval(Duration::from_millis(5));
    for _ in 0..4 {
        assert!(interval.tick().await.expect("ticking") >= 1);
    }
    assert_eq!(timers.pending(), 1);
    drop(interval);
    let stats = stats_once(&timers, |s| s.pending == 0).await;
    assert_eq!(stats.scheduled, 1, "one timer for the whole life");
    assert_eq!((stats.cancelled, stats.pending), (1, 0));
}

/// Shutdown ends an interval: a waiting task is woken with `Abandoned` (not left hanging),
/// runs counted before the shutdown are still reported first, and every later tick is
/// `Abandoned` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_an_interval_with_abandoned_for_good() {
    let (timers, clock) = common::manual(2, 2);
    let period = Duration::from_secs(1);
    let mut counted = timers.interval(period);
    let mut waiting = timers.interval(period * 60);
    let waiter = tokio::spawn(async move {
        let outcome = waiting.tick().await;
        (outcome, waiting)
    });
    advance(&clock, period * 2).await;
    settle().await;
    let unfired = timers.shutdown();
    assert_eq!(unfired.len(), 2);
    drop(unfired);
    let (outcome, mut waiting) = tokio::time::timeout(LOST_WAKEUP, waiter)
        .await
        .expect("shutdown woke the waiting task")
        .unwrap();
    assert_eq!(outcome, Err(TimerError::Abandoned));
    assert_eq!(counted.tick().await, Ok(2), "the runs before the shutdown");
    for _ in 0..3 {
        assert_eq!(counted.tick().await, Err(TimerError::Abandoned));
        assert_eq!(waiting.tick().await, Err(TimerError::Abandoned));
    }
}

/// A refused interval says so at every tick rather than hanging: a shut-down service,
/// `max_pending` reached, and a full ring (at once, without waiting for ring room).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_intervals_say_so_at_every_tick() {
    let period = Duration::from_millis(10);
    let closed = service();
    closed.shutdown();
    assert_eq!(
        closed.try_interval(period).err(),
        Some(ScheduleError::Shutdown)
    );
    let mut interval = closed.interval(period);
    for _ in 0..3 {
        assert_eq!(
            interval.tick().await,
            Err(TimerError::Refused(ScheduleError::Shutdown))
        );
    }

    let limited = service_with(Config {
        max_pending: Some(1),
        ..Config::default()
    });
    let _hold = limited.sleep(Duration::from_secs(60));
    let too_many = ScheduleError::TooManyPending { limit: 1 };
    assert_eq!(limited.try_interval(period).err(), Some(too_many.clone()));
    let mut interval = limited.interval(period);
    assert_eq!(
        interval.tick().await,
        Err(TimerError::Refused(too_many.clone()))
    );
    assert_eq!(interval.tick().await, Err(TimerError::Refused(too_many)));
    drop(interval);
    assert_eq!(
        limited.stats().cancelled,
        0,
        "a refused interval cancels nothing"
    );

    let full = service_with_a_full_ring(Duration::from_secs(3), Duration::from_secs(30));
    let start = Instant::now();
    assert_eq!(
        full.try_interval(period).err(),
        Some(ScheduleError::Saturated)
    );
    assert_eq!(
        full.interval(period).tick().await,
        Err(TimerError::Refused(ScheduleError::Saturated))
    );
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "waited {:?} for ring room",
        start.elapsed()
    );
}

/// 200 tasks on the real clock, each alternating interval ticks and sleeps to random
/// instants: no interval ticks before its periods have passed, no sleep_until ends before
/// its instant, and everything completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_with_intervals_and_sleep_until_are_never_early() {
    let timers = service();
    let tasks: Vec<_> = (0..200u64)
        .map(|t| {
            let timers = timers.clone();
            tokio::spawn(async move {
                let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(t);
                let period = Duration::from_millis(rng.random_range(2..=20));
                let created = Instant::now();
                let mut interval = timers.interval(period);
                let mut periods = 0u32;
                for _ in 0..5 {
                    let n = interval.tick().await.expect("ticking");
                    periods += u32::try_from(n).unwrap();
                    let since = created.elapsed();
                    assert!(
                        since >= period * periods,
                        "task {t}: {periods} periods of {period:?} after {since:?}"
                    );
                    let at = Instant::now() + Duration::from_micros(rng.random_range(0..20_000));
                    timers.sleep_until(at).await.expect("timer fired");
                    let now = Instant::now();
                    assert!(now >= at, "task {t}: sleep_until {:?} early", at - now);
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(LOST_WAKEUP * 20, task)
            .await
            .expect("every task completes")
            .unwrap();
    }
    assert!(common::eventually(common::SOON, || timers.pending() == 0));
    assert_eq!(
        timers.stats().cancelled,
        200,
        "each interval's drop cancelled its timer"
    );
}
