//! [`Cells`]: the cell array the bounded rings are built on (the pending ring, `ring.rs`, the
//! lane, `lane.rs`, and the executor's hand-out ring), the counting that says whose turn a
//! cell is, and the pending ring's single consumer side.
//!
//! Every cell carries a sequence number that counts from the cell's own index. The cell of
//! position `p` (at index `p mod capacity`) is "free for `p`" while its sequence is the
//! position the lap of `p` starts at ([`Cells::free_for`]), and "full for `p`" at one more
//! ([`Cells::full_for`]); whoever moves the value out frees the cell for `p + capacity`
//! ([`Cells::next_lap`]). A cell that still says "full" for the previous lap is a full ring.
//! (The lane's consumer frees no cell: its one producer counts free cells from the consumer's
//! position instead, and reads only "full for `p`", which differs every lap; see `lane.rs`.)
//! Every cell of a new array is free for lap 0, so a new array is all zero bytes: it comes
//! zeroed from the allocator, and its pages cost memory only once values reach them.

use std::mem::MaybeUninit;

use crate::sync::{AtomicU64, Ordering, UnsafeCell};

/// The allocator refused a ring's cells (or their size overflows).
#[derive(Debug)]
pub(crate) struct RingRefused;

/// One cell: its sequence (see the module doc) and its value.
pub(crate) struct Cell<T> {
    pub(crate) sequence: AtomicU64,
    value: UnsafeCell<MaybeUninit<T>>,
}

impl<T> Cell<T> {
    /// Puts `value` in the cell.
    ///
    /// # Safety
    /// The caller holds the cell: its sequence said "free" for a position this caller alone
    /// claimed (read with Acquire), and no one reads the value before the caller publishes it.
    #[inline]
    pub(crate) unsafe fn write(&self, value: T) {
        // SAFETY: the caller holds the cell (see above), so this is the only access.
        self.value.with_mut(|slot| unsafe { (*slot).write(value) });
    }

    /// Moves the value out of the cell.
    ///
    /// # Safety
    /// The cell holds a value published for a position this caller alone claimed (its "full"
    /// sequence read with Acquire), and the caller frees the cell only after this returns.
    #[inline]
    pub(crate) unsafe fn take(&self) -> T {
        // SAFETY: the value was written and published (see above), and only this caller
        // moves it out, once.
        self.value
            .with_mut(|slot| unsafe { (*slot).assume_init_read() })
    }
}

/// A power-of-two array of [`Cell`]s, every one free for lap 0.
pub(crate) struct Cells<T> {
    cells: CellArray<T>,
    mask: u64,
}

impl<T> Cells<T> {
    /// Cells for a ring asked for `capacity`, rounded up to a power of two (at least 2);
    /// `RingRefused` when the allocator refuses them.
    pub(crate) fn try_new(capacity: usize) -> Result<Self, RingRefused> {
        let count = Self::count_for(capacity);
        Ok(Cells {
            cells: free_cells(count)?,
            mask: count as u64 - 1,
        })
    }

    /// Cells in a ring asked for `capacity`; past the largest power of two a `usize` holds
    /// (a config built in code, never valid), that power, so estimates saturate instead of
    /// wrapping.
    pub(crate) fn count_for(capacity: usize) -> usize {
        capacity
            .max(2)
            .checked_next_power_of_two()
            .unwrap_or(1 << (usize::BITS - 1))
    }

    /// Bytes the cells of a ring asked for `capacity` take.
    pub(crate) fn bytes_for(capacity: usize) -> usize {
        Self::count_for(capacity).saturating_mul(std::mem::size_of::<Cell<T>>())
    }

    pub(crate) fn len(&self) -> usize {
        self.mask as usize + 1
    }

    /// The cell of `position`.
    #[inline]
    pub(crate) fn at(&self, position: u64) -> &Cell<T> {
        &self.cells[(position & self.mask) as usize]
    }

    /// The sequence that says "free for `position`": where its lap starts.
    #[inline]
    pub(crate) fn free_for(&self, position: u64) -> u64 {
        position & !self.mask
    }

