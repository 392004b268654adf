//! Helpers shared by the service tests (each test file includes it with `mod common;`).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use wheel_shard::{Config, TimerService};

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
