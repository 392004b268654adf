//! The timer service through its public API, one module per behaviour it guards. Bounds are
//! generous: these test behaviour, not speed (that is what `cargo xtask bench` is for).
//!
//! One test binary for all of them, so the crate and its dependencies are linked once, not
//! once a file. To add tests: put them in a file of this directory named for what they guard,
//! and declare it below (`mod shutdown_timeout;`: that one line is all); in the file, helpers
//! shared by the test binaries come from `crate::common` (`use crate::common::{within, SOON};`
//! where a file of its own would say `mod common;`), skip records from `crate::skip`. A test
//! that needs a process of its own (one that reads every thread of the process, or changes a
//! per-process limit) runs a part of itself in a child process of this binary
//! ([`common::exact_test_name`], `child`), or goes to `tests/threads/`.

// Many tests here are Linux-only (child processes, /proc, prlimit): elsewhere the imports
// and helpers they use stand unused.
#![cfg_attr(not(target_os = "linux"), allow(unused_imports, dead_code))]

#[path = "../common/mod.rs"]
mod common;
#[path = "../skip/mod.rs"]
mod skip;

#[cfg(feature = "async")]
mod async_adapter;
mod cancel_reschedule;
#[cfg(target_os = "linux")]
mod child;
mod config;
mod containment;
mod ids;
mod memory;
mod races;
mod refusal;
mod repeating;
mod scheduling;
mod shutdown;
mod shutdown_timeout;
mod slow_callbacks;
mod stress;
mod virtual_time;
mod wakeups;
