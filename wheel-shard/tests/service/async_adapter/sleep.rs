//! `Sleep` (`sleep`, `sleep_until`, `reset`, `reset_at`): never early, cancelled when dropped,
//! woken once whichever waker polled it last and on whatever thread, abandoned when its timer is
//! handed back at shutdown.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wheel_shard::{Config, Elapsed, ScheduleError, Sleep, TimerError, TimerService};

use super::*;
use crate::common;
use crate::common::{eventually, flag, manual, within, SOON};

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
async fn a_sleep_keeps_working_after_the_other_handles_are_dropped() {
    let timers = service();
    let sleep = timers.sleep(Duration::from_millis(10));
    drop(timers);
    assert_eq!(sleep.await, Ok(()));
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

// ---- by hand ----

// Guards: a Sleep polled on one thread, moved to another and polled there with a different
// waker wakes the *last* waker when it fires (never before its virtual deadline), polling
// after completion from a third thread stays Ready(Ok), and it ends once (fired, not
// cancelled).
#[test]
fn a_sleep_moved_between_threads_wakes_its_last_waker_and_stays_ready() {
    within(SOON, || {
        let (timers, clock) = manual(2, 2);
        let start = clock.now();
        let delay = Duration::from_millis(250);
        let mut sleep = timers.sleep(delay);
        let (first, waker_a) = poll_fresh(&mut sleep);
        assert!(first.is_pending());
        // Move it to another thread, poll it there with that thread's waker, and bring it
        // back (the way a work-stealing runtime moves a task).
        let (mut sleep, waker_b) = thread::spawn(move || {
            let (state, waker) = poll_fresh(&mut sleep);
            assert!(state.is_pending(), "ready before any virtual time passed");
            (sleep, waker)
        })
        .join()
        .expect("poller B");
        clock.advance(delay - Duration::from_millis(1));
        assert_eq!(waker_b.wakes(), 0, "woken a tick before its deadline");
        assert!(
            poll_with(&mut sleep, &waker_b).is_pending(),
            "ready a tick early"
        );
        clock.advance(Duration::from_millis(1));
        assert!(clock.now() >= start + delay);
        assert_eq!(waker_b.wakes(), 1, "the last waker is woken once it fired");
        assert_eq!(waker_a.wakes(), 0, "a replaced waker is not woken");
        assert_eq!(poll_with(&mut sleep, &waker_b), Poll::Ready(Ok(())));
        let sleep = thread::spawn(move || {
            let mut sleep = sleep;
            for _ in 0..3 {
                assert_eq!(sleep_state(&mut sleep), Poll::Ready(Ok(())));
            }
            sleep
        })
        .join()
        .expect("poller C");
        drop(sleep);
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.cancelled), (1, 0));
        assert_eq!(timers.pending(), 0);
    });
}

// Guards: with a fresh waker at every poll (and a second poll that replaces the first
// waker right away), sleeps on four threads at once never lose a wake-up and never end
// before their delay (real clock, hand-rolled executor).
#[test]
fn a_waker_changing_at_every_poll_never_loses_the_wakeup() {
    within(SOON * 6, || {
        let timers = common::service();
        on_four_threads(&timers, 0xA5_0000, |timers, rng| {
            for _ in 0..150 {
                let delay = Duration::from_micros(rng.random_range(0..4_000));
                let begun = Instant::now();
                let mut sleep = timers.sleep(delay);
                // A poll with a waker that is replaced at once: only the second
                // may be relied on.
                let _ = poll_fresh(&mut sleep);
                let outcome = block_on(sleep, LOST_WAKEUP_BY_HAND);
                assert_eq!(outcome, Ok(()));
                let took = begun.elapsed();
                assert!(took >= delay, "sleep({delay:?}) ended after {took:?}");
            }
        });
        assert!(eventually(SOON, || timers.pending() == 0));
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.cancelled), (600, 0));
    });
}

