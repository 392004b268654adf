//! [`CounterClock`]: a bound on the monotonic clock's "now" that is never behind it, read from
//! the CPU's time-stamp counter. `schedule(Duration)` starts its deadline from it.
//!
//! A deadline `delay` from now may be late but must never lie before the call plus `delay`, so
//! the "now" it starts from may run ahead of the truth but never behind. `Instant::now()` is
//! exact, but it is a vDSO call whose `lfence` waits for every load in flight: 25–30 ns of a
//! schedule on the benchmark machines, where the counter alone costs a few
//! (`docs/performance.md`, "Why not `Instant::now()`").
//! The bound, with `mono(c)` the monotonic clock at the moment the counter read `c`:
//!
//! ```text
//! anchor:  c₀ = counter, then m₀ = monotonic clock          so mono(c₀) ≤ m₀
//! later:   c  = counter,  0 ≤ c − c₀ ≤ SPAN
//!          now ≤ m₀ + (c − c₀)·r̂ + MARGIN
//! ```
//!
//! For example, with a 2.6 GHz counter (r ≈ 0.385 ns a count, r̂ = 9/8 of that ≈ 0.433): an
//! anchor (c₀ = 1 000 000, m₀ = 5 000 000 ns), then a read c = 1 002 600 a microsecond later
//! gives 5 000 000 + 1 126 + 1 000 = 5 002 126 ns, 1.1 µs ahead of the true 5 001 000.
//!
//! Ground rules, each a reason the bound is never behind:
//! 1. The kernel's own monotonic clock reads this counter (clocksource `tsc`, an invariant
//!    counter), so the counter is as consistent across CPUs as `Instant` is; on any other
//!    machine, and in a build with `--cfg wheel_portable` (which tests that path on any
//!    machine), there is no counter clock and `schedule` reads `Instant::now()`. This is checked
//!    once, at calibration: a kernel that later finds its counter unstable and changes clock
//!    source has broken the premise for its own clock as well.
//! 2. `r̂` is the counter's rate (nanoseconds a count) measured at calibration as an upper
//!    bound, times 9/8: NTP slews the monotonic clock against the counter, chrony by at most
//!    83 333 ppm, which the eighth covers.
//! 3. The anchor's monotonic read is a vDSO call whose fence orders it after the counter read
//!    before it, so `mono(c₀) ≤ m₀`, and the counter read after it bounds how far ahead `m₀`
//!    can be: an anchor whose two counter reads lie more than `WIDTH` apart (the thread was
//!    interrupted) is not kept; its read still serves the call. `WIDTH` is 250 ns, or four
//!    times the tightest bracket calibration saw where a monotonic read is slower than that
//!    (at most half a span), so that a machine with a slow clock call still keeps anchors.
//! 4. The later counter read is not fenced: it may run ahead of earlier instructions still
//!    waiting on memory. `MARGIN` (1 µs) is far beyond any such window (a DRAM miss is about
//!    150 ns).
//! 5. An anchor serves `SPAN` counts (8 µs) at most, and only a count that moved forwards:
//!    a thread's first read, a pause, or a count from a CPU that is behind takes a new anchor.
//!
//! So the bound runs at most `MARGIN` plus `WIDTH` plus an eighth of a span (≈ 2.3 µs) ahead
//! of the truth: with a 1 ms tick about one deadline in 450 moves a tick later. A new anchor
//! costs a vDSO call, so the span sets how often a busy producer pays one (every 8 µs, a
//! hundred schedules or more), and the width, not the span, bounds the anchor's own lead. A
//! [`Clock`](super::Clock) uses it only for ticks of at least [`MIN_TICK`].

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::nanos;

/// The shortest tick whose deadlines start from the counter clock: its lead of at most about
/// 2.3 µs moves at most one deadline in 40 a tick later.
pub(crate) const MIN_TICK: Duration = Duration::from_micros(100);

/// Added to every extrapolated bound: covers a counter read that ran ahead of earlier
/// instructions (rule 4).
const MARGIN_NANOS: u64 = 1_000;

/// How long an anchor serves (rule 5).
const SPAN_NANOS: u64 = 8_000;
// An anchor is younger than the shortest tick, so a service's origin, taken before the
// schedule that reads the bound, lies less than a tick after the anchor's time: the
// deadline's sum without the counts (`Clock::deadline_after`) does not wrap below zero.
const _: () = assert!(MIN_TICK.as_nanos() > SPAN_NANOS as u128);

