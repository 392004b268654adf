//! [`FiredList`]: the indices of the timers whose callbacks ran on one thread, in the order
//! they ran.
//!
//! Appending is a sequential write, so a callback's bookkeeping stays off the cache misses a
//! per-timer structure would cost it at 10 M timers (work the bench would charge to the
//! system under test). The list's memory is mapped from the OS for it alone, touched only as
//! it fills, and given back to the OS when the list is dropped: the bench's bytes-per-timer
//! figure reads the process's RSS, and memory the allocator kept from an earlier round's list
//! would show up there as the system's.

use std::ptr::NonNull;

pub(crate) struct FiredList {
    /// `capacity` slots mapped for this list alone (dangling when `capacity` is 0).
    start: NonNull<u32>,
    len: usize,
    capacity: usize,
}

// SAFETY: the list owns its mapping; moving it to another thread moves that ownership.
unsafe impl Send for FiredList {}

impl FiredList {
    /// A list with room for `capacity` indices (address space only until used). A mapping the
    /// OS refuses leaves the list with no room: every push is then dropped and counted by
    /// [`FiredList::dropped`].
    pub(crate) fn with_capacity(capacity: usize) -> FiredList {
        let empty = FiredList {
            start: NonNull::dangling(),
            len: 0,
            capacity: 0,
        };
        let Some(bytes) = capacity.checked_mul(4).filter(|&b| b > 0) else {
            return empty;
        };
        // SAFETY: an anonymous private mapping at an address of the OS's choice; no existing
        // memory is affected.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return empty;
        }
        FiredList {
            start: NonNull::new(address.cast()).expect("mmap never maps at address 0"),
            len: 0,
            capacity,
        }
    }

    /// Appends `index`; dropped (see [`FiredList::dropped`]) when the list is full.
    #[inline]
    pub(crate) fn push(&mut self, index: u32) {
        if self.len < self.capacity {
            // SAFETY: `len < capacity`, so the slot lies within the mapping, which this list
            // owns exclusively (`&mut self`).
            unsafe { self.start.as_ptr().add(self.len).write(index) };
        }
        self.len += 1;
    }

    /// The indices appended, in order (up to the capacity).
    pub(crate) fn as_slice(&self) -> &[u32] {
        let kept = self.len.min(self.capacity);
        if kept == 0 {
            return &[];
        }
        // SAFETY: the first `kept` slots were written by `push` and lie within the mapping.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), kept) }
    }

    /// Pushes that found the list full.
    pub(crate) fn dropped(&self) -> usize {
        self.len.saturating_sub(self.capacity)
    }
}

impl Drop for FiredList {
    fn drop(&mut self) {
        if self.capacity > 0 {
            // SAFETY: the mapping was made by `with_capacity` with exactly this length and is
            // not used after this.
            unsafe { libc::munmap(self.start.as_ptr().cast(), self.capacity * 4) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_order_and_counts_what_did_not_fit() {
        let mut list = FiredList::with_capacity(3);
        for index in [7, 1, 7, 9] {
            list.push(index);
        }
        assert_eq!(list.as_slice(), [7, 1, 7]);
        assert_eq!(list.dropped(), 1);
        let empty = FiredList::with_capacity(0);
        assert!(empty.as_slice().is_empty());
    }
}
