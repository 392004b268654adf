//! [`Entry`]: what a [`Wheel`](crate::Wheel) takes and hands out, and [`Stored`], how its slots'
//! arrays hold one.
//!
//! Ground rules: a slot holds only entries whose deadlines agree with the slot's first tick in
//! every bit above the low 32 (a level's slots are at most 2^32 ticks wide and aligned to
//! their width), so an array stores the low 32 bits and the slot supplies the rest. Entries
//! that no slot can hold that way — due already when inserted, or beyond the top level — keep
//! their high 32 bits beside the value ([`Wide`]).

/// A value and the tick it falls due at.
///
/// The wheel stores entries by value in its slots' arrays, so `T` is meant to be a small `Copy`
/// reference to the caller's own record (a slot index and a ticket, say), not the payload
/// itself. An array keeps the value and the deadline's low 32 bits: with a 4-byte `T` an
/// entry takes 8 bytes, with two `u32`s 12, with a `u64` 16 (see
/// [`Wheel::entry_footprint`](crate::Wheel::entry_footprint)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry<T> {
    /// The tick the entry falls due at.
    pub deadline: u64,
    /// The caller's value.
    pub value: T,
}

/// Bits of a deadline an array stores; the slot holding it supplies the others.
const LOW_BITS: u32 = 32;

/// How a slot's array holds an entry: its value and the low 32 bits of its deadline (see the
/// module's ground rules). The compiler orders the fields, so a value of 4-byte alignment packs
/// beside the deadline's bits without padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stored<V> {
    pub(crate) low: u32,
    pub(crate) value: V,
}

impl<V: Copy> Stored<V> {
    pub(crate) fn new(deadline: u64, value: V) -> Self {
        Stored {
            low: deadline as u32,
            value,
        }
    }

    /// The deadline of an entry held in the slot that starts at `slot_start`.
    #[inline]
    pub(crate) fn deadline_in(&self, slot_start: u64) -> u64 {
        (slot_start >> LOW_BITS << LOW_BITS) | u64::from(self.low)
    }

    /// The entry held in the slot that starts at `slot_start`.
    #[inline]
    pub(crate) fn entry_in(&self, slot_start: u64) -> Entry<V> {
        Entry {
            deadline: self.deadline_in(slot_start),
            value: self.value,
        }
    }
}

/// The value of an entry kept outside the levels, with the high 32 bits of its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wide<T> {
    pub(crate) high: u32,
    pub(crate) value: T,
}

impl<T: Copy> Stored<Wide<T>> {
    pub(crate) fn wide(entry: Entry<T>) -> Self {
        Stored::new(
            entry.deadline,
            Wide {
                high: (entry.deadline >> LOW_BITS) as u32,
                value: entry.value,
            },
        )
    }

    pub(crate) fn entry(&self) -> Entry<T> {
        Entry {
            deadline: u64::from(self.value.high) << LOW_BITS | u64::from(self.low),
            value: self.value.value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_supplies_the_high_bits_and_a_wide_entry_keeps_them() {
        let deadline = (7 << 32) | 12345;
        let stored = Stored::new(deadline, 1u32);
        assert_eq!(std::mem::size_of_val(&stored), 8);
        assert_eq!(stored.deadline_in((7 << 32) | 99), deadline);
        assert_eq!(stored.deadline_in(7 << 32), deadline);
        let entry = Entry {
            deadline: u64::MAX - 3,
            value: [1u32, 2],
        };
        assert_eq!(Stored::wide(entry).entry(), entry);
        assert_eq!(std::mem::size_of::<Stored<Wide<[u32; 2]>>>(), 16);
    }
}
