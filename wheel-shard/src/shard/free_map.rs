//! [`FreeMap`]: the free slots of a timer table, one bit each, handed out again a word of 64
//! neighbouring slots at a time, in address order.
//!
//! Why words: a thread's cache gives a word's slots to the timers of one deadline group
//! (`table.rs`, `Group`), so timers due together get neighbouring records, which the worker
//! that fires them then finds on a few pages. Why address order: a sweep that goes on from
//! where the last one stopped finds the next word in a few loads, and a slot comes back a lap
//! after it was last handed out.
//!
//! The layout, per segment of the table (`segment_words` words of 64 slots):
//!
//! ```text
//!   words[i]   bit b set: slot 64·i + b is free (here, not in any thread's cache)
//!   summary[j] bit k set: words[64·j + k] may have a bit set
//! ```
//!
//! A sweep (the `cursor`) walks the summary words of every segment in order and wraps.
//!
//! Ground rules (no slot lost, none handed out twice):
//! - [`FreeMap::put`] and [`FreeMap::put_words`] set slots' bits in their word; if the word
//!   was zero they then set the word's summary bit.
//! - [`FreeMap::take_word`] clears a summary bit, then swaps the word with zero: the bits the
//!   swap returns are the taker's alone.
//! - So a word with a bit set has its summary bit set, or a taker is between clearing that
//!   bit and swapping the word, and takes the bit. A summary bit may be set over a zero word
//!   (a put that found the word zero after a take swapped it): a take finds nothing there and
//!   moves on. The read-modify-writes are AcqRel: a take's clear is ordered before its swap,
//!   and a put's bit before its summary bit (the loom model below checks the race).
//! - `free` counts the bits only roughly (a put adds after setting its bits, a take subtracts
//!   after taking them): it tells a taker whether a sweep is worth starting, never whether a
//!   slot is free.

use std::sync::OnceLock;

use crossbeam_utils::CachePadded;

use crate::sync::{self, AtomicU64, AtomicUsize, Ordering};

/// Slots [`FreeMap::put`] prefetches ahead of the one it sets.
const PUT_AHEAD: usize = 8;

/// Where one slot's bit lives: its segment's bits, the word there, and the bit in it.
#[derive(Clone, Copy)]
struct BitPlace<'a> {
    bits: &'a SegmentBits,
    word: usize,
    mask: u64,
}

/// One segment's bits (see the module doc).
struct SegmentBits {
    words: Box<[AtomicU64]>,
    summary: Box<[AtomicU64]>,
}

impl SegmentBits {
    fn new(words: usize) -> Self {
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        SegmentBits {
            words: zeros(words),
            summary: zeros(words.div_ceil(64)),
        }
    }

    /// Marks the slots of `mask` in word `word` of this segment free: their bits, then the
    /// word's summary bit if the word was zero.
    fn put(&self, word: usize, mask: u64) {
        let before = self.words[word].fetch_or(mask, Ordering::AcqRel);
        if before == 0 {
            self.summary[word / 64].fetch_or(1 << (word % 64), Ordering::AcqRel);
        }
    }

    /// Takes the first word with free slots under summary word `index`: (its index under
    /// it, its bits). Each word's summary bit is cleared before the word is swapped with
    /// zero.
    fn take_one_under(&self, index: usize) -> Option<(usize, u64)> {
        let summary = &self.summary[index];
        let mut marked = summary.load(Ordering::Acquire);
        while marked != 0 {
            let k = marked.trailing_zeros() as usize;
            marked &= marked - 1;
            summary.fetch_and(!(1 << k), Ordering::AcqRel);
            let free = self.words[index * 64 + k].swap(0, Ordering::AcqRel);
            if free != 0 {
                return Some((k, free));
            }
        }
        None
    }
}

