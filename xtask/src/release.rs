//! The release checks, each a step of `.ci/run`: the published crates package
//! (`cargo xtask package`), build with the oldest Rust they claim (`cargo xtask msrv`),
//! compile for the other platforms they support (`cargo xtask targets`), and every test passes
//! on the fallbacks those platforms take (`cargo xtask test-portable`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitCode};

use clap::Subcommand;

/// The crates published to crates.io; `wheel-bench` and `xtask` are `publish = false`.
const PUBLISHED: [&str; 3] = ["wheel-platform", "wheel-core", "wheel-shard"];

/// The targets besides this machine's that the published crates must compile for: 64-bit
/// ARM Linux (no time-stamp counter, no x86 prefetch), macOS on ARM and Windows (neither has
/// membarrier, `/proc`, madvise or `sched_setattr`).
const TARGETS: [&str; 3] = [
    "aarch64-unknown-linux-gnu",
    "aarch64-apple-darwin",
    "x86_64-pc-windows-msvc",
];

#[derive(Subcommand)]
pub enum Command {
    /// Package the published crates together (`cargo package`), each verified by a build, every
    /// feature on, against the others' packaged versions; the `.crate` files go to
    /// `target/package`.
    Package,
    /// Check the published crates' libraries with the oldest Rust they claim (the workspace's
    /// `rust-version`) and the locked dependencies; installs that toolchain with rustup.
    Msrv,
    /// Check that the published crates, their tests, examples and benches compile, every
    /// feature on, for aarch64 Linux, aarch64 macOS and x86_64 Windows; adds those targets to
    /// the toolchain with rustup. Nothing is linked or run.
    Targets,
    /// Run every test of the workspace (release, every feature) built with `--cfg
    /// wheel_portable`: no membarrier, no time-stamp-counter clock, no page advice, as on
    /// platforms without them; in `target/portable`.
    TestPortable,
}

