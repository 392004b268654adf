//! Many producers, random cancels and reschedules from other threads, a million timers: every
//! timer ends exactly once (fired, cancelled, or handed back), none runs twice, none runs early.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wheel_shard::{Config, TimerId, TimerService};

use crate::common;

const PRODUCERS: usize = 4;

const PER_PRODUCER: usize = 250_000;

const TIMERS: usize = PRODUCERS * PER_PRODUCER;

const MAX_DELAY_MS: u64 = 300;

/// What the test knows of each timer, indexed by the timer's number.
struct Ledger {
    base: Instant,
    /// Runs of each timer's task.
    runs: Vec<AtomicU8>,
    /// The earliest deadline ever requested for the timer (ns since `base`): it may never run
    /// before that, whichever reschedule won.
    not_before: Vec<AtomicU64>,
    early: AtomicUsize,
    ids: Vec<Mutex<Option<TimerId>>>,
    cancelled: AtomicUsize,
}

impl Ledger {
    fn nanos(&self, at: Instant) -> u64 {
        at.duration_since(self.base).as_nanos() as u64
    }
}

/// Two shards driven by one tick thread (the default: one per four shards).
#[test]
fn a_million_timers_from_four_producers_each_end_exactly_once() {
    every_timer_ends_exactly_once(Config {
        shards: 2,
        ..Config::default()
    });
}

/// Three shards, two tick threads: one drives two shards, the other one.
#[test]
fn with_tick_threads_driving_unequal_shares_every_timer_ends_exactly_once() {
    every_timer_ends_exactly_once(Config {
        shards: 3,
        tick_threads: Some(2),
        ..Config::default()
    });
}

fn every_timer_ends_exactly_once(config: Config) {
    let timers = TimerService::new(Config {
        executor_threads: 2,
        pin_threads: false,
        // This test is about every timer ending once, not about saturation: four producers on
        // a 2-core machine can starve the tick threads for longer than the default 100 ms
        // (an unoptimised build, or a busy machine), so a full ring waits long enough here.
        saturation_timeout: Duration::from_secs(10),
        ..config
    })
    .unwrap();
    let ledger = Arc::new(Ledger {
        base: Instant::now(),
        runs: (0..TIMERS).map(|_| AtomicU8::new(0)).collect(),
        not_before: (0..TIMERS).map(|_| AtomicU64::new(u64::MAX)).collect(),
        early: AtomicUsize::new(0),
        ids: (0..TIMERS).map(|_| Mutex::new(None)).collect(),
        cancelled: AtomicUsize::new(0),
    });
    let producing = Arc::new(AtomicBool::new(true));

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (timers, ledger) = (timers.clone(), Arc::clone(&ledger));
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(p as u64);
                for n in p * PER_PRODUCER..(p + 1) * PER_PRODUCER {
                    let delay = Duration::from_micros(rng.random_range(0..MAX_DELAY_MS * 1000));
                    let deadline = ledger.nanos(Instant::now() + delay);
                    ledger.not_before[n].fetch_min(deadline, Ordering::SeqCst);
                    let task_ledger = Arc::clone(&ledger);
                    let id = timers
                        .schedule(delay, move || {
                            let now = task_ledger.nanos(Instant::now());
                            if now < task_ledger.not_before[n].load(Ordering::SeqCst) {
                                task_ledger.early.fetch_add(1, Ordering::SeqCst);
                            }
                            task_ledger.runs[n].fetch_add(1, Ordering::SeqCst);
                        })
                        .expect("default config absorbs the burst");
                    *ledger.ids[n].lock().unwrap() = Some(id);
                }
            })
        })
        .collect();

    let meddlers: Vec<_> = (0..2u64)
        .map(|m| {
            let (timers, ledger, producing) =
                (timers.clone(), Arc::clone(&ledger), Arc::clone(&producing));
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(100 + m);
                while producing.load(Ordering::SeqCst) {
                    let n = rng.random_range(0..TIMERS);
                    let Some(id) = *ledger.ids[n].lock().unwrap() else {
                        continue;
                    };
                    if rng.random_bool(0.5) {
                        if timers.cancel(id) {
                            ledger.cancelled.fetch_add(1, Ordering::SeqCst);
                        }
                    } else {
                        let delay = Duration::from_micros(rng.random_range(0..MAX_DELAY_MS * 1000));
                        let deadline = ledger.nanos(Instant::now() + delay);
                        ledger.not_before[n].fetch_min(deadline, Ordering::SeqCst);
                        timers.reschedule(id, delay);
                    }
                }
            })
        })
        .collect();

    for producer in producers {
        producer.join().unwrap();
    }
    producing.store(false, Ordering::SeqCst);
    for meddler in meddlers {
        meddler.join().unwrap();
    }
    // Every deadline is at most MAX_DELAY_MS after the last schedule or reschedule.
    let all_due = Instant::now() + Duration::from_millis(MAX_DELAY_MS);
    assert!(
        common::eventually(Duration::from_secs(60), || {
            Instant::now() > all_due
                && timers.stats().fired + ledger.cancelled.load(Ordering::SeqCst) as u64
                    == TIMERS as u64
        }),
        "not every timer ended: {:?}",
        timers.stats()
    );
    let unfired = timers.shutdown();
    let stats = timers.stats();

    let ran_once = ledger
        .runs
        .iter()
        .filter(|r| r.load(Ordering::SeqCst) == 1)
        .count();
    let ran_twice = ledger
        .runs
        .iter()
        .filter(|r| r.load(Ordering::SeqCst) > 1)
        .count();
    let cancelled = ledger.cancelled.load(Ordering::SeqCst);
    assert_eq!(ran_twice, 0, "a task ran twice");
    assert_eq!(
        ledger.early.load(Ordering::SeqCst),
        0,
        "a task ran before its deadline"
    );
    assert_eq!(
        ran_once + cancelled + unfired.len(),
        TIMERS,
        "every timer ended exactly once"
    );
    assert_eq!(stats.scheduled, TIMERS as u64);
    assert_eq!(stats.fired, ran_once as u64);
    assert_eq!(stats.cancelled, cancelled as u64);
    assert_eq!(stats.rejected, 0);
    assert_eq!(stats.pending, 0);
    assert!(cancelled > 0, "the meddlers cancelled something");
}

