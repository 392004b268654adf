//! Advice to the kernel about pages: transparent huge pages for large arrays, and pages made
//! resident ahead of their first write. Advice changes how pages are supplied, never what
//! they hold, so these functions are safe on any address range: the kernel refuses a range
//! it cannot apply them to (not mapped, read-only, an older kernel), and nothing changes.
//! Elsewhere than Linux, and in a build with `--cfg wheel_portable` (the crate's doc), they do
//! nothing.

use std::ops::Range;

/// Size of a transparent huge page on x86_64 and most aarch64 kernels.
pub const HUGE_PAGE: usize = 2 << 20;

/// Whether advice is given at all: on Linux, unless built with `--cfg wheel_portable`.
const ADVICE: bool = cfg!(all(target_os = "linux", not(any(wheel_portable, miri))));

/// Asks the kernel to back the whole huge pages within `len` bytes from `start` with
/// transparent huge pages (`madvise(MADV_HUGEPAGE)`): a large array touched in random order
/// then costs a TLB miss per 2 MiB instead of per 4 KiB page. A part of a huge page at either
/// end stays as it was, so the advice never reaches memory outside the range. Returns the
/// range advised (empty when the range covers no whole huge page).
///
/// ```
/// use wheel_platform::pages::{advise_huge_pages, kernel_has_huge_pages, HUGE_PAGE};
///
/// let memory = vec![0u8; 6 << 20];
/// let advised = advise_huge_pages(memory.as_ptr(), memory.len());
/// // At least 4 of the 6 MiB, where the advice is given; an empty range where it is not.
/// assert!(advised.len() >= 4 << 20 || !kernel_has_huge_pages());
/// assert_eq!(advised.start % HUGE_PAGE, 0);
/// ```
pub fn advise_huge_pages(start: *const u8, len: usize) -> Range<usize> {
    let first = (start as usize).next_multiple_of(HUGE_PAGE);
    let end = (start as usize).saturating_add(len) / HUGE_PAGE * HUGE_PAGE;
    if end <= first || !ADVICE {
        return first..first;
    }
    #[cfg(all(target_os = "linux", not(any(wheel_portable, miri))))]
    // SAFETY: the advice changes how the pages of `first..end` are supplied, not their
    // contents; a range the kernel cannot apply it to is refused with an error.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
    first..end
}

/// Asks the kernel to make the pages of `range` resident and writable without changing their
/// contents (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14 and later): the page faults that the
/// first writes would take happen now, on the calling thread, instead of on the thread that
/// writes there later. A fresh anonymous page becomes a page of zeros, as a read of it shows
/// already; a resident page is left alone, so another thread may be writing the range
/// meanwhile. Nothing where the kernel does not know the advice
/// ([`populate_write_known`]) or refuses the range.
pub fn populate_write(range: Range<usize>) {
    #[cfg(all(target_os = "linux", not(any(wheel_portable, miri))))]
    {
        if range.is_empty() || !populate_write_known() {
            return;
        }
        // madvise takes a page-aligned start: the page that holds the range's first byte.
        let start = range.start & !(page_size() - 1);
        // SAFETY: MADV_POPULATE_WRITE writes no byte of the range: it faults the pages in as
        // a write would and leaves the contents of resident ones alone; a range that is not
        // mapped writable is refused with an error.
        let done = unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                range.end - start,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if done != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            POPULATE_WRITE_UNKNOWN.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    #[cfg(any(not(target_os = "linux"), wheel_portable, miri))]
    let _ = range;
}

/// Set once the kernel has said it does not know `MADV_POPULATE_WRITE` (before Linux 5.14).
#[cfg(all(target_os = "linux", not(any(wheel_portable, miri))))]
static POPULATE_WRITE_UNKNOWN: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether [`populate_write`] can work here: false elsewhere than Linux (and under `--cfg
/// wheel_portable`), and once a Linux kernel has refused the advice as unknown (it is not
/// asked again); true before the first call on Linux.
pub fn populate_write_known() -> bool {
    #[cfg(all(target_os = "linux", not(any(wheel_portable, miri))))]
    return !POPULATE_WRITE_UNKNOWN.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(any(not(target_os = "linux"), wheel_portable, miri))]
    false
}

/// The size of a page (a power of two; 4 KiB where the system does not say).
pub fn page_size() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf reads a constant of the system and touches no memory of ours.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size)
            .ok()
            .filter(|size| size.is_power_of_two())
            .unwrap_or(4096)
    }
    #[cfg(not(target_os = "linux"))]
    4096
}

