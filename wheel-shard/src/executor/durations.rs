//! [`Durations`]: a distribution of one kind of duration (a worker's lateness, callback time or
//! queue delay) that one thread records into on every run without a lock, and that any thread
//! reads and turns into an `hdrhistogram::Histogram` (`stats()` does, for every worker).
//!
//! The buckets are exactly those of `stats::new_histogram` (1 ns to an hour, 3 significant
//! digits), so the conversion loses nothing:
//!
//! - a value below 2048 ns has a bucket of its own;
//! - between `2^b` and `2^(b+1)` (for `b` ≥ 11) lie 1024 buckets, each `2^(b−10)` ns wide.
//!
//! For example 5000 ns has its top bit at `b = 12`, so it falls in a bucket 4 ns wide, the one
//! starting at 4 × ⌊5000 / 4⌋ = 5000; 5003 falls in the same one. The conversion records each
//! bucket's count at the bucket's lowest value, which hdrhistogram files under the same
//! bucket, so the histogram equals one that had every sample recorded directly (a test checks
//! this).
//!
//! A bucket is a counter only its one writer writes, with a plain load and store (no read-
//! modify-write, no lock): a recording costs a few instructions instead of hdrhistogram's
//! general path (bounds, minimum, maximum and total kept on every sample) under a lock. Readers
//! load each counter with Acquire, so a reader that has seen what a callback did also sees the
//! samples its worker recorded before running it.

use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;

#[cfg(test)]
use crate::stats::new_histogram;
use crate::stats::MAX_TRACKED_NANOS;

/// Values below this have a bucket each (hdrhistogram's sub-bucket count for 3 digits).
const EXACT_BELOW: u64 = 2048;
/// Buckets between two powers of two above [`EXACT_BELOW`].
const PER_DOUBLING: usize = 1024;
/// The top bit of [`EXACT_BELOW`].
const FIRST_DOUBLING: u32 = 11;
/// Buckets up to [`MAX_TRACKED_NANOS`]'s.
const BUCKETS: usize = bucket(MAX_TRACKED_NANOS) + 1;

/// A histogram of durations that one thread records into without a lock while any thread
/// reads it, with the buckets of [`Lateness::empty_histogram`](crate::Lateness::empty_histogram)
/// (1 ns to an hour, 3 significant digits): what each executor worker keeps its lateness,
/// callback times and queue delays in, for code that records its own samples beside the
/// service's at the same cost.
///
/// Caveats: recording is a plain load and store of the sample's counter, so it is for one
/// writer at a time (say, one per thread); two threads recording into one `Durations` at once
/// may lose counts (never more, and never unsoundly). It takes about 270 KiB, zeroed by
/// the allocator, so most of it usually stays untouched until samples land there.
///
/// ```
/// use wheel_shard::{Durations, Lateness};
///
/// let samples = Durations::new();
/// samples.record(1_500);
/// samples.record(2_000_000);
/// let mut histogram = Lateness::empty_histogram();
/// samples.add_to(&mut histogram);
/// assert_eq!(histogram.len(), 2);
/// assert_eq!(histogram.max(), histogram.highest_equivalent(2_000_000));
/// ```
pub struct Durations {
    counts: Box<[AtomicU64]>,
}

impl Default for Durations {
    fn default() -> Self {
        Durations::new()
    }
}

impl std::fmt::Debug for Durations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let samples: u64 = self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        f.debug_struct("Durations")
            .field("samples", &samples)
            .finish()
    }
}

impl Durations {
    /// Empty. The counters come zeroed from the allocator, so a page of them takes memory
    /// only once a sample lands there.
    pub fn new() -> Self {
        const {
            assert!(std::mem::size_of::<AtomicU64>() == std::mem::size_of::<u64>());
            assert!(std::mem::align_of::<AtomicU64>() == std::mem::align_of::<u64>());
        }
        let zeros = vec![0u64; BUCKETS].into_boxed_slice();
        // SAFETY: `AtomicU64` has the size, alignment and bit validity of `u64` (asserted
        // above), so the allocation is a valid `[AtomicU64]` of the same length, freed with
        // the same layout.
        let counts = unsafe { Box::from_raw(Box::into_raw(zeros) as *mut [AtomicU64]) };
        Durations { counts }
    }

    /// Counts one sample of `nanos` (clamped to 1 ns ..= an hour). One writer at a time (see
    /// the type's doc).
    #[inline]
    pub fn record(&self, nanos: u64) {
        let count = &self.counts[bucket(nanos.clamp(1, MAX_TRACKED_NANOS))];
        count.store(count.load(Ordering::Relaxed) + 1, Ordering::Release);
    }

