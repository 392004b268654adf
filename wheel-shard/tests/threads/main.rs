//! The service's threads as the OS sees them: pinning to cores, real-time priority and the
//! scheduler slice of tick threads.
//!
//! Each test reads every thread of this process (`/proc/self/task`) and tells its service's
//! threads from others by name or by when they appeared, so no other test's service may have
//! threads here: the tests have this binary to themselves and run one at a time ([`alone`]).
//! To add such a test: a file of this directory declared below, whose tests start with
//! `let _alone = crate::alone();`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../skip/mod.rs"]
mod skip;

mod pinning;
mod priority;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Held by each test for its whole run: no test here sees another's threads.
fn alone() -> MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(PoisonError::into_inner)
}
