//! [`Clock`]: converts between `Instant`s and the wheel's ticks.
//!
//! Tick `n` is the instant `origin + n·tick`. Deadlines round **up** to a tick and "now" rounds
//! **down**, so a timer is handed out only once its deadline has truly passed: never early.
//!
//! "Now" comes from the monotonic clock, or, for a service built with
//! [`TimerService::with_manual_clock`](crate::TimerService::with_manual_clock), from a virtual
//! time that only moves when the test moves it. The choice is one predictable branch per read.
//!
//! A deadline `delay` from now needs a "now" that is never behind, not an exact one: where the
//! machine has one, it starts from the [`CounterClock`]'s bound, a few nanoseconds a read
//! instead of a vDSO call (`counter.rs` has the argument). Everything that decides whether a
//! deadline has passed reads the monotonic clock itself.

mod counter;
mod instant_nanos;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use counter::{Bound, CounterClock, RATE_SHIFT};
pub use instant_nanos::InstantNanos;

#[derive(Clone, Debug)]
pub(crate) struct Clock {
    /// The instant tick 0 begins, with what measures nanoseconds since it (without std's
    /// out-of-line subtraction where the platform allows).
    origin: InstantNanos,
    /// The tick in nanoseconds, as a divisor.
    tick: Divisor,
    /// Virtual nanoseconds since `origin`, for a manual clock; `None`: real time.
    manual: Option<Arc<AtomicU64>>,
    /// Where deadlines start from a bound on "now" rather than a read of it (real clocks with
    /// ticks of at least [`counter::MIN_TICK`] that [`Divisor::div_ceil_biased`] serves, on
    /// machines that have one whose counts [`Divisor::per_count`] can scale).
    counter: Option<CounterClock>,
    /// A count of the counter clock as a multiple of `m⁺` ([`Divisor::per_count`]); 0 without
    /// a counter clock.
    per_count: u64,
    /// `origin` in the counter clock's nanoseconds (0 without one).
    origin_on_counter: u64,
}

/// Division by a fixed `u64`, by multiplying with its precomputed reciprocal: every
/// `schedule` converts a time into ticks, and no schedule may wait for a hardware 64-bit
/// division (tens of cycles; see docs/performance.md).
///
/// With `m = ⌊2⁶⁴ / d⌋`, the estimate `q = ⌊n·m / 2⁶⁴⌋` is `⌊n / d⌋` or one less (it falls
/// short by `n·ε / 2⁶⁴ < 1` for the `ε < 1` lost in rounding `m`), so one comparison of the
/// remainder makes it exact.
///
/// Rounded the other way and scaled by `2ˢ` with `2ˢ < d` (`m⁺ = ⌈2⁶⁴⁺ˢ / d⌉`, below 2⁶⁴),
/// the reciprocal gives the ceiling without the remainder's correction: never below the exact
/// one, and above it only beyond 2⁶³ ([`Divisor::div_ceil_above`]).
#[derive(Clone, Copy, Debug)]
struct Divisor {
    d: u64,
    /// `⌊2⁶⁴ / d⌋`; unused (0) when `d == 1`, where the quotient is `n` itself.
    m: u64,
    /// `⌈2⁶⁴⁺ˢ / d⌉`, with `s` = [`Divisor::s`]; unused (0) when `d == 1`.
    m_up: u64,
    /// The largest `s` with `2ˢ < d`; 0 when `d == 1`.
    s: u32,
}

impl Divisor {
    fn new(d: u64) -> Self {
        assert!(d > 0, "division by zero");
        if d == 1 {
            return Divisor {
                d,
                m: 0,
                m_up: 0,
                s: 0,
            };
        }
        let s = (d - 1).ilog2();
        let wide = u128::from(d);
        Divisor {
            d,
            // At most 2⁶³ for d ≥ 2.
            m: ((1u128 << 64) / wide) as u64,
            // 2ˢ < d makes it below 2⁶⁴ by at least 2⁶³⁻ˢ ≥ 1, so also after rounding up.
            m_up: ((1u128 << (64 + s)).div_ceil(wide)) as u64,
            s,
        }
    }

