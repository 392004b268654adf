//! The handle a caller keeps for an entry.

use std::fmt;

/// Names one entry of a [`Wheel`](crate::Wheel): its place in the wheel's slab and the
/// generation of that place when the entry was inserted.
///
/// A key goes stale when its entry is removed or handed out. The slab reuses the place for later
/// entries, but with a new generation, so a stale key can never reach them: every operation on a
/// stale key reports it (`None`, `false` or [`StaleKey`]). Generations are 32 bits, so a place
/// must be reused 2³² times before an old key could alias a new entry.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl TimerKey {
    /// The slab index of the entry (dense, reused after removal).
    pub fn index(self) -> u32 {
        self.index
    }

    /// The generation of the slab place at insertion time.
    pub fn generation(self) -> u32 {
        self.generation
    }

    /// Packs the key into one `u64` (index in the high half), for callers that store keys in
    /// atomics or hash them.
    pub fn to_u64(self) -> u64 {
        (u64::from(self.index) << 32) | u64::from(self.generation)
    }

    /// The inverse of [`TimerKey::to_u64`].
    pub fn from_u64(raw: u64) -> Self {
        TimerKey {
            index: (raw >> 32) as u32,
            generation: raw as u32,
        }
    }
}

impl fmt::Debug for TimerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimerKey({}v{})", self.index, self.generation)
    }
}

/// The key named no live entry: it was removed or handed out already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleKey(pub TimerKey);

impl fmt::Display for StaleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale timer key {:?}: the entry was removed or has already expired",
            self.0
        )
    }
}

impl std::error::Error for StaleKey {}
