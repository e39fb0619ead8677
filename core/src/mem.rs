//! Memory advice for bulk ingests: the large, short-lived buffers (Parquet
//! file buffers of tens of MB) and the allocator's heap headroom when many
//! small files are read one after another.
//!
//! Fresh anonymous memory is faulted in one 4 KiB page at a time, each fault
//! zeroing its page; for hundreds of MB that costs more than the work done in
//! the buffer. Advising transparent huge pages lets the kernel fault 2 MiB at a
//! time where THP is in `madvise` mode (the common default).

/// Buffers below this size are left alone.
const MIN_BYTES: usize = 4 << 20;

/// Advises transparent huge pages for the whole allocation of `v` (its
/// capacity, including elements already there). Call it right after
/// allocating, before the memory is touched. Advice only: where the kernel
/// refuses, nothing changes.
pub fn advise_huge_pages<T>(v: &mut Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let bytes = v.capacity().saturating_mul(std::mem::size_of::<T>());
        if bytes < MIN_BYTES {
            return;
        }
        let start = v.as_mut_ptr() as usize;
        let aligned = start.next_multiple_of(PAGE);
        let end = (start + bytes) / PAGE * PAGE;
        if end > aligned {
            // SAFETY: madvise(MADV_HUGEPAGE) only gives advice about a
            // page-aligned range inside this Vec's own allocation; it changes
            // neither its contents nor its validity.
            let rc = unsafe {
                libc::madvise(
                    aligned as *mut libc::c_void,
                    end - aligned,
                    libc::MADV_HUGEPAGE,
                )
            };
            if rc != 0 {
                tracing::debug!(bytes, "madvise(MADV_HUGEPAGE) refused");
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = v;
}

/// Heap headroom kept by [`keep_heap_headroom_for_many_files`].
const MANY_FILES_TOP_PAD: usize = 64 << 20;

/// From this many input files on, [`keep_heap_headroom_for_many_files`] acts.
const MANY_FILES: usize = 32;

/// For a process about to read `files` files one after another (an ingest of
/// a directory of runs), from 32 files on: tells the allocator to grow its
/// heaps by 64 MiB beyond each request and to keep that much when memory is
/// freed.
///
/// Why: each file's buffers are freed before the next file's are allocated;
/// with glibc's default 128 KiB pad the heap top is given back to the kernel
/// and faulted in, zeroed, again for the next file. Measured on 1,000 LinkTest
/// files (docs/testing.md): 13.1k → 8.1k page faults, 53 → 48 µs of CPU per
/// further file. Untouched headroom is not resident; a single large input
/// gains nothing from it (and 18 MB of peak), hence the threshold. Where the
/// allocator is not glibc's, nothing changes.
pub fn keep_heap_headroom_for_many_files(files: usize) {
    if files < MANY_FILES {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let pad = libc::c_int::try_from(MANY_FILES_TOP_PAD).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes a tuning parameter of glibc's
        // allocator; it is called before the ingest's threads allocate.
        let ok = unsafe { libc::mallopt(libc::M_TOP_PAD, pad) };
        if ok != 1 {
            tracing::debug!("mallopt(M_TOP_PAD) refused");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advised_buffers_keep_their_contents() {
        for cap in [10usize, MIN_BYTES * 3 + 5] {
            let mut v: Vec<u8> = Vec::with_capacity(cap);
            v.extend_from_slice(b"head");
            advise_huge_pages(&mut v);
            v.resize(cap, 7);
            assert_eq!(&v[..4], b"head");
            assert!(v[4..].iter().all(|b| *b == 7));
        }
    }
}
