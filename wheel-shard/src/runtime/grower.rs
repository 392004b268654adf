//! [`Grower`]: the thread (`wheel-exec-grow`, one of the executor's threads, so its CPU time
//! counts with the workers' as when they did this) that writes records ahead of the tables'
//! fresh slots (see `TimerTable::grow`) with CPU time nothing else wants.
//!
//! Writing a record ahead faults its page in: a 2 MiB huge page zeroed, and on a VM the
//! host's own fault too, up to milliseconds each. Done by a worker before it sleeps, that time
//! came out of the callbacks due meanwhile on the CPU the producers left free: at 10 M timers
//! the latest callbacks were the ones due while a burst took a table past its earlier peak
//! (docs/performance.md). The grower runs under `SCHED_IDLE`, so the kernel gives it a CPU
//! only when no other thread wants one there, and takes it back as soon as a tick thread or a
//! worker wakes. Where it gets no time, producers write their fresh records themselves, as
//! without growth.
//!
//! Workers ask for growth as they go to sleep, and only when a table wants it, so an idle
//! service costs the grower no wake-ups; an ask while one is pending costs no syscall.

use crate::sync::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;

#[derive(Default)]
pub(crate) struct Grower {
    /// A worker asked since the grower last looked.
    asked: AtomicBool,
    stop: AtomicBool,
    thread: OnceLock<Thread>,
}

impl Grower {
    /// The grower thread to unpark; set once, before workers can ask.
    pub(crate) fn set_thread(&self, thread: Thread) {
        let _ = self.thread.set(thread);
    }

    /// A worker about to sleep, having seen a table that wants growth.
    pub(crate) fn ask(&self) {
        if !self.asked.swap(true, Ordering::AcqRel) {
            self.unpark();
        }
    }

    /// Ends [`Grower::run`] at its next look.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.unpark();
    }

    fn unpark(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// The grower thread's body: at idle priority, calls `grow` after each ask until it
    /// reports nothing left to write (or the grower is stopped), then sleeps until the next.
    pub(crate) fn run(&self, mut grow: impl FnMut() -> bool) {
        run_only_when_idle();
        while !self.stop.load(Ordering::SeqCst) {
            if self.asked.swap(false, Ordering::AcqRel) {
                while !self.stop.load(Ordering::SeqCst) {
                    if !grow() {
                        break;
                    }
                }
                continue;
            }
            std::thread::park();
        }
    }
}

/// Puts the calling thread under `SCHED_IDLE` (a thread may always lower its own priority); a
/// refusal leaves it at normal priority, as the workers' growth was.
#[cfg(all(target_os = "linux", not(loom)))]
fn run_only_when_idle() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread, and `param` is a valid sched_param for the call.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        tracing::debug!("wheel-exec-grow runs at normal priority: SCHED_IDLE was refused");
    }
}

#[cfg(not(all(target_os = "linux", not(loom))))]
fn run_only_when_idle() {}

#[cfg(all(test, not(loom), target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn eventually(mut condition: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if condition() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn grows_after_each_ask_at_idle_priority_until_done_then_stops() {
        let grower = Arc::new(Grower::default());
        let steps = Arc::new(AtomicUsize::new(0));
        let idle = Arc::new(AtomicBool::new(false));
        let handle = {
            let (grower, steps, idle) = (grower.clone(), steps.clone(), idle.clone());
            std::thread::spawn(move || {
                grower.run(|| {
                    // SAFETY: pid 0 is the calling thread.
                    let policy = unsafe { libc::sched_getscheduler(0) };
                    idle.store(policy == libc::SCHED_IDLE, Ordering::SeqCst);
                    // Three steps of growth per ask, then nothing left.
                    steps.fetch_add(1, Ordering::SeqCst) % 4 != 3
                })
            })
        };
        grower.set_thread(handle.thread().clone());
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(steps.load(Ordering::SeqCst), 0, "no growth before an ask");
        grower.ask();
        assert!(eventually(|| steps.load(Ordering::SeqCst) == 4));
        assert!(idle.load(Ordering::SeqCst), "it grows under SCHED_IDLE");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(steps.load(Ordering::SeqCst), 4, "it sleeps once done");
        grower.ask();
        assert!(eventually(|| steps.load(Ordering::SeqCst) == 8));
        grower.stop();
        handle.join().unwrap();
    }
}
