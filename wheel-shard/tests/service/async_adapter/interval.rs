//! `Interval`: a tick each period, the missed periods counted (those whose runs the service
//! skipped too), one timer per interval, cancelled when dropped, woken on its latest waker, and
//! ended with `Abandoned` for good at shutdown.

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wheel_shard::{Config, Interval, ScheduleError, TimerError};

use super::*;
use crate::common;
use crate::common::{eventually, flag, manual, service_with_a_full_ring, within, SOON};

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

// ---- by hand ----

/// Polls `interval`'s tick once with `waker`.
fn tick_with(interval: &mut Interval, waker: &Arc<Unpark>) -> Poll<Result<u64, TimerError>> {
    poll_with(
        &mut std::future::poll_fn(|cx| interval.poll_tick(cx)),
        waker,
    )
}

// Guards: an Interval polled on one thread and then on another with a different waker
// wakes only the latest waker; 3.5 periods without a poll give Ok(3) in one tick, the next
// poll is Pending (no burst), and the next period gives Ok(1) at its deadline, not before.
#[test]
fn an_interval_wakes_its_latest_waker_and_counts_the_missed_periods() {
    within(SOON, || {
        let (timers, clock) = manual(2, 2);
        let tick = timers.config().tick;
        let period = Duration::from_millis(100);
        let mut interval = timers.interval(period);
        let waker_a = Unpark::here();
        assert!(tick_with(&mut interval, &waker_a).is_pending());
        let (mut interval, waker_b) = thread::spawn(move || {
            let waker = Unpark::here();
            assert!(tick_with(&mut interval, &waker).is_pending());
            (interval, waker)
        })
        .join()
        .expect("poller B");
        clock.advance(period * 7 / 2);
        assert_eq!(waker_a.wakes(), 0, "a replaced waker was woken");
        assert!(waker_b.wakes() >= 1, "the latest waker was not woken");
        assert_eq!(tick_with(&mut interval, &waker_b), Poll::Ready(Ok(3)));
        let waker_c = Unpark::here();
        assert!(tick_with(&mut interval, &waker_c).is_pending(), "a burst");
        clock.advance(period / 2 - tick);
        assert_eq!(waker_c.wakes(), 0, "woken a tick early");
        assert!(tick_with(&mut interval, &waker_c).is_pending());
        clock.advance(tick);
        assert_eq!(waker_c.wakes(), 1);
        assert_eq!(tick_with(&mut interval, &waker_c), Poll::Ready(Ok(1)));
        drop(interval);
        assert_eq!(timers.pending(), 0, "the drop cancelled the timer");
        assert_eq!(timers.stats().cancelled, 1);
    });
}

// Guards: an interval's timer handed back by shutdown and then run by the caller
// (Unfired::run) or dropped: the run is not counted as a period (no deadline was
// reached), both intervals end Abandoned, their wakers are woken, and stay so.
#[test]
fn an_interval_timer_handed_back_and_run_or_dropped_is_abandoned() {
    within(SOON, || {
        let timers = common::service();
        let mut run = timers.interval(Duration::from_secs(60));
        let mut dropped = timers.interval(Duration::from_secs(60));
        let (run_waker, dropped_waker) = (Unpark::here(), Unpark::here());
        assert!(tick_with(&mut run, &run_waker).is_pending());
        assert!(tick_with(&mut dropped, &dropped_waker).is_pending());
        let mut unfired = timers.shutdown();
        assert_eq!(unfired.len(), 2);
        unfired.pop().unwrap().run();
        unfired.pop().unwrap().run();
        assert_eq!((run_waker.wakes(), dropped_waker.wakes()), (1, 1));
        for interval in [&mut run, &mut dropped] {
            for _ in 0..3 {
                assert_eq!(
                    poll_interval(interval),
                    Poll::Ready(Err(TimerError::Abandoned)),
                    "a handed-back run counted as a period, or left hanging"
                );
            }
        }
        let mut refused = timers.interval(Duration::from_secs(60));
        assert_eq!(
            poll_interval(&mut refused),
            Poll::Ready(Err(TimerError::Refused(ScheduleError::Shutdown)))
        );
    });
}

/// Polls `interval` once with a fresh counting waker.
fn poll_interval(interval: &mut Interval) -> Poll<Result<u64, TimerError>> {
    tick_with(interval, &Unpark::here())
}

