//! [`Task`]: a scheduled callback as the service carries it — inline when it is small, boxed
//! only when it is not.
//!
//! A `Task` is 32 bytes: a pointer to a static table of the closure type's functions and 24
//! bytes of storage. A closure of up to 24 bytes with an alignment of up to 8 (most timeout
//! callbacks capture an id and a handle, or an id and an `Instant`) lives in that storage
//! itself, so scheduling it allocates nothing and its record is the only memory the timer
//! touches. A larger closure is boxed and the box pointer is stored instead. 24 and not 32:
//! with 32 a record would be 56 bytes, and a timer's memory (record, wheel place, free slot)
//! would pass 64 bytes. Either way the task moves as 32 plain bytes,
//! which is how it goes into a timer's record and comes out again (a closure never points into
//! itself: Rust values move by copying).
//!
//! One-shot tasks are `FnOnce` and run by value; repeating ones are `FnMut` plus their period
//! and run in place, inside the record, once per period.

use std::cell::Cell;
use std::mem::{align_of, size_of, ManuallyDrop, MaybeUninit};

/// Bytes of closure a task stores inline.
pub(crate) const INLINE_BYTES: usize = 24;

type Storage = MaybeUninit<[usize; INLINE_BYTES / size_of::<usize>()]>;

/// The functions of one stored closure type. `data` points at a task's storage holding a value
/// of that type.
struct VTable {
    /// Runs a one-shot closure, consuming it.
    call_once: unsafe fn(data: *mut u8),
    /// Runs a repeating closure in place; returns its period in ticks.
    call_mut: unsafe fn(data: *mut u8),
    /// Drops the closure unrun.
    drop: unsafe fn(data: *mut u8),
    /// The period in ticks of a repeating task; `None` for a one-shot.
    period: Option<unsafe fn(data: *const u8) -> u64>,
}

/// An owned callback (see the module doc). Dropping it drops the closure unrun.
pub(crate) struct Task {
    vtable: &'static VTable,
    data: Storage,
}

// SAFETY: a `Task` is only built from `Send` closures (`Task::once`, `Task::every` require it),
// and it owns its closure outright, so moving it to another thread moves a `Send` value.
unsafe impl Send for Task {}

/// A task as a schedule call hands it to a timer's record: built in the record's place
/// ([`NewTask::build_in`]), or as a value ([`NewTask::build`]) where the schedule is refused.
///
/// Why not always a [`Task`] value: a closure written into a `Task` on the stack and then
/// copied into the record goes through memory between the two, stored field by field and
/// loaded back 16 bytes at a time, and a load that spans several earlier stores cannot take
/// its bytes from them: it waits until every earlier store of the thread has reached the
/// cache, the previous timer's record and ring cell included (docs/performance.md). Built in
/// place, the closure's fields go from registers to the record.
pub(crate) trait NewTask: Sized {
    /// Whether the task repeats.
    fn repeats(&self) -> bool;
    /// The task as a value.
    fn build(self) -> Task;
    /// The task, written into `place`.
    fn build_in(self, place: &mut MaybeUninit<Task>);
}

impl NewTask for Task {
    fn repeats(&self) -> bool {
        Task::repeats(self)
    }

    fn build(self) -> Task {
        self
    }

    fn build_in(self, place: &mut MaybeUninit<Task>) {
        place.write(self);
    }
}

/// A one-shot closure on its way to becoming a [`Task`] (see [`NewTask`]).
pub(crate) struct OnceFn<F>(pub(crate) F);

impl<F: FnOnce() + Send + 'static> NewTask for OnceFn<F> {
    #[inline(always)]
    fn repeats(&self) -> bool {
        false
    }

    fn build(self) -> Task {
        Task::once(self.0)
    }

    #[inline(always)]
    fn build_in(self, place: &mut MaybeUninit<Task>) {
        if fits::<F>() {
            // SAFETY: the table is `F`'s, which fits (checked just above).
            unsafe { Task::store_in(place, self.0, &OnceVTable::<F>::VTABLE) }
        } else {
            place.write(self.build());
        }
    }
}

