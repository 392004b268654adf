//! Tests that run a part of themselves in a child process of this binary: inputs that could eat
//! memory or abort (endless devices, thousands of threads, gigabyte rings) run there, limited with
//! `ulimit -v` where the input is unbounded, killed (failing the test) at a deadline, and report
//! their peak resident memory from `/proc/self/status`.
//!
//! A child test is `#[ignore]`d and returns at once unless [`in_child`] says this process was
//! started to run it; its parent runs it with [`run_child`] and reads what it [`report`]ed.

#![cfg(target_os = "linux")]

use std::ffi::OsString;
use std::fmt::Display;
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use wheel_shard::{limits, Config, ConfigError};

use crate::common;

/// A field of `/proc/self/status` in KiB (`VmHWM:`, the peak resident memory; `VmRSS:`).
pub(crate) fn status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find(|line| line.starts_with(key))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/self/status"))
}

/// This process's threads named `wheel-*`.
pub(crate) fn wheel_threads() -> usize {
    common::wheel_tasks().len()
}

/// The variable that tells a child process of this binary which child test is its to run.
pub(crate) const CHILD_VAR: &str = "HOSTILE_CONFIG_CHILD";

/// Whether this process is the child started to run the child test `test`. Child tests are
/// `#[ignore]`d, and return at once where this is false (a normal `--ignored` run).
pub(crate) fn in_child(test: &str) -> bool {
    std::env::var_os(CHILD_VAR).is_some_and(|name| name == test)
}

/// A child test's report to its parent: one `report: key=value` line on stdout.
pub(crate) fn report(key: &str, value: impl Display) {
    println!("\nreport: {key}={value}");
}

/// How a child process ended.
pub(crate) struct ChildRun {
    pub(crate) test: String,
    /// `None`: killed at the deadline.
    pub(crate) status: Option<ExitStatus>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) elapsed: Duration,
}

impl ChildRun {
    /// Every value the child reported under `key`, in order.
    pub(crate) fn reports(&self, key: &str) -> Vec<String> {
        let prefix = format!("report: {key}=");
        self.stdout
            .lines()
            .filter_map(|line| Some(line[line.find(&prefix)? + prefix.len()..].to_string()))
            .collect()
    }

    /// The one value the child reported under `key`.
    pub(crate) fn report(&self, key: &str) -> String {
        let mut values = self.reports(key);
        assert_eq!(values.len(), 1, "{key} in\n{}", self.output());
        values.remove(0)
    }

    pub(crate) fn number(&self, key: &str) -> u64 {
        self.report(key).parse().expect("a number")
    }

    pub(crate) fn output(&self) -> String {
        format!(
            "child {} ({:?} after {:?}):\n--- stdout\n{}\n--- stderr\n{}",
            self.test,
            self.status,
            self.elapsed,
            self.stdout,
            self.stderr.chars().take(4000).collect::<String>()
        )
    }

    /// Whether `sh` could not run the test binary (126: not executable, 127: not found), as
    /// when it lies below a directory the child's user may not enter.
    pub(crate) fn could_not_start(&self) -> bool {
        self.status
            .and_then(|status| status.code())
            .is_some_and(|code| code >= 126)
    }

    /// Fails the test unless the child ran its test to a pass: it neither hung (killed at the
    /// deadline), aborted, nor panicked.
    pub(crate) fn assert_passed(&self) {
        let passed =
            self.status.is_some_and(|status| status.success()) && self.stdout.contains("1 passed");
        assert!(passed, "{}", self.output());
    }
}

/// Runs the ignored child test `test` of this binary in a process of its own, with `env` set
/// (and every `WHEEL_*` field variable of this process removed), its address space limited to
/// `address_space_kib` where given, and killed if it has not ended after `deadline`.
pub(crate) fn run_child(
    test: &str,
    address_space_kib: Option<u64>,
    env: &[(&str, OsString)],
    deadline: Duration,
) -> ChildRun {
    run_child_as(test, None, address_space_kib, env, deadline)
}

/// [`run_child`] under user and group `uid` when given (the caller must be root).
pub(crate) fn run_child_as(
    test: &str,
    uid: Option<u32>,
    address_space_kib: Option<u64>,
    env: &[(&str, OsString)],
    deadline: Duration,
) -> ChildRun {
    run_child_limited(test, uid, address_space_kib, None, env, deadline)
}

/// [`run_child_as`], with the number of processes and threads of the child's user limited to
/// `processes` where given (`RLIMIT_NPROC`, which binds only a user that is not root).
pub(crate) fn run_child_limited(
    test: &str,
    uid: Option<u32>,
    address_space_kib: Option<u64>,
    processes: Option<u64>,
    env: &[(&str, OsString)],
    deadline: Duration,
) -> ChildRun {
    let limit = address_space_kib.map_or(String::new(), |kib| format!("ulimit -v {kib} && "));
    let exact = crate::common::exact_test_name(test);
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!(
            "{limit}exec \"$0\" --exact {exact} --ignored --test-threads=1 --nocapture"
        ))
        .arg(std::env::current_exe().expect("the test binary"))
        .env(CHILD_VAR, test)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for field in limits::FIELDS {
        command.env_remove(field.env_var());
    }
    for (name, value) in env {
        command.env(name, value);
    }
    if let Some(uid) = uid {
        use std::os::unix::process::CommandExt;
        command.uid(uid).gid(uid);
    }
    if let Some(processes) = processes {
        use std::os::unix::process::CommandExt;
        // SAFETY: runs in the forked child before `exec`; `setrlimit` is async-signal-safe and
        // touches no memory of the parent's.
        unsafe {
            command.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: processes,
                    rlim_max: processes,
                };
                if libc::setrlimit(libc::RLIMIT_NPROC, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    let start = Instant::now();
    let mut child = command.spawn().expect("start the child");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if start.elapsed() > deadline {
            // `exec` made the test binary the child itself: this kills it, not only `sh`.
            child.kill().expect("kill the child");
            child.wait().expect("reap the child");
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    ChildRun {
        test: test.to_string(),
        status,
        elapsed: start.elapsed(),
        stdout: stdout.join().expect("stdout"),
        stderr: stderr.join().expect("stderr"),
    }
}

/// Runs `body` in a child test, reporting its peak resident memory beyond what the process
/// held before (`peak_growth_kib`) and its run time (`millis`). The peak is reset first
/// (`/proc/self/clear_refs`), so that each of several bodies has its own.
pub(crate) fn measured<T>(body: impl FnOnce() -> T) -> T {
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = status_kib(if reset { "VmRSS:" } else { "VmHWM:" });
    let start = Instant::now();
    let value = body();
    report("millis", start.elapsed().as_millis());
    report(
        "peak_growth_kib",
        status_kib("VmHWM:").saturating_sub(before),
    );
    value
}

/// How a child reports a load: `ok shards=N`, or `err field=.. io=.. message=..`.
pub(crate) fn describe(result: &Result<Config, ConfigError>) -> String {
    match result {
        Ok(config) => format!("ok shards={}", config.shards),
        Err(error) => {
            let io = match error {
                ConfigError::Io { source, .. } => format!("{:?}", source.kind()),
                _ => "-".to_string(),
            };
            format!(
                "err field={:?} io={io} message={:?}",
                error.field(),
                error.to_string()
            )
        }
    }
}