/// The widest bracket an anchor is taken from (rule 3) where monotonic reads are fast: a vDSO
/// read takes 25–60 ns, so only an interrupted one is refused.
const WIDTH_NANOS: u64 = 250;

/// How long calibration measures the counter's rate.
const CALIBRATION: Duration = Duration::from_millis(2);

/// Fixed-point scale of [`CounterClock::rate`]: nanoseconds a count, times 2³².
pub(crate) const RATE_SHIFT: u32 = 32;

/// The counter clock of this process, measured once: `None` where there is none.
static CALIBRATED: OnceLock<Option<CounterClock>> = OnceLock::new();

/// One thread's anchor (rule 3): a counter reading, and the monotonic time read right after
/// it (nanoseconds since the calibration's epoch) plus `MARGIN_NANOS`, so that a bound costs
/// one addition less after the counter read. Shared by every service the thread schedules on,
/// since all measure from the one epoch.
#[derive(Clone, Copy)]
struct Anchor {
    count: u64,
    nanos_with_margin: u64,
}

/// A bound on now, [`CounterClock::bound`]: `nanos + counts · r̂` nanoseconds since the
/// epoch, `counts` at most a span.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    pub(crate) nanos: u64,
    pub(crate) counts: u64,
}

thread_local! {
    /// Count 0 is long past on any machine, so a thread's first read takes a new anchor.
    static ANCHOR: Cell<Anchor> = const {
        Cell::new(Anchor {
            count: 0,
            nanos_with_margin: 0,
        })
    };
}

/// The calibrated counter: how to turn counts into a bound on the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CounterClock {
    /// Where its nanoseconds count from.
    epoch: Instant,
    /// `r̂`: an upper bound on nanoseconds a count, times 9/8, in 32.32 fixed point.
    rate: u64,
    /// `SPAN_NANOS` in counts: how far an anchor serves.
    span: u64,
    /// The widest bracket an anchor is taken from, in counts: `WIDTH_NANOS`, or more on a
    /// machine whose monotonic reads are slow (rule 3).
    width: u64,
}

impl CounterClock {
    /// The process's counter clock, calibrated on first use (which takes [`CALIBRATION`]):
    /// `None` where the kernel's monotonic clock does not read an invariant time-stamp counter.
    pub(crate) fn calibrated() -> Option<CounterClock> {
        *CALIBRATED.get_or_init(|| {
            if kernel_reads_the_counter() {
                calibrate()
            } else {
                None
            }
        })
    }

    /// The instant its nanoseconds count from.
    pub(crate) fn epoch(self) -> Instant {
        self.epoch
    }

    /// Nanoseconds since [`CounterClock::epoch`], never behind the monotonic clock's now.
    #[inline]
    pub(crate) fn nanos_above(self) -> u64 {
        let Bound { nanos, counts } = self.bound();
        // `counts · rate` < 8 µs of counts times a rate under 2⁴⁰: no overflow.
        nanos.wrapping_add((counts * self.rate) >> RATE_SHIFT)
    }

    /// The bound on now in two parts, for a caller that converts it to other units in one
    /// multiplication: now ≤ `nanos + counts · r̂`. `nanos` is known before the counter is
    /// read (the thread's anchor), so after the read only `counts`, one subtraction, remains.
    #[inline]
    pub(crate) fn bound(self) -> Bound {
        let (low, count) = read_counter_halves();
        ANCHOR.with(|anchor| {
            let Anchor {
                count: at,
                nanos_with_margin,
            } = anchor.get();
            if count.wrapping_sub(at) <= self.span {
                // A span is under 2³² counts (8 µs of a counter of at most 100 GHz), so the
                // low halves' difference is the whole one; and it skips the two instructions
                // that join the counter's halves, on the chain every deadline waits for.
                let counts = low.wrapping_sub(at as u32);
                Bound {
                    nanos: nanos_with_margin,
                    counts: u64::from(counts),
                }
            } else {
                Bound {
                    nanos: self.anchor(anchor),
                    counts: 0,
                }
            }
        })
    }

    /// `r̂` in 32.32 fixed point: an upper bound on nanoseconds a count.
    pub(crate) fn rate(self) -> u64 {
        self.rate
    }

    /// Takes a new anchor for this thread and returns its exact read.
    #[cold]
    #[inline(never)]
    fn anchor(self, anchor: &Cell<Anchor>) -> u64 {
        let read = Bracket::read(self.epoch);
        if read.width() <= self.width {
            anchor.set(Anchor {
                count: read.before,
                nanos_with_margin: read.nanos + MARGIN_NANOS,
            });
        }
        read.nanos
    }
}

