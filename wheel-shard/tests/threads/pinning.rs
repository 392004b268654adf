//! `Config::pin_threads`: each tick thread is pinned to one core, and the tick threads of two
//! services in one process go to different cores while there are cores enough; without it they
//! may run on any core the process may. Both services' threads are named `wheel-tick-0`: the test
//! tells them apart by which appeared when, so it runs alone in this binary ([`crate::alone`]).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use wheel_shard::{Config, TimerService};

use crate::common::tick_threads;
use crate::skip;

/// The CPUs a thread may run on, from its `/proc` `status` (`Cpus_allowed_list`, e.g. `0-3,6`).
fn allowed_cpus(task: &std::path::Path) -> BTreeSet<usize> {
    let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
    let Some(list) = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
    else {
        return BTreeSet::new();
    };
    let mut cpus = BTreeSet::new();
    for range in list.trim().split(',').filter(|r| !r.is_empty()) {
        let (low, high) = range.split_once('-').unwrap_or((range, range));
        cpus.extend(low.parse::<usize>().unwrap()..=high.parse::<usize>().unwrap());
    }
    cpus
}

/// A one-shard service (one tick thread) with `pin_threads` as given, once its tick thread has
/// pinned itself (it fired a timer, so it has run its start-up).
fn started(pin_threads: bool) -> TimerService {
    let service = TimerService::new(Config {
        shards: 1,
        executor_threads: 1,
        pin_threads,
        ..Config::default()
    })
    .unwrap();
    let (fired, ran) = std::sync::mpsc::channel();
    service
        .schedule(Duration::from_millis(2), move || fired.send(()).unwrap())
        .unwrap();
    ran.recv_timeout(Duration::from_secs(10)).unwrap();
    service
}

/// The tick threads of this process that `start` adds.
fn new_tick_threads(start: impl FnOnce() -> TimerService) -> (TimerService, Vec<PathBuf>) {
    let before: BTreeSet<PathBuf> = tick_threads().into_iter().collect();
    let service = start();
    let added = tick_threads()
        .into_iter()
        .filter(|thread| !before.contains(thread))
        .collect();
    (service, added)
}

#[test]
fn services_pin_their_tick_threads_to_different_cores() {
    let _alone = crate::alone();
    if !std::path::Path::new("/proc/self/task").exists() {
        skip::record(
            "no /proc/self/task on this platform: thread affinities cannot be read",
            "run it on Linux",
        );
        return;
    }
    let process = allowed_cpus(std::path::Path::new("/proc/thread-self"));
    assert!(!process.is_empty(), "this thread's Cpus_allowed_list");

    let (unpinned, threads) = new_tick_threads(|| started(false));
    assert_eq!(threads.len(), 1);
    assert_eq!(
        allowed_cpus(&threads[0]),
        process,
        "an unpinned tick thread"
    );

    let (first, threads) = new_tick_threads(|| started(true));
    assert_eq!(threads.len(), 1);
    let first_cpus = allowed_cpus(&threads[0]);
    let (second, threads) = new_tick_threads(|| started(true));
    assert_eq!(threads.len(), 1);
    let second_cpus = allowed_cpus(&threads[0]);

    assert_eq!(first_cpus.len(), 1, "pinned to one core: {first_cpus:?}");
    assert_eq!(second_cpus.len(), 1, "pinned to one core: {second_cpus:?}");
    assert!(first_cpus.is_subset(&process) && second_cpus.is_subset(&process));
    // Counted down from the last core the process may use, on across services.
    assert_eq!(
        first_cpus.first(),
        process.last(),
        "the first goes to the last core"
    );
    if process.len() >= 2 {
        assert_ne!(first_cpus, second_cpus, "two services, two cores");
    }
    drop((unpinned, first, second));
}
