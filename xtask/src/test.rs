//! `cargo xtask test`: every test of the workspace, a build of the API docs that fails on a
//! broken intra-doc link, then the loom models of the lock-free parts. It is the README's test
//! command, and `.ci/run` calls exactly it.
//!
//! A test that cannot run here (the proxy tests without redis) passes without doing anything,
//! and the test harness swallows what it prints. Such a test records itself in the directory
//! named by `WHEEL_TEST_SKIPS` (`wheel-shard/tests/skip`), which this command sets, and the
//! final summary lists every skipped test, why, and the command that lets it run.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// One step: a description and the cargo arguments, with extra environment variables.
struct Step {
    what: &'static str,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    /// Its own target directory (under the workspace's), when its flags would otherwise make
    /// cargo rebuild the main build's artifacts every time.
    target_subdir: Option<&'static str>,
}

/// The profile every step builds with (`[profile.ci]` in the workspace's `Cargo.toml`):
/// release's optimisation without its link-time optimisation, so that the test binaries link
/// in seconds. The `xtask` alias builds this command with it too, so the steps reuse what that
/// build compiled (clap and its macros).
const PROFILE: &str = "ci";

const STEPS: &[Step] = &[
    Step {
        what: "unit, integration, property and doc tests, the bench harness in --quick mode",
        args: &["test", "--workspace", "--all-features", "--profile", PROFILE],
        env: &[],
        target_subdir: None,
    },
    Step {
        what: "the docs, private items included, build with every intra-doc link resolved",
        args: &[
            "doc",
            "--workspace",
            "--no-deps",
            "--all-features",
            "--document-private-items",
        ],
        env: &[("RUSTDOCFLAGS", "-D warnings")],
        target_subdir: Some("doc-check"),
    },
    Step {
        // The library's unit tests only: under `--cfg loom` `wheel-shard` leaves out its
        // dev-dependencies, so this builds the library, its dependencies and loom.
        what: "loom models of the pending ring, the lane, the hand-out ring, the timer state machine, the free map and the wake-ups",
        args: &["test", "-p", "wheel-shard", "--profile", PROFILE, "--lib", "loom"],
        env: &[("RUSTFLAGS", "--cfg loom")],
        target_subdir: Some("loom"),
    },
];

/// The variable naming the directory where skipped tests record themselves.
const SKIPS_VAR: &str = "WHEEL_TEST_SKIPS";

/// Runs every step in order, stopping at the first failure, then lists the skipped tests.
pub fn run(workspace: &Path, target: &Path) -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let skips_dir = target.join("xtask-test-skips");
    if let Err(error) = clear(&skips_dir) {
        eprintln!("xtask test: cannot clear {}: {error}", skips_dir.display());
        return ExitCode::FAILURE;
    }
    let mut failed = None;
    for step in STEPS {
        eprintln!("xtask test: {} (cargo {})", step.what, step.args.join(" "));
        let mut command = Command::new(&cargo);
        command
            .args(step.args)
            .current_dir(workspace)
            .env(SKIPS_VAR, &skips_dir);
        for (key, value) in step.env {
            command.env(key, value);
        }
        if let Some(subdir) = step.target_subdir {
            command.env("CARGO_TARGET_DIR", target.join(subdir));
        }
        match command.status() {
            Ok(status) if status.success() => {}
            Ok(status) => {
                failed = Some(format!("failed ({status}): cargo {}", step.args.join(" ")));
                break;
            }
            Err(error) => {
                failed = Some(format!("cannot run cargo: {error}"));
                break;
            }
        }
    }
    let skipped = read_skips(&skips_dir);
    eprint!("{}", summary(&skipped, failed.as_deref()));
    if failed.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Makes `dir` an empty directory.
fn clear(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    std::fs::create_dir_all(dir)
}

/// A skipped test's record: its name, why it was skipped, what makes it run.
#[derive(Debug, PartialEq)]
struct Skip {
    test: String,
    reason: String,
    remedy: String,
}

/// The records in `dir`, by test name. One that cannot be read is listed as such, not lost.
fn read_skips(dir: &Path) -> Vec<Skip> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut skips: Vec<Skip> = entries
        .flatten()
        .map(|entry| {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let mut lines = text.lines().map(str::to_string);
            let file = entry.file_name().to_string_lossy().replace("--", "::");
            Skip {
                test: lines.next().unwrap_or(file),
                reason: lines
                    .next()
                    .unwrap_or_else(|| "(no reason recorded)".into()),
                remedy: lines.next().unwrap_or_else(|| "(none recorded)".into()),
            }
        })
        .collect();
    skips.sort_by(|a, b| a.test.cmp(&b.test));
    skips
}

/// The final lines: the skipped tests grouped by reason and remedy, then the verdict.
fn summary(skipped: &[Skip], failed: Option<&str>) -> String {
    let mut text = String::new();
    if !skipped.is_empty() {
        // In the order of their first test; `skipped` is sorted by test.
        let mut groups: Vec<((&str, &str), Vec<&str>)> = Vec::new();
        for skip in skipped {
            let key = (skip.reason.as_str(), skip.remedy.as_str());
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, names)) => names.push(&skip.test),
                None => groups.push((key, vec![&skip.test])),
            }
        }
        let tests = if skipped.len() == 1 { "test" } else { "tests" };
        text += &format!(
            "xtask test: {} {tests} skipped (they report ok but ran nothing):\n",
            skipped.len()
        );
        for ((reason, remedy), names) in groups {
            for name in names {
                text += &format!("  {name}\n");
            }
            text += &format!("    why: {reason}\n    to run them: {remedy}\n");
        }
    }
    text += &match (failed, skipped.len()) {
        (Some(failure), _) => format!("xtask test: {failure}\n"),
        (None, 0) => "xtask test: all passed\n".to_string(),
        (None, n) => format!("xtask test: passed, except {n} skipped (above)\n"),
    };
    text
}

/// The workspace root, from this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_are_read_grouped_and_named_in_the_summary() {
        let dir = std::env::temp_dir().join(format!("xtask-skips-{}", std::process::id()));
        clear(&dir).unwrap();
        for (file, text) in [
            (
                "proxy_redis--b",
                "proxy_redis::b\nredis-cli not installed\nsudo x\n",
            ),
            (
                "proxy_redis--a",
                "proxy_redis::a\nredis-cli not installed\nsudo x\n",
            ),
            (
                "config--c",
                "config::c\ntoo much memory\nuse a smaller machine\n",
            ),
        ] {
            std::fs::write(dir.join(file), text).unwrap();
        }
        let skips = read_skips(&dir);
        clear(&dir).unwrap();
        assert!(read_skips(&dir).is_empty(), "clear empties the directory");
        std::fs::remove_dir(&dir).unwrap();

        let text = summary(&skips, None);
        assert_eq!(
            text,
            "xtask test: 3 tests skipped (they report ok but ran nothing):\n  \
             config::c\n    why: too much memory\n    to run them: use a smaller machine\n  \
             proxy_redis::a\n  proxy_redis::b\n    why: redis-cli not installed\n    \
             to run them: sudo x\n\
             xtask test: passed, except 3 skipped (above)\n"
        );
        assert!(summary(&skips, Some("failed")).ends_with("xtask test: failed\n"));
        assert_eq!(summary(&[], None), "xtask test: all passed\n");
    }
}