// Guards: a hostile waker that runs its task inline inside `wake`, on the service's
// worker inside the interval's own callback: it ticks the interval from there (no
// deadlock on the waker slot), and after five ticks drops the interval there, which
// cancels the timer from inside its own run; the service then holds nothing.
#[test]
fn a_waker_that_ticks_inline_from_the_callback_and_drops_the_interval_there() {
    /// The task: the interval and the ticks it took.
    struct Inline {
        interval: Mutex<Option<Interval>>,
        ticks: Mutex<Vec<Result<u64, TimerError>>>,
    }

    impl Wake for Inline {
        fn wake(self: Arc<Self>) {
            let waker = Waker::from(Arc::clone(&self));
            let mut slot = self.interval.lock().unwrap();
            let Some(interval) = slot.as_mut() else {
                return;
            };
            while let Poll::Ready(outcome) = interval.poll_tick(&mut Context::from_waker(&waker)) {
                let mut ticks = self.ticks.lock().unwrap();
                let failed = outcome.is_err();
                ticks.push(outcome);
                if ticks.len() == 5 || failed {
                    drop(slot.take()); // cancels from inside the run
                    return;
                }
            }
        }
    }

    within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let period = Duration::from_millis(10);
        let task = Arc::new(Inline {
            interval: Mutex::new(Some(timers.interval(period))),
            ticks: Mutex::new(Vec::new()),
        });
        Arc::clone(&task).wake(); // the first poll, from the test thread
        for _ in 0..7 {
            clock.advance(period);
        }
        assert_eq!(*task.ticks.lock().unwrap(), vec![Ok(1); 5]);
        assert!(task.interval.lock().unwrap().is_none());
        assert!(eventually(SOON, || timers.pending() == 0));
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.cancelled, stats.panicked), (5, 1, 0));
    });
}

// Guards: the callback holds no service handle, the Interval does (as a Sleep does):
// with the application's handles gone the service runs and ticks while the interval
// lives, and dropping the interval lets it shut down (its other unfired task is dropped).
#[test]
fn an_interval_keeps_its_service_running_only_while_it_lives() {
    within(SOON, || {
        let timers = common::service();
        let (shut_down, flag) = flag();
        timers
            .schedule(Duration::from_secs(60), move || drop(flag))
            .unwrap();
        let mut interval = timers.interval(Duration::from_millis(2));
        drop(timers);
        for _ in 0..3 {
            assert!(block_on(interval.tick(), LOST_WAKEUP_BY_HAND).expect("ticking") >= 1);
        }
        assert!(
            !shut_down.load(Ordering::SeqCst),
            "shut down under a live interval"
        );
        drop(interval);
        assert!(
            eventually(SOON, || shut_down.load(Ordering::SeqCst)),
            "the interval is gone but the service still runs"
        );
    });
}

// Guards: intervals made, ticked and dropped at random on four threads while a fifth
// shuts the service down: every tick ends (Ok before the shutdown; Abandoned or
// Refused(Shutdown) after it, and then for good), none hangs, and nothing is left pending.
#[test]
fn intervals_racing_shutdown_end_without_hanging() {
    within(SOON * 3, || {
        let timers = common::service();
        let racers: Vec<_> = (0..4u64)
            .map(|t| {
                let timers = timers.clone();
                thread::spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(0x1E7 + t);
                    let mut ended = 0;
                    while ended < 20 {
                        let period = Duration::from_micros(rng.random_range(500..3_000));
                        let mut interval = timers.interval(period);
                        for _ in 0..rng.random_range(0..4) {
                            match block_on(interval.tick(), LOST_WAKEUP_BY_HAND) {
                                Ok(n) => assert!(n >= 1),
                                Err(error) => {
                                    assert!(matches!(
                                        error,
                                        TimerError::Abandoned
                                            | TimerError::Refused(ScheduleError::Shutdown)
                                    ));
                                    let again = block_on(interval.tick(), LOST_WAKEUP_BY_HAND);
                                    assert_eq!(again, Err(error), "not for good");
                                    ended += 1;
                                    break;
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(50));
        drop(timers.shutdown());
        for racer in racers {
            racer.join().expect("a racer failed");
        }
        assert_eq!(timers.pending(), 0);
    });
}