/// A monotonic read bracketed by two counter reads: the read happened between them.
#[derive(Clone, Copy)]
struct Bracket {
    before: u64,
    /// Nanoseconds since `epoch`.
    nanos: u64,
    after: u64,
}

impl Bracket {
    /// Counter, monotonic clock (nanoseconds since `epoch`), counter.
    fn read(epoch: Instant) -> Bracket {
        let before = read_counter();
        let nanos = nanos(epoch.elapsed());
        let after = read_counter();
        Bracket {
            before,
            nanos,
            after,
        }
    }

    /// Counts between the two counter reads; huge when the count went backwards (another
    /// CPU's counter).
    fn width(self) -> u64 {
        self.after.wrapping_sub(self.before)
    }
}

/// Measures the counter's rate against the monotonic clock over [`CALIBRATION`], as an upper
/// bound: the counts between the two monotonic reads are at least those between the first
/// bracket's end and the second's start.
fn calibrate() -> Option<CounterClock> {
    let epoch = Instant::now();
    let first = bracket(epoch)?;
    std::thread::sleep(CALIBRATION);
    let second = bracket(epoch)?;
    let counts = second.before.checked_sub(first.after)?;
    let nanos = second.nanos.checked_sub(first.nanos)?;
    let measured = (u128::from(nanos) << RATE_SHIFT).div_ceil(u128::from(counts.max(1)));
    // Between 100 MHz and 100 GHz; anything else is not a time-stamp counter worth trusting.
    let plausible = (1u128 << RATE_SHIFT) / 100..=(10u128 << RATE_SHIFT);
    if !plausible.contains(&measured) {
        return None;
    }
    let span = u64::try_from((u128::from(SPAN_NANOS) << RATE_SHIFT) / measured).ok()?;
    let width = u64::try_from((u128::from(WIDTH_NANOS) << RATE_SHIFT) / measured).ok()?;
    let tightest = first.width().min(second.width());
    Some(CounterClock {
        epoch,
        rate: u64::try_from(measured * 9 / 8).ok()?,
        span,
        width: width.max(tightest.saturating_mul(4)).min(span / 2),
    })
}

/// A tight bracket (under 10 000 counts, a few µs) around a monotonic read, retried when the
/// thread was interrupted between the reads.
fn bracket(epoch: Instant) -> Option<Bracket> {
    (0..64)
        .map(|_| Bracket::read(epoch))
        .find(|read| (1..10_000).contains(&read.width()))
}

/// Whether the kernel's monotonic clock reads an invariant time-stamp counter (rule 1); never
/// under `--cfg wheel_portable`.
fn kernel_reads_the_counter() -> bool {
    const SOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
    cfg!(all(
        target_arch = "x86_64",
        target_os = "linux",
        not(loom),
        not(wheel_portable)
    )) && invariant_counter()
        && std::fs::read_to_string(SOURCE).is_ok_and(|source| is_the_counter(&source))
}

/// Whether a `current_clocksource` names the time-stamp counter.
fn is_the_counter(source: &str) -> bool {
    source.trim() == "tsc"
}

