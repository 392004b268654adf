//! What a [`Config`] allocates up front, and how much of the machine that may be.
//!
//! `TimerService::new` writes the timer records and wheel places it allocates for `capacity`,
//! so that memory is resident at once; the rings and the workers' histograms come zeroed and
//! become resident as bursts and samples reach their pages. Linux overcommits: asking the
//! allocator for 20 GB on a smaller machine succeeds, and the OOM killer strikes while the pages
//! are written. A fallible allocation cannot catch that, so the service adds up the bytes first
//! and refuses a config that needs more than its share of the machine; fallible allocation
//! still turns a refusal by the allocator (a `ulimit -v`, strict overcommit) into an error.

use std::mem::size_of;

use crate::error::ConfigError;
use crate::shard::{Lane, PendingRing, Placement, Shard, ShardWheel, TimerTable, URGENT_CAPACITY};
use crate::Config;

/// The share of the machine's memory the service may take up front: half. That memory is
/// resident from `new` on (or once a burst fills the rings), before a single task is stored;
/// the timers that fill it bring their tasks, and the application around them needs room too.
/// Past half, the service is the likely victim of the OOM killer once it is busy.
const MACHINE_SHARE_DIVISOR: u64 = 2;

/// The parts of [`Config::memory_estimate`], each with the field that sizes it most directly.
pub(crate) fn parts(config: &Config) -> [(&'static str, u64); 5] {
    let shards = config.shards.max(1) as u64;
    let per_shard = config.capacity.div_ceil(config.shards.max(1));
    let wheel = |entries| ShardWheel::reserved_bytes(config.wheel_slots, entries) as u64;
    let table = |slots| TimerTable::bytes_for(slots) as u64;
    let times = |count: u64, bytes: u64| count.saturating_mul(bytes);
    [
        (
            "ring_capacity",
            times(
                shards,
                (PendingRing::<Placement>::bytes_for(config.ring_capacity)
                    .saturating_add(PendingRing::<Placement>::bytes_for(URGENT_CAPACITY))
                    .saturating_add(Lane::<Placement>::bytes_for(config.ring_capacity)))
                    as u64,
            ),
        ),
        (
            "capacity",
            times(
                shards,
                (table(per_shard) - table(0)).saturating_add(wheel(per_shard) - wheel(0)),
            ),
        ),
        ("wheel_slots", times(shards, wheel(0))),
        (
            "executor_threads",
            times(
                config.executor_threads as u64,
                // Lateness, callback time and queue delay.
                3 * crate::executor::Durations::bytes() as u64,
            ),
        ),
        (
            "shards",
            times(
                shards,
                (size_of::<Shard>() as u64)
                    .saturating_add(table(0))
                    .saturating_add(crate::executor::Executor::hand_out_bytes() as u64),
            ),
        ),
    ]
}

/// The sum of [`parts`].
pub(crate) fn estimate(config: &Config) -> u64 {
    parts(config)
        .iter()
        .fold(0, |sum, &(_, bytes)| sum.saturating_add(bytes))
}

/// See [`crate::limits::memory_limit`].
pub(crate) fn limit() -> u64 {
    let machine = machine_memory().map_or(u64::MAX, |bytes| bytes / MACHINE_SHARE_DIVISOR);
    machine.min(isize::MAX as u64)
}

/// Refuses `config` when its estimate is over [`limit`], naming the field with the largest part.
pub(crate) fn check(config: &Config) -> Result<(), ConfigError> {
    let bytes = estimate(config);
    let limit = limit();
    if bytes <= limit {
        return Ok(());
    }
    let (field, _) = parts(config)
        .into_iter()
        .max_by_key(|&(_, part)| part)
        .expect("there are parts");
    Err(ConfigError::TooLarge {
        field,
        bytes,
        limit,
    })
}

/// The error for an allocation the allocator refused while building what `field` sizes.
pub(crate) fn refused(config: &Config, field: &'static str) -> ConfigError {
    let bytes = parts(config)
        .into_iter()
        .find(|&(name, _)| name == field)
        .map_or(0, |(_, bytes)| bytes);
    ConfigError::OutOfMemory { field, bytes }
}

/// The machine's memory as this process can have it: physical RAM (`MemTotal`), or the memory
/// limit of the cgroup mounted at `/sys/fs/cgroup` (a container's own) when that is lower.
/// `None` where neither can be read (not Linux).
fn machine_memory() -> Option<u64> {
    let total = read("/proc/meminfo").and_then(|text| {
        let line = text.lines().find(|line| line.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    });
    // cgroup v2, then v1; "max" or an absurdly high v1 value mean no limit of its own.
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .into_iter()
    .filter_map(|path| read(path)?.trim().parse::<u64>().ok())
    .min();
    match (total, cgroup) {
        (Some(total), Some(cgroup)) => Some(total.min(cgroup)),
        (total, cgroup) => total.or(cgroup),
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn config(capacity: usize) -> Config {
        Config {
            shards: 2,
            executor_threads: 2,
            capacity,
            ..Config::default()
        }
    }

    fn part(config: &Config, field: &str) -> u64 {
        parts(config).into_iter().find(|p| p.0 == field).unwrap().1
    }

    #[test]
    fn capacity_costs_its_cells_and_wheel_places() {
        let per_timer = (size_of::<crate::shard::Record>() + ShardWheel::entry_footprint()) as u64;
        assert_eq!(part(&config(0), "capacity"), 0);
        let million = part(&config(1_000_000), "capacity");
        assert!(million >= 1_000_000 * per_timer, "{million}");
        assert!(
            million <= 1_000_000 * per_timer * 11 / 10,
            "{million}: whole segments and chunks add little"
        );
        let most = part(&config(crate::limits::MAX_CAPACITY), "capacity");
        assert!(most >= (1 << 28) * per_timer, "{most}: about 20 GB");
    }

    #[test]
    fn rings_cost_their_cells_on_every_shard() {
        let one = Config {
            shards: 1,
            ring_capacity: 1000,
            ..config(0)
        };
        assert_eq!(
            part(&one, "ring_capacity"),
            2 * 1024 * (size_of::<Placement>() as u64 + 8)
                + URGENT_CAPACITY as u64 * (size_of::<Placement>() as u64 + 8),
            "rounded up to a power of two; a sequence number per cell; the lane as large as the \
             ring; the ring for timers due soon"
        );
        let many = Config { shards: 8, ..one };
        assert_eq!(
            part(&many, "ring_capacity"),
            8 * part(&one, "ring_capacity")
        );
        assert_eq!(estimate(&one), parts(&one).iter().map(|p| p.1).sum());
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc")]
    fn the_largest_part_is_named() {
        let machine = limit();
        let rings = Config {
            shards: 1024,
            ring_capacity: 1 << 26,
            ..config(0)
        };
        let error = check(&rings).unwrap_err();
        assert_eq!(error.field(), Some("ring_capacity"));
        assert!(matches!(error, ConfigError::TooLarge { bytes, limit, .. }
            if bytes == estimate(&rings) && limit == machine));
        check(&config(100_000)).unwrap();
    }

    #[test]
    fn a_refused_allocation_names_its_field() {
        let error = refused(&config(1000), "capacity");
        assert_eq!(error.field(), Some("capacity"));
        assert!(
            matches!(error, ConfigError::OutOfMemory { bytes, .. } if bytes == part(&config(1000), "capacity"))
        );
    }
}