pub(crate) struct FreeMap {
    segments: Box<[OnceLock<Box<SegmentBits>>]>,
    /// log2 of the slots per segment (a power of two, so a slot's segment is a shift away,
    /// not a division: a put locates each slot twice).
    segment_shift: u32,
    /// Where the next sweep starts: an index into the summary words of all segments.
    cursor: CachePadded<AtomicUsize>,
    /// About how many bits are set (see the module doc); may dip below zero for a moment.
    free: CachePadded<AtomicU64>,
    /// One past the highest segment that has bits.
    segments_used: AtomicUsize,
}

impl FreeMap {
    /// A map of `segments` segments of `segment_words` × 64 slots each; a segment's bits are
    /// allocated when a slot of it is first put. `segment_words` is a power of two.
    pub(crate) fn new(segments: usize, segment_words: usize) -> Self {
        assert!(
            segment_words.is_power_of_two(),
            "a segment's words are a power of two"
        );
        FreeMap {
            segments: (0..segments).map(|_| OnceLock::new()).collect(),
            segment_shift: (segment_words * 64).trailing_zeros(),
            cursor: CachePadded::new(AtomicUsize::new(0)),
            free: CachePadded::new(AtomicU64::new(0)),
            segments_used: AtomicUsize::new(0),
        }
    }

    /// Bytes the map takes before any slot is put.
    pub(crate) fn directory_bytes(segments: usize) -> usize {
        segments * std::mem::size_of::<OnceLock<Box<SegmentBits>>>()
    }

    fn slots_per_segment(&self) -> usize {
        1 << self.segment_shift
    }

    /// Words of 64 slots per segment.
    fn segment_words(&self) -> usize {
        self.slots_per_segment() / 64
    }

    /// The bits of `segment`, made on first use.
    fn bits(&self, segment: usize) -> &SegmentBits {
        self.segments[segment].get_or_init(|| {
            self.segments_used.fetch_max(segment + 1, Ordering::AcqRel);
            Box::new(SegmentBits::new(self.segment_words()))
        })
    }

    /// Makes `segment`'s bits now (loom models: no thread then blocks in `OnceLock`).
    #[cfg(all(test, loom))]
    fn prepare(&self, segment: usize) {
        self.bits(segment);
    }

    /// About how many slots are free here (see the module doc).
    pub(crate) fn free(&self) -> usize {
        let free = self.free.load(Ordering::Relaxed) as i64;
        free.max(0) as usize
    }

    /// Marks `slots` free. Each must be one a thread held (claimed, not yet in the map).
    ///
    /// Slots come back in the order their timers ended, so their words are scattered over
    /// the map, and a locked read-modify-write of a word not in cache holds the core until
    /// its line arrives. So each word is prefetched [`PUT_AHEAD`] slots before it is set, and
    /// the misses overlap.
    ///
    /// Each slot's word is located once, when it is prefetched, and waits in a window of
    /// [`PUT_AHEAD`] places until its bit is set (this runs once for every timer a worker
    /// ends, so locating a word twice was a third of it).
    pub(crate) fn put(&self, slots: &[u32]) {
        let mut window: [Option<BitPlace<'_>>; PUT_AHEAD] = [None; PUT_AHEAD];
        for (place, &slot) in window.iter_mut().zip(slots) {
            *place = Some(self.place_prefetched(slot));
        }
        for i in 0..slots.len() {
            let ahead = slots
                .get(i + PUT_AHEAD)
                .map(|&slot| self.place_prefetched(slot));
            // Slot `i`'s place went into this entry PUT_AHEAD slots ago (or before the loop).
            if let Some(place) = std::mem::replace(&mut window[i % PUT_AHEAD], ahead) {
                place.bits.put(place.word, place.mask);
            }
        }
        self.free.fetch_add(slots.len() as u64, Ordering::Relaxed);
    }

    /// Marks the slots of each word's free bits free (bit `b`: slot `base + b`; `base` a
    /// multiple of 64); words with no bit set are skipped. Each slot must be one a thread
    /// held.
    pub(crate) fn put_words(&self, words: impl IntoIterator<Item = (u32, u64)>) {
        for (base, free) in words.into_iter().filter(|&(_, free)| free != 0) {
            self.set_bits(base, free);
            self.free
                .fetch_add(u64::from(free.count_ones()), Ordering::Relaxed);
        }
    }

    /// The segment of `slot`, and the word within it that holds its bit.
    fn locate(&self, slot: u32) -> (usize, usize) {
        let slot = slot as usize;
        let within = slot & (self.slots_per_segment() - 1);
        (slot >> self.segment_shift, within / 64)
    }

    /// Where `slot`'s bit lives (its segment's bits made now if need be), its word already
    /// on its way into this core's cache.
    #[inline]
    fn place_prefetched(&self, slot: u32) -> BitPlace<'_> {
        let (segment, word) = self.locate(slot);
        let bits = self.bits(segment);
        sync::prefetch(&bits.words[word]);
        BitPlace {
            bits,
            word,
            mask: 1 << (slot % 64),
        }
    }

