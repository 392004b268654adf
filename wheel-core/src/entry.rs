//! [`Entry`]: what a [`Wheel`](crate::Wheel) holds, inline in its slots' arrays, and hands out.

/// A value and the tick it falls due at.
///
/// The wheel stores entries by value in its slots' arrays, so `T` is meant to be a small `Copy`
/// reference to the caller's own record (a slot index and a ticket, say), not the payload
/// itself: with an 8-byte `T` an entry takes 16 bytes, four to a cache line. The fields are
/// in no particular order in memory (the compiler packs them), so nothing pads a small `T` out
/// beyond the deadline's alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry<T> {
    /// The tick the entry falls due at.
    pub deadline: u64,
    /// The caller's value.
    pub value: T,
}
