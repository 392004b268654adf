//! `Config::short_tick_slice`: tick threads at normal priority run with a 0.1 ms scheduler slice
//! when it is set (the default), and with the kernel's default slice when it is not.
//!
//! A file of its own, so this process holds no other service's tick threads: the test tells
//! them apart by name only.

mod common;
mod skip;

use std::time::Duration;

use common::tick_threads;
use wheel_shard::{Config, TimerService};

/// The slice a tick thread asks for (`priority::TICK_SLICE`), in nanoseconds.
const SHORT_SLICE_NANOS: u64 = 100_000;

/// A thread's scheduler slice in nanoseconds, from its `/proc` `sched` file (`se.slice`, which
/// kernels built with scheduler debugging show).
fn slice(task: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(task.join("sched"))
        .ok()?
        .lines()
        .find(|line| line.starts_with("se.slice"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// The kernel's (major, minor) version.
fn kernel() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (next(), next())
}

/// The slices of this process's tick threads, once `service` has fired a timer (so its tick
/// threads have started and set their slice).
fn tick_slices(service: &TimerService) -> Vec<Option<u64>> {
    let (fired, ran) = std::sync::mpsc::channel();
    service
        .schedule(Duration::from_millis(2), move || fired.send(()).unwrap())
        .unwrap();
    ran.recv_timeout(Duration::from_secs(10)).unwrap();
    tick_threads().iter().map(|task| slice(task)).collect()
}

#[test]
fn tick_threads_take_the_short_slice_only_when_configured() {
    let config = Config {
        shards: 2,
        executor_threads: 2,
        ..Config::default()
    };
    assert!(config.short_tick_slice, "the short slice is the default");
    let short = TimerService::new(config.clone()).unwrap();
    let slices = tick_slices(&short);
    assert_eq!(slices.len(), config.tick_thread_count());
    if kernel() < (6, 12) || slices.iter().any(Option::is_none) {
        skip::record(
            "the kernel is older than 6.12 (no slice for normal threads) or shows no se.slice",
            "run it on Linux 6.12 or later built with CONFIG_SCHED_DEBUG",
        );
        return;
    }
    assert!(
        slices.iter().all(|&s| s == Some(SHORT_SLICE_NANOS)),
        "tick threads with short_tick_slice: {slices:?}"
    );
    drop(short);

    let default_slice = TimerService::new(Config {
        short_tick_slice: false,
        ..config
    })
    .unwrap();
    // The threads of the service dropped above are joined already (dropping the last handle
    // stops them), so these are the new service's.
    let slices = tick_slices(&default_slice);
    assert!(!slices.is_empty());
    assert!(
        slices
            .iter()
            .all(|&s| s.is_some_and(|s| s > SHORT_SLICE_NANOS)),
        "tick threads without short_tick_slice: {slices:?}"
    );
}
