//! Hostile use of the async adapter (`TimerService::sleep` / `timeout`, feature `async`) and
//! randomised races of cancel / reschedule / schedule against shutdown, with exact end-of-life
//! accounting.
//!
//! The async tests drive the futures by hand (`std::task::Wake` + thread park, or a single
//! `poll` with a counting waker) rather than on a runtime, so that a lost wake-up, a stale
//! waker or an early completion shows instead of being papered over by a runtime's own
//! re-polling. Virtual time (`TimerService::with_manual_clock`) makes the timing ones exact.
//!
//! Every body that could hang runs under [`within`], which fails the test instead. Tests that
//! expose a bug are `#[ignore = "BUG: ..."]` so the suite stays green; run them with
//! `--ignored` to see them fail. The file needs no feature for the races; the adapter's tests
//! are gated on `async` (this file has no `[[test]]` entry, so it gates itself).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{within, SOON};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wheel_shard::{Config, ScheduleError, TimerId, TimerService};

#[cfg(feature = "async")]
mod adapter {
    use super::*;

    use std::future::Future;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::pin::{pin, Pin};
    use std::sync::mpsc;
    use std::task::{Context, Poll, Wake, Waker};
    use std::thread::{self, Thread};

    use common::{eventually, flag, manual};
    use wheel_shard::{Elapsed, Interval, ManualClock, Sleep, TimerError};

    /// Late enough to call a wake-up lost on a loaded 2-core machine.
    const LOST_WAKEUP: Duration = Duration::from_secs(3);

    /// A waker that counts its wakes and unparks the thread that made it.
    struct Unpark {
        thread: Thread,
        wakes: AtomicUsize,
    }

    impl Unpark {
        fn here() -> Arc<Unpark> {
            Arc::new(Unpark {
                thread: thread::current(),
                wakes: AtomicUsize::new(0),
            })
        }

