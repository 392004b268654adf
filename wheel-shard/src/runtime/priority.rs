//! Real-time priority for tick threads ([`Config::realtime_ticks`](crate::Config)).
//!
//! A tick thread needs a core for a short while each tick, on time. At normal priority it
//! waits for one behind whatever else that core runs: where the application keeps every core
//! busy (a producer scheduling flat out), that is a scheduler slice or more, milliseconds, and
//! the timers due meanwhile are that late (`docs/performance.md` has the measurement). Under
//! `SCHED_FIFO`, at [`PRIORITY`], the lowest real-time priority, a tick thread that wakes
//! takes its core from any normal thread at once.
//!
//! Why this is safe to offer: a tick thread runs no user code, and its work per tick is
//! bounded (`transfer_batch` commands, then what falls due); and Linux's real-time throttling
//! (by default 95 % of each second) keeps even a runaway real-time thread from taking a core
//! whole. Workers keep normal priority: they run user callbacks.

use std::io;
use std::thread::JoinHandle;

/// The `SCHED_FIFO` priority of a real-time tick thread: the lowest, so every other real-time
/// thread on the machine still comes first.
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