/// Whether this kernel has transparent huge pages to give (Linux built with them: its
/// `/sys/kernel/mm/transparent_hugepage` exists); where it does not, [`advise_huge_pages`] is
/// refused and changes nothing. False elsewhere than Linux and under `--cfg wheel_portable`,
/// where no advice is given.
pub fn kernel_has_huge_pages() -> bool {
    ADVICE && std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists()
}

/// Whether the mapping that holds `address` carries the huge-page advice (the `hg` flag in
/// Linux's `/proc/self/smaps`); `None` where that file cannot be read or lists no mapping
/// holding the address. A diagnostic, for tests and reports: it reads and parses the file.
pub fn huge_pages_advised_at(address: usize) -> Option<bool> {
    let flags = vm_flags_at(address)?;
    Some(flags.split_whitespace().any(|flag| flag == "hg"))
}

/// The `VmFlags` of the mapping that holds `address` (`/proc/self/smaps`).
fn vm_flags_at(address: usize) -> Option<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'));
        if let Some((from, to)) = range {
            if let (Ok(from), Ok(to)) = (
                usize::from_str_radix(from, 16),
                usize::from_str_radix(to, 16),
            ) {
                inside = (from..to).contains(&address);
                continue;
            }
        }
        if inside {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return Some(flags.trim().to_owned());
            }
        }
    }
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The whole huge pages inside the range get the kernel's `hg` flag; the parts of huge
    /// pages at its ends do not. A kernel without transparent huge pages refuses the advice,
    /// and no page gets the flag. Under `--cfg wheel_portable` no advice is given: the range
    /// returned is empty, at the first whole huge page, and no page gets the flag.
    #[test]
    #[cfg_attr(miri, ignore = "reads /proc")]
    fn huge_page_advice_covers_the_whole_huge_pages_within() {
        let has = kernel_has_huge_pages();
        let memory = vec![0u8; 5 * HUGE_PAGE];
        // A range that starts and ends 4 KiB past a huge page boundary.
        let aligned = (memory.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
        let start = aligned + 4096;
        let len = 3 * HUGE_PAGE;
        let advised = advise_huge_pages(start as *const u8, len);
        let whole = aligned + HUGE_PAGE..aligned + 3 * HUGE_PAGE;
        if cfg!(wheel_portable) {
            assert!(!has, "no advice, so no huge pages to give");
            assert_eq!(advised, whole.start..whole.start);
        } else {
            assert_eq!(advised, whole);
        }
        assert_eq!(huge_pages_advised_at(whole.start), Some(has));
        assert_eq!(huge_pages_advised_at(whole.end - 1), Some(has));
        assert_eq!(
            huge_pages_advised_at(start),
            Some(false),
            "the partial page before"
        );
        assert_eq!(
            huge_pages_advised_at(whole.end),
            Some(false),
            "the partial page after"
        );
        assert!(advise_huge_pages(start as *const u8, HUGE_PAGE).is_empty());
    }

    /// Populated pages keep what was written to them and count as resident.
    #[test]
    fn populated_pages_keep_their_contents() {
        let pages = if cfg!(miri) { 2 } else { 64 };
        let mut memory = vec![0u8; pages * page_size()];
        memory[0] = 7;
        let last = memory.len() - 1;
        memory[last] = 9;
        let range = memory.as_ptr() as usize..memory.as_ptr() as usize + memory.len();
        populate_write(range);
        assert_eq!((memory[0], memory[last]), (7, 9));
        assert!(memory[1..last].iter().all(|&b| b == 0));
    }

    #[test]
    fn the_page_size_is_a_power_of_two() {
        assert!(page_size().is_power_of_two());
        assert!(HUGE_PAGE.is_multiple_of(page_size()));
    }
}
