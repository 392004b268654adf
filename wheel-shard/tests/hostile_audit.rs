//! An audit of the service's contract under hostile use, beyond `hostile.rs`: refused tasks
//! whose `Drop` panics, `Unfired::run` that panics, shutdown from a callback with postponed
//! timers in the same batch, virtual time at the end of `u64` nanoseconds, `max_pending` under
//! racing producers, shutdowns racing producers, calls of every kind from callbacks and from a
//! task's `Drop`, configs at the edges of validation, and garbage in the environment.
//!
//! Every body that could hang runs under [`within`], which fails the test instead. Tests that
//! expose a bug are `#[ignore = "BUG: ..."]` so the suite stays green; run them with
//! `--ignored` to see them fail.

mod common;

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{eventually, flag, manual, single, within, PanicsOnDrop, SOON};
use wheel_shard::{limits, Config, ScheduleError, TimerId, TimerService};

/// A counter and a factory of one-shot tasks that bump it.
fn counter() -> (Arc<AtomicUsize>, impl Fn() -> Box<dyn FnOnce() + Send>) {
    let count = Arc::new(AtomicUsize::new(0));
    let make = {
        let count = Arc::clone(&count);
        move || -> Box<dyn FnOnce() + Send> {
            let count = Arc::clone(&count);
            Box::new(move || {
                count.fetch_add(1, Ordering::SeqCst);
            })
        }
    };
    (count, make)
}

// ---------------------------------------------------------------------------------------------
// Refused tasks whose Drop panics
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Unfired
// ---------------------------------------------------------------------------------------------

// Guards: ids handed back by shutdown are dead (cancel/reschedule false); an Unfired dropped
// instead of run drops its task unrun; a one-shot Unfired::run that panics unwinds into its
// caller (it runs on the caller's thread) and still drops what the task captured.
#[test]
fn handed_back_timers_are_dead_ids_and_run_or_drop_exactly_once() {
    let timers = single(Config::default());
    let (runs, make) = counter();
    let (run_dropped, run_flag) = flag();
    let (unrun_dropped, unrun_flag) = flag();
    let (panic_dropped, panic_flag) = flag();
    let to_run = {
        let task = make();
        timers
            .schedule(Duration::from_secs(60), move || {
                let _keep = &run_flag;
                task();
            })
            .unwrap()
    };
    let to_drop = {
        let task = make();
        timers
            .schedule(Duration::from_secs(60), move || {
                let _keep = &unrun_flag;
                task();
            })
            .unwrap()
    };
    let to_panic = timers
        .schedule(Duration::from_secs(60), move || {
            let _keep = &panic_flag;
            panic!("a failing handed-back run");
        })
        .unwrap();
    let mut unfired = timers.shutdown();
    assert_eq!(unfired.len(), 3);
    for id in [to_run, to_drop, to_panic] {
        assert!(
            !timers.cancel(id),
            "{id:?} was handed back: not the service's"
        );
        assert!(!timers.reschedule(id, Duration::ZERO));
    }
    let take = |unfired: &mut Vec<wheel_shard::Unfired>, id| {
        let at = unfired
            .iter()
            .position(|u| u.id == id)
            .expect("handed back");
        unfired.swap_remove(at)
    };
    take(&mut unfired, to_run).run();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(run_dropped.load(Ordering::SeqCst));
    drop(take(&mut unfired, to_drop));
    assert!(unrun_dropped.load(Ordering::SeqCst), "dropped unrun");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a dropped Unfired never runs"
    );
    let failing = take(&mut unfired, to_panic);
    assert!(catch_unwind(AssertUnwindSafe(|| failing.run())).is_err());
    assert!(panic_dropped.load(Ordering::SeqCst), "captures dropped");
    let stats = timers.stats();
    assert_eq!((stats.fired, stats.cancelled, stats.pending), (0, 0, 0));
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

// ---------------------------------------------------------------------------------------------
// Shutdown from callbacks and from a task's Drop
// ---------------------------------------------------------------------------------------------

