//! [`Record`]: one timer's 48 bytes — its state word (with the ticket of its live reference),
//! its deadline and its task — and the state machine every thread drives on it.
//!
//! ```text
//!            producer: arm                         worker: claim (one-shot)
//!   FREE ─────────────────────▶ SCHEDULED ───────────────────────────────▶ retired: FREE, gen+1
//!    ▲                            │  ▲  │ ╲  worker: claim (repeating)
//!    │ cancel() (takes the task)  │  │  │  ╲───────────────▶ RUNNING ── finish_run ──▶ SCHEDULED
//!    └────────────────────────────┘  │  │                      │   (at the deadline a reschedule()
//!         reschedule(): LOCKED bit ──┘  │                      │    during the run left, MOVED)
//!                                       │                      ▼ cancel(): the run is the last
//!                                       └─ shutdown's pass  CANCELLED ── finish_run ──▶ retired
//! ```
//!
//! Ground rules:
//! - The word packs `generation (48) | ticket (8) | flags (8)`. A `TimerId` carries the
//!   generation; every call with an id checks it, and retiring a record (its timer ended)
//!   moves it on, so an id that outlived its timer acts on nothing. It wraps after 2^48 timers
//!   through one record: 89 years at 100 000 a second through that one record.
//! - Whoever reads the deadline to decide, writes it, or moves the task in or out holds the
//!   LOCKED bit, taken with a CAS on the whole word; so `cancel` returning `true` and a worker
//!   firing the timer exclude each other, and no worker fires on a deadline a `reschedule` is
//!   replacing. A repeating timer's task is out of its record while RUNNING: the worker that
//!   runs it owns it, and a `cancel` then only marks the record CANCELLED. A `reschedule`
//!   during the run (from its own callback or elsewhere) writes the next run's deadline under
//!   the LOCKED bit and sets MOVED; `finish_run` takes the record's LOCKED bit too, and arms
//!   the next run at that deadline instead of the period's.
//! - What the wheel holds is a *reference*: (deadline, record). Its *ticket* is the low 8
//!   bits of its deadline, so the wheel stores nothing for it (a slot's array keeps those bits
//!   anyway). The record's word keeps the ticket of its one live reference; a new one is
//!   issued when the timer is armed, moved earlier, found postponed when its old deadline
//!   came, or re-armed after a run. A reference whose ticket is not the record's, or that finds
//!   the record not SCHEDULED, is stale and dropped: that is how cancelled and moved timers
//!   leave the wheel without the tick thread ever reading a record.
//! - Two references of one record can share a ticket (*twins*): a timer cancelled and its
//!   record armed again for a deadline a multiple of 256 ticks from the old one (the same tick
//!   included), or moved earlier to such a deadline. That is still safe: a worker fires only
//!   when the record's own deadline has passed, and only by winning the CAS, so the worst a
//!   stale twin does is fire a due timer at its deadline in place of the live reference, which
//!   then finds it gone, or find it postponed and issue the one live reference, after which
//!   the other is stale. What twins cost is a reference `retain` cannot drop early.
//! - A producer owns a FREE record it took from the free slots; the record's next timer gets
//!   the generation the record holds. Nothing else touches a FREE record: a stale reference
//!   reads its state and goes.
//! - Once armed, the record is open to stale twins before its own reference is queued: a
//!   twin due by then may fire the timer (a one-shot is retired, a repeating one runs and is
//!   re-armed later). A producer whose push is refused takes the timer back with `withdraw`
//!   only when it is still SCHEDULED at the generation and the deadline it armed; otherwise
//!   the timer ran, and the schedule succeeds (`schedule` returns its id). So a timer whose
//!   callback ran is never reported as refused.

use std::mem::MaybeUninit;

use crossbeam_utils::Backoff;

use crate::sync::{self, spin_wait, AtomicU64, Ordering, UnsafeCell};
use crate::task::{NewTask, Task};

const STATE: u64 = 0b111;
const FREE: u64 = 0;
const SCHEDULED: u64 = 1;
/// A repeating timer's run is in progress; its task is with the worker.
const RUNNING: u64 = 2;
/// A repeating timer was cancelled during a run: the worker ends it when the run returns.
const CANCELLED: u64 = 3;
const LOCKED: u64 = 1 << 3;
const REPEATING: u64 = 1 << 4;
/// A repeating timer's run is in progress and a `reschedule` set its next run's deadline in
/// the record: `finish_run` arms it there.
const MOVED: u64 = 1 << 5;
const TICKET_SHIFT: u32 = 8;
const TICKET: u64 = 0xff << TICKET_SHIFT;
/// The offset of a record's last byte: a record may straddle two cache lines.
const LAST_BYTE: usize = std::mem::size_of::<Record>() - 1;
const GENERATION_SHIFT: u32 = 16;
/// Bits of a record's generation: it wraps after 2^48 timers through one record.
pub(crate) const GENERATION_BITS: u32 = 48;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;

fn generation(word: u64) -> u64 {
    word >> GENERATION_SHIFT
}

fn with_state(word: u64, state: u64) -> u64 {
    (word & !STATE) | state
}

/// The word of a retired record: free, with the next generation.
fn retired(word: u64) -> u64 {
    (generation(word).wrapping_add(1) & GENERATION_MASK) << GENERATION_SHIFT
}

/// What tells a record's live reference from its stale ones (see the module doc).
pub(crate) type Ticket = u8;

/// The ticket of a reference due at `deadline`: the deadline's low 8 bits.
pub(crate) fn ticket_of(deadline: u64) -> Ticket {
    deadline as Ticket
}

fn ticket(word: u64) -> Ticket {
    (word >> TICKET_SHIFT) as Ticket
}

