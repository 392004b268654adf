//! [`zeroed_slice`]: an array that comes zeroed from the allocator, for values whose all-zero
//! bytes are valid (a ring cell free for lap 0, a fresh timer record). A large zeroed
//! allocation is fresh memory from the OS, so its pages cost memory only once they are written.

use std::alloc::Layout;

/// `count` values of `T`, every byte zero; `None` when the allocator refuses them or their
/// size overflows.
///
/// # Safety
/// All-zero bytes are a valid `T`, and `T` is not zero-sized.
pub(super) unsafe fn zeroed_slice<T>(count: usize) -> Option<Box<[T]>> {
    let layout = Layout::array::<T>(count).ok()?;
    assert!(layout.size() > 0, "a zeroed array takes memory");
    // SAFETY: the layout's size is not zero (asserted).
    let start = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if start.is_null() {
        return None;
    }
    // SAFETY: `start` is a fresh allocation of `layout`, room for `count` values, every byte
    // zero, which the caller vouches is a valid `T`; a `Box<[T]>` of that length frees it with
    // the same layout.
    Some(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(start, count)) })
}
