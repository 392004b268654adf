//! The callback watchdog: slow callbacks counted and logged, callback run times and queue
//! delays in `Stats`. Bounds are generous: they test what is measured, not how fast.

mod common;

use std::time::Duration;

use common::{eventually, SOON};
use wheel_shard::{Config, TimerService};

#[test]
fn slow_callbacks_are_counted_and_timed() {
    let timers = TimerService::new(Config {
        shards: 1,
        executor_threads: 1,
        pin_threads: false,
        slow_callback: Duration::from_millis(20),
        ..Config::default()
    })
    .unwrap();
    for _ in 0..3 {
        timers
            .schedule(Duration::ZERO, || {
                std::thread::sleep(Duration::from_millis(40))
            })
            .unwrap();
    }
    for _ in 0..10 {
        timers.schedule(Duration::ZERO, || {}).unwrap();
    }
    assert!(eventually(SOON, || timers.stats().fired == 13));
    assert!(eventually(SOON, || timers.stats().callback_time.count == 13));
    let stats = timers.stats();
    assert_eq!(stats.slow_callbacks, 3, "only the three 40 ms callbacks");
    assert!(stats.callback_time.max >= Duration::from_millis(40));
    assert!(stats.callback_time.p50 < Duration::from_millis(20));
    // The quick ones queued behind the slow ones on the only worker.
    assert!(
        stats.queue_delay.max >= Duration::from_millis(80),
        "queue delay {:?}",
        stats.queue_delay.max
    );
    assert_eq!(stats.queue_delay.count, 13);
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