    /// Adds every sample counted so far to `into`: exactly, when `into` has the bounds of
    /// [`Lateness::empty_histogram`](crate::Lateness::empty_histogram); a histogram with
    /// narrower bounds gets values beyond them clamped to its highest.
    pub fn add_to(&self, into: &mut Histogram<u64>) {
        for (index, count) in self.counts.iter().enumerate() {
            let count = count.load(Ordering::Acquire);
            if count > 0 {
                into.saturating_record_n(lowest(index), count);
            }
        }
    }

    /// Bytes one takes.
    pub(crate) fn bytes() -> usize {
        BUCKETS * std::mem::size_of::<AtomicU64>()
    }
}

/// The bucket of `nanos` (see the module doc).
#[inline]
const fn bucket(nanos: u64) -> usize {
    if nanos < EXACT_BELOW {
        return nanos as usize;
    }
    let top = 63 - nanos.leading_zeros();
    let within = (nanos >> (top - 10)) as usize - PER_DOUBLING;
    EXACT_BELOW as usize + (top - FIRST_DOUBLING) as usize * PER_DOUBLING + within
}

/// The lowest value of bucket `index`.
fn lowest(index: usize) -> u64 {
    if index < EXACT_BELOW as usize {
        return index as u64;
    }
    let above = index - EXACT_BELOW as usize;
    let top = FIRST_DOUBLING + (above / PER_DOUBLING) as u32;
    let within = (PER_DOUBLING + above % PER_DOUBLING) as u64;
    within << (top - 10)
}

/// A histogram of what `durations` counted.
#[cfg(test)]
fn to_histogram(durations: &Durations) -> Histogram<u64> {
    let mut histogram = new_histogram();
    durations.add_to(&mut histogram);
    histogram
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worked_example_of_the_module_doc() {
        assert_eq!(lowest(bucket(5000)), 5000);
        assert_eq!(bucket(5003), bucket(5000));
        assert_eq!(bucket(5004), bucket(5000) + 1);
        assert_eq!(lowest(bucket(2047)), 2047);
        assert_eq!(lowest(bucket(2049)), 2048);
    }

    #[test]
    fn buckets_are_hdrhistograms() {
        let reference = new_histogram();
        let mut value = 1u64;
        while value <= MAX_TRACKED_NANOS {
            for v in [value, value + 1, value.saturating_mul(3) / 2] {
                let v = v.min(MAX_TRACKED_NANOS);
                assert!(lowest(bucket(v)) <= v, "{v}");
                assert!(
                    reference.equivalent(lowest(bucket(v)), v),
                    "{v} and its bucket's lowest value share an hdrhistogram bucket"
                );
                assert!(
                    !reference.equivalent(lowest(bucket(v)).saturating_sub(1), v) || v < 2,
                    "{v}: the bucket starts where hdrhistogram's does"
                );
            }
            value = value * 2 + 1;
        }
        assert!(
            Durations::bytes() <= reference.distinct_values() * 8,
            "no more buckets than hdrhistogram's counts"
        );
    }

    #[test]
    fn a_histogram_with_narrower_bounds_gets_clamped_samples() {
        let durations = Durations::new();
        durations.record(500);
        durations.record(10_000_000);
        let mut narrow = Histogram::<u64>::new_with_bounds(1, 1_000_000, 2).unwrap();
        durations.add_to(&mut narrow);
        assert_eq!(narrow.len(), 2);
        assert!(narrow.max() <= narrow.highest_equivalent(1_000_000));
        assert!(narrow.equivalent(narrow.min(), 500));
    }

    #[test]
    fn converting_equals_recording_directly() {
        let durations = Durations::new();
        let mut direct = new_histogram();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let nanos = x >> (x % 40 + 20);
            durations.record(nanos);
            direct.saturating_record(nanos.clamp(1, MAX_TRACKED_NANOS));
        }
        durations.record(0);
        direct.saturating_record(1);
        durations.record(u64::MAX);
        direct.saturating_record(MAX_TRACKED_NANOS);
        let converted = to_histogram(&durations);
        assert_eq!(converted.len(), direct.len());
        assert_eq!(converted.max(), direct.max());
        assert_eq!(converted.min(), direct.min());
        for q in [0.0, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
            assert_eq!(
                converted.value_at_quantile(q),
                direct.value_at_quantile(q),
                "{q}"
            );
        }
        assert!(converted == direct, "the same counts in every bucket");
    }
}
