//! Helpers shared by the test binaries of `wheel-shard` (each one's `main.rs` includes this file
//! as its module `common`, and its modules `use crate::common::...`).
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use wheel_shard::{Config, ManualClock, TimerId, TimerService};

/// A small service for tests: two shards, two workers, 1 ms tick, pinning off.
pub fn service() -> TimerService {
    service_with(Config::default())
}

pub fn service_with(config: Config) -> TimerService {
    TimerService::new(Config {
        shards: 2,
        executor_threads: 2,
        pin_threads: false,
        ..config
    })
    .expect("valid test config")
}

/// Polls `condition` every millisecond for up to `limit`; true once it holds.
pub fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    condition()
}

/// Generous bound for "soon" on a loaded 2-core CI machine.
pub const SOON: Duration = Duration::from_secs(10);

/// A one-shard service whose pending ring holds two commands and whose tick thread moves one
/// command a tick (`transfer_batch: 1`), a tick lasting `tick`. A full ring makes a schedule
/// wait up to `saturation_timeout`. See [`fill_the_ring`].
pub fn service_with_a_small_ring(tick: Duration, saturation_timeout: Duration) -> TimerService {
    TimerService::new(Config {
        shards: 1,
        executor_threads: 1,
        tick,
        ring_capacity: 2,
        transfer_batch: 1,
        saturation_timeout,
        pin_threads: false,
        ..Config::default()
    })
    .expect("valid test config")
}

/// Fills the ring of a [`service_with_a_small_ring`] with timers due in a minute, once the
/// tick thread has spent this tick's one command: the ring then stays full until the next
/// tick, and drains a command a tick from then on.
pub fn fill_the_ring(timers: &TimerService) {
    timers
        .try_schedule(Duration::from_secs(60), || {})
        .expect("room");
    // It leaves the ring now, spending the tick's command, unless that was spent already.
    eventually(Duration::from_secs(1), || timers.stats().ring_depths == [0]);
    while timers.stats().ring_depths != [2] {
        timers
            .try_schedule(Duration::from_secs(60), || {})
            .expect("room in the ring");
    }
}

/// A [`service_with_a_small_ring`] whose ring is full until its first tick ends, `full_for`
/// after it started; it holds three timers (one in the wheel, two in the ring).
pub fn service_with_a_full_ring(full_for: Duration, saturation_timeout: Duration) -> TimerService {
    let timers = service_with_a_small_ring(full_for, saturation_timeout);
    fill_the_ring(&timers);
    timers
}

/// This process's threads named `wheel-*`: each one's name and `/proc` directory (none where
/// there is no `/proc/self/task`).
pub fn wheel_tasks() -> Vec<(String, std::path::PathBuf)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| {
            let path = task.ok()?.path();
            let name = std::fs::read_to_string(path.join("comm")).ok()?;
            Some((name.trim().to_string(), path))
        })
        .filter(|(name, _)| name.starts_with("wheel-"))
        .collect()
}

/// This process's tick threads (`wheel-tick-*`), by their `/proc` directories.
pub fn tick_threads() -> Vec<std::path::PathBuf> {
    wheel_tasks()
        .into_iter()
        .filter(|(name, _)| name.starts_with("wheel-tick-"))
        .map(|(_, path)| path)
        .collect()
}

/// One shard, one worker, pinning off: slots, order and the worker are predictable.
pub fn single(config: Config) -> TimerService {
    TimerService::new(Config {
        shards: 1,
        executor_threads: 1,
        pin_threads: false,
        ..config
    })
    .expect("valid test config")
}

/// Runs `body` on its own thread; fails the test if it has not returned within `limit` (a
/// hang or a deadlock), instead of hanging the suite. A panic in `body` fails the test too.
pub fn within<T: Send + 'static>(limit: Duration, body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => value,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("did not return within {limit:?}: hung or deadlocked")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the body panicked"),
    }
}

/// Sets its flag when dropped.
pub struct DropFlag(pub Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Panics when dropped (outside an unwinding panic).
pub struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("hostile drop");
        }
    }
}

/// A service on virtual time with `shards` shards and `workers` workers (1 ms tick).
pub fn manual(shards: usize, workers: usize) -> (TimerService, ManualClock) {
    TimerService::with_manual_clock(Config {
        shards,
        executor_threads: workers,
        pin_threads: false,
        ..Config::default()
    })
    .expect("valid test config")
}

/// A flag and the [`DropFlag`] that sets it.
pub fn flag() -> (Arc<AtomicBool>, DropFlag) {
    let flag = Arc::new(AtomicBool::new(false));
    (Arc::clone(&flag), DropFlag(flag))
}

/// A counter and a factory of one-shot tasks that bump it.
pub fn counter() -> (Arc<AtomicUsize>, impl Fn() -> Box<dyn FnOnce() + Send>) {
    let count = Arc::new(AtomicUsize::new(0));
    let make = {
        let count = Arc::clone(&count);
        move || -> Box<dyn FnOnce() + Send> {
            let count = Arc::clone(&count);
            Box::new(move || {
                count.fetch_add(1, Ordering::SeqCst);
            })
        }
    };
    (count, make)
}

/// `n` timers an hour away, once the shards hold them all.
pub fn far_timers(timers: &TimerService, n: usize) -> Vec<TimerId> {
    let ids: Vec<_> = (0..n)
        .map(|_| timers.schedule(Duration::from_secs(3600), || {}).unwrap())
        .collect();
    assert!(eventually(SOON, || timers.pending() == n));
    ids
}

/// The full name (`module::test`) of this binary's test `test`, as `--exact` wants it: the
/// name by which a test that runs a part of itself in a child process of this binary asks for
/// that part. Tests live in modules named for what they guard, and move between them; the
/// binary's own `--list` says where `test` is now.
pub fn exact_test_name(test: &str) -> String {
    let exe = std::env::current_exe().expect("the test binary");
    let listed = std::process::Command::new(exe)
        .arg("--list")
        .output()
        .expect("list this binary's tests");
    let list = String::from_utf8_lossy(&listed.stdout);
    let suffix = format!("::{test}");
    let mut names = list
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .filter(|name| *name == test || name.ends_with(&suffix));
    match (names.next(), names.next()) {
        (Some(name), None) => name.to_string(),
        _ => panic!("not exactly one test named {test} in this binary:\n{list}"),
    }
}
