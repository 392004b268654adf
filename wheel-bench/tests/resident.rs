//! With mimalloc as the global allocator, as the bench binaries have it, a service's start
//! makes resident only what it writes: its rings come zeroed from the system allocator as
//! untouched pages, never written over by a global allocator that reuses memory.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[test]
#[cfg(target_os = "linux")]
fn a_service_start_leaves_its_rings_untouched() {
    use wheel_shard::{Config, TimerService};

    // Memory the global allocator has had and given back, which it may hand out again.
    drop(vec![1u8; 256 << 20]);
    // Big rings: each shard's pending ring alone is 4 Mi cells of 16 bytes or more.
    let config = Config {
        shards: 2,
        executor_threads: 1,
        ring_capacity: 1 << 22,
        ..Config::default()
    };
    let before = wheel_bench::memory().rss;
    let service = TimerService::new(config).expect("a valid config");
    let grown = wheel_bench::memory().rss.saturating_sub(before);
    let rings = 2 * (1u64 << 22) * 16;
    assert!(
        grown < rings / 4,
        "starting the service made {} MiB resident; its rings alone are {} MiB",
        grown >> 20,
        rings >> 20
    );
    drop(service);
}
