//! Allocation refusal: a config over the machine's memory (capacity, rings, edge combinations) is
//! refused at once with an error naming the field, not an abort; one the allocator refuses all
//! the same is an error too; a modest capacity is made and used; and `memory_estimate` of any
//! config neither panics nor wraps.

use std::time::{Duration, Instant};

use wheel_shard::{limits, Config, ConfigError, TimerService};

use super::*;
use crate::common::within;
use crate::{common, skip};

/// What `TimerService::new` says to a config too big for the machine: `None` where this
/// machine could hold it after all, rather than have a test allocate tens of gigabytes (the
/// configs below are over half of any machine with less than 40 GB, or of any machine at all).
fn refusal(config: Config) -> Option<ConfigError> {
    if config.memory_estimate() <= limits::memory_limit() {
        skip::record(
            &format!(
                "this machine could hold the config's {} bytes, so it is not refused",
                config.memory_estimate()
            ),
            "run it on a machine with less memory",
        );
        return None;
    }
    Some(TimerService::new(config).expect_err("a config over the memory limit was accepted"))
}

#[test]
fn a_capacity_over_the_machines_memory_is_refused_not_aborted() {
    let config = Config {
        shards: 2,
        executor_threads: 1,
        pin_threads: false,
        capacity: 1 << 28,
        ..Config::default()
    };
    config.validate().unwrap();
    assert!(
        config.memory_estimate() > 15_000_000_000,
        "{} bytes: about 56 a timer",
        config.memory_estimate()
    );
    let Some(error) = refusal(config) else { return };
    assert_eq!(error.field(), Some("capacity"), "{error}");
    assert!(
        matches!(error, ConfigError::TooLarge { bytes, limit, .. }
            if bytes > limit && limit == limits::memory_limit()),
        "{error:?}"
    );
    assert!(error.to_string().contains("`capacity`"), "{error}");
}

#[test]
fn rings_over_the_machines_memory_are_refused_not_aborted() {
    let config = Config {
        shards: 1024,
        executor_threads: 1,
        pin_threads: false,
        ring_capacity: 1 << 26,
        ..Config::default()
    };
    config.validate().unwrap();
    assert!(config.memory_estimate() > 1 << 40, "24 bytes a command");
    let Some(error) = refusal(config) else { return };
    assert_eq!(error.field(), Some("ring_capacity"), "{error}");
    assert!(matches!(error, ConfigError::TooLarge { .. }), "{error:?}");
}

/// Every combination of the edges of `shards`, `executor_threads`, `ring_capacity`,
/// `capacity`, `wheel_slots` and `tick` that validates but sizes more memory than this machine
/// allows is refused by `TimerService::new` at once with `TooLarge`, naming the larger of
/// `capacity` and `ring_capacity` (what dominates there), before anything is allocated.
#[cfg(target_os = "linux")]
#[test]
fn edge_combinations_over_the_memory_limit_are_refused_at_once() {
    let limit = limits::memory_limit();
    let mut refused = 0;
    for shards in [1, limits::MAX_SHARDS] {
        for executor_threads in [1, limits::MAX_EXECUTOR_THREADS] {
            for ring_capacity in [limits::MIN_RING_CAPACITY, limits::MAX_RING_CAPACITY] {
                for capacity in [0, limits::MAX_CAPACITY] {
                    for (wheel_slots, tick) in [(1, limits::MIN_TICK), (4096, limits::MAX_TICK)] {
                        let config = Config {
                            shards,
                            tick_threads: Some(shards),
                            executor_threads,
                            ring_capacity,
                            capacity,
                            wheel_slots,
                            tick,
                            pin_threads: false,
                            ..Config::default()
                        };
                        config.validate().unwrap();
                        let estimate = config.memory_estimate();
                        if estimate <= limit {
                            continue;
                        }
                        let rings = estimate
                            - Config {
                                ring_capacity: limits::MIN_RING_CAPACITY,
                                ..config.clone()
                            }
                            .memory_estimate();
                        let timers = estimate
                            - Config {
                                capacity: 0,
                                ..config.clone()
                            }
                            .memory_estimate();
                        let field = if rings > timers {
                            "ring_capacity"
                        } else {
                            "capacity"
                        };
                        let shown = format!("{config:?}");
                        let start = Instant::now();
                        let error =
                            within(Duration::from_secs(10), move || TimerService::new(config))
                                .expect_err(&shown);
                        assert!(
                            start.elapsed() < Duration::from_secs(2),
                            "{:?}",
                            start.elapsed()
                        );
                        assert!(
                            matches!(error, ConfigError::TooLarge { bytes, .. } if bytes == estimate),
                            "{shown}: {error:?}"
                        );
                        assert_names(&error, field, &shown);
                        refused += 1;
                    }
                }
            }
        }
    }
    if refused == 0 {
        skip::record(
            "this machine could hold every edge combination, so none is refused",
            "run it on a machine with less than 30 GB of memory",
        );
    }
}

