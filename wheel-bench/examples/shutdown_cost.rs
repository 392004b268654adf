//! How long `shutdown()` takes to hand back pending timers.
//!
//! Schedules `TIMERS` one-hour timers (each with a 24-byte closure, as a timeout callback
//! capturing an id and a handle), lets the tick threads take the burst in, then
//! times `shutdown()` and, apart, the drop of what it handed back. Each round uses a new
//! service with the default config; the first round also grows the process's memory, so the
//! per-round lines tell a cold round from warm ones.
//!
//! ```text
//! cargo run --release -p wheel-bench --example shutdown_cost -- [TIMERS] [ROUNDS]
//! ```
//!
//! Exits non-zero if a round hands back a different number of timers than it scheduled.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wheel_shard::{Config, TimerService};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let timers: u64 = args
        .next()
        .map_or(10_000_000, |a| a.parse().expect("TIMERS"));
    let rounds: u32 = args.next().map_or(3, |a| a.parse().expect("ROUNDS"));
    let handle = Arc::new(0u64);
    for round in 0..rounds {
        let service = TimerService::new(Config::default()).expect("a service");
        for j in 0..timers {
            let handle = Arc::clone(&handle);
            let extra = j ^ 0x5a5a;
            service
                .schedule(Duration::from_secs(3600), move || {
                    std::hint::black_box((&handle, j, extra));
                })
                .expect("scheduled");
        }
        // The tick threads take the burst into their wheels. (What is left in a ring stays
        // there until a tick thread wakes: timers an hour away do not wake it.)
        std::thread::sleep(Duration::from_millis(300));
        let start = Instant::now();
        let unfired = service.shutdown();
        let shutdown = start.elapsed();
        let handed = unfired.len() as u64;
        let start = Instant::now();
        drop(unfired);
        let dropped = start.elapsed();
        println!(
            "round {round}: {timers} timers: shutdown {:.3} s ({:.0} ns a timer), drop {:.3} s",
            shutdown.as_secs_f64(),
            shutdown.as_nanos() as f64 / timers as f64,
            dropped.as_secs_f64(),
        );
        if handed != timers {
            eprintln!("handed back {handed} of {timers}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