    /// The sequence that says "full for `position`".
    #[inline]
    pub(crate) fn full_for(&self, position: u64) -> u64 {
        Self::full_after(self.free_for(position))
    }

    /// The sequence that says "full" for the position whose "free" sequence is `free`: a
    /// producer that has just read `free` publishes with this, without working it out again.
    #[inline]
    pub(crate) fn full_after(free: u64) -> u64 {
        free + 1
    }

    /// The sequence that frees the cell of `position` for the next lap.
    #[inline]
    pub(crate) fn next_lap(&self, position: u64) -> u64 {
        self.free_for(position) + self.mask + 1
    }

    /// The single consumer of a ring on these cells, whose next position is `head`: takes the
    /// value there if its producer has published it, frees the cell for the next lap and
    /// moves `head` on. Written by the consumer only, `head` is read by producers.
    pub(crate) fn pop_at(&self, head: &AtomicU64) -> Option<T> {
        let position = head.load(Ordering::Relaxed);
        // SAFETY: this is the single consumer, and `head` moves past `position` below.
        let value = unsafe { self.take_published(position) }?;
        self.at(position)
            .sequence
            .store(self.next_lap(position), Ordering::Release);
        head.store(position + 1, Ordering::Release);
        Some(value)
    }

    /// The single consumer at `position`: moves the value out of its cell if the producer has
    /// published it. The cell still says "full"; freeing it, if the ring does, and moving past
    /// `position` are the caller's.
    ///
    /// # Safety
    /// The caller is the ring's single consumer, and takes no value at `position` again.
    #[inline]
    pub(crate) unsafe fn take_published(&self, position: u64) -> Option<T> {
        let cell = self.at(position);
        if cell.sequence.load(Ordering::Acquire) != self.full_for(position) {
            return None;
        }
        // SAFETY: "full for `position`" means its producer wrote the value and published it
        // with Release, which our Acquire load saw; only the single consumer reads a published
        // cell, once (the caller's promise), and the producer writes it again only after the
        // consumer frees it or moves past it.
        Some(unsafe { cell.take() })
    }

    /// The single consumer at `head`: whether [`Cells::pop_at`] has a published value to take.
    pub(crate) fn published_at(&self, head: &AtomicU64) -> bool {
        let position = head.load(Ordering::Relaxed);
        self.at(position).sequence.load(Ordering::Acquire) == self.full_for(position)
    }

    /// Whether the push that took `position` left the cells at least half full, the consumer
    /// being at `head` and `beside` more waiting for it elsewhere, looked at sixteen times a
    /// lap (it reads the consumer's line): then it is time to wake the consumer, before
    /// producers find the ring full and wait.
    #[inline]
    pub(crate) fn half_full_after(
        &self,
        position: u64,
        head: &AtomicU64,
        beside: impl FnOnce() -> usize,
    ) -> bool {
        let len = self.len() as u64;
        if position & (len / 16).saturating_sub(1) != 0 {
            return false;
        }
        let head = head.load(Ordering::Relaxed);
        position.saturating_sub(head) + 1 + beside() as u64 >= len / 2
    }
}

#[cfg(not(loom))]
type CellArray<T> = super::zeroed::ZeroedSlice<Cell<T>>;
#[cfg(loom)]
type CellArray<T> = Box<[Cell<T>]>;

/// `count` cells, every one free for lap 0 (sequence 0), zeroed by the allocator.
#[cfg(not(loom))]
fn free_cells<T>(count: usize) -> Result<CellArray<T>, RingRefused> {
    // SAFETY: all-zero bytes are a valid cell: a sequence of 0 (`AtomicU64` has the layout of
    // `u64`) and an uninitialised value (an `UnsafeCell<MaybeUninit<T>>` may hold any bytes);
    // a cell is at least its eight-byte sequence.
    unsafe { super::zeroed::ZeroedSlice::new(count) }.ok_or(RingRefused)
}

/// Loom's atomics are not plain integers: its cells are built one by one.
#[cfg(loom)]
fn free_cells<T>(count: usize) -> Result<CellArray<T>, RingRefused> {
    Ok((0..count)
        .map(|_| Cell {
            sequence: AtomicU64::new(0),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        })
        .collect())
}
