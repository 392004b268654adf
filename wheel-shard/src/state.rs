//! [`TimerCell`]: one timer's shared state word, the single place where `cancel`, `reschedule`
//! and the tick thread's and the executor's decisions to admit, queue and run meet.
//!
//! ```text
//!         tick thread: arrive          tick thread: due
//!   FREE ─────────────────▶ SCHEDULED ─────────────────▶ retired (one-shot: handed to a worker)
//!     ▲  │                   │  ▲  │ ╲
//!     │  │ cancel()          │  │  │  ╲ due (repeating)       worker: start_run
//!     │  │                   │  │  │   ╰──────────▶ QUEUED ─────────────────▶ RUNNING
//!     │  │                   │  │  │ reschedule():    │                         │ │
//!     │  │                   │  │  ▼ LOCKED bit       │ cancel(): the queued    │ │ finish_run
//!     │  ▼                   ▼  │                     ▼ run is skipped          │ ▼
//!     └──── retire ─────── CANCELLED ◀────────────────────────────── cancel() ─┘ SCHEDULED
//! ```
//!
//! The word packs `generation (48) | unused (8) | flags (8)`. Every transition is a CAS on the
//! whole word, so exactly one of two racing threads wins: `cancel` returning `true` means the
//! tick thread's CAS to fire (or, for a repeating timer, the worker's CAS to start the run)
//! failed, and the task will never run again. Retiring a slot bumps the generation, so an old
//! `TimerId` can never act on the slot's next timer: a slot's generation wraps after 2^48
//! timers, which at 100 000 timers a second through one slot is 89 years.
//!
//! A producer never touches the cell: it claims a slot with the generation its timer gets and
//! sends the timer, deadline included, through the ring. Until the tick thread *arrives* it
//! (writes the deadline and moves it to SCHEDULED), the cell reads FREE at that generation:
//! for an operation carrying the generation of an id that was handed out, FREE means "on its
//! way", and `cancel` and `reschedule` act on it there (a reschedule leaves its deadline in the
//! cell and the MOVED flag, which the arrival honours over the one it carries). An id reaches
//! a cell only after the service checked that it handed the id out (`TimerId` carries the
//! service's tag), so a FREE slot's current generation is never named by any id while the
//! slot waits on the free list.
//!
//! The deadline lives beside the word. Whoever writes or trusts it holds the LOCKED bit
//! (`reschedule`, the arrival, the tick thread deciding to fire), so the tick thread never
//! fires on a deadline that a concurrent `reschedule` is replacing.
//!
//! Wheel entries, ring commands and notices carry only the low 32 bits of the generation
//! ([`short`]): inside the service that is enough, because the tick thread ends a timer and
//! removes its entry together, so no entry outlives its timer by even one generation. Ids,
//! which users keep as long as they like, carry all 48.

use crossbeam_utils::Backoff;

use crate::sync::{spin_wait, AtomicU64, Ordering};

const STATE: u64 = 0b111;
const FREE: u64 = 0;
const SCHEDULED: u64 = 1;
/// A repeating timer's run is in the executor's queue, not started yet.
const QUEUED: u64 = 2;
/// A repeating timer's run is in progress.
const RUNNING: u64 = 3;
const CANCELLED: u64 = 4;
const LOCKED: u64 = 1 << 3;
const REPEATING: u64 = 1 << 4;
/// On a timer not yet arrived: a `reschedule` wrote the cell's deadline, which wins over the
/// one the timer carries.
const MOVED: u64 = 1 << 5;
const GENERATION_SHIFT: u32 = 16;
/// Bits of a slot's generation: it wraps after 2^48 timers through one slot.
pub(crate) const GENERATION_BITS: u32 = 48;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;
/// `wheel_key` of a timer that is not in the wheel (no wheel index is `u32::MAX`).
const NO_WHEEL_KEY: u64 = u64::MAX;

fn generation(word: u64) -> u64 {
    word >> GENERATION_SHIFT
}

/// The low 32 bits of generation `gen`: what wheel entries, ring commands and notices carry.
pub(crate) fn short(gen: u64) -> u32 {
    gen as u32
}

/// A full generation whose low 32 bits are `short`, taken from the slot's `current` one (for a
/// timer known only by its short generation, handed back as out of step with its cell).
pub(crate) fn widen(short: u32, current: u64) -> u64 {
    (current & !u64::from(u32::MAX)) | u64::from(short)
}