/// Runs `command` in `workspace`, with its build output under the target directory
/// (`CARGO_TARGET_DIR`, or the workspace's `target`).
pub fn run(workspace: &Path, command: Command) -> ExitCode {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), PathBuf::from);
    let result = match command {
        Command::Package => package(workspace),
        Command::Msrv => msrv(workspace, &target),
        Command::Targets => targets(workspace),
        Command::TestPortable => test_portable(workspace, &target),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo package` of the published crates at once: cargo (1.90 on) builds each from its
/// `.crate` file, with its siblings taken from theirs, as crates.io would serve them.
/// `--allow-dirty`: the check is of the work tree as it is (CI's clone is clean anyway).
fn package(workspace: &Path) -> Result<(), String> {
    run_step(
        Process::new(cargo())
            .args(["package", "--locked", "--allow-dirty", "--all-features"])
            .args(packages())
            .current_dir(workspace),
    )?;
    eprintln!("xtask package: {} package and build", PUBLISHED.join(", "));
    Ok(())
}

/// `rustup toolchain install <rust-version> --profile minimal`, then `cargo check` of the
/// published crates' libraries with it, every feature on, in `target/msrv`.
fn msrv(workspace: &Path, target: &Path) -> Result<(), String> {
    let version = rust_version(workspace)?;
    eprintln!("xtask msrv: the published crates with Rust {version} (rust-version)");
    run_step(Process::new("rustup").args([
        "toolchain",
        "install",
        &version,
        "--profile",
        "minimal",
        "--no-self-update",
    ]))?;
    let mut check = Process::new("rustup");
    check
        .args([
            "run",
            &version,
            "cargo",
            "check",
            "--locked",
            "--all-features",
            "--lib",
        ])
        .args(packages())
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", target.join("msrv"))
        // Set by the rustup proxy and cargo that started this command: they would make the
        // inner cargo pick the current toolchain's rustc again.
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("CARGO");
    run_step(&mut check)?;
    eprintln!("xtask msrv: the published crates build with Rust {version}");
    Ok(())
}

/// `rustup target add` of [`TARGETS`], then `cargo check --all-targets` of the published crates
/// for each (warnings are errors: code that one platform leaves unused is cfg-gated).
fn targets(workspace: &Path) -> Result<(), String> {
    run_step(Process::new("rustup").args(["target", "add"]).args(TARGETS))?;
    for target in TARGETS {
        run_step(
            Process::new(cargo())
                .args(["check", "--locked", "--all-features", "--all-targets"])
                .args(packages())
                .args(["--target", target])
                .current_dir(workspace)
                .env("RUSTFLAGS", "-D warnings"),
        )?;
    }
    eprintln!(
        "xtask targets: the published crates compile for {}",
        TARGETS.join(", ")
    );
    Ok(())
}

/// The cfg that makes the platform detections say "unavailable" (`wheel_platform`'s doc).
const PORTABLE_CFG: &str = "--cfg wheel_portable";

/// The variable naming the directory where skipped tests record themselves (`test.rs`).
const SKIPS_VAR: &str = "WHEEL_TEST_SKIPS";

/// `cargo test --workspace --all-features --release` with [`PORTABLE_CFG`] added to the
/// compiler's and rustdoc's flags (doc tests too), in a target directory of its own so that
/// neither build undoes the other's; then the tests that skipped themselves, by name.
fn test_portable(workspace: &Path, target: &Path) -> Result<(), String> {
    let skips = target.join("portable-test-skips");
    match std::fs::remove_dir_all(&skips) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot clear {}: {error}", skips.display()));
        }
        _ => {}
    }
    std::fs::create_dir_all(&skips)
        .map_err(|error| format!("cannot create {}: {error}", skips.display()))?;
    let with_cfg = |var: &str| {
        let mut flags = std::env::var_os(var).unwrap_or_default();
        if !flags.is_empty() {
            flags.push(" ");
        }
        flags.push(PORTABLE_CFG);
        flags
    };
    let result = run_step(
        Process::new(cargo())
            .args(["test", "--workspace", "--all-features", "--release"])
            .current_dir(workspace)
            .env("RUSTFLAGS", with_cfg("RUSTFLAGS"))
            .env("RUSTDOCFLAGS", with_cfg("RUSTDOCFLAGS"))
            .env("CARGO_TARGET_DIR", target.join("portable"))
            .env(SKIPS_VAR, &skips),
    );
    let mut skipped: Vec<String> = std::fs::read_dir(&skips)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let mut lines = text.lines();
            let test = lines.next().unwrap_or("(unnamed)");
            format!(
                "  {test}: {}",
                lines.next().unwrap_or("(no reason recorded)")
            )
        })
        .collect();
    skipped.sort();
    if !skipped.is_empty() {
        eprintln!(
            "xtask test-portable: {} skipped (they report ok but ran nothing):\n{}",
            skipped.len(),
            skipped.join("\n")
        );
    }
    result?;
    match skipped.len() {
        0 => eprintln!("xtask test-portable: all passed with {PORTABLE_CFG}"),
        n => eprintln!("xtask test-portable: passed with {PORTABLE_CFG}, except {n} skipped"),
    }
    Ok(())
}

/// The workspace's `rust-version` (`[workspace.package]` in its `Cargo.toml`).
fn rust_version(workspace: &Path) -> Result<String, String> {
    let manifest = workspace.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .map_err(|error| format!("cannot read {}: {error}", manifest.display()))?;
    text.lines()
        .filter_map(|line| line.strip_prefix("rust-version"))
        .filter_map(|rest| rest.trim_start().strip_prefix('='))
        .map(|value| value.trim().trim_matches('"').to_string())
        .next()
        .ok_or_else(|| format!("no rust-version in {}", manifest.display()))
}

/// The cargo that runs this command.
fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// `-p NAME` for every published crate.
fn packages() -> Vec<OsString> {
    PUBLISHED
        .iter()
        .flat_map(|name| ["-p".into(), (*name).into()])
        .collect()
}

/// Runs `command`, echoing it first; an error unless it exits with success.
fn run_step(command: &mut Process) -> Result<(), String> {
    let shown = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("xtask: {shown}");
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("failed ({status}): {shown}")),
        Err(error) => Err(format!("cannot run {shown}: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_states_its_rust_version() {
        let version = rust_version(&crate::test::workspace_root()).unwrap();
        let parts: Vec<u32> = version
            .split('.')
            .map(|part| part.parse().unwrap())
            .collect();
        assert!(parts.len() >= 2 && parts[0] == 1, "{version}");
    }
}