/// What the test knows of one repeating timer.
#[derive(Default)]
struct Repeating {
    id: Mutex<Option<TimerId>>,
    /// A run is in progress (a second one at once would be a bug).
    running: AtomicBool,
    overlaps: AtomicUsize,
    runs: AtomicUsize,
    /// Set once a `cancel` returned `true`; runs that start later are counted in `after_cancel`.
    cancelled: AtomicBool,
    after_cancel: AtomicUsize,
    /// Self-moving timers only (no other thread touches them): the earliest the next run may
    /// start, ns since the test's base, written by the run that moved it.
    not_before: AtomicU64,
    early: AtomicUsize,
}

/// Repeating timers with short periods, two thirds of them moved and cancelled at random by
/// other threads while their runs are in progress, the other third moving their own next
/// runs from their callbacks (a random back-off): no timer runs twice at once, none starts a
/// run after a cancel returned `true`, a self-moved run never starts before the moved
/// deadline, and every timer ends exactly once — cancelled, or handed back at shutdown.
#[test]
fn repeating_timers_moved_and_cancelled_during_their_runs_end_exactly_once() {
    const TIMERS: usize = 3_000;
    let base = Instant::now();
    let nanos = move |at: Instant| at.duration_since(base).as_nanos() as u64;
    let timers = common::service();
    let ledger: Arc<Vec<Repeating>> = Arc::new((0..TIMERS).map(|_| Repeating::default()).collect());
    let mut rng = SmallRng::seed_from_u64(7);
    for n in 0..TIMERS {
        let self_moving = n % 3 == 0;
        let (service, own_ledger) = (timers.clone(), Arc::clone(&ledger));
        let mut own_rng = SmallRng::seed_from_u64(1_000 + n as u64);
        let period = Duration::from_micros(rng.random_range(500..5_000));
        let id = timers
            .schedule_repeating(period, move || {
                let me = &own_ledger[n];
                let start = nanos(Instant::now());
                if me.running.swap(true, Ordering::SeqCst) {
                    me.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                if me.cancelled.load(Ordering::SeqCst) {
                    me.after_cancel.fetch_add(1, Ordering::SeqCst);
                }
                if self_moving {
                    if start < me.not_before.load(Ordering::SeqCst) {
                        me.early.fetch_add(1, Ordering::SeqCst);
                    }
                    if let Some(id) = *me.id.lock().unwrap() {
                        let delay = Duration::from_micros(own_rng.random_range(0..8_000));
                        let earliest = nanos(Instant::now() + delay);
                        me.not_before.store(earliest, Ordering::SeqCst);
                        if !service.reschedule(id, delay) {
                            // Shutting down: nothing moved, and the period's next run may
                            // still come before the timers are collected.
                            me.not_before.store(0, Ordering::SeqCst);
                        }
                    }
                }
                me.runs.fetch_add(1, Ordering::SeqCst);
                me.running.store(false, Ordering::SeqCst);
            })
            .unwrap();
        *ledger[n].id.lock().unwrap() = Some(id);
    }
    let meddlers: Vec<_> = (0..3u64)
        .map(|m| {
            let (timers, ledger) = (timers.clone(), Arc::clone(&ledger));
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(200 + m);
                let until = Instant::now() + Duration::from_millis(600);
                let mut cancelled = 0;
                while Instant::now() < until {
                    let n = rng.random_range(0..TIMERS);
                    if n % 3 == 0 {
                        continue;
                    }
                    let id = ledger[n].id.lock().unwrap().expect("scheduled");
                    if rng.random_bool(0.02) {
                        if timers.cancel(id) {
                            ledger[n].cancelled.store(true, Ordering::SeqCst);
                            cancelled += 1;
                        }
                    } else {
                        let delay = Duration::from_micros(rng.random_range(0..6_000));
                        timers.reschedule(id, delay);
                    }
                }
                cancelled
            })
        })
        .collect();
    let cancelled: usize = meddlers.into_iter().map(|m| m.join().unwrap()).sum();
    let unfired = timers.shutdown();
    let stats = timers.stats();
    let sum = |f: fn(&Repeating) -> usize| ledger.iter().map(f).sum::<usize>();
    assert_eq!(
        sum(|r| r.overlaps.load(Ordering::SeqCst)),
        0,
        "a timer ran twice at once"
    );
    assert_eq!(
        sum(|r| r.after_cancel.load(Ordering::SeqCst)),
        0,
        "a run after a cancel"
    );
    assert_eq!(
        sum(|r| r.early.load(Ordering::SeqCst)),
        0,
        "a self-moved run came early"
    );
    assert!(cancelled > 0, "the meddlers cancelled something");
    assert!(
        ledger
            .iter()
            .step_by(3)
            .all(|r| r.runs.load(Ordering::SeqCst) >= 2),
        "every self-moving timer ran at its moved deadlines"
    );
    // A timer whose run was in progress at shutdown ends with that run (one per worker at
    // most); every other one was cancelled or comes back, once.
    let back: std::collections::HashSet<TimerId> = unfired.iter().map(|u| u.id).collect();
    assert_eq!(back.len(), unfired.len(), "handed back twice");
    assert!(
        ledger.iter().all(|r| !(r.cancelled.load(Ordering::SeqCst)
            && back.contains(&r.id.lock().unwrap().unwrap()))),
        "cancelled and handed back"
    );
    assert_eq!(stats.cancelled as usize, cancelled);
    let ended_in_a_run = TIMERS - cancelled - unfired.len();
    assert!(
        ended_in_a_run <= 2,
        "{ended_in_a_run} timers unaccounted: {stats:?}"
    );
    assert_eq!(stats.pending, 0);
}
