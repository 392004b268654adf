//! Memory the service holds: a cancelled timer's is reclaimed within about a tick, the largest
//! rings are reserved but not resident, and an idle service stays within its `memory_estimate`.
//! The last two measure a child process of this binary (see [`crate::child`]).

use std::sync::mpsc;
use std::time::Duration;

use wheel_shard::{limits, Config, ConfigError, TimerService};

#[cfg(target_os = "linux")]
use crate::child::*;
use crate::common::{eventually, far_timers, service};
use crate::skip;

#[test]
fn cancelled_memory_is_reclaimed_within_about_a_tick() {
    let timers = service();
    let ids = far_timers(&timers, 10_000);
    for id in ids {
        assert!(timers.cancel(id));
    }
    // The shards sleep until an hour from now; the cancels must wake them to free the entries.
    assert!(eventually(Duration::from_secs(2), || timers.pending() == 0));
    assert_eq!(timers.stats().cancelled, 10_000);
}

/// The largest rings validation allows (2^26 commands, 2 GiB a shard), on as many shards as
/// fit under this machine's limit (at most four): the service starts, and, as documented, the
/// rings take memory only as bursts reach them, not up front.
#[cfg(target_os = "linux")]
#[test]
fn the_largest_rings_are_reserved_not_resident() {
    let run = run_child(
        "child_starts_the_largest_rings",
        None,
        &[],
        Duration::from_secs(60),
    );
    run.assert_passed();
    if let [refusal] = &run.reports("refused")[..] {
        // Strict overcommit (or a `ulimit -v`) refuses what Linux otherwise only reserves.
        skip::record(
            &format!("the allocator refused the rings outright: {refusal}"),
            "run it where the kernel overcommits (vm.overcommit_memory 0 or 1)",
        );
        return;
    }
    let shards = run.number("shards");
    let peak_mib = run.number("peak_growth_kib") / 1024;
    eprintln!(
        "{shards} shards with rings of 2^26: estimate {} MiB, peak +{peak_mib} MiB",
        run.number("estimate") >> 20
    );
    assert!(peak_mib <= 128, "{peak_mib} MiB resident");
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "the child half of the_largest_rings_are_reserved_not_resident"]
fn child_starts_the_largest_rings() {
    if !in_child("child_starts_the_largest_rings") {
        return;
    }
    let one = Config {
        shards: 1,
        executor_threads: 2,
        ring_capacity: limits::MAX_RING_CAPACITY,
        pin_threads: false,
        ..Config::default()
    };
    let shards = (limits::memory_limit() / one.memory_estimate()).clamp(1, 4) as usize;
    let config = Config { shards, ..one };
    report("shards", shards);
    report("estimate", config.memory_estimate());
    measured(|| {
        let timers = match TimerService::new(config) {
            Ok(timers) => timers,
            Err(error @ ConfigError::OutOfMemory { .. }) => return report("refused", error),
            Err(error) => panic!("{error:?}"),
        };
        let (tx, rx) = mpsc::channel();
        timers
            .schedule(Duration::from_millis(1), move || tx.send(()).unwrap())
            .unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(timers.shutdown().is_empty());
    });
}

/// An idle service, 64 shards without a timer, stays within its `memory_estimate` (and a
/// margin for the process): idle workers make memory resident only ahead of a shard that
/// holds timers. (Before that was so, the 64 idle shards took 385 MiB against an estimate of
/// 24 MiB: 4 MiB of wheel chunks each, posted at the tick thread's first pass.)
#[cfg(target_os = "linux")]
#[test]
fn an_idle_service_stays_within_its_estimate() {
    let run = run_child(
        "child_idles_with_many_shards",
        None,
        &[],
        Duration::from_secs(60),
    );
    run.assert_passed();
    let estimate_mib = run.number("estimate") >> 20;
    let shards = run.number("shards");
    let resident_mib = run.number("resident_growth_kib") / 1024;
    eprintln!("{shards} shards, idle: estimate {estimate_mib} MiB, resident +{resident_mib} MiB");
    assert!(
        resident_mib <= estimate_mib + 32,
        "{resident_mib} MiB resident for {shards} idle shards"
    );
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "the child half of an_idle_service_stays_within_its_estimate"]
fn child_idles_with_many_shards() {
    if !in_child("child_idles_with_many_shards") {
        return;
    }
    let config = Config {
        shards: 64,
        executor_threads: 2,
        ring_capacity: limits::MIN_RING_CAPACITY,
        pin_threads: false,
        ..Config::default()
    };
    report("shards", config.shards);
    report("estimate", config.memory_estimate());
    let before = status_kib("VmRSS:");
    let timers = TimerService::new(config).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    report(
        "resident_growth_kib",
        status_kib("VmRSS:").saturating_sub(before),
    );
    assert!(timers.shutdown().is_empty());
}
