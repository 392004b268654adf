//! `cargo xtask miri`: the unit tests that exercise `unsafe` code, run under Miri, which
//! reports undefined behaviour (Stacked Borrows, data races, uninitialised or freed memory,
//! leaks) where a native run passes. `.ci/run` calls it after `cargo xtask test`.
//!
//! It installs what it needs first: the nightly toolchain with Miri and the standard library's
//! source (`rustup toolchain install`), then Miri's build of the standard library (`cargo
//! miri setup`); both do nothing once done. The tests it runs are [`SUITES`]: a crate each,
//! narrowed to modules by test-name filters (libtest's, so a filter that matches no test, a
//! module not written yet, runs nothing and fails nothing).
//!
//! Under `cfg(miri)` the code is scaled down where a size is the cost (a timer table's
//! segments, the hand-out ring) and so are the tests' loop counts; page advice and
//! `membarrier`, which Miri does not emulate, are not used (`wheel-platform` says so); and
//! tests that read `/proc` or need `membarrier` are ignored. Isolation stays on: the tests
//! read no clock, file or environment that Miri would have to let through. The summary lists
//! the tests ignored under Miri and why.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

/// The toolchain Miri comes with.
const TOOLCHAIN: &str = "nightly";

/// One crate's unit tests under Miri.
struct Suite {
    package: &'static str,
    /// Test-name filters (a test runs when its path contains one); none: every unit test.
    filters: &'static [&'static str],
}

/// What runs under Miri. Adding a module of `unsafe` code is adding its filter here.
const SUITES: &[Suite] = &[
    // The platform's page advice and barrier, where Miri can follow them.
    Suite {
        package: "wheel-platform",
        filters: &[],
    },
    // Blocks of zeroed chunks and the chunks' raw entries, under the wheel that uses them.
    Suite {
        package: "wheel-core",
        filters: &[],
    },
    Suite {
        package: "wheel-shard",
        filters: &[
            "task::",
            "shard::record::",
            "shard::cells::",
            "shard::lane::",
            "shard::ring::",
            "shard::table::",
            "shard::free_map::",
            "shard::zeroed::",
            "executor::handout::",
            "executor::hand::",
        ],
    },
];