// Guards: sleep(Duration::ZERO) ends within one tick of virtual time, sleep(Duration::MAX)
// never fires (not even at the end of virtual time), a Duration::MAX timeout returns its
// future's output, and dropping or shutting down the MAX sleeps ends them (pending 0).
#[test]
fn sleep_zero_and_sleep_max_at_the_edges_of_virtual_time() {
    within(SOON, || {
        let (timers, clock) = manual(2, 1);
        let mut zero = timers.sleep(Duration::ZERO);
        let mut forever = timers.sleep(Duration::MAX);
        let mut forever_dropped = timers.sleep(Duration::MAX);
        assert!(sleep_state(&mut forever).is_pending());
        assert!(sleep_state(&mut forever_dropped).is_pending());
        let first = sleep_state(&mut zero);
        if first.is_pending() {
            clock.advance(timers.config().tick);
        }
        assert_eq!(sleep_state(&mut zero), Poll::Ready(Ok(())));
        let mut timeout = timers.timeout(Duration::MAX, async { 7 });
        assert_eq!(poll_fresh(&mut timeout).0, Poll::Ready(Ok(7)));
        drop(timeout); // its Duration::MAX timer: cancelled
        clock.advance(Duration::from_secs(3600 * 24 * 365 * 100));
        assert!(sleep_state(&mut forever).is_pending(), "MAX fired");
        clock.advance(Duration::MAX); // to the end of virtual time
        assert!(sleep_state(&mut forever).is_pending(), "MAX fired");
        assert_eq!(clock.advance_to_next(), None);
        drop(forever_dropped);
        assert_eq!(timers.pending(), 1);
        let unfired = timers.shutdown();
        assert_eq!(unfired.len(), 1);
        drop(unfired);
        assert_eq!(
            sleep_state(&mut forever),
            Poll::Ready(Err(TimerError::Abandoned))
        );
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.cancelled, stats.pending), (1, 2, 0));
    });
}

// Guards: thousands of polled sleeps, half of them dropped at random from four threads
// while virtual time advances on a fifth: none is ready before its deadline, every kept
// one is woken and ends Ok, and the accounting is exact (fired + cancelled = created,
// pending 0, cancelled no more than the drops).
#[test]
fn thousands_of_sleeps_dropped_at_random_while_time_moves_account_exactly() {
    within(SOON * 6, || {
        const SLEEPS: usize = 8_000;
        const THREADS: usize = 4;
        const HORIZON_MS: u64 = 1_000;
        let (timers, clock) = manual(2, 2);
        let start = clock.now();
        let mut rng = SmallRng::seed_from_u64(0x51EE9);
        let mut chunks: Vec<Vec<(Sleep, Instant, Arc<Unpark>)>> =
            (0..THREADS).map(|_| Vec::new()).collect();
        for n in 0..SLEEPS {
            let delay = Duration::from_millis(rng.random_range(1..=HORIZON_MS));
            let mut sleep = timers.sleep(delay);
            let (state, waker) = poll_fresh(&mut sleep);
            assert!(state.is_pending(), "ready before time moved");
            chunks[n % THREADS].push((sleep, start + delay, waker));
        }
        assert_eq!(timers.pending(), SLEEPS);
        let advancer = {
            let clock = clock.clone();
            thread::spawn(move || {
                for _ in 0..HORIZON_MS / 4 {
                    clock.advance(Duration::from_millis(4));
                }
            })
        };
        let droppers: Vec<_> = chunks
            .into_iter()
            .enumerate()
            .map(|(t, mut chunk)| {
                let clock = clock.clone();
                thread::spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(0xD0 + t as u64);
                    let mut kept = Vec::new();
                    let mut dropped = 0usize;
                    while let Some((mut sleep, deadline, waker)) = chunk.pop() {
                        if rng.random_bool(0.5) {
                            if let Poll::Ready(outcome) = sleep_state(&mut sleep) {
                                assert_eq!(outcome, Ok(()));
                                let now = clock.now();
                                assert!(now >= deadline, "ready {:?} early", deadline - now);
                            }
                            drop(sleep);
                            dropped += 1;
                        } else {
                            kept.push((sleep, deadline, waker));
                        }
                        if rng.random_ratio(1, 64) {
                            thread::yield_now();
                        }
                    }
                    (kept, dropped)
                })
            })
            .collect();
        advancer.join().expect("advancer");
        let mut kept = Vec::new();
        let mut dropped = 0;
        for d in droppers {
            let (k, n) = d.join().expect("a dropper failed");
            kept.extend(k);
            dropped += n;
        }
        clock.advance(Duration::from_millis(HORIZON_MS));
        for (sleep, deadline, waker) in &mut kept {
            assert!(waker.wakes() >= 1, "a kept sleep was never woken");
            assert_eq!(poll_with(sleep, waker), Poll::Ready(Ok(())));
            assert!(clock.now() >= *deadline);
        }
        let kept_count = kept.len();
        drop(kept);
        assert_eq!(kept_count + dropped, SLEEPS);
        assert!(
            eventually(SOON, || timers.pending() == 0),
            "{:?}",
            timers.stats()
        );
        let stats = timers.stats();
        assert_eq!(stats.scheduled, SLEEPS as u64);
        assert_eq!(stats.fired + stats.cancelled, SLEEPS as u64, "{stats:?}");
        assert!(stats.fired >= kept_count as u64);
        assert!(stats.cancelled <= dropped as u64);
        assert!(stats.cancelled > 0, "the drops raced nothing");
        assert!(timers.shutdown().is_empty());
    });
}

