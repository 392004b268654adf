//! [`ZeroedSlice`]: an array that comes zeroed from the allocator, for values whose all-zero
//! bytes are valid (a ring cell free for lap 0, a fresh timer record). A large zeroed
//! allocation is fresh memory from the OS, so its pages cost memory only once they are written.
//!
//! The memory comes from the system allocator (`std::alloc::System`) whatever the program's
//! global allocator is: a global allocator need not give untouched pages for a zeroed request
//! (mimalloc, for one, writes zeros over memory it reuses, so a service's rings became resident
//! at its start: `docs/performance.md`, "Record segments").
//!
//! The memory is asked for with at most 16-byte alignment, which the system allocator serves
//! with `calloc`: a large `calloc` maps fresh pages and writes none of them. Asked for with a
//! larger alignment (a record is aligned to its 64-byte cache line), the system allocator
//! allocates and then writes zeros over the whole array itself, so every page of a 32 MiB
//! record segment would be resident, and written by the producer that created it, at once.
//! The array therefore starts at the first suitably aligned byte of a slightly larger
//! allocation.
//!
//! An array of 2 MiB or more is asked to use transparent huge pages over the part of it that
//! whole huge pages cover: workers and producers touch records in random order, and on 4 KiB
//! pages nearly every touch of a large table is also a TLB miss. (The system allocator's fresh
//! mappings get none unless asked: without the advice, 112 MiB of the process was on huge
//! pages at 10 M timers instead of 625, and the producer was about 15 ns a timer slower;
//! `docs/performance.md`, "Record segments".)

use std::alloc::{GlobalAlloc, Layout, System};
use std::ops::Deref;
use std::ptr::NonNull;

/// The alignment asked of the allocator: what `calloc` guarantees on 64-bit targets.
const ASKED_ALIGN: usize = 16;

/// `len` values of `T` in memory that came zeroed from the allocator (see the module doc).
pub(super) struct ZeroedSlice<T> {
    /// The allocation, as the allocator returned it.
    memory: NonNull<u8>,
    /// The values: aligned for `T`, within `memory`.
    values: NonNull<[T]>,
}

// SAFETY: a `ZeroedSlice` owns its values as a `Box<[T]>` would.
unsafe impl<T: Send> Send for ZeroedSlice<T> {}
// SAFETY: as above; shared access hands out only `&[T]`.
unsafe impl<T: Sync> Sync for ZeroedSlice<T> {}

impl<T> ZeroedSlice<T> {
    /// `count` values of `T`, every byte zero; `None` when the allocator refuses them or their
    /// size overflows.
    ///
    /// # Safety
    /// All-zero bytes are a valid `T`, and `T` is not zero-sized.
    pub(super) unsafe fn new(count: usize) -> Option<Self> {
        let layout = Self::layout(count)?;
        assert!(layout.size() > 0, "a zeroed array takes memory");
        // SAFETY: the layout's size is not zero (asserted).
        let memory = NonNull::new(unsafe { System.alloc_zeroed(layout) })?;
        wheel_platform::pages::advise_huge_pages(memory.as_ptr(), layout.size());
        let skip = memory.as_ptr().align_offset(std::mem::align_of::<T>());
        // SAFETY: `layout` has room for the values after up to `align_of::<T>()` bytes of
        // padding (see `layout`), and `skip` is less than that alignment.
        let start = unsafe { memory.as_ptr().add(skip) }.cast::<T>();
        let values = NonNull::slice_from_raw_parts(NonNull::new(start)?, count);
        Some(ZeroedSlice { memory, values })
    }

    /// The allocation for `count` values: their size plus room to align them, at
    /// [`ASKED_ALIGN`] (or `T`'s alignment, when that is smaller).
    fn layout(count: usize) -> Option<Layout> {
        let values = Layout::array::<T>(count).ok()?;
        let align = values.align();
        if align <= ASKED_ALIGN {
            return Some(values);
        }
        Layout::from_size_align(values.size().checked_add(align)?, ASKED_ALIGN).ok()
    }
}

impl<T> Deref for ZeroedSlice<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `values` points at `len` initialised values (zeroed, valid by `new`'s
        // contract, or written since through shared references to atomics and cells), owned
        // by `self` for as long as it lives.
        unsafe { self.values.as_ref() }
    }
}

impl<T> Drop for ZeroedSlice<T> {
    fn drop(&mut self) {
        let layout = Self::layout(self.values.len()).expect("the layout it was allocated with");
        // SAFETY: the values are initialised and owned here; nothing uses them after this.
        unsafe { std::ptr::drop_in_place(self.values.as_ptr()) };
        // SAFETY: `memory` came from `System.alloc_zeroed` with this same layout.
        unsafe { System.dealloc(self.memory.as_ptr(), layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(64))]
    struct Line([u64; 8]);

    #[test]
    fn values_are_aligned_and_zero() {
        // SAFETY: all-zero bytes are a valid `Line`.
        let lines = unsafe { ZeroedSlice::<Line>::new(1000) }.unwrap();
        assert_eq!(lines.len(), 1000);
        assert_eq!(lines.as_ptr() as usize % 64, 0);
        assert!(lines.iter().all(|line| line.0 == [0; 8]));
        // SAFETY: all-zero bytes are a valid `u16`.
        let small = unsafe { ZeroedSlice::<u16>::new(3) }.unwrap();
        assert_eq!(&*small, &[0, 0, 0]);
    }

    #[test]
    fn values_are_dropped_with_the_slice() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DROPPED: AtomicUsize = AtomicUsize::new(0);
        struct Counted(#[allow(dead_code)] u64);
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        // SAFETY: all-zero bytes are a valid `Counted`.
        drop(unsafe { ZeroedSlice::<Counted>::new(5) }.unwrap());
        assert_eq!(DROPPED.load(Ordering::Relaxed), 5);
    }

    /// A large array asks for transparent huge pages over the huge pages it covers (the
    /// kernel's `hg` flag on that part of the mapping), where the kernel has them.
    #[test]
    #[cfg(target_os = "linux")]
    #[cfg_attr(miri, ignore = "reads /proc")]
    fn a_large_array_asks_for_huge_pages() {
        use wheel_platform::pages::{kernel_has_huge_pages, HUGE_PAGE};
        // SAFETY: all-zero bytes are a valid `u64`.
        let large = unsafe { ZeroedSlice::<u64>::new(3 * HUGE_PAGE / 8) }.unwrap();
        let inside = (large.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
        let advised = wheel_platform::pages::huge_pages_advised_at(inside);
        assert_eq!(advised, Some(kernel_has_huge_pages()));
    }
}