/// Installs Miri, runs every suite (all of them, even after a failure, so one run shows
/// everything), then sums up.
pub fn run(workspace: &Path) -> ExitCode {
    let setup: [(&str, Vec<&str>); 2] = [
        (
            "rustup",
            vec![
                "toolchain",
                "install",
                TOOLCHAIN,
                "--profile",
                "minimal",
                "--component",
                "miri,rust-src",
            ],
        ),
        ("rustup", vec!["run", TOOLCHAIN, "cargo", "miri", "setup"]),
    ];
    for (program, args) in &setup {
        eprintln!("xtask miri: {program} {}", args.join(" "));
        let status = Command::new(program)
            .args(args)
            .current_dir(workspace)
            .status();
        match status {
            Ok(status) if status.success() => {}
            Ok(status) => {
                eprintln!(
                    "xtask miri: failed ({status}): {program} {}",
                    args.join(" ")
                );
                return ExitCode::FAILURE;
            }
            Err(error) => {
                eprintln!("xtask miri: cannot run {program}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut failed = Vec::new();
    let mut ran = Vec::new();
    let mut ignored = Vec::new();
    for suite in SUITES {
        let mut args = vec!["run", TOOLCHAIN, "cargo", "miri", "test"];
        args.extend(["--package", suite.package, "--lib", "--"]);
        args.extend(suite.filters);
        eprintln!("xtask miri: rustup {}", args.join(" "));
        match run_suite(workspace, &args) {
            Ok(outcome) => {
                ran.push((suite.package, outcome.passed));
                ignored.extend(outcome.ignored);
                if !outcome.success {
                    failed.push(suite.package);
                }
            }
            Err(error) => {
                eprintln!("xtask miri: cannot run rustup: {error}");
                failed.push(suite.package);
            }
        }
    }
    eprint!("{}", summary(&ran, &ignored, &failed));
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What one suite's run said.
struct Outcome {
    success: bool,
    passed: usize,
    /// (test, why) of each test ignored.
    ignored: Vec<(String, String)>,
}

/// Runs `rustup ARGS`, passing the test harness's output on as it comes (a test's name
/// before its result, which under Miri may be minutes later), and reads from it the tests
/// that passed and those ignored.
fn run_suite(workspace: &Path, args: &[&str]) -> std::io::Result<Outcome> {
    let mut child = Command::new("rustup")
        .args(args)
        .current_dir(workspace)
        .stdout(Stdio::piped())
        .spawn()?;
    let mut passed = 0;
    let mut ignored = Vec::new();
    let mut from = child.stdout.take().expect("stdout is piped");
    let mut to = std::io::stdout();
    let (mut buffer, mut line) = ([0; 4096], Vec::new());
    loop {
        let read = from.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        to.write_all(&buffer[..read])?;
        to.flush()?;
        line.extend_from_slice(&buffer[..read]);
        while let Some(end) = line.iter().position(|&byte| byte == b'\n') {
            let text: Vec<u8> = line.drain(..=end).collect();
            match parse_line(String::from_utf8_lossy(&text).trim_end()) {
                Some(Line::Passed) => passed += 1,
                Some(Line::Ignored(test, why)) => ignored.push((test, why)),
                None => {}
            }
        }
    }
    let success = child.wait()?.success();
    Ok(Outcome {
        success,
        passed,
        ignored,
    })
}

/// A line of libtest's output that [`run_suite`] counts.
#[derive(Debug, PartialEq)]
enum Line {
    Passed,
    /// The test, and the reason its `ignore` gives (empty if none).
    Ignored(String, String),
}

fn parse_line(line: &str) -> Option<Line> {
    let rest = line.strip_prefix("test ")?;
    let (test, result) = rest.split_once(" ... ")?;
    if result == "ok" {
        return Some(Line::Passed);
    }
    let why = result.strip_prefix("ignored")?;
    Some(Line::Ignored(
        test.to_string(),
        why.trim_start_matches(", ").to_string(),
    ))
}

/// The final lines: tests passed per crate, the tests ignored under Miri and why, the verdict.
fn summary(ran: &[(&str, usize)], ignored: &[(String, String)], failed: &[&str]) -> String {
    let mut text = String::from("xtask miri: under Miri,");
    for (i, (package, passed)) in ran.iter().enumerate() {
        let comma = if i + 1 < ran.len() { "," } else { "" };
        text += &format!(" {package} {passed} passed{comma}");
    }
    text += "\n";
    if !ignored.is_empty() {
        text += &format!("xtask miri: {} ignored under Miri:\n", ignored.len());
        for (test, why) in ignored {
            text += &format!("  {test}: {why}\n");
        }
    }
    text += &if failed.is_empty() {
        "xtask miri: all passed, no undefined behaviour found\n".to_string()
    } else {
        format!("xtask miri: failed: {}\n", failed.join(", "))
    };
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passed_and_ignored_tests_are_read_from_libtest_s_lines() {
        assert_eq!(
            parse_line("test shard::ring::tests::fifo ... ok"),
            Some(Line::Passed)
        );
        assert_eq!(
            parse_line("test a::b ... ignored, reads /proc"),
            Some(Line::Ignored("a::b".into(), "reads /proc".into()))
        );
        assert_eq!(
            parse_line("test a::c ... ignored"),
            Some(Line::Ignored("a::c".into(), String::new()))
        );
        assert_eq!(parse_line("test a::d ... FAILED"), None);
        assert_eq!(parse_line("test result: ok. 3 passed; 0 failed"), None);
        assert_eq!(parse_line("running 3 tests"), None);
    }

    #[test]
    fn the_summary_counts_lists_the_ignored_and_names_failures() {
        let ignored = [("a::b".to_string(), "reads /proc".to_string())];
        assert_eq!(
            summary(&[("wheel-core", 20), ("wheel-shard", 60)], &ignored, &[]),
            "xtask miri: under Miri, wheel-core 20 passed, wheel-shard 60 passed\n\
             xtask miri: 1 ignored under Miri:\n  a::b: reads /proc\n\
             xtask miri: all passed, no undefined behaviour found\n"
        );
        assert!(summary(&[], &[], &["wheel-shard"]).ends_with("failed: wheel-shard\n"));
    }
}
