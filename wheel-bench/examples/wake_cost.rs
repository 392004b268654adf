//! This machine's floor for waking a thread: what a tick thread pays each tick it sleeps, and
//! what a worker woken for a tick's runs costs, beside which a short callback is cheap.
//!
//! Three measurements, each the CPU time of the threads involved (their `schedstat` run time)
//! per wake-up, less the busy work they were given:
//!
//! - `timed sleep`: one thread sleeps until the next millisecond (`park_timeout`, the tick
//!   thread's sleep) and works 50 µs when it wakes, like a tick thread with a few hundred
//!   timers due each tick;
//! - `wake, other CPU` / `wake, same CPU`: one thread works 200 µs, then wakes another waiting
//!   on a condition variable (a worker's sleep), pinned to the other CPU or to its own.
//!
//! ```text
//! cargo run --release -p wheel-bench --example wake_cost -- [WAKE_UPS]
//! ```
//!
//! Linux only (it reads `/proc/thread-self/schedstat` and pins with `sched_setaffinity`).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// This thread's CPU time so far, in nanoseconds.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat (Linux)")
}

/// Spins for `d` of real time.
fn work(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Pins this thread to `cpu`.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it, and the call
    // reads `size_of` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A thread that sleeps until each next millisecond and works `busy` after each wake-up: its
/// CPU per wake-up beyond the work.
fn timed_sleep(wake_ups: u32, busy: Duration) -> f64 {
    let before = cpu_ns();
    let start = Instant::now();
    for i in 1..=wake_ups {
        let next = start + Duration::from_millis(u64::from(i));
        let now = Instant::now();
        if next > now {
            std::thread::park_timeout(next - now);
        }
        work(busy);
    }
    let per = (cpu_ns() - before) as f64 / f64::from(wake_ups);
    per - busy.as_nanos() as f64
}

/// One thread on CPU 0 works `busy`, then wakes a thread waiting on CPU `wakee_cpu`: the
/// waker's CPU per wake-up beyond the work, and the wakee's.
fn wake(wake_ups: u32, busy: Duration, wakee_cpu: usize) -> (f64, f64) {
    let shared = Arc::new((Mutex::new((0u32, false)), Condvar::new()));
    let theirs = Arc::clone(&shared);
    let wakee = std::thread::spawn(move || {
        pin(wakee_cpu);
        let before = cpu_ns();
        let (lock, woken) = &*theirs;
        let (mut seen, mut count) = (0, 0u32);
        let mut state = lock.lock().unwrap();
        loop {
            while state.0 == seen && !state.1 {
                state = woken.wait(state).unwrap();
            }
            if state.1 {
                break;
            }
            seen = state.0;
            count += 1;
        }
        (cpu_ns() - before) as f64 / f64::from(count.max(1))
    });
    pin(0);
    std::thread::sleep(Duration::from_millis(10));
    let (lock, woken) = &*shared;
    let before = cpu_ns();
    let mut worked = Duration::ZERO;
    for _ in 0..wake_ups {
        let start = Instant::now();
        work(busy);
        worked += start.elapsed();
        lock.lock().unwrap().0 += 1;
        woken.notify_one();
    }
    let waker = (cpu_ns() - before - worked.as_nanos() as u64) as f64 / f64::from(wake_ups);
    lock.lock().unwrap().1 = true;
    woken.notify_one();
    (waker, wakee.join().unwrap())
}

fn main() {
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
    if cpus > 1 {
        let (waker, wakee) = wake(wake_ups, busy, 1);
        println!(
            "wake, other CPU: waker {:6.1} µs + wakee {:6.1} µs",
            waker / 1e3,
            wakee / 1e3
        );
    }
    let (waker, wakee) = wake(wake_ups, busy, 0);
    println!(
        "wake, same CPU:  waker {:6.1} µs + wakee {:6.1} µs",
        waker / 1e3,
        wakee / 1e3
    );
}
