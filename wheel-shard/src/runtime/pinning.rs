//! Which core each tick thread is pinned to under [`Config::pin_threads`](crate::Config).
//!
//! Tick threads are numbered across the whole process, in the order services start them, and
//! the `k`-th one goes to the `k`-th core counted down from the last one the process may run
//! on (`cores[len - 1 - k mod len]`). So:
//! - two services in one process pin their tick threads to different cores while there are
//!   cores enough (numbered per service, every service's tick thread 0 went to one core);
//! - a service's tick threads spread over the cores before any two share one;
//! - the first go to the highest cores, away from core 0, where the machine's own chores and
//!   the threads of applications that pin their own from core 0 up tend to gather.
//!
//! For example, on 4 cores a service with 2 tick threads pins them to cores 3 and 2, and the
//! next service's single tick thread goes to core 1. Numbers are never given back: a process
//! that keeps starting and dropping services goes round the cores.
//!
//! The cores are those the thread that starts the service may run on (`sched_getaffinity` on
//! Linux), so a process started under `taskset` pins within its set.

use std::sync::atomic::{AtomicUsize, Ordering};

use core_affinity::CoreId;

/// Tick threads pinned so far in this process: the next one's number.
static PINNED: AtomicUsize = AtomicUsize::new(0);

/// The cores for a service's `threads` tick threads, in order: numbers `threads` further on in
/// the process's count (see the module doc). Empty, with a warning, where the platform reports
/// no cores: the tick threads then run unpinned.
pub(crate) fn tick_thread_cores(threads: usize) -> Vec<CoreId> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    if cores.is_empty() {
        tracing::warn!("pin_threads: the platform reports no cores; tick threads run unpinned");
        return Vec::new();
    }
    let first = PINNED.fetch_add(threads, Ordering::Relaxed);
    (first..first + threads)
        .map(|number| core_for(&cores, number))
        .collect()
}

/// The core of the process's tick thread `number`: counted down from the last of `cores`.
fn core_for(cores: &[CoreId], number: usize) -> CoreId {
    cores[cores.len() - 1 - number % cores.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(cores: &[usize], numbers: std::ops::Range<usize>) -> Vec<usize> {
        let cores: Vec<CoreId> = cores.iter().map(|&id| CoreId { id }).collect();
        numbers.map(|n| core_for(&cores, n).id).collect()
    }

    #[test]
    fn tick_threads_count_down_from_the_last_core_and_wrap_around() {
        // The module doc's example: a service of 2 tick threads, then one of 1.
        assert_eq!(ids(&[0, 1, 2, 3], 0..2), [3, 2]);
        assert_eq!(ids(&[0, 1, 2, 3], 2..3), [1]);
        assert_eq!(ids(&[0, 1], 0..5), [1, 0, 1, 0, 1]);
        assert_eq!(ids(&[5], 0..3), [5, 5, 5]);
        // An allowed set that is not 0..n (a process under `taskset -c 2,5,6`).
        assert_eq!(ids(&[2, 5, 6], 0..4), [6, 5, 2, 6]);
    }

    #[test]
    fn a_service_gets_one_allowed_core_for_each_tick_thread() {
        let allowed = core_affinity::get_core_ids().unwrap_or_default();
        let cores = tick_thread_cores(3);
        if allowed.is_empty() {
            assert!(cores.is_empty(), "nothing to pin to: unpinned");
            return;
        }
        assert_eq!(cores.len(), 3);
        assert!(cores.iter().all(|core| allowed.contains(core)), "{cores:?}");
    }
}
