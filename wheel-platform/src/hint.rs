//! Cache prefetch hints: start loading a line that a later access needs, so that the access
//! finds it in this core's cache. A hint never faults and changes no memory, whatever the
//! address; off x86_64 it does nothing.

/// Starts loading the cache line that holds `address` into this core's cache, to be read.
///
/// ```
/// let values = [1u64, 2, 3];
/// wheel_platform::hint::prefetch(&values[2]);
/// // An address that is not mapped at all is fine too: the hint is dropped.
/// wheel_platform::hint::prefetch(std::ptr::null::<u64>());
/// assert_eq!(values[2], 3);
/// ```
#[inline(always)]
pub fn prefetch<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no memory. SSE is part of the x86_64
    // baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(address.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// [`prefetch`], for a line about to be written: the line arrives owned by this core, so the
/// write does not wait for another core's copy to be invalidated.
#[inline(always)]
pub fn prefetch_for_write<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `prefetch`.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0};
        _mm_prefetch::<_MM_HINT_ET0>(address.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// [`prefetch`] for every cache line of `value`, for a value that spans several lines that no
/// hardware prefetcher could guess (a chunk reached through a link).
#[inline(always)]
pub fn prefetch_lines<T>(value: &T) {
    let first = (value as *const T).cast::<u8>();
    for line in (0..std::mem::size_of::<T>()).step_by(CACHE_LINE) {
        prefetch(first.wrapping_add(line));
    }
}

/// The cache line size the hints assume.
pub const CACHE_LINE: usize = 64;
