//! `wheel-shard`: a sharded, multi-threaded timer service built on [`wheel_core::Wheel`].
//!
//! Millions of timeouts (request deadlines, idle checks, heartbeats, delayed retries) are spread
//! over shards, each a single-threaded hierarchical timing wheel; a tick thread drives one or
//! more shards' wheels ([`Config::tick_threads`]), and sleeps once a tick for all of them.
//! Callbacks run on a separate work-stealing executor, so a slow callback never stalls a tick.
//!
//! # Data flow of one timer
//!
//! A timer lives in one place, its **record**: 48 bytes holding its state word (with the ticket
//! of its live reference), its deadline, and its task (inline when the closure is at most 24
//! bytes). Everything else carries *references* — (deadline, slot): 16 bytes in the ring, 8 in
//! the wheel, whose arrays keep the deadline's low 32 bits; the low 8 are the ticket.
//!
//! ```text
//!  producer threads              shard i (one per core; a tick thread        executor
//!  ────────────────              drives every tick_threads-th shard)         ────────
//!  schedule(delay, task)
//!   │ deadline = ⌈now+delay⌉ tick
//!   │ shard = hash(thread seq)
//!   │ free slot from this thread's cache (batches of 256)
//!   │ arm the record: task, deadline, live reference, SCHEDULED
//!   ▼
//!  PendingRing (bounded MPSC) ─────▶ tick thread "wheel-tick-t"
//!   (deadline, slot)                  1. ≤ transfer_batch ring → Wheel
//!   full? wait ≤ saturation_          2. notices: place new references          ┌▶ worker "wheel-exec-k"
//!   timeout, then Saturated           3. due references → executor ───────────┤   claim on the record:
//!                                        (never reads a record)               │    stale → drop
//!  cancel(id): CAS on the record,     4. sleep until next due slot            │    postponed → notice
//!   task dropped here, record freed      (woken early by an earlier deadline) │    due → run the task
//!  reschedule(id): new deadline in                                            └▶ re-arm repeating ─┐
//!   the record (earlier: notice) ─────────────────────────────────────── notice ◀────────────────┘
//! ```
//!
//! # Guarantees
//!
//! - **Never early.** A deadline is rounded up to a whole tick and a tick thread rounds the
//!   clock down, so a callback starts at or after its deadline. How late it starts is recorded
//!   ([`Stats::lateness`]).
//! - **Exactly once.** Every accepted timer ends exactly once: it fires, is cancelled
//!   (`cancel` returned `true`), or comes back from [`TimerService::shutdown`] as [`Unfired`].
//!   A refused one is refused with an error, never dropped silently.
//! - **`cancel` is definitive.** `true` means the task will never run; the decision is one CAS
//!   on the timer's record against the worker's CAS to fire. For a repeating timer, `true`
//!   means no further run: one in progress (from its own callback, say) is its last. A pending
//!   timer ends at once: its task is dropped on the cancelling thread and its record is free
//!   for the next timer; the reference it leaves in the wheel is compacted away.
//! - **Ids are honoured only by their service, only while their timer lives.** A [`TimerId`]
//!   (16 bytes) carries its service's tag and its slot's 48-bit generation. An id from another
//!   service, or of a timer that ended, is unknown: `cancel` and `reschedule` return `false`
//!   and change nothing, whatever the slot holds now. A slot's generation repeats only after
//!   2^48 timers through that one slot (89 years at 100 000 a second), and a tag only after
//!   2^32 services started in one process.
//! - **Bounded waiting.** `schedule` never blocks for longer than
//!   [`Config::saturation_timeout`] (a full ring), then says [`ScheduleError::Saturated`];
//!   [`Config::max_pending`] is an exact global limit ([`ScheduleError::TooManyPending`]).
//! - **No lock, no shared counter on the schedule path** (without `max_pending`): the shard is
//!   chosen by hashing a per-thread sequence, the record comes from the thread's own cache of
//!   free slots (refilled once per 256 from the shard's bitmap of free records, in address
//!   order), the reference goes into a lock-free ring. The producer
//!   writes the whole record, which it prefetched a few schedules earlier; the tick thread
//!   never reads it, and the worker that runs the timer is the next to touch it.
//! - **Idle means asleep.** A tick thread sleeps until its wheels' next due slot, forever when
//!   they are empty; a producer wakes it only when its deadline is earlier than that.
//! - **A slow callback delays only itself**, while another worker is free: once a run has
//!   gone on for 100 µs (a callback that blocks, or its thread preempted), the timers its
//!   worker had taken in hand or queued go to other workers, which a tick thread wakes within
//!   about a tick. With every worker stuck (one worker, say), due timers wait for the first
//!   to come free. A panicking callback is counted ([`Stats::panicked`]), logged with
//!   `tracing`, and the service goes on.
//! - **User code is contained wherever it runs.** Besides the callback itself, a task's `Drop`
//!   runs where the service ends it (a cancelled task on the cancelling thread, a repeating
//!   task after its last run on a worker, unfired tasks when the last handle goes), and so does
//!   a panic payload's. A panic in any of them is caught, counted ([`Stats::drop_panics`]) and
//!   logged, and the thread goes on with nothing lost.
//! - **Clean shutdown.** `shutdown` (or dropping the last handle) stops the tick threads, lets
//!   the executor finish what it was handed, joins every thread and hands back what had not
//!   fired. It may be called from any thread, concurrently, and from a callback: a call from a
//!   callback cannot wait for its own run, so it waits for the other threads, hands back every
//!   other unfired timer and returns; a repeating timer whose callback called it is not
//!   re-armed, and its task is dropped when the run returns (see
//!   [`TimerService::shutdown`]). Where a stuck callback must not hold the stop up,
//!   [`TimerService::shutdown_timeout`] waits for running callbacks only so long: it then
//!   starts no further callback, hands back every unfired timer (those queued behind the stuck
//!   ones too, each still exactly once), names the callbacks still running
//!   ([`ShutdownReport`]) and leaves their threads to finish them.
//!
//! # Sleeping and waking
//!
//! Every thread of the service sleeps when it has nothing to do, and one verb, *wake*, says
//! that another thread makes it run again; what follows `wake_` says when:
//!
//! - a producer **wakes the tick thread for** its timer's deadline (`wake_for`) only when the
//!   thread plans to sleep past it; a cancel **wakes it for cleanup** (`wake_for_cleanup`)
//!   only when it sleeps for longer than a couple of ticks; a reschedule to an earlier
//!   deadline **posts** a notice, which wakes it for the new deadline the same way;
//! - a tick thread **wakes workers for** what it handed out (`wake_for_handed`) only when no
//!   worker is free, and looks again a tick later to **wake them for** references still
//!   **waiting** (`wake_for_waiting`: behind a stuck worker, or a backlog) — its *wake policy*;
//! - a worker whose runs start late, or a tick thread that leaves a memory chore, **wakes a
//!   helper** (`wake_helper`);
//! - `shutdown` wakes every thread to stop.
//!
//! A woken thread always looks at its queues before it sleeps again, so a wake-up is never
//! needed twice; the handshakes that keep one from being lost are the loom models of
//! `shard/wake.rs` and `executor/idle.rs`.
//!
//! # Virtual time
//!
//! [`TimerService::with_manual_clock`] builds a service whose time moves only by its
//! [`ManualClock`]: the same tick threads and executor run the timers, and
//! [`ManualClock::advance`] walks through every due deadline in order (the callbacks of one
//! tick complete before those of a later tick start, across shards) and returns once every
//! callback due by the new now has completed. Tests of timeout logic need no real sleeping.
//!
//! # Watching callbacks
//!
//! [`Stats::callback_time`] is the callbacks' run-time distribution, [`Stats::queue_delay`] how
//! long they waited for a worker after their tick thread handed them over (a busy executor, as
//! opposed to a late wheel), and [`Stats::slow_callbacks`] counts runs over
//! [`Config::slow_callback`], each also logged with `tracing` (rate-limited, naming the timer).
//!
//! # Example
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use wheel_shard::{Config, TimerService};
//!
//! let timers = TimerService::new(Config::default()).unwrap();
//! let fired = Arc::new(AtomicUsize::new(0));
//! let ids: Vec<_> = (0..1000)
//!     .map(|i| {
//!         let fired = Arc::clone(&fired);
//!         let delay = Duration::from_millis(i % 20);
//!         timers.schedule(delay, move || { fired.fetch_add(1, Ordering::Relaxed); }).unwrap()
//!     })
//!     .collect();
//! let idle = timers.schedule(Duration::from_secs(30), || {}).unwrap();
//! assert!(timers.reschedule(idle, Duration::from_secs(60))); // e.g. on traffic
//! while fired.load(Ordering::Relaxed) < ids.len() {
//!     std::thread::sleep(Duration::from_millis(5));
//! }
//! let unfired = timers.shutdown();
//! assert_eq!(unfired.len(), 1); // the idle check never came due
//! assert_eq!(timers.stats().fired, 1000);
//! ```

#![warn(missing_docs)]

/// The crate's own `README.md` (the one its package shows), whose example runs as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;

mod adapters;
mod clock;
mod config;
mod contain;
mod error;
mod executor;
mod memory;
mod runtime;
mod service;
mod shard;
mod shutdown;
mod stats;
mod stopwatch;
mod sync;
mod task;
mod timer;

#[cfg(feature = "async")]
pub use adapters::futures::{Elapsed, Sleep, Timeout, TimerError};
#[cfg(feature = "async")]
pub use adapters::interval::Interval;
pub use clock::InstantNanos;
pub use config::{limits, Config};
pub use error::{ConfigError, ScheduleError};
pub use executor::Durations;
pub use runtime::manual_clock::ManualClock;
pub use service::{TimerService, WeakTimerService};
pub use shutdown::{RunningCallback, ShutdownReport};
pub use stats::{Lateness, Stats};
pub use timer::{TimerId, Unfired};

/// The histogram type of [`Lateness::histogram`].
pub use hdrhistogram;

/// The README's Rust examples, compiled and run as doc tests so they cannot rot.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