#[test]
fn a_modest_capacity_is_made_and_used() {
    let config = Config {
        shards: 2,
        executor_threads: 1,
        pin_threads: false,
        capacity: 200_000,
        ring_capacity: 1 << 14,
        ..Config::default()
    };
    let estimate = config.memory_estimate();
    assert!(
        (200_000 * 56..200_000 * 56 + 20_000_000).contains(&estimate),
        "{estimate} bytes"
    );
    assert!(estimate < limits::memory_limit());
    let timers = TimerService::new(config).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    timers
        .schedule(Duration::from_millis(1), move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(timers.shutdown().is_empty());
}

/// Set in the child process of [`an_allocation_the_allocator_refuses_is_an_error`].
const LIMITED_CHILD: &str = "ALLOCATION_LIMITED_CHILD";

/// A config within the machine's memory whose allocation the allocator refuses all the same
/// (here an address-space limit, as `ulimit -v` or strict overcommit would) is an error naming
/// the field, not an abort. Runs [`refused_allocation_in_a_limited_process`] in a child process
/// under `ulimit -v`, so the limit does not touch the other tests.
#[cfg(target_os = "linux")]
#[test]
fn an_allocation_the_allocator_refuses_is_an_error() {
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 1048576 && exec \"$0\" --exact {} --ignored --test-threads=1 --nocapture",
            common::exact_test_name("refused_allocation_in_a_limited_process")
        ))
        .arg(exe)
        .env(LIMITED_CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{:?}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The child's half of [`an_allocation_the_allocator_refuses_is_an_error`], which runs it with
/// `--ignored`; ignored in a normal run (where it would do nothing).
#[test]
#[ignore = "the child half of an_allocation_the_allocator_refuses_is_an_error"]
fn refused_allocation_in_a_limited_process() {
    if std::env::var_os(LIMITED_CHILD).is_none() {
        return;
    }
    // About 1.2 GB up front: under half of the machine, over the 1 GiB of address space.
    let config = Config {
        shards: 2,
        executor_threads: 1,
        pin_threads: false,
        capacity: 22_000_000,
        ..Config::default()
    };
    assert!(config.memory_estimate() < limits::memory_limit());
    let error = TimerService::new(config).expect_err("1.2 GB fit in 1 GiB of address space");
    assert_eq!(error.field(), Some("capacity"), "{error}");
    assert!(
        matches!(error, ConfigError::OutOfMemory { .. }),
        "{error:?}"
    );
    eprintln!("{error}");
}

/// `memory_estimate` is public and `Config`'s fields are too: on any config (a deploy tool
/// checking a config before it validates it), it returns a number, never a panic, and for
/// rings past the range never less than for the largest valid ring.
#[cfg(target_os = "linux")]
#[test]
fn memory_estimate_of_any_config_neither_panics_nor_wraps() {
    for (field, config) in extreme_configs() {
        let shown = format!("{config:?}");
        let estimate = std::panic::catch_unwind(|| config.memory_estimate())
            .unwrap_or_else(|_| panic!("memory_estimate panicked for `{field}`: {shown}"));
        if config.ring_capacity > limits::MAX_RING_CAPACITY {
            let largest = Config {
                ring_capacity: limits::MAX_RING_CAPACITY,
                ..config.clone()
            };
            assert!(
                estimate >= largest.memory_estimate(),
                "`{field}`: {estimate} bytes, less than with 2^26"
            );
        }
    }
}