/// CPUID's "invariant TSC": the counter ticks at one rate in every power state.
#[cfg(target_arch = "x86_64")]
fn invariant_counter() -> bool {
    use std::arch::x86_64::__cpuid;
    const POWER_LEAF: u32 = 0x8000_0007;
    const INVARIANT_TSC: u32 = 1 << 8;
    // `__cpuid` is a safe function in current Rust and an unsafe one in the oldest this crate
    // builds with (its `rust-version`): the block serves both.
    #[allow(unused_unsafe)]
    // SAFETY: CPUID is part of the x86_64 baseline; it reads the processor's identification
    // and touches no memory.
    unsafe {
        __cpuid(0x8000_0000).eax >= POWER_LEAF && __cpuid(POWER_LEAF).edx & INVARIANT_TSC != 0
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_counter() -> bool {
    false
}

/// The counter's whole count. (The benchmark for reading it: docs/performance.md, "the counter
/// clock".)
#[inline(always)]
fn read_counter() -> u64 {
    read_counter_halves().1
}

/// The counter's low half, and the whole count: the low half is ready an instruction or two
/// before the count, which joins the halves.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn read_counter_halves() -> (u32, u64) {
    let (low, high): (u32, u32);
    // SAFETY: RDTSC is part of the x86_64 baseline; it writes EDX:EAX and touches no memory
    // and no flags.
    unsafe {
        std::arch::asm!(
            "rdtsc",
            out("eax") low,
            out("edx") high,
            options(nomem, nostack, preserves_flags)
        );
    }
    (low, u64::from(high) << 32 | u64::from(low))
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn read_counter_halves() -> (u32, u64) {
    unreachable!("there is no counter clock without a time-stamp counter")
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The most `clock`'s bound may run ahead: MARGIN, its widest bracket, an eighth of a
    /// span of rate headroom (≈ 2.3 µs where monotonic reads are fast), doubled for
    /// calibration error.
    fn lead_nanos(clock: CounterClock) -> u64 {
        2 * (MARGIN_NANOS + width_nanos(clock) + SPAN_NANOS / 8)
    }

    /// `clock`'s widest anchor bracket in nanoseconds, by its rate (an upper bound).
    fn width_nanos(clock: CounterClock) -> u64 {
        ((u128::from(clock.width) * u128::from(clock.rate)) >> RATE_SHIFT) as u64
    }

    #[test]
    fn anchors_are_kept_from_brackets_of_a_quarter_microsecond_or_more() {
        let Some(clock) = CounterClock::calibrated() else {
            return;
        };
        let width = width_nanos(clock);
        assert!(
            (WIDTH_NANOS..=SPAN_NANOS * 9 / 16 + 1).contains(&width),
            "an anchor's widest bracket is {width} ns"
        );
    }

    #[test]
    fn only_the_time_stamp_counter_is_the_counter() {
        assert!(is_the_counter("tsc\n"));
        assert!(!is_the_counter("kvm-clock\n"));
        assert!(!is_the_counter("hpet"));
    }

    /// The switch that tests the platforms without a counter clock leaves none here either.
    #[test]
    #[cfg(wheel_portable)]
    fn the_portable_switch_leaves_no_counter_clock() {
        assert!(!kernel_reads_the_counter());
        assert!(CounterClock::calibrated().is_none());
    }

    #[test]
    fn the_kernel_decides_whether_there_is_a_counter_clock() {
        assert_eq!(
            CounterClock::calibrated().is_some(),
            kernel_reads_the_counter(),
            "calibration refused a counter the kernel reads"
        );
    }

    /// Reads before, the bound, reads after, on `threads` threads at once, with pauses that
    /// force new anchors and let threads move between CPUs.
    fn check_bounds(clock: CounterClock, threads: usize, reads: u64) {
        let lead = lead_nanos(clock);
        std::thread::scope(|scope| {
            for t in 0..threads {
                scope.spawn(move || {
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                    for i in 0..reads {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        match x % 512 {
                            0 => std::thread::yield_now(),
                            1 => std::thread::sleep(Duration::from_micros(x % 50)),
                            _ => {}
                        }
                        let before = nanos(clock.epoch.elapsed());
                        let above = clock.nanos_above();
                        let after = nanos(clock.epoch.elapsed());
                        assert!(above >= before, "read {i}: {above} behind {before}");
                        assert!(
                            above <= after + lead,
                            "read {i}: {above} more than {lead} ns ahead of {after}"
                        );
                    }
                });
            }
        });
    }

    #[test]
    fn the_bound_is_never_behind_and_never_far_ahead() {
        match CounterClock::calibrated() {
            Some(clock) => check_bounds(clock, 4, 200_000),
            None => eprintln!("no counter clock on this machine: schedule reads Instant::now()"),
        }
    }

    #[test]
    fn the_rate_bounds_the_counter_from_above_with_headroom() {
        let Some(clock) = CounterClock::calibrated() else {
            assert!(!kernel_reads_the_counter());
            return;
        };
        let first = bracket(clock.epoch).expect("a tight bracket");
        std::thread::sleep(Duration::from_millis(20));
        let second = bracket(clock.epoch).expect("a tight bracket");
        let nanos = (second.nanos - first.nanos) as f64;
        let rate = clock.rate as f64 / (1u64 << RATE_SHIFT) as f64;
        let fastest = nanos / (second.before - first.after) as f64;
        let slowest = nanos / (second.after - first.before) as f64;
        assert!(rate >= fastest, "rate {rate} below the measured {fastest}");
        assert!(
            rate <= slowest * 1.2,
            "rate {rate} has more than its eighth of headroom over {slowest}"
        );
    }
}
