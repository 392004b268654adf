//! [`Shard`]: the part of a shard that every thread shares — its pending ring, its notice
//! queue, its timer table and the protocol that wakes its tick thread.
//!
//! Producers put new timers in the bounded ring. `cancel`, an earlier `reschedule` and workers
//! re-arming repeating timers leave a [`Notice`] in an unbounded queue instead: those calls have
//! already decided their outcome on the timer's state word, so they must not fail on a full ring,
//! and their number is bounded by the timers that exist.
//!
//! The tick thread publishes the tick it plans to wake at (`wake_at`) before it sleeps, then
//! looks at the ring once more; a producer pushes, then reads `wake_at` and unparks the thread
//! only when its deadline is earlier. Both sides use SeqCst, so at least one sees the other: a
//! wake-up is never lost, and a producer whose deadline is not earlier costs no syscall.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_deque::Injector;
use crossbeam_utils::CachePadded;

use crate::core::PendingLimit;
use crate::error::ScheduleError;
use crate::executor::Repeat;
use crate::job::{next_run, Armed, BoxedJob, NewTimer};
use crate::ring::{PendingRing, PushError};
use crate::table::TimerTable;

/// `wake_at` while the tick thread is awake: no producer needs to wake it.
const AWAKE: u64 = 0;
/// `wake_at` while it sleeps with nothing pending: any deadline wakes it.
pub(crate) const IDLE: u64 = u64::MAX;
/// A tick thread that sleeps longer than this is woken to free a cancelled timer's entry.
pub(crate) const CLEANUP_TICKS: u64 = 2;

/// Work for the tick thread that does not go through the ring.
pub(crate) enum Notice {
    /// Timer `(slot, gen)` was cancelled or moved earlier: look at its state word.
    Touch { slot: u32, gen: u32 },
    /// A repeating timer finished a run and is due again.
    Rearm(Armed),
}

pub(crate) struct Shard {
    pub(crate) index: usize,
    pub(crate) ring: PendingRing<NewTimer>,
    pub(crate) notices: Injector<Notice>,
    pub(crate) table: TimerTable,
    pub(crate) limit: Arc<PendingLimit>,
    wake_at: CachePadded<AtomicU64>,
    /// The tick at which the tick thread last planned its sleep.
    slept_at: AtomicU64,
    wake_requested: AtomicBool,
    /// Producers waiting for room in a full ring.
    waiters: CachePadded<AtomicUsize>,
    room_lock: Mutex<()>,
    room: Condvar,
    thread: OnceLock<Thread>,
    pub(crate) stop: AtomicBool,
    pub(crate) wakeups: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    /// Timers in the wheel, as the tick thread last published.
    pub(crate) in_wheel: AtomicUsize,
}

impl Shard {
    /// Shard `index`, with its `ring` made by the caller (a fallible allocation).
    pub(crate) fn new(index: usize, ring: PendingRing<NewTimer>, limit: Arc<PendingLimit>) -> Self {
        Shard {
            index,
            ring,
            notices: Injector::new(),
            table: TimerTable::new(),
            limit,
            wake_at: CachePadded::new(AtomicU64::new(AWAKE)),
            slept_at: AtomicU64::new(0),
            wake_requested: AtomicBool::new(false),
            waiters: CachePadded::new(AtomicUsize::new(0)),
            room_lock: Mutex::new(()),
            room: Condvar::new(),
            thread: OnceLock::new(),
            stop: AtomicBool::new(false),
            wakeups: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            in_wheel: AtomicUsize::new(0),
        }
    }

    pub(crate) fn set_thread(&self, thread: Thread) {
        let _ = self.thread.set(thread);
    }

