//! The async adapter (feature `async`): `TimerService::sleep`, `timeout` and `interval` (and their
//! `_until`/`_at` forms). Never early, many at once, cancelled when dropped, and a clear outcome
//! when the service cannot keep the timer.
//!
//! Two ways of driving the futures, side by side in each module: on a multi-thread tokio runtime
//! (`#[tokio::test]`), and by hand (`std::task::Wake` + thread park, or a single `poll` with a
//! counting waker) rather than on a runtime, so that a lost wake-up, a stale waker or an early
//! completion shows instead of being papered over by a runtime's own re-polling. Virtual time
//! (`TimerService::with_manual_clock`) makes the timing ones exact. Every body that could hang runs
//! under [`within`](crate::common::within), which fails the test instead.

mod interval;
mod refusal;
mod sleep;
mod timeout;

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::thread::Thread;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use wheel_shard::{Config, Sleep, TimerError, TimerService};

// ---- on a tokio runtime ----

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

// ---- by hand ----

/// Late enough to call a wake-up lost on a loaded 2-core machine.
const LOST_WAKEUP_BY_HAND: Duration = Duration::from_secs(3);

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
