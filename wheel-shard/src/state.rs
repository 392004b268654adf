//! [`TimerCell`]: one timer's shared state word, the single place where `cancel`, `reschedule`
//! and the tick thread's decisions to admit and to fire meet.
//!
//! ```text
//!         tick thread: arrive          tick thread: due           (one-shot: retired at once)
//!   FREE ─────────────────▶ SCHEDULED ──────────────▶ FIRING ──▶ run ──▶ SCHEDULED (repeating)
//!     ▲  │                   │  ▲  │                    │
//!     │  │ cancel()          │  │  │ reschedule():      │ cancel() of a repeating timer
//!     │  ▼                   ▼  │  ▼ LOCKED bit, seq+1  ▼
//!     └──── retire ─────── CANCELLED ◀──────────────────┘
//! ```
//!
//! The word packs `generation (32) | seq (24) | flags (8)`. Every transition is a CAS on the
//! whole word, so exactly one of two racing threads wins: `cancel` returning `true` means the
//! tick thread's CAS to FIRING failed and the task will never run. Retiring a slot bumps the
//! generation, so an old `TimerId` can never act on the slot's next timer.
//!
//! A producer never touches the cell: it claims a slot with the generation its timer gets and
//! sends the timer, deadline included, through the ring. Until the tick thread *arrives* it
//! (writes the deadline and moves it to SCHEDULED), the cell reads FREE at that generation:
//! for an operation carrying the generation of an id that was handed out, FREE means "on its
//! way", and `cancel` and `reschedule` act on it there (a reschedule leaves its deadline in the
//! cell and the MOVED flag, which the arrival honours over the one it carries).
//!
//! The deadline lives beside the word. Whoever writes it holds the LOCKED bit (`reschedule`,
//! the arrival); the tick thread reads the word, then the deadline, and fires only if its CAS
//! finds the word unchanged, so it never fires on a deadline that a completed `reschedule`
//! replaced (the seq bump defeats ABA on the word).

use crossbeam_utils::Backoff;

use crate::sync::{spin_wait, AtomicU64, Ordering};

const STATE: u64 = 0b111;
const FREE: u64 = 0;
const SCHEDULED: u64 = 1;
const FIRING: u64 = 2;
const CANCELLED: u64 = 3;
const LOCKED: u64 = 1 << 3;
const REPEATING: u64 = 1 << 4;
/// On a timer not yet arrived: a `reschedule` wrote the cell's deadline, which wins over the
/// one the timer carries.
const MOVED: u64 = 1 << 5;
const SEQ_SHIFT: u32 = 8;
const SEQ: u64 = 0x00ff_ffff << SEQ_SHIFT;
const GENERATION_SHIFT: u32 = 32;
/// `wheel_key` of a timer that is not in the wheel (no wheel index is `u32::MAX`).
const NO_WHEEL_KEY: u64 = u64::MAX;

fn generation(word: u64) -> u32 {
    (word >> GENERATION_SHIFT) as u32
}

fn with_state(word: u64, state: u64) -> u64 {
    (word & !STATE) | state
}

fn bump_seq(word: u64) -> u64 {
    (word & !SEQ) | (word.wrapping_add(1 << SEQ_SHIFT) & SEQ)
}

/// The word of a retired slot: free, with the next generation.
fn retired(word: u64) -> u64 {
    u64::from(generation(word).wrapping_add(1)) << GENERATION_SHIFT
}