/// `word` naming the reference due at `deadline` as the live one.
fn with_ticket_for(word: u64, deadline: u64) -> u64 {
    (word & !TICKET) | u64::from(ticket_of(deadline)) << TICKET_SHIFT
}

/// Whether `word` is a pending timer whose live reference has `ticket`.
fn names(word: u64, ticket: Ticket) -> bool {
    word & STATE == SCHEDULED && self::ticket(word) == ticket
}

/// What a worker does with a reference the wheel handed out.
#[derive(Debug)]
pub(crate) enum Claim {
    /// The reference is not the record's live one, or the timer ended: drop it.
    Stale,
    /// The timer was postponed past `now`: place a new reference at `deadline`.
    Later { deadline: u64 },
    /// Run it: the timer of generation `gen` was due at `deadline`. A one-shot's record is
    /// retired already; a repeating one is RUNNING until [`Record::finish_run`].
    Fire {
        deadline: u64,
        gen: u64,
        task: Task,
        repeating: bool,
    },
}

/// What a `cancel` did.
#[derive(Debug)]
pub(crate) enum Cancelled {
    /// Nothing: the timer ran or is running (one-shot), was cancelled, or the id is stale.
    No,
    /// The timer ended here: the record is retired, and its task is the caller's to drop.
    Now(Task),
    /// A repeating timer's run is in progress: it is its last, and its worker ends it.
    DuringRun,
}

/// What a `shutdown_timeout`'s pass over the records found in one ([`Record::at_shutdown`]).
#[derive(Debug)]
pub(crate) enum AtShutdown {
    /// Nothing to do: the record is free, or its timer ends otherwise (cancelled during its
    /// run, say).
    Nothing,
    /// A pending timer, taken out and the record retired: its generation, deadline and task.
    Pending(u64, u64, Task),
    /// A repeating timer's run is in progress: it is now its last (the record CANCELLED, as a
    /// `cancel` during the run leaves it), and its worker ends the timer when it returns.
    RunEnds,
}

/// What a successful `reschedule` needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moved {
    /// Later (or the same): the live reference finds the new deadline when it comes.
    Later,
    /// Earlier: a new reference at the new deadline goes to the tick thread.
    Earlier,
    /// A repeating timer's run is in progress: its next run is armed at the new deadline
    /// when the run returns (by the worker, which places its reference then).
    NextRun,
}

/// One timer's record (see the module doc). 48 bytes, 16-byte aligned: four records to three
/// cache lines, so half of them straddle two (see docs/performance.md for what that costs).
#[cfg_attr(not(loom), repr(C, align(16)))]
pub(crate) struct Record {
    word: AtomicU64,
    deadline: AtomicU64,
    task: UnsafeCell<MaybeUninit<Task>>,
}

// SAFETY: the task is moved in and out only by the thread that holds the record (a producer
// owning a FREE record, or the holder of the LOCKED bit, or the worker of a RUNNING timer),
// and the word's Release/Acquire hand-over orders those accesses; `Task` is `Send`.
unsafe impl Sync for Record {}
// SAFETY: as above.
unsafe impl Send for Record {}

impl Default for Record {
    fn default() -> Self {
        Record::new()
    }
}