    /// Sets `mask`'s bits in the word of `slot` (and its summary bit), without counting them.
    fn set_bits(&self, slot: u32, mask: u64) {
        let (segment, word) = self.locate(slot);
        self.bits(segment).put(word, mask);
    }

    /// Takes the next word with free slots, in address order from where the last sweep
    /// stopped: (its first slot, its free bits).
    pub(crate) fn take_word(&self) -> Option<(u32, u64)> {
        let segments = self.segments_used.load(Ordering::Acquire);
        let per_segment_summary = self.segment_words().div_ceil(64);
        let laps = segments * per_segment_summary;
        if laps == 0 {
            return None;
        }
        let mut at = self.cursor.load(Ordering::Relaxed) % laps;
        let mut found = None;
        // One summary word more than a lap: the first again, for bits put behind the sweep.
        for _ in 0..=laps {
            let (segment, index) = (at / per_segment_summary, at % per_segment_summary);
            if let Some(bits) = self.segments[segment].get() {
                let base = segment * self.slots_per_segment() + index * 64 * 64;
                if let Some((k, free)) = bits.take_one_under(index) {
                    found = Some(((base + k * 64) as u32, free));
                    break;
                }
            }
            at = (at + 1) % laps;
        }
        self.cursor.store(at, Ordering::Relaxed);
        let (_, free) = found?;
        self.free
            .fetch_sub(u64::from(free.count_ones()), Ordering::Relaxed);
        found
    }

