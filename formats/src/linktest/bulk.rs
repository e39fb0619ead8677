//! Fresh, large column buffers for the `linktest_timings` table.
//!
//! A 4,096-rank file yields 16.8 M rows, about 335 MB of new column memory.
//! Filled through a `Vec`, most of the time went into first-touch page faults
//! (one per 4 KiB page, each zeroing its page). These buffers are anonymous
//! memory mappings advised for transparent huge pages, so the kernel faults in
//! 2 MiB at a time, and the zero fill of a fresh mapping is the initial value
//! (no memset). Unused tail capacity is never touched and costs nothing, so a
//! buffer can be sized for the upper bound of rows. Small buffers, and systems
//! where the mapping fails, use a plain `Vec`.
use std::ptr::NonNull;
use std::sync::Arc;

use arrow::buffer::{Buffer, ScalarBuffer};
use memmap2::MmapMut;

/// Buffers of at least this many bytes are mapped.
const MAP_BYTES: usize = 4 << 20;

/// Element types whose all-zero bit pattern is a valid value.
pub(crate) trait Zeroable: arrow::datatypes::ArrowNativeType {}
impl Zeroable for i32 {}
impl Zeroable for f64 {}

/// A zero-initialised column of `T` with a fixed capacity.
pub(crate) enum ColumnBuf<T: Zeroable> {
    Mapped { map: MmapMut, cap: usize },
    Heap(Vec<T>),
}

impl<T: Zeroable> ColumnBuf<T> {
    /// `cap` zeros.
    pub(crate) fn zeroed(cap: usize) -> Self {
        let bytes = cap.saturating_mul(std::mem::size_of::<T>());
        if bytes >= MAP_BYTES
            && let Ok(map) = MmapMut::map_anon(bytes)
        {
            #[cfg(target_os = "linux")]
            if let Err(e) = map.advise(memmap2::Advice::HugePage) {
                tracing::debug!(error = %e, "madvise(MADV_HUGEPAGE) refused; 4 KiB pages");
            }
            return Self::Mapped { map, cap };
        }
        Self::Heap(vec![T::default(); cap])
    }

    /// The whole capacity, to fill.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            Self::Mapped { map, cap } => {
                // SAFETY: the mapping is page-aligned (so aligned for T), holds
                // `cap * size_of::<T>()` bytes, is zero-filled by the kernel (a
                // valid T, see `Zeroable`) and is borrowed mutably through `self`.
                unsafe { std::slice::from_raw_parts_mut(map.as_mut_ptr().cast::<T>(), *cap) }
            }
            Self::Heap(v) => v.as_mut_slice(),
        }
    }

    /// The first `len` elements as an Arrow buffer (zero-copy; the mapping lives
    /// as long as any array slicing it).
    pub(crate) fn into_scalar(self, len: usize) -> ScalarBuffer<T> {
        match self {
            Self::Mapped { mut map, cap } => {
                let len = len.min(cap);
                let ptr = NonNull::new(map.as_mut_ptr()).unwrap_or(NonNull::dangling());
                // SAFETY: `ptr` points at the mapping, which `Arc` keeps alive and
                // never moves; `len * size_of::<T>()` bytes are in bounds.
                let buf = unsafe {
                    Buffer::from_custom_allocation(
                        ptr,
                        len * std::mem::size_of::<T>(),
                        Arc::new(map),
                    )
                };
                ScalarBuffer::new(buf, 0, len)
            }
            Self::Heap(mut v) => {
                v.truncate(len);
                ScalarBuffer::from(v)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_and_heap_buffers_hold_what_was_written() {
        for cap in [10, MAP_BYTES / 4 + 3] {
            let mut b = ColumnBuf::<i32>::zeroed(cap);
            assert!(b.as_mut_slice().iter().all(|v| *v == 0));
            for (i, v) in b.as_mut_slice().iter_mut().enumerate() {
                *v = i as i32;
            }
            let s = b.into_scalar(cap - 1);
            assert_eq!(s.len(), cap - 1);
            assert_eq!(s[cap - 2], (cap - 2) as i32);
            assert_eq!(s[0], 0);
        }
    }
}
