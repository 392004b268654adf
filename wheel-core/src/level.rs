//! [`Level`]: one level of the hierarchy, its current [`Rotation`] and the next one.
//!
//! Level `k` of a wheel with `S` slots per level counts blocks of `S^k` ticks (see
//! [`Geometry`](crate::geometry::Geometry)). Its current rotation holds the entries placed
//! relative to the clock; the next rotation is what the level above fills in ahead of time
//! (the early cascade, see `Wheel`): when the clock reaches the next rotation's first tick, the
//! current one is empty, every slot of it having fallen due before, and the two swap.

use crate::rotation::Rotation;

#[derive(Clone, Debug)]
pub(crate) struct Level {
    rotations: [Rotation; 2],
    /// Which of `rotations` is current.
    current: usize,
}

impl Level {
    pub(crate) fn new(slots: usize) -> Self {
        Level {
            rotations: [Rotation::new(slots), Rotation::new(slots)],
            current: 0,
        }
    }

    /// Bytes [`Level::new`] allocates for `slots` slots, beside the `Level` itself.
    pub(crate) fn bytes(slots: usize) -> usize {
        2 * Rotation::bytes(slots)
    }

    pub(crate) fn current(&self) -> &Rotation {
        &self.rotations[self.current]
    }

    pub(crate) fn current_mut(&mut self) -> &mut Rotation {
        &mut self.rotations[self.current]
    }

    pub(crate) fn upcoming(&self) -> &Rotation {
        &self.rotations[1 - self.current]
    }

    pub(crate) fn upcoming_mut(&mut self) -> &mut Rotation {
        &mut self.rotations[1 - self.current]
    }

    /// Rotation `which` (0 or 1) by where it is stored, not by its role: what a cursor that
    /// visits both keeps, since the roles swap as the clock runs.
    pub(crate) fn rotation_mut(&mut self, which: usize) -> &mut Rotation {
        &mut self.rotations[which]
    }

    /// Whether rotation `which` (by where it is stored) is the current one.
    pub(crate) fn is_current(&self, which: usize) -> bool {
        which == self.current
    }

    /// The clock reached the next rotation's first tick: it becomes the current one. The
    /// current one is empty by then, all of it having fallen due before.
    pub(crate) fn turn(&mut self) {
        debug_assert!(self.current().is_empty());
        self.current = 1 - self.current;
    }
}