// Guards: a callback that shuts the service down while timers of the same tick (postponed by
// `reschedule`) are already handed to its worker must not lose them: each is handed back or
// fires.
#[test]
fn shutdown_from_a_callback_keeps_postponed_timers_of_the_same_batch() {
    let report = within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let due = clock.now() + Duration::from_millis(10);
        let (tx, rx) = mpsc::channel();
        {
            let service = timers.clone();
            timers
                .schedule_at(due, move || {
                    let unfired = service.shutdown();
                    tx.send(unfired.iter().map(|u| u.id).collect::<Vec<_>>())
                        .unwrap();
                })
                .unwrap();
        }
        let (runs, make) = counter();
        let postponed: Vec<TimerId> = (0..4)
            .map(|_| timers.schedule_at(due, make()).unwrap())
            .collect();
        for &id in &postponed {
            assert!(timers.reschedule(id, Duration::from_secs(3600)));
        }
        let far = timers.schedule(Duration::from_secs(7200), || {}).unwrap();
        clock.advance(Duration::from_millis(10));
        let handed: HashSet<TimerId> = rx.recv_timeout(SOON).unwrap().into_iter().collect();
        assert!(timers.shutdown().is_empty(), "the callback's call did it");
        // Let the worker finish its batch.
        std::thread::sleep(Duration::from_millis(100));
        let lost: Vec<TimerId> = postponed
            .iter()
            .copied()
            .filter(|id| !handed.contains(id))
            .collect();
        let still_cancellable = lost.iter().filter(|&&id| timers.cancel(id)).count();
        (
            handed.contains(&far),
            lost.len(),
            still_cancellable,
            runs.load(Ordering::SeqCst),
        )
    });
    let (far_back, lost, still_cancellable, runs) = report;
    assert!(far_back, "the far timer is handed back");
    assert_eq!(runs, 0, "postponed an hour: none may run");
    assert_eq!(
        lost, 0,
        "{lost} postponed timers were neither handed back nor fired \
         ({still_cancellable} of them still cancellable after shutdown)"
    );
}

