//! [`Geometry`]: the arithmetic that places a deadline on a level of the hierarchy.
//!
//! With `2^b` slots per level, level `k` has slots `2^(k·b)` ticks wide and spans `2^((k+1)·b)`
//! ticks. Read a tick count as a number in base `2^b`: digit `k` of a deadline is its slot on
//! level `k`. An entry goes on the level of the highest digit in which its deadline differs from
//! the wheel's current tick, in the slot given by that digit of the deadline. All higher digits
//! are equal, so the slot lies within the level's current rotation, strictly after the current
//! tick's slot: a level never wraps, and finding the next due slot is one masked
//! `trailing_zeros` on the level's occupancy bitmap.

/// The level arithmetic for `2^bits` slots per level.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub(crate) bits: u32,
    /// The level of each bit position of a tick: `bit / bits`, looked up because placing an
    /// entry is on every insert and cascade, and a division by a runtime value is not cheap.
    level_of_bit: [u8; 64],
}

impl Geometry {
    /// The geometry for `slots` slots per level, rounded up to a power of two (one slot becomes
    /// two: a level needs at least one bit).
    pub(crate) fn for_slots(slots: usize) -> Self {
        Self::new(slots.next_power_of_two().trailing_zeros().max(1))
    }

    pub(crate) const fn new(bits: u32) -> Self {
        let mut level_of_bit = [0; 64];
        let mut bit = 0;
        while bit < 64 {
            level_of_bit[bit] = (bit as u32 / bits) as u8;
            bit += 1;
        }
        Geometry { bits, level_of_bit }
    }

    /// The levels whose slots are at most 2^32 ticks wide, so that every deadline in a slot
    /// agrees with the slot's first tick above the low 32 bits (what lets a slot's array keep
    /// only those: see `Stored`). With 64 slots: 6 levels, spanning 2^36 ticks.
    pub(crate) fn levels(&self) -> usize {
        (32 / self.bits).min(63 / self.bits) as usize + 1
    }

    /// Bits of a tick that the levels span: a deadline whose higher bits differ from the
    /// clock's lies beyond the top level. 33 to 40.
    pub(crate) fn span_bits(&self) -> u32 {
        self.bits * self.levels() as u32
    }

    pub(crate) fn slots(&self) -> usize {
        1 << self.bits
    }

    fn shift(&self, level: usize) -> u32 {
        self.bits * level as u32
    }

    /// Digit `level` of `tick`: its slot on that level.
    pub(crate) fn slot_for(&self, level: usize, tick: u64) -> usize {
        ((tick >> self.shift(level)) & (self.slots() as u64 - 1)) as usize
    }

    /// The (level, slot) where an entry due at `deadline` belongs when the clock reads `now`:
    /// the current level-0 slot if it is due already. The level may be past the wheel's last
    /// ([`Geometry::levels`]): the entry then waits outside the levels.
    pub(crate) fn place(&self, now: u64, deadline: u64) -> (usize, usize) {
        if deadline <= now {
            return (0, self.slot_for(0, now));
        }
        let level = self.level_for(now, deadline);
        (level, self.slot_for(level, deadline))
    }

    /// The level for `deadline` seen from `now` (`deadline > now`): the level of the highest
    /// digit in which they differ.
    pub(crate) fn level_for(&self, now: u64, deadline: u64) -> usize {
        let significant = 63 - ((now ^ deadline) | (self.slots() as u64 - 1)).leading_zeros();
        self.level_of_bit[significant as usize] as usize
    }

    /// The first tick of `level`'s next rotation after the one that contains `now` (`None`
    /// past `u64`).
    pub(crate) fn next_rotation(&self, level: usize, now: u64) -> Option<u64> {
        let span_bits = self.shift(level) + self.bits;
        if span_bits >= 64 {
            return None;
        }
        ((now >> span_bits) + 1).checked_mul(1 << span_bits)
    }

    /// The first tick of `level`'s rotation that contains `tick`.
    pub(crate) fn rotation_start(&self, level: usize, tick: u64) -> u64 {
        let span_bits = self.shift(level) + self.bits;
        if span_bits >= 64 {
            0
        } else {
            tick & !((1u64 << span_bits) - 1)
        }
    }

    /// The first tick of `slot` on `level`, in the rotation that contains `now`.
    pub(crate) fn slot_start(&self, level: usize, slot: usize, now: u64) -> u64 {
        self.rotation_start(level, now) | ((slot as u64) << self.shift(level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Geometry = Geometry::new(6);

    #[test]
    fn default_geometry_places_any_u64() {
        assert_eq!(G.levels(), 6);
        assert_eq!(Geometry::new(1).levels(), 33);
        assert_eq!(Geometry::new(12).levels(), 3);
        for bits in 1..=12 {
            let g = Geometry::new(bits);
            let top = g.levels() - 1;
            assert!(
                g.shift(top) <= 32,
                "a top slot of {bits} bits is 2^32 ticks at most"
            );
        }
        assert_eq!(G.level_for(0, u64::MAX), 10);
        assert_eq!(G.slot_for(10, u64::MAX), 15);
        assert_eq!(G.slot_start(10, 15, 0), 15 << 60);
    }

    #[test]
    fn worked_example_from_the_crate_doc() {
        assert_eq!((G.level_for(0, 5000), G.slot_for(2, 5000)), (2, 1));
        assert_eq!(G.slot_start(2, 1, 0), 4096);
        assert_eq!((G.level_for(4096, 5000), G.slot_for(1, 5000)), (1, 14));
        assert_eq!(G.slot_start(1, 14, 4096), 4992);
        assert_eq!((G.level_for(4992, 5000), G.slot_for(0, 5000)), (0, 8));
        assert_eq!(G.slot_start(0, 8, 4992), 5000);
    }
}
