//! `Timeout` (`timeout`, `timeout_at`): never before its deadline, the inner future's output when
//! it is in time (a ready future wins over a zero timeout, and over a deadline firing in the same
//! tick), and no timer left behind when the inner future panics.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wheel_shard::{Elapsed, ManualClock};

use super::*;
use crate::common::{manual, within, SOON};

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

// ---- by hand ----

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
