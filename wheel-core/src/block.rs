//! [`Block`]: a run of zeroed chunks (any [`Zeroable`] item); a large one comes straight from
//! the operating system, and its pages become resident only as they are first written.
//!
//! Why not `Box<[Chunk]>` from the global allocator: a chunk is aligned to a cache line, and
//! an allocator asked for zeroed memory with more than 16-byte alignment writes the zeros
//! itself. Measured for one 32 MiB block: the system allocator
//! (`posix_memalign`, then `memset`) made all 32 MiB resident in 14 ms; mimalloc made a 2 MiB
//! huge page resident in 5 ms. Either way the wheel's owner (a tick thread) stalled on the
//! allocation. A fresh anonymous mapping is zeros that cost nothing until written, and a
//! caller may make its pages resident ahead of use from another thread
//! (`Wheel::untouched_ahead`). So a block of 2 MiB or more is a mapping of its own, aligned to
//! 2 MiB and asked to use transparent huge pages, so a wheel of millions of references walks
//! few pages. A smaller block still comes from the global allocator: zeroing it costs little,
//! and there it shares pages with other allocations (huge ones, with mimalloc), where 4 KiB
//! pages of its own would cost the wheel's walks TLB misses. The price is
//! a larger first write: a fresh huge page took 0.3–5 ms on a virtual machine, where the host
//! backs it too, against about 2 µs for a 4 KiB page. An owner that cannot wait that long has
//! another thread populate the memory ahead (as wheel-shard's idle workers do).
//!
//! Elsewhere than Linux every block comes from the global allocator, zeroed.

use std::marker::PhantomData;
use std::mem::size_of;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// An item for which all-zero bytes are a valid value, and whose alignment is at most a
/// page's (4 KiB).
///
/// # Safety
/// Implement it only for types where both hold: a [`Block`] hands out zeroed memory as values
/// of the type.
pub(crate) unsafe trait Zeroable: Sized {}

/// `len` zeroed items that never move.
pub(crate) struct Block<C: Zeroable> {
    /// The first item, followed by `len - 1` more.
    items: NonNull<C>,
    len: usize,
    /// What to give back on drop.
    memory: Memory,
    owns: PhantomData<C>,
}

/// Where a block's memory came from.
enum Memory {
    /// A private anonymous mapping, `len` bytes from `start`.
    #[cfg(target_os = "linux")]
    Mapped { start: *mut u8, len: usize },
    /// The global allocator, with this layout.
    Allocated(std::alloc::Layout),
}

// SAFETY: a `Block` owns its items exclusively, as a `Box<[C]>` would; sending or sharing it
// is sending or sharing them.
unsafe impl<C: Zeroable + Send> Send for Block<C> {}
// SAFETY: as above; `&Block` gives only `&[C]`.
unsafe impl<C: Zeroable + Sync> Sync for Block<C> {}

/// Blocks from this size on are aligned to it and use transparent huge pages.
#[cfg(target_os = "linux")]
use wheel_platform::pages::HUGE_PAGE;

impl<C: Zeroable> Block<C> {
    /// `len` zeroed items (at least one byte's worth), none of their pages resident yet;
    /// `None` when the system refuses the memory.
    pub(crate) fn zeroed(len: usize) -> Option<Self> {
        let bytes = len.checked_mul(size_of::<C>())?;
        assert!(bytes > 0, "a block holds at least one byte");
        let (items, memory) = Self::allocate(bytes)?;
        Some(Block {
            items: items.cast(),
            len,
            memory,
            owns: PhantomData,
        })
    }