// Guards: shutdown called from a task's Drop on a worker (a repeating timer that cancels
// itself: its task is dropped there when the run returns) hands back every other timer once.
#[test]
fn shutdown_from_a_repeating_tasks_drop_on_a_worker_hands_back_the_rest() {
    struct ShutsDownOnDrop(TimerService, mpsc::Sender<usize>);
    impl Drop for ShutsDownOnDrop {
        fn drop(&mut self) {
            let _ = self.1.send(self.0.shutdown().len());
        }
    }
    let (handed, runs) = within(SOON, || {
        let (timers, clock) = manual(2, 2);
        for _ in 0..5 {
            timers.schedule(Duration::from_secs(3600), || {}).unwrap();
        }
        let (tx, rx) = mpsc::channel();
        let own: Arc<OnceLock<TimerId>> = Arc::new(OnceLock::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let own_cancel = Arc::new(AtomicBool::new(false));
        let on_drop = ShutsDownOnDrop(timers.clone(), tx);
        let id = {
            let (service, own, runs, own_cancel) = (
                timers.clone(),
                Arc::clone(&own),
                Arc::clone(&runs),
                Arc::clone(&own_cancel),
            );
            timers
                .schedule_repeating(Duration::from_millis(10), move || {
                    let _keep = &on_drop;
                    runs.fetch_add(1, Ordering::SeqCst);
                    let cancelled = service.cancel(*own.get().unwrap());
                    own_cancel.store(cancelled, Ordering::SeqCst);
                })
                .unwrap()
        };
        own.set(id).unwrap();
        clock.advance(Duration::from_millis(50));
        let handed = rx.recv_timeout(SOON).expect("the Drop's shutdown returned");
        assert!(
            own_cancel.load(Ordering::SeqCst),
            "cancel from its own run is true"
        );
        assert!(timers.shutdown().is_empty(), "done already");
        let stats = timers.stats();
        assert_eq!(stats.cancelled, 1);
        assert_eq!(stats.pending, 0);
        (handed, runs.load(Ordering::SeqCst))
    });
    assert_eq!(handed, 5, "the five far timers, once");
    assert_eq!(runs, 1, "cancelled during its first run: no second");
}

// Guards: a repeating task that holds the service's last handle and cancels itself drops
// that handle on its worker when its last run returns: the service stops (unfired tasks
// dropped) and nothing hangs.
#[test]
fn a_repeating_task_holding_the_last_handle_that_cancels_itself_stops_the_service() {
    let (far_dropped, far_flag) = flag();
    let (own_dropped, own_flag) = flag();
    let runs = Arc::new(AtomicUsize::new(0));
    {
        let runs = Arc::clone(&runs);
        within(SOON, move || {
            let timers = single(Config::default());
            timers
                .schedule(Duration::from_secs(3600), move || drop(far_flag))
                .unwrap();
            let own: Arc<OnceLock<TimerId>> = Arc::new(OnceLock::new());
            let id = {
                let (service, own) = (timers.clone(), Arc::clone(&own));
                timers
                    .schedule_repeating(Duration::from_millis(2), move || {
                        let _keep = &own_flag;
                        if runs.fetch_add(1, Ordering::SeqCst) + 1 >= 3 {
                            if let Some(&id) = own.get() {
                                assert!(service.cancel(id));
                            }
                        }
                    })
                    .unwrap()
            };
            own.set(id).unwrap();
            // The repeating task's handle is now the last one.
            drop(timers);
        });
    }
    assert!(
        eventually(SOON, || own_dropped.load(Ordering::SeqCst)),
        "the cancelled task was never dropped"
    );
    assert!(
        eventually(SOON, || far_dropped.load(Ordering::SeqCst)),
        "the service never stopped: its unfired task was not dropped"
    );
    let settled = runs.load(Ordering::SeqCst);
    assert!(settled >= 3);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(runs.load(Ordering::SeqCst), settled, "ran after its cancel");
}

// Guards: a shutdown from another thread while `ManualClock::advance` waits for a long
// callback: both return, and the pending timer is handed back.
#[test]
fn shutdown_during_an_advance_waiting_for_a_callback_returns() {
    within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let (started_tx, started) = mpsc::channel();
        timers
            .schedule(Duration::from_millis(10), move || {
                started_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(200));
            })
            .unwrap();
        let far = timers.schedule(Duration::from_secs(3600), || {}).unwrap();
        let advancing = {
            let clock = clock.clone();
            std::thread::spawn(move || clock.advance(Duration::from_millis(20)))
        };
        started.recv_timeout(SOON).unwrap();
        let unfired = timers.shutdown();
        assert_eq!(unfired.iter().map(|u| u.id).collect::<Vec<_>>(), [far]);
        advancing.join().unwrap();
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.pending), (1, 0));
    });
}

// ---------------------------------------------------------------------------------------------
// Calls from callbacks, repeating timers during their run
// ---------------------------------------------------------------------------------------------

