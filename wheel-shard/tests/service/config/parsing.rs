//! TOML: every field read, defaults kept, and TOML of the wrong shape (control characters,
//! integer forms, wrong kinds, duplicate keys, duration strings, deep nesting, very long keys and
//! values, quoted keys) an error naming its field or line; every valid config round-trips
//! through TOML and the environment.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use wheel_shard::{limits, Config, ConfigError};

use super::*;
use crate::common::within;

#[test]
fn toml_reads_every_field_and_keeps_defaults_for_the_rest() {
    let config = Config::from_toml_str(
        r#"
        shards = 3
        tick_threads = 2
        tick = "500us"
        wheel_slots = 100
        executor_threads = 5
        max_pending = 1000
        transfer_batch = 10
        ring_capacity = 1000
        pin_threads = false
        realtime_ticks = true
        short_tick_slice = false
        saturation_timeout = "2s"
        capacity = 50000
        slow_callback = "20ms"
        "#,
    )
    .unwrap();
    assert_eq!(
        config,
        Config {
            shards: 3,
            tick_threads: Some(2),
            tick: Duration::from_micros(500),
            wheel_slots: 100,
            executor_threads: 5,
            max_pending: Some(1000),
            transfer_batch: 10,
            ring_capacity: 1000,
            pin_threads: false,
            realtime_ticks: true,
            short_tick_slice: false,
            saturation_timeout: Duration::from_secs(2),
            capacity: 50_000,
            slow_callback: Duration::from_millis(20),
        }
    );
    let partial = Config::from_toml_str("tick = \"2ms\"").unwrap();
    assert_eq!(
        partial,
        Config {
            tick: Duration::from_millis(2),
            ..Config::default()
        }
    );
}

#[test]
fn unparsable_toml_is_an_error_not_a_panic() {
    let error = Config::from_toml_str("shards = = 2").unwrap_err();
    assert!(matches!(error, ConfigError::Toml { .. }), "{error}");
}

#[test]
fn config_round_trips_through_toml() {
    let config = Config {
        max_pending: Some(5),
        ..Config::default()
    };
    let text = toml::to_string(&config).unwrap();
    assert_eq!(Config::from_toml_str(&text).unwrap(), config);
}

/// NUL and other control characters after a value, inside a string and a lone CR as a line
/// end are TOML errors naming the field of their line.
#[cfg(target_os = "linux")]
#[test]
fn control_characters_in_values_are_errors_naming_their_field() {
    for (text, field) in [
        ("shards = 3\0", "shards"),
        ("shards = 3\u{1}\n", "shards"),
        ("tick = \"1\0ms\"", "tick"),
        ("tick = \"1ms\u{7f}\"", "tick"),
        ("shards = 3\rtick = \"1ms\"", "shards"),
        ("shards = 3 # \u{7f}", "shards"),
    ] {
        let error = toml_error(text);
        assert!(
            matches!(error, ConfigError::Toml { .. }),
            "{text:?}: {error}"
        );
        assert_names(&error, field, text);
    }
}

/// TOML's own integer forms (hex, octal, binary, `+`, `_` between digits) read as the numbers
/// they are, as the TOML spec says.
#[cfg(target_os = "linux")]
#[test]
fn toml_integer_forms_read_as_their_values() {
    for (text, shards) in [
        ("shards = 0x10", 16),
        ("shards = 0o10", 8),
        ("shards = 0b11", 3),
        ("shards = +4", 4),
        ("shards = 1_0", 10),
    ] {
        assert_eq!(
            Config::from_toml_str(text).unwrap().shards,
            shards,
            "{text}"
        );
    }
    let most = Config::from_toml_str(&format!("max_pending = {}", i64::MAX)).unwrap();
    assert_eq!(most.max_pending, Some(i64::MAX as usize));
}