        fn wakes(&self) -> usize {
            self.wakes.load(Ordering::SeqCst)
        }
    }

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
            self.thread.unpark();
        }
    }

    /// Polls `future` once with `waker`.
    fn poll_with<F: Future + Unpin>(future: &mut F, waker: &Arc<Unpark>) -> Poll<F::Output> {
        let waker = Waker::from(Arc::clone(waker));
        Pin::new(future).poll(&mut Context::from_waker(&waker))
    }

    /// Polls `future` once with a fresh counting waker of this thread; returns the waker too.
    fn poll_fresh<F: Future + Unpin>(future: &mut F) -> (Poll<F::Output>, Arc<Unpark>) {
        let waker = Unpark::here();
        (poll_with(future, &waker), waker)
    }

    /// A hand-rolled `block_on`: polls `future` with a *new* waker at every poll (so the
    /// future must swap its stored waker each time), parks until that waker is woken, and
    /// panics if no wake-up comes within `limit` of the start.
    fn block_on<F: Future>(future: F, limit: Duration) -> F::Output {
        let mut future = pin!(future);
        let start = Instant::now();
        loop {
            let signal = Unpark::here();
            let waker = Waker::from(Arc::clone(&signal));
            if let Poll::Ready(output) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
                return output;
            }
            while signal.wakes() == 0 {
                let Some(left) = limit.checked_sub(start.elapsed()) else {
                    panic!("block_on: no wake-up within {limit:?} (a lost wake-up)");
                };
                thread::park_timeout(left);
            }
        }
    }

    fn sleep_state(sleep: &mut Sleep) -> Poll<Result<(), TimerError>> {
        poll_fresh(sleep).0
    }

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
                    let outcome = block_on(sleep, LOST_WAKEUP);
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
                    let outcome = block_on(inner.sleep(Duration::from_millis(20)), LOST_WAKEUP);
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

    /// A future ready once virtual time reaches `at` (read at each poll).
    struct ReadyAt {
        clock: ManualClock,
        at: Instant,
    }

    impl Future for ReadyAt {
        type Output = &'static str;
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<&'static str> {
            if self.clock.now() >= self.at {
                Poll::Ready("inner")
            } else {
                Poll::Pending
            }
        }
    }

    // Guards: a Timeout whose future becomes ready in the very tick its deadline fires (a
    // sleep of the same delay, or a future ready at that instant) gives the future's output
    // (documented: the output wins when both are ready); a future two ticks late loses to the
    // deadline, which is not reported a tick early; all four timers fired, none cancelled.
    #[test]
    fn a_timeout_and_its_future_ready_at_the_same_tick() {
        within(SOON, || {
            let (timers, clock) = manual(2, 2);
            let tick = timers.config().tick;
            let deadline = Duration::from_millis(100);
            let start = clock.now();
            // The inner future is a sleep of the same service and the same delay: both
            // timers fire in the same advance.
            let mut same_sleep = timers.timeout(deadline, timers.sleep(deadline));
            // The inner future is ready exactly when the deadline's tick is reached.
            let mut same_tick = timers.timeout(
                deadline,
                ReadyAt {
                    clock: clock.clone(),
                    at: start + deadline,
                },
            );
            // The inner future is ready two ticks after the deadline.
            let mut late = timers.timeout(
                deadline,
                ReadyAt {
                    clock: clock.clone(),
                    at: start + deadline + tick * 2,
                },
            );
            for (name, pending) in [
                ("same_sleep", poll_fresh(&mut same_sleep).0.is_pending()),
                ("same_tick", poll_fresh(&mut same_tick).0.is_pending()),
                ("late", poll_fresh(&mut late).0.is_pending()),
            ] {
                assert!(pending, "{name} ready before time moved");
            }
            clock.advance(deadline - tick);
            assert!(
                poll_fresh(&mut late).0.is_pending(),
                "deadline a tick early"
            );
            // To the deadlines' tick, exactly: every timer of the test is due there.
            let at = clock.advance_to_next().expect("the deadlines are pending");
            assert!(at >= start + deadline);
            assert_eq!(clock.now(), at);
            assert_eq!(poll_fresh(&mut same_sleep).0, Poll::Ready(Ok(Ok(()))));
            assert_eq!(poll_fresh(&mut same_tick).0, Poll::Ready(Ok("inner")));
            assert_eq!(poll_fresh(&mut late).0, Poll::Ready(Err(Elapsed::Deadline)));
            drop((same_sleep, same_tick, late));
            // 2 for same_sleep, 1 each for same_tick and late: all fired, none cancelled.
            let stats = timers.stats();
            assert_eq!((stats.fired, stats.cancelled), (4, 0), "{stats:?}");
            assert_eq!(timers.pending(), 0);
            assert_eq!(clock.advance_to_next(), None);
        });
    }

    /// A future that panics at its `n`th poll (counting from 1); pending before.
    struct PanicsAt {
        n: usize,
        polls: usize,
    }

    impl Future for PanicsAt {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls += 1;
            if self.polls >= self.n {
                panic!("hostile inner future");
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    // Guards: a Timeout whose inner future panics (before and after its deadline fired)
    // unwinds to the poller only; dropping the Timeout afterwards cancels its timer or finds
    // it fired, the service goes on, and pending returns to 0.
    #[test]
    fn a_timeout_whose_future_panics_leaves_no_timer_behind() {
        within(SOON, || {
            let (timers, clock) = manual(1, 1);
            let mut early = timers.timeout(Duration::from_secs(5), PanicsAt { n: 2, polls: 0 });
            let mut late = timers.timeout(Duration::from_secs(5), PanicsAt { n: 2, polls: 0 });
            assert!(poll_fresh(&mut early).0.is_pending());
            assert!(poll_fresh(&mut late).0.is_pending());
            assert_eq!(timers.pending(), 2);
            let hit = catch_unwind(AssertUnwindSafe(|| poll_fresh(&mut early)));
            assert!(hit.is_err(), "the panic reaches the poller");
            // Polled again after its panic: it panics again, nothing else.
            let again = catch_unwind(AssertUnwindSafe(|| poll_fresh(&mut early)));
            assert!(again.is_err());
            drop(early);
            assert_eq!(
                timers.pending(),
                1,
                "the dropped timeout's timer was cancelled"
            );
            clock.advance(Duration::from_secs(5));
            let hit = catch_unwind(AssertUnwindSafe(|| poll_fresh(&mut late)));
            assert!(
                hit.is_err(),
                "the future is polled first, even after the deadline"
            );
            drop(late);
            let stats = timers.stats();
            assert_eq!((stats.fired, stats.cancelled, stats.panicked), (1, 1, 0));
            assert_eq!(timers.pending(), 0);
            // The service is unharmed.
            let mut after = timers.sleep(Duration::from_millis(1));
            assert!(poll_fresh(&mut after).0.is_pending());
            clock.advance(Duration::from_millis(1));
            assert_eq!(poll_fresh(&mut after).0, Poll::Ready(Ok(())));
        });
    }

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
                                let mut timeout = timers.timeout(
                                    Duration::from_secs(3600),
                                    std::future::pending::<()>(),
                                );
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
            block_on(&mut completed, LOST_WAKEUP).unwrap();
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
                while let Poll::Ready(outcome) =
                    interval.poll_tick(&mut Context::from_waker(&waker))
                {
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
                assert!(block_on(interval.tick(), LOST_WAKEUP).expect("ticking") >= 1);
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
                                match block_on(interval.tick(), LOST_WAKEUP) {
                                    Ok(n) => assert!(n >= 1),
                                    Err(error) => {
                                        assert!(matches!(
                                            error,
                                            TimerError::Abandoned
                                                | TimerError::Refused(ScheduleError::Shutdown)
                                        ));
                                        let again = block_on(interval.tick(), LOST_WAKEUP);
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

    // Guards: reset_at to random instants (past ones included) racing the firing of the
    // timer it moves, from four threads on the real clock with a fresh waker at every poll:
    // every sleep completes Ok, never before the instant of its last reset.
    #[test]
    fn reset_at_racing_the_firing_is_never_early() {
        within(SOON * 6, || {
            let timers = common::service();
            on_four_threads(&timers, 0x2E5E7, |timers, rng| {
                for _ in 0..100 {
                    let jitter =
                        |rng: &mut SmallRng| Duration::from_micros(rng.random_range(0..3_000));
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
                    assert_eq!(block_on(&mut sleep, LOST_WAKEUP), Ok(()));
                    let now = Instant::now();
                    assert!(now >= at, "ready {:?} before its instant", at - now);
                }
            });
            assert!(eventually(SOON, || timers.pending() == 0));
        });
    }

    /// Runs `body` on four threads at once, each with the service and random numbers of its
    /// own (seeded from `seed` and the thread's number), and returns once all have finished.
    fn on_four_threads(timers: &TimerService, seed: u64, body: fn(&TimerService, &mut SmallRng)) {
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let timers = timers.clone();
                thread::spawn(move || body(&timers, &mut SmallRng::seed_from_u64(seed + t)))
            })
            .collect();
        for t in threads {
            t.join().expect("a thread failed");
        }
    }
}

/// What the race tests know of each timer, by its number.
struct Ledger {
    base: Instant,
    repeating: Vec<AtomicBool>,
    runs: Vec<AtomicU64>,
    cancels: Vec<AtomicU8>,
    not_before: Vec<AtomicU64>,
    ids: Vec<Mutex<Option<TimerId>>>,
    early: AtomicUsize,
}

impl Ledger {
    fn new(timers: usize) -> Ledger {
        Ledger {
            base: Instant::now(),
            repeating: (0..timers).map(|_| AtomicBool::new(false)).collect(),
            runs: (0..timers).map(|_| AtomicU64::new(0)).collect(),
            cancels: (0..timers).map(|_| AtomicU8::new(0)).collect(),
            not_before: (0..timers).map(|_| AtomicU64::new(u64::MAX)).collect(),
            ids: (0..timers).map(|_| Mutex::new(None)).collect(),
            early: AtomicUsize::new(0),
        }
    }

    fn nanos(&self, at: Instant) -> u64 {
        at.duration_since(self.base).as_nanos() as u64
    }

    fn id(&self, n: usize) -> Option<TimerId> {
        *self.ids[n].lock().unwrap()
    }
}

/// A delay: a third fire soon, a third within 30 ms, a third in an hour.
fn random_delay(rng: &mut SmallRng) -> Duration {
    match rng.random_range(0..3) {
        0 => Duration::from_micros(rng.random_range(0..2_000)),
        1 => Duration::from_micros(rng.random_range(2_000..30_000)),
        _ => Duration::from_secs(3600 + rng.random_range(0..3600)),
    }
}

// Guards: producers (one-shot and repeating timers), meddlers (cancel and reschedule of
// random ids, several threads on the same id) and two concurrent shutdowns at a random
// moment, over several seeds: every accepted timer ends exactly once (ran / cancel true /
// handed back), none runs early, no cancel or reschedule succeeds after shutdown returned,
// and Stats add up exactly (pending 0).
#[test]
fn randomised_cancel_reschedule_and_schedule_racing_shutdown_end_each_timer_once() {
    within(SOON * 9, || {
        let mut refused_at_shutdown = 0;
        for seed in 0..6u64 {
            refused_at_shutdown += one_round_of_races(seed);
        }
        assert!(
            refused_at_shutdown > 0,
            "no producer was still scheduling at shutdown"
        );
    });
}

/// One round; how many producers were refused by the shutdown.
fn one_round_of_races(seed: u64) -> u64 {
    const PRODUCERS: usize = 3;
    const PER_PRODUCER: usize = 20_000;
    const TIMERS: usize = PRODUCERS * PER_PRODUCER;
    let timers = common::service_with(Config {
        saturation_timeout: Duration::from_secs(5),
        ..Config::default()
    });
    let ledger = Arc::new(Ledger::new(TIMERS));
    let shut = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (timers, ledger, refused) =
                (timers.clone(), Arc::clone(&ledger), Arc::clone(&refused));
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed << 8 | p as u64);
                for n in p * PER_PRODUCER..(p + 1) * PER_PRODUCER {
                    if n % 64 == 0 {
                        // Paced, so that the shutdown comes while they still schedule.
                        std::thread::sleep(Duration::from_micros(20));
                    }
                    let task_ledger = Arc::clone(&ledger);
                    let result = if rng.random_ratio(1, 10) {
                        ledger.repeating[n].store(true, Ordering::SeqCst);
                        let period = Duration::from_micros(rng.random_range(500..5_000));
                        timers.schedule_repeating(period, move || {
                            task_ledger.runs[n].fetch_add(1, Ordering::SeqCst);
                        })
                    } else {
                        let delay = random_delay(&mut rng);
                        let deadline = ledger.nanos(Instant::now() + delay);
                        ledger.not_before[n].fetch_min(deadline, Ordering::SeqCst);
                        timers.schedule(delay, move || {
                            let now = task_ledger.nanos(Instant::now());
                            if now < task_ledger.not_before[n].load(Ordering::SeqCst) {
                                task_ledger.early.fetch_add(1, Ordering::SeqCst);
                            }
                            task_ledger.runs[n].fetch_add(1, Ordering::SeqCst);
                        })
                    };
                    match result {
                        Ok(id) => *ledger.ids[n].lock().unwrap() = Some(id),
                        Err(ScheduleError::Shutdown) => {
                            refused.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        Err(other) => panic!("unexpected refusal {other:?}"),
                    }
                }
            })
        })
        .collect();

    let late_success = Arc::new(AtomicUsize::new(0));
    let meddlers: Vec<_> = (0..3u64)
        .map(|m| {
            let (timers, ledger, shut, late_success) = (
                timers.clone(),
                Arc::clone(&ledger),
                Arc::clone(&shut),
                Arc::clone(&late_success),
            );
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed << 8 | 0x80 | m);
                // Past the shutdown a while, to see every late call refused.
                let mut after = 2_000;
                while after > 0 {
                    let was_shut = shut.load(Ordering::SeqCst);
                    if was_shut {
                        after -= 1;
                    }
                    let n = rng.random_range(0..TIMERS);
                    let Some(id) = ledger.id(n) else {
                        continue;
                    };
                    let succeeded = if rng.random_bool(0.3) {
                        let cancelled = timers.cancel(id);
                        if cancelled {
                            ledger.cancels[n].fetch_add(1, Ordering::SeqCst);
                        }
                        cancelled
                    } else {
                        let delay = random_delay(&mut rng);
                        let deadline = ledger.nanos(Instant::now() + delay);
                        ledger.not_before[n].fetch_min(deadline, Ordering::SeqCst);
                        timers.reschedule(id, delay)
                    };
                    if succeeded && was_shut {
                        late_success.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();

    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5107);
    std::thread::sleep(Duration::from_millis(rng.random_range(5..40)));
    let shutters: Vec<_> = (0..2)
        .map(|_| {
            let timers = timers.clone();
            std::thread::spawn(move || timers.shutdown())
        })
        .collect();
    let unfired: Vec<_> = shutters
        .into_iter()
        .flat_map(|s| s.join().expect("a shutdown panicked"))
        .collect();
    shut.store(true, Ordering::SeqCst);
    for p in producers {
        p.join().expect("a producer failed");
    }
    for m in meddlers {
        m.join().expect("a meddler failed");
    }

    let by_id: HashMap<TimerId, usize> = (0..TIMERS)
        .filter_map(|n| ledger.id(n).map(|id| (id, n)))
        .collect();
    let accepted = by_id.len();
    let mut handed = vec![0u8; TIMERS];
    for timer in &unfired {
        let n = *by_id
            .get(&timer.id)
            .unwrap_or_else(|| panic!("seed {seed}: handed back an unknown id {:?}", timer.id));
        handed[n] += 1;
    }
    let mut runs_total = 0;
    let mut cancels_total = 0;
    for n in by_id.values().copied() {
        let runs = ledger.runs[n].load(Ordering::SeqCst);
        let cancels = u64::from(ledger.cancels[n].load(Ordering::SeqCst));
        let back = u64::from(handed[n]);
        runs_total += runs;
        cancels_total += cancels;
        if ledger.repeating[n].load(Ordering::SeqCst) {
            assert_eq!(
                cancels + back,
                1,
                "seed {seed}: repeating timer {n} ended {cancels} by cancel, {back} by hand-back ({runs} runs)"
            );
        } else {
            assert_eq!(
                runs + cancels + back,
                1,
                "seed {seed}: timer {n}: {runs} runs, {cancels} cancels, {back} hand-backs"
            );
        }
    }
    assert_eq!(
        ledger.early.load(Ordering::SeqCst),
        0,
        "seed {seed}: a timer ran early"
    );
    assert_eq!(
        late_success.load(Ordering::SeqCst),
        0,
        "seed {seed}: a live timer after shutdown"
    );
    let stats = timers.stats();
    assert_eq!(stats.scheduled, accepted as u64, "seed {seed}: {stats:?}");
    assert_eq!(stats.fired, runs_total, "seed {seed}");
    assert_eq!(stats.cancelled, cancels_total, "seed {seed}");
    assert_eq!(
        stats.rejected,
        refused.load(Ordering::SeqCst),
        "seed {seed}"
    );
    assert_eq!(stats.pending, 0, "seed {seed}");
    assert_eq!((stats.panicked, stats.strays), (0, 0), "seed {seed}");
    refused.load(Ordering::SeqCst)
}

/// Timers of a fresh service, `per_thread` for each of `threads` reschedulers.
fn far_timers(timers: &TimerService, threads: usize, per_thread: usize) -> Vec<Vec<TimerId>> {
    (0..threads)
        .map(|_| {
            (0..per_thread)
                .map(|_| timers.schedule(Duration::from_secs(7200), || {}).unwrap())
                .collect()
        })
        .collect()
}

/// One pass of reschedules over `ids`, alternately far and less far (so half the moves are
/// earlier); how many succeeded.
fn reschedule_pass(timers: &TimerService, ids: &[TimerId], rng: &mut SmallRng) -> usize {
    ids.iter()
        .filter(|&&id| {
            let secs = if rng.random_bool(0.5) { 3600 } else { 1800 };
            timers.reschedule(id, Duration::from_secs(secs + rng.random_range(0..600)))
        })
        .count()
}

// Guards: `shutdown` always returns (DESIGN: "may be called from any thread ... and always
// returns"), also while other threads keep moving timers earlier: it must not wait for the
// stream of reschedules to stop, and the notices they send must not pile up without bound.
#[test]
fn shutdown_returns_while_other_threads_keep_moving_timers_earlier() {
    within(SOON * 6, || {
        // More movers than cores, so the tick thread gets a small share of the CPU; a few
        // rounds, since how fast it drains the notices is up to the scheduler.
        const THREADS: usize = 8;
        const PER_THREAD: usize = 32;
        for round in 0..5u64 {
            let timers = common::service();
            let ids = far_timers(&timers, THREADS, PER_THREAD);
            let stop = Arc::new(AtomicBool::new(false));
            let movers: Vec<_> = ids
                .into_iter()
                .enumerate()
                .map(|(t, mine)| {
                    let (timers, stop) = (timers.clone(), Arc::clone(&stop));
                    std::thread::spawn(move || {
                        let mut rng = SmallRng::seed_from_u64(round << 8 | t as u64);
                        while !stop.load(Ordering::SeqCst) {
                            reschedule_pass(&timers, &mine, &mut rng);
                        }
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(20));
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            let shutter = {
                let timers = timers.clone();
                std::thread::spawn(move || {
                    let unfired = timers.shutdown();
                    let _ = done_tx.send(unfired.len());
                })
            };
            // Generous: an idle service shuts down in well under a millisecond.
            let returned = done_rx.recv_timeout(Duration::from_secs(3));
            // Release the shutdown either way (and bound the test's memory).
            stop.store(true, Ordering::SeqCst);
            for m in movers {
                m.join().expect("a mover failed");
            }
            let handed = match returned {
                Ok(handed) => handed,
                Err(_) => {
                    let late = done_rx.recv_timeout(SOON);
                    panic!(
                        "round {round}: shutdown had not returned 3 s after it was called, while \
                         {THREADS} threads kept rescheduling {} timers; once they stopped it \
                         returned {:?}",
                        THREADS * PER_THREAD,
                        late.map(|n| format!("{n} unfired")).map_err(|_| "never")
                    );
                }
            };
            shutter.join().expect("shutdown panicked");
            assert_eq!(handed, THREADS * PER_THREAD);
            assert_eq!(timers.pending(), 0);
        }
    });
}

// Guards: reschedules moving timers earlier and later from more threads than cores, racing a
// shutdown (each mover stops a bounded while after the shutdown began, see the test above):
// a reschedule-earlier's notice must not slip in after shutdown's last look at the notices,
// so every timer comes back exactly once, pending is 0 after shutdown, and no reschedule
// succeeds once shutdown returned.
#[test]
fn reschedules_racing_shutdown_lose_no_timer() {
    within(SOON * 9, || {
        const THREADS: usize = 8;
        const PER_THREAD: usize = 16;
        let give_up = Instant::now() + Duration::from_secs(20);
        let mut rounds = 0u64;
        while rounds < 200 && Instant::now() < give_up {
            rounds += 1;
            let timers = common::service();
            let ids = far_timers(&timers, THREADS, PER_THREAD);
            let go = Arc::new(std::sync::Barrier::new(THREADS + 1));
            let shutting = Arc::new(AtomicBool::new(false));
            let movers: Vec<_> = ids
                .into_iter()
                .enumerate()
                .map(|(t, mine)| {
                    let (timers, go, shutting) =
                        (timers.clone(), Arc::clone(&go), Arc::clone(&shutting));
                    std::thread::spawn(move || {
                        let mut rng = SmallRng::seed_from_u64(rounds << 8 | t as u64);
                        go.wait();
                        let mut after = 0;
                        // Until every timer is gone, or a bounded while into the shutdown.
                        while reschedule_pass(&timers, &mine, &mut rng) > 0 && after < 200 {
                            after += usize::from(shutting.load(Ordering::SeqCst));
                        }
                        mine
                    })
                })
                .collect();
            go.wait();
            std::thread::sleep(Duration::from_micros(rounds * 37 % 2_000));
            shutting.store(true, Ordering::SeqCst);
            let unfired = timers.shutdown();
            let mut alive = 0;
            for m in movers {
                let mine = m.join().expect("a mover failed");
                // Shutdown has returned: every timer ended, no reschedule may succeed.
                alive += mine
                    .iter()
                    .filter(|&&id| timers.reschedule(id, Duration::from_secs(1)))
                    .count();
            }
            let stats = timers.stats();
            assert_eq!(
                (unfired.len(), stats.pending, alive),
                (THREADS * PER_THREAD, 0, 0),
                "round {rounds}: (handed back, pending, still reschedulable) after shutdown: \
                 a rescheduled timer was lost by shutdown (scheduled {}, cancelled {}, \
                 strays {})",
                stats.scheduled,
                stats.cancelled,
                stats.strays
            );
        }
        println!("{rounds} rounds");
    });
}
