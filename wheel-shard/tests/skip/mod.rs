//! Tests that cannot run here tell `cargo xtask test` so (each test file that may skip
//! includes this with `mod skip;`).
//!
//! A test that returns early reports `ok`, and the harness's output capture swallows whatever
//! it printed. So a skipping test also writes a record into the directory named by
//! [`DIR_VAR`], which `cargo xtask test` sets, clears before the run and lists at the end:
//! which tests were skipped, why, and what to run so they are not.
#![allow(dead_code)]

use std::path::Path;

/// The variable naming the directory of skip records (one file per skipped test, three lines:
/// the test, why it was skipped, what makes it run). Unset outside `cargo xtask test`.
pub const DIR_VAR: &str = "WHEEL_TEST_SKIPS";

/// Records that the calling test is skipped because of `reason`, and that `remedy` (a command)
/// would let it run. Prints the same, for `cargo test -- --nocapture`.
pub fn record(reason: &str, remedy: &str) {
    let test = format!(
        "{}::{}",
        env!("CARGO_CRATE_NAME"),
        std::thread::current().name().unwrap_or("(unnamed test)")
    );
    eprintln!("skipped {test}: {reason}; to run it: {remedy}");
    let Some(dir) = std::env::var_os(DIR_VAR) else {
        return;
    };
    let file = Path::new(&dir).join(test.replace("::", "--"));
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&file, format!("{test}\n{reason}\n{remedy}\n")))
        .unwrap_or_else(|e| panic!("cannot record the skip in {}: {e}", file.display()));
}