/// What the tick thread should do with an entry the wheel handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// A one-shot timer fired at this deadline; its slot is retired already.
    Fire(u64),
    /// A repeating timer is running for the run due at this deadline (state FIRING).
    FireRepeating(u64),
    /// Rescheduled to this later deadline: put it back in the wheel.
    Later(u64),
    /// A reschedule is writing the deadline right now: look again next tick.
    Busy,
    /// Cancelled: retire the slot and drop the task.
    Cancelled,
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

    /// The slot's current generation: the one its next (or in-flight) timer has.
    #[cfg(test)]
    pub(crate) fn generation(&self) -> u32 {
        generation(self.word.load(Ordering::Relaxed))
    }

    /// Frees the slot for its next timer; every id of this one goes stale.
    pub(crate) fn retire(&self) {
        let word = self.word.load(Ordering::Relaxed);
        self.word.store(retired(word), Ordering::Release);
    }

    /// `true` when the timer of generation `gen` will never run (again): a pending timer (also
    /// one still on its way to the tick thread), or a
    /// repeating one between or during runs. `false` when it ran, is running (one-shot), was
    /// cancelled already, or the id is stale.
    pub(crate) fn cancel(&self, gen: u32) -> bool {
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
                FREE | SCHEDULED => true,
                FIRING => word & REPEATING != 0,
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

    /// Moves a pending timer to `deadline`; `None` when it is not pending (fired, firing,
    /// cancelled, stale).
    pub(crate) fn reschedule(&self, gen: u32, deadline: u64) -> Option<Moved> {
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
                self.word.store(bump_seq(word) | moved, Ordering::Release);
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
            debug_assert_eq!(generation(word), gen, "wheel entry outlived its timer");
            if word & LOCKED != 0 {
                return Expiry::Busy;
            }
            match word & STATE {
                SCHEDULED => {}
                CANCELLED => return Expiry::Cancelled,
                state => unreachable!("timer in the wheel in state {state}"),
            }
            let deadline = self.deadline.load(Ordering::Relaxed);
            if deadline > now {
                return Expiry::Later(deadline);
            }
            let repeating = word & REPEATING != 0;
            let next = if repeating {
                with_state(word, FIRING)
            } else {
                retired(word)
            };
            if self
                .word
                .compare_exchange(word, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return if repeating {
                    Expiry::FireRepeating(deadline)
                } else {
                    Expiry::Fire(deadline)
                };
            }
        }
    }

    /// The tick thread takes in a new timer of generation `gen` from the ring, sent with
    /// `deadline`: it becomes SCHEDULED at that deadline, or at the one a `reschedule` left
    /// while it was on its way, unless it was cancelled on the way.
    pub(crate) fn arrive(&self, gen: u32, deadline: u64, repeating: bool) -> Admission {
        let backoff = Backoff::new();
        loop {
            let word = self.word.load(Ordering::Acquire);
            debug_assert_eq!(generation(word), gen, "a stale timer arrived");
            if word & LOCKED != 0 {
                spin_wait(&backoff);
                continue;
            }
            match word & STATE {
                CANCELLED => return Admission::Cancelled,
                FREE => {}
                state => unreachable!("a new timer arrived in state {state}"),
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
        debug_assert_eq!(generation(word), gen, "admitted a stale timer");
        if word & STATE == CANCELLED {
            Admission::Cancelled
        } else {
            Admission::Pending(self.deadline.load(Ordering::Acquire))
        }
    }

    /// The deadline a scheduled timer has now.
    pub(crate) fn deadline(&self) -> u64 {
        self.deadline.load(Ordering::Acquire)
    }

    /// Whether generation `gen` is cancelled and waits to be retired.
    pub(crate) fn is_cancelled(&self, gen: u32) -> bool {
        let word = self.word.load(Ordering::Acquire);
        generation(word) == gen && word & STATE == CANCELLED
    }

    /// After a repeating timer's run: schedules the next run at `deadline`, or returns `false`
    /// when it was cancelled during the run (the caller retires it).
    pub(crate) fn finish_run(&self, gen: u32, deadline: u64) -> bool {
        // FIRING belongs to the running worker: no reschedule writes the deadline meanwhile.
        self.deadline.store(deadline, Ordering::Relaxed);
        let word = self.word.load(Ordering::Acquire);
        debug_assert_eq!(generation(word), gen);
        match word & STATE {
            FIRING => self
                .word
                .compare_exchange(
                    word,
                    with_state(word, SCHEDULED),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok(),
            _ => false,
        }
    }

    /// At shutdown: takes a scheduled timer back from the service (`true`), or reports it was
    /// cancelled (`false`). Either way the slot is retired.
    pub(crate) fn hand_back(&self, gen: u32) -> bool {
        let backoff = Backoff::new();
        loop {
            let word = self.word.load(Ordering::Acquire);
            debug_assert_eq!(generation(word), gen);
            if word & LOCKED != 0 {
                spin_wait(&backoff);
                continue;
            }
            if self
                .word
                .compare_exchange(word, retired(word), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return word & STATE != CANCELLED;
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_shot_lifecycle() {
        let cell = TimerCell::new();
        let gen = cell.generation();
        assert_eq!(cell.arrive(gen, 10, false), Admission::Pending(10));
        assert_eq!(cell.expire(gen, 5), Expiry::Later(10));
        assert_eq!(cell.expire(gen, 10), Expiry::Fire(10));
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
        let cell = TimerCell::new();
        let gen = cell.generation();
        assert_eq!(cell.arrive(gen, 10, false), Admission::Pending(10));
        assert!(cell.cancel(gen));
        assert!(!cell.cancel(gen));
        assert_eq!(cell.expire(gen, 10), Expiry::Cancelled);
        assert_eq!(cell.admit(gen), Admission::Cancelled);
        assert!(!cell.hand_back(gen));
    }

    #[test]
    fn reschedule_changes_the_deadline_the_tick_thread_sees() {
        let cell = TimerCell::new();
        let gen = cell.generation();
        assert_eq!(cell.arrive(gen, 10, false), Admission::Pending(10));
        assert_eq!(cell.reschedule(gen, 30), Some(Moved::From(10)));
        assert_eq!(cell.expire(gen, 10), Expiry::Later(30));
        assert_eq!(cell.reschedule(gen, 3), Some(Moved::From(30)));
        assert_eq!(cell.expire(gen, 10), Expiry::Fire(3));
    }

    #[test]
    fn a_timer_on_its_way_can_be_cancelled() {
        let cell = TimerCell::new();
        let gen = cell.generation();
        assert!(cell.cancel(gen), "on its way: still cancellable");
        assert!(!cell.cancel(gen));
        assert_eq!(cell.arrive(gen, 10, false), Admission::Cancelled);
        assert!(
            !cell.cancel(gen + 1),
            "an id of a generation never handed out is unknown"
        );
    }

    #[test]
    fn a_reschedule_before_arrival_wins_over_the_sent_deadline() {
        let cell = TimerCell::new();
        let gen = cell.generation();
        assert_eq!(cell.reschedule(gen, 40), Some(Moved::BeforeArrival));
        assert_eq!(cell.reschedule(gen, 30), Some(Moved::BeforeArrival));
        assert_eq!(cell.arrive(gen, 10, false), Admission::Pending(30));
        assert_eq!(cell.expire(gen, 10), Expiry::Later(30));
        assert_eq!(
            cell.reschedule(gen, 20),
            Some(Moved::From(30)),
            "arrived: in the wheel"
        );
        assert_eq!(cell.expire(gen, 20), Expiry::Fire(20));
        // The next timer in the slot does not inherit the flag.
        let next = cell.generation();
        assert_eq!(cell.arrive(next, 7, false), Admission::Pending(7));
    }

    #[test]
    fn repeating_cancelled_during_a_run() {
        let cell = TimerCell::new();
        let gen = cell.generation();
        assert_eq!(cell.arrive(gen, 10, true), Admission::Pending(10));
        assert_eq!(cell.expire(gen, 10), Expiry::FireRepeating(10));
        assert_eq!(cell.reschedule(gen, 50), None, "running: not rescheduled");
        assert!(cell.cancel(gen), "a repeating timer can be stopped mid-run");
        assert!(!cell.finish_run(gen, 20));
    }

    #[test]
    fn repeating_rearms() {
        let cell = TimerCell::new();
        let gen = cell.generation();
        assert_eq!(cell.arrive(gen, 10, true), Admission::Pending(10));
        assert_eq!(cell.expire(gen, 10), Expiry::FireRepeating(10));
        assert!(cell.finish_run(gen, 20));
        assert_eq!(cell.admit(gen), Admission::Pending(20));
        assert!(cell.hand_back(gen));
        assert!(!cell.cancel(gen));
    }

    #[test]
    fn seq_wraps_without_touching_flags_or_generation() {
        let word = (7u64 << GENERATION_SHIFT) | SEQ | REPEATING | SCHEDULED;
        let bumped = bump_seq(word);
        assert_eq!(bumped & SEQ, 0);
        assert_eq!(bumped & !SEQ, word & !SEQ);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// cancel races the tick thread: exactly one of "cancel returned true" and "fired" happens.
    #[test]
    fn cancel_versus_fire() {
        loom::model(|| {
            let cell = Arc::new(TimerCell::new());
            let gen = cell.generation();
            assert_eq!(cell.arrive(gen, 5, false), Admission::Pending(5));
            let canceller = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.cancel(gen))
            };
            let fired = matches!(cell.expire(gen, 5), Expiry::Fire(_));
            let cancelled = canceller.join().unwrap();
            assert!(fired != cancelled, "fired={fired} cancelled={cancelled}");
        });
    }

    /// reschedule races the tick thread: when reschedule reports success, the timer did not
    /// fire on the old deadline; when it fails, the timer fired.
    #[test]
    fn reschedule_versus_fire() {
        loom::model(|| {
            let cell = Arc::new(TimerCell::new());
            let gen = cell.generation();
            assert_eq!(cell.arrive(gen, 5, false), Admission::Pending(5));
            let rescheduler = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.reschedule(gen, 100).is_some())
            };
            let first = cell.expire(gen, 5);
            let moved = rescheduler.join().unwrap();
            match first {
                Expiry::Fire(at) => {
                    assert_eq!(at, 5);
                    assert!(!moved, "rescheduled a timer that fired on its old deadline");
                }
                Expiry::Later(at) => {
                    assert_eq!(at, 100);
                    assert!(moved);
                }
                Expiry::Busy => {
                    assert!(moved);
                    assert_eq!(cell.expire(gen, 5), Expiry::Later(100));
                }
                other => panic!("unexpected {other:?}"),
            }
        });
    }

    /// A new timer's arrival races a reschedule: whichever comes first, the timer ends up at
    /// the rescheduled deadline, never at the one it was sent with.
    #[test]
    fn arrival_versus_reschedule() {
        loom::model(|| {
            let cell = Arc::new(TimerCell::new());
            let gen = cell.generation();
            let rescheduler = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.reschedule(gen, 100))
            };
            let admission = cell.arrive(gen, 5, false);
            let moved = rescheduler.join().unwrap();
            match (admission, moved) {
                (Admission::Pending(100), Some(Moved::BeforeArrival)) => {}
                (Admission::Pending(5), Some(Moved::From(5))) => {}
                other => panic!("unexpected {other:?}"),
            }
            assert_eq!(cell.expire(gen, 5), Expiry::Later(100));
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
            let admission = cell.arrive(gen, 5, false);
            assert!(
                canceller.join().unwrap(),
                "a timer that never fired is cancellable"
            );
            if admission != Admission::Cancelled {
                assert_eq!(cell.expire(gen, 5), Expiry::Cancelled);
            }
        });
    }

    /// cancel races the end of a repeating run: a `true` cancel means no re-arm.
    #[test]
    fn cancel_versus_rearm() {
        loom::model(|| {
            let cell = Arc::new(TimerCell::new());
            let gen = cell.generation();
            assert_eq!(cell.arrive(gen, 5, true), Admission::Pending(5));
            assert_eq!(cell.expire(gen, 5), Expiry::FireRepeating(5));
            let canceller = {
                let cell = Arc::clone(&cell);
                thread::spawn(move || cell.cancel(gen))
            };
            let rearmed = cell.finish_run(gen, 10);
            let cancelled = canceller.join().unwrap();
            assert!(cancelled, "a repeating timer is always cancellable");
            if rearmed {
                // Cancelled after the re-arm: the tick thread must see it when admitting.
                assert_eq!(cell.admit(gen), Admission::Cancelled);
            }
        });
    }
}
