//! Peer: Netty's `HashedWheelTimer`, through the Java harness in `wheel-bench/java/`. The
//! harness is compiled with `javac` into the run's work directory and run in a JVM with a
//! fixed, pre-touched heap and warm-up rounds, so neither heap growth nor the JIT decides its
//! tail. It draws the same delays from the same seed and prints its figures and lateness
//! samples, which are read back here. It prints a line as its measured round starts and one as
//! it ends, so the host stall probe watches that round only.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::harness::histogram::new_histogram;
use crate::harness::plan::Plan;
use crate::harness::result::{Counts, CpuFigures, RunResult, Throughput};
use crate::harness::scenario::Scenario;
use crate::harness::system::System;
use crate::host::stalls::{HostStalls, StallProbe};

/// The peer's name.
pub const NAME: &str = "netty";
/// The line the harness prints as its measured round starts, and the one as it ends.
const MEASURING: [&str; 2] = ["measuring start", "measuring end"];
/// The harness source, kept in `wheel-bench/java/` and built at run time.
const SOURCE: &str = include_str!("../../java/NettyBench.java");
/// Debian's `libnetty-java` puts Netty's common classes here.
pub const NETTY_JAR: &str = "/usr/share/java/netty-common.jar";
/// Netty's default `ticksPerWheel`.
const TICKS_PER_WHEEL: u32 = 512;
/// The JVM's fixed heap: sized once, pre-touched, with a large young generation.
pub const JVM_FLAGS: [&str; 5] = [
    "-Xms2g",
    "-Xmx2g",
    "-Xmn1g",
    "-XX:+AlwaysPreTouch",
    "-XX:+UseParallelGC",
];

/// Netty's HashedWheelTimer in a JVM.
pub struct Netty;

impl System for Netty {
    fn name(&self) -> &'static str {
        NAME
    }

    fn skip_reason(&self, plan: &Plan<'_>) -> Option<String> {
        if plan.scenario == Scenario::Heartbeat {
            return Some(
                "HashedWheelTimer has no reschedule (a Timeout is cancelled and a new one made)"
                    .into(),
            );
        }
        if plan.producers != 1 {
            return Some("the Java harness schedules from one thread".into());
        }
        if find_on_path("javac").is_none() || find_on_path("java").is_none() {
            return Some("no `javac`/`java` on PATH (apt-get install default-jdk-headless)".into());
        }
        if !Path::new(NETTY_JAR).exists() {
            return Some(format!(
                "{NETTY_JAR} is missing (apt-get install libnetty-java)"
            ));
        }
        None
    }

    fn run(&self, plan: &Plan<'_>) -> Result<RunResult, String> {
        let classes = compile(plan.work_dir)?;
        let bar = plan.progress.timer(
            plan.spread * (plan.jvm_warmup_rounds + 1) + Duration::from_secs(2),
            &format!("{NAME} {}: JVM", plan.scenario),
        );
        let mut java = Command::new("java")
            .args(JVM_FLAGS)
            .arg("-cp")
            .arg(classpath(&classes))
            .arg("NettyBench")
            .args(harness_args(plan))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start java: {e}"))?;
        let mut stderr = java.stderr.take().expect("stderr is piped");
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let stdout = java.stdout.take().expect("stdout is piped");
        let read = read_output(stdout, plan.stall_probe);
        let status = java.wait().map_err(|e| format!("waiting for java: {e}"))?;
        let errors = errors.join().unwrap_or_default();
        bar.finish_and_clear();
        if !status.success() {
            return Err(format!(
                "the Java harness failed ({status}): {}",
                errors.trim()
            ));
        }
        let (text, stalls) = read.map_err(|e| format!("reading the Java harness: {e}"))?;
        let mut result = parse_output(&text, plan)?;
        result.host_stalls = stalls;
        Ok(result)
    }

    fn method(&self) -> &'static str {
        "Netty 4 HashedWheelTimer (tick = wheel's tick, 512 ticks per wheel) in a JVM with a fixed pre-touched heap (-Xms2g -Xmx2g -Xmn1g -XX:+AlwaysPreTouch, ParallelGC) after warm-up rounds of the same workload and a System.gc(); scheduled from the main thread; callbacks on its one worker thread"
    }
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

fn classpath(classes: &Path) -> String {
    format!("{}:{NETTY_JAR}", classes.display())
}