/// The generation before `gen` (of the timer that retired a slot to `gen`).
pub(crate) fn previous_generation(gen: u64) -> u64 {
    gen.wrapping_sub(1) & GENERATION_MASK
}

/// Whether `word` belongs to the timer whose generation's low bits are `gen`.
fn is_of(word: u64, gen: u32) -> bool {
    short(generation(word)) == gen
}

fn with_state(word: u64, state: u64) -> u64 {
    (word & !STATE) | state
}

/// The word of a retired slot: free, with the next generation.
fn retired(word: u64) -> u64 {
    (generation(word).wrapping_add(1) & GENERATION_MASK) << GENERATION_SHIFT
}

/// What the tick thread should do with an entry the wheel handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// A one-shot timer fired at this deadline; its slot is retired already.
    Fire(u64),
    /// A repeating timer's run due at this deadline goes to the executor (state QUEUED).
    FireRepeating(u64),
    /// Rescheduled to this later deadline: put it back in the wheel.
    Later(u64),
    /// A reschedule is writing the deadline right now: look again next tick.
    Busy,
    /// Cancelled: retire the slot and drop the task.
    Cancelled,
    /// The cell does not belong to this entry, or is in a state no wheel entry can be in: a
    /// bug. The tick thread sets the entry aside (see `TickLoop::set_aside`).
    Stray,
}

/// What a successful `reschedule` moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moved {
    /// A timer in the wheel, away from this deadline.
    From(u64),
    /// A timer still on its way to the tick thread, which will take the new deadline.
    BeforeArrival,
}

/// How a timer that reached the tick thread (from the ring or re-armed) should be admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Put it in the wheel at this deadline.
    Pending(u64),
    /// It was cancelled on the way: retire it.
    Cancelled,
    /// The cell does not belong to this timer, or is in a state an arriving timer cannot
    /// find: a bug; the tick thread sets the timer aside.
    Stray,
}

/// How a timer that ended outside the wheel ended (see [`TimerCell::hand_back`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It was live: the caller takes it back. Carries its full generation, for its id.
    Live(u64),
    /// It had been cancelled.
    Cancelled,
    /// The cell belongs to another timer: nothing was changed.
    Stray,
}

#[derive(Debug)]
pub(crate) struct TimerCell {
    word: AtomicU64,
    deadline: AtomicU64,
    /// The timer's key in its shard's wheel while it is there. Only the tick thread reads or
    /// writes it; it lives here so the shard needs no slot-indexed map of its own.
    wheel_key: AtomicU64,
}

impl TimerCell {
    pub(crate) fn new() -> Self {
        TimerCell {
            word: AtomicU64::new(FREE),
            deadline: AtomicU64::new(0),
            wheel_key: AtomicU64::new(NO_WHEEL_KEY),
        }
    }