    /// Takes whole words (see [`FreeMap::take_word`]) until at least `want` slots are taken
    /// or none is left; appends the slots to `out`, highest first. Returns how many.
    #[cfg(test)]
    fn take(&self, want: usize, out: &mut Vec<u32>) -> usize {
        let start = out.len();
        while out.len() - start < want {
            let Some((base, mut free)) = self.take_word() else {
                break;
            };
            while free != 0 {
                out.push(base + free.trailing_zeros());
                free &= free - 1;
            }
        }
        out[start..].reverse();
        out.len() - start
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A map of two segments of 4 words (256 slots) each.
    fn small() -> FreeMap {
        FreeMap::new(2, 4)
    }

    #[test]
    fn slots_come_back_in_address_order_whatever_order_they_went_in() {
        let map = small();
        let slots = [300u32, 5, 257, 64, 6, 511, 0];
        map.put(&slots);
        assert_eq!(map.free(), slots.len());
        let mut out = Vec::new();
        assert_eq!(map.take(100, &mut out), slots.len());
        assert_eq!(
            out,
            [511, 300, 257, 64, 6, 5, 0],
            "highest first, so claimed lowest first"
        );
        assert_eq!(map.free(), 0);
        assert_eq!(map.take(100, &mut out), 0, "each slot once");
    }

    #[test]
    fn a_take_stops_after_the_word_that_reaches_what_it_wants_and_the_next_goes_on_from_there() {
        let map = small();
        let slots: Vec<u32> = (0..512).collect();
        map.put(&slots);
        let mut out = Vec::new();
        assert_eq!(map.take(65, &mut out), 128, "whole words: two of them");
        assert_eq!(out.last(), Some(&0));
        let mut next = Vec::new();
        map.take(1, &mut next);
        assert_eq!(
            next,
            (128..192).rev().collect::<Vec<_>>(),
            "the next word up"
        );
        map.put(&[3]);
        let mut rest = Vec::new();
        map.take(1000, &mut rest);
        assert_eq!(rest.len(), 512 - 192 + 1, "the rest, and the slot put back");
        assert!(rest.windows(2).all(|w| w[0] > w[1]), "in address order");
    }

    #[test]
    fn a_word_goes_in_and_comes_out_whole() {
        let map = small();
        map.put_words([(320, 0b1011), (384, 0)]);
        map.put(&[322]);
        assert_eq!(map.free(), 4);
        assert_eq!(
            map.take_word(),
            Some((320, 0b1111)),
            "one word, its first slot"
        );
        assert_eq!(map.free(), 0);
        map.put_words([(0, u64::MAX), (448, 1 << 63)]);
        assert_eq!(
            map.take_word(),
            Some((448, 1 << 63)),
            "on from where the sweep stopped"
        );
        assert_eq!(map.take_word(), Some((0, u64::MAX)), "then round");
        assert_eq!(map.take_word(), None, "and nothing more");
    }

    #[test]
    fn an_empty_map_takes_nothing() {
        let mut out = vec![7];
        assert_eq!(small().take(10, &mut out), 0);
        assert_eq!(out, [7], "left as it was");
    }

    #[test]
    fn only_segments_with_free_slots_get_bits() {
        let map = small();
        map.put(&[300]);
        assert!(map.segments[0].get().is_none());
        assert!(map.segments[1].get().is_some());
    }

    /// Threads put and take at random; every slot put is taken exactly once.
    #[test]
    fn concurrent_puts_and_takes_lose_no_slot_and_take_none_twice() {
        use std::sync::Arc;
        // Four segments; under Miri, of 4 words each instead of 16.
        const SEGMENT_WORDS: usize = if cfg!(miri) { 4 } else { 16 };
        const SLOTS: u32 = 4 * SEGMENT_WORDS as u32 * 64;
        let map = Arc::new(FreeMap::new(4, SEGMENT_WORDS));
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let map = Arc::clone(&map);
                std::thread::spawn(move || {
                    let mut taken = Vec::new();
                    let mine: Vec<u32> = (0..SLOTS).filter(|s| s % 4 == t).collect();
                    for chunk in mine.chunks(37) {
                        map.put(chunk);
                        map.take(50, &mut taken);
                    }
                    taken
                })
            })
            .collect();
        let mut all: Vec<u32> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        map.take(usize::MAX - 1, &mut all);
        all.sort_unstable();
        assert_eq!(all, (0..SLOTS).collect::<Vec<_>>());
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    /// Two threads put slots of one word (one a whole word's bits at once) while a third
    /// takes: each slot ends up taken once, by the racing take or by a take after everyone
    /// is done.
    #[test]
    fn loom_a_take_racing_puts_loses_no_slot() {
        loom::model(|| {
            let map = Arc::new(FreeMap::new(1, 2));
            map.prepare(0);
            let word = {
                let map = Arc::clone(&map);
                loom::thread::spawn(move || map.put_words([(0, 0b110)]))
            };
            let slots = {
                let map = Arc::clone(&map);
                loom::thread::spawn(move || map.put(&[3, 70]))
            };
            let mut taken = Vec::new();
            map.take(1, &mut taken);
            word.join().unwrap();
            slots.join().unwrap();
            map.take(10, &mut taken);
            taken.sort_unstable();
            assert_eq!(taken, [1, 2, 3, 70]);
        });
    }
}
