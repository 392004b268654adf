//! The tick threads' scheduling: `Config::short_tick_slice` (at normal priority they run with a
//! 0.1 ms scheduler slice when it is set, the default, and with the kernel's default slice when it
//! is not) and `Config::realtime_ticks` (`SCHED_FIFO` where the OS allows it). Each test reads
//! every tick thread of the process, so it runs alone in this binary ([`crate::alone`]).

use std::sync::mpsc;
use std::time::Duration;

use wheel_shard::{Config, TimerService};

use crate::common::{eventually, service_with, tick_threads, wheel_tasks, SOON};
use crate::skip;

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
    let _alone = crate::alone();
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

/// Whether this process may run a thread under `SCHED_FIFO` (root, `CAP_SYS_NICE`, or an
/// `RLIMIT_RTPRIO` of at least 1): tried on a thread of its own.
#[cfg(target_os = "linux")]
fn may_use_sched_fifo() -> bool {
    std::thread::spawn(|| {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: a valid `sched_param`; changes only this short-lived thread's policy.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
    })
    .join()
    .unwrap()
}

/// Real-time tick threads are offered on Linux only (`runtime/priority.rs`).
#[cfg(not(target_os = "linux"))]
fn may_use_sched_fifo() -> bool {
    false
}

/// Tick threads of this process (named `wheel-tick-*`) that run under `SCHED_FIFO`, read from
/// each thread's `/proc` stat (its 41st field is the policy; 1 is `SCHED_FIFO`).
fn fifo_tick_threads() -> usize {
    wheel_tasks()
        .into_iter()
        .filter(|(name, _)| name.starts_with("wheel-tick-"))
        .filter_map(|(_, path)| {
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            let after_name = &stat[stat.rfind(')')? + 1..];
            after_name
                .split_whitespace()
                .nth(41 - 3)?
                .parse::<u32>()
                .ok()
        })
        .filter(|&policy| policy == 1)
        .count()
}

#[test]
fn realtime_ticks_run_the_tick_threads_under_sched_fifo_where_the_os_allows_it() {
    let _alone = crate::alone();
    // Two shards (`service_with`).
    let realtime = service_with(Config {
        realtime_ticks: true,
        ..Config::default()
    });
    // Timers fire whether or not the OS allowed it.
    let (fired, ran) = mpsc::channel();
    realtime
        .schedule(Duration::from_millis(5), move || fired.send(()).unwrap())
        .unwrap();
    ran.recv_timeout(Duration::from_secs(10)).unwrap();
    let got = realtime.stats().realtime_ticks;
    if !may_use_sched_fifo() {
        assert_eq!(
            got, 0,
            "the OS refuses SCHED_FIFO here, yet {got} tick threads have it"
        );
        skip::record(
            "this process may not use SCHED_FIFO (it needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1)",
            "run it as root, or after `ulimit -r 1`",
        );
        return;
    }
    let threads = realtime.config().tick_thread_count();
    assert_eq!(got, threads);
    if std::path::Path::new("/proc/self/task").exists() {
        assert_eq!(fifo_tick_threads(), threads);
    }
    // Not asked for, not given.
    let normal = service_with(Config::default());
    assert_eq!(normal.stats().realtime_ticks, 0);
    drop(realtime);
    assert!(
        eventually(SOON, || fifo_tick_threads() == 0),
        "real-time tick threads outlive their service"
    );
}
