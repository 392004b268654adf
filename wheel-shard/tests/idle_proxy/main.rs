//! The tests of `examples/idle_proxy.rs`: against hostile clients and upstreams written here
//! (no redis needed), in front of a real `redis-server` driven by `redis-benchmark`, `redis-cli`
//! and 2 000 idle connections, and of its start-up, limits and stop.
//!
//! The proxy runs in-process: this binary includes the example's source as a module and runs
//! its `Proxy` on a runtime of its own. That is the robust way: the code under test is the
//! example's code, compiled by this very `cargo test`, with no nested `cargo build` (which
//! would wait on the target-dir lock or rebuild everything in a second target dir) and no
//! guessing where cargo put an example binary. Only `main` (argument parsing is tested, Ctrl-C
//! by hand) is not exercised.
//!
//! The tests measure time, so they run one at a time ([`serial`]). To add some: a file of this
//! directory declared below.

// Many tests here are Linux-only (child processes, /proc, prlimit): elsewhere the imports
// and helpers they use stand unused.
#![cfg_attr(not(target_os = "linux"), allow(unused_imports, dead_code))]

#[allow(dead_code)]
#[path = "../../examples/idle_proxy.rs"]
mod idle_proxy;

#[path = "../common/mod.rs"]
mod common;
#[path = "../skip/mod.rs"]
mod skip;

mod harness;
mod redis_harness;

mod connection_limits;
mod random;
mod redis;
mod resets;
mod slow_readers;
mod startup;
mod stopping;
mod timeouts;

use std::net::Ipv4Addr;
use std::sync::{Mutex, MutexGuard, PoisonError};

const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// The proxy's tests measure time; running them one at a time keeps them from skewing each
/// other. Each takes this lock for its whole run.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}
