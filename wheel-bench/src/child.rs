//! Each system in its own process: the parent re-runs its executable in `--child` mode for
//! every run and reads the result back. A fresh process gives each run a clean RSS baseline
//! (an allocator keeps memory a previous system freed, which would hide the next one's growth)
//! and leaves no threads or runtimes of one system around the next.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::harness::result::RunResult;
use crate::harness::scenario::Scenario;
use crate::host::progress::Progress;
use crate::options::Options;
use crate::systems::system_named;

/// Which run a child process does: `system:scenario:timers:spread_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChildSpec {
    pub system: String,
    pub scenario: Scenario,
    pub timers: u64,
    pub spread: Duration,
}

impl ChildSpec {
    /// The spec as one command-line argument.
    pub fn to_arg(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.system,
            self.scenario,
            self.timers,
            self.spread.as_nanos()
        )
    }

    /// Reads [`ChildSpec::to_arg`] back.
    pub fn parse(text: &str) -> Result<ChildSpec, String> {
        let bad = || format!("bad --child spec {text:?} (system:scenario:timers:spread_ns)");
        let parts: Vec<&str> = text.split(':').collect();
        let [system, scenario, timers, spread] = parts[..] else {
            return Err(bad());
        };
        Ok(ChildSpec {
            system: system.to_string(),
            scenario: scenario.parse()?,
            timers: timers.parse().map_err(|_| bad())?,
            spread: Duration::from_nanos(spread.parse().map_err(|_| bad())?),
        })
    }
}

/// What a child prints: its result and the histograms (V2-serialized), which results.json
/// leaves out.
#[derive(Serialize, Deserialize)]
struct ChildOutput {
    result: RunResult,
    histogram: Option<Vec<u8>>,
    blocked: Option<Vec<u8>>,
}

/// The child's side (`--child SPEC`): runs the run `spec` names under `options` and returns
/// the line to print.
pub fn run_child(options: &Options, spec: &str) -> Result<String, String> {
    let spec = ChildSpec::parse(spec)?;
    let work_dir = options.out.clone().unwrap_or_default();
    let system = system_named(&spec.system)?;
    let progress = Progress::new(options.quiet);
    let plan = options.plan(
        spec.scenario,
        spec.timers,
        spec.spread,
        &work_dir,
        &progress,
    );
    let mut result = system.run(&plan)?;
    let output = ChildOutput {
        histogram: result.histogram.take().map(|h| encode(&h)).transpose()?,
        blocked: result
            .blocked_histogram
            .take()
            .map(|h| encode(&h))
            .transpose()?,
        result,
    };
    serde_json::to_string(&output).map_err(|e| e.to_string())
}

/// The parent's side: runs `spec` in a child process of `exe` and reads its result.
pub fn run_in_child(
    exe: &Path,
    options: &Options,
    spec: &ChildSpec,
    work_dir: &Path,
) -> Result<RunResult, String> {
    let output = Command::new(exe)
        .args(child_args(options, work_dir))
        .arg("--child")
        .arg(spec.to_arg())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    if !output.status.success() {
        return Err(format!(
            "the child process for {} failed ({})",
            spec.to_arg(),
            output.status
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .last()
        .ok_or("the child process printed nothing")?;
    let child: ChildOutput =
        serde_json::from_str(line).map_err(|e| format!("child output: {e}"))?;
    let mut result = child.result;
    result.histogram = child.histogram.as_deref().map(decode).transpose()?;
    result.blocked_histogram = child.blocked.as_deref().map(decode).transpose()?;
    Ok(result)
}

/// The options a child needs, as `bench` arguments.
fn child_args(options: &Options, work_dir: &Path) -> Vec<String> {
    let duration = |d: Duration| humantime::format_duration(d).to_string();
    let mut args = vec![
        format!("--producers={}", options.producers),
        format!("--seed={}", options.seed),
        format!("--idle-for={}", duration(options.idle_for)),
        format!("--jvm-warmup-rounds={}", options.jvm_warmup_rounds),
        format!("--warmup-rounds={}", options.warmup_rounds),
        format!(
            "--stall-probe={}",
            if options.stall_probe { "on" } else { "off" }
        ),
        format!("--out={}", work_dir.display()),
    ];
    if let Some(config) = &options.config_file {
        args.push(format!("--config={}", config.display()));
    }
    if options.quiet {
        args.push("--quiet".into());
    }
    args
}

fn encode(histogram: &Histogram<u64>) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    V2Serializer::new()
        .serialize(histogram, &mut bytes)
        .map_err(|e| format!("{e:?}"))?;
    Ok(bytes)
}

fn decode(bytes: &[u8]) -> Result<Histogram<u64>, String> {
    Deserializer::new()
        .deserialize(&mut std::io::Cursor::new(bytes))
        .map_err(|e| format!("{e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip() {
        let spec = ChildSpec {
            system: "binary-heap".into(),
            scenario: Scenario::Rpc,
            timers: 1_000_000,
            spread: Duration::from_secs(1),
        };
        assert_eq!(ChildSpec::parse(&spec.to_arg()).unwrap(), spec);
        assert!(ChildSpec::parse("wheel:fire:1").is_err());
    }

    #[test]
    fn histograms_survive_the_trip() {
        let mut h = crate::harness::histogram::new_histogram();
        h.record_n(1_234_567, 10).unwrap();
        let back = decode(&encode(&h).unwrap()).unwrap();
        assert_eq!(back.len(), 10);
        assert_eq!(back.max(), h.max());
    }
}