/// Writes the harness source into `work_dir/java` and compiles it there.
fn compile(work_dir: &Path) -> Result<PathBuf, String> {
    let dir = work_dir.join("java");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let source = dir.join("NettyBench.java");
    if dir.join("NettyBench.class").exists()
        && std::fs::read_to_string(&source).ok().as_deref() == Some(SOURCE)
    {
        return Ok(dir);
    }
    std::fs::write(&source, SOURCE).map_err(|e| format!("{}: {e}", source.display()))?;
    let output = Command::new("javac")
        .arg("-cp")
        .arg(NETTY_JAR)
        .arg("-d")
        .arg(&dir)
        .arg(&source)
        .output()
        .map_err(|e| format!("cannot start javac: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "javac failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(dir)
}

fn harness_args(plan: &Plan<'_>) -> Vec<String> {
    vec![
        format!("timers={}", plan.timers),
        format!("spread_ns={}", plan.spread.as_nanos()),
        format!("seed={}", plan.seed as i64),
        format!("scenario={}", plan.scenario),
        format!("tick_ns={}", plan.config.tick.as_nanos()),
        format!("ticks_per_wheel={TICKS_PER_WHEEL}"),
        format!("warmup={}", plan.jvm_warmup_rounds),
        format!("idle_ms={}", plan.idle_for.as_millis()),
    ]
}

/// Reads the harness's stdout to its end; the stall probe (when `probe`) watches from its
/// "measuring start" line to its "measuring end" line.
fn read_output(stdout: impl Read, probe: bool) -> std::io::Result<(String, Option<HostStalls>)> {
    let mut text = String::new();
    let mut running = None;
    let mut stalls = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if probe && line == MEASURING[0] {
            running = Some(StallProbe::start());
        } else if line == MEASURING[1] {
            stalls = running.take().map(StallProbe::finish);
        }
        text.push_str(&line);
        text.push('\n');
    }
    // A harness that stopped mid-round: what the probe saw has no round to go with.
    if let Some(probe) = running {
        probe.finish();
    }
    Ok((text, stalls))
}

/// What the harness printed: `key value` figures and the lateness samples.
struct HarnessOutput {
    figures: HashMap<String, u64>,
    lateness: Histogram<u64>,
    blocked: Histogram<u64>,
}

impl HarnessOutput {
    /// Reads the `key value` lines and the `lateness|blocked value count` rows.
    fn parse(text: &str) -> Result<HarnessOutput, String> {
        let mut output = HarnessOutput {
            figures: HashMap::new(),
            lateness: new_histogram(),
            blocked: new_histogram(),
        };
        for line in text.lines().filter(|line| !MEASURING.contains(line)) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let number = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
            match (fields.first().copied(), number(1), number(2)) {
                (Some("lateness"), Some(value), Some(count)) => {
                    output.lateness.saturating_record_n(value, count)
                }
                (Some("blocked"), Some(value), Some(count)) => {
                    output.blocked.saturating_record_n(value, count)
                }
                (Some(key), Some(value), None) => {
                    output.figures.insert(key.to_string(), value);
                }
                _ => return Err(format!("unexpected line from the Java harness: {line:?}")),
            }
        }
        Ok(output)
    }

    /// A figure the harness must report.
    fn get(&self, key: &str) -> Result<u64, String> {
        self.figures
            .get(key)
            .copied()
            .ok_or_else(|| format!("the Java harness did not report {key}"))
    }

    /// CPU time of the worker (callbacks run there too) and of the scheduling thread.
    fn cpu(&self) -> Result<CpuFigures, String> {
        Ok(CpuFigures {
            timer_ns: self.get("cpu_ns")?,
            executor_ns: None,
            producer_ns: self.figures.get("producer_cpu_ns").copied(),
            threads: "netty-wheel (its worker; callbacks run there too)".into(),
            ..CpuFigures::default()
        })
    }

    fn counts(&self) -> Result<Counts, String> {
        Ok(Counts {
            scheduled: self.get("scheduled")?,
            fired: self.get("fired")?,
            cancelled: self.get("cancelled")?,
            cancel_calls: self.get("cancel_calls")?,
            unfired: self.get("unfired")?,
            duplicates: self.get("duplicates")?,
            early: self.get("early")?,
            ..Counts::default()
        })
    }

    fn throughput(&self, counts: &Counts) -> Result<Throughput, String> {
        let rate = |ops: u64, ns: u64| (ops > 0 && ns > 0).then(|| ops as f64 * 1e9 / ns as f64);
        Ok(Throughput {
            schedule_per_sec: rate(counts.scheduled, self.get("schedule_ns")?),
            cancel_per_sec: rate(counts.cancel_calls, self.get("cancel_ns")?),
            reschedule_per_sec: None,
        })
    }
}