// Guards: schedule, cancel, reschedule, stats, pending and advance_to_next called from a
// callback all work (no deadlock), and `advance` runs what they set up within the same call.
#[test]
fn every_call_from_a_callback_works_under_virtual_time() {
    within(SOON, || {
        let (timers, clock) = manual(2, 2);
        let start = clock.now();
        let ran_at = Arc::new(Mutex::new(Vec::<(&'static str, Duration)>::new()));
        let log = |name: &'static str| {
            let (ran_at, clock) = (Arc::clone(&ran_at), clock.clone());
            move || ran_at.lock().unwrap().push((name, clock.now() - start))
        };
        let (victim_dropped, victim_flag) = flag();
        let victim = timers
            .schedule(Duration::from_secs(3600), move || {
                let _keep = &victim_flag;
                panic!("a cancelled timer ran");
            })
            .unwrap();
        let moved = timers
            .schedule(Duration::from_secs(3600), log("moved"))
            .unwrap();
        let (tx, rx) = mpsc::channel();
        {
            let (service, clock2) = (timers.clone(), clock.clone());
            let scheduled = log("scheduled");
            let me = log("callback");
            timers
                .schedule(Duration::from_millis(10), move || {
                    me();
                    let cancelled = service.cancel(victim);
                    let again = service.cancel(victim);
                    let rescheduled = service.reschedule(moved, Duration::from_millis(5));
                    let new = service
                        .schedule(Duration::from_millis(3), scheduled)
                        .is_ok();
                    let stats = service.stats();
                    let next = clock2.advance_to_next();
                    tx.send((
                        cancelled,
                        again,
                        rescheduled,
                        new,
                        stats.scheduled,
                        stats.cancelled,
                        service.pending(),
                        next,
                    ))
                    .unwrap();
                })
                .unwrap();
        }
        clock.advance(Duration::from_millis(20));
        let (cancelled, again, rescheduled, new, scheduled, n_cancelled, pending, next) =
            rx.recv_timeout(SOON).unwrap();
        assert!(cancelled && !again, "cancel true once");
        assert!(rescheduled && new);
        assert_eq!(scheduled, 4, "victim, moved, callback, the new one");
        assert_eq!(n_cancelled, 1);
        assert_eq!(
            pending, 2,
            "moved and the new one (the running one-shot has ended)"
        );
        assert_eq!(next, None, "advance_to_next from a callback returns None");
        assert!(
            victim_dropped.load(Ordering::SeqCst),
            "the cancelled task was dropped"
        );
        let mut ran = ran_at.lock().unwrap().clone();
        ran.sort_by_key(|&(_, at)| at);
        assert_eq!(
            ran,
            [
                ("callback", Duration::from_millis(10)),
                ("scheduled", Duration::from_millis(13)),
                ("moved", Duration::from_millis(15)),
            ],
            "each ran within the same advance, at its own deadline"
        );
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.cancelled, stats.pending), (3, 1, 0));
        assert!(timers.shutdown().is_empty());
    });
}

// Guards: a repeating timer that reschedules itself during its run gets `true` and its next
// run moves there (documented: a back-off from inside the run); one that cancels itself gets
// `true` once, and then `false` for cancel and reschedule; it runs no more and is counted
// cancelled once.
#[test]
fn a_repeating_timer_rescheduling_and_cancelling_itself_during_its_run() {
    within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let own: Arc<OnceLock<TimerId>> = Arc::new(OnceLock::new());
        let answers = Arc::new(Mutex::new(Vec::new()));
        let runs = Arc::new(AtomicUsize::new(0));
        let id = {
            let (service, own, answers, runs) = (
                timers.clone(),
                Arc::clone(&own),
                Arc::clone(&answers),
                Arc::clone(&runs),
            );
            timers
                .schedule_repeating(Duration::from_millis(10), move || {
                    let id = *own.get().unwrap();
                    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    let mut answers = answers.lock().unwrap();
                    if run == 1 {
                        answers.push((
                            "reschedule",
                            service.reschedule(id, Duration::from_millis(30)),
                        ));
                    } else if run == 2 {
                        answers.push(("cancel", service.cancel(id)));
                        answers.push(("cancel again", service.cancel(id)));
                        answers.push(("reschedule after", service.reschedule(id, Duration::ZERO)));
                    }
                })
                .unwrap()
        };
        own.set(id).unwrap();
        clock.advance(Duration::from_millis(15));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        clock.advance(Duration::from_millis(24)); // 39 ms: the period's 20 and 30 passed
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "moved to 40 ms, not the period's 20"
        );
        clock.advance(Duration::from_millis(1));
        assert_eq!(runs.load(Ordering::SeqCst), 2, "at the moved deadline");
        clock.advance(Duration::from_millis(100));
        assert_eq!(runs.load(Ordering::SeqCst), 2, "cancelled during its run");
        assert_eq!(
            *answers.lock().unwrap(),
            [
                ("reschedule", true),
                ("cancel", true),
                ("cancel again", false),
                ("reschedule after", false),
            ]
        );
        assert!(!timers.cancel(id) && !timers.reschedule(id, Duration::ZERO));
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.cancelled, stats.pending), (2, 1, 0));
        assert!(timers.shutdown().is_empty());
    });
}

