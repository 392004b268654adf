//! The machine's memory floor: how long one load that misses every cache takes, measured by a
//! pointer chase at the start of each bench run.
//!
//! Much of a timer service's cost at 10 M pending timers is memory it cannot keep in cache, so
//! its per-timer figures move with the machine's memory latency. On a shared VM that latency
//! moves between days (on this project's VM the same build has measured 180 ns and 340–420 ns
//! of tick and executor CPU per timer a day apart), and a figure read against the floor of its
//! own run can be compared across runs where the bare figure cannot.
//!
//! The chase walks one random cycle through every cache line of a buffer eight times the
//! largest cache a processor of this kind has (256 MiB): each load's address is the value the
//! previous one read, so no two overlap, and the prefetchers find no pattern.

use std::time::Instant;

/// Bytes the chase walks through: far beyond any last-level cache of a two-socket server.
const BUFFER_BYTES: usize = 256 << 20;
/// One entry per cache line.
const LINE_WORDS: usize = 64 / std::mem::size_of::<u64>();
/// Loads timed (about a third of a second at 300 ns each).
const STEPS: usize = 1 << 20;

/// Nanoseconds one dependent load takes when it misses every cache (the median of three
/// chases); `None` where the buffer cannot be allocated.
pub fn dram_miss_ns() -> Option<f64> {
    let lines = BUFFER_BYTES / 64;
    let next = one_cycle(lines)?;
    let mut times: Vec<f64> = (0..3).map(|_| chase(&next, STEPS)).collect();
    times.sort_by(f64::total_cmp);
    Some(times[1])
}

/// A buffer of `lines` cache lines whose first word holds the index of the next line's first
/// word, all lines on one cycle in a random order (Sattolo's shuffle).
fn one_cycle(lines: usize) -> Option<Vec<u64>> {
    let mut order: Vec<u32> = Vec::new();
    order.try_reserve_exact(lines).ok()?;
    order.extend(0..lines as u32);
    let mut random = XorShift(0x9E37_79B9_7F4A_7C15);
    for i in (1..lines).rev() {
        let j = random.below(i as u64) as usize;
        order.swap(i, j);
    }
    let mut next: Vec<u64> = Vec::new();
    next.try_reserve_exact(lines * LINE_WORDS).ok()?;
    next.resize(lines * LINE_WORDS, 0);
    for pair in order.windows(2) {
        next[pair[0] as usize * LINE_WORDS] = u64::from(pair[1]) * LINE_WORDS as u64;
    }
    let (last, first) = (order[lines - 1], order[0]);
    next[last as usize * LINE_WORDS] = u64::from(first) * LINE_WORDS as u64;
    Some(next)
}

/// Nanoseconds each of `steps` dependent loads through `next` took.
fn chase(next: &[u64], steps: usize) -> f64 {
    let mut at = 0usize;
    let start = Instant::now();
    for _ in 0..steps {
        at = next[at] as usize;
    }
    let took = start.elapsed();
    std::hint::black_box(at);
    took.as_nanos() as f64 / steps as f64
}

/// Xorshift64: enough randomness for a shuffle, the same in every run.
struct XorShift(u64);

impl XorShift {
    /// A number in `0..=bound`.
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % (bound + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cycle_visits_every_line_once() {
        let lines = 1000;
        let next = one_cycle(lines).unwrap();
        let mut seen = vec![false; lines];
        let mut at = 0usize;
        for _ in 0..lines {
            assert_eq!(at % LINE_WORDS, 0, "lands on a line's first word");
            assert!(!seen[at / LINE_WORDS], "line {} twice", at / LINE_WORDS);
            seen[at / LINE_WORDS] = true;
            at = next[at] as usize;
        }
        assert_eq!(at, 0, "the walk closes after every line");
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn a_miss_takes_tens_to_thousands_of_nanoseconds() {
        let ns = dram_miss_ns().expect("256 MiB to chase through");
        assert!((10.0..5_000.0).contains(&ns), "{ns} ns a miss");
    }
}
