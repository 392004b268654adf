//! Containing user code outside its call: a task's `Drop` and a panic payload's `Drop` run where
//! the service ends a timer (a cancelled task on the cancelling thread, a repeating task after
//! its last run on a worker, unfired tasks when the last handle goes), and a panic there must
//! not kill the thread that happens to drop it, nor leave the timer half ended. Each panic is counted
//! (`Stats::drop_panics`) and logged, and the thread goes on.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

/// Drops `value`, which holds user code (`what` says which, for the log), containing a
/// panic in its `Drop`.
pub(crate) fn drop_contained<T>(value: T, what: &'static str, panics: &AtomicU64) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
        panics.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            panic = panic_message(payload.as_ref()),
            "dropping {what} panicked; the service goes on"
        );
        drop_payload(payload, panics);
    }
}

/// Drops a panic payload caught from user code. A payload whose own `Drop` panics is counted
/// and its second payload leaked: dropping that could panic again, without end.
pub(crate) fn drop_payload(payload: Box<dyn Any + Send>, panics: &AtomicU64) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        panics.fetch_add(1, Ordering::Relaxed);
        tracing::error!("dropping a panic payload panicked; its payload is leaked");
        std::mem::forget(again);
    }
}

/// The message of a panic payload, where it is a string.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("<non-string panic payload>")
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    struct PanicsOnDrop;

    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("drop");
        }
    }

    #[test]
    fn a_panicking_drop_is_counted_and_contained() {
        let panics = AtomicU64::new(0);
        drop_contained(PanicsOnDrop, "a test value", &panics);
        assert_eq!(panics.load(Ordering::Relaxed), 1);
        drop_contained(1u8, "a test value", &panics);
        assert_eq!(panics.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_payload_whose_drop_panics_is_contained() {
        let panics = AtomicU64::new(0);
        let payload = catch_unwind(|| std::panic::panic_any(PanicsOnDrop)).unwrap_err();
        drop_payload(payload, &panics);
        assert_eq!(panics.load(Ordering::Relaxed), 1);
    }
}
