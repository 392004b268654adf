//! Writes a run's files: one `.hgrm` per system and scenario, the plots, report.md and
//! results.json.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::harness::result::{RunResult, Skipped};
use crate::harness::scenario::Scenario;
use crate::host::machine::Machine;
use crate::options::Options;
use crate::report::format::count_text;
use crate::report::hgrm::{spectrum, to_hgrm};
use crate::report::plot::{self, Line};

/// What results.json holds.
#[derive(Serialize)]
pub struct ResultsFile<'a> {
    pub machine: &'a Machine,
    pub options: &'a Options,
    pub runs: &'a [RunResult],
    pub skipped: &'a [Skipped],
    /// Every file written, relative to the output directory.
    pub files: &'a [String],
}

/// The `.hgrm` file name of a run: `wheel-fire-10M.hgrm`.
pub fn hgrm_name(run: &RunResult, blocked: bool) -> String {
    let suffix = if blocked { "-blocked" } else { "" };
    format!(
        "{}-{}-{}{suffix}.hgrm",
        run.system,
        run.scenario,
        count_text(run.timers)
    )
}

/// Writes each run's histograms; returns the file names.
pub fn write_hgrms(dir: &Path, runs: &[RunResult]) -> Result<Vec<String>, String> {
    let mut files = Vec::new();
    for run in runs {
        let histograms = [(&run.histogram, false), (&run.blocked_histogram, true)];
        for (histogram, blocked) in histograms {
            if let Some(histogram) = histogram {
                let name = hgrm_name(run, blocked);
                write(&dir.join(&name), &to_hgrm(histogram))?;
                files.push(name);
            }
        }
    }
    Ok(files)
}

/// Writes `lateness-<scenario>.svg` per scenario with samples, `lateness.svg` for the first,
/// and `throughput.svg` for the first scenario's schedule rates; returns the file names.
pub fn write_plots(
    dir: &Path,
    runs: &[RunResult],
    scenarios: &[Scenario],
) -> Result<Vec<String>, String> {
    let mut files = Vec::new();
    let plotted: Vec<Scenario> = scenarios
        .iter()
        .copied()
        .filter(|s| {
            runs.iter()
                .any(|r| r.scenario == *s && r.lateness.count > 0)
        })
        .collect();
    for (i, scenario) in plotted.iter().enumerate() {
        let of_scenario: Vec<&RunResult> =
            runs.iter().filter(|r| r.scenario == *scenario).collect();
        let spectra: Vec<(String, Vec<_>)> = of_scenario
            .iter()
            .filter_map(|r| Some((label(r), spectrum(r.histogram.as_ref()?))))
            .filter(|(_, points)| !points.is_empty())
            .collect();
        let lines: Vec<Line<'_>> = spectra
            .iter()
            .map(|(label, points)| Line {
                label: label.clone(),
                points,
            })
            .collect();
        let title = format!("timer lateness by percentile — {scenario}");
        let mut names = vec![format!("lateness-{scenario}.svg")];
        if i == 0 {
            names.insert(0, "lateness.svg".into());
            let bars: Vec<(String, f64)> = of_scenario
                .iter()
                .filter_map(|r| Some((label(r), r.throughput.schedule_per_sec?)))
                .collect();
            plot::throughput(
                &dir.join("throughput.svg"),
                &format!("schedule throughput — {scenario}"),
                &bars,
            )?;
            files.push("throughput.svg".to_string());
        }
        for name in names {
            plot::lateness(&dir.join(&name), &title, &lines)?;
            files.push(name);
        }
    }
    Ok(files)
}

/// A run's label in plots: system and size ("wheel 10M").
fn label(run: &RunResult) -> String {
    format!("{} {}", run.system, count_text(run.timers))
}

/// Writes results.json.
pub fn write_json(dir: &Path, results: &ResultsFile<'_>) -> Result<String, String> {
    let text = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    write(&dir.join("results.json"), &text)?;
    Ok("results.json".into())
}

/// Writes `text` to `path`, naming the path in the error.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The default output directory: `target/wheel-bench/<UTC date-time>`.
pub fn default_dir(target: &Path) -> PathBuf {
    target
        .join("wheel-bench")
        .join(run_name(std::time::SystemTime::now()))
}

/// A run's directory name from its start time: `20250102-030405` (UTC).
pub fn run_name(at: std::time::SystemTime) -> String {
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil-date conversion.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn run_names_are_utc_date_times() {
        assert_eq!(run_name(UNIX_EPOCH), "19700101-000000");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_251_199); // 2024-02-29 23:59:59
        assert_eq!(run_name(t), "20240229-235959");
    }
}