/// A repeating closure with its period in ticks.
struct Every<F> {
    f: F,
    period: u64,
}

/// Whether values of `T` fit a task's storage.
const fn fits<T>() -> bool {
    size_of::<T>() <= INLINE_BYTES && align_of::<T>() <= align_of::<Storage>()
}

impl Task {
    /// A task that runs `f` once.
    pub(crate) fn once<F: FnOnce() + Send + 'static>(f: F) -> Task {
        if fits::<F>() {
            // SAFETY: the table is `F`'s, and `F` fits (checked).
            unsafe { Task::store(f, &OnceVTable::<F>::VTABLE) }
        } else {
            // SAFETY: the table is `Box<F>`'s, and a box always fits.
            unsafe { Task::store(Box::new(f), &OnceVTable::<Box<F>>::VTABLE) }
        }
    }

    /// A task that runs `f` every `period` ticks.
    pub(crate) fn every<F: FnMut() + Send + 'static>(f: F, period: u64) -> Task {
        let every = Every { f, period };
        if fits::<Every<F>>() {
            // SAFETY: the table is `Every<F>`'s, and `Every<F>` fits (checked).
            unsafe { Task::store(every, &EveryVTable::<Every<F>>::VTABLE) }
        } else {
            // SAFETY: the table is `Box<Every<F>>`'s, and a box always fits.
            unsafe { Task::store(Box::new(every), &EveryVTable::<Box<Every<F>>>::VTABLE) }
        }
    }

    /// Builds a task of `value` with `vtable` straight into `place`, field by field.
    ///
    /// # Safety
    /// `vtable` is the table of `T`'s functions, and `T` fits a task's storage.
    #[inline(always)]
    unsafe fn store_in<T>(place: &mut MaybeUninit<Task>, value: T, vtable: &'static VTable) {
        debug_assert!(fits::<T>());
        let task = place.as_mut_ptr();
        // SAFETY: `task` points at writable memory for a `Task`; the fields are written in
        // place, the closure at the start of the storage, which it fits (the caller's
        // promise).
        unsafe {
            std::ptr::addr_of_mut!((*task).vtable).write(vtable);
            std::ptr::addr_of_mut!((*task).data)
                .cast::<T>()
                .write(value);
        }
    }

    /// [`Task::store_in`], for a task as a value.
    ///
    /// # Safety
    /// As for [`Task::store_in`].
    unsafe fn store<T>(value: T, vtable: &'static VTable) -> Task {
        let mut task = MaybeUninit::uninit();
        // SAFETY: the caller's promise, passed on; `store_in` writes both fields, so the task
        // is initialised after it.
        unsafe {
            Task::store_in(&mut task, value, vtable);
            task.assume_init()
        }
    }

    /// Whether the task repeats: [`Task::period`] without calling into the closure's type.
    #[inline]
    pub(crate) fn repeats(&self) -> bool {
        self.vtable.period.is_some()
    }

    /// The period in ticks of a repeating task; `None` for a one-shot.
    pub(crate) fn period(&self) -> Option<u64> {
        // SAFETY: the storage holds the vtable's type (they are set together in `store_in`).
        self.vtable
            .period
            .map(|period| unsafe { period(self.data.as_ptr().cast()) })
    }

    /// Runs the task: a one-shot runs and is consumed; a repeating one runs once and is
    /// dropped (at shutdown, `Unfired::run`), also when the run panics.
    pub(crate) fn run(mut self) {
        if self.repeats() {
            // `self`'s `Drop` drops the closure after the call, or while a panic unwinds.
            self.run_again();
            return;
        }
        let mut this = ManuallyDrop::new(self);
        // SAFETY: the storage holds the vtable's type, and `ManuallyDrop` keeps `Drop` from
        // dropping the closure that `call_once` consumes (and drops, should it panic).
        unsafe { (this.vtable.call_once)(this.data.as_mut_ptr().cast()) };
    }

    /// Runs a repeating task once, keeping it for its next run.
    pub(crate) fn run_again(&mut self) {
        debug_assert!(self.repeats());
        // SAFETY: the storage holds the vtable's type; `call_mut` leaves it in place.
        unsafe { (self.vtable.call_mut)(self.data.as_mut_ptr().cast()) }
    }

    /// [`Task::run_again`] as the service's run due at tick `due`: while the callback runs,
    /// [`due_run`] on its thread says so.
    pub(crate) fn run_due(&mut self, due: u64) {
        /// Puts back what the thread said before, also when the task panics.
        struct Restore(Option<DueRun>);
        impl Drop for Restore {
            fn drop(&mut self) {
                DUE_RUN.with(|run| run.set(self.0));
            }
        }
        let period = self.period().unwrap_or(1);
        let _restore = Restore(DUE_RUN.with(|run| run.replace(Some(DueRun { due, period }))));
        self.run_again();
    }
}

