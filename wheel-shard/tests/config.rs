//! `Config`: TOML, files, environment variables, and an error naming the field for every bad value.

use std::time::Duration;

use wheel_shard::{limits, Config, ConfigError, TimerService};

mod skip;

fn field_of(result: Result<Config, ConfigError>) -> String {
    let error = result.expect_err("invalid config accepted");
    let field = error.field().map(str::to_string).unwrap_or_default();
    assert!(
        error.to_string().contains(&field),
        "message {error} does not name the field {field}"
    );
    field
}

#[test]
fn defaults_are_valid_and_documented_values() {
    let config = Config::default();
    config.validate().unwrap();
    assert!(config.shards >= 1 && config.executor_threads >= 1);
    assert_eq!(config.tick, Duration::from_millis(1));
    assert_eq!(config.transfer_batch, 100_000);
    assert_eq!(config.max_pending, None);
    assert_eq!(config.saturation_timeout, Duration::from_millis(100));
}

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
fn every_invalid_value_names_its_field() {
    let cases = [
        ("shards = 0", "shards"),
        ("shards = 100000", "shards"),
        ("tick = \"0ms\"", "tick"),
        ("tick = \"1ns\"", "tick"),
        ("tick = \"3days\"", "tick"),
        ("tick = \"soon\"", "tick"),
        ("wheel_slots = 0", "wheel_slots"),
        ("wheel_slots = 5000", "wheel_slots"),
        ("executor_threads = 0", "executor_threads"),
        ("max_pending = 0", "max_pending"),
        ("transfer_batch = 0", "transfer_batch"),
        ("ring_capacity = 1", "ring_capacity"),
        ("saturation_timeout = \"2h\"", "saturation_timeout"),
        ("capacity = 1000000000", "capacity"),
        ("capacity = -1", "capacity"),
        ("slow_callback = \"0ms\"", "slow_callback"),
        ("slow_callback = \"2h\"", "slow_callback"),
        ("shards = \"two\"", "shards"),
        ("pin_threads = 3", "pin_threads"),
        ("tcik = \"1ms\"", "tcik"),
    ];
    for (text, field) in cases {
        assert_eq!(field_of(Config::from_toml_str(text)), field, "for {text:?}");
    }
}

#[test]
fn unparsable_toml_is_an_error_not_a_panic() {
    let error = Config::from_toml_str("shards = = 2").unwrap_err();
    assert!(matches!(error, ConfigError::Toml { .. }), "{error}");
}

#[test]
fn the_service_refuses_an_invalid_config() {
    let error = TimerService::new(Config {
        executor_threads: 0,
        ..Config::default()
    })
    .unwrap_err();
    assert_eq!(error.field(), Some("executor_threads"));
}

/// What `TimerService::new` says to a config too big for the machine: `None` where this
/// machine could hold it after all, rather than have a test allocate tens of gigabytes (the
/// configs below are over half of any machine with less than 40 GB, or of any machine at all).
fn refusal(config: Config) -> Option<ConfigError> {
    if config.memory_estimate() <= limits::memory_limit() {
        skip::record(
            &format!(
                "this machine could hold the config's {} bytes, so it is not refused",
                config.memory_estimate()
            ),
            "run it on a machine with less memory",
        );
        return None;
    }
    Some(TimerService::new(config).expect_err("a config over the memory limit was accepted"))
}

#[test]
fn a_capacity_over_the_machines_memory_is_refused_not_aborted() {
    let config = Config {
        shards: 2,
        executor_threads: 1,
        pin_threads: false,
        capacity: 1 << 28,
        ..Config::default()
    };
    config.validate().unwrap();
    assert!(
        config.memory_estimate() > 15_000_000_000,
        "{} bytes: about 56 a timer",
        config.memory_estimate()
    );
    let Some(error) = refusal(config) else { return };
    assert_eq!(error.field(), Some("capacity"), "{error}");
    assert!(
        matches!(error, ConfigError::TooLarge { bytes, limit, .. }
            if bytes > limit && limit == limits::memory_limit()),
        "{error:?}"
    );
    assert!(error.to_string().contains("`capacity`"), "{error}");
}

