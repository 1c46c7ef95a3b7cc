//! Placement of large in-RAM arrays that are probed at random: backed by
//! transparent huge pages where the system offers them.
//!
//! A lookup in a hash table of several MiB touches a random 4 KiB page of
//! it: the address translation misses the TLB and walks the page tables
//! (on a virtual machine, two levels of them) before the line itself is
//! loaded. Backed by 2 MiB pages, the same table needs a few TLB entries.
//! Linux's default policy (`transparent_hugepage/enabled = madvise`) gives
//! huge pages only to ranges advised with `MADV_HUGEPAGE`, which
//! [`filled`] does for a vector's buffer before its first write (a page
//! written before the advice stays small until `khugepaged` collapses it).
//!
//! Advice only: where it fails (another system, huge pages disabled) the
//! vector is the same vector on small pages. The index strategies use it
//! for tables probed at random: PERSEID's volatile validation table and
//! heads table (every index-only lookup) and its page table (writers).
//!
//! [`prefetch`] asks for the line of such a random probe ahead of its use,
//! so that its miss overlaps other work instead of stalling it.

// `madvise` and `_mm_prefetch` are `unsafe`: see the `SAFETY` comments in
// `advise_huge` and `prefetch`.
#![allow(unsafe_code)]

/// A prefetch of the cache line holding `x` (nothing off x86_64).
#[inline(always)]
pub fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE (which `_mm_prefetch` requires) is part of the x86_64
    // baseline, and a prefetch neither reads nor writes memory as the
    // program sees it: it is a hint, valid for any address (here a live
    // reference).
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// The size of a transparent huge page on x86-64 and on aarch64 with
/// 4 KiB base pages.
const HUGE_PAGE: usize = 2 << 20;

/// An empty vector with room for `capacity` elements, whose buffer is
/// advised to be backed by huge pages where it spans whole ones (the
/// advice stays with the buffer; a vector that outgrows it reallocates
/// without it, so size it before filling).
pub fn with_capacity<T>(capacity: usize) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(capacity);
    let bytes = v.capacity().saturating_mul(std::mem::size_of::<T>());
    advise_huge(v.as_mut_ptr().cast::<u8>(), bytes);
    v
}

/// A vector of `len` copies of `fill` with room for `capacity` elements
/// (at least `len`), advised as by [`with_capacity`].
pub fn filled<T: Clone>(len: usize, capacity: usize, fill: T) -> Vec<T> {
    let mut v = with_capacity(capacity.max(len));
    v.resize(len, fill);
    v
}

/// Advises the whole huge pages inside `[start, start + bytes)` to be
/// backed by huge pages (nothing if there is none).
fn advise_huge(start: *mut u8, bytes: usize) {
    if bytes < HUGE_PAGE {
        return;
    }
    let addr = start as usize;
    let Some(end) = addr.checked_add(bytes) else {
        return;
    };
    let Some(first) = addr.checked_next_multiple_of(HUGE_PAGE) else {
        return;
    };
    let last = end - end % HUGE_PAGE;
    if last <= first {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // The advised range, as a pointer derived from the allocation.
        let at = start.wrapping_add(first - addr);
        // SAFETY: `[at, at + (last - first))` lies inside the buffer of
        // `bytes` bytes at `start`, which the caller's vector owns (its
        // capacity, allocated and not yet freed). MADV_HUGEPAGE changes how
        // the kernel backs those pages, never their contents, validity or
        // protection, so no Rust reference into them is affected; an error
        // (huge pages unsupported or disabled) leaves the pages as they
        // were and is ignored.
        unsafe {
            libc::madvise(at.cast::<libc::c_void>(), last - first, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (first, last);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_vectors_hold_their_values_small_and_large() {
        let v = filled(10, 100, 7u64);
        assert_eq!(v, vec![7u64; 10]);
        assert!(v.capacity() >= 100);
        let v = filled(5, 0, 1u8);
        assert_eq!(v, vec![1u8; 5]);
        // 16 MiB: advised (on Linux); the contents are the same.
        let n = (16 << 20) / 8;
        let mut v = filled(n, n + 3, u64::MAX);
        assert_eq!(v.len(), n);
        assert!(v.iter().all(|x| *x == u64::MAX));
        v.push(1);
        assert_eq!(v.last(), Some(&1));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_buffer_is_advised_where_the_system_allows() {
        // The advice shows in /proc/self/smaps as the `hg` flag of the
        // mapping that holds the buffer.
        let n = (8 << 20) / 8;
        let v = filled(n, n, 0u64);
        let addr = v.as_ptr() as usize + (4 << 20);
        let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled");
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return;
        };
        if !thp.exists() {
            return;
        }
        let mut inside = false;
        let mut flagged = None;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = lo <= addr && addr < hi;
                        continue;
                    }
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    flagged = Some(flags.split_whitespace().any(|f| f == "hg"));
                }
            }
        }
        assert_eq!(flagged, Some(true), "the buffer's mapping is not advised");
    }
}