// ---------------------------------------------------------------------------------------------
// Extreme deadlines
// ---------------------------------------------------------------------------------------------

// Guards: reschedule to Duration::MAX makes a timer that never fires and comes back at
// shutdown; reschedule to zero fires it on the current tick, never before the reschedule.
#[test]
fn reschedule_to_duration_max_and_to_zero() {
    within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let (never_runs, make) = counter();
        let never = timers.schedule(Duration::from_millis(10), make()).unwrap();
        assert!(timers.reschedule(never, Duration::MAX));
        clock.advance(Duration::from_secs(24 * 3600));
        assert_eq!(never_runs.load(Ordering::SeqCst), 0);
        assert_eq!(timers.pending(), 1);

        let start = clock.now();
        let (tx, rx) = mpsc::channel();
        let now_id = {
            let clock = clock.clone();
            timers
                .schedule(Duration::from_secs(3600), move || {
                    tx.send(clock.now()).unwrap()
                })
                .unwrap()
        };
        clock.advance(Duration::from_millis(7));
        assert!(timers.reschedule(now_id, Duration::ZERO));
        clock.advance(Duration::ZERO);
        let fired_at = rx
            .recv_timeout(SOON)
            .expect("due at once after the reschedule");
        assert!(fired_at >= start + Duration::from_millis(7), "early");
        assert!(
            fired_at <= start + Duration::from_millis(8),
            "late: {:?}",
            fired_at - start
        );

        let unfired = timers.shutdown();
        assert_eq!(unfired.len(), 1);
        assert_eq!(unfired[0].id, never);
        assert!(unfired[0].deadline > clock.now() + Duration::from_secs(50 * 365 * 24 * 3600));
        assert_eq!(never_runs.load(Ordering::SeqCst), 0);
    });
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

// Guards: advance(Duration::MAX) walks to the end of virtual time and returns, firing what
// is reachable (1 s and 400 years out).
#[test]
fn advance_by_duration_max_fires_what_is_reachable_and_returns() {
    within(SOON, || {
        let (timers, clock) = manual(2, 1);
        let (runs, make) = counter();
        timers.schedule(Duration::from_secs(1), make()).unwrap();
        let centuries = Duration::from_secs(400 * 365 * 24 * 3600);
        timers.schedule(centuries, make()).unwrap();
        clock.advance(Duration::MAX);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(timers.stats().pending, 0);
        assert!(timers.shutdown().is_empty());
    });
}

// Guards: the documented "a timer with an unreachable deadline (Duration::MAX) is not counted
// as pending here": advance_to_next must return None and leave virtual time where it was.
#[test]
fn advance_to_next_with_only_a_duration_max_timer_returns_none() {
    let (next, moved) = within(Duration::from_secs(5), || {
        let (timers, clock) = manual(1, 1);
        let start = clock.now();
        timers.schedule(Duration::MAX, || {}).unwrap();
        let next = clock.advance_to_next();
        let moved = clock.now() - start;
        assert_eq!(timers.shutdown().len(), 1);
        (next, moved)
    });
    assert_eq!(next, None);
    assert_eq!(moved, Duration::ZERO, "time unchanged");
}

// Guards: advance(Duration::MAX) with a Duration::MAX timer pending must return.
#[test]
fn advance_by_duration_max_with_a_duration_max_timer_returns() {
    let handed = within(Duration::from_secs(5), || {
        let (timers, clock) = manual(1, 1);
        timers.schedule(Duration::MAX, || {}).unwrap();
        clock.advance(Duration::MAX);
        timers.shutdown().len()
    });
    assert_eq!(handed, 1);
}

