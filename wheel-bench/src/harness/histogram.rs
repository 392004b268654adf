//! Lateness histograms as the probe records them: the one constructor every histogram of the
//! bench comes from, and the percentiles every table shows. Their text and plots are in
//! [`crate::report`].

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest lateness tracked exactly: one hour, in nanoseconds (later samples are clamped).
const MAX_TRACKED_NS: u64 = 3_600_000_000_000;
/// Significant decimal digits kept by every histogram.
const SIGNIFICANT_DIGITS: u8 = 3;

/// An empty lateness histogram in nanoseconds, 1 ns to 1 h, 3 significant digits: the bounds
/// of `wheel_shard`'s `Lateness::histogram`, written out again here because wheel-shard keeps
/// its constructor to itself (`stats::new_histogram` is `pub(crate)`). When it exports one,
/// this should call it, so the bench's and the service's histograms cannot drift apart.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKED_NS, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

/// The percentiles every table shows, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub p9999_ns: u64,
    pub max_ns: u64,
}

impl Percentiles {
    /// Reads the standard percentiles off `histogram`.
    pub fn of(histogram: &Histogram<u64>) -> Percentiles {
        let at = |q: f64| histogram.value_at_quantile(q);
        Percentiles {
            count: histogram.len(),
            p50_ns: at(0.50),
            p90_ns: at(0.90),
            p99_ns: at(0.99),
            p999_ns: at(0.999),
            p9999_ns: at(0.9999),
            max_ns: histogram.max(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_read_the_histogram() {
        let mut h = new_histogram();
        for i in 1..=10_000u64 {
            h.record(i * 1_000).unwrap();
        }
        let p = Percentiles::of(&h);
        assert_eq!(p.count, 10_000);
        assert!((4_990_000..=5_010_000).contains(&p.p50_ns), "{p:?}");
        assert!(p.max_ns >= 9_990_000);
    }
}
