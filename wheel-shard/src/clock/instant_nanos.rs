//! [`InstantNanos`]: nanoseconds from an origin to an `Instant`, in a few inlined instructions.
//!
//! `schedule_at` turns every deadline `Instant` into nanoseconds since the clock's origin. std
//! does that with `Instant::saturating_duration_since`, an out-of-line call into the platform's
//! time code that builds and normalises a `Duration` (35 of the 297 instructions a
//! `schedule_at` took: docs/performance.md). `Instant` has no API that exposes its value, but
//! it is `Hash`, and its hash is derived from its fields, generically, so it inlines here: a
//! [`Hasher`] that keeps what it is given reads the two fields of a `timespec` (seconds as an
//! `i64`, then nanoseconds as a `u32`) where std on Linux keeps them.
//!
//! That layout is std's implementation, not its promise. So [`InstantNanos::new`] uses the
//! reading only after it has checked it against std's own subtraction: the origin must hash as
//! exactly one `i64` and one `u32` below 10⁹, and instants on both sides of it, across second
//! boundaries and up to years apart, must come out at the nanoseconds std gives. On any other
//! layout (another platform, another std) it subtracts as std does. A deadline is never
//! computed from a reading that did not pass those checks, so never-early does not depend on
//! the layout.

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// Nanoseconds from a fixed origin to any `Instant`: what
/// `at.saturating_duration_since(origin)` gives in nanoseconds (0 before the origin,
/// `u64::MAX` beyond 584 years), in a few inlined instructions where this platform's `Instant`
/// allows, and by std's subtraction elsewhere.
///
/// The service converts every `schedule_at` deadline with one; a caller that measures many
/// instants against one origin (a benchmark's callbacks, lateness statistics) can too.
///
/// ```
/// use std::time::{Duration, Instant};
/// use wheel_shard::InstantNanos;
///
/// let origin = Instant::now();
/// let since = InstantNanos::new(origin);
/// assert_eq!(since.since_origin(origin + Duration::new(2, 5)), 2_000_000_005);
/// assert_eq!(since.since_origin(origin), 0);
/// if let Some(earlier) = origin.checked_sub(Duration::from_secs(1)) {
///     assert_eq!(since.since_origin(earlier), 0);
/// }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct InstantNanos {
    origin: Instant,
    /// `origin`'s fields, when [`InstantNanos::new`]'s checks passed; `None`: std subtracts.
    fields: Option<Timespec>,
}

/// An `Instant`'s value as its hash presents it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Timespec {
    secs: i64,
    nanos: u32,
}

/// Seconds below which [`InstantNanos::since_origin`] takes its short path: `secs·10⁹ + 10⁹`
/// stays below 2⁶⁴ (584 years).
const SHORT_SECS: u64 = u64::MAX / NANOS_PER_SEC - 1;

const NANOS_PER_SEC: u64 = 1_000_000_000;

impl InstantNanos {
    /// Measures from `origin`; reads instants' fields only if this platform's `Instant`
    /// hashes as a `timespec` that agrees with std's subtraction (see the module's doc).
    pub fn new(origin: Instant) -> InstantNanos {
        let Some(fields) = Timespec::checked(origin) else {
            return InstantNanos::subtracting(origin);
        };
        let reader = InstantNanos {
            origin,
            fields: Some(fields),
        };
        if reader.agrees_with_std() {
            reader
        } else {
            InstantNanos::subtracting(origin)
        }
    }

    /// One that always uses std's subtraction.
    pub(crate) fn subtracting(origin: Instant) -> InstantNanos {
        InstantNanos {
            origin,
            fields: None,
        }
    }

    /// The instant measured from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Whether instants are read from their fields (`false`: std's subtraction).
    pub fn reads_fields(&self) -> bool {
        self.fields.is_some()
    }

    /// Nanoseconds from the origin to `at`: 0 if `at` is earlier, `u64::MAX` if too far.
    #[inline]
    pub fn since_origin(&self, at: Instant) -> u64 {
        match self.fields {
            Some(origin) => origin.nanos_until(Timespec::read(at)),
            None => {
                let since = at.saturating_duration_since(self.origin);
                u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
            }
        }
    }

    /// Whether instants around the origin, either side and across second boundaries, read as
    /// std subtracts them.
    fn agrees_with_std(&self) -> bool {
        let origin = self.origin;
        let offsets = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_nanos(999_999_999),
            Duration::from_secs(1),
            Duration::new(1, 1),
            Duration::new(2, 999_999_999),
            Duration::new(86_400, 123_456_789),
            Duration::from_secs(10 * 365 * 86_400),
        ];
        let agrees = |at: Instant| {
            Timespec::checked(at).is_some()
                && u128::from(self.since_origin(at))
                    == at.saturating_duration_since(origin).as_nanos()
        };
        let later = offsets
            .iter()
            .filter_map(|&offset| origin.checked_add(offset));
        let earlier = offsets
            .iter()
            .filter_map(|&offset| origin.checked_sub(offset));
        later.chain(earlier).chain([Instant::now()]).all(agrees)
    }
}

