//! `cargo xtask test`: every test of the workspace, a build of the API docs that fails on a
//! broken intra-doc link, then the loom models of the lock-free parts. It is the README's test
//! command, and `.ci/run` calls exactly it.
//!
//! An integration test binary is a directory `tests/<name>/` whose `main.rs` declares a module
//! per file; a file it does not declare would compile nowhere and its tests would never run, so
//! this command first checks that each file is declared, and fails naming those that are not.
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
    let undeclared = undeclared_test_files(workspace);
    if !undeclared.is_empty() {
        for (file, parent) in &undeclared {
            eprintln!(
                "xtask test: {} is in no test binary: declare it in {} (`mod {};`)",
                file.display(),
                parent.display(),
                module_name(file)
            );
        }
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

/// The files of the workspace's test binaries that no binary compiles, each with the file that
/// should declare it. A binary is a directory `tests/<name>/` with a `main.rs` (cargo finds it);
/// each other `.rs` file in it is a module only where its parent (`main.rs`, or the `mod.rs` of
/// its directory) says `mod <name>;`, and cargo builds nothing it is not told of.
fn undeclared_test_files(workspace: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut undeclared = Vec::new();
    let crates = std::fs::read_dir(workspace).into_iter().flatten().flatten();
    for krate in crates {
        let binaries = std::fs::read_dir(krate.path().join("tests"))
            .into_iter()
            .flatten()
            .flatten();
        for binary in binaries {
            let root = binary.path();
            if root.join("main.rs").is_file() {
                check_modules(&root, &root, &mut undeclared);
            }
        }
    }
    undeclared.sort();
    undeclared
}

/// Adds the `.rs` files below `dir` that their parent module does not declare.
fn check_modules(root: &Path, dir: &Path, undeclared: &mut Vec<(PathBuf, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            check_modules(root, &path, undeclared);
            continue;
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.ends_with(".rs") || (dir == root && name == "main.rs") {
            continue;
        }
        // `x.rs` is declared in its directory's module; `x/mod.rs` in the one above.
        let declared_in = if name == "mod.rs" {
            dir.parent().unwrap_or(dir)
        } else {
            dir
        };
        let parent = if declared_in == root {
            declared_in.join("main.rs")
        } else {
            declared_in.join("mod.rs")
        };
        let text = std::fs::read_to_string(&parent).unwrap_or_default();
        let module = module_name(&path);
        let declared = text.lines().any(|line| {
            let line = line.trim();
            let line = line.strip_prefix("pub ").unwrap_or(line);
            let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
            line.strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'))
                .is_some_and(|declared| declared.trim() == module)
        });
        if !declared {
            undeclared.push((path, parent));
        }
    }
}

/// The module a test file is: its name, or its directory's for a `mod.rs`.
fn module_name(file: &Path) -> String {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if stem == "mod" {
        file.parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string()
    } else {
        stem.to_string()
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
    fn a_test_file_no_binary_declares_is_named_with_where_to_declare_it() {
        let workspace = std::env::temp_dir().join(format!("xtask-layout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&workspace);
        let binary = workspace.join("krate/tests/behaviour");
        std::fs::create_dir_all(binary.join("group")).unwrap();
        std::fs::create_dir_all(workspace.join("krate/tests/common")).unwrap();
        for (file, text) in [
            (
                "main.rs",
                "mod declared;\n#[cfg(unix)]\npub(crate) mod group;\n",
            ),
            ("declared.rs", ""),
            ("forgotten.rs", ""),
            ("group/mod.rs", "mod inner;\n"),
            ("group/inner.rs", ""),
            ("group/stray.rs", ""),
        ] {
            std::fs::write(binary.join(file), text).unwrap();
        }
        // Not a binary (no main.rs): a module the binaries include by path.
        std::fs::write(workspace.join("krate/tests/common/mod.rs"), "").unwrap();
        let undeclared = undeclared_test_files(&workspace);
        std::fs::remove_dir_all(&workspace).unwrap();
        assert_eq!(
            undeclared,
            [
                (binary.join("forgotten.rs"), binary.join("main.rs")),
                (binary.join("group/stray.rs"), binary.join("group/mod.rs")),
            ]
        );
        assert_eq!(module_name(&binary.join("group/mod.rs")), "group");
    }

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
