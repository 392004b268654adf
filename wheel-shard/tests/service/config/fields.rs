//! One table of fields (`wheel_shard::limits::FIELDS`): the struct, the environment, validation,
//! the README's configuration table and `wheel.toml` agree.

use std::time::Duration;

use wheel_shard::{limits, Config};

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
