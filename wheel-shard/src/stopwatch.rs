//! [`Stopwatch`]: one thread's cheap reading of real time, for statistics only (how late a
//! run started, how long it took). Never for a decision about when a timer fires: that reads
//! [`Clock`] itself, whose "now" is never ahead of the monotonic clock.
//!
//! A worker reads the time once per run; through the vDSO that costs about 25 ns on the
//! machines this was measured on, a tenth of a short run. The processor's time-stamp counter
//! costs about 10. So between readings of the real clock, the stopwatch extrapolates from the
//! counter:
//!
//! - every [`READS_PER_ANCHOR`] readings, or once the counter has run [`ANCHOR_AGE`] ticks
//!   (a millisecond or so) since the last anchor, it reads the real clock between two readings
//!   of the counter (an *anchor*, kept only when the two are close, so a thread preempted in
//!   between does not pair a time with a later count), and returns the real clock's value;
//! - in between it returns the last anchor's time plus the counter's advance, converted at a
//!   rate measured between its first anchor and its latest (so the rate's error shrinks as
//!   the thread lives, and any error restarts from zero at each anchor);
//! - with no rate yet (fewer than [`CALIBRATION`] counter ticks since the first anchor), or
//!   where the counter cannot be trusted, every reading is a real one.
//!
//! The counter is trusted only where Linux itself keeps time with it (its clocksource is
//! `tsc`): the kernel has then checked that it runs at a constant rate, does not stop, and
//! agrees across cores, so a thread that moves between cores reads one timeline. A build with
//! `--cfg wheel_portable` never trusts it, so that the path of platforms without one is tested
//! anywhere.
//!
//! For example, with anchors at counter 1 000 000 (time 500 000 ns) and 3 000 000 000
//! (1 000 500 000 ns), the rate is 10⁹ ns per 2 999 000 000 ticks (2.999 ticks a nanosecond):
//! a reading at counter 3 000 300 000 gives 1 000 500 000 + 300 000 / 2.999 ≈ 1 000 600 033 ns.

use std::sync::OnceLock;

use crate::clock::Clock;

/// Readings between two anchors: the real clock's cost spread over this many.
const READS_PER_ANCHOR: u32 = 256;

/// Counter ticks after which a reading anchors again however few readings there were: the
/// extrapolation's error grows with the distance from its anchor.
const ANCHOR_AGE: u64 = 1 << 22;

/// The most counter ticks between the two counter readings around an anchor's real one (a
/// real reading takes a few hundred): more means the thread was interrupted in between.
const ANCHOR_WIDTH: u64 = 4096;

/// Tries at an anchor before the reading settles for the real clock alone.
const ANCHOR_TRIES: u32 = 3;

/// Counter ticks between the first anchor and the one that sets the rate: at a few GHz, a
/// few milliseconds, against the real clock's nanosecond resolution.
const CALIBRATION: u64 = 1 << 24;

/// Bits after the binary point of the rate (nanoseconds per counter tick).
const RATE_SHIFT: u32 = 32;

pub(crate) struct Stopwatch {
    /// The first anchor (counter, nanoseconds), once one is taken.
    first: Option<(u64, u64)>,
    /// The latest anchor.
    anchor: (u64, u64),
    /// Nanoseconds per counter tick, in fixed point ([`RATE_SHIFT`]); 0 until calibrated.
    rate: u64,
    /// Readings until the next anchor.
    reads_left: u32,
}

impl Stopwatch {
    /// A stopwatch for the calling thread.
    pub(crate) fn new() -> Self {
        Stopwatch {
            first: None,
            anchor: (0, 0),
            rate: 0,
            reads_left: 0,
        }
    }

