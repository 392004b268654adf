//! Randomised races of cancel, reschedule and schedule against shutdown, with exact end-of-life
//! accounting: every timer fires, is cancelled or is handed back, once, never early, and
//! `shutdown` always returns while other threads keep moving timers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use wheel_shard::{Config, ScheduleError, TimerId, TimerService};

use crate::common;
use crate::common::{within, SOON};

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
