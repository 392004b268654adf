//! The workload's random numbers: SplitMix64, written out so the Java harness draws the very
//! same delays and choices from the same seed (see `java/NettyBench.java`).

use std::time::Duration;

/// Salt for the second stream (which timers are cancelled or block), so the delays stay
/// identical whatever the scenario.
const CHOICE_SALT: u64 = 0x5EED_C401_CE00_0001;

/// Steele, Lea and Flood's SplitMix64: tiny, fast, and trivially identical in every language.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, bound)` by the multiply-high method (bias below 2^-64 · bound).
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

/// The delays and per-timer choices of one producer thread.
#[derive(Clone, Debug)]
pub struct Draws {
    delays: SplitMix64,
    choices: SplitMix64,
    spread_ns: u64,
}

impl Draws {
    /// Producer `producer`'s streams for `seed`; producer 0 draws exactly what the Java
    /// harness draws for the same seed.
    pub fn new(seed: u64, producer: u64, spread: Duration) -> Draws {
        let seed = seed.wrapping_add(producer.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        Draws {
            delays: SplitMix64::new(seed),
            choices: SplitMix64::new(seed ^ CHOICE_SALT),
            spread_ns: u64::try_from(spread.as_nanos()).unwrap_or(u64::MAX).max(1),
        }
    }

    /// The next timer's delay, uniform in `[0, spread)`.
    pub fn delay(&mut self) -> Duration {
        Duration::from_nanos(self.delays.below(self.spread_ns))
    }

    /// True with probability `per_10000` / 10 000.
    pub fn chance(&mut self, per_10000: u64) -> bool {
        self.choices.below(10_000) < per_10000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_reference_values() {
        // First outputs of SplitMix64 seeded with 1234567 (reference implementation).
        let mut rng = SplitMix64::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn delays_stay_in_range_and_spread_out() {
        let spread = Duration::from_secs(10);
        let mut draws = Draws::new(42, 0, spread);
        let delays: Vec<Duration> = (0..100_000).map(|_| draws.delay()).collect();
        assert!(delays.iter().all(|d| *d < spread));
        let mean = delays.iter().map(Duration::as_secs_f64).sum::<f64>() / delays.len() as f64;
        assert!((mean - 5.0).abs() < 0.1, "mean {mean}");
    }

    #[test]
    fn chance_hits_about_its_rate() {
        let mut draws = Draws::new(7, 0, Duration::from_secs(1));
        let hits = (0..100_000).filter(|_| draws.chance(9_000)).count();
        assert!((89_000..91_000).contains(&hits), "{hits}");
    }

    #[test]
    fn producers_draw_different_streams() {
        let spread = Duration::from_secs(1);
        let a = Draws::new(1, 0, spread).delay();
        let b = Draws::new(1, 1, spread).delay();
        assert_ne!(a, b);
    }
}