/// Reads the harness's output into a result.
fn parse_output(text: &str, plan: &Plan<'_>) -> Result<RunResult, String> {
    let output = HarnessOutput::parse(text)?;
    let mut result = RunResult::new(NAME, plan.scenario, plan.timers, plan.spread, 1);
    result.cpu = output.cpu()?;
    if plan.scenario == Scenario::Idle {
        result.wall_secs = plan.idle_for.as_secs_f64();
        return Ok(result);
    }
    result.counts = output.counts()?;
    result.cpu.set_per_timer(result.counts.scheduled);
    result.throughput = output.throughput(&result.counts)?;
    result.wall_secs = output.get("wall_ns")? as f64 / 1e9;
    let ran_after_cancel = output.get("ran_after_cancel")?;
    if ran_after_cancel > 0 {
        result.problems.push(format!(
            "{ran_after_cancel} timers ran although cancel returned true"
        ));
    }
    result.notes.push(format!(
        "JVM: {} warm-up rounds; {} GCs taking {} ms during the measured round; memory not comparable (separate process)",
        plan.jvm_warmup_rounds,
        output.get("gc_count")?,
        output.get("gc_ms")?
    ));
    result.check_counts();
    let blocked = (plan.scenario == Scenario::Slow).then_some(output.blocked);
    result.set_lateness(output.lateness, blocked);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use wheel_shard::Config;

    use super::*;
    use crate::host::progress::Progress;

    const OUTPUT: &str = "measuring start\nmeasuring end\nscheduled 4\nschedule_ns 400\nproducer_cpu_ns 800\ncancel_calls 2\ncancel_ns 100\ncancelled 2\nfired 2\nduplicates 0\nearly 0\nunfired 0\nran_after_cancel 0\ncpu_ns 20\ngc_count 0\ngc_ms 0\nwall_ns 1000000000\nlateness 1000 1\nlateness 2000 1\n";

    fn check(plan: &Plan<'_>) {
        let result = parse_output(OUTPUT, plan).unwrap();
        assert!(result.problems.is_empty(), "{:?}", result.problems);
        assert_eq!(result.lateness.count, 2);
        assert_eq!(result.throughput.schedule_per_sec, Some(1e7));
        assert_eq!(result.cpu.producer_ns_per_timer, Some(200.0));
        assert_eq!(result.cpu.tick_ns_per_timer, Some(5.0));
        assert_eq!(result.cpu.executor_ns_per_timer, None);
        assert!(parse_output("what\n", plan).is_err());
        assert!(parse_output("scheduled 4\n", plan)
            .unwrap_err()
            .contains("cpu_ns"));
        // An older harness without the producer's CPU time still parses.
        let old = OUTPUT.replace("producer_cpu_ns 800\n", "");
        let result = parse_output(&old, plan).unwrap();
        assert_eq!(result.cpu.producer_ns_per_timer, None);
    }

    #[test]
    fn harness_output_is_read() {
        let config = Config::default();
        let progress = Progress::new(true);
        check(&Plan {
            scenario: Scenario::Rpc,
            timers: 4,
            spread: Duration::from_secs(1),
            producers: 1,
            seed: 1,
            idle_for: Duration::from_secs(1),
            config: &config,
            work_dir: Path::new("/nonexistent"),
            jvm_warmup_rounds: 1,
            warmup_rounds: 1,
            stall_probe: true,
            progress: &progress,
        });
    }

    #[test]
    fn the_stall_probe_watches_between_the_markers() {
        let (text, stalls) = read_output(OUTPUT.as_bytes(), true).unwrap();
        assert_eq!(text, OUTPUT);
        assert!(stalls.is_some());
        let (_, stalls) = read_output(OUTPUT.as_bytes(), false).unwrap();
        assert!(stalls.is_none());
        let (_, stalls) = read_output("measuring start\nscheduled 4\n".as_bytes(), true).unwrap();
        assert!(stalls.is_none(), "no end line: no figures");
    }
}