// Guards: advance_to_next with a timer due in the last tick before u64::MAX nanoseconds
// (a delay just short of Duration's u64-nanosecond range) must return, not spin forever.
#[test]
fn advance_to_next_with_a_deadline_in_the_last_tick_of_virtual_time_returns() {
    let (next, runs, handed) = within(Duration::from_secs(5), || {
        let (timers, clock) = manual(1, 1);
        let (runs, make) = counter();
        timers
            .schedule(Duration::from_nanos(u64::MAX - 1), make())
            .unwrap();
        let next = clock.advance_to_next();
        let handed = timers.shutdown().len();
        (next, runs.load(Ordering::SeqCst), handed)
    });
    assert_eq!(
        next, None,
        "a tick past the last virtual nanosecond is unreachable"
    );
    assert_eq!((runs, handed), (0, 1), "handed back, exactly once");
}

// Guards: "twin" references (a timer moved earlier by a multiple of 256 ticks, a slot reused
// for the same tick after a cancel) never fire a timer early nor twice.
#[test]
fn twin_references_fire_once_and_never_early() {
    within(SOON, || {
        let (timers, clock) = manual(1, 1);
        let start = clock.now();
        let fired = Arc::new(Mutex::new(Vec::<(u32, Duration)>::new()));
        let task = |n: u32| {
            let (fired, clock) = (Arc::clone(&fired), clock.clone());
            move || fired.lock().unwrap().push((n, clock.now() - start))
        };
        // 600 and 344 ticks share their low 8 bits.
        let a = timers
            .schedule(Duration::from_millis(600), task(1))
            .unwrap();
        assert!(timers.reschedule(a, Duration::from_millis(344)));
        // Postponed by exactly 256 ticks: its one reference keeps its ticket.
        let b = timers
            .schedule(Duration::from_millis(100), task(2))
            .unwrap();
        assert!(timers.reschedule(b, Duration::from_millis(356)));
        // Cancelled, then (likely) the same slot armed again for the same tick.
        for _ in 0..8 {
            let c = timers
                .schedule(Duration::from_millis(50), task(99))
                .unwrap();
            assert!(timers.cancel(c));
        }
        timers.schedule(Duration::from_millis(50), task(3)).unwrap();
        clock.advance(Duration::from_millis(343));
        assert_eq!(
            fired
                .lock()
                .unwrap()
                .iter()
                .map(|&(n, _)| n)
                .collect::<Vec<_>>(),
            [3]
        );
        clock.advance(Duration::from_secs(2));
        let mut all = fired.lock().unwrap().clone();
        all.sort();
        assert_eq!(
            all,
            [
                (1, Duration::from_millis(344)),
                (2, Duration::from_millis(356)),
                (3, Duration::from_millis(50)),
            ]
        );
        let stats = timers.stats();
        assert_eq!((stats.fired, stats.cancelled, stats.strays), (3, 8, 0));
        assert!(timers.shutdown().is_empty());
    });
}

// ---------------------------------------------------------------------------------------------
// Ids from elsewhere
// ---------------------------------------------------------------------------------------------

// Guards: ids of a service that was dropped are unknown to a service started after it, even
// though the new one hands out the same shard, slot and generation.
#[test]
fn ids_of_a_dropped_service_are_unknown_to_its_successor() {
    let old = single(Config::default());
    let stale: Vec<TimerId> = (0..3)
        .map(|_| old.schedule(Duration::from_secs(60), || {}).unwrap())
        .collect();
    drop(old);
    let new = single(Config::default());
    let (runs, make) = counter();
    let live: Vec<TimerId> = (0..3)
        .map(|_| new.schedule(Duration::from_millis(30), make()).unwrap())
        .collect();
    for (&stale, &live) in stale.iter().zip(&live) {
        assert_eq!(stale.shard(), live.shard());
        assert_ne!(stale, live);
        assert!(
            !new.cancel(stale),
            "a dead service's id cancelled a live timer"
        );
        assert!(!new.reschedule(stale, Duration::from_secs(3600)));
    }
    assert!(eventually(SOON, || runs.load(Ordering::SeqCst) == 3));
    let stats = new.stats();
    assert_eq!((stats.fired, stats.cancelled), (3, 0));
}

