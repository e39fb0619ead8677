//! The SIONlib container (file format versions 3–5, as written by SIONlib 1.7.x).
//!
//! This module owns everything about the container and nothing about what the
//! tasks wrote into it: [`header`] parses one physical file's META1/META2,
//! [`read`] memory-maps a whole file set and yields each task's logical byte
//! stream as zero-copy block slices, and [`write`] produces files that follow the
//! same rules (used by the LinkTest 2.x writer, netprobe and the tests).
//!
//! The layout is documented in `docs/linktest.md` (§ "SION container").
pub mod header;
pub mod read;
pub mod write;

pub use header::{ByteOrder, FileHeader};
pub use read::{BlockRef, SionSet, TaskStream};
pub use write::{ChunkLayout, SionWriteOptions, TaskData, encode_sion_set, write_sion_set};

/// Bytes of META1 before the per-task arrays (`"sion"` … filename prefix).
pub const META1_FIXED_LEN: u64 = 1076;
/// Length of the filename-prefix field in META1 (`SION_FILENAME_LENGTH`).
pub const PREFIX_LEN: usize = 1024;
/// Key-value mode "none", stored in the upper 32 bits of `flag1`.
pub const KEYVAL_NONE: i64 = 50;

/// Size of META1 for `n` tasks: `1088 + 16 n` (`_lsion_get_size_metadatablock1`).
pub fn meta1_len(n: u64) -> Option<u64> {
    n.checked_mul(16)?.checked_add(1088)
}

/// Rounds `v` up to a multiple of `align` (`align` ≥ 1).
pub fn align_up(v: u64, align: u64) -> Option<u64> {
    if align <= 1 {
        return Some(v);
    }
    let r = v % align;
    if r == 0 {
        Some(v)
    } else {
        v.checked_add(align - r)
    }
}