impl Record {
    pub(crate) fn new() -> Self {
        Record {
            word: AtomicU64::new(FREE),
            deadline: AtomicU64::new(0),
            task: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Writes the record without changing it, so that the page it lies on is resident (a
    /// zeroed page that was only read would map the kernel's shared zero page). A
    /// compare-exchange, because the compiler turns an idempotent read-modify-write such as
    /// `fetch_or(0)` into a plain load, which would fault in nothing; the record may be live
    /// (a racing claim), and a compare-exchange of the word with itself changes nothing.
    pub(crate) fn fault_in(&self) {
        let word = self.word.load(Ordering::Relaxed);
        let _ = self
            .word
            .compare_exchange(word, word, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// A fresh record whose first timer gets generation `gen` (tests of the wrap-around).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn at_generation(gen: u64) -> Self {
        let record = Record::new();
        record.word.store(
            (gen & GENERATION_MASK) << GENERATION_SHIFT,
            Ordering::Relaxed,
        );
        record
    }

    /// The record's generation: its timer's, or the next timer's while it is free.
    #[cfg(test)]
    pub(crate) fn generation(&self) -> u64 {
        generation(self.word.load(Ordering::Acquire))
    }

    /// The deadline the record was last armed or moved to. A hint only, unless the caller
    /// holds the record: [`TimerTable::release`](super::TimerTable::release) reads it to
    /// find the deadline group a slot came from.
    pub(crate) fn last_deadline(&self) -> u64 {
        self.deadline.load(Ordering::Relaxed)
    }

    /// Producer, on a FREE record it owns: makes it a SCHEDULED timer due at `deadline`.
    /// Returns the timer's generation (for its id) and the ticket of its first reference.
    #[inline(always)]
    pub(crate) fn arm(&self, deadline: u64, task: impl NewTask) -> (u64, Ticket) {
        let word = self.word.load(Ordering::Acquire);
        debug_assert_eq!(word & (STATE | LOCKED), FREE, "armed a record in use");
        let flags = if task.repeats() { REPEATING } else { 0 };
        // SAFETY: a FREE record belongs to the producer that took it from the free slots;
        // its previous task was moved out before it was retired (Release, seen by the
        // Acquire above).
        self.task
            .with_mut(|slot| task.build_in(unsafe { &mut *slot }));
        self.deadline.store(deadline, Ordering::Relaxed);
        let armed = with_ticket_for(with_state(word, SCHEDULED) | flags, deadline);
        self.word.store(armed, Ordering::Release);
        (generation(word), ticket_of(deadline))
    }

    /// Producer: undoes an `arm` at `deadline` whose reference never reached the ring (so no
    /// id got out): the record is FREE again at the same generation and the task comes back.
    /// `None` when a stale twin of an earlier timer in this record took the timer meanwhile
    /// (see the module doc): a one-shot it fired is retired (a new generation), a repeating
    /// one is running, or ran and was re-armed at a later deadline; the timer then counts as
    /// scheduled.
    pub(crate) fn withdraw(&self, gen: u64, deadline: u64) -> Option<Task> {
        let word = self.lock_if(|word| generation(word) == gen && word & STATE == SCHEDULED)?;
        if self.deadline.load(Ordering::Relaxed) != deadline {
            // A run re-armed it: only `finish_run` moves an armed deadline before an id is out,
            // and always later.
            self.word.store(word, Ordering::Release);
            return None;
        }
        let task = self.take_task();
        self.word
            .store(word & !(STATE | REPEATING), Ordering::Release);
        Some(task)
    }

    /// Takes the LOCKED bit once the word is unlocked and `wanted` holds of it; `None` when
    /// `wanted` fails. Returns the word as it was (unlocked).
    fn lock_if(&self, wanted: impl Fn(u64) -> bool) -> Option<u64> {
        let backoff = Backoff::new();
        loop {
            let word = self.word.load(Ordering::Acquire);
            if !wanted(word) {
                return None;
            }
            if word & LOCKED != 0 {
                spin_wait(&backoff);
                continue;
            }
            if self
                .word
                .compare_exchange(word, word | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Some(word);
            }
        }
    }

    /// Moves the task out. The caller holds the record (see the module doc).
    fn take_task(&self) -> Task {
        // SAFETY: a SCHEDULED (or held RUNNING/CANCELLED) record holds its task, and the
        // caller holds the record, so no one else reads or writes the slot; the caller
        // changes the state so the task is never taken twice.
        self.task
            .with_mut(|slot| unsafe { (*slot).assume_init_read() })
    }

    /// Puts the task back. The caller holds the record and it holds no task.
    fn put_task(&self, task: Task) {
        // SAFETY: as in `take_task`; the slot is empty, so nothing is overwritten unread.
        self.task.with_mut(|slot| unsafe { (*slot).write(task) });
    }

    /// Stops the timer of generation `gen` (see [`Cancelled`]).
    pub(crate) fn cancel(&self, gen: u64) -> Cancelled {
        let backoff = Backoff::new();
        loop {
            let word = self.word.load(Ordering::Acquire);
            if generation(word) != gen {
                return Cancelled::No;
            }
            if word & LOCKED != 0 {
                spin_wait(&backoff);
                continue;
            }
            match word & STATE {
                SCHEDULED => {
                    if self
                        .word
                        .compare_exchange(word, word | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        let task = self.take_task();
                        self.word.store(retired(word), Ordering::Release);
                        return Cancelled::Now(task);
                    }
                }
                RUNNING => {
                    if self
                        .word
                        .compare_exchange(
                            word,
                            with_state(word, CANCELLED),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok()
                    {
                        return Cancelled::DuringRun;
                    }
                }
                _ => return Cancelled::No,
            }
        }
    }

    /// Moves the pending timer of generation `gen` to `deadline`, or a repeating timer's next
    /// run while one is in progress; `None` when it is neither (it ran or a one-shot is
    /// running, it was cancelled, or the id is stale).
    pub(crate) fn reschedule(&self, gen: u64, deadline: u64) -> Option<Moved> {
        let word = self.lock_if(|word| {
            generation(word) == gen && matches!(word & STATE, SCHEDULED | RUNNING)
        })?;
        if word & STATE == RUNNING {
            // The run's own deadline is the worker's copy: the field is free for the next.
            self.deadline.store(deadline, Ordering::Relaxed);
            self.word.store(word | MOVED, Ordering::Release);
            return Some(Moved::NextRun);
        }
        let old = self.deadline.load(Ordering::Relaxed);
        self.deadline.store(deadline, Ordering::Relaxed);
        let (word, moved) = if deadline < old {
            (with_ticket_for(word, deadline), Moved::Earlier)
        } else {
            (word, Moved::Later)
        };
        self.word.store(word, Ordering::Release);
        Some(moved)
    }

    /// A worker's decision on a reference with ticket `ticket` that the wheel handed out when
    /// its clock read `now` (a tick that has begun).
    pub(crate) fn claim(&self, ticket: Ticket, now: u64) -> Claim {
        let Some(word) = self.lock_live(ticket) else {
            return Claim::Stale;
        };
        let deadline = self.deadline.load(Ordering::Relaxed);
        if deadline > now {
            self.word
                .store(with_ticket_for(word, deadline), Ordering::Release);
            return Claim::Later { deadline };
        }
        let task = self.take_task();
        let repeating = word & REPEATING != 0;
        let next = if repeating {
            with_state(word, RUNNING)
        } else {
            retired(word)
        };
        self.word.store(next, Ordering::Release);
        Claim::Fire {
            deadline,
            gen: generation(word),
            task,
            repeating,
        }
    }

    /// After a repeating timer's run: puts its task back and schedules its next run at
    /// `deadline` (the period's), or where a `reschedule` during the run moved it, returning
    /// the deadline the new reference is due at; or, when it was cancelled during the run,
    /// retires the record and gives the task back to be dropped.
    pub(crate) fn finish_run(&self, gen: u64, deadline: u64, task: Task) -> Result<u64, Task> {
        // RUNNING belongs to this worker; a cancel or a reschedule may change the word
        // meanwhile, each holding the LOCKED bit or with a CAS, so the worker takes the bit
        // too before it reads the deadline (a moved one) and publishes the task.
        let Some(word) = self.lock_if(|word| word & STATE == RUNNING) else {
            // CANCELLED: the record is still this worker's, and nothing else changes it.
            let word = self.word.load(Ordering::Acquire);
            debug_assert_eq!((generation(word), word & STATE), (gen, CANCELLED));
            self.word.store(retired(word), Ordering::Release);
            return Err(task);
        };
        debug_assert_eq!(generation(word), gen);
        let deadline = match word & MOVED {
            0 => deadline,
            _ => self.deadline.load(Ordering::Relaxed),
        };
        self.put_task(task);
        self.deadline.store(deadline, Ordering::Relaxed);
        let armed = with_ticket_for(with_state(word & !MOVED, SCHEDULED), deadline);
        self.word.store(armed, Ordering::Release);
        Ok(deadline)
    }

    /// Ends a repeating timer whose run the worker holds without re-arming it (it panicked, or
    /// the service has shut down). Returns whether a `cancel` came first (and counted it).
    pub(crate) fn end_run(&self, gen: u64) -> bool {
        // The bit as `finish_run` takes it: a reschedule of the next run may hold it, and a
        // cancel may turn RUNNING into CANCELLED meanwhile; nothing else changes the word.
        let word = self.lock_if(|word| matches!(word & STATE, RUNNING | CANCELLED));
        debug_assert!(word.is_some(), "a run in progress is its worker's to end");
        let Some(word) = word else {
            return false;
        };
        debug_assert_eq!(generation(word), gen);
        self.word.store(retired(word), Ordering::Release);
        word & STATE == CANCELLED
    }

    /// Whether a reference of ticket `ticket` is the record's live one (a snapshot: a
    /// reference found stale may look live again only as the twin of a later one, see the
    /// module doc).
    pub(crate) fn is_live(&self, ticket: Ticket) -> bool {
        names(self.word.load(Ordering::Acquire), ticket)
    }

    /// Takes the LOCKED bit for the live reference of ticket `ticket`; `None` when that
    /// reference is stale. Returns the word as it was (unlocked).
    fn lock_live(&self, ticket: Ticket) -> Option<u64> {
        self.lock_if(|word| names(word, ticket))
    }

    /// At shutdown, without a reference: the timer pending in this record, taken out and
    /// retired — its generation, deadline and task — or `None` when it holds none pending.
    pub(crate) fn hand_back_pending(&self) -> Option<(u64, u64, Task)> {
        let word = self.lock_if(|word| word & STATE == SCHEDULED)?;
        Some(self.take_back(word))
    }

    /// At a shutdown that gave up waiting for its workers, without a reference: takes back
    /// the timer pending in this record, or makes a repeating timer's run in progress its last
    /// (see [`AtShutdown`]).
    ///
    /// Unlike [`Record::hand_back_pending`], it waits out the LOCKED bit whatever the state: a
    /// worker whose run has just returned holds it over a RUNNING record while it re-arms the
    /// timer (`finish_run`), and the pass must then find the timer SCHEDULED and take it, not
    /// pass it by as running and leave it armed behind the shutdown. Either the worker's
    /// `finish_run` takes the bit first, and the pass finds the re-armed timer; or the pass
    /// marks the record first, and `finish_run` ends the timer.
    pub(crate) fn at_shutdown(&self) -> AtShutdown {
        let backoff = Backoff::new();
        loop {
            let word = self.word.load(Ordering::Acquire);
            if word & LOCKED != 0 {
                spin_wait(&backoff);
                continue;
            }
            match word & STATE {
                SCHEDULED => {
                    if self
                        .word
                        .compare_exchange(word, word | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        let (gen, deadline, task) = self.take_back(word);
                        return AtShutdown::Pending(gen, deadline, task);
                    }
                }
                RUNNING => {
                    if self
                        .word
                        .compare_exchange(
                            word,
                            with_state(word, CANCELLED),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok()
                    {
                        return AtShutdown::RunEnds;
                    }
                }
                _ => return AtShutdown::Nothing,
            }
        }
    }

    /// Takes the task out of the record held with `word` and retires it: its generation,
    /// deadline and task.
    fn take_back(&self, word: u64) -> (u64, u64, Task) {
        let deadline = self.deadline.load(Ordering::Relaxed);
        let task = self.take_task();
        self.word.store(retired(word), Ordering::Release);
        (generation(word), deadline, task)
    }

    /// Starts loading the record into this core's cache (a hint: no fault, no effect): both of
    /// its lines when it straddles two.
    pub(crate) fn prefetch(&self) {
        let first = (self as *const Record).cast::<u8>();
        sync::prefetch(first);
        sync::prefetch(first.wrapping_add(LAST_BYTE));
    }

    /// Starts loading the record into this core's cache to be written (a hint, as
    /// [`Record::prefetch`]).
    pub(crate) fn prefetch_for_write(&self) {
        let first = (self as *const Record).cast::<u8>();
        sync::prefetch_for_write(first);
        sync::prefetch_for_write(first.wrapping_add(LAST_BYTE));
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let word = self.word.load(Ordering::Relaxed);
        if matches!(word & STATE, SCHEDULED) {
            // A timer nobody handed back (the service is going away): drop its task.
            drop(self.take_task());
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering as O};
    use std::sync::Arc;

    fn counter() -> (Arc<AtomicUsize>, Task) {
        let runs = Arc::new(AtomicUsize::new(0));
        let task = {
            let runs = Arc::clone(&runs);
            Task::once(move || {
                runs.fetch_add(1, O::SeqCst);
            })
        };
        (runs, task)
    }

    fn fire(claim: Claim) -> (u64, u64) {
        match claim {
            Claim::Fire {
                deadline,
                gen,
                task,
                ..
            } => {
                task.run();
                (deadline, gen)
            }
            other => panic!("expected a fire, got {other:?}"),
        }
    }

    #[test]
    fn a_record_is_48_bytes() {
        assert_eq!(std::mem::size_of::<Record>(), 48);
        assert_eq!(std::mem::align_of::<Record>(), 16);
    }

    #[test]
    fn the_ticket_lives_in_the_word_beside_the_generation() {
        let record = Record::at_generation(GENERATION_MASK);
        let (gen, ticket) = record.arm(0x1234_5678_9abc, Task::once(|| {}));
        assert_eq!((gen, ticket), (GENERATION_MASK, 0xbc));
        assert!(record.is_live(0xbc) && !record.is_live(0xbd));
        assert_eq!(
            record.generation(),
            GENERATION_MASK,
            "untouched by the ticket"
        );
        assert_eq!(
            record.reschedule(gen, 0x1234_5678_9a01),
            Some(Moved::Earlier)
        );
        assert!(record.is_live(0x01) && !record.is_live(0xbc));
    }

    /// The table hands out zeroed memory as fresh records: `new` must write nothing but zeros
    /// (the task's bytes are uninitialized either way).
    #[test]
    fn a_fresh_record_is_all_zeros() {
        let record = Record::new();
        assert_eq!(FREE, 0);
        assert_eq!(record.word.load(Ordering::Relaxed), 0);
        assert_eq!(record.deadline.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn one_shot_lifecycle() {
        let record = Record::new();
        let (runs, task) = counter();
        let (gen, ticket) = record.arm(10, task);
        assert_eq!(ticket, ticket_of(10));
        assert_eq!(record.reschedule(gen, 20), Some(Moved::Later));
        assert!(matches!(
            record.claim(ticket, 10),
            Claim::Later { deadline: 20 }
        ));
        assert!(
            matches!(record.claim(ticket, 10), Claim::Stale),
            "the Later issued a new reference"
        );
        assert_eq!(fire(record.claim(ticket_of(20), 20)), (20, gen));
        assert_eq!(runs.load(O::SeqCst), 1);
        assert!(matches!(record.cancel(gen), Cancelled::No), "fired: stale");
        assert_eq!(record.reschedule(gen, 30), None);
        assert_eq!(record.generation(), gen + 1, "retired");
        assert!(matches!(record.claim(ticket_of(20), 20), Claim::Stale));
    }

    /// A timer cancelled and its record armed again for the same tick: the old reference is
    /// the new one's twin and may fire it, at its deadline and once.
    #[test]
    fn a_twin_reference_fires_the_new_timer_once_and_on_time() {
        let record = Record::new();
        let (_, task) = counter();
        let (gen, old) = record.arm(10, task);
        let Cancelled::Now(task) = record.cancel(gen) else {
            panic!("pending")
        };
        drop(task);
        let (runs, task) = counter();
        let (next, new) = record.arm(10, task);
        assert_eq!((next, old), (gen + 1, new), "twins");
        assert_eq!(fire(record.claim(old, 10)), (10, gen + 1));
        assert!(matches!(record.claim(new, 10), Claim::Stale), "once");
        assert_eq!(runs.load(O::SeqCst), 1);
    }

    #[test]
    fn cancel_wins_once_and_hands_the_task_over() {
        let record = Record::new();
        let (runs, task) = counter();
        let (gen, ticket) = record.arm(10, task);
        let Cancelled::Now(task) = record.cancel(gen) else {
            panic!("pending: cancellable")
        };
        drop(task);
        assert!(matches!(record.cancel(gen), Cancelled::No));
        assert!(matches!(record.claim(ticket, 10), Claim::Stale));
        assert!(record.hand_back_pending().is_none());
        assert_eq!(runs.load(O::SeqCst), 0);
        assert_eq!(record.generation(), gen + 1);
    }

    #[test]
    fn earlier_reschedules_issue_a_new_reference_and_later_ones_do_not() {
        let record = Record::new();
        let (_, task) = counter();
        let (gen, first) = record.arm(10, task);
        assert_eq!(record.reschedule(gen, 30), Some(Moved::Later));
        assert_eq!(record.reschedule(gen, 3), Some(Moved::Earlier));
        assert!(matches!(record.claim(first, 10), Claim::Stale));
        assert_eq!(fire(record.claim(ticket_of(3), 3)).0, 3);
    }

    #[test]
    fn repeating_runs_rearm_and_end_on_a_cancel_during_the_run() {
        let record = Record::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let task = {
            let runs = Arc::clone(&runs);
            Task::every(
                move || {
                    runs.fetch_add(1, O::SeqCst);
                },
                5,
            )
        };
        let (gen, ticket) = record.arm(5, task);
        let Claim::Fire {
            mut task,
            repeating: true,
            ..
        } = record.claim(ticket, 5)
        else {
            panic!("due")
        };
        assert!(
            matches!(record.claim(ticket, 5), Claim::Stale),
            "running: not again"
        );
        task.run_again();
        let next = record.finish_run(gen, 10, task).expect("re-armed");
        assert_eq!(next, 10);
        let Claim::Fire { mut task, .. } = record.claim(ticket_of(next), 10) else {
            panic!("due again")
        };
        assert!(matches!(record.cancel(gen), Cancelled::DuringRun));
        assert!(matches!(record.cancel(gen), Cancelled::No), "once");
        task.run_again();
        assert!(record.finish_run(gen, 15, task).is_err(), "cancelled: ends");
        assert_eq!(runs.load(O::SeqCst), 2);
        assert_eq!(record.generation(), gen + 1);
    }

    /// A reschedule during a repeating timer's run moves the next run there, whatever the
    /// period says; the runs after it keep the period from the moved one, and a cancel after
    /// the move still ends the timer at its run's end.
    #[test]
    fn a_reschedule_during_a_run_moves_the_next_run() {
        let record = Record::new();
        let (gen, ticket) = record.arm(5, Task::every(|| {}, 5));
        let Claim::Fire { task, .. } = record.claim(ticket, 5) else {
            panic!("due")
        };
        assert_eq!(record.reschedule(gen, 40), Some(Moved::NextRun));
        assert_eq!(
            record.reschedule(gen, 30),
            Some(Moved::NextRun),
            "the last wins"
        );
        assert_eq!(record.finish_run(gen, 10, task).ok(), Some(30));
        assert!(matches!(record.claim(ticket_of(10), 10), Claim::Stale));
        let Claim::Fire { task, deadline, .. } = record.claim(ticket_of(30), 30) else {
            panic!("due at the moved deadline")
        };
        assert_eq!(deadline, 30);
        assert_eq!(
            record.finish_run(gen, 35, task).ok(),
            Some(35),
            "not moved again"
        );
        let Claim::Fire { task, .. } = record.claim(ticket_of(35), 35) else {
            panic!("due")
        };
        assert_eq!(record.reschedule(gen, 99), Some(Moved::NextRun));
        assert!(matches!(record.cancel(gen), Cancelled::DuringRun));
        assert_eq!(record.reschedule(gen, 98), None, "cancelled");
        assert!(record.finish_run(gen, 40, task).is_err());
        assert_eq!(record.generation(), gen + 1);
        assert_eq!(record.reschedule(gen, 97), None, "ended");
    }

    #[test]
    fn withdraw_then_hand_back() {
        let record = Record::new();
        let (_, task) = counter();
        let (gen, _) = record.arm(10, task);
        assert!(record.withdraw(gen, 10).is_some());
        assert_eq!(record.generation(), gen, "no id got out: same generation");
        let (_, task) = counter();
        let (again, ticket) = record.arm(7, task);
        assert_eq!(again, gen);
        assert!(matches!(record.claim(ticket_of(10), 10), Claim::Stale));
        let (handed, deadline, _task) = record.hand_back_pending().expect("live");
        assert_eq!((handed, deadline), (gen, 7));
        assert!(matches!(record.claim(ticket, 7), Claim::Stale), "retired");
        assert_eq!(record.generation(), gen + 1);
    }

    /// Without a reference: only a pending timer comes back, whatever its live ticket; a free
    /// record, one running or one cancelled stays as it is.
    #[test]
    fn hand_back_pending_takes_only_a_pending_timer() {
        let record = Record::new();
        assert!(record.hand_back_pending().is_none(), "free");
        let (_, task) = counter();
        let (gen, _) = record.arm(10, task);
        assert!(
            record.reschedule(gen, 3).is_some(),
            "moved earlier: a new ticket"
        );
        let (handed, deadline, _task) = record.hand_back_pending().expect("pending");
        assert_eq!((handed, deadline), (gen, 3));
        assert_eq!(record.generation(), gen + 1, "retired");
        assert!(record.hand_back_pending().is_none(), "once");
        let (gen, ticket) = record.arm(5, Task::every(|| {}, 1));
        let Claim::Fire { task, .. } = record.claim(ticket, 5) else {
            panic!("due at 5");
        };
        assert!(record.hand_back_pending().is_none(), "running");
        assert!(matches!(record.cancel(gen), Cancelled::DuringRun));
        assert!(
            record.hand_back_pending().is_none(),
            "cancelled during its run"
        );
        assert!(record.finish_run(gen, 6, task).is_err());
    }

    /// A shutdown that gave up on its workers takes back a pending timer and makes a run in
    /// progress the last: the run's end then retires the record instead of re-arming it.
    #[test]
    fn at_shutdown_takes_a_pending_timer_and_ends_a_running_one() {
        let record = Record::new();
        assert!(matches!(record.at_shutdown(), AtShutdown::Nothing), "free");
        let (_, task) = counter();
        let (gen, _) = record.arm(10, task);
        let AtShutdown::Pending(handed, deadline, _task) = record.at_shutdown() else {
            panic!("pending")
        };
        assert_eq!((handed, deadline), (gen, 10));
        assert_eq!(record.generation(), gen + 1, "retired");
        assert!(matches!(record.at_shutdown(), AtShutdown::Nothing), "once");

        let (gen, ticket) = record.arm(5, Task::every(|| {}, 1));
        let Claim::Fire { task, .. } = record.claim(ticket, 5) else {
            panic!("due at 5");
        };
        assert!(matches!(record.at_shutdown(), AtShutdown::RunEnds));
        assert!(matches!(record.at_shutdown(), AtShutdown::Nothing), "once");
        assert!(matches!(record.cancel(gen), Cancelled::No), "ended already");
        assert!(record.finish_run(gen, 6, task).is_err(), "not re-armed");
        assert_eq!(record.generation(), gen + 1, "retired by its worker");

        // Re-armed before the pass came: taken back as pending.
        let (gen, ticket) = record.arm(5, Task::every(|| {}, 1));
        let Claim::Fire { task, .. } = record.claim(ticket, 5) else {
            panic!("due at 5");
        };
        assert_eq!(record.finish_run(gen, 6, task).ok(), Some(6));
        assert!(matches!(
            record.at_shutdown(),
            AtShutdown::Pending(g, 6, _) if g == gen
        ));
    }

    #[test]
    fn generations_are_48_bits_and_wrap_only_there() {
        let record = Record::at_generation(GENERATION_MASK);
        let (_, task) = counter();
        let (gen, ticket) = record.arm(1, task);
        assert_eq!(gen, GENERATION_MASK);
        let _ = fire(record.claim(ticket, 1));
        assert_eq!(record.generation(), 0, "the wrap is at 2^48");
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    fn armed(repeating: bool) -> (Arc<Record>, u64, Ticket) {
        let record = Arc::new(Record::new());
        let task = if repeating {
            Task::every(|| {}, 5)
        } else {
            Task::once(|| {})
        };
        let (gen, ticket) = record.arm(5, task);
        (record, gen, ticket)
    }

    /// Runs `f` on the record on a thread of the model.
    fn on_thread<R: Send + 'static>(
        record: &Arc<Record>,
        f: impl FnOnce(&Record) -> R + Send + 'static,
    ) -> thread::JoinHandle<R> {
        let record = Arc::clone(record);
        thread::spawn(move || f(&record))
    }

    /// A repeating timer armed at 5 and claimed there: its run in progress, the task with
    /// the worker.
    fn running() -> (Arc<Record>, u64, Task) {
        let (record, gen, ticket) = armed(true);
        let Claim::Fire { task, .. } = record.claim(ticket, 5) else {
            panic!("due")
        };
        (record, gen, task)
    }

    /// A producer's refused push withdraws a repeating timer while a stale twin (an earlier
    /// timer's reference with the same ticket) fires it and re-arms it: the withdraw succeeds
    /// only if no run began, so a timer reported as refused never ran.
    #[test]
    fn withdraw_versus_a_stale_twin_s_run() {
        loom::model(|| {
            let (record, gen, ticket) = armed(true);
            let worker = on_thread(&record, move |record| match record.claim(ticket, 5) {
                Claim::Fire { task, .. } => {
                    let _ = record.finish_run(gen, 10, task);
                    true
                }
                _ => false,
            });
            let withdrawn = record.withdraw(gen, 5).is_some();
            let ran = worker.join().unwrap();
            assert!(withdrawn != ran, "withdrawn={withdrawn} ran={ran}");
        });
    }

    /// cancel races a worker's claim: exactly one of "cancel returned true" and "fired".
    #[test]
    fn cancel_versus_fire() {
        loom::model(|| {
            let (record, gen, ticket) = armed(false);
            let canceller = on_thread(&record, move |record| {
                !matches!(record.cancel(gen), Cancelled::No)
            });
            let fired = matches!(record.claim(ticket, 5), Claim::Fire { .. });
            let cancelled = canceller.join().unwrap();
            assert!(fired != cancelled, "fired={fired} cancelled={cancelled}");
            assert_eq!(record.generation(), gen + 1, "retired exactly once");
        });
    }

    /// reschedule races a worker's claim: a successful reschedule means the timer did not
    /// fire on its old deadline; a failed one means it fired.
    #[test]
    fn reschedule_versus_fire() {
        loom::model(|| {
            let (record, gen, ticket) = armed(false);
            let rescheduler =
                on_thread(&record, move |record| record.reschedule(gen, 100).is_some());
            let claim = record.claim(ticket, 5);
            let moved = rescheduler.join().unwrap();
            match claim {
                Claim::Fire { deadline, .. } => {
                    assert_eq!(deadline, 5);
                    assert!(!moved, "fired, yet the reschedule reported success");
                }
                Claim::Later { deadline, .. } => {
                    assert!(moved);
                    assert_eq!(deadline, 100);
                }
                Claim::Stale => panic!("the only reference went stale"),
            }
        });
    }

    /// Two reschedules race: they take turns, and the one that goes earlier than the deadline
    /// it found issues the only live reference, at the final deadline or later.
    #[test]
    fn reschedule_versus_reschedule() {
        loom::model(|| {
            let (record, gen, first) = armed(false);
            let other = on_thread(&record, move |record| record.reschedule(gen, 3));
            let mine = record.reschedule(gen, 100);
            let other = other.join().unwrap();
            // 100 is later than both 5 and 3; 3 is earlier than both 5 and 100, so it always
            // issues the one live reference, whichever went first.
            let (Some(Moved::Later), Some(Moved::Earlier)) = (mine, other) else {
                panic!("unexpected {mine:?} {other:?}")
            };
            assert!(matches!(record.claim(first, 100), Claim::Stale));
            match record.claim(ticket_of(3), 100) {
                Claim::Fire { deadline, .. } => assert!(deadline == 3 || deadline == 100),
                other => panic!("the newest reference is live and due: {other:?}"),
            }
        });
    }

    /// cancel races a repeating timer's run and re-arm: a successful cancel means no run
    /// starts after it, and the timer ends exactly once.
    #[test]
    fn cancel_versus_run_and_rearm() {
        loom::model(|| {
            let (record, gen, ticket) = armed(true);
            let canceller = on_thread(&record, move |record| {
                !matches!(record.cancel(gen), Cancelled::No)
            });
            let mut runs = 0;
            if let Claim::Fire { task, .. } = record.claim(ticket, 5) {
                runs += 1;
                if let Ok(next) = record.finish_run(gen, 10, task) {
                    if let Claim::Fire { task, .. } = record.claim(ticket_of(next), 10) {
                        runs += 1;
                        let _ = record.finish_run(gen, 15, task);
                    }
                }
            }
            let cancelled = canceller.join().unwrap();
            assert!(cancelled, "a repeating timer is always cancellable");
            assert!(runs <= 2);
            assert_eq!(record.generation(), gen + 1, "ended exactly once");
        });
    }

    /// A reschedule races the end of a repeating timer's run: whichever comes first, the next
    /// run is due at the rescheduled deadline, through the one live reference the worker
    /// places (moved during the run) or its later claim finds (moved after the re-arm).
    #[test]
    fn reschedule_versus_finish_run() {
        loom::model(|| {
            let (record, gen, task) = running();
            let rescheduler = on_thread(&record, move |record| record.reschedule(gen, 100));
            let next = record.finish_run(gen, 10, task).expect("not cancelled");
            let moved = rescheduler.join().unwrap();
            match (moved, next) {
                (Some(Moved::NextRun), 100) => assert!(matches!(
                    record.claim(ticket_of(100), 100),
                    Claim::Fire { deadline: 100, .. }
                )),
                (Some(Moved::Later), 10) => assert!(matches!(
                    record.claim(ticket_of(10), 10),
                    Claim::Later { deadline: 100 }
                )),
                other => panic!("unexpected {other:?}"),
            }
        });
    }

    /// A reschedule and then a cancel race the end of a repeating timer's run: the cancel
    /// always succeeds, the timer ends exactly once, and no run is armed after the cancel.
    /// (The two calls come from one thread: each excludes the other by the LOCKED bit, as on a
    /// pending timer, and a third thread's spinning makes loom's search unbounded.)
    #[test]
    fn reschedule_then_cancel_versus_finish_run() {
        loom::model(|| {
            let (record, gen, task) = running();
            let other = on_thread(&record, move |record| {
                (record.reschedule(gen, 100), record.cancel(gen))
            });
            let next = record.finish_run(gen, 10, task);
            let (moved, cancelled) = other.join().unwrap();
            match (&next, &moved, &cancelled) {
                (Err(_), Some(Moved::NextRun), Cancelled::DuringRun) => {}
                (Ok(100), Some(Moved::NextRun), Cancelled::Now(_)) => {}
                (Ok(10), Some(Moved::Later), Cancelled::Now(_)) => {}
                _ => panic!("{:?} {moved:?} {cancelled:?}", next.ok()),
            }
            assert_eq!(record.generation(), gen + 1, "ended exactly once");
            assert!(record.hand_back_pending().is_none(), "nothing left armed");
        });
    }

    /// A reschedule races the end of a run that ends its timer (it panicked, or the service
    /// shut down): the timer ends once, and a move that got in goes with it.
    #[test]
    fn reschedule_versus_end_run() {
        loom::model(|| {
            let (record, gen, task) = running();
            let other = on_thread(&record, move |record| record.reschedule(gen, 100));
            assert!(!record.end_run(gen), "no cancel came");
            drop(task);
            let moved = other.join().unwrap();
            assert!(matches!(moved, None | Some(Moved::NextRun)), "{moved:?}");
            assert_eq!(record.generation(), gen + 1, "ended exactly once");
            assert!(record.hand_back_pending().is_none(), "nothing left armed");
        });
    }

    /// A stale reference (its timer cancelled) races the record's reuse by a new timer: the
    /// stale reference never fires the new timer nor the cancelled one, and the new timer's
    /// own reference still fires it.
    #[test]
    fn a_stale_reference_versus_reuse() {
        loom::model(|| {
            let (record, gen, stale) = armed(false);
            let Cancelled::Now(task) = record.cancel(gen) else {
                panic!("pending")
            };
            drop(task);
            let late = on_thread(&record, move |record| {
                matches!(record.claim(stale, 100), Claim::Stale)
            });
            // The producer that took the freed slot arms it for a new timer.
            let (next, fresh) = record.arm(7, Task::once(|| {}));
            assert_eq!(next, gen + 1);
            assert!(late.join().unwrap(), "a stale reference acted");
            assert!(matches!(
                record.claim(fresh, 7),
                Claim::Fire { deadline: 7, .. }
            ));
        });
    }

    /// A `shutdown_timeout`'s pass over the records races the end of a repeating timer's run:
    /// the timer ends exactly once, handed back when the re-arm came first, ended by its
    /// worker otherwise, and is never left armed behind the pass.
    #[test]
    fn shutdown_timeout_pass_versus_finish_run() {
        loom::model(|| {
            let (record, gen, task) = running();
            let worker = on_thread(&record, move |record| record.finish_run(gen, 10, task).ok());
            let found = record.at_shutdown();
            let rearmed = worker.join().unwrap();
            match (&found, rearmed) {
                (AtShutdown::Pending(g, 10, _), Some(10)) => assert_eq!(*g, gen),
                (AtShutdown::RunEnds, None) => {}
                _ => panic!("{found:?} {rearmed:?}"),
            }
            assert_eq!(record.generation(), gen + 1, "retired exactly once");
            assert!(record.hand_back_pending().is_none(), "nothing left armed");
        });
    }

    /// Shutdown's pass over the records, after the worker's re-arm, races a cancel: the timer
    /// ends exactly once, handed back live only when the cancel lost.
    #[test]
    fn shutdown_versus_rearm_and_cancel() {
        loom::model(|| {
            let (record, gen, task) = running();
            let worker = on_thread(&record, move |record| record.finish_run(gen, 10, task).ok());
            let canceller = on_thread(&record, move |record| {
                !matches!(record.cancel(gen), Cancelled::No)
            });
            let rearmed = worker.join().unwrap();
            let handed = record.hand_back_pending();
            let cancelled = canceller.join().unwrap();
            assert!(
                rearmed.is_some() || handed.is_none(),
                "nothing pending to take"
            );
            assert!(
                handed.is_some() != cancelled,
                "handed back live and cancelled, or neither"
            );
            assert_eq!(record.generation(), gen + 1, "retired exactly once");
        });
    }
}
