//! `Config`: TOML, files, environment variables, validation and what `TimerService::new` refuses,
//! each with a typed error naming the file, field or variable at fault. Also how `Config` is loaded
//! from hostile input: files that are not files (directories, FIFOs, `/dev/zero`, `/dev/urandom`,
//! huge or unreadable files, bad UTF-8, a BOM, CRLF, NUL bytes), TOML of the wrong shape (integer
//! forms, wrong types, duplicate keys, tables for scalars, deep nesting, very long keys and values,
//! duration strings at the edges), `WHEEL_*` variables that are empty, lenient, misspelt or not
//! UTF-8, configs at the edges of validation that `TimerService::new` must start or refuse, and the
//! round trip of every valid config through TOML and the environment.
//!
//! The promise checked: hostile input gets a typed error naming the file, field or variable at
//! fault, or a behaviour pinned down here; never a panic, a hang, an abort, unbounded memory or a
//! silently wrong value. Every body that could hang runs under [`within`](crate::common::within),
//! or in a child process that is killed, failing the test, at a deadline ([`crate::child`]).
//!
//! An audit of loading found nine bugs, each fixed and guarded by its test here: `from_file` hung
//! on a FIFO without a writer and read endless or huge input whole (it now refuses what is not a
//! regular file and stops at `limits::MAX_FILE_BYTES`); TOML errors off a `key =` line said neither
//! field nor line, a field name in backticks inside a value misnamed the field, and a quoted key
//! kept its quotes; an empty `WHEEL_MAX_PENDING` meant `none` and a variable that is not UTF-8 was
//! ignored; counts past `i64::MAX` passed validation but could not be written as TOML; and
//! `memory_estimate` overflowed on a ring capacity built in code past `2^63`. It also found 64 idle
//! shards holding 385 MiB resident against an estimate of 24 MiB (idle workers made each wheel's
//! next 4 MiB resident before the shard held a timer); now 4 MiB (`crate::memory`). (`#[ignore]`d
//! tests here are the child halves of tests that run them in a process of their own.)

mod allocation;
mod env;
mod fields;
mod files;
mod parsing;
mod validation;

use std::time::Duration;

use wheel_shard::{Config, ConfigError};

fn field_of(result: Result<Config, ConfigError>) -> String {
    let error = result.expect_err("invalid config accepted");
    let field = error.field().map(str::to_string).unwrap_or_default();
    assert!(
        error.to_string().contains(&field),
        "message {error} does not name the field {field}"
    );
    field
}

/// Long enough for any parse here on a loaded 2-core machine in a debug build.
#[cfg(target_os = "linux")]
const PARSE_LIMIT: Duration = Duration::from_secs(20);

/// The error `text` gives; fails the test where it is accepted.
#[cfg(target_os = "linux")]
fn toml_error(text: &str) -> ConfigError {
    match Config::from_toml_str(text) {
        Ok(config) => panic!("{text:?} was accepted as {config:?}"),
        Err(error) => error,
    }
}

/// Asserts that `error` names `field`, both as [`ConfigError::field`] and in its message.
#[cfg(target_os = "linux")]
fn assert_names(error: &ConfigError, field: &str, input: &str) {
    assert_eq!(error.field(), Some(field), "{input:?}: {error}");
    assert!(
        error.to_string().contains(&format!("`{field}`")),
        "{input:?}: the message does not name `{field}`: {error}"
    );
}

/// `config` with the one variable `var` set to `value`, the rest unset.
#[cfg(target_os = "linux")]
fn with_var(config: Config, var: &str, value: &str) -> Result<Config, ConfigError> {
    config.with_vars(|name| (name == var).then(|| value.to_string()))
}

/// A small valid config with one field set far outside its range, by name.
#[cfg(target_os = "linux")]
fn extreme_configs() -> Vec<(&'static str, Config)> {
    let base = Config {
        shards: 2,
        executor_threads: 2,
        pin_threads: false,
        ..Config::default()
    };
    let at = |field: &'static str, config: Config| (field, config);
    vec![
        at(
            "shards",
            Config {
                shards: 0,
                ..base.clone()
            },
        ),
        at(
            "shards",
            Config {
                shards: usize::MAX,
                ..base.clone()
            },
        ),
        at(
            "tick_threads",
            Config {
                tick_threads: Some(usize::MAX),
                ..base.clone()
            },
        ),
        at(
            "tick",
            Config {
                tick: Duration::MAX,
                ..base.clone()
            },
        ),
        at(
            "tick",
            Config {
                tick: Duration::from_nanos(1),
                ..base.clone()
            },
        ),
        at(
            "wheel_slots",
            Config {
                wheel_slots: usize::MAX,
                ..base.clone()
            },
        ),
        at(
            "wheel_slots",
            Config {
                wheel_slots: 0,
                ..base.clone()
            },
        ),
        at(
            "executor_threads",
            Config {
                executor_threads: usize::MAX,
                ..base.clone()
            },
        ),
        at(
            "transfer_batch",
            Config {
                transfer_batch: 0,
                ..base.clone()
            },
        ),
        at(
            "ring_capacity",
            Config {
                ring_capacity: 0,
                ..base.clone()
            },
        ),
        at(
            "ring_capacity",
            Config {
                ring_capacity: usize::MAX,
                ..base.clone()
            },
        ),
        at(
            "ring_capacity",
            Config {
                ring_capacity: (1 << 63) + 1,
                ..base.clone()
            },
        ),
        at(
            "saturation_timeout",
            Config {
                saturation_timeout: Duration::MAX,
                ..base.clone()
            },
        ),
        at(
            "capacity",
            Config {
                capacity: usize::MAX,
                ..base.clone()
            },
        ),
        at(
            "slow_callback",
            Config {
                slow_callback: Duration::ZERO,
                ..base.clone()
            },
        ),
        at(
            "slow_callback",
            Config {
                slow_callback: Duration::MAX,
                ..base
            },
        ),
    ]
}

/// The user a root test process drops to, to meet a permission it would otherwise ignore.
#[cfg(target_os = "linux")]
const NOBODY: u32 = 65534;