// Guards: the service's last handle dropped from inside a timer callback, by dropping a
// pending Sleep (which holds a handle) there: the drop cancels the sleep (Abandoned, not
// left hanging), the service shuts down from its own worker without a deadlock, and the
// other unfired timer's task is dropped.
#[test]
fn the_last_handle_goes_with_a_sleep_dropped_inside_a_callback() {
    within(SOON, || {
        let timers = common::service();
        let (other_dropped, flag) = flag();
        timers
            .schedule(Duration::from_secs(60), move || drop(flag))
            .unwrap();
        let mut victim = timers.sleep(Duration::from_secs(60));
        let victim_waker = Unpark::here();
        assert!(poll_with(&mut victim, &victim_waker).is_pending());
        let (done_tx, done_rx) = mpsc::channel();
        timers
            .schedule(Duration::from_millis(5), move || {
                drop(victim); // cancels; its handle is now the last but one
                done_tx.send(()).unwrap();
            })
            .unwrap();
        drop(timers); // the callback's captured Sleep holds the last handle now
        done_rx
            .recv_timeout(SOON)
            .expect("the callback ran and returned");
        assert!(
            eventually(SOON, || other_dropped.load(Ordering::SeqCst)),
            "the last handle went but the unfired task was never dropped"
        );
        assert_eq!(
            victim_waker.wakes(),
            0,
            "a dropped sleep's waker is forgotten"
        );
    });
}

