//! HdrHistogram's percentile-distribution text format (`.hgrm`) and the percentile spectrum
//! the plots draw.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Percentile steps per half distance in `.hgrm` output (HdrHistogram's default).
const TICKS_PER_HALF_DISTANCE: u32 = 5;
/// `.hgrm` values are in milliseconds, the unit HdrHistogram's plotter labels.
const NS_PER_OUTPUT_UNIT: f64 = 1e6;

/// One point of a percentile spectrum: `quantile` in [0, 1) and the value there (ns).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpectrumPoint {
    pub quantile: f64,
    pub value_ns: u64,
}

/// The percentile spectrum as HdrHistogram iterates it (quantile 1.0, the max, left out).
pub fn spectrum(histogram: &Histogram<u64>) -> Vec<SpectrumPoint> {
    if histogram.is_empty() {
        return Vec::new();
    }
    histogram
        .iter_quantiles(TICKS_PER_HALF_DISTANCE)
        .filter(|v| v.quantile_iterated_to() < 1.0)
        .map(|v| SpectrumPoint {
            quantile: v.quantile_iterated_to(),
            value_ns: histogram.highest_equivalent(v.value_iterated_to()),
        })
        .collect()
}

/// `histogram` in HdrHistogram's percentile-distribution format (values in milliseconds), as
/// `Histogram.outputPercentileDistribution` prints it and HistogramLogProcessor and the
/// online plotter read it.
pub fn to_hgrm(histogram: &Histogram<u64>) -> String {
    let digits = usize::from(histogram.sigfig());
    let mut out = String::new();
    let _ = write!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    if !histogram.is_empty() {
        for v in histogram.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
            total += v.count_since_last_iteration();
            let value = v.value_iterated_to() as f64 / NS_PER_OUTPUT_UNIT;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let inverse = 1.0 / (1.0 - q);
                let _ = writeln!(
                    out,
                    "{value:>12.digits$} {q:>2.12} {total:>10} {inverse:>14.2}"
                );
            } else {
                let _ = writeln!(out, "{value:>12.digits$} {q:>2.12} {total:>10}");
            }
        }
    }
    let mean = histogram.mean() / NS_PER_OUTPUT_UNIT;
    let stdev = histogram.stdev() / NS_PER_OUTPUT_UNIT;
    let max = histogram.max() as f64 / NS_PER_OUTPUT_UNIT;
    let _ = writeln!(
        out,
        "#[Mean    = {mean:>12.digits$}, StdDeviation   = {stdev:>12.digits$}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {max:>12.digits$}, Total count    = {:>12}]",
        histogram.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        histogram.buckets(),
        sub_bucket_count(histogram.sigfig())
    );
    out
}

/// HdrHistogram's sub-bucket count for `digits` significant digits (not exposed by the crate).
fn sub_bucket_count(digits: u8) -> u64 {
    let largest_single_unit = 2 * 10u64.pow(u32::from(digits));
    largest_single_unit.next_power_of_two()
}

/// Reads the `(value in ns, total count)` rows back from `.hgrm` text (for tests and tools).
pub fn parse_hgrm(text: &str) -> Option<Vec<(u64, u64)>> {
    let rows = text
        .lines()
        .skip(2)
        .take_while(|line| !line.starts_with('#'))
        .map(|line| {
            let mut fields = line.split_whitespace();
            let value: f64 = fields.next()?.parse().ok()?;
            let _quantile: f64 = fields.next()?.parse().ok()?;
            let total: u64 = fields.next()?.parse().ok()?;
            Some(((value * NS_PER_OUTPUT_UNIT).round() as u64, total))
        })
        .collect::<Option<Vec<_>>>()?;
    (!rows.is_empty()).then_some(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::histogram::new_histogram;

    fn uniform_1_to_10ms() -> Histogram<u64> {
        let mut h = new_histogram();
        for i in 1..=10_000u64 {
            h.record(i * 1_000).unwrap();
        }
        h
    }

    #[test]
    fn hgrm_has_the_java_layout_and_round_trips() {
        let text = to_hgrm(&uniform_1_to_10ms());
        assert!(text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)\n\n"));
        assert!(
            text.contains("#[Max     =       10.002, Total count    =        10000]"),
            "{text}"
        );
        assert!(
            text.contains("#[Buckets =           32, SubBuckets     =         2048]"),
            "{text}"
        );
        let rows = parse_hgrm(&text).unwrap();
        assert_eq!(rows.last().unwrap().1, 10_000);
        assert!(rows
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let last_row = text.lines().rfind(|l| !l.starts_with('#')).unwrap();
        assert_eq!(
            last_row.split_whitespace().count(),
            3,
            "the 100% row has no 1/(1-q)"
        );
    }

    #[test]
    fn spectrum_rises_and_stops_below_one() {
        let points = spectrum(&uniform_1_to_10ms());
        assert!(points.len() > 20);
        assert!(points.iter().all(|p| p.quantile < 1.0));
        assert!(points.windows(2).all(|w| w[0].value_ns <= w[1].value_ns));
        assert!(spectrum(&new_histogram()).is_empty());
    }
}
