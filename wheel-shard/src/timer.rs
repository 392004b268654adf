//! [`TimerId`] and [`Unfired`]: what callers hold of a timer.

use std::cell::Cell;
use std::fmt;
use std::time::Instant;

use crate::task::Task;

thread_local! {
    /// Set while this thread runs a handed-back timer's task ([`Unfired::run`]).
    static RUNNING_UNFIRED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is inside [`Unfired::run`]: a task that asks is running because
/// its caller said so after a shutdown, not because the service reached its deadline.
#[cfg(feature = "async")]
pub(crate) fn running_unfired() -> bool {
    RUNNING_UNFIRED.with(Cell::get)
}

/// Names one scheduled timer: the service that scheduled it, its shard, its slot in that
/// shard's table, and the slot's generation when it was scheduled. 16 bytes, `Copy`.
///
/// An id is only ever honoured by the service that handed it out, and only while its timer
/// lives:
/// - Every service has its own tag (a process-wide count of services started, 2^32 before
///   one repeats), so an id from another service is unknown to this one, whatever the slot.
/// - A slot's generation moves on every time a timer in it ends and is 48 bits wide: it
///   repeats only after 2^48 timers went through that one slot (89 years at 100 000 a second
///   through a single slot), so an id that outlived its timer keeps reporting that
///   (`cancel` → `false`, `reschedule` → `false`) even after the slot holds newer timers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId {
    service: u32,
    slot: u32,
    /// `shard << 48 | generation`.
    shard_gen: u64,
}

const GEN_BITS: u32 = crate::shard::GENERATION_BITS;

impl TimerId {
    pub(crate) fn new(service: u32, shard: usize, slot: u32, gen: u64) -> Self {
        debug_assert!(gen >> GEN_BITS == 0 && shard < 1 << (64 - GEN_BITS));
        TimerId {
            service,
            slot,
            shard_gen: (shard as u64) << GEN_BITS | gen,
        }
    }

    /// The shard that owns the timer.
    pub fn shard(&self) -> usize {
        (self.shard_gen >> GEN_BITS) as usize
    }

    pub(crate) fn service(&self) -> u32 {
        self.service
    }

    pub(crate) fn slot(&self) -> u32 {
        self.slot
    }

    /// The slot's generation when the timer was scheduled (48 bits).
    pub(crate) fn gen(&self) -> u64 {
        self.shard_gen & ((1 << GEN_BITS) - 1)
    }

    /// The `shard << 48 | generation` word, as [`TimerId::from_parts`] takes it.
    pub(crate) fn shard_gen(&self) -> u64 {
        self.shard_gen
    }

    /// The id of service `service` whose slot and `shard << 48 | generation` word are these
    /// (as a worker publishes its run, see `WorkerStats::publish_run`).
    pub(crate) fn from_parts(service: u32, slot: u32, shard_gen: u64) -> Self {
        TimerId {
            service,
            slot,
            shard_gen,
        }
    }
}

impl fmt::Debug for TimerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TimerId(s{}:{}:{}v{})",
            self.service,
            self.shard(),
            self.slot,
            self.gen()
        )
    }
}

/// A timer that had not fired when the service shut down, handed back to the caller.
///
/// The task is the caller's now: [`Unfired::run`] runs it on the calling thread and dropping
/// an `Unfired` drops it there, both outside the service's containment, so a panic in the
/// callback or in the task's `Drop` unwinds into the caller as any other call's would (the
/// closure's captures are dropped either way).
pub struct Unfired {
    /// The id `schedule` returned for it.
    pub id: TimerId,
    /// When it was due; a deadline past the 584 years of nanoseconds the service's time holds
    /// (one of `Duration::MAX`, say) reads as that end.
    pub deadline: Instant,
    pub(crate) task: Task,
}

impl Unfired {
    /// Runs the callback now, on this thread (a repeating timer runs once, and its closure is
    /// then dropped). The timer did not reach its deadline, so the futures of the `async`
    /// feature whose timer this is resolve as abandoned, as when it is dropped, never early.
    pub fn run(self) {
        /// Restores the flag as it was, also when the task panics (`run` may nest).
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                RUNNING_UNFIRED.with(|running| running.set(self.0));
            }
        }
        let _restore = Restore(RUNNING_UNFIRED.with(|running| running.replace(true)));
        self.task.run();
    }
}

impl fmt::Debug for Unfired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unfired")
            .field("id", &self.id)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}
