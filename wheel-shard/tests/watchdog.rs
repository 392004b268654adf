//! The callback watchdog: slow callbacks counted and logged, callback run times and queue
//! delays in `Stats`. Bounds are generous: they test what is measured, not how fast.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually, SOON};
use wheel_shard::{Config, Lateness, TimerService};

/// Samples of `distribution` over `limit`: those certainly over it, and those whose bucket
/// straddles it (at 3 significant digits a bucket near 20 ms is 16 µs wide), either way.
fn samples_over(distribution: &Lateness, limit: Duration) -> (u64, u64) {
    let histogram = &distribution.histogram;
    let limit = u64::try_from(limit.as_nanos()).unwrap();
    let (mut certainly, mut straddling) = (0, 0);
    for bucket in histogram.iter_recorded() {
        let value = bucket.value_iterated_to();
        if histogram.lowest_equivalent(value) > limit {
            certainly += bucket.count_at_value();
        } else if histogram.highest_equivalent(value) > limit {
            straddling += bucket.count_at_value();
        }
    }
    (certainly, straddling)
}

/// Three callbacks that sleep 40 ms and ten empty ones, over a 20 ms `slow_callback`, on one
/// worker. A run's time is measured from its start to the start of the worker's next run, so
/// a host pause or a preemption of the worker inside that window makes an empty callback
/// slow, and it is rightly counted. So the test checks that the counter agrees with the
/// measured distribution, and holds to "measured short, not counted" only the empty runs
/// whose measure it can bound from outside.
///
/// On virtual time, so that all thirteen reach the wheel before their tick and the tick
/// thread hands them out in one pass, however long the test thread is paused between its
/// schedules; run times and queue delays stay real time under a manual clock.
#[test]
fn slow_callbacks_are_counted_and_timed() {
    const SLOW: Duration = Duration::from_millis(20);
    const SLEEP: Duration = Duration::from_millis(40);
    let (timers, clock) = TimerService::with_manual_clock(Config {
        shards: 1,
        executor_threads: 1,
        pin_threads: false,
        slow_callback: SLOW,
        ..Config::default()
    })
    .unwrap();
    // Each callback's entry, in run order (there is one worker), and whether it sleeps.
    let entries: Arc<Mutex<Vec<(bool, Instant)>>> = Arc::default();
    for sleeps in [true; 3].into_iter().chain([false; 10]) {
        let entries = Arc::clone(&entries);
        timers
            .schedule(Duration::from_millis(1), move || {
                entries.lock().unwrap().push((sleeps, Instant::now()));
                if sleeps {
                    std::thread::sleep(SLEEP);
                }
            })
            .unwrap();
    }
    let before_hand_out = Instant::now();
    clock.advance(Duration::from_millis(1));
    assert_eq!(timers.stats().fired, 13, "all ran before advance returned");
    assert!(eventually(SOON, || timers.stats().callback_time.count == 13));
    let stats = timers.stats();
    let entries = entries.lock().unwrap();
    assert_eq!(entries.len(), 13);

    // Run i's measure starts after run i - 1 entered its callback, and ends (at the start of
    // run i + 1, or earlier if the worker ran out of work) before run i + 1 enters its own.
    // So an empty run whose neighbours entered less than SLOW / 2 apart was measured under
    // SLOW / 2, whatever paused where (the half leaves the stopwatch's nanoseconds of error
    // no say). The first run's "previous entry" is the instant before `advance`, which hands
    // it out; the last run's measure ends after every entry, so it is never bounded.
    let mut previous = before_hand_out;
    let mut certainly_short = 0;
    for (i, &(sleeps, entered)) in entries.iter().enumerate() {
        if let Some(&(_, next)) = entries.get(i + 1) {
            if !sleeps && next.duration_since(previous) < SLOW / 2 {
                certainly_short += 1;
            }
        }
        previous = entered;
    }

    let slow = stats.slow_callbacks;
    let (over, straddling) = samples_over(&stats.callback_time, SLOW);
    assert!(
        (over..=over + straddling).contains(&slow),
        "{slow} slow callbacks counted, {over} (+{straddling} at the edge) runs measured over {SLOW:?}"
    );
    let (sleep_or_more, sleep_straddling) =
        samples_over(&stats.callback_time, SLEEP - Duration::from_nanos(1));
    assert!(
        sleep_or_more + sleep_straddling >= 3,
        "the three sleeping runs measure at least their {SLEEP:?}: {} do",
        sleep_or_more + sleep_straddling
    );
    assert!(slow >= 3, "the three sleeping runs are slow: {slow}");
    let (over_half, _) = samples_over(&stats.callback_time, SLOW / 2);
    assert!(
        13 - over_half >= certainly_short,
        "{certainly_short} empty runs took under {:?}, yet only {} samples are",
        SLOW / 2,
        13 - over_half
    );
    assert!(
        slow <= 13 - certainly_short,
        "{slow} slow callbacks, yet {certainly_short} empty runs took under {:?}",
        SLOW / 2
    );
    assert!(stats.callback_time.max >= SLEEP);
    // The tick thread hands all thirteen out in one pass, which reads the real clock once for
    // up to 64 hand-outs, so they share one hand-out instant; the worker runs them one after
    // the other, so the last to start waited behind at least two sleeping runs that both
    // started after that instant.
    assert!(
        stats.queue_delay.max >= 2 * SLEEP,
        "queue delay {:?}",
        stats.queue_delay.max
    );
    assert_eq!(stats.queue_delay.count, 13);
    assert!(timers.shutdown().is_empty());
}

#[test]
fn queue_delay_tells_a_busy_executor_from_a_late_wheel() {
    let timers = TimerService::new(Config {
        shards: 1,
        executor_threads: 1,
        pin_threads: false,
        ..Config::default()
    })
    .unwrap();
    timers
        .schedule(Duration::ZERO, || {
            std::thread::sleep(Duration::from_millis(200))
        })
        .unwrap();
    timers.schedule(Duration::from_millis(10), || {}).unwrap();
    assert!(eventually(SOON, || timers.stats().callback_time.count == 2));
    let stats = timers.stats();
    // The second callback started late because its worker was busy: its queue delay carries
    // nearly all of its lateness.
    assert!(stats.lateness.max >= Duration::from_millis(150));
    assert!(stats.queue_delay.max >= Duration::from_millis(150));
    assert_eq!(stats.slow_callbacks, 1, "200 ms is over the 100 ms default");
}
