//! `cargo xtask test`: every test of the workspace, a build of the API docs that fails on a
//! broken intra-doc link, and the loom models of the lock-free parts. It is the README's test
//! command, and `.ci/run` calls exactly it.
//!
//! It builds the workspace's tests, then runs them while the loom models build and run
//! alongside, at the lowest CPU priority and in a target directory of their own: the tests
//! mostly wait (on timers, sockets, redis and child processes) and leave most of the CPU idle;
//! the loom models only compute, and their outcome does not depend on time. So they take the
//! CPU the tests leave, and the tests, which time what they check, lose none of theirs. The
//! docs build last, in the tests' target directory and profile, so that they reuse its build
//! scripts (`RUSTDOCFLAGS` reaches rustdoc alone); the loom models' output is printed at the
//! end.
//!
//! An integration test binary is a directory `tests/<name>/` whose `main.rs` declares a module
//! per file; a file it does not declare would compile nowhere and its tests would never run, so
//! this command first checks that each file is declared, and fails naming those that are not.
//!
//! A test that cannot run here (the proxy tests without redis) passes without doing anything,
//! and the test harness swallows what it prints. Such a test records itself in the directory
//! named by `WHEEL_TEST_SKIPS` (`wheel-shard/tests/skip`), which this command sets, and the
//! final summary lists every skipped test, why, and the command that lets it run.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};

/// One step: a description and the cargo arguments, with extra environment variables.
struct Step {
    what: &'static str,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    /// Its own target directory (under the workspace's), when its flags would otherwise make
    /// cargo rebuild the main build's artifacts every time, or when it runs alongside another
    /// step (cargo holds a target directory for the whole of a command, tests' run included).
    target_subdir: Option<&'static str>,
}

/// The profile the tests and the loom models build with (`[profile.ci]` in the workspace's
/// `Cargo.toml`): release's optimisation without its link-time optimisation, so that the test
/// binaries link in seconds. The `xtask` alias builds this command with it too, so the tests'
/// build reuses what that build compiled (clap and its macros).
const PROFILE: &str = "ci";

/// Builds every test [`TESTS`] runs.
const BUILD: Step = Step {
    what: "build the tests",
    args: &[
        "test",
        "--workspace",
        "--all-features",
        "--profile",
        PROFILE,
        "--no-run",
    ],
    env: &[],
    target_subdir: None,
};

const TESTS: Step = Step {
    what: "unit, integration, property and doc tests, the bench harness in --quick mode",
    args: &[
        "test",
        "--workspace",
        "--all-features",
        "--profile",
        PROFILE,
    ],
    env: &[],
    target_subdir: None,
};

/// After [`TESTS`], in the same target directory (cargo holds it while the tests run).
const DOCS: Step = Step {
    what: "the docs, private items included, build with every intra-doc link resolved",
    args: &[
        "doc",
        "--workspace",
        "--no-deps",
        "--all-features",
        "--document-private-items",
        "--profile",
        PROFILE,
    ],
    env: &[("RUSTDOCFLAGS", "-D warnings")],
    target_subdir: None,
};

/// What runs alongside [`TESTS`] and [`DOCS`], one after the other at the lowest CPU priority.
const ALONGSIDE: &[Step] = &[Step {
    // The library's unit tests only: under `--cfg loom` `wheel-shard` leaves out its
    // dev-dependencies, so this builds the library, its dependencies and loom.
    what: "loom models of the pending ring, the lane, the hand-out ring, the timer state machine, the free map and the wake-ups",
    args: &["test", "-p", "wheel-shard", "--profile", PROFILE, "--lib", "loom"],
    env: &[("RUSTFLAGS", "--cfg loom")],
    target_subdir: Some("loom"),
}];

/// The variable naming the directory where skipped tests record themselves.
const SKIPS_VAR: &str = "WHEEL_TEST_SKIPS";

/// Builds the tests; runs them, then builds the docs, with the [`ALONGSIDE`] steps; lists the
/// skipped tests.
pub fn run(workspace: &Path, target: &Path) -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let skips_dir = target.join("xtask-test-skips");
    let logs_dir = target.join("xtask-test-logs");
    for dir in [&skips_dir, &logs_dir] {
        if let Err(error) = clear(dir) {
            eprintln!("xtask test: cannot clear {}: {error}", dir.display());
            return ExitCode::FAILURE;
        }
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
    let command = |step: &Step, program: Command| {
        let mut command = program;
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
        command
    };
    let mut failed = Vec::new();
    eprintln!(
        "xtask test: {} (cargo {})",
        BUILD.what,
        BUILD.args.join(" ")
    );
    if let Err(failure) = finish(&BUILD, command(&BUILD, Command::new(&cargo)).status()) {
        failed.push(failure);
    } else {
        eprintln!(
            "xtask test: alongside the tests and the docs, at the lowest CPU priority: {}",
            ALONGSIDE
                .iter()
                .map(|step| format!("cargo {}", step.args.join(" ")))
                .collect::<Vec<_>>()
                .join("; ")
        );
        std::thread::scope(|scope| {
            let alongside = scope.spawn(|| {
                let mut done = Vec::new();
                for (n, step) in ALONGSIDE.iter().enumerate() {
                    let log = logs_dir.join(format!("{n}.log"));
                    let started = quiet(command(step, lowest_priority(&cargo)), &log);
                    done.push((step, log, started.and_then(|mut child| child.wait())));
                }
                done
            });
            for step in [&TESTS, &DOCS] {
                eprintln!("xtask test: {} (cargo {})", step.what, step.args.join(" "));
                if let Err(failure) = finish(step, command(step, Command::new(&cargo)).status()) {
                    failed.push(failure);
                    break;
                }
            }
            for (step, log, status) in alongside.join().expect("the steps alongside") {
                eprintln!(
                    "xtask test: {} (cargo {}), run alongside:",
                    step.what,
                    step.args.join(" ")
                );
                eprint!("{}", std::fs::read_to_string(&log).unwrap_or_default());
                if let Err(failure) = finish(step, status) {
                    failed.push(failure);
                }
            }
        });
    }
    let skipped = read_skips(&skips_dir);
    let failed = (!failed.is_empty()).then(|| failed.join("; "));
    eprint!("{}", summary(&skipped, failed.as_deref()));
    if failed.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// What a finished step says: `Err` with why, if it failed.
fn finish(step: &Step, status: std::io::Result<ExitStatus>) -> Result<(), String> {
    match status {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("failed ({status}): cargo {}", step.args.join(" "))),
        Err(error) => Err(format!("cannot run cargo: {error}")),
    }
}

/// `command` started with its output (stdout and stderr) going to the file `log`.
fn quiet(mut command: Command, log: &Path) -> std::io::Result<Child> {
    let file = std::fs::File::create(log)?;
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
}

/// `cargo` run at the lowest CPU priority (`nice -n 19`) where there is a `nice`; as it is
/// where there is not.
fn lowest_priority(cargo: &OsStr) -> Command {
    let nice = Command::new("nice")
        .arg("true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if nice.is_ok_and(|status| status.success()) {
        let mut command = Command::new("nice");
        command.args(["-n", "19"]).arg(cargo);
        command
    } else {
        Command::new(cargo)
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