// ---------------------------------------------------------------------------------------------
// Races
// ---------------------------------------------------------------------------------------------

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

// Guards: shutdowns from several threads while producers keep scheduling: every accepted
// timer is handed back exactly once (none lost, none twice), every refusal is typed, and
// every producer ends with `Shutdown`, at the latest on its first call begun after every
// shutdown had returned.
#[test]
fn concurrent_shutdowns_while_producers_schedule_lose_nothing() {
    within(SOON * 3, || {
        let timers = common::service();
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..3)
            .map(|_| {
                let (timers, stop) = (timers.clone(), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut ids = Vec::new();
                    let mut saturated = 0usize;
                    // A valve on memory should the shutdown never come.
                    for _ in 0..5_000_000 {
                        // Read before the call: a call that began before every shutdown had
                        // returned may still be accepted; one that began after must not be.
                        let after_shutdown = stop.load(Ordering::Acquire);
                        match timers.schedule(Duration::from_secs(3600), || {}) {
                            Ok(id) => ids.push(id),
                            Err(ScheduleError::Saturated) => saturated += 1,
                            Err(ScheduleError::Shutdown) => return (ids, saturated, true),
                            Err(other) => panic!("unexpected refusal {other:?}"),
                        }
                        if after_shutdown {
                            break;
                        }
                    }
                    (ids, saturated, false)
                })
            })
            .collect();
        assert!(
            eventually(SOON, || timers.stats().scheduled >= 20_000),
            "the producers got going"
        );
        let shutters: Vec<_> = (0..3)
            .map(|_| {
                let timers = timers.clone();
                std::thread::spawn(move || timers.shutdown())
            })
            .collect();
        let handed: Vec<TimerId> = shutters
            .into_iter()
            .flat_map(|s| s.join().unwrap())
            .map(|u| u.id)
            .collect();
        // Release: a producer that reads it also sees the service shut down.
        stop.store(true, Ordering::Release);
        let mut accepted = Vec::new();
        let mut saw_shutdown = 0;
        for producer in producers {
            let (ids, _saturated, ended_by_shutdown) = producer.join().unwrap();
            accepted.extend(ids);
            saw_shutdown += usize::from(ended_by_shutdown);
        }
        assert_eq!(saw_shutdown, 3, "every producer was told Shutdown");
        let handed_set: HashSet<TimerId> = handed.iter().copied().collect();
        assert_eq!(handed_set.len(), handed.len(), "a timer handed back twice");
        let accepted_set: HashSet<TimerId> = accepted.iter().copied().collect();
        assert_eq!(accepted_set.len(), accepted.len(), "an id handed out twice");
        let lost = accepted_set.difference(&handed_set).count();
        let unknown = handed_set.difference(&accepted_set).count();
        assert_eq!((lost, unknown), (0, 0), "accepted {}", accepted.len());
        let stats = timers.stats();
        assert_eq!(stats.scheduled, accepted.len() as u64);
        assert_eq!((stats.fired, stats.pending), (0, 0));
    });
}

// ---------------------------------------------------------------------------------------------
// Configs
// ---------------------------------------------------------------------------------------------

