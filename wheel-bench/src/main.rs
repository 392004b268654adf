//! `wheel-bench`: the bench's command line. `cargo xtask bench [OPTIONS]` builds it and runs it
//! with the same options; `--help` lists them with their defaults.

use std::path::PathBuf;
use std::process::ExitCode;

use mimalloc::MiMalloc;
use wheel_bench::{Cli, Options};

// The bench measures memory and allocation-heavy peers: every system gets the same allocator,
// in this process and in every child process it starts (they run this same binary).
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let mut options = cli.options;
    if options.out.is_none() {
        options.out = Some(wheel_bench::default_out_dir(&target_dir()));
    }
    if let Some(spec) = &cli.child {
        return child(&options, spec);
    }
    if !cli.in_process {
        // Each run in a fresh process of this binary: a clean heap for every system.
        options.isolate = std::env::current_exe().ok();
    }
    bench(&options)
}

/// `--child SPEC`: one run, its result printed as one JSON line on stdout.
fn child(options: &Options, spec: &str) -> ExitCode {
    match wheel_bench::run_child(options, spec) {
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

/// The whole bench: every run, then the tables on stdout and the files on disk.
fn bench(options: &Options) -> ExitCode {
    match wheel_bench::run(options) {
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
