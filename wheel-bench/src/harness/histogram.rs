//! Lateness histograms as the probe records them: the one constructor every histogram of the
//! bench comes from, and the percentiles every table shows. Their text and plots are in
//! [`crate::report`].

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// An empty lateness histogram: the service's own constructor
/// ([`wheel_shard::Lateness::empty_histogram`]), so the bench's and the service's histograms
/// share their bounds (1 ns to 1 h, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    wheel_shard::Lateness::empty_histogram()
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
