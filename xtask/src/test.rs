//! `cargo xtask test`: every test of the workspace, then the loom models of the lock-free
//! parts. It is the README's test command, and `.ci/run` calls exactly it.

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

const STEPS: &[Step] = &[
    Step {
        what: "unit, integration, property and doc tests, the bench harness in --quick mode",
        args: &["test", "--workspace", "--all-features", "--release"],
        env: &[],
        target_subdir: None,
    },
    Step {
        what: "loom models of the pending ring, the timer state machine and the wake-ups",
        args: &["test", "-p", "wheel-shard", "--release", "--lib", "loom"],
        env: &[("RUSTFLAGS", "--cfg loom")],
        target_subdir: Some("loom"),
    },
];

/// Runs every step in order, stopping at the first failure.
pub fn run(workspace: &Path, target: &Path) -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for step in STEPS {
        eprintln!("xtask test: {} (cargo {})", step.what, step.args.join(" "));
        let mut command = Command::new(&cargo);
        command.args(step.args).current_dir(workspace);
        for (key, value) in step.env {
            command.env(key, value);
        }
        if let Some(subdir) = step.target_subdir {
            command.env("CARGO_TARGET_DIR", target.join(subdir));
        }
        match command.status() {
            Ok(status) if status.success() => {}
            Ok(status) => {
                eprintln!(
                    "xtask test: failed ({status}): cargo {}",
                    step.args.join(" ")
                );
                return ExitCode::FAILURE;
            }
            Err(error) => {
                eprintln!("xtask test: cannot run cargo: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    eprintln!("xtask test: all passed");
    ExitCode::SUCCESS
}

/// The workspace root, from this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}