    /// Puts a new timer in the ring, waiting up to `timeout` for room when it is full.
    ///
    /// Waiting producers sleep on a condition variable that the tick thread signals as it makes
    /// room, so they leave the CPU to it; and while anyone waits, newcomers queue behind them
    /// instead of taking the freed cells first, so no producer starves under a burst.
    pub(crate) fn push(&self, timer: NewTimer, timeout: Duration) -> Result<(), ScheduleError> {
        if timeout.is_zero() {
            return match self.ring.try_push(timer) {
                Ok(()) => Ok(()),
                Err(PushError::Closed(_)) => Err(ScheduleError::Shutdown),
                Err(PushError::Full(_)) => Err(ScheduleError::Saturated),
            };
        }
        let timer = if self.waiters.load(Ordering::SeqCst) == 0 {
            match self.ring.try_push(timer) {
                Ok(()) => return Ok(()),
                Err(PushError::Closed(_)) => return Err(ScheduleError::Shutdown),
                Err(PushError::Full(timer)) => timer,
            }
        } else {
            timer
        };
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = self.push_waiting(timer, Instant::now() + timeout);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    fn push_waiting(&self, mut timer: NewTimer, give_up: Instant) -> Result<(), ScheduleError> {
        let mut guard = self.room_lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            timer = match self.ring.try_push(timer) {
                Ok(()) => return Ok(()),
                Err(PushError::Closed(_)) => return Err(ScheduleError::Shutdown),
                Err(PushError::Full(timer)) => timer,
            };
            let now = Instant::now();
            if now >= give_up {
                return Err(ScheduleError::Saturated);
            }
            self.wake();
            // The tick thread signals as it makes room; the short cap only bounds a missed signal.
            let nap = (give_up - now).min(Duration::from_millis(1));
            guard = self
                .room
                .wait_timeout(guard, nap)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Tick thread, after taking from the ring: lets waiting producers in.
    pub(crate) fn signal_room(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.room_lock.lock().unwrap_or_else(|e| e.into_inner());
            self.room.notify_all();
        }
    }

    /// Tells the tick thread about `notice`; `due` is the tick by which it should act.
    pub(crate) fn notify(&self, notice: Notice, due: u64) {
        self.notices.push(notice);
        fence(Ordering::SeqCst);
        self.nudge(due);
    }

    /// Tells the tick thread about a cancel: it should free the entry within about a tick, so
    /// it is woken only when it went to sleep for longer than that. Reads no clock.
    pub(crate) fn notify_cleanup(&self, notice: Notice) {
        self.notices.push(notice);
        fence(Ordering::SeqCst);
        let wake_at = self.wake_at.load(Ordering::SeqCst);
        let slept_at = self.slept_at.load(Ordering::Relaxed);
        if wake_at != AWAKE
            && wake_at > slept_at.saturating_add(CLEANUP_TICKS)
            && !self.wake_requested.swap(true, Ordering::AcqRel)
        {
            self.unpark();
        }
    }

    /// Wakes the tick thread if it sleeps past tick `due`. Call after publishing the work.
    pub(crate) fn nudge(&self, due: u64) {
        if due < self.wake_at.load(Ordering::SeqCst)
            && !self.wake_requested.swap(true, Ordering::AcqRel)
        {
            self.unpark();
        }
    }

    /// Wakes the tick thread now.
    pub(crate) fn wake(&self) {
        self.wake_requested.store(true, Ordering::Release);
        self.unpark();
    }

    fn unpark(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Tick thread: it is awake and will look at everything queued.
    pub(crate) fn mark_awake(&self) {
        self.wake_at.store(AWAKE, Ordering::SeqCst);
        self.wake_requested.store(false, Ordering::Release);
    }

    /// Tick thread: at tick `now` it means to sleep until `tick` ([`IDLE`]: until woken).
    /// Returns `false` when work arrived meanwhile and it must not sleep; new timers in the
    /// ring count only when `ring_matters` (not when this tick's transfer budget is spent).
    pub(crate) fn plan_sleep(&self, now: u64, tick: u64, ring_matters: bool) -> bool {
        self.slept_at.store(now, Ordering::Relaxed);
        self.wake_at.store(tick.max(1), Ordering::SeqCst);
        (!ring_matters || self.ring.is_empty())
            && self.notices.is_empty()
            && !self.stop.load(Ordering::SeqCst)
    }

    /// Retires a slot whose timer was cancelled, counting it; the caller puts the slot back
    /// on the free list. (Its place under `max_pending` came free when `cancel` returned
    /// `true`.)
    pub(crate) fn retire_cancelled(&self, slot: u32) {
        if let Some(cell) = self.table.cell(slot) {
            cell.retire();
        }
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// A worker finished a run of a repeating timer: re-arm it for its next deadline, or end it
    /// when it was cancelled during the run or panicked.
    pub(crate) fn after_run(
        &self,
        repeat: Repeat,
        job: BoxedJob,
        deadline: u64,
        ok: bool,
        now: u64,
    ) {
        let Some(cell) = self.table.cell(repeat.slot) else {
            return;
        };
        let period = job.period().unwrap_or(1);
        if ok {
            let next = next_run(deadline, period, now);
            if cell.finish_run(repeat.gen, next) {
                let armed = Armed {
                    slot: repeat.slot,
                    gen: repeat.gen,
                    job,
                };
                self.notify(Notice::Rearm(armed), next);
                return;
            }
        }
        // Cancelled during the run (or it panicked, which ends a repeating timer as the JDK's
        // ScheduledThreadPoolExecutor does): no one else holds it, so it ends here.
        self.close_out(repeat.slot, repeat.gen);
    }

    /// Ends timer `(slot, gen)` outside the wheel: retires its slot, counting it as cancelled if
    /// it was. Returns whether it was still live (not cancelled).
    pub(crate) fn close_out(&self, slot: u32, gen: u32) -> bool {
        let Some(cell) = self.table.cell(slot) else {
            return false;
        };
        let live = cell.hand_back(gen);
        if live {
            self.limit.release();
        } else {
            self.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        self.table.recycle(slot, gen);
        live
    }
}
