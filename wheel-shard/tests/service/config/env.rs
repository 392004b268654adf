//! `WHEEL_*` environment variables: they override fields, a bad one is an error naming the
//! variable and the field, and empty, lenient, misspelt, lower-case, garbage or non-UTF-8 values
//! read as pinned down here. Only `with_env_reads_the_process_environment` touches this process's
//! environment; the others read a given lookup or run in a child process.

use std::ffi::OsString;
#[cfg(unix)]
use std::os::unix::ffi::OsStringExt;
use std::panic::catch_unwind;
use std::time::Duration;

use wheel_shard::{limits, Config, ConfigError};

use super::*;
#[cfg(target_os = "linux")]
use crate::child::*;
use crate::common;

#[test]
fn environment_variables_override_fields() {
    let vars = [
        ("WHEEL_SHARDS", "3"),
        ("WHEEL_TICK_THREADS", "3"),
        ("WHEEL_TICK", "250us"),
        ("WHEEL_WHEEL_SLOTS", "128"),
        ("WHEEL_EXECUTOR_THREADS", "4"),
        ("WHEEL_MAX_PENDING", "1_000"),
        ("WHEEL_TRANSFER_BATCH", "500"),
        ("WHEEL_RING_CAPACITY", "4096"),
        ("WHEEL_PIN_THREADS", "false"),
        ("WHEEL_REALTIME_TICKS", "true"),
        ("WHEEL_SHORT_TICK_SLICE", "false"),
        ("WHEEL_SATURATION_TIMEOUT", "1s"),
        ("WHEEL_CAPACITY", "2_000_000"),
        ("WHEEL_SLOW_CALLBACK", "5ms"),
    ];
    let lookup = |name: &str| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    };
    let config = Config::default().with_vars(lookup).unwrap();
    assert_eq!(
        config,
        Config {
            shards: 3,
            tick_threads: Some(3),
            tick: Duration::from_micros(250),
            wheel_slots: 128,
            executor_threads: 4,
            max_pending: Some(1000),
            transfer_batch: 500,
            ring_capacity: 4096,
            pin_threads: false,
            realtime_ticks: true,
            short_tick_slice: false,
            saturation_timeout: Duration::from_secs(1),
            capacity: 2_000_000,
            slow_callback: Duration::from_millis(5),
        }
    );
    let none = Config::default()
        .with_vars(|n| (n == "WHEEL_MAX_PENDING").then(|| "none".to_string()))
        .unwrap();
    assert_eq!(none.max_pending, None);
    let automatic = Config::default()
        .with_vars(|n| (n == "WHEEL_TICK_THREADS").then(|| "none".to_string()))
        .unwrap();
    assert_eq!(automatic.tick_threads, None);
}

#[test]
fn a_bad_environment_variable_names_the_variable_and_the_field() {
    for (var, value, field) in [
        ("WHEEL_SHARDS", "many", "shards"),
        ("WHEEL_TICK", "fast", "tick"),
        ("WHEEL_PIN_THREADS", "maybe", "pin_threads"),
        ("WHEEL_SHARDS", "0", "shards"),
        ("WHEEL_TICK_THREADS", "0", "tick_threads"),
        ("WHEEL_TICK_THREADS", "some", "tick_threads"),
    ] {
        let error = Config::default()
            .with_vars(|n| (n == var).then(|| value.to_string()))
            .unwrap_err();
        assert_eq!(error.field(), Some(field), "{error}");
        if !matches!(error, ConfigError::Invalid { .. }) {
            assert!(
                error.to_string().contains(var),
                "{error} does not name {var}"
            );
        }
    }
}

#[test]
fn with_env_reads_the_process_environment() {
    // The only test in this binary that touches the process environment.
    std::env::set_var("WHEEL_TRANSFER_BATCH", "777");
    let config = Config::default().with_env();
    std::env::remove_var("WHEEL_TRANSFER_BATCH");
    assert_eq!(config.unwrap().transfer_batch, 777);
}

/// What `WHEEL_*` numbers and booleans accept beyond the plain forms, pinned down: blank space
/// around the value is trimmed, `_` may stand anywhere between or around digits, a leading `+`
/// and leading zeros are allowed, booleans take any case and yes/no/on/off. Hex, floats,
/// non-ASCII digits, a lone `_`, `NONE` and `y` are errors naming the variable.
#[cfg(target_os = "linux")]
#[test]
fn environment_numbers_and_booleans_read_as_pinned_down() {
    for (value, shards) in [
        (" 4 ", 4),
        ("4\n", 4),
        ("\u{a0}4", 4),
        ("1_0", 10),
        ("1__0", 10),
        ("_4_", 4),
        ("+4", 4),
        ("004", 4),
    ] {
        let config = with_var(Config::default(), "WHEEL_SHARDS", value).unwrap();
        assert_eq!(config.shards, shards, "WHEEL_SHARDS={value:?}");
    }
    for (value, on) in [
        ("TRUE", true),
        ("Yes", true),
        ("on", true),
        (" 1 ", true),
        ("False", false),
        ("NO", false),
        ("off", false),
    ] {
        let config = with_var(Config::default(), "WHEEL_PIN_THREADS", value).unwrap();
        assert_eq!(config.pin_threads, on, "WHEEL_PIN_THREADS={value:?}");
    }
    for (var, value) in [
        ("WHEEL_SHARDS", "0x4"),
        ("WHEEL_SHARDS", "4.0"),
        ("WHEEL_SHARDS", "٤"),
        ("WHEEL_SHARDS", "_"),
        ("WHEEL_SHARDS", "4 4"),
        ("WHEEL_SHARDS", ""),
        ("WHEEL_MAX_PENDING", "NONE"),
        ("WHEEL_TICK_THREADS", "None"),
        ("WHEEL_PIN_THREADS", "y"),
        ("WHEEL_PIN_THREADS", ""),
    ] {
        let error = with_var(Config::default(), var, value).unwrap_err();
        assert!(
            matches!(&error, ConfigError::Env { var: named, value: v, .. }
                if named == var && v == value),
            "{var}={value:?}: {error:?}"
        );
        assert!(error.to_string().contains(var), "{error}");
    }
}

