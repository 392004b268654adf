//! Validation: every invalid value names its field and says its range or why, `TimerService::new`
//! refuses an invalid config (one built in code past every range too), and configs at the edges of
//! what validation accepts start, keep time and lose nothing (the most threads, a thread that
//! cannot start, the shortest and the longest tick).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use wheel_shard::{limits, Config, ConfigError, TimerId, TimerService};

use super::*;
#[cfg(target_os = "linux")]
use crate::child::*;
use crate::common;
use crate::common::{counter, single, within, SOON};

#[test]
fn every_invalid_value_names_its_field() {
    let cases = [
        ("shards = 0", "shards"),
        ("shards = 100000", "shards"),
        ("tick = \"0ms\"", "tick"),
        ("tick = \"1ns\"", "tick"),
        ("tick = \"3days\"", "tick"),
        ("tick = \"soon\"", "tick"),
        ("wheel_slots = 0", "wheel_slots"),
        ("wheel_slots = 5000", "wheel_slots"),
        ("executor_threads = 0", "executor_threads"),
        ("max_pending = 0", "max_pending"),
        ("transfer_batch = 0", "transfer_batch"),
        ("ring_capacity = 1", "ring_capacity"),
        ("saturation_timeout = \"2h\"", "saturation_timeout"),
        ("capacity = 1000000000", "capacity"),
        ("capacity = -1", "capacity"),
        ("slow_callback = \"0ms\"", "slow_callback"),
        ("slow_callback = \"2h\"", "slow_callback"),
        ("shards = \"two\"", "shards"),
        ("pin_threads = 3", "pin_threads"),
        ("tcik = \"1ms\"", "tcik"),
    ];
    for (text, field) in cases {
        assert_eq!(field_of(Config::from_toml_str(text)), field, "for {text:?}");
    }
}

#[test]
fn an_out_of_range_value_says_the_range_or_why() {
    for (text, says) in [
        ("shards = 0", "0 is not in 1..=1024"),
        ("tick = \"1ns\"", "\"1ns\" is not in \"10us\"..=\"1h\""),
        ("ring_capacity = 1", "1 is not in 2..=2^26"),
        ("capacity = 1000000000", "1000000000 is not in 0..=2^28"),
        (
            "saturation_timeout = \"2h\"",
            "\"2h\" is not in \"0s\"..=\"1h\"",
        ),
        ("max_pending = 0", "0 would refuse every timer"),
        ("transfer_batch = 0", "0 would never move a command"),
    ] {
        let error = Config::from_toml_str(text).unwrap_err().to_string();
        assert!(error.contains(says), "{text}: {error}");
    }
}

#[test]
fn the_service_refuses_an_invalid_config() {
    let error = TimerService::new(Config {
        executor_threads: 0,
        ..Config::default()
    })
    .unwrap_err();
    assert_eq!(error.field(), Some("executor_threads"));
}