/// Floats, exponents, `inf`/`nan`, negatives, integers past TOML's `i64`, dates, strings,
/// arrays and inline tables where a number, a boolean or a duration belongs: each is an error
/// naming its field, never a value rounded, wrapped or defaulted.
#[cfg(target_os = "linux")]
#[test]
fn values_of_the_wrong_kind_are_errors_naming_their_field() {
    let cases = [
        ("shards = 2.0", "shards"),
        ("shards = 1e3", "shards"),
        ("shards = inf", "shards"),
        ("shards = -inf", "shards"),
        ("shards = nan", "shards"),
        ("wheel_slots = -64", "wheel_slots"),
        ("transfer_batch = -1", "transfer_batch"),
        ("capacity = 9223372036854775808", "capacity"),
        ("max_pending = 18446744073709551616", "max_pending"),
        (
            "ring_capacity = 99999999999999999999999999999",
            "ring_capacity",
        ),
        ("executor_threads = true", "executor_threads"),
        ("executor_threads = \"4\"", "executor_threads"),
        ("shards = 1979-05-27", "shards"),
        ("tick_threads = \"none\"", "tick_threads"),
        ("max_pending = \"none\"", "max_pending"),
        ("max_pending = []", "max_pending"),
        ("pin_threads = \"true\"", "pin_threads"),
        ("pin_threads = True", "pin_threads"),
        ("realtime_ticks = 1", "realtime_ticks"),
        ("short_tick_slice = \"yes\"", "short_tick_slice"),
        ("tick = 1", "tick"),
        ("tick = 1000", "tick"),
        ("tick = 1.5", "tick"),
        ("tick = 1979-05-27T07:32:00Z", "tick"),
        ("tick = 07:32:00", "tick"),
        ("saturation_timeout = true", "saturation_timeout"),
        ("slow_callback = [\"1ms\"]", "slow_callback"),
        ("shards = [1]", "shards"),
        ("shards = [\n  1,\n  2,\n]", "shards"),
        ("shards = {}", "shards"),
        ("shards = { value = 2 }", "shards"),
        ("shards.value = 2", "shards"),
    ];
    for (text, field) in cases {
        let error = within(PARSE_LIMIT, move || toml_error(text));
        assert!(
            matches!(error, ConfigError::Toml { .. }),
            "{text:?}: {error}"
        );
        assert_names(&error, field, text);
    }
}

/// A key given twice (or as a table after a value) is an error naming it, never the first or
/// the last value silently.
#[cfg(target_os = "linux")]
#[test]
fn duplicate_keys_are_errors_naming_the_key() {
    for text in [
        "shards = 1\nshards = 2",
        "shards = 1\nshards = 1",
        "shards = 1\n\n# later\nshards = 2\n",
        "shards = 1\n[shards]\n",
    ] {
        let error = toml_error(text);
        assert!(
            matches!(error, ConfigError::Toml { .. }),
            "{text:?}: {error}"
        );
        assert!(error.to_string().contains("shards"), "{text:?}: {error}");
        if !text.contains('[') {
            assert_names(&error, "shards", text);
        }
    }
}

/// Duration strings at humantime's edges, through TOML and through `WHEEL_*`: each string reads
/// alike in both (same value, or an error in both), to the value in the table (`None`: an
/// error naming the field). Blank space around and inside is allowed, "1.5ms" is fractional,
/// "1ms1ms" adds up, "0" is zero; signs, exponents, `_`, commas, non-ASCII digits, upper-case
/// units and overflow are errors.
#[cfg(target_os = "linux")]
#[test]
fn duration_strings_read_alike_in_toml_and_the_environment() {
    let us = Duration::from_micros;
    let cases: &[(&str, Option<Duration>)] = &[
        ("0", Some(Duration::ZERO)),
        ("0ms", Some(Duration::ZERO)),
        ("", None),
        (" ", None),
        (" 1ms", Some(us(1000))),
        ("1 ms", Some(us(1000))),
        ("1ms ", Some(us(1000))),
        ("\t1ms\n", Some(us(1000))),
        ("1.5ms", Some(us(1500))),
        ("1ms1ms", Some(us(2000))),
        ("1ms 500us", Some(us(1500))),
        ("1msec", Some(us(1000))),
        ("10µs", Some(us(10))),
        ("1ns", Some(Duration::from_nanos(1))),
        ("-1ms", None),
        ("+1ms", None),
        ("1e3ms", None),
        ("1_000ms", None),
        ("1,5ms", None),
        (".5ms", None),
        ("0.5ns", None),
        ("１ms", None),
        ("٣ms", None),
        ("1MS", None),
        ("1 millisecond", None),
        ("1ms!", None),
        ("999999999999999999999h", None),
        ("18446744073709551616ns", None),
        ("584542046091y", None),
    ];
    for &(text, expected) in cases {
        let toml_line = format!("saturation_timeout = {}", toml::Value::from(text));
        let from_toml = Config::from_toml_str(&toml_line);
        let from_env = with_var(Config::default(), "WHEEL_SATURATION_TIMEOUT", text);
        match expected {
            Some(value) => {
                assert_eq!(
                    from_toml.as_ref().map(|c| c.saturation_timeout).ok(),
                    Some(value),
                    "{toml_line}: {from_toml:?}"
                );
                assert_eq!(
                    from_env.as_ref().map(|c| c.saturation_timeout).ok(),
                    Some(value),
                    "WHEEL_SATURATION_TIMEOUT={text:?}: {from_env:?}"
                );
            }
            None => {
                assert_names(&from_toml.unwrap_err(), "saturation_timeout", &toml_line);
                let error = from_env.unwrap_err();
                assert_names(&error, "saturation_timeout", text);
                if let ConfigError::Env { .. } = error {
                    assert!(
                        error.to_string().contains("WHEEL_SATURATION_TIMEOUT"),
                        "{error}"
                    );
                }
            }
        }
    }
}

