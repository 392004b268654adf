//! This machine's price of a sleep and a wake-up: what a tick thread pays each tick it sleeps,
//! and what a worker woken for a tick's runs costs, beside which a short callback is cheap.
//!
//! The measurements are the bench's own (`wheel_bench::wake_floor`, which every bench run
//! takes at its start and reports as `machine.wake_prices`), here with the wake-up also on one
//! CPU, and as many wake-ups as asked:
//!
//! ```text
//! cargo run --release -p wheel-bench --example wake_cost -- [WAKE_UPS]
//! ```
//!
//! Linux only (it pins with `sched_setaffinity`).

use std::time::Duration;

use wheel_bench::wake_floor::{this_thread_cpu_ns, timed_sleep, wake};

fn main() {
    if this_thread_cpu_ns().is_none() {
        eprintln!("this thread's CPU clock cannot be read here");
        std::process::exit(1);
    }
    let wake_ups: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!("CPU time per wake-up, beyond the work, {wake_ups} wake-ups each; {cpus} CPUs");
    let sleep = timed_sleep(wake_ups, Duration::from_micros(50));
    println!(
        "timed sleep (1 ms period, 50 µs work):  {:6.1} µs",
        sleep / 1e3
    );
    let busy = Duration::from_micros(200);
    let targets: &[(&str, usize)] = if cpus > 1 {
        &[("other CPU", 1), ("same CPU ", 0)]
    } else {
        &[("same CPU ", 0)]
    };
    for &(label, cpu) in targets {
        match wake(wake_ups, busy, cpu) {
            Some((waker, wakee)) => println!(
                "wake, {label}: waker {:6.1} µs + wakee {:6.1} µs",
                waker / 1e3,
                wakee / 1e3
            ),
            None => println!("wake, {label}: a thread panicked"),
        }
    }
}
