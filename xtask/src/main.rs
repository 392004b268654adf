//! `cargo xtask <command>`: the project's developer and user commands.
//!
//! `cargo xtask bench [options]` runs wheel-bench (see `cargo xtask bench --help`);
//! `cargo xtask test` runs every test, the loom models included (what CI runs).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mimalloc::MiMalloc;
use wheel_bench::cli::BenchArgs;

mod test;

// The bench measures memory and allocation-heavy peers: every system gets the same allocator.
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "wheel's developer and user commands")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Measure wheel under load beside its peers; writes `target/wheel-bench/<run>/`.
    Bench(BenchArgs),
    /// Run every test of the workspace, then the loom models (what CI runs).
    Test,
}

/// `bench --child SPEC`: one run, its result printed as one JSON line on stdout.
fn child(options: &wheel_bench::Options, spec: &str) -> ExitCode {
    let work_dir = options.out.clone().unwrap_or_default();
    let run = wheel_bench::child::ChildSpec::parse(spec)
        .and_then(|spec| wheel_bench::child::run_child(options, &spec, &work_dir));
    match run {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace's target directory: $CARGO_TARGET_DIR, else `<workspace>/target`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
        },
        PathBuf::from,
    )
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Bench(args) => bench(&args),
        Command::Test => test::run(&test::workspace_root(), &target_dir()),
    }
}

fn bench(args: &BenchArgs) -> ExitCode {
    let mut options = match args.to_options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    if options.out.is_none() {
        options.out = Some(wheel_bench::outputs::default_dir(&target_dir()));
    }
    if let Some(spec) = &args.child {
        return child(&options, spec);
    }
    if !args.in_process {
        // Each run in a fresh process of this binary: a clean heap for every system.
        options.isolate = std::env::current_exe().ok();
    }
    match wheel_bench::run(&options) {
        Ok(outcome) => {
            if !options.quiet {
                println!("{}", outcome.text);
                println!(
                    "wrote {} files to {}",
                    outcome.files.len(),
                    outcome.out_dir.display()
                );
            }
            if outcome.all_ok() {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "error: some runs' counts did not add up or a system failed; see report.md"
                );
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}