thread_local! {
    /// The service's repeating run the thread is in (see [`Task::run_due`]).
    static DUE_RUN: Cell<Option<DueRun>> = const { Cell::new(None) };
}

/// A repeating timer's run as the service makes it: the tick it was due at and the timer's
/// period in ticks. The service skips the runs whose deadlines passed while a run came more
/// than a period late (see [`next_run`]); a callback that counts periods, such as the async
/// `Interval`'s, learns of those from the distance between its runs' deadlines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DueRun {
    pub(crate) due: u64,
    pub(crate) period: u64,
}

impl DueRun {
    /// The periods from the run due at tick `earlier` to this one, this one's included: at
    /// least 1.
    #[cfg(any(feature = "async", all(test, not(loom))))]
    pub(crate) fn periods_since(self, earlier: u64) -> u64 {
        (self.due.saturating_sub(earlier) / self.period.max(1)).max(1)
    }
}

/// The service's repeating run the calling thread is in, while its callback runs; `None`
/// elsewhere, and in a callback run by [`Unfired::run`](crate::Unfired::run).
#[cfg(any(feature = "async", all(test, not(loom))))]
pub(crate) fn due_run() -> Option<DueRun> {
    DUE_RUN.with(Cell::get)
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("period", &self.period())
            .finish_non_exhaustive()
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // SAFETY: the storage holds the vtable's type and this is its only drop (`run`
        // consumes the task without coming here).
        unsafe { (self.vtable.drop)(self.data.as_mut_ptr().cast()) }
    }
}

/// How a stored value of type `T` runs once.
trait CallOnce {
    fn call_once(self);
}

impl<F: FnOnce()> CallOnce for F {
    fn call_once(self) {
        self()
    }
}

/// How a stored repeating value runs in place and tells its period.
trait CallMut {
    fn call_mut(&mut self);
    fn period(&self) -> u64;
}

impl<F: FnMut()> CallMut for Every<F> {
    fn call_mut(&mut self) {
        (self.f)()
    }
    fn period(&self) -> u64 {
        self.period
    }
}

impl<T: CallMut> CallMut for Box<T> {
    fn call_mut(&mut self) {
        (**self).call_mut()
    }
    fn period(&self) -> u64 {
        (**self).period()
    }
}

struct OnceVTable<T>(T);

impl<T: CallOnce> OnceVTable<T> {
    const VTABLE: VTable = VTable {
        call_once: Self::call_once,
        call_mut: unreachable_call,
        drop: drop_in_place::<T>,
        period: None,
    };

    /// # Safety
    /// `data` points at a live `T`, which this consumes.
    unsafe fn call_once(data: *mut u8) {
        // SAFETY: the caller's contract.
        let value = unsafe { data.cast::<T>().read() };
        value.call_once();
    }
}

struct EveryVTable<T>(T);

impl<T: CallMut> EveryVTable<T> {
    const VTABLE: VTable = VTable {
        call_once: unreachable_call,
        call_mut: Self::call_mut,
        drop: drop_in_place::<T>,
        period: Some(Self::period),
    };

