//! `cargo xtask <command>`: the project's developer and user commands.
//!
//! `cargo xtask bench [options]` builds and runs the `wheel-bench` binary with those options
//! (see `cargo xtask bench --help`); `cargo xtask test` runs every test, checks the API docs'
//! links and runs the loom models (what CI runs); `cargo xtask miri` runs the unit tests of
//! the `unsafe` code under Miri (CI runs it next).

use std::ffi::OsString;
use std::process::{Command as Process, ExitCode};

use clap::{Parser, Subcommand};

mod miri;
mod release;
mod test;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "wheel's developer and user commands")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure wheel under load beside its peers; writes `target/wheel-bench/<run>/`.
    ///
    /// Builds and runs the wheel-bench binary (release) with the options given; `cargo xtask
    /// bench --help` lists them.
    #[command(disable_help_flag = true)]
    Bench {
        /// The bench's options, passed on as they are.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Run every test of the workspace, check the API docs' links and run the loom models (what
    /// CI runs).
    Test,
    /// Run the unit tests of the `unsafe` code under Miri, which reports undefined behaviour;
    /// installs nightly and Miri first (CI runs it after `test`).
    Miri,
    /// The release checks (`release.rs`).
    #[command(flatten)]
    Release(release::Command),
}

fn main() -> ExitCode {
    let workspace = test::workspace_root();
    match Cli::parse().command {
        Command::Bench { args } => bench(&workspace, &args),
        Command::Test => {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| workspace.join("target"), Into::into);
            test::run(&workspace, &target)
        }
        Command::Miri => miri::run(&workspace),
        Command::Release(command) => release::run(&workspace, command),
    }
}

/// `cargo run --release -p wheel-bench --bin wheel-bench -- ARGS` in the workspace: the bench
/// is its own binary (its allocator, its `--child` processes); this only launches it and
/// passes its exit code on.
fn bench(workspace: &std::path::Path, args: &[OsString]) -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Process::new(cargo)
        .args([
            "run",
            "--release",
            "--package",
            "wheel-bench",
            "--bin",
            "wheel-bench",
            "--",
        ])
        .args(args)
        .current_dir(workspace)
        .status();
    match status {
        Ok(status) => match status.code() {
            Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            None => {
                eprintln!("xtask bench: wheel-bench was stopped ({status})");
                ExitCode::FAILURE
            }
        },
        Err(error) => {
            eprintln!("xtask bench: cannot run cargo: {error}");
            ExitCode::FAILURE
        }
    }
}
