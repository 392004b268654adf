//! How long a wheel's owner waits when the wheel grows into memory it never used: inserts
//! timers into a fresh wheel (the system allocator, no reservation) and reports the total time
//! and the longest single insert, which is where a new block of chunks is allocated or a fresh
//! page first written.
//!
//! ```text
//! cargo run --release -p wheel-core --example cold_growth -- [ENTRIES]
//! ```

use std::time::{Duration, Instant};

use wheel_core::Wheel;

fn main() {
    let entries: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let mut wheel = Wheel::<u32>::new();
    let (mut longest, mut over_1ms) = (Duration::ZERO, 0);
    let start = Instant::now();
    for i in 0..entries {
        let before = Instant::now();
        // Deadlines spread over 10 s of 1 ms ticks, as the bench's 10 M round.
        wheel.insert(
            1 + (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 10_000,
            i as u32,
        );
        let took = before.elapsed();
        longest = longest.max(took);
        over_1ms += usize::from(took > Duration::from_millis(1));
    }
    let total = start.elapsed();
    println!(
        "{entries} inserts into a fresh wheel: {total:.2?} ({:.1} ns each); longest insert {longest:.2?}; {over_1ms} inserts over 1 ms; {} MiB of chunks",
        total.as_nanos() as f64 / entries as f64,
        wheel.chunk_bytes_written() >> 20
    );
}
