//! Containment of user code that panics: in a callback, in the `Drop` of a task (cancelled,
//! refused by a full ring, by `max_pending` or after shutdown, ended, or handed back when the last
//! handle goes), in a panic payload's `Drop`, and in `Unfired::run`. Each panic is caught and
//! counted; no worker dies and no closure leaks.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use wheel_shard::{Config, ScheduleError, TimerId, TimerService};

use crate::common;
use crate::common::{eventually, flag, manual, service, single, within, PanicsOnDrop, SOON};

fn fires_soon(timers: &TimerService) -> bool {
    let (tx, rx) = mpsc::channel();
    timers
        .schedule(Duration::from_millis(1), move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(SOON).is_ok()
}

#[test]
fn a_panicking_callback_is_counted_and_the_service_goes_on() {
    let timers = service();
    timers
        .schedule(Duration::from_millis(1), || panic!("boom"))
        .unwrap();
    let (tx, rx) = mpsc::channel();
    timers
        .schedule(Duration::from_millis(5), move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(SOON).unwrap();
    assert!(eventually(SOON, || timers.stats().panicked == 1));
    let runs = Arc::new(AtomicUsize::new(0));
    {
        let runs = Arc::clone(&runs);
        timers
            .schedule_repeating(Duration::from_millis(2), move || {
                runs.fetch_add(1, Ordering::SeqCst);
                panic!("repeating boom");
            })
            .unwrap();
    }
    assert!(eventually(SOON, || timers.stats().panicked == 2));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a panic ends a repeating timer"
    );
}

#[test]
fn a_cancelled_task_whose_drop_panics_is_contained() {
    let timers = single(Config::default());
    let bomb = PanicsOnDrop;
    let id = timers
        .schedule(Duration::from_secs(60), move || drop(bomb))
        .unwrap();
    let kept = timers.schedule(Duration::from_secs(60), || {}).unwrap();
    assert!(timers.cancel(id));
    assert!(eventually(SOON, || timers.stats().drop_panics == 1));
    assert!(fires_soon(&timers), "the shard's tick thread still runs");
    let unfired = timers.shutdown();
    assert_eq!(unfired.len(), 1, "and hands back what it holds");
    assert_eq!(unfired[0].id, kept);
    assert_eq!(timers.stats().cancelled, 1);
}

// Guards: a task refused because its shard's ring is full is dropped inside the service, its
// panicking Drop contained and counted (the reference behaviour for the two tests below).
#[test]
fn a_task_refused_by_a_full_ring_whose_drop_panics_is_contained() {
    let timers = common::service_with_a_full_ring(Duration::from_secs(3600), Duration::ZERO);
    let bomb = PanicsOnDrop;
    let result = catch_unwind(AssertUnwindSafe(|| {
        timers.try_schedule(Duration::from_secs(60), move || drop(bomb))
    }));
    assert_eq!(
        result.expect("the refusal panicked"),
        Err(ScheduleError::Saturated)
    );
    let stats = timers.stats();
    assert_eq!(stats.drop_panics, 1, "the panicking drop is counted");
    assert_eq!(stats.rejected, 1);
    assert_eq!(timers.shutdown().len(), 3, "the ring's three timers");
}

// Guards: `schedule` after `shutdown` with a task whose Drop panics must say `Shutdown`, not
// unwind out of `schedule` (the task is dropped by the service, as for a full ring).
#[test]
fn a_task_refused_after_shutdown_whose_drop_panics_is_contained() {
    let timers = single(Config::default());
    assert!(timers.shutdown().is_empty());
    let bomb = PanicsOnDrop;
    let result = catch_unwind(AssertUnwindSafe(|| {
        timers.schedule(Duration::from_secs(60), move || drop(bomb))
    }));
    assert_eq!(
        result.expect("the panic of the refused task's Drop escaped schedule()"),
        Err(ScheduleError::Shutdown)
    );
    let stats = timers.stats();
    assert_eq!(stats.drop_panics, 1, "counted like any contained drop");
    assert_eq!(stats.rejected, 1, "the refusal is counted");
}

// Guards: `schedule` over `max_pending` with a task whose Drop panics must say
// `TooManyPending`, not unwind out of `schedule`.
#[test]
fn a_task_refused_by_max_pending_whose_drop_panics_is_contained() {
    let timers = single(Config {
        max_pending: Some(1),
        ..Config::default()
    });
    let kept = timers.schedule(Duration::from_secs(60), || {}).unwrap();
    let bomb = PanicsOnDrop;
    let result = catch_unwind(AssertUnwindSafe(|| {
        timers.schedule(Duration::from_secs(60), move || drop(bomb))
    }));
    assert_eq!(
        result.expect("the panic of the refused task's Drop escaped schedule()"),
        Err(ScheduleError::TooManyPending { limit: 1 })
    );
    let stats = timers.stats();
    assert_eq!(stats.drop_panics, 1);
    assert_eq!(stats.rejected, 1);
    let unfired = timers.shutdown();
    assert_eq!(unfired.len(), 1);
    assert_eq!(unfired[0].id, kept);
}

#[test]
fn a_panic_payload_whose_drop_panics_does_not_kill_the_worker() {
    let timers = single(Config::default());
    timers
        .schedule(Duration::ZERO, || std::panic::panic_any(PanicsOnDrop))
        .unwrap();
    assert!(eventually(SOON, || timers.stats().drop_panics == 1));
    assert!(fires_soon(&timers), "the only worker still runs callbacks");
    let stats = timers.stats();
    assert_eq!(stats.panicked, 1);
    assert!(timers.shutdown().is_empty());
}

#[test]
fn a_repeating_task_whose_drop_panics_when_it_ends_does_not_kill_the_worker() {
    let timers = single(Config::default());
    // Ended by a cancel from its own run.
    let own_id = Arc::new(std::sync::Mutex::new(None::<TimerId>));
    let bomb = PanicsOnDrop;
    {
        let (service, slot) = (timers.clone(), Arc::clone(&own_id));
        let id = timers
            .schedule_repeating(Duration::from_millis(2), move || {
                let _keep = &bomb;
                if let Some(id) = *slot.lock().unwrap() {
                    service.cancel(id);
                }
            })
            .unwrap();
        *own_id.lock().unwrap() = Some(id);
    }
    assert!(eventually(SOON, || timers.stats().drop_panics == 1));
    assert!(fires_soon(&timers), "the only worker still runs callbacks");
    // Ended by a panicking run.
    let bomb = PanicsOnDrop;
    timers
        .schedule_repeating(Duration::from_millis(2), move || {
            let _keep = &bomb;
            panic!("a failing run");
        })
        .unwrap();
    assert!(eventually(SOON, || timers.stats().drop_panics == 2));
    assert!(fires_soon(&timers), "the only worker still runs callbacks");
    assert_eq!(timers.stats().panicked, 1);
    assert!(timers.shutdown().is_empty());
}

// Guards: `Unfired::run` of a handed-back repeating timer whose run panics must not leak the
// closure (what it holds, such as a service handle, would never be released).
#[test]
fn a_handed_back_repeating_timer_whose_run_panics_drops_its_closure() {
    let (timers, _clock) = manual(1, 1);
    let (dropped, keep) = flag();
    timers
        .schedule_repeating(Duration::from_secs(3600), move || {
            let _keep = &keep;
            panic!("a failing handed-back run");
        })
        .unwrap();
    let mut unfired = timers.shutdown();
    assert_eq!(unfired.len(), 1);
    let timer = unfired.pop().unwrap();
    assert!(catch_unwind(AssertUnwindSafe(|| timer.run())).is_err());
    assert!(
        dropped.load(Ordering::SeqCst),
        "the repeating closure was leaked by the panicking run"
    );
}

#[test]
fn unfired_tasks_whose_drop_panics_are_contained_when_the_last_handle_goes() {
    let timers = single(Config::default());
    for _ in 0..3 {
        let bomb = PanicsOnDrop;
        timers
            .schedule(Duration::from_secs(60), move || drop(bomb))
            .unwrap();
    }
    let other = timers.clone();
    // The last handle going drops the three unrun; their panics stay inside the service.
    within(SOON, move || {
        drop(other);
        drop(timers);
    });
}