/// Arrays and inline tables nested 100 000 deep, dotted keys 100 000 parts long and a table
/// header as long: errors (the parser's recursion limit) in bounded time, never a stack
/// overflow, which would abort the process.
#[cfg(target_os = "linux")]
#[test]
fn deeply_nested_input_is_an_error_not_a_stack_overflow() {
    let depth = 100_000;
    let cases = [
        format!("shards = {}{}", "[".repeat(depth), "]".repeat(depth)),
        format!("shards = {}1{}", "[".repeat(depth), "]".repeat(depth)),
        format!("shards = {}1{}", "{ a = ".repeat(depth), " }".repeat(depth)),
        format!("{} = 1", vec!["shards"; depth].join(".")),
        format!("[{}]\nx = 1", vec!["a"; depth].join(".")),
        format!("x = {}", "[{a=[".repeat(depth / 3)),
    ];
    for text in cases {
        let start = Instant::now();
        // On a thread with the default stack of 2 MiB, as `within` starts.
        let (error, kind) = within(PARSE_LIMIT, move || {
            let error = toml_error(&text);
            let kind = matches!(error, ConfigError::Toml { .. });
            (
                error.to_string().chars().take(120).collect::<String>(),
                kind,
            )
        });
        assert!(kind, "{error}");
        assert!(start.elapsed() < Duration::from_secs(10), "{error}");
    }
}

/// A 10 MB unknown key, a 10 MB duration string, a number of a million digits and a string of
/// a million escapes: errors naming the key or field, in bounded time and memory.
#[cfg(target_os = "linux")]
#[test]
fn very_long_keys_and_values_are_errors_in_bounded_time() {
    within(PARSE_LIMIT, || {
        let key = "k".repeat(10_000_000);
        let error = toml_error(&format!("{key} = 1"));
        assert_eq!(error.field(), Some(key.as_str()));
        let cases = [
            (format!("tick = \"{}\"", "9".repeat(10_000_000)), "tick"),
            (format!("tick = \"{}ms\"", "1ms ".repeat(2_500_000)), "tick"),
            (format!("shards = {}", "9".repeat(1_000_000)), "shards"),
            (
                format!("tick = \"{}\"", "\\u00e9".repeat(1_000_000)),
                "tick",
            ),
        ];
        for (text, field) in cases {
            let start = Instant::now();
            let error = toml_error(&text);
            assert_names(&error, field, &text[..40]);
            assert!(start.elapsed() < Duration::from_secs(10), "{}", &text[..40]);
        }
    });
}

/// Every TOML error says where it is: it names the field at fault or the line. A table header
/// `[shards]` is the field `shards` given a table; a NUL byte in a comment, or a line that is
/// not a key, has a line.
#[cfg(target_os = "linux")]
#[test]
fn every_toml_error_names_its_field_or_its_line() {
    for (text, says) in [
        ("[shards]\n", "`shards`"),
        ("[[shards]]\n", "`shards`"),
        ("[tick]\nvalue = 1\n", "`tick`"),
        ("shards = 2\n# a comment with a NUL \0 in it\n", "line 2"),
        ("shards = 2\ntick\n", "line 2"),
        ("shards = 2\n\u{e9}\n", "line 2"),
        ("shards = 2\n\n[[]]\n", "line 3"),
    ] {
        let error = toml_error(text);
        assert!(
            error.to_string().contains(says),
            "{text:?}: the error does not say {says}: {error:?}"
        );
    }
}

/// An error names the field it is about, whatever the value holds: a value with a field name
/// in backticks must not be taken for the field (`shards = "field \`x\`"` is about `shards`).
#[cfg(target_os = "linux")]
#[test]
fn a_field_name_in_backticks_inside_a_value_does_not_misname_the_field() {
    for (text, field) in [
        ("shards = \"field `x`\"", "shards"),
        ("tick = \"field `capacity`\"", "tick"),
        (
            "pin_threads = \"unknown field `realtime_ticks`\"",
            "pin_threads",
        ),
    ] {
        assert_names(&toml_error(text), field, text);
    }
}

/// A quoted key (`"shards" = "x"`, `'tick' = 1`, legal TOML for `shards`) is named as the
/// field it is, without its quotes.
#[cfg(target_os = "linux")]
#[test]
fn a_quoted_key_is_named_without_its_quotes() {
    assert_eq!(
        Config::from_toml_str("\"shards\" = 3").unwrap().shards,
        3,
        "a quoted key is the field"
    );
    for (text, field) in [
        ("\"shards\" = \"x\"", "shards"),
        ("'tick' = 1", "tick"),
        ("\"pin_threads\" = 3", "pin_threads"),
    ] {
        assert_names(&toml_error(text), field, text);
    }
}