    /// Real nanoseconds since `clock`'s origin (as [`Clock::real_nanos`], within the
    /// extrapolation's error: tens of nanoseconds).
    #[inline]
    pub(crate) fn real_nanos(&mut self, clock: &Clock) -> u64 {
        if self.reads_left == 0 || self.rate == 0 {
            return self.anchor(clock);
        }
        let (at_counter, at_nanos) = self.anchor;
        let ticks = counter().saturating_sub(at_counter);
        if ticks > ANCHOR_AGE {
            return self.anchor(clock);
        }
        self.reads_left -= 1;
        at_nanos + ((u128::from(ticks) * u128::from(self.rate)) >> RATE_SHIFT) as u64
    }

    /// Reads the real clock, anchors there, and sets the rate once the counter has run long
    /// enough since the first anchor.
    #[cold]
    fn anchor(&mut self, clock: &Clock) -> u64 {
        if !counter_is_trusted() {
            return clock.real_nanos();
        }
        let mut nanos = 0;
        for _ in 0..ANCHOR_TRIES {
            let before = counter();
            nanos = clock.real_nanos();
            let after = counter();
            let width = after.wrapping_sub(before);
            if width > ANCHOR_WIDTH {
                continue;
            }
            let now = (before + width / 2, nanos);
            let (first_counter, first_nanos) = *self.first.get_or_insert(now);
            let ticks = now.0.saturating_sub(first_counter);
            if ticks >= CALIBRATION {
                self.rate = rate(now.1.saturating_sub(first_nanos), ticks);
            }
            self.anchor = now;
            self.reads_left = READS_PER_ANCHOR;
            return nanos;
        }
        // Interrupted every time: no anchor now (the next reading tries again), but the last
        // real reading stands.
        self.reads_left = 0;
        nanos
    }
}

/// `nanos / ticks` in fixed point.
fn rate(nanos: u64, ticks: u64) -> u64 {
    u64::try_from((u128::from(nanos) << RATE_SHIFT) / u128::from(ticks)).unwrap_or(u64::MAX)
}

/// The time-stamp counter (0 where there is none; then it is never trusted).
#[inline]
fn counter() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86_64 processor and only reads the counter.
        unsafe { std::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// Whether the kernel keeps time with the time-stamp counter (see the module doc), read once;
/// never under `--cfg wheel_portable`.
fn counter_is_trusted() -> bool {
    static TRUSTED: OnceLock<bool> = OnceLock::new();
    *TRUSTED.get_or_init(|| {
        cfg!(all(target_arch = "x86_64", not(wheel_portable)))
            && std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|source| source.trim() == "tsc")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_worked_example_of_the_module_doc() {
        let rate = rate(1_000_500_000 - 500_000, 3_000_000_000 - 1_000_000);
        let ticks = 300_000u128;
        let nanos = 1_000_500_000 + ((ticks * u128::from(rate)) >> RATE_SHIFT) as u64;
        assert_eq!(nanos, 1_000_600_033);
    }

    #[test]
    fn readings_follow_the_real_clock() {
        let clock = Clock::new(Duration::from_millis(1));
        let mut stopwatch = Stopwatch::new();
        let mut last = 0;
        let mut worst = 0i64;
        let until = std::time::Instant::now() + Duration::from_millis(300);
        while std::time::Instant::now() < until {
            let before = clock.real_nanos();
            let read = stopwatch.real_nanos(&clock);
            let after = clock.real_nanos();
            // Within a few microseconds of the real clock read around it (a thread may be
            // preempted between the reads, which only widens the window).
            let error = if read < before {
                before - read
            } else {
                read.saturating_sub(after)
            };
            worst = worst.max(error as i64);
            assert!(
                read + 1_000 >= last,
                "never runs back by more than a microsecond"
            );
            last = last.max(read);
        }
        assert!(
            worst < 20_000,
            "worst distance from the real clock {worst} ns"
        );
        if counter_is_trusted() {
            assert!(stopwatch.rate > 0, "calibrated within 300 ms");
        } else {
            assert_eq!(
                stopwatch.rate, 0,
                "an untrusted counter is never calibrated"
            );
        }
    }
}