/// An empty `WHEEL_MAX_PENDING` or `WHEEL_TICK_THREADS` (`WHEEL_MAX_PENDING=`, a template
/// that substituted nothing) must not silently lift the limit a file set: the documented
/// values are `none` and numbers, and an empty `WHEEL_SHARDS` is an error naming it.
#[cfg(target_os = "linux")]
#[test]
fn an_empty_optional_variable_is_an_error_not_none() {
    let file = Config::from_toml_str("shards = 8\nmax_pending = 1000\ntick_threads = 8").unwrap();
    for var in ["WHEEL_MAX_PENDING", "WHEEL_TICK_THREADS"] {
        for value in ["", " "] {
            let result = with_var(file.clone(), var, value);
            assert!(
                matches!(&result, Err(ConfigError::Env { var: named, .. }) if named == var),
                "{var}={value:?} gave {:?}",
                result.map(|c| (c.max_pending, c.tick_threads))
            );
        }
    }
}

/// `with_vars` asks for exactly the fourteen `WHEEL_<FIELD>` names, in capitals, so a
/// misspelt (`WHEEL_SHARD`), lower-case (`wheel_shards`) or unknown `WHEEL_*` variable is never
/// read: `with_env` in a process that has them set gives the defaults. (Unlike an unknown TOML
/// key, it is not an error either: see the report.)
#[cfg(target_os = "linux")]
#[test]
fn misspelt_and_lower_case_variables_are_never_read() {
    let asked = std::sync::Mutex::new(Vec::new());
    let config = Config::default()
        .with_vars(|name| {
            asked.lock().unwrap().push(name.to_string());
            None
        })
        .unwrap();
    assert_eq!(config, Config::default());
    let expected: Vec<String> = limits::FIELDS.iter().map(|f| f.env_var()).collect();
    assert_eq!(*asked.lock().unwrap(), expected);

    let run = run_child(
        "child_reads_its_environment",
        None,
        &[
            ("WHEEL_SHARD", "7".into()),
            ("wheel_shards", "7".into()),
            ("Wheel_Shards", "7".into()),
            ("WHEEL_TICKS", "7ms".into()),
            ("WHEEL_SHARDS_", "7".into()),
            ("WHEEL_", "7".into()),
        ],
        Duration::from_secs(30),
    );
    run.assert_passed();
    assert_eq!(run.report("result"), "defaults", "{}", run.output());
}

/// A `WHEEL_*` variable whose value is not UTF-8 (`WHEEL_SHARDS=$'\xff4'`) is an error naming
/// it, like any value that does not parse; never ignored for the default.
#[cfg(target_os = "linux")]
#[test]
fn a_variable_that_is_not_utf8_is_an_error_naming_it() {
    let run = run_child(
        "child_reads_its_environment",
        None,
        &[("WHEEL_SHARDS", OsString::from_vec(b"\xff4".to_vec()))],
        Duration::from_secs(30),
    );
    run.assert_passed();
    let result = run.report("result");
    assert!(
        result.starts_with("err") && result.contains("WHEEL_SHARDS"),
        "WHEEL_SHARDS=b\"\\xff4\" gave {result}"
    );
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "the child half of the tests of the process environment"]
fn child_reads_its_environment() {
    if !in_child("child_reads_its_environment") {
        return;
    }
    let result = match Config::default().with_env() {
        Ok(config) if config == Config::default() => "defaults".to_string(),
        other => describe(&other),
    };
    report("result", result);
}

// Guards: garbage in every WHEEL_* variable is a typed error naming that field (or a valid
// value), never a panic; and `max_pending = usize::MAX` from the environment works.
#[test]
fn garbage_in_every_environment_variable_is_a_typed_error() {
    let garbage = [
        "",
        " ",
        "-1",
        "1e3",
        "0x10",
        "1.5",
        "99999999999999999999999999999",
        "18446744073709551616",
        "１２",
        "NaN",
        "inf",
        "\u{0}",
        "-5ms",
        "18446744073709551616s",
        "99999999999999999999h",
        "1 parsec",
        "true false",
        "__",
        "1_000_000_000_000_000_000_000",
    ];
    for field in limits::FIELDS {
        let var = field.env_var();
        for value in garbage {
            let result = catch_unwind(|| {
                Config::default().with_vars(|name| (name == var).then(|| value.to_string()))
            });
            let result = result.unwrap_or_else(|_| panic!("{var}={value:?} panicked"));
            match result {
                Ok(config) => assert!(config.validate().is_ok(), "{var}={value:?}"),
                Err(error) => {
                    assert_eq!(
                        error.field(),
                        Some(field.name()),
                        "{var}={value:?}: {error}"
                    )
                }
            }
        }
    }
    let most = limits::MAX_COUNT;
    let config = Config::default()
        .with_vars(|name| (name == "WHEEL_MAX_PENDING").then(|| most.to_string()))
        .unwrap();
    assert_eq!(config.max_pending, Some(most));
    let timers = common::service_with(config);
    let id = timers.schedule(Duration::from_secs(60), || {}).unwrap();
    assert!(timers.cancel(id));
    assert!(timers.schedule(Duration::from_secs(60), || {}).is_ok());
    assert_eq!(timers.shutdown().len(), 1);
}
