//! [`ShutdownReport`] and [`RunningCallback`]: what a bounded shutdown
//! ([`TimerService::shutdown_timeout`](crate::TimerService::shutdown_timeout)) returns.

use std::time::Duration;

use crate::timer::{TimerId, Unfired};

/// What [`TimerService::shutdown_timeout`](crate::TimerService::shutdown_timeout) returns:
/// the timers that had not fired, handed back as [`TimerService::shutdown`] hands them back,
/// and the callbacks it stopped waiting for.
///
/// Named for what it is, the outcome of a shutdown, rather than `Shutdown`, which would read
/// as a handle to a shutdown in progress, and which a glob import of [`ScheduleError`]'s
/// variants (`ScheduleError::Shutdown`) would make ambiguous.
///
/// [`TimerService::shutdown`]: crate::TimerService::shutdown
/// [`ScheduleError`]: crate::ScheduleError
#[derive(Debug)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Every timer that had not fired, each exactly once over all shutdown calls: as
    /// [`TimerService::shutdown`](crate::TimerService::shutdown) returns them, and also those
    /// due already but queued behind a callback that was still running at the timeout (none
    /// of them runs later).
    pub unfired: Vec<Unfired>,
    /// The callbacks still running when the call stopped waiting, longest-running first. Their
    /// threads go on until the callbacks return, then exit without starting another; a
    /// repeating timer among them is not re-armed (the run is its last). Empty when every
    /// callback finished in time. The calling callback's own run, when the call comes from a
    /// callback, is not listed: the call never waits for it.
    ///
    /// A snapshot taken after the unfired timers were collected. One case escapes it: a worker
    /// that had just decided on a timer's record when the call gave up (a window of
    /// nanoseconds, unless the worker is preempted right there) starts that callback after
    /// the snapshot. The timer is then in neither list; it fires, and counts in
    /// [`Stats::fired`](crate::Stats::fired), so it still ends exactly once.
    pub still_running: Vec<RunningCallback>,
}

impl ShutdownReport {
    /// Whether the service stopped completely within the timeout: no callback was left
    /// running (but the calling callback's own, see [`ShutdownReport::still_running`]).
    pub fn is_complete(&self) -> bool {
        self.still_running.is_empty()
    }
}

/// A callback a bounded shutdown stopped waiting for (see [`ShutdownReport::still_running`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunningCallback {
    /// The timer whose callback it is.
    pub id: TimerId,
    /// How long it had been running when the shutdown looked (real time, also under a
    /// manual clock).
    pub running_for: Duration,
}