impl Timespec {
    /// Nanoseconds from `self` to `at`, saturating.
    #[inline]
    fn nanos_until(self, at: Timespec) -> u64 {
        // Wraps to a huge value when `at` is before `self`, which the wide path sorts out.
        let secs = at.secs.wrapping_sub(self.secs) as u64;
        if secs < SHORT_SECS {
            // At most 10⁹ − 1 below `secs·10⁹ + 10⁹`, so no overflow; below zero only when
            // `secs` is 0 and the nanoseconds are behind, which `wrapping` turns into a
            // value above 2⁶³ that the check after sends to the wide path.
            let nanos =
                (secs * NANOS_PER_SEC + u64::from(at.nanos)).wrapping_sub(u64::from(self.nanos));
            if nanos < 1 << 63 {
                return nanos;
            }
        }
        self.nanos_until_wide(at)
    }

    /// [`Timespec::nanos_until`] for instants before `self` or centuries after it.
    #[cold]
    fn nanos_until_wide(self, at: Timespec) -> u64 {
        let secs = i128::from(at.secs) - i128::from(self.secs);
        let nanos =
            secs * i128::from(NANOS_PER_SEC) + i128::from(at.nanos) - i128::from(self.nanos);
        u64::try_from(nanos.max(0)).unwrap_or(u64::MAX)
    }

    /// `at`'s fields, trusted to be a `timespec` (only after [`Timespec::checked`] said so).
    #[inline]
    fn read(at: Instant) -> Timespec {
        let mut fields = Fields::default();
        at.hash(&mut fields);
        fields.value
    }

    /// `at`'s fields if its hash is exactly seconds then nanoseconds below 10⁹.
    fn checked(at: Instant) -> Option<Timespec> {
        let mut fields = Fields::default();
        at.hash(&mut fields);
        fields.timespec()
    }
}

/// What a [`Fields`] hasher was given, in order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Write {
    #[default]
    None,
    Secs,
    Nanos,
    Other,
}

/// A [`Hasher`] that keeps the fields it is given instead of hashing them.
#[derive(Default)]
struct Fields {
    value: Timespec,
    /// The first three writes, for [`Timespec::checked`]; the hot path never looks.
    writes: [Write; 3],
    count: usize,
}

impl Fields {
    /// What was written, if it was exactly seconds then nanoseconds below 10⁹.
    fn timespec(&self) -> Option<Timespec> {
        let ok = self.writes == [Write::Secs, Write::Nanos, Write::None]
            && u64::from(self.value.nanos) < NANOS_PER_SEC;
        ok.then_some(self.value)
    }

    #[inline]
    fn note(&mut self, write: Write) {
        if let Some(slot) = self.writes.get_mut(self.count) {
            *slot = write;
        }
        self.count += 1;
    }
}

impl Hasher for Fields {
    fn finish(&self) -> u64 {
        0
    }

    fn write(&mut self, _bytes: &[u8]) {
        self.note(Write::Other);
    }

    #[inline]
    fn write_i64(&mut self, secs: i64) {
        self.value.secs = secs;
        self.note(Write::Secs);
    }

    #[inline]
    fn write_u32(&mut self, nanos: u32) {
        self.value.nanos = nanos;
        self.note(Write::Nanos);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn reader() -> (Instant, InstantNanos) {
        let origin = Instant::now();
        (origin, InstantNanos::new(origin))
    }

    /// Where the service is built and measured, instants are read from their fields.
    #[test]
    #[cfg(target_os = "linux")]
    fn linux_instants_are_read_from_their_fields() {
        assert!(reader().1.reads_fields());
    }

    /// On every platform, by either path.
    #[test]
    fn nanoseconds_since_the_origin_equal_std_s_saturating_difference() {
        let (origin, fast) = reader();
        let std = InstantNanos::subtracting(origin);
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Offsets from nanoseconds to about 36 years, either side of the origin.
            let offset = Duration::from_nanos(x >> (x % 64) as u32 >> 4);
            for at in [origin.checked_add(offset), origin.checked_sub(offset)]
                .into_iter()
                .flatten()
            {
                let expected = at.saturating_duration_since(origin).as_nanos();
                assert_eq!(u128::from(fast.since_origin(at)), expected, "{offset:?}");
                assert_eq!(u128::from(std.since_origin(at)), expected, "{offset:?}");
            }
        }
    }

    #[test]
    fn instants_centuries_away_saturate() {
        let (origin, reader) = reader();
        let far = Duration::from_secs(700 * 365 * 86_400);
        if let Some(at) = origin.checked_add(far) {
            assert_eq!(reader.since_origin(at), u64::MAX);
        }
        if let Some(at) = origin.checked_sub(far) {
            assert_eq!(reader.since_origin(at), 0);
        }
    }

    #[test]
    fn a_hash_of_another_shape_is_refused() {
        let written = |write: &dyn Fn(&mut Fields)| {
            let mut fields = Fields::default();
            write(&mut fields);
            fields.timespec()
        };
        let timespec = Timespec { secs: 7, nanos: 1 };
        assert_eq!(
            written(&|f| (f.write_i64(7), f.write_u32(1)).1),
            Some(timespec)
        );
        // A single 64-bit count (another platform's `Instant`).
        assert_eq!(written(&|f| f.write_u64(7)), None);
        // The fields in another order, another width, or with more after them.
        assert_eq!(written(&|f| (f.write_u32(1), f.write_i64(7)).1), None);
        assert_eq!(written(&|f| (f.write_u64(7), f.write_u32(1)).1), None);
        assert_eq!(
            written(&|f| (f.write_i64(7), f.write_u32(1), f.write_u8(0)).2),
            None
        );
        // Nanoseconds that are not a fraction of a second.
        assert_eq!(
            written(&|f| (f.write_i64(7), f.write_u32(1_000_000_000)).1),
            None
        );
    }
}
