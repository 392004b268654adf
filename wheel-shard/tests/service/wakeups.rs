//! When tick threads wake: never while the service is idle, once for an earlier deadline or a
//! filling ring while asleep until a far one, and not once per cancel of a stream of cancels.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use wheel_shard::{Config, TimerService};

use crate::common::{eventually, far_timers, service, SOON};

/// In real time, what virtual time cannot show: a timer moved from an hour away to 10 ms from
/// now wakes its tick thread, which planned to sleep until the far deadline, and fires within
/// `SOON` (10 s) instead of an hour. The never-early bound counts from an instant taken just
/// before the reschedule, the earliest moment the reschedule can read as its now, so it holds
/// exactly whatever pauses the test thread or the service's threads.
#[test]
fn an_earlier_deadline_wakes_a_tick_thread_asleep_until_a_far_one() {
    let timers = service();
    let (tx, rx) = mpsc::channel();
    let id = timers
        .schedule(Duration::from_secs(3600), move || {
            tx.send(Instant::now()).unwrap()
        })
        .unwrap();
    // Out of the ring and into the wheel: its tick thread plans its sleep by it, and the
    // moment after lets it fall asleep (one still awake would not need the wake-up this test
    // is about, and would pass all the same).
    assert!(eventually(SOON, || timers
        .stats()
        .ring_depths
        .iter()
        .all(|&depth| depth == 0)));
    std::thread::sleep(Duration::from_millis(20));
    let before = Instant::now();
    assert!(timers.reschedule(id, Duration::from_millis(10)));
    let fired_at = rx
        .recv_timeout(SOON)
        .expect("the earlier deadline woke the tick thread");
    assert!(
        fired_at >= before + Duration::from_millis(10),
        "fired {:?} after the instant before the reschedule, before the 10 ms it asked for",
        fired_at - before
    );
    assert!(!timers.reschedule(id, Duration::from_millis(5)), "fired");
}

#[test]
fn a_filling_ring_wakes_a_tick_thread_asleep_until_a_far_deadline() {
    let timers = TimerService::new(Config {
        shards: 1,
        executor_threads: 1,
        ring_capacity: 1024,
        pin_threads: false,
        ..Config::default()
    })
    .unwrap();
    // The tick thread plans its sleep up to this timer's slot, more than a minute away...
    timers.schedule(Duration::from_secs(100), || {}).unwrap();
    assert!(eventually(SOON, || timers.stats().ring_depths == [0]));
    std::thread::sleep(Duration::from_millis(50));
    // ...and later far timers do not nudge it: only the ring passing half full (512) does.
    // Woken, it drains what is there; pushes that come after it went back to sleep may wait
    // for its plan, as far timers do, as long as they leave the ring less than half full.
    for _ in 0..600 {
        timers.schedule(Duration::from_secs(100), || {}).unwrap();
    }
    assert!(
        eventually(Duration::from_secs(5), || timers.stats().ring_depths[0]
            < 512),
        "the ring still holds {:?} commands",
        timers.stats().ring_depths
    );
    assert_eq!(
        timers.stats().ring_full,
        0,
        "no schedule found the ring full"
    );
    assert_eq!(timers.shutdown().len(), 601, "nothing lost");
}

#[test]
fn an_idle_service_does_not_wake() {
    let timers = service();
    std::thread::sleep(Duration::from_millis(1500));
    let wakeups = timers.stats().wakeups;
    assert!(
        wakeups <= 4,
        "{wakeups} wake-ups in 1.5 s with nothing pending"
    );
    // A far timer costs no periodic wake-ups either.
    timers.schedule(Duration::from_secs(3600), || {}).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let wakeups = timers.stats().wakeups;
    assert!(
        wakeups <= 8,
        "{wakeups} wake-ups with one timer an hour away"
    );
}

#[test]
fn a_stream_of_cancels_does_not_wake_a_shard_per_cancel() {
    let timers = service();
    let ids = far_timers(&timers, 2000);
    let before = timers.stats().wakeups;
    let start = Instant::now();
    for chunk in ids.chunks(10) {
        for id in chunk {
            assert!(timers.cancel(*id));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let elapsed = start.elapsed();
    assert!(eventually(SOON, || timers.pending() == 0), "all freed");
    let wakeups = timers.stats().wakeups - before;
    // At most one wake-up per shard every CLEANUP_TICKS (2 ms) while cancels keep coming, plus
    // slack for the last ones; one per cancel would be 2000.
    let bound = 2 * (elapsed.as_millis() as u64 / 2 + 20);
    assert!(
        wakeups <= bound,
        "{wakeups} wake-ups for 2000 cancels in {elapsed:?} (bound {bound})"
    );
}
