//! The machine's price of a sleep and a wake-up: the CPU time a thread is charged for going to
//! sleep and waking, beyond any work it does, measured at the start of each bench run.
//!
//! A timer service with a tick sleeps at least once a tick, and one whose callbacks run on
//! other threads wakes one of them for each tick's batch, so part of its CPU per timer is these
//! prices times its sleeps and wake-ups, however little work it does. On a VM the prices are
//! the hypervisor's: a vCPU that halts and is woken by a timer or an inter-processor interrupt
//! exits to the host and back. This project's VMs have charged 20–60 µs a timed sleep, which at
//! a million timers a second is 20–60 ns a timer of a tick thread's CPU before it does anything.
//!
//! Two measurements, each the CPU time of the threads involved (each thread's own CPU clock,
//! [`this_thread_cpu_ns`]):
//!
//! - **timed sleep**: a thread sleeps until each next millisecond (`park_timeout`, as a tick
//!   thread sleeps) and works 50 µs when it wakes; its CPU per wake-up less the 50 µs;
//! - **wake-up**: one thread works 200 µs, then wakes another waiting on a condition variable
//!   (as a worker sleeps), on another CPU where there is one; the CPU per wake-up of the waker
//!   beyond its work, and of the woken thread.
//!
//! Each price is the median of three measurements, so one stretch of host noise does not set
//! it.
//!
//! Linux only: it pins with `sched_setaffinity`.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The clock every measurement here reads: a thread's CPU time so far, in nanoseconds.
pub use crate::host::proc::this_thread_cpu_ns;

/// What a sleep and a wake-up cost on this machine, in CPU nanoseconds beyond the work.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct WakePrices {
    /// A thread that sleeps until a deadline a millisecond ahead, per wake-up.
    pub timed_sleep_ns: f64,
    /// The thread that wakes a sleeping one, per wake-up.
    pub waker_ns: f64,
    /// The thread woken, per wake-up.
    pub wakee_ns: f64,
    /// Whether the two were on different CPUs (`false` on a single CPU).
    pub across_cpus: bool,
}

impl WakePrices {
    /// A wake-up, both sides together.
    pub fn wake_ns(&self) -> f64 {
        self.waker_ns + self.wakee_ns
    }
}

/// Wake-ups per measurement: about a third of a second for the timed sleeps.
const WAKE_UPS: u32 = 300;
/// Measurements per price; the median is kept.
const REPEATS: usize = 3;
/// The work a timed sleeper does after each wake-up.
const SLEEPER_WORK: Duration = Duration::from_micros(50);
/// The work a waker does before each wake-up.
const WAKER_WORK: Duration = Duration::from_micros(200);

/// Measures this machine's prices (about 1.5 s); `None` where the CPU times cannot be read.
pub fn wake_prices() -> Option<WakePrices> {
    this_thread_cpu_ns()?;
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    let wakee_cpu = usize::from(cpus > 1);
    let sleeps = median((0..REPEATS).map(|_| timed_sleep(WAKE_UPS, SLEEPER_WORK)))?;
    let wakes: Vec<(f64, f64)> = (0..REPEATS)
        .filter_map(|_| wake(WAKE_UPS, WAKER_WORK, wakee_cpu))
        .collect();
    Some(WakePrices {
        timed_sleep_ns: sleeps,
        waker_ns: median(wakes.iter().map(|w| w.0))?,
        wakee_ns: median(wakes.iter().map(|w| w.1))?,
        across_cpus: wakee_cpu != 0,
    })
}

/// The median of `values` (`None` when there are none).
fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Spins for `d` of real time.
fn work(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Pins this thread to `cpu` (a no-op where that is refused).
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
/// CPU per wake-up beyond the work. Runs on a thread of its own, so the caller's affinity
/// stays as it was.
pub fn timed_sleep(wake_ups: u32, busy: Duration) -> f64 {
    std::thread::spawn(move || {
        let before = this_thread_cpu_ns().unwrap_or(0);
        let start = Instant::now();
        for i in 1..=wake_ups {
            let next = start + Duration::from_millis(u64::from(i));
            let now = Instant::now();
            if next > now {
                std::thread::park_timeout(next - now);
            }
            work(busy);
        }
        let spent = this_thread_cpu_ns().unwrap_or(0).saturating_sub(before) as f64;
        spent / f64::from(wake_ups.max(1)) - busy.as_nanos() as f64
    })
    .join()
    .unwrap_or(f64::NAN)
}

/// One thread on CPU 0 works `busy`, then wakes a thread waiting on CPU `wakee_cpu`: the
/// waker's CPU per wake-up beyond the work, and the wakee's; `None` if a thread panicked.
pub fn wake(wake_ups: u32, busy: Duration, wakee_cpu: usize) -> Option<(f64, f64)> {
    let shared = Arc::new((Mutex::new((0u32, false)), Condvar::new()));
    let theirs = Arc::clone(&shared);
    let wakee = std::thread::spawn(move || {
        pin(wakee_cpu);
        let before = this_thread_cpu_ns().unwrap_or(0);
        let (lock, woken) = &*theirs;
        let (mut seen, mut count) = (0, 0u32);
        let mut state = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            while state.0 == seen && !state.1 {
                state = woken.wait(state).unwrap_or_else(PoisonError::into_inner);
            }
            if state.1 {
                break;
            }
            seen = state.0;
            count += 1;
        }
        drop(state);
        let spent = this_thread_cpu_ns().unwrap_or(0).saturating_sub(before) as f64;
        spent / f64::from(count.max(1))
    });
    let waker = std::thread::spawn(move || {
        pin(0);
        std::thread::sleep(Duration::from_millis(10));
        let (lock, woken) = &*shared;
        let before = this_thread_cpu_ns().unwrap_or(0);
        let mut worked = Duration::ZERO;
        for _ in 0..wake_ups {
            let start = Instant::now();
            work(busy);
            worked += start.elapsed();
            lock.lock().unwrap_or_else(PoisonError::into_inner).0 += 1;
            woken.notify_one();
        }
        let spent = this_thread_cpu_ns().unwrap_or(0).saturating_sub(before);
        let waker = spent.saturating_sub(worked.as_nanos() as u64) as f64;
        lock.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        woken.notify_one();
        waker / f64::from(wake_ups.max(1))
    });
    let waker = waker.join().ok()?;
    Some((waker, wakee.join().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle_value() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), Some(2.0));
        assert_eq!(median(std::iter::empty()), None);
    }

    #[test]
    fn prices_are_measured_and_plausible() {
        let Some(prices) = wake_prices() else {
            eprintln!("SKIPPED: this thread's CPU clock cannot be read here");
            return;
        };
        // A sleep and a wake-up cost something, and far less than the millisecond period
        // (the work is taken out, so noise can only push a price a little below zero).
        for price in [prices.timed_sleep_ns, prices.waker_ns, prices.wakee_ns] {
            assert!(price.is_finite(), "{prices:?}");
            assert!(price > -20_000.0 && price < 1_000_000.0, "{prices:?}");
        }
        assert!(prices.wakee_ns > 0.0, "{prices:?}");
        let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
        assert_eq!(prices.across_cpus, cpus > 1);
    }
}