#[test]
fn rings_over_the_machines_memory_are_refused_not_aborted() {
    let config = Config {
        shards: 1024,
        executor_threads: 1,
        pin_threads: false,
        ring_capacity: 1 << 26,
        ..Config::default()
    };
    config.validate().unwrap();
    assert!(config.memory_estimate() > 1 << 40, "24 bytes a command");
    let Some(error) = refusal(config) else { return };
    assert_eq!(error.field(), Some("ring_capacity"), "{error}");
    assert!(matches!(error, ConfigError::TooLarge { .. }), "{error:?}");
}

#[test]
fn a_modest_capacity_is_made_and_used() {
    let config = Config {
        shards: 2,
        executor_threads: 1,
        pin_threads: false,
        capacity: 200_000,
        ring_capacity: 1 << 14,
        ..Config::default()
    };
    let estimate = config.memory_estimate();
    assert!(
        (200_000 * 56..200_000 * 56 + 20_000_000).contains(&estimate),
        "{estimate} bytes"
    );
    assert!(estimate < limits::memory_limit());
    let timers = TimerService::new(config).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    timers
        .schedule(Duration::from_millis(1), move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(timers.shutdown().is_empty());
}

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

#[test]
fn files_are_read_and_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "shards = 4\n").unwrap();
    assert_eq!(Config::from_file(&good).unwrap().shards, 4);

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "tick = \"0s\"\n").unwrap();
    let error = Config::from_file(&bad).unwrap_err();
    assert_eq!(error.field(), Some("tick"));
    assert!(error.to_string().contains("bad.toml"), "{error}");

    let missing = Config::from_file(dir.path().join("missing.toml")).unwrap_err();
    assert!(matches!(missing, ConfigError::Io { .. }), "{missing}");
}

#[test]
fn the_shipped_wheel_toml_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../wheel.toml");
    let config = Config::from_file(path).unwrap();
    assert_eq!(config.tick, Duration::from_millis(1));
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

/// Set in the child process of [`an_allocation_the_allocator_refuses_is_an_error`].
const LIMITED_CHILD: &str = "ALLOCATION_LIMITED_CHILD";

