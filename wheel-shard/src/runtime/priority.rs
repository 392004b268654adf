//! How tick threads ask the scheduler for their core on time: a short slice at normal
//! priority by default ([`Config::short_tick_slice`](crate::Config)), real-time priority when
//! asked ([`Config::realtime_ticks`](crate::Config)).
//!
//! **The short slice.** Linux's EEVDF scheduler (6.6 on) gives a waking thread the core at once
//! only when its virtual deadline, its vruntime plus its slice, is earlier than the running
//! thread's; with the default slice (0.7 ms × (1 + log2 of the CPUs): 1.4 ms on two) a tick
//! thread that wakes beside a busy worker or producer can wait most of a slice. Since Linux
//! 6.12 a normal thread may ask for a shorter slice (`sched_setattr`, `sched_runtime` for
//! `SCHED_OTHER`, 0.1 to 100 ms), and a thread with a shorter slice may preempt one with a
//! longer slice when it wakes. A tick thread asks for
//! [`TICK_SLICE`]: its share of the CPU stays that of any normal thread (the slice changes how
//! long each turn is, not how many it gets), and no privilege is needed. Earlier kernels ignore
//! the request.
//!
//! A tick thread needs a core for a short while each tick, on time. At normal priority it
//! waits for one behind whatever else that core runs: where the application keeps every core
//! busy (a producer scheduling flat out), that is a scheduler slice or more, milliseconds, and
//! the timers due meanwhile are that late (`docs/performance.md`, "`realtime_ticks`"). Under
//! `SCHED_FIFO`, at [`PRIORITY`], the lowest real-time priority, a tick thread that wakes
//! takes its core from any normal thread at once.
//!
//! Why this is safe to offer: a tick thread runs no user code, and its work per tick is
//! bounded (`transfer_batch` commands, then what falls due); and Linux's real-time throttling
//! (by default 95 % of each second) keeps even a runaway real-time thread from taking a core
//! whole. Workers keep normal priority: they run user callbacks.

use std::io;
use std::thread::JoinHandle;
use std::time::Duration;

/// The scheduler slice a tick thread asks for at normal priority: the shortest Linux grants. A
/// pass of a tick thread is usually shorter; a longer one (a flood of new timers) lets others
/// in every slice, as any thread would.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) const TICK_SLICE: Duration = Duration::from_micros(100);

/// Asks the scheduler for [`TICK_SLICE`] as the calling thread's slice, keeping its policy
/// (`SCHED_OTHER`) and nice value. A kernel before Linux 6.12 accepts the call and ignores the
/// slice.
#[cfg(target_os = "linux")]
pub(crate) fn ask_short_slice() -> io::Result<()> {
    /// `struct sched_attr` as far as `sched_period` (`SCHED_ATTR_SIZE_VER0`, 48 bytes).
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
    }
    // SAFETY: gettid takes no argument and cannot fail.
    let tid = unsafe { libc::gettid() };
    // getpriority returns -1 both for nice -1 and for an error: errno tells them apart.
    // SAFETY: errno is thread-local; setting it is how the call is meant to be checked.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: reads the nice value of this thread (a tid names a thread for PRIO_PROCESS).
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) };
    if nice == -1 {
        if let Some(error) = io::Error::last_os_error()
            .raw_os_error()
            .filter(|&e| e != 0)
        {
            return Err(io::Error::from_raw_os_error(error));
        }
    }
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime: TICK_SLICE.as_nanos() as u64,
        deadline: 0,
        period: 0,
    };
    // SAFETY: `attr` is a valid `sched_attr` of the size it states, which the kernel only
    // reads; pid 0 is the calling thread, and flags 0 asks for nothing else.
    let done = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Slices are asked for on Linux only.
#[cfg(not(target_os = "linux"))]
pub(crate) fn ask_short_slice() -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// The `SCHED_FIFO` priority of a real-time tick thread: the lowest, so every other real-time
/// thread on the machine still comes first.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) const PRIORITY: i32 = 1;

/// Moves the thread of `handle` (not yet joined) to `SCHED_FIFO` at [`PRIORITY`].
#[cfg(target_os = "linux")]
pub(crate) fn make_realtime<T>(handle: &JoinHandle<T>) -> io::Result<()> {
    use std::os::unix::thread::JoinHandleExt;
    let param = libc::sched_param {
        sched_priority: PRIORITY,
    };
    // SAFETY: `handle` is not joined, so its `pthread_t` names a thread that has not been
    // reclaimed (it may have ended; the call then fails or changes nothing), and `param` is a
    // valid `sched_param` for the call to read.
    let error =
        unsafe { libc::pthread_setschedparam(handle.as_pthread_t(), libc::SCHED_FIFO, &param) };
    match error {
        0 => Ok(()),
        error => Err(io::Error::from_raw_os_error(error)),
    }
}

/// Real-time scheduling is offered on Linux only.
#[cfg(not(target_os = "linux"))]
pub(crate) fn make_realtime<T>(_handle: &JoinHandle<T>) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The kernel's (major, minor) version.
    fn kernel() -> (u32, u32) {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (next(), next())
    }

    /// The calling thread's slice as the scheduler reports it, in nanoseconds.
    fn slice() -> Option<u64> {
        std::fs::read_to_string("/proc/thread-self/sched")
            .ok()?
            .lines()
            .find(|line| line.starts_with("se.slice"))?
            .split(':')
            .nth(1)?
            .trim()
            .parse()
            .ok()
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc")]
    fn a_thread_gets_the_short_slice_it_asks_for_and_keeps_its_nice_value() {
        std::thread::spawn(|| {
            // SAFETY: gettid takes no argument and cannot fail.
            let tid = unsafe { libc::gettid() } as libc::id_t;
            // SAFETY: sets this thread's own nice value (raising it needs no privilege).
            assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 5) }, 0);
            ask_short_slice().unwrap();
            // SAFETY: reads this thread's nice value.
            assert_eq!(unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) }, 5);
            if kernel() >= (6, 12) {
                assert_eq!(slice(), Some(TICK_SLICE.as_nanos() as u64));
            }
        })
        .join()
        .unwrap();
    }
}