// ---- round trips ----

/// A duration in `min..=max`, to the nanosecond.
#[cfg(target_os = "linux")]
fn duration_in(min: Duration, max: Duration) -> impl Strategy<Value = Duration> {
    (min.as_nanos() as u64..=max.as_nanos() as u64).prop_map(Duration::from_nanos)
}

/// Any valid config whose counts fit TOML's integers (`i64`).
#[cfg(target_os = "linux")]
fn valid_config() -> impl Strategy<Value = Config> {
    let toml_max = i64::MAX as usize;
    (
        (
            1..=limits::MAX_SHARDS,
            proptest::option::of(1..=limits::MAX_SHARDS),
            duration_in(limits::MIN_TICK, limits::MAX_TICK),
            1..=limits::MAX_WHEEL_SLOTS,
            1..=limits::MAX_EXECUTOR_THREADS,
            proptest::option::of(prop_oneof![1..=1000usize, 1..=toml_max]),
            prop_oneof![1..=1000usize, 1..=toml_max],
        ),
        (
            limits::MIN_RING_CAPACITY..=limits::MAX_RING_CAPACITY,
            any::<(bool, bool, bool)>(),
            duration_in(Duration::ZERO, limits::MAX_SATURATION_TIMEOUT),
            0..=limits::MAX_CAPACITY,
            duration_in(limits::MIN_SLOW_CALLBACK, limits::MAX_SLOW_CALLBACK),
        ),
    )
        .prop_map(
            |(
                (shards, tick_threads, tick, wheel_slots, executor_threads, max_pending, batch),
                (ring_capacity, (pin, realtime, short), saturation_timeout, capacity, slow),
            )| Config {
                shards,
                tick_threads,
                tick,
                wheel_slots,
                executor_threads,
                max_pending,
                transfer_batch: batch,
                ring_capacity,
                pin_threads: pin,
                realtime_ticks: realtime,
                short_tick_slice: short,
                saturation_timeout,
                capacity,
                slow_callback: slow,
            },
        )
}

#[cfg(target_os = "linux")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every valid config (counts within TOML's `i64`, durations to the nanosecond) printed
    /// with `toml::to_string` reads back as itself, through TOML and, value by value, through
    /// the `WHEEL_*` variables; its memory estimate is computed without overflow or panic.
    #[test]
    fn every_valid_config_round_trips_through_toml_and_the_environment(config in valid_config()) {
        config.validate().unwrap();
        let _ = config.memory_estimate();
        let text = toml::to_string(&config).unwrap();
        prop_assert_eq!(&Config::from_toml_str(&text).unwrap(), &config, "{}", text);
        let values: Vec<(String, String)> = limits::FIELDS
            .iter()
            .map(|field| {
                let value = text
                    .lines()
                    .find_map(|line| line.strip_prefix(&format!("{} = ", field.name())))
                    .map_or("none".to_string(), |v| v.trim_matches('"').to_string());
                (field.env_var(), value)
            })
            .collect();
        let from_env = Config::default()
            .with_vars(|name| values.iter().find(|(var, _)| var == name).map(|(_, v)| v.clone()))
            .unwrap();
        prop_assert_eq!(&from_env, &config, "{:?}", values);
    }
}

/// Counts past `i64::MAX` cannot be written as TOML, so validation stops `max_pending` and
/// `transfer_batch` there (`limits::MAX_COUNT`): the largest valid values print as TOML and
/// read back as themselves, and one past them (`WHEEL_MAX_PENDING=18446744073709551615`, say)
/// is an error naming the field.
#[cfg(target_os = "linux")]
#[test]
fn the_largest_valid_counts_round_trip_through_toml() {
    let most = wheel_shard::limits::MAX_COUNT;
    let from_env = with_var(Config::default(), "WHEEL_MAX_PENDING", &most.to_string()).unwrap();
    for config in [
        from_env,
        Config {
            transfer_batch: most,
            ..Config::default()
        },
    ] {
        config.validate().unwrap();
        let text = toml::to_string(&config)
            .unwrap_or_else(|e| panic!("a valid config does not print as TOML: {e}"));
        assert_eq!(Config::from_toml_str(&text).unwrap(), config);
    }
    let past = with_var(
        Config::default(),
        "WHEEL_MAX_PENDING",
        &usize::MAX.to_string(),
    );
    assert!(
        matches!(
            &past,
            Err(ConfigError::Invalid {
                field: "max_pending",
                ..
            })
        ),
        "{past:?}"
    );
    let past = Config {
        transfer_batch: most + 1,
        ..Config::default()
    };
    assert_eq!(past.validate().unwrap_err().field(), Some("transfer_batch"));
}