/// A config within the machine's memory whose allocation the allocator refuses all the same
/// (here an address-space limit, as `ulimit -v` or strict overcommit would) is an error naming
/// the field, not an abort. Runs [`refused_allocation_in_a_limited_process`] in a child process
/// under `ulimit -v`, so the limit does not touch the other tests.
#[cfg(target_os = "linux")]
#[test]
fn an_allocation_the_allocator_refuses_is_an_error() {
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(
            "ulimit -v 1048576 && exec \"$0\" --exact refused_allocation_in_a_limited_process \
             --ignored --test-threads=1 --nocapture",
        )
        .arg(exe)
        .env(LIMITED_CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{:?}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The child's half of [`an_allocation_the_allocator_refuses_is_an_error`], which runs it with
/// `--ignored`; ignored in a normal run (where it would do nothing).
#[test]
#[ignore = "the child half of an_allocation_the_allocator_refuses_is_an_error"]
fn refused_allocation_in_a_limited_process() {
    if std::env::var_os(LIMITED_CHILD).is_none() {
        return;
    }
    // About 1.2 GB up front: under half of the machine, over the 1 GiB of address space.
    let config = Config {
        shards: 2,
        executor_threads: 1,
        pin_threads: false,
        capacity: 22_000_000,
        ..Config::default()
    };
    assert!(config.memory_estimate() < limits::memory_limit());
    let error = TimerService::new(config).expect_err("1.2 GB fit in 1 GiB of address space");
    assert_eq!(error.field(), Some("capacity"), "{error}");
    assert!(
        matches!(error, ConfigError::OutOfMemory { .. }),
        "{error:?}"
    );
    eprintln!("{error}");
}

// ---- one table of fields: the struct, the environment, validation and the docs agree ----

fn names() -> Vec<&'static str> {
    limits::FIELDS.iter().map(|f| f.name()).collect()
}

#[test]
fn the_table_of_fields_lists_every_field_of_config_in_order() {
    // Every field serialised (an optional field's `None` would be left out of the TOML).
    let config = Config {
        max_pending: Some(1),
        tick_threads: Some(1),
        ..Config::default()
    };
    let text = toml::to_string(&config).unwrap();
    let keys: Vec<&str> = text
        .lines()
        .filter_map(|line| line.split_once(" = ").map(|(key, _)| key.trim()))
        .collect();
    assert_eq!(keys, names());
}

#[test]
fn every_field_reads_its_variable_and_a_bad_value_names_both() {
    for field in limits::FIELDS {
        let var = field.env_var();
        assert_eq!(var, format!("WHEEL_{}", field.name().to_uppercase()));
        let error = Config::default()
            .with_vars(|name| (name == var).then(|| "x?".to_string()))
            .unwrap_err();
        assert_eq!(error.field(), Some(field.name()), "{error}");
        assert!(
            error.to_string().contains(&var),
            "{error} does not name {var}"
        );
    }
}

#[test]
fn an_out_of_range_value_says_the_range_or_why() {
    for (text, says) in [
        ("shards = 0", "0 is not in 1..=1024"),
        ("tick = \"1ns\"", "\"1ns\" is not in \"10us\"..=\"1h\""),
        ("ring_capacity = 1", "1 is not in 2..=2^26"),
        ("capacity = 1000000000", "1000000000 is not in 0..=2^28"),
        (
            "saturation_timeout = \"2h\"",
            "\"2h\" is not in \"0s\"..=\"1h\"",
        ),
        ("max_pending = 0", "0 would refuse every timer"),
        ("transfer_batch = 0", "0 would never move a command"),
    ] {
        let error = Config::from_toml_str(text).unwrap_err().to_string();
        assert!(error.contains(says), "{text}: {error}");
    }
}

/// The rows of the README's configuration table: (field, variable, accepts), code spans
/// unquoted.
fn readme_rows() -> Vec<(String, String, String)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Configuration"))
        .expect("a ## Configuration section in README.md");
    let mut lines = section.lines().filter(|l| l.starts_with('|'));
    let header: Vec<String> = cells(lines.next().expect("a table"));
    assert_eq!(
        header[..4],
        ["field", "env variable", "default", "accepts"],
        "the README's configuration table's columns"
    );
    lines
        .skip(1) // |---|---|
        .map(|line| {
            let row = cells(line);
            (row[0].clone(), row[1].clone(), row[3].clone())
        })
        .collect()
}

fn cells(line: &str) -> Vec<String> {
    let line = line.trim().trim_start_matches('|').trim_end_matches('|');
    line.split('|').map(|c| c.trim().replace('`', "")).collect()
}

#[test]
fn the_readme_table_lists_exactly_the_fields_with_their_variables_and_ranges() {
    let rows = readme_rows();
    let expected: Vec<_> = limits::FIELDS
        .iter()
        .map(|f| (f.name().to_string(), f.env_var(), f.accepts()))
        .collect();
    assert_eq!(rows, expected, "README.md's configuration table");
}

#[test]
fn wheel_toml_documents_exactly_the_fields_with_their_ranges() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../wheel.toml"))
        .expect("wheel.toml");
    // Each field is set (`key = value`) or shown commented out (`# key = value`), after a
    // comment paragraph that says what it accepts.
    let mut listed = Vec::new();
    let mut paragraph = String::new();
    for line in text.lines() {
        let setting = line.trim_start_matches('#').trim_start();
        let key = setting.split_once(" = ").map(|(key, _)| key);
        match key {
            Some(key) if key.chars().all(|c| c.is_ascii_lowercase() || c == '_') => {
                let field = limits::FIELDS
                    .iter()
                    .find(|f| f.name() == key)
                    .unwrap_or_else(|| panic!("wheel.toml sets `{key}`, which is not a field"));
                assert!(
                    paragraph.contains(&field.accepts()),
                    "wheel.toml's comment on `{key}` does not say it accepts {}:\n{paragraph}",
                    field.accepts()
                );
                listed.push(field.name());
                paragraph.clear();
            }
            _ if line.starts_with('#') => {
                paragraph.push_str(line.trim_start_matches('#').trim());
                paragraph.push(' ');
            }
            _ => paragraph.clear(),
        }
    }
    assert_eq!(listed, names(), "the fields wheel.toml lists, in order");
}