// Guards: a hostile waker that runs its task inline inside `wake` (on the service's
// worker, inside the timer callback): it polls the finished sleep, schedules the next
// sleep from there, and after a chain of them drops the service's last handle in the
// callback; no deadlock, no early completion, every sleep of the chain ends Ok, and the
// service then shuts down (its other unfired task is dropped).
#[test]
fn a_waker_that_runs_its_task_inline_from_the_callback_chains_sleeps() {
    const CHAIN: usize = 20;

    type Done = mpsc::Sender<Result<usize, String>>;

    /// The task: the sleep it waits on, when that sleep may end, and how many ended.
    struct Inline {
        state: Mutex<Option<(Sleep, Instant, usize)>>,
        /// The task's own service handle; dropped with the chain's last sleep.
        timers: Mutex<Option<TimerService>>,
        done: Mutex<Option<Done>>,
    }

    impl Inline {
        fn finish(&self, result: Result<usize, String>) {
            let done = self.done.lock().unwrap().take();
            if let Some(done) = done {
                let _ = done.send(result);
            }
        }
    }

    impl Wake for Inline {
        fn wake(self: Arc<Self>) {
            let waker = Waker::from(Arc::clone(&self));
            let mut slot = self.state.lock().unwrap();
            let Some((mut sleep, not_before, n)) = slot.take() else {
                return;
            };
            let outcome = match Pin::new(&mut sleep).poll(&mut Context::from_waker(&waker)) {
                Poll::Pending => {
                    *slot = Some((sleep, not_before, n));
                    return;
                }
                Poll::Ready(outcome) => outcome,
            };
            let now = Instant::now();
            if outcome != Ok(()) || now < not_before {
                drop(slot);
                self.finish(Err(format!(
                    "sleep {n}: {outcome:?}, {:?} early",
                    not_before.saturating_duration_since(now)
                )));
                return;
            }
            if n + 1 == CHAIN {
                // The last handles go here, on the worker, inside the callback.
                drop(slot);
                drop(sleep);
                let timers = self.timers.lock().unwrap().take();
                drop(timers);
                self.finish(Ok(n + 1));
                return;
            }
            let delay = Duration::from_millis(1 + (n as u64 % 3));
            // Read before the call: the promise is "not before `delay` from the call".
            let not_before = Instant::now() + delay;
            let next = {
                let timers = self.timers.lock().unwrap();
                timers.as_ref().expect("the chain's handle").sleep(delay)
            };
            drop(sleep);
            let mut next = next;
            match Pin::new(&mut next).poll(&mut Context::from_waker(&waker)) {
                Poll::Pending => *slot = Some((next, not_before, n + 1)),
                Poll::Ready(outcome) => {
                    drop(slot);
                    self.finish(Err(format!("a new sleep was ready at once: {outcome:?}")));
                }
            }
        }
    }

    within(SOON, || {
        let timers = common::service();
        let (other_dropped, flag) = flag();
        timers
            .schedule(Duration::from_secs(60), move || drop(flag))
            .unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        let task = Arc::new(Inline {
            state: Mutex::new(None),
            timers: Mutex::new(Some(timers.clone())),
            done: Mutex::new(Some(done_tx)),
        });
        let delay = Duration::from_millis(2);
        let not_before = Instant::now() + delay;
        let mut first = timers.sleep(delay);
        let waker = Waker::from(Arc::clone(&task));
        {
            let mut slot = task.state.lock().unwrap();
            assert!(Pin::new(&mut first)
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
            *slot = Some((first, not_before, 0));
        }
        drop(waker);
        drop(task);
        drop(timers); // the chain's sleeps and its own handle keep the service running
        let outcome = done_rx.recv_timeout(SOON).expect("the chain ended");
        assert_eq!(outcome, Ok(CHAIN));
        assert!(
            eventually(SOON, || other_dropped.load(Ordering::SeqCst)),
            "the last handle went inside a callback but the service never shut down"
        );
    });
}

// Guards: a timer callback may block on a sleep of its own service (a hand-rolled
// block_on inside the callback) while another worker is free: the sleep's own timer is
// run by the other worker, so nothing deadlocks and the inner sleep is never early.
#[test]
fn a_callback_blocking_on_a_sleep_is_served_by_the_other_worker() {
    within(SOON, || {
        let timers = common::service(); // 2 workers
        let (tx, rx) = mpsc::channel();
        let inner = timers.clone();
        timers
            .schedule(Duration::from_millis(2), move || {
                let begun = Instant::now();
                let outcome = block_on(inner.sleep(Duration::from_millis(20)), LOST_WAKEUP_BY_HAND);
                tx.send((outcome, begun.elapsed())).unwrap();
            })
            .unwrap();
        let (outcome, took) = rx
            .recv_timeout(SOON)
            .expect("the blocking callback finished");
        assert_eq!(outcome, Ok(()));
        assert!(
            took >= Duration::from_millis(20),
            "inner sleep took {took:?}"
        );
        let stats = timers.stats();
        assert_eq!(stats.panicked, 0);
        assert!(eventually(SOON, || timers.stats().fired == 2));
    });
}

// Guards: a Sleep's timer handed back by shutdown and then *run* by the caller
// (`Unfired::run`, documented as running the callback now) must not complete the Sleep
// with Ok(()) before its deadline: a Sleep is never early, it ends Ok at/after its
// deadline or with a TimerError.
#[test]
fn running_a_handed_back_sleep_timer_does_not_complete_it_early() {
    within(SOON, || {
        let timers = common::service();
        let delay = Duration::from_secs(60);
        let begun = Instant::now();
        let mut sleep = timers.sleep(delay);
        assert!(sleep_state(&mut sleep).is_pending());
        let unfired = timers.shutdown();
        assert_eq!(unfired.len(), 1);
        // A common shutdown policy: run what did not fire ("flush").
        for timer in unfired {
            timer.run();
        }
        let outcome = sleep_state(&mut sleep);
        let took = begun.elapsed();
        assert!(
            outcome != Poll::Ready(Ok(())) || took >= delay,
            "sleep({delay:?}) completed Ok(()) after {took:?}"
        );
        assert_ne!(outcome, Poll::Pending, "left hanging after its timer ended");
    });
}

// Guards: instants between ticks, on a tick and a nanosecond past one, reached by
// sleep_until, timeout_at and reset_at (of a pending sleep, rescheduled, and of a completed
// one, scheduled anew): while virtual time moves in steps smaller than a tick, none is
// ready before its instant, and each is ready at the first tick at or after it.
#[test]
fn instants_between_ticks_are_never_early_in_virtual_time() {
    within(SOON, || {
        let (timers, clock) = manual(2, 2);
        let tick = timers.config().tick;
        // Completed sleeps first, so that the time their zero sleeps take to complete is
        // spent before any instant is set.
        let mut completed: Vec<Sleep> = Vec::new();
        for _ in 0..7 {
            let mut sleep = timers.sleep(Duration::ZERO);
            if !ready_ok(&mut sleep) {
                clock.advance(tick);
                assert!(ready_ok(&mut sleep), "a zero sleep a tick later");
            }
            completed.push(sleep);
        }
        let start = clock.now();
        let nanos = |n: u64| Duration::from_nanos(n);
        let offsets = [
            nanos(0),
            nanos(1),
            tick - nanos(1),
            tick,
            tick + nanos(1),
            tick * 2 + tick / 2,
            tick * 5 - nanos(1),
        ];
        // Each waiter: a poll that says whether it completed (never with an error here).
        let mut waiters: Vec<(Instant, &str, Waiter)> = Vec::new();
        for (offset, mut again) in offsets.into_iter().zip(completed) {
            let at = start + offset;
            again.reset_at(at); // completed: a new timer
            waiters.push((
                at,
                "reset_at completed",
                Box::new(move || ready_ok(&mut again)),
            ));
            let mut sleep = timers.sleep_until(at);
            waiters.push((at, "sleep_until", Box::new(move || ready_ok(&mut sleep))));
            let mut timeout = timers.timeout_at(at, std::future::pending::<()>());
            let poll = move || match poll_fresh(&mut timeout).0 {
                Poll::Ready(outcome) => {
                    assert_eq!(outcome, Err(Elapsed::Deadline));
                    true
                }
                Poll::Pending => false,
            };
            waiters.push((at, "timeout_at", Box::new(poll)));
            let mut moved = timers.sleep(Duration::from_secs(3600));
            moved.reset_at(at);
            waiters.push((
                at,
                "reset_at pending",
                Box::new(move || ready_ok(&mut moved)),
            ));
        }
        let step = tick / 4;
        let end = start + tick * 6;
        while clock.now() < end {
            for (at, kind, poll) in &mut waiters {
                if poll() {
                    let now = clock.now();
                    assert!(
                        now >= *at,
                        "{kind} ready {:?} before its instant",
                        *at - now
                    );
                }
            }
            clock.advance(step);
        }
        for (at, kind, poll) in &mut waiters {
            assert!(poll(), "{kind} at {:?} never completed", *at - start);
        }
        drop(waiters);
        assert!(eventually(SOON, || timers.pending() == 0));
    });
}

/// A poll of one waiter of [`instants_between_ticks_are_never_early_in_virtual_time`]:
/// whether it completed.
type Waiter = Box<dyn FnMut() -> bool>;

/// Polls `sleep` with a fresh waker: `true` once it completed `Ok`; any error fails.
fn ready_ok(sleep: &mut Sleep) -> bool {
    match sleep_state(sleep) {
        Poll::Ready(outcome) => outcome.map(|()| true).unwrap(),
        Poll::Pending => false,
    }
}

// Guards: instants a century out, reached by sleep_until, timeout_at and reset_at (of a
// pending and of a completed sleep), are handed back by shutdown; whether the caller runs
// the handed-back timers or drops them, each future ends Abandoned (never Ok: its instant
// was not reached), its waker is woken, and it stays so at every later poll.
#[test]
fn far_instants_handed_back_at_shutdown_are_abandoned() {
    within(SOON, || {
        let timers = common::service();
        let far = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        let mut sleeps = vec![
            timers.sleep_until(far),
            timers.sleep(Duration::from_secs(60)),
        ];
        sleeps[1].reset_at(far); // pending: rescheduled
        let mut completed = timers.sleep(Duration::ZERO);
        block_on(&mut completed, LOST_WAKEUP_BY_HAND).unwrap();
        completed.reset_at(far); // completed: a new timer
        sleeps.push(completed);
        let mut timeout = timers.timeout_at(far, std::future::pending::<()>());
        let wakers: Vec<_> = sleeps.iter_mut().map(poll_fresh).collect();
        let (first, timeout_waker) = poll_fresh(&mut timeout);
        assert!(first.is_pending());
        for (state, _) in &wakers {
            assert!(state.is_pending(), "a century out, ready already");
        }
        let unfired = timers.shutdown();
        assert_eq!(unfired.len(), 4, "every far timer is handed back");
        for (n, timer) in unfired.into_iter().enumerate() {
            assert!(timer.deadline > Instant::now() + Duration::from_secs(3600));
            if n % 2 == 0 {
                timer.run(); // a "flush" policy: still not the instant
            } else {
                drop(timer);
            }
        }
        for (sleep, (_, waker)) in sleeps.iter_mut().zip(&wakers) {
            assert_eq!(waker.wakes(), 1, "the end woke the task");
            for _ in 0..2 {
                assert_eq!(sleep_state(sleep), Poll::Ready(Err(TimerError::Abandoned)));
            }
        }
        assert_eq!(timeout_waker.wakes(), 1);
        assert_eq!(
            poll_fresh(&mut timeout).0,
            Poll::Ready(Err(Elapsed::TimerFailed(TimerError::Abandoned)))
        );
    });
}

// Guards: reset_at to random instants (past ones included) racing the firing of the
// timer it moves, from four threads on the real clock with a fresh waker at every poll:
// every sleep completes Ok, never before the instant of its last reset.
#[test]
fn reset_at_racing_the_firing_is_never_early() {
    within(SOON * 6, || {
        let timers = common::service();
        on_four_threads(&timers, 0x2E5E7, |timers, rng| {
            for _ in 0..100 {
                let jitter = |rng: &mut SmallRng| Duration::from_micros(rng.random_range(0..3_000));
                let mut at = Instant::now() + jitter(rng);
                let mut sleep = timers.sleep_until(at);
                let _ = poll_fresh(&mut sleep);
                for _ in 0..rng.random_range(1..4) {
                    thread::sleep(jitter(rng));
                    // A third of the moves go to an instant already past.
                    at = if rng.random_ratio(1, 3) {
                        Instant::now() - jitter(rng)
                    } else {
                        Instant::now() + jitter(rng)
                    };
                    sleep.reset_at(at);
                }
                assert_eq!(block_on(&mut sleep, LOST_WAKEUP_BY_HAND), Ok(()));
                let now = Instant::now();
                assert!(now >= at, "ready {:?} before its instant", at - now);
            }
        });
        assert!(eventually(SOON, || timers.pending() == 0));
    });
}