/// Configs built in code with every field far outside its range (`usize::MAX`, or 0 where the
/// least is 1 or 2): `validate` and `TimerService::new` refuse each with `Invalid` naming the
/// field, never a panic or an allocation.
#[cfg(target_os = "linux")]
#[test]
fn configs_built_in_code_past_every_range_are_refused_by_new() {
    for (field, config) in extreme_configs() {
        let shown = format!("{config:?}");
        let error = config.validate().expect_err(&shown);
        assert!(matches!(error, ConfigError::Invalid { .. }), "{error:?}");
        assert_names(&error, field, &shown);
        let error =
            within(Duration::from_secs(10), move || TimerService::new(config)).expect_err(&shown);
        assert!(matches!(error, ConfigError::Invalid { .. }), "{error:?}");
        assert_names(&error, field, &shown);
    }
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

/// The most threads validation allows, in two configs that keep memory modest: 1024 shards
/// with 1024 tick threads, and 1024 executor threads. Each starts (1025 threads), fires a
/// timer, and stops every thread at shutdown, within seconds. (1024 of both at once was run
/// by hand: it starts too, but idle workers make 2.4 GB resident, more than a test may take.)
#[cfg(target_os = "linux")]
#[test]
fn the_most_threads_validation_allows_start_fire_and_stop() {
    let run = run_child(
        "child_starts_the_most_threads",
        None,
        &[],
        Duration::from_secs(60),
    );
    run.assert_passed();
    for line in run.reports("config") {
        eprintln!("{line}");
    }
    assert_eq!(run.reports("config").len(), 2, "{}", run.output());
    let peak_mib = run.number("peak_growth_kib") / 1024;
    eprintln!("peak +{peak_mib} MiB");
    assert!(peak_mib < 1024, "{peak_mib} MiB");
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "the child half of the_most_threads_validation_allows_start_fire_and_stop"]
fn child_starts_the_most_threads() {
    if !in_child("child_starts_the_most_threads") {
        return;
    }
    measured(|| {
        for config in [
            Config {
                shards: limits::MAX_SHARDS,
                tick_threads: Some(limits::MAX_SHARDS),
                executor_threads: 1,
                pin_threads: false,
                ..Config::default()
            },
            Config {
                shards: 1,
                executor_threads: limits::MAX_EXECUTOR_THREADS,
                pin_threads: false,
                ..Config::default()
            },
        ] {
            let threads = config.tick_thread_count() + config.executor_threads;
            let start = Instant::now();
            let timers = TimerService::new(config.clone()).expect("a valid config starts");
            let started = start.elapsed();
            // Threads name themselves as they start, perhaps after `new` returns.
            assert!(
                common::eventually(Duration::from_secs(10), || wheel_threads() == threads),
                "{} wheel threads, not {threads}",
                wheel_threads()
            );
            let (tx, rx) = mpsc::channel();
            timers
                .schedule(Duration::from_millis(1), move || tx.send(()).unwrap())
                .unwrap();
            rx.recv_timeout(Duration::from_secs(10))
                .expect("the timer fires");
            let stop = Instant::now();
            assert!(timers.shutdown().is_empty());
            drop(timers);
            assert_eq!(wheel_threads(), 0, "a thread outlived shutdown");
            report(
                "config",
                format!(
                    "shards={} executor_threads={}: {threads} threads started in {started:?}, \
                     stopped in {:?}",
                    config.shards,
                    config.executor_threads,
                    stop.elapsed()
                ),
            );
        }
    });
}

/// Where a thread cannot start, `TimerService::new` returns a typed error (`Spawn`, or
/// `OutOfMemory` should an allocation be refused first) and the threads it did start are
/// stopped: none is left, and the process neither aborts nor hangs.
///
/// As root the child runs as `nobody` with `RLIMIT_NPROC` at 256, so the 2048 threads the config
/// asks for fail to start at about the 250th, and only thread creation fails. Elsewhere (or
/// where `nobody` cannot run the test binary) `ulimit -v` leaves no room for their stacks;
/// then the address space can also run out inside a thread that did start, where Rust's
/// runtime aborts on its own start-up allocation (its signal stack) before any code of the
/// service runs: such a run is tried again, up to three times, and said so.
#[cfg(target_os = "linux")]
#[test]
fn a_thread_that_cannot_start_is_an_error_and_leaves_no_thread() {
    const TEST: &str = "child_runs_out_of_threads";
    let deadline = Duration::from_secs(60);
    let mut run = None;
    if is_root() {
        let as_nobody = run_child_limited(TEST, Some(NOBODY), None, Some(256), &[], deadline);
        if !as_nobody.could_not_start() {
            run = Some(as_nobody);
        }
    }
    let run = run.unwrap_or_else(|| {
        let mut attempt = 1;
        loop {
            let run = run_child(TEST, Some(3 << 20), &[], deadline);
            let runtime_abort = run
                .stderr
                .contains("failed to allocate an alternative stack");
            if !runtime_abort || attempt == 3 {
                break run;
            }
            eprintln!("attempt {attempt}: a started thread's runtime start-up ran out of memory");
            attempt += 1;
        }
    });
    run.assert_passed();
    let result = run.report("result");
    eprintln!("{result}");
    assert!(
        result.starts_with("Spawn") || result.starts_with("OutOfMemory"),
        "{result}"
    );
    if result.starts_with("Spawn") {
        // The message names the thread that could not start and the field that asked for it.
        let message = run.report("message");
        assert!(
            message.contains("wheel-") && message.contains("config field `"),
            "{message}"
        );
    }
    assert_eq!(run.report("threads_left"), "0");
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "the child half of a_thread_that_cannot_start_is_an_error_and_leaves_no_thread"]
fn child_runs_out_of_threads() {
    if !in_child("child_runs_out_of_threads") {
        return;
    }
    let config = Config {
        shards: limits::MAX_SHARDS,
        tick_threads: Some(limits::MAX_SHARDS),
        executor_threads: limits::MAX_EXECUTOR_THREADS,
        ring_capacity: limits::MIN_RING_CAPACITY,
        pin_threads: false,
        ..Config::default()
    };
    let error = TimerService::new(config).expect_err("2048 threads start under the child's limit");
    report("result", format!("{error:?}"));
    report("message", error.to_string());
    report("threads_left", wheel_threads());
}

/// The shortest tick with the most slots (10 µs × 4096): 200 timers over 0..40 ms each fire
/// once, never early.
#[cfg(target_os = "linux")]
#[test]
fn the_shortest_tick_with_the_most_slots_keeps_time() {
    within(Duration::from_secs(30), || {
        let timers = TimerService::new(Config {
            shards: 2,
            executor_threads: 2,
            tick: limits::MIN_TICK,
            wheel_slots: limits::MAX_WHEEL_SLOTS,
            pin_threads: false,
            ..Config::default()
        })
        .unwrap();
        let (tx, rx) = mpsc::channel();
        for n in 0..200u64 {
            let delay = Duration::from_micros(n * 7919 % 40_000);
            let asked = Instant::now();
            let tx = tx.clone();
            timers
                .schedule(delay, move || {
                    tx.send((n, asked.elapsed() >= delay)).unwrap()
                })
                .unwrap();
        }
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let (n, on_time) = rx.recv_timeout(Duration::from_secs(10)).expect("fires");
            assert!(on_time, "timer {n} fired early");
            assert!(seen.insert(n), "timer {n} fired twice");
        }
        assert!(timers.shutdown().is_empty());
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

/// Whether this process runs as root.
#[cfg(unix)]
fn is_root() -> bool {
    // SAFETY: geteuid takes no argument, touches no memory and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