    /// `(⌊n / d⌋, n mod d)`.
    fn div_rem(self, n: u64) -> (u64, u64) {
        if self.d == 1 {
            return (n, 0);
        }
        let mut q = ((u128::from(n) * u128::from(self.m)) >> 64) as u64;
        let mut r = n - q * self.d;
        if r >= self.d {
            q += 1;
            r -= self.d;
        }
        (q, r)
    }

    fn div_floor(self, n: u64) -> u64 {
        self.div_rem(n).0
    }

    fn div_ceil(self, n: u64) -> u64 {
        let (q, r) = self.div_rem(n);
        q + u64::from(r > 0)
    }

    /// `⌈n / d⌉`, exact while `n + d − 1` is below 2⁶³ (292 years of nanoseconds), at most one
    /// above it beyond: `q = ⌊(n + d − 1)·m⁺ / 2⁶⁴⁺ˢ⌋`, an addition, a multiplication and a
    /// shift, where [`Divisor::div_ceil`] waits on four more dependent instructions. With
    /// `n' = n + d − 1`: `m⁺ ≥ 2⁶⁴⁺ˢ / d` makes `q ≥ ⌊n' / d⌋ = ⌈n / d⌉`; `m⁺ < 2⁶⁴⁺ˢ / d + 1`
    /// makes `q < n' / d + n' / 2⁶⁴⁺ˢ`, and since `n' / d` is a whole number plus at most
    /// `(d − 1) / d`, the excess reaches the next whole number only if `n' / 2⁶⁴⁺ˢ ≥ 1 / d`,
    /// that is `n' ≥ 2⁶⁴⁺ˢ / d > 2⁶³`. For deadlines, which may be late but never early.
    #[inline]
    fn div_ceil_above(self, n: u64) -> u64 {
        if self.d == 1 {
            return n;
        }
        match n.checked_add(self.d - 1) {
            Some(biased) => self.div_ceil_biased(biased),
            None => self.div_ceil(n),
        }
    }

    /// `⌈r̂·m⁺ / 2³²⌉` for a counter rate `r̂` in 32.32 nanoseconds a count, when it fits in
    /// 64 bits (a counter faster than about 1.1 GHz, for any tick): a count's share of a
    /// multiple of `m⁺`, so that [`Divisor::div_ceil_biased_plus`] converts a bound in
    /// nanoseconds and counts to ticks in one multiplication after the counter read.
    fn per_count(self, rate: u64) -> Option<u64> {
        let scaled = (u128::from(rate) * u128::from(self.m_up)).div_ceil(1 << RATE_SHIFT);
        u64::try_from(scaled).ok()
    }

    /// [`Divisor::div_ceil_biased`] of `biased + counts·r̂` nanoseconds, given `per_count` =
    /// [`Divisor::per_count`]`(r̂)`, with `counts·per_count` added to `biased·m⁺` instead of
    /// the counts converted to nanoseconds first: the two products are independent, and the
    /// one that waits for a counter read is a single multiplication.
    ///
    /// Never below [`Divisor::div_ceil_biased`] of the sum (`counts·per_count ≥ counts·r̂·m⁺ /
    /// 2³²`, the counts' nanoseconds before rounding down), and above it by less than
    /// `(counts + m⁺) / 2⁶⁴⁺ˢ` ticks: the bound moves by at most a nanosecond. No overflow:
    /// `biased·m⁺ < 2¹²⁷`, and `counts`, at most a span of 8 µs, times `per_count < 2⁶⁴` is
    /// below 2⁸⁴.
    #[inline]
    fn div_ceil_biased_plus(self, biased: u64, counts: u64, per_count: u64) -> u64 {
        debug_assert!(
            self.d >= 2 && biased < 1 << 63,
            "the short ceiling's operands"
        );
        let scaled =
            u128::from(biased) * u128::from(self.m_up) + u128::from(counts) * u128::from(per_count);
        ((scaled >> 64) as u64) >> self.s
    }