    /// A fresh cell whose first timer gets generation `gen` (tests of the wrap-around).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn at_generation(gen: u64) -> Self {
        let cell = TimerCell::new();
        cell.word.store(
            (gen & GENERATION_MASK) << GENERATION_SHIFT,
            Ordering::Relaxed,
        );
        cell
    }

    /// Loads the cell and throws the value away: the tick thread calls this for a batch of
    /// cells before working on any, so their misses overlap. Both ends: a 24-byte cell
    /// straddles two cache lines three times in eight, and the tick thread reads it whole.
    pub(crate) fn warm(&self) {
        std::hint::black_box(self.word.load(Ordering::Relaxed));
        std::hint::black_box(self.wheel_key.load(Ordering::Relaxed));
    }

    /// Tick thread: the wheel key of this slot's timer, if it is in the wheel.
    pub(crate) fn wheel_key(&self) -> Option<u64> {
        let key = self.wheel_key.load(Ordering::Relaxed);
        (key != NO_WHEEL_KEY).then_some(key)
    }

    /// Tick thread: records where the timer sits in the wheel (`None`: not in it).
    pub(crate) fn set_wheel_key(&self, key: Option<u64>) {
        self.wheel_key
            .store(key.unwrap_or(NO_WHEEL_KEY), Ordering::Relaxed);
    }

    /// The slot's current generation: the one its next (or in-flight) timer has. Read by the
    /// thread that just retired the slot, to put it back on the free list.
    pub(crate) fn generation(&self) -> u64 {
        generation(self.word.load(Ordering::Acquire))
    }

    /// Frees the slot for its next timer; every id of this one goes stale. Returns the
    /// generation the slot's next timer gets.
    pub(crate) fn retire(&self) -> u64 {
        let word = self.word.load(Ordering::Relaxed);
        let next = retired(word);
        self.word.store(next, Ordering::Release);
        generation(next)
    }

    /// `true` when the timer of generation `gen` will never run (again): a pending timer (also
    /// one still on its way to the tick thread), a repeating one between runs, with a run
    /// queued (which is then skipped), or during a run (its last). `false` when it ran, is
    /// running (one-shot), was cancelled already, or the generation is not the slot's.
    pub(crate) fn cancel(&self, gen: u64) -> bool {
        let backoff = Backoff::new();
        loop {
            let word = self.word.load(Ordering::Acquire);
            if generation(word) != gen {
                return false;
            }
            if word & LOCKED != 0 {
                spin_wait(&backoff);
                continue;
            }
            let cancellable = match word & STATE {
                FREE | SCHEDULED | QUEUED => true,
                RUNNING => word & REPEATING != 0,
                _ => false,
            };
            if !cancellable {
                return false;
            }
            let next = with_state(word, CANCELLED);
            if self
                .word
                .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return true;
            }
        }
    }

    /// Moves the pending timer of generation `gen` to `deadline`; `None` when it is not
    /// pending (fired, queued or running, cancelled, or the generation is not the slot's).
    pub(crate) fn reschedule(&self, gen: u64, deadline: u64) -> Option<Moved> {
        let backoff = Backoff::new();
        loop {
            let word = self.word.load(Ordering::Acquire);
            let state = word & STATE;
            if generation(word) != gen || (state != SCHEDULED && state != FREE) {
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
                let old = self.deadline.load(Ordering::Relaxed);
                self.deadline.store(deadline, Ordering::Relaxed);
                let moved = if state == FREE { MOVED } else { 0 };
                self.word.store(word | moved, Ordering::Release);
                return Some(if state == FREE {
                    Moved::BeforeArrival
                } else {
                    Moved::From(old)
                });
            }
        }
    }

    /// The tick thread's decision for an entry of generation `gen` that the wheel handed out at
    /// tick `now`.
    pub(crate) fn expire(&self, gen: u32, now: u64) -> Expiry {
        loop {
            let word = self.word.load(Ordering::Acquire);
            if !is_of(word, gen) {
                return Expiry::Stray;
            }
            if word & LOCKED != 0 {
                return Expiry::Busy;
            }
            match word & STATE {
                SCHEDULED => {}
                CANCELLED => return Expiry::Cancelled,
                _ => return Expiry::Stray,
            }
            // A postponed timer needs no lock: a reschedule racing this read either moves it
            // later still (found when that deadline comes) or earlier (its notice follows).
            let deadline = self.deadline.load(Ordering::Relaxed);
            if deadline > now {
                return Expiry::Later(deadline);
            }
            // To fire, hold the lock while trusting the deadline, so no reschedule slips in
            // between reading it and deciding.
            if self
                .word
                .compare_exchange(word, word | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let deadline = self.deadline.load(Ordering::Relaxed);
            if deadline > now {
                self.word.store(word, Ordering::Release);
                return Expiry::Later(deadline);
            }
            return if word & REPEATING != 0 {
                self.word.store(with_state(word, QUEUED), Ordering::Release);
                Expiry::FireRepeating(deadline)
            } else {
                self.word.store(retired(word), Ordering::Release);
                Expiry::Fire(deadline)
            };
        }
    }

    /// The tick thread takes in a new timer of generation `gen` from the ring, sent with
    /// `deadline`: it becomes SCHEDULED at that deadline, or at the one a `reschedule` left
    /// while it was on its way, unless it was cancelled on the way.
    pub(crate) fn arrive(&self, gen: u32, deadline: u64, repeating: bool) -> Admission {
        let backoff = Backoff::new();
        loop {
            let word = self.word.load(Ordering::Acquire);
            if !is_of(word, gen) {
                return Admission::Stray;
            }
            if word & LOCKED != 0 {
                spin_wait(&backoff);
                continue;
            }
            match word & STATE {
                CANCELLED => return Admission::Cancelled,
                FREE => {}
                _ => return Admission::Stray,
            }
            // Take the lock to write the deadline, as a reschedule does.
            if self
                .word
                .compare_exchange(word, word | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let deadline = if word & MOVED != 0 {
                self.deadline.load(Ordering::Relaxed)
            } else {
                self.deadline.store(deadline, Ordering::Relaxed);
                deadline
            };
            let flags = if repeating { REPEATING } else { 0 };
            self.word.store(
                with_state(word & !MOVED, SCHEDULED) | flags,
                Ordering::Release,
            );
            return Admission::Pending(deadline);
        }
    }

    /// How the tick thread takes back a repeating timer of generation `gen` that a worker
    /// re-armed after a run. A reschedule in progress is fine: it sends a notice when done.
    pub(crate) fn admit(&self, gen: u32) -> Admission {
        let word = self.word.load(Ordering::Acquire);
        if !is_of(word, gen) {
            return Admission::Stray;
        }
        match word & STATE {
            CANCELLED => Admission::Cancelled,
            SCHEDULED => Admission::Pending(self.deadline.load(Ordering::Acquire)),
            _ => Admission::Stray,
        }
    }

    /// The deadline a scheduled timer has now.
    pub(crate) fn deadline(&self) -> u64 {
        self.deadline.load(Ordering::Acquire)
    }

    /// Whether generation `gen` is cancelled and waits to be retired.
    pub(crate) fn is_cancelled(&self, gen: u32) -> bool {
        let word = self.word.load(Ordering::Acquire);
        is_of(word, gen) && word & STATE == CANCELLED
    }

    /// A worker is about to start the queued run of repeating timer `gen`: `true` to run it,
    /// `false` when it was cancelled while queued (the run is skipped; the caller ends it).
    pub(crate) fn start_run(&self, gen: u32) -> bool {
        loop {
            let word = self.word.load(Ordering::Acquire);
            if !is_of(word, gen) || word & STATE != QUEUED {
                return false;
            }
            if self
                .word
                .compare_exchange(
                    word,
                    with_state(word, RUNNING),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                return true;
            }
        }
    }

    /// After a repeating timer's run: schedules the next run at `deadline`, or returns `false`
    /// when it was cancelled during the run (the caller retires it).
    pub(crate) fn finish_run(&self, gen: u32, deadline: u64) -> bool {
        let word = self.word.load(Ordering::Acquire);
        if !is_of(word, gen) || word & STATE != RUNNING {
            return false;
        }
        // RUNNING belongs to the running worker: no reschedule writes the deadline meanwhile.
        self.deadline.store(deadline, Ordering::Relaxed);
        self.word
            .compare_exchange(
                word,
                with_state(word, SCHEDULED),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Ends timer `gen` outside the wheel (at shutdown, or a repeating timer after its last
    /// run): retires the slot and tells whether the timer was live or cancelled. A cell that
    /// belongs to another timer is left alone.
    pub(crate) fn hand_back(&self, gen: u32) -> Ended {
        let backoff = Backoff::new();
        loop {
            let word = self.word.load(Ordering::Acquire);
            if !is_of(word, gen) {
                return Ended::Stray;
            }
            if word & LOCKED != 0 {
                spin_wait(&backoff);
                continue;
            }
            if self
                .word
                .compare_exchange(word, retired(word), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return if word & STATE == CANCELLED {
                    Ended::Cancelled
                } else {
                    Ended::Live(generation(word))
                };
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A fresh cell and its first timer's generation, full and short.
    fn fresh() -> (TimerCell, u64, u32) {
        let cell = TimerCell::new();
        let gen = cell.generation();
        (cell, gen, short(gen))
    }

    #[test]
    fn one_shot_lifecycle() {
        let (cell, gen, g) = fresh();
        assert_eq!(cell.arrive(g, 10, false), Admission::Pending(10));
        assert_eq!(cell.expire(g, 5), Expiry::Later(10));
        assert_eq!(cell.expire(g, 10), Expiry::Fire(10));
        assert!(!cell.cancel(gen), "fired: stale");
        assert_eq!(cell.reschedule(gen, 20), None);
        assert_eq!(
            cell.generation(),
            gen + 1,
            "retiring moved the generation on"
        );
    }

    #[test]
    fn cancel_wins_once() {
        let (cell, gen, g) = fresh();
        assert_eq!(cell.arrive(g, 10, false), Admission::Pending(10));
        assert!(cell.cancel(gen));
        assert!(!cell.cancel(gen));
        assert_eq!(cell.expire(g, 10), Expiry::Cancelled);
        assert_eq!(cell.admit(g), Admission::Cancelled);
        assert_eq!(cell.hand_back(g), Ended::Cancelled);
    }

    #[test]
    fn reschedule_changes_the_deadline_the_tick_thread_sees() {
        let (cell, gen, g) = fresh();
        assert_eq!(cell.arrive(g, 10, false), Admission::Pending(10));
        assert_eq!(cell.reschedule(gen, 30), Some(Moved::From(10)));
        assert_eq!(cell.expire(g, 10), Expiry::Later(30));
        assert_eq!(cell.reschedule(gen, 3), Some(Moved::From(30)));
        assert_eq!(cell.expire(g, 10), Expiry::Fire(3));
    }

    #[test]
    fn a_timer_on_its_way_can_be_cancelled() {
        let (cell, gen, g) = fresh();
        assert!(cell.cancel(gen), "on its way: still cancellable");
        assert!(!cell.cancel(gen));
        assert_eq!(cell.arrive(g, 10, false), Admission::Cancelled);
        assert!(
            !cell.cancel(gen + 1),
            "an id of a generation never handed out is unknown"
        );
    }

    #[test]
    fn a_reschedule_before_arrival_wins_over_the_sent_deadline() {
        let (cell, gen, g) = fresh();
        assert_eq!(cell.reschedule(gen, 40), Some(Moved::BeforeArrival));
        assert_eq!(cell.reschedule(gen, 30), Some(Moved::BeforeArrival));
        assert_eq!(cell.arrive(g, 10, false), Admission::Pending(30));
        assert_eq!(cell.expire(g, 10), Expiry::Later(30));
        assert_eq!(
            cell.reschedule(gen, 20),
            Some(Moved::From(30)),
            "arrived: in the wheel"
        );
        assert_eq!(cell.expire(g, 20), Expiry::Fire(20));
        // The next timer in the slot does not inherit the flag.
        let next = short(cell.generation());
        assert_eq!(cell.arrive(next, 7, false), Admission::Pending(7));
    }

    #[test]
    fn repeating_cancelled_during_a_run() {
        let (cell, gen, g) = fresh();
        assert_eq!(cell.arrive(g, 10, true), Admission::Pending(10));
        assert_eq!(cell.expire(g, 10), Expiry::FireRepeating(10));
        assert_eq!(cell.reschedule(gen, 50), None, "queued: not rescheduled");
        assert!(cell.start_run(g));
        assert_eq!(cell.reschedule(gen, 50), None, "running: not rescheduled");
        assert!(cell.cancel(gen), "a repeating timer can be stopped mid-run");
        assert!(!cell.finish_run(g, 20));
        assert_eq!(cell.hand_back(g), Ended::Cancelled);
    }

    #[test]
    fn a_cancelled_queued_run_is_skipped() {
        let (cell, gen, g) = fresh();
        assert_eq!(cell.arrive(g, 10, true), Admission::Pending(10));
        assert_eq!(cell.expire(g, 10), Expiry::FireRepeating(10));
        assert!(cell.cancel(gen), "queued: cancellable");
        assert!(!cell.start_run(g), "the queued run does not start");
        assert!(!cell.cancel(gen), "cancelled once");
        assert_eq!(cell.hand_back(g), Ended::Cancelled);
        assert_eq!(cell.generation(), gen + 1);
    }

    #[test]
    fn repeating_rearms() {
        let (cell, gen, g) = fresh();
        assert_eq!(cell.arrive(g, 10, true), Admission::Pending(10));
        assert_eq!(cell.expire(g, 10), Expiry::FireRepeating(10));
        assert!(cell.start_run(g));
        assert!(cell.finish_run(g, 20));
        assert_eq!(cell.admit(g), Admission::Pending(20));
        assert_eq!(cell.hand_back(g), Ended::Live(gen));
        assert!(!cell.cancel(gen));
    }

    #[test]
    fn a_one_shot_is_never_queued() {
        let (cell, _, g) = fresh();
        assert_eq!(cell.arrive(g, 10, false), Admission::Pending(10));
        assert!(!cell.start_run(g), "a one-shot has no queued run to start");
    }

    #[test]
    fn generations_are_48_bits_and_wrap_only_there() {
        // Past 2^32 a 32-bit generation would have wrapped to 0 and matched an id of the
        // slot's first timer.
        let cell = TimerCell::at_generation(u64::from(u32::MAX));
        let old = cell.generation();
        assert_eq!(cell.arrive(short(old), 5, false), Admission::Pending(5));
        assert_eq!(cell.expire(short(old), 5), Expiry::Fire(5));
        let next = cell.generation();
        assert_eq!(next, 1 << 32);
        assert!(
            !cell.cancel(0),
            "an id of generation 0 is stale, not the new timer's"
        );
        assert!(!cell.cancel(old));
        assert!(cell.cancel(next));

        let cell = TimerCell::at_generation(GENERATION_MASK);
        assert_eq!(cell.retire(), 0, "the wrap is at 2^48");
    }

    #[test]
    fn stray_entries_are_reported_not_acted_on() {
        let (cell, gen, g) = fresh();
        assert_eq!(cell.arrive(g, 10, false), Admission::Pending(10));
        assert_eq!(cell.arrive(g, 10, false), Admission::Stray, "arrived twice");
        assert_eq!(cell.expire(g.wrapping_add(1), 10), Expiry::Stray);
        assert_eq!(cell.admit(g), Admission::Pending(10));
        assert_eq!(cell.hand_back(g.wrapping_add(1)), Ended::Stray);
        assert_eq!(
            cell.expire(g, 10),
            Expiry::Fire(10),
            "untouched by the strays"
        );
        assert_eq!(cell.generation(), gen + 1);
        assert_eq!(
            cell.expire(g, 10),
            Expiry::Stray,
            "fired: the entry is gone"
        );
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    fn arrived(repeating: bool) -> (Arc<TimerCell>, u64, u32) {
        let cell = Arc::new(TimerCell::new());
        let gen = cell.generation();
        assert_eq!(cell.arrive(short(gen), 5, repeating), Admission::Pending(5));
        (cell, gen, short(gen))
    }

    /// cancel races the tick thread: exactly one of "cancel returned true" and "fired" happens.
    #[test]
    fn cancel_versus_fire() {
        loom::model(|| {
            let (cell, gen, g) = arrived(false);
            let canceller = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.cancel(gen))
            };
            let fired = matches!(cell.expire(g, 5), Expiry::Fire(_));
            let cancelled = canceller.join().unwrap();
            assert!(fired != cancelled, "fired={fired} cancelled={cancelled}");
        });
    }

    /// reschedule races the tick thread: when reschedule reports success, the timer did not
    /// fire on the old deadline; when it fails, the timer fired.
    #[test]
    fn reschedule_versus_fire() {
        loom::model(|| {
            let (cell, gen, g) = arrived(false);
            let rescheduler = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.reschedule(gen, 100).is_some())
            };
            let first = cell.expire(g, 5);
            let moved = rescheduler.join().unwrap();
            match first {
                Expiry::Fire(deadline) => {
                    assert_eq!(deadline, 5);
                    assert!(!moved, "fired, yet the reschedule reported success");
                }
                Expiry::Later(deadline) => {
                    assert!(moved);
                    assert_eq!(deadline, 100);
                }
                Expiry::Busy => {
                    assert!(moved);
                    assert_eq!(cell.expire(g, 5), Expiry::Later(100));
                }
                other => panic!("unexpected {other:?}"),
            }
        });
    }

    /// Two reschedules race each other: they take turns (the one that went second saw the
    /// first one's deadline as the old one), and the timer ends at the deadline of the second,
    /// firing there and not before.
    #[test]
    fn reschedule_versus_reschedule() {
        loom::model(|| {
            let (cell, gen, g) = arrived(false);
            let other = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.reschedule(gen, 100))
            };
            let mine = cell.reschedule(gen, 200);
            let other = other.join().unwrap();
            let last = match (mine, other) {
                (Some(Moved::From(5)), Some(Moved::From(200))) => 100,
                (Some(Moved::From(100)), Some(Moved::From(5))) => 200,
                unexpected => panic!("not one after the other: {unexpected:?}"),
            };
            assert_eq!(cell.deadline(), last);
            assert_eq!(
                cell.expire(g, 150),
                if last > 150 {
                    Expiry::Later(last)
                } else {
                    Expiry::Fire(last)
                }
            );
            if last > 150 {
                assert_eq!(cell.expire(g, last), Expiry::Fire(last));
            }
        });
    }

    /// A reschedule races the timer's arrival: the timer ends up in the wheel at the
    /// rescheduled deadline either way, never at the one it was sent with.
    #[test]
    fn arrival_versus_reschedule() {
        loom::model(|| {
            let cell = Arc::new(TimerCell::new());
            let gen = cell.generation();
            let rescheduler = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.reschedule(gen, 100))
            };
            let admission = cell.arrive(short(gen), 5, false);
            let moved = rescheduler.join().unwrap();
            assert!(moved.is_some(), "a timer that never fired is reschedulable");
            if admission == Admission::Pending(5) {
                // Arrived first: the reschedule found it in the wheel.
                assert_eq!(moved, Some(Moved::From(5)));
            }
            assert_eq!(cell.expire(short(gen), 5), Expiry::Later(100));
        });
    }

    /// A new timer's arrival races a cancel, which always wins (nothing fired): either the
    /// arrival sees it, or the timer arrives and the tick thread finds it cancelled when due.
    #[test]
    fn arrival_versus_cancel() {
        loom::model(|| {
            let cell = Arc::new(TimerCell::new());
            let gen = cell.generation();
            let canceller = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.cancel(gen))
            };
            let admission = cell.arrive(short(gen), 5, false);
            assert!(
                canceller.join().unwrap(),
                "a timer that never fired is cancellable"
            );
            if admission != Admission::Cancelled {
                assert_eq!(cell.expire(short(gen), 5), Expiry::Cancelled);
            }
        });
    }

    /// cancel races a repeating timer's queued run and its end: a `true` cancel means the
    /// queued run does not start, or, if it started, no re-arm.
    #[test]
    fn cancel_versus_queued_run_and_rearm() {
        loom::model(|| {
            let (cell, gen, g) = arrived(true);
            assert_eq!(cell.expire(g, 5), Expiry::FireRepeating(5));
            let canceller = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.cancel(gen))
            };
            let ran = cell.start_run(g);
            let rearmed = ran && cell.finish_run(g, 10);
            let cancelled = canceller.join().unwrap();
            assert!(cancelled, "a repeating timer is always cancellable");
            if rearmed {
                // Cancelled after the re-arm: the tick thread must see it when admitting.
                assert_eq!(cell.admit(g), Admission::Cancelled);
            }
            assert_eq!(cell.hand_back(g), Ended::Cancelled);
        });
    }

    /// Shutdown's hand-back races a re-arm after a run and a cancel: the timer ends exactly
    /// once, handed back live only when the cancel lost, and the slot moves on exactly once.
    #[test]
    fn shutdown_versus_rearm_and_cancel() {
        loom::model(|| {
            let (cell, gen, g) = arrived(true);
            assert_eq!(cell.expire(g, 5), Expiry::FireRepeating(5));
            assert!(cell.start_run(g));
            let worker = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.finish_run(g, 10))
            };
            let canceller = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.cancel(gen))
            };
            let rearmed = worker.join().unwrap();
            // Shutdown hands back what was re-armed; a run that was not re-armed ends where
            // it ran (after_run), which hands it back the same way.
            let ended = cell.hand_back(g);
            let cancelled = canceller.join().unwrap();
            match ended {
                Ended::Live(handed) => {
                    assert_eq!(handed, gen);
                    assert!(!cancelled, "handed back live, yet cancel returned true");
                }
                Ended::Cancelled => assert!(cancelled),
                Ended::Stray => panic!("the timer ended twice"),
            }
            let _ = rearmed;
            assert_eq!(cell.generation(), gen + 1, "retired exactly once");
            assert!(!cell.cancel(gen), "ended: the id is stale");
        });
    }
}