    /// # Safety
    /// `data` points at a live `T`.
    unsafe fn call_mut(data: *mut u8) {
        // SAFETY: the caller's contract; the value stays where it is.
        unsafe { (*data.cast::<T>()).call_mut() }
    }

    /// # Safety
    /// `data` points at a live `T`.
    unsafe fn period(data: *const u8) -> u64 {
        // SAFETY: the caller's contract.
        unsafe { (*data.cast::<T>()).period() }
    }
}

/// # Safety
/// `data` points at a live `T`, dropped here.
unsafe fn drop_in_place<T>(data: *mut u8) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::drop_in_place(data.cast::<T>()) }
}

/// The slot of a vtable that its kind of task never calls.
unsafe fn unreachable_call(_data: *mut u8) {
    unreachable!("a one-shot task runs once, a repeating one in place")
}

/// The next deadline of a repeating timer that was due at `deadline`: fixed rate, no drift. A
/// run that ends after later deadlines passed skips them (no burst of catch-up runs) but keeps
/// the phase: the next run is the first `deadline + k·period` after `now`.
pub(crate) fn next_run(deadline: u64, period: u64, now: u64) -> u64 {
    let next = deadline.saturating_add(period);
    if next > now {
        return next;
    }
    let missed = (now - deadline) / period;
    deadline.saturating_add(period.saturating_mul(missed + 1))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn fixed_rate_skips_missed_runs_keeping_phase() {
        assert_eq!(next_run(100, 10, 100), 110);
        assert_eq!(next_run(100, 10, 109), 110);
        assert_eq!(next_run(100, 10, 110), 120);
        assert_eq!(next_run(100, 10, 135), 140);
        assert_eq!(next_run(u64::MAX - 1, 10, 0), u64::MAX);
    }

    /// The skipped runs of `fixed_rate_skips_missed_runs_keeping_phase` come back as periods:
    /// the run due at 140 after one due at 100 completes four.
    #[test]
    fn a_run_counts_the_periods_since_the_previous_runs_deadline() {
        let run = |due| DueRun { due, period: 10 };
        assert_eq!(run(110).periods_since(100), 1);
        assert_eq!(run(140).periods_since(100), 4);
        assert_eq!(run(next_run(100, 10, 135)).periods_since(100), 4);
        // Never less than the run itself, whatever came before (a reschedule's new phase).
        assert_eq!(run(105).periods_since(100), 1);
        assert_eq!(run(100).periods_since(140), 1);
        assert_eq!(DueRun { due: 7, period: 0 }.periods_since(0), 7);
    }

    /// `due_run` says which run the thread is in while the callback runs, and nothing after,
    /// also when the callback panics.
    #[test]
    fn a_due_run_is_seen_only_inside_its_callback() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut task = Task::every(
            {
                let seen = Arc::clone(&seen);
                move || {
                    seen.lock().unwrap().push(due_run());
                    if seen.lock().unwrap().len() == 2 {
                        panic!("the second run panics");
                    }
                }
            },
            10,
        );
        assert_eq!(due_run(), None);
        task.run_due(110);
        assert_eq!(due_run(), None);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.run_due(120)));
        assert!(unwound.is_err());
        assert_eq!(due_run(), None, "restored while the panic unwound");
        let period = 10;
        assert_eq!(
            *seen.lock().unwrap(),
            [
                Some(DueRun { due: 110, period }),
                Some(DueRun { due: 120, period })
            ]
        );
    }

    #[test]
    fn a_task_is_32_bytes_and_stores_24_inline() {
        assert_eq!(size_of::<Task>(), 32);
        // An id and an `Instant`, as the README's user loop captures: inline.
        assert!(fits::<(u64, std::time::Instant)>());
        assert!(fits::<[u64; 3]>() && !fits::<[u64; 4]>());
    }

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn small_and_large_one_shots_run_once_and_drop_what_they_hold() {
        let runs = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        let small = {
            let (runs, held) = (Arc::clone(&runs), Counted(Arc::clone(&drops)));
            move || {
                let _held = &held;
                runs.fetch_add(1, Ordering::SeqCst);
            }
        };
        let large = {
            let (runs, held) = (Arc::clone(&runs), Counted(Arc::clone(&drops)));
            let padding = [7u64; 8];
            move || {
                let _held = &held;
                runs.fetch_add(padding[0] as usize, Ordering::SeqCst);
            }
        };
        assert!(fits::<()>());
        Task::once(small).run();
        Task::once(large).run();
        assert_eq!(runs.load(Ordering::SeqCst), 8);
        assert_eq!(drops.load(Ordering::SeqCst), 2);

        let unrun = Task::once({
            let held = Counted(Arc::clone(&drops));
            move || drop(held)
        });
        drop(unrun);
        assert_eq!(drops.load(Ordering::SeqCst), 3, "dropped unrun");
        assert_eq!(runs.load(Ordering::SeqCst), 8);
    }

    /// A one-shot built in its place, small (inline) or large (boxed), is the task
    /// `Task::once` builds: it runs once, or is dropped unrun, with what it holds.
    #[test]
    fn one_shots_built_in_place_run_once_and_drop_what_they_hold() {
        let runs = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        let counting = |add: u64| {
            let (runs, held) = (Arc::clone(&runs), Counted(Arc::clone(&drops)));
            let padding = [add; 8];
            move || {
                let _held = &held;
                runs.fetch_add(padding[0] as usize, Ordering::SeqCst);
            }
        };
        let small = {
            let (runs, held) = (Arc::clone(&runs), Counted(Arc::clone(&drops)));
            move || {
                let _held = &held;
                runs.fetch_add(1, Ordering::SeqCst);
            }
        };
        let built_in = |task: &dyn Fn(&mut MaybeUninit<Task>)| {
            let mut place = MaybeUninit::uninit();
            task(&mut place);
            // SAFETY: `build_in` wrote a whole task.
            unsafe { place.assume_init() }
        };
        let small = std::cell::Cell::new(Some(OnceFn(small)));
        let task = built_in(&|place| small.take().unwrap().build_in(place));
        assert!(!task.repeats());
        task.run();
        let large = std::cell::Cell::new(Some(OnceFn(counting(7))));
        built_in(&|place| large.take().unwrap().build_in(place)).run();
        assert_eq!(runs.load(Ordering::SeqCst), 8);
        assert_eq!(drops.load(Ordering::SeqCst), 2);

        let unrun = std::cell::Cell::new(Some(OnceFn(counting(100))));
        drop(built_in(&|place| unrun.take().unwrap().build_in(place)));
        assert_eq!(drops.load(Ordering::SeqCst), 3, "dropped unrun");
        OnceFn(counting(100)).build().run();
        assert_eq!(runs.load(Ordering::SeqCst), 108, "built as a value");
        assert_eq!(drops.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn repeating_tasks_run_in_place_and_tell_their_period() {
        let runs = Arc::new(AtomicUsize::new(0));
        let small = {
            let counter = Arc::clone(&runs);
            move || {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        };
        let large = {
            let counter = Arc::clone(&runs);
            let ballast = [1u64; 6];
            move || {
                counter.fetch_add(ballast[0] as usize, Ordering::SeqCst);
            }
        };
        assert!(
            fits::<Every<fn()>>(),
            "a small repeating closure is stored inline"
        );
        for mut task in [Task::every(small, 7), Task::every(large, 7)] {
            assert_eq!(task.period(), Some(7));
            assert!(task.repeats());
            task.run_again();
            task.run_again();
            task.run();
        }
        assert_eq!(runs.load(Ordering::SeqCst), 6);
        assert_eq!(Task::once(|| {}).period(), None);
        assert!(!Task::once(|| {}).repeats());
        let ballast = [1u64; 8];
        let boxed = Task::once(move || {
            std::hint::black_box(ballast);
        });
        assert!(!boxed.repeats(), "a boxed one-shot does not repeat");
        assert_eq!(Arc::strong_count(&runs), 1, "every clone was dropped");
    }
}