    /// Whether [`Divisor::div_ceil_biased`] serves this divisor: `2 ≤ d <` [`SHORT`].
    #[inline]
    fn takes_short(self) -> bool {
        (2..SHORT).contains(&self.d)
    }

    /// [`Divisor::div_ceil_above`] of `n`, given `biased = n + d − 1` (no overflow), for
    /// `d ≥ 2`: for a caller that adds `d − 1` where it costs nothing.
    #[inline]
    fn div_ceil_biased(self, biased: u64) -> u64 {
        debug_assert!(self.d >= 2, "m⁺ is unset for d = 1");
        // The high word, then `s` more: one shift, where a `u128` shift by `64 + s` compiles to
        // several.
        (((u128::from(biased) * u128::from(self.m_up)) >> 64) as u64) >> self.s
    }
}

/// The short ceiling's operands ([`Divisor::div_ceil_biased`]): a tick, a delay and a time
/// since the origin below 2⁶¹ ns (73 years) each, plus a bound up to 2⁶² ns past the origin
/// (146 years of uptime), keep the sum it divides below 2⁶³, where it is exact.
const SHORT: u64 = 1 << 61;

/// How far past `origin` a deadline is pinned when shown as an `Instant` on a platform whose
/// `Instant` cannot hold it.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl Clock {
    pub(crate) fn new(tick: Duration) -> Self {
        let counter = if tick >= counter::MIN_TICK {
            CounterClock::calibrated()
        } else {
            None
        };
        Clock::with_counter(tick, counter)
    }

    /// A real clock whose deadlines start from `counter`'s bound, or from `Instant::now()`
    /// (also for a tick the short ceiling does not serve, so a schedule checks one `Option`).
    fn with_counter(tick: Duration, counter: Option<CounterClock>) -> Self {
        let tick_nanos = tick.as_nanos().clamp(1, u128::from(u64::MAX)) as u64;
        let origin = Instant::now();
        let tick = Divisor::new(tick_nanos);
        let per_count = counter
            .filter(|_| tick.takes_short())
            .and_then(|counter| tick.per_count(counter.rate()));
        let counter = counter.filter(|_| per_count.is_some());
        Clock {
            origin: InstantNanos::new(origin),
            tick,
            manual: None,
            counter,
            per_count: per_count.unwrap_or(0),
            origin_on_counter: counter.map_or(0, |counter| {
                nanos(origin.saturating_duration_since(counter.epoch()))
            }),
        }
    }

    /// A clock whose time starts at the real now and moves only by [`Clock::set_nanos`].
    pub(crate) fn manual(tick: Duration) -> Self {
        Clock {
            manual: Some(Arc::new(AtomicU64::new(0))),
            ..Clock::with_counter(tick, None)
        }
    }

    /// Whether this is a manual clock.
    pub(crate) fn is_manual(&self) -> bool {
        self.manual.is_some()
    }

    /// Manual clock: moves virtual time to `nanos` past the origin, never backwards.
    pub(crate) fn set_nanos(&self, nanos: u64) {
        if let Some(manual) = &self.manual {
            manual.fetch_max(nanos, Ordering::SeqCst);
        }
    }

    /// The tick's length in nanoseconds.
    pub(crate) fn tick_nanos(&self) -> u64 {
        self.tick.d
    }

    /// The instant "now" is at (virtual for a manual clock).
    pub(crate) fn now_instant(&self) -> Instant {
        self.origin.origin() + Duration::from_nanos(self.elapsed_nanos())
    }

    /// How far "now" is past tick `tick`'s start, in nanoseconds (0 before it), where
    /// `real_now` is a [`Clock::real_nanos`] just read: it is "now" on a real clock.
    pub(crate) fn lateness(&self, tick: u64, real_now: u64) -> u64 {
        let now = if self.manual.is_some() {
            self.elapsed_nanos()
        } else {
            real_now
        };
        // A start past u64::MAX nanoseconds is after any `now`: saturating keeps it there.
        now.saturating_sub(tick.saturating_mul(self.tick.d))
    }

    /// Real nanoseconds since the origin, whatever the clock: for measuring how long work took.
    pub(crate) fn real_nanos(&self) -> u64 {
        self.origin.since_origin(Instant::now())
    }

    /// The tick that has most recently begun.
    pub(crate) fn now(&self) -> u64 {
        self.tick.div_floor(self.elapsed_nanos())
    }

    /// The first tick at or after `delay` from now (saturating: `Duration::MAX` is legal).
    ///
    /// With the counter clock, whose bound is `nanos + counts·r̂`, `⌈(bound − origin + delay) /
    /// d⌉` is taken as `⌊((nanos + (delay + d − 1 − origin))·m⁺ + counts·per_count) / 2⁶⁴⁺ˢ⌋`
    /// ([`Divisor::div_ceil_biased_plus`]): everything but `counts` is known before the
    /// counter is read, so the schedule waits after the read for one subtraction, one
    /// multiplication, an addition and a shift. Every timer's deadline lies at the end of
    /// that chain, and it is the part of a schedule the next one waits for (a timed loop
    /// reads a fenced clock: docs/performance.md). The bound is never behind "now", which is
    /// past the origin, so the sum never wraps below zero; with operands below [`SHORT`] it
    /// stays under 2⁶³, where the division is exact (and the fused counts add at most a
    /// nanosecond).
    #[inline]
    pub(crate) fn deadline_after(&self, delay: Duration) -> u64 {
        let delay = nanos(delay);
        match self.counter {
            Some(counter) if delay < SHORT => {
                let Bound { nanos, counts } = counter.bound();
                // The anchor's `nanos` is at most a span (8 µs) before now, and the origin
                // is before now, so `nanos − origin + d − 1` is positive for `d` of at least
                // `counter::MIN_TICK`.
                let biased = nanos.wrapping_add(self.bracket(delay));
                self.tick
                    .div_ceil_biased_plus(biased, counts, self.per_count)
            }
            _ => self.ticks_ceil(self.elapsed_above().saturating_add(delay)),
        }
    }

    /// `delay + d − 1 − origin`, wrapping: what [`Clock::deadline_after`] adds to the counter
    /// clock's bound before dividing.
    #[inline]
    fn bracket(&self, delay: u64) -> u64 {
        delay
            .wrapping_add(self.tick.d - 1)
            .wrapping_sub(self.origin_on_counter)
    }

    /// Nanoseconds since `origin` that are never behind "now": the counter clock's bound where
    /// there is one, else [`Clock::elapsed_nanos`].
    #[inline]
    fn elapsed_above(&self) -> u64 {
        match self.counter {
            Some(counter) => counter.nanos_above().saturating_sub(self.origin_on_counter),
            None => self.elapsed_nanos(),
        }
    }

    /// The first tick at or after `at`; an instant in the past is due now.
    #[inline]
    pub(crate) fn deadline_at(&self, at: Instant) -> u64 {
        let since = self.origin.since_origin(at);
        if since < SHORT && self.tick.takes_short() {
            return self.tick.div_ceil_biased(since + (self.tick.d - 1));
        }
        self.ticks_ceil(since)
    }

    /// `period` in whole ticks, rounded up, at least one.
    pub(crate) fn period(&self, period: Duration) -> u64 {
        self.ticks_ceil(nanos(period)).max(1)
    }

    /// Nanoseconds since `origin` (virtual for a manual clock); `u64` lasts 584 years, and
    /// plain `u64` division is what keeps `schedule` fast (a `u128` one costs a library call).
    pub(crate) fn elapsed_nanos(&self) -> u64 {
        match &self.manual {
            None => self.real_nanos(),
            Some(manual) => manual.load(Ordering::SeqCst),
        }
    }

    /// The instant tick `tick` begins. A tick past the 584 years of nanoseconds virtual time
    /// holds reads as that end; where the platform's `Instant` cannot hold an instant, it reads
    /// as [`FAR_FUTURE`] past the origin.
    pub(crate) fn instant(&self, tick: u64) -> Instant {
        let nanos = u128::from(tick) * u128::from(self.tick.d);
        let offset = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        let origin = self.origin.origin();
        origin
            .checked_add(offset)
            .unwrap_or_else(|| origin + FAR_FUTURE.min(offset))
    }

    /// How long until tick `tick` begins.
    pub(crate) fn until(&self, tick: u64) -> Duration {
        self.instant(tick).saturating_duration_since(Instant::now())
    }

    /// Whole ticks in `nanos`, rounded up; a saturated `u64::MAX` stays "never". The short
    /// ceiling's checked form: exact for 292 years of nanoseconds, never below the ceiling
    /// after that (the deadlines' common case skips even its checks).
    #[inline]
    fn ticks_ceil(&self, nanos: u64) -> u64 {
        if nanos == u64::MAX {
            return u64::MAX;
        }
        self.tick.div_ceil_above(nanos)
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A seeded stream of pseudo-random `u64`s (xorshift64).
    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn deadlines_round_up_and_saturate() {
        let clock = Clock::new(Duration::from_millis(1));
        let now = clock.now();
        let d = clock.deadline_after(Duration::from_micros(1500));
        assert!(
            d >= now + 2,
            "1.5 ms rounds up to at least 2 ticks past now"
        );
        assert_eq!(clock.deadline_after(Duration::MAX), u64::MAX);
        assert_eq!(clock.period(Duration::from_micros(1)), 1);
        assert_eq!(clock.period(Duration::from_millis(3)), 3);
        assert!(clock.instant(u64::MAX) > Instant::now());
        let past = Instant::now().checked_sub(Duration::from_secs(1));
        if let Some(past) = past {
            assert!(clock.deadline_at(past) <= clock.now() + 1);
        }
    }

    #[test]
    fn divisor_matches_hardware_division() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15u64);
        let divisors = [
            1,
            2,
            3,
            7,
            1_000,
            999_999,
            1_000_000,
            1 << 40,
            u64::MAX / 3,
            u64::MAX,
        ];
        for &d in &divisors {
            let div = Divisor::new(d);
            let edges = [0, 1, d - 1, d, d.saturating_add(1), u64::MAX - 1, u64::MAX];
            for n in edges.into_iter().chain((0..2_000).map(|_| next())) {
                assert_eq!(div.div_floor(n), n / d, "{n} / {d}");
                assert_eq!(div.div_ceil(n), n.div_ceil(d), "{n} / {d} rounded up");
                let above = div.div_ceil_above(n);
                assert!(
                    above == n.div_ceil(d) || above == n.div_ceil(d) + 1,
                    "{n} / {d} rounded up: {above}, never below the ceiling, at most one above"
                );
            }
        }
        // Below 2⁶³ it is the exact ceiling, at the ticks a service uses and at any other.
        for d in [
            2,
            3,
            1 << 20,
            100_000,
            1_000_000,
            1_000_000_007,
            3_600_000_000_000,
        ] {
            let div = Divisor::new(d);
            for n in (0..2_000).map(|_| next() >> 2) {
                for n in [n, n / d * d, (n / d * d).saturating_sub(1), n / d * d + 1] {
                    assert_eq!(div.div_ceil_above(n), n.div_ceil(d), "{n} / {d} rounded up");
                }
            }
        }
        for _ in 0..2_000 {
            let d = next() >> (next() % 64);
            if d == 0 {
                continue;
            }
            let n = next();
            assert_eq!(Divisor::new(d).div_floor(n), n / d, "{n} / {d}");
            // Where `n + d − 1` stays below 2⁶³.
            let (n, d) = (n >> 2, (d >> 2).max(1));
            let above = Divisor::new(d).div_ceil_above(n);
            assert_eq!(above, n.div_ceil(d), "{n} / {d} rounded up");
        }
    }

    /// The short path's arithmetic, for any origin, bound past it and delay it takes, is the
    /// exact ceiling of `(bound − origin + delay) / d`; delays at its limit and beyond (the
    /// long path) both round up.
    #[test]
    fn the_counter_clocks_short_path_is_the_exact_ceiling() {
        let mut next = xorshift(0x2545_F491_4F6C_DD1Du64);
        for tick in [
            counter::MIN_TICK,
            Duration::from_millis(1),
            Duration::from_nanos(1_000_003),
            Duration::from_secs(3600),
        ] {
            let real = Clock::with_counter(tick, CounterClock::calibrated());
            let d = real.tick_nanos();
            for _ in 0..20_000 {
                let origin = next() >> 3;
                let clock = Clock {
                    origin_on_counter: origin,
                    ..real.clone()
                };
                // Up to a century past the origin, and any delay the short path takes.
                let bound = origin + next() % (100 * 365 * 86_400 * 1_000_000_000);
                let delay = next() % SHORT;
                let short = clock
                    .tick
                    .div_ceil_biased(bound.wrapping_add(clock.bracket(delay)));
                let exact = (bound - origin + delay).div_ceil(d);
                assert_eq!(
                    short, exact,
                    "bound {bound}, origin {origin}, delay {delay}, d {d}"
                );
            }
            let now = real.now();
            for delay in [SHORT - 1, SHORT, 1 << 62, 1 << 63] {
                let tick = real.deadline_after(Duration::from_nanos(delay));
                assert!(
                    tick >= now + delay / d,
                    "{delay} ns from tick {now}: {tick}"
                );
                assert!(
                    tick <= now + delay / d + 2,
                    "{delay} ns from tick {now}: {tick}"
                );
            }
        }
    }

    /// The fused ceiling ([`Divisor::div_ceil_biased_plus`]) is never below the ceiling of
    /// the bound converted to nanoseconds first, and moves the bound by at most a nanosecond
    /// (two, counting the rounding of the counts' nanoseconds): at every tick the counter
    /// clock serves, and counter rates from the fastest plausible to the slowest it scales.
    #[test]
    fn counts_added_after_the_multiplication_move_the_bound_by_a_nanosecond_at_most() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15u64);
        let mut later = 0u32;
        for tick in [
            counter::MIN_TICK.as_nanos() as u64,
            1_000_000,
            1_000_003,
            1 << 20,
            (1 << 20) + 1,
            3_600_000_000_000,
        ] {
            let divisor = Divisor::new(tick);
            // 32.32 nanoseconds a count: a 100 GHz counter up to the slowest that scales.
            for rate in [43, 1_000, 1 << 20, 1 << 30, 1 << 31, 3 << 30, 7 << 29] {
                let rate = (1u64 << RATE_SHIFT) / 100 + rate * 3;
                let Some(per_count) = divisor.per_count(rate) else {
                    assert!(
                        rate > 1 << RATE_SHIFT,
                        "a counter of 1 GHz or faster scales"
                    );
                    continue;
                };
                let span = (8_000u64 << RATE_SHIFT) / rate;
                for _ in 0..5_000 {
                    let biased = next() >> 3;
                    let counts = next() % (span + 1);
                    let nanos = (counts * rate) >> RATE_SHIFT;
                    let fused = divisor.div_ceil_biased_plus(biased, counts, per_count);
                    let converted = divisor.div_ceil_biased(biased + nanos);
                    assert!(fused >= converted, "{biased} + {counts} counts, d {tick}");
                    assert!(
                        fused <= divisor.div_ceil_biased(biased + nanos + 2),
                        "{biased} + {counts} counts, d {tick}"
                    );
                    later += u32::from(fused > converted);
                }
            }
        }
        assert!(later < 20, "{later} of 210 000 a tick later");
    }

    /// `deadline_at` is the exact ceiling on its short path (within [`SHORT`] of the origin)
    /// and beyond it, at every tick, including the one nanosecond tick the short path refuses,
    /// whether the instant is read from its hash or subtracted by std.
    #[test]
    fn a_deadline_at_an_instant_is_the_exact_ceiling() {
        let mut next = xorshift(0x1234_5678_9ABC_DEF1u64);
        for tick in [
            Duration::from_nanos(1),
            Duration::from_micros(700),
            Duration::from_millis(1),
            Duration::from_nanos(1_000_003),
            Duration::from_secs(3600),
        ] {
            let clock = Clock::new(tick);
            let std_subtraction = Clock {
                origin: InstantNanos::subtracting(clock.origin.origin()),
                ..clock.clone()
            };
            let d = clock.tick_nanos();
            let edges = [0, 1, d - 1, d, d + 1, SHORT - 1, SHORT, SHORT + 1];
            for n in edges
                .into_iter()
                .chain((0..20_000).map(|_| next() >> (2 + next() % 40)))
            {
                let Some(at) = clock.origin.origin().checked_add(Duration::from_nanos(n)) else {
                    continue;
                };
                assert_eq!(
                    clock.deadline_at(at),
                    n.div_ceil(d),
                    "{n} ns past the origin, d {d}"
                );
                assert_eq!(
                    std_subtraction.deadline_at(at),
                    n.div_ceil(d),
                    "{n} ns past the origin, d {d}, std's subtraction"
                );
            }
        }
    }

    #[test]
    fn a_manual_clock_moves_only_when_set() {
        let clock = Clock::manual(Duration::from_millis(1));
        assert_eq!(clock.now(), 0);
        std::thread::sleep(Duration::from_millis(3));
        assert_eq!(clock.now(), 0, "real time passing does not move it");
        assert_eq!(clock.deadline_after(Duration::from_micros(1500)), 2);
        clock.set_nanos(2_000_000);
        assert_eq!(clock.now(), 2);
        clock.set_nanos(1_000_000);
        assert_eq!(clock.now(), 2, "never backwards");
        assert_eq!(
            clock.lateness(1, 0),
            1_000_000,
            "virtual, whatever the real time"
        );
    }

    #[test]
    fn lateness_is_how_far_now_is_past_the_tick_start() {
        let clock = Clock::new(Duration::from_millis(1));
        assert_eq!(clock.lateness(3, 3_250_000), 250_000);
        assert_eq!(clock.lateness(3, 3_000_000), 0);
        assert_eq!(clock.lateness(4, 3_250_000), 0, "before the tick: not late");
        // A tick whose start lies past u64::MAX nanoseconds is never reached.
        assert_eq!(clock.lateness(u64::MAX / 1_000_000 + 1, u64::MAX), 0);
        assert_eq!(clock.lateness(u64::MAX / 1_000_000, u64::MAX), 551_615);
    }

    #[test]
    fn a_deadline_after_a_delay_begins_no_earlier_than_the_delay_from_a_read_before_it() {
        let clocks = [
            Clock::new(Duration::from_millis(1)),
            Clock::with_counter(Duration::from_millis(1), None),
            Clock::new(Duration::from_micros(100)),
        ];
        assert_eq!(
            clocks[0].counter.is_some(),
            CounterClock::calibrated().is_some(),
            "a 1 ms tick uses the counter clock wherever there is one"
        );
        assert!(
            Clock::new(Duration::from_micros(99)).counter.is_none(),
            "a tick under counter::MIN_TICK reads Instant::now()"
        );
        assert!(
            Clock::new(Duration::from_nanos(SHORT)).counter.is_none(),
            "a tick the short ceiling does not serve reads Instant::now()"
        );
        for clock in &clocks {
            for i in 0..200_000u64 {
                let delay = Duration::from_nanos(i * 7919 % 3_000_000);
                let requested = Instant::now() + delay;
                let tick = clock.deadline_after(delay);
                assert!(clock.instant(tick) >= requested, "{delay:?}");
                if i % 1024 == 0 {
                    std::thread::yield_now();
                }
            }
        }
    }

    #[test]
    fn a_deadline_tick_begins_no_earlier_than_requested() {
        let clock = Clock::new(Duration::from_micros(700));
        for delay_us in [0u64, 1, 699, 700, 701, 12_345] {
            let requested = Instant::now() + Duration::from_micros(delay_us);
            let tick = clock.deadline_at(requested);
            assert!(clock.instant(tick) >= requested);
        }
    }
}