// Guards: garbage in every WHEEL_* variable is a typed error naming that field (or a valid
// value), never a panic; and `max_pending = usize::MAX` from the environment works.
#[test]
fn garbage_in_every_environment_variable_is_a_typed_error() {
    let garbage = [
        "",
        " ",
        "-1",
        "1e3",
        "0x10",
        "1.5",
        "99999999999999999999999999999",
        "18446744073709551616",
        "１２",
        "NaN",
        "inf",
        "\u{0}",
        "-5ms",
        "18446744073709551616s",
        "99999999999999999999h",
        "1 parsec",
        "true false",
        "__",
        "1_000_000_000_000_000_000_000",
    ];
    for field in limits::FIELDS {
        let var = field.env_var();
        for value in garbage {
            let result = catch_unwind(|| {
                Config::default().with_vars(|name| (name == var).then(|| value.to_string()))
            });
            let result = result.unwrap_or_else(|_| panic!("{var}={value:?} panicked"));
            match result {
                Ok(config) => assert!(config.validate().is_ok(), "{var}={value:?}"),
                Err(error) => {
                    assert_eq!(
                        error.field(),
                        Some(field.name()),
                        "{var}={value:?}: {error}"
                    )
                }
            }
        }
    }
    let most = limits::MAX_COUNT;
    let config = Config::default()
        .with_vars(|name| (name == "WHEEL_MAX_PENDING").then(|| most.to_string()))
        .unwrap();
    assert_eq!(config.max_pending, Some(most));
    let timers = common::service_with(config);
    let id = timers.schedule(Duration::from_secs(60), || {}).unwrap();
    assert!(timers.cancel(id));
    assert!(timers.schedule(Duration::from_secs(60), || {}).is_ok());
    assert_eq!(timers.shutdown().len(), 1);
}

// Guards: a config at the edge of every range that validation accepts (one slot per level,
// the shortest tick, the smallest ring, one command a tick, a 1 us slow-callback mark) runs:
// every timer fires exactly once, never early, and the far ones come back at shutdown.
#[test]
fn a_config_at_the_edges_of_validation_loses_nothing() {
    within(SOON * 3, || {
        let timers = TimerService::new(Config {
            shards: 1,
            tick_threads: Some(1),
            tick: limits::MIN_TICK,
            wheel_slots: 1,
            executor_threads: 1,
            transfer_batch: 1,
            ring_capacity: limits::MIN_RING_CAPACITY,
            saturation_timeout: Duration::from_secs(5),
            slow_callback: Duration::from_micros(1),
            max_pending: Some(1000),
            pin_threads: false,
            ..Config::default()
        })
        .expect("a valid config starts");
        let (tx, rx) = mpsc::channel();
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for n in 0..300u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let delay = Duration::from_micros(seed % 30_000);
            let tx = tx.clone();
            let asked = Instant::now();
            timers
                .schedule(delay, move || {
                    tx.send((n, asked.elapsed() >= delay)).unwrap()
                })
                .expect("room within the saturation timeout");
        }
        let far: HashSet<TimerId> = (0..5)
            .map(|_| timers.schedule(Duration::from_secs(3600), || {}).unwrap())
            .collect();
        let mut seen = HashSet::new();
        for _ in 0..300 {
            let (n, on_time) = rx.recv_timeout(SOON).expect("every timer fires");
            assert!(on_time, "timer {n} fired early");
            assert!(seen.insert(n), "timer {n} fired twice");
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(rx.try_recv().is_err(), "a timer fired twice");
        let handed: HashSet<TimerId> = timers.shutdown().into_iter().map(|u| u.id).collect();
        assert_eq!(handed, far);
        let stats = timers.stats();
        assert_eq!((stats.scheduled, stats.fired, stats.pending), (305, 300, 0));
    });
}

// Guards: the longest tick (1 h) rounds a short delay up, never down: a 1 ms timer does not
// fire within a moment, and comes back at shutdown.
#[test]
fn the_longest_tick_never_fires_a_short_delay_early() {
    let timers = single(Config {
        tick: limits::MAX_TICK,
        wheel_slots: limits::MAX_WHEEL_SLOTS,
        ..Config::default()
    });
    let (runs, make) = counter();
    let id = timers.schedule(Duration::from_millis(1), make()).unwrap();
    let asked = Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    let unfired = timers.shutdown();
    let ran = runs.load(Ordering::SeqCst);
    if ran == 1 {
        // Only legal if the hour-long tick boundary happened to fall in between.
        assert!(asked.elapsed() >= Duration::from_millis(1));
        assert!(unfired.is_empty());
    } else {
        assert_eq!(unfired.iter().map(|u| u.id).collect::<Vec<_>>(), [id]);
        assert!(unfired[0].deadline >= asked + Duration::from_millis(1));
    }
}