    /// A block of at least a huge page: a mapping of its own; a smaller one: from the global
    /// allocator, where it shares pages (huge ones, with mimalloc) with other allocations,
    /// and zeroing it costs at most a few hundred microseconds.
    #[cfg(target_os = "linux")]
    fn allocate(bytes: usize) -> Option<(NonNull<u8>, Memory)> {
        if bytes < HUGE_PAGE {
            return Self::allocate_zeroed(bytes);
        }
        let len = bytes.checked_add(HUGE_PAGE)?;
        // SAFETY: a new private anonymous mapping at an address the kernel picks: it aliases
        // nothing, and its pages read as zeros until written.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return None;
        }
        let start = start.cast::<u8>();
        // The mapping is `HUGE_PAGE` longer than `bytes`, so its first huge page boundary
        // leaves room for the block, and every whole huge page of the mapping is the block's.
        let advised = wheel_platform::pages::advise_huge_pages(start, len);
        let first = start.wrapping_add(advised.start - start as usize);
        Some((NonNull::new(first)?, Memory::Mapped { start, len }))
    }

    #[cfg(not(target_os = "linux"))]
    fn allocate(bytes: usize) -> Option<(NonNull<u8>, Memory)> {
        Self::allocate_zeroed(bytes)
    }

    /// Zeroed memory from the global allocator.
    fn allocate_zeroed(bytes: usize) -> Option<(NonNull<u8>, Memory)> {
        let align = std::mem::align_of::<C>();
        let layout = std::alloc::Layout::from_size_align(bytes, align).ok()?;
        // SAFETY: the layout's size is not zero (checked by `zeroed`).
        let start = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        Some((start, Memory::Allocated(layout)))
    }
}

impl<C: Zeroable> Deref for Block<C> {
    type Target = [C];

    #[inline]
    fn deref(&self) -> &[C] {
        // SAFETY: `items` points to `len` items that this block owns, aligned (a mapping
        // starts on a page, and `Zeroable` bounds the alignment by one; an allocation has the
        // item's layout), initialized (zeros are a valid item, `Zeroable` says, and writes
        // keep them valid) and alive until the block drops.
        unsafe { std::slice::from_raw_parts(self.items.as_ptr(), self.len) }
    }
}

impl<C: Zeroable> DerefMut for Block<C> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [C] {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.items.as_ptr(), self.len) }
    }
}

impl<C: Zeroable> Drop for Block<C> {
    fn drop(&mut self) {
        match self.memory {
            #[cfg(target_os = "linux")]
            // SAFETY: the whole mapping made by `allocate`, unmapped once; nothing refers to it
            // after the block (`&self` borrows of it have ended).
            Memory::Mapped { start, len } => unsafe {
                libc::munmap(start.cast(), len);
            },
            // SAFETY: allocated by `allocate_zeroed` with this very layout, freed once.
            Memory::Allocated(layout) => unsafe {
                std::alloc::dealloc(self.items.as_ptr().cast(), layout)
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for a chunk: 1 KiB, cache-line aligned.
    #[repr(C, align(64))]
    struct Item {
        next: u32,
        rest: [u8; 1020],
    }

    // SAFETY: all-zero bytes are a valid `Item`; its alignment is 64.
    unsafe impl Zeroable for Item {}

    /// Resident bytes of this process (Linux).
    #[cfg(target_os = "linux")]
    fn resident() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    #[test]
    fn a_block_is_zeroed_aligned_and_writable() {
        // Under Miri, which checks every byte read, one block of each kind (allocated,
        // mapped), each item's first field, and the first and last items whole.
        let lens: &[usize] = if cfg!(miri) {
            &[1, 64, 2048]
        } else {
            &[1, 64, 2048, 32 * 1024]
        };
        for &len in lens {
            let mut block = Block::<Item>::zeroed(len).unwrap();
            assert_eq!(block.len(), len);
            assert_eq!(block.as_ptr() as usize % 64, 0);
            #[cfg(target_os = "linux")]
            if len >= 2048 {
                assert_eq!(block.as_ptr() as usize % (2 << 20), 0, "huge-page aligned");
            }
            let whole = |i: usize| !cfg!(miri) || i == 0 || i == len - 1;
            assert!(block
                .iter()
                .enumerate()
                .all(|(i, c)| c.next == 0 && (!whole(i) || c.rest.iter().all(|&b| b == 0))));
            block[len - 1].next = 7;
            assert_eq!(block[len - 1].next, 7);
        }
    }

    /// Allocating a block writes none of it (other tests run alongside, so the bound is
    /// loose: a block written whole would add 32 MiB).
    #[cfg(target_os = "linux")]
    #[test]
    #[cfg_attr(miri, ignore = "reads /proc")]
    fn a_block_costs_no_resident_memory_until_written() {
        let before = resident();
        let block = Block::<Item>::zeroed(32 * 1024).unwrap();
        let after = resident();
        assert!(
            after.saturating_sub(before) < 16 << 20,
            "{} KiB resident for an untouched 32 MiB block",
            (after - before) >> 10
        );
        drop(block);
    }
}
