//! META1 (file start) and META2 (at `start_of_varheader`) of one physical SION
//! file, parsed from its bytes.
//!
//! Every count read from the file is checked against the file length before
//! anything is allocated for it, so an absurd `ntasks` or `maxchunks` gives an
//! error instead of a huge allocation.
use std::path::Path;

use serde::Serialize;

use super::{META1_FIXED_LEN, PREFIX_LEN, align_up, meta1_len};
use crate::error::{FormatError, Position, Result};

/// Byte order of the container's metadata (and, for LinkTest, of its payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ByteOrder {
    /// Little-endian (x86, most ARM).
    Little,
    /// Big-endian (POWER in BE mode, BlueGene).
    Big,
}

impl ByteOrder {
    /// The order of this machine.
    pub fn native() -> Self {
        if cfg!(target_endian = "big") {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        }
    }
}

/// Everything the container records about one physical file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileHeader {
    /// Byte order of the metadata.
    pub byte_order: ByteOrder,
    /// The four bytes at offset 4 as stored.
    pub endianness_bytes: [u8; 4],
    /// The "user data is big-endian" flag (middle bytes of the endianness word).
    pub user_data_big_endian: bool,
    /// SIONlib major version (version field / 1000).
    pub sion_version_major: i32,
    /// SIONlib minor version (version field % 1000).
    pub sion_version_minor: i32,
    /// SIONlib patch level.
    pub sion_patch_level: i32,
    /// File format version (3, 4 or 5).
    pub format_version: i32,
    /// File-system block size the writer aligned to.
    pub fsblksize: u64,
    /// Tasks in this physical file.
    pub ntasks: usize,
    /// Physical files in the set.
    pub nfiles: u32,
    /// This file's number in the set (serial writers put 1 for a single file).
    pub filenumber: i32,
    /// Raw flag1; its upper 32 bits are the key-value mode.
    pub flag1: i64,
    /// Raw flag2.
    pub flag2: i64,
    /// Key-value mode (50 = none, 51 inline, 52 meta, 53 hash).
    pub keyval_mode: i64,
    /// File name prefix recorded by the writer.
    pub prefix: String,
    /// Global rank of each local task.
    pub globalranks: Vec<i64>,
    /// Chunk sizes as stored in META1.
    pub chunksizes: Vec<u64>,
    /// Chunk sizes as used for the layout (aligned up for format 3).
    pub effective_chunksizes: Vec<u64>,
    /// The most blocks any task used.
    pub maxchunks: u64,
    /// Offset of META2.
    pub start_of_varheader: u64,
    /// Offset of the first chunk: `align_up(1088 + 16 n, fsblksize)`.
    pub start_of_data: u64,
    /// Distance between consecutive blocks of one task (sum of chunk sizes).
    pub globalskip: u64,
    /// Blocks each task wrote.
    pub blockcount: Vec<u64>,
    /// Valid bytes of block `b` of task `i` at `[b * ntasks + i]` (block-major, as stored).
    pub blocksizes: Vec<u64>,
    /// Global rank → (file number, local task), present in file 0 of a multi-file set.
    pub mapping: Vec<(i32, i32)>,
    /// Length of the physical file.
    pub file_len: u64,
}

impl FileHeader {
    /// Offset of task `i`'s first chunk.
    pub fn chunk_start(&self, i: usize) -> Option<u64> {
        let before: u64 = self.effective_chunksizes.get(..i)?.iter().sum();
        self.start_of_data.checked_add(before)
    }

    /// Size of block `b` of task `i`, if that block was written.
    pub fn block_size(&self, i: usize, b: u64) -> Option<u64> {
        if b >= *self.blockcount.get(i)? {
            return None;
        }
        let idx = usize::try_from(b)
            .ok()?
            .checked_mul(self.ntasks)?
            .checked_add(i)?;
        self.blocksizes.get(idx).copied()
    }

    /// Total valid bytes task `i` wrote.
    pub fn task_bytes(&self, i: usize) -> u64 {
        let n = self.blockcount.get(i).copied().unwrap_or(0);
        (0..n).filter_map(|b| self.block_size(i, b)).sum()
    }
}

/// Reads fixed-width integers from a byte slice in one byte order, reporting
/// failures as errors at absolute file offsets.
pub(crate) struct Reader<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) order: ByteOrder,
    pub(crate) path: &'a Path,
}

impl<'a> Reader<'a> {
    pub(crate) fn bytes(&self, off: u64, len: u64, field: &str) -> Result<&'a [u8]> {
        let end = off.checked_add(len);
        let slice = match (
            usize::try_from(off),
            end.and_then(|e| usize::try_from(e).ok()),
        ) {
            (Ok(s), Some(e)) => self.data.get(s..e),
            _ => None,
        };
        slice.ok_or_else(|| {
            FormatError::malformed(
                self.path,
                field,
                Position::Offset(off),
                format!(
                    "needs {len} bytes but the file ends at {} (truncated?)",
                    self.data.len()
                ),
            )
        })
    }

    fn arr<const N: usize>(&self, off: u64, field: &str) -> Result<[u8; N]> {
        let b = self.bytes(off, N as u64, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub(crate) fn i32(&self, off: u64, field: &str) -> Result<i32> {
        let a = self.arr::<4>(off, field)?;
        Ok(match self.order {
            ByteOrder::Little => i32::from_le_bytes(a),
            ByteOrder::Big => i32::from_be_bytes(a),
        })
    }

    pub(crate) fn i64(&self, off: u64, field: &str) -> Result<i64> {
        let a = self.arr::<8>(off, field)?;
        Ok(match self.order {
            ByteOrder::Little => i64::from_le_bytes(a),
            ByteOrder::Big => i64::from_be_bytes(a),
        })
    }

    /// `n` consecutive i64 starting at `off`; the range is checked before allocating.
    fn i64s(&self, off: u64, n: u64, field: &str) -> Result<Vec<i64>> {
        let len = n
            .checked_mul(8)
            .ok_or_else(|| self.err(off, field, "count overflows"))?;
        let b = self.bytes(off, len, field)?;
        Ok(b.chunks_exact(8)
            .map(|c| {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                match self.order {
                    ByteOrder::Little => i64::from_le_bytes(a),
                    ByteOrder::Big => i64::from_be_bytes(a),
                }
            })
            .collect())
    }

    pub(crate) fn err(&self, off: u64, field: &str, msg: impl Into<String>) -> FormatError {
        FormatError::malformed(self.path, field, Position::Offset(off), msg)
    }
}

/// Parses META1 and META2 of one physical file.
pub fn parse_header(path: &Path, data: &[u8]) -> Result<FileHeader> {
    let file_len = data.len() as u64;
    if file_len < 8 {
        return Err(FormatError::malformed(
            path,
            "magic",
            Position::Offset(0),
            format!("file is {file_len} bytes, too short for a SION header"),
        ));
    }
    if data.get(0..4) != Some(b"sion".as_slice()) {
        return Err(FormatError::malformed(
            path,
            "magic",
            Position::Offset(0),
            format!(
                "expected \"sion\", found {:02x?}",
                data.get(0..4).unwrap_or_default()
            ),
        ));
    }
    let mut endianness_bytes = [0u8; 4];
    endianness_bytes.copy_from_slice(data.get(4..8).unwrap_or(&[0; 4]));
    // The word is `e | e << 24` (+ 0x0101 << 8 for big-endian user data), so its
    // first and last bytes are equal whichever order it was written in.
    let [e0, m1, m2, e3] = endianness_bytes;
    if e0 != e3 || e0 > 1 || m1 != m2 || m1 > 1 {
        return Err(FormatError::malformed(
            path,
            "endianness word",
            Position::Offset(4),
            format!("unexpected bytes {endianness_bytes:02x?}"),
        ));
    }
    let byte_order = if e0 == 1 {
        ByteOrder::Big
    } else {
        ByteOrder::Little
    };
    let r = Reader {
        data,
        order: byte_order,
        path,
    };
    // SIONlib writes 1000 * major + minor (1007 for 1.7) and its patch level;
    // formats 3 to 5 come from SIONlib 1.x and 2.x. Anything else (0xFFFFFFFF,
    // zeros) is not a SION file of ours, or a damaged one.
    let version = r.i32(8, "SIONlib version")?;
    if !(1000..3000).contains(&version) {
        return Err(r.err(
            8,
            "SIONlib version",
            format!(
                "{version} (0x{:08x}) is not a SIONlib version word (1000 * major + minor, major 1 or 2)",
                version as u32
            ),
        ));
    }
    let patch = r.i32(12, "SIONlib patch level")?;
    if !(0..1000).contains(&patch) {
        return Err(r.err(
            12,
            "SIONlib patch level",
            format!(
                "{patch} (0x{:08x}) is not a patch level (0 to 999)",
                patch as u32
            ),
        ));
    }
    let format_version = r.i32(16, "file format version")?;
    if !(3..=5).contains(&format_version) {
        return Err(r.err(
            16,
            "file format version",
            format!("{format_version} is not supported (3–5 are)"),
        ));
    }
    let fsblksize = r.i32(20, "fsblksize")?;
    let fsblksize = u64::try_from(fsblksize)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| r.err(20, "fsblksize", format!("{fsblksize} is not positive")))?;
    let ntasks_raw = r.i32(24, "ntasks")?;
    let ntasks = u64::try_from(ntasks_raw)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| r.err(24, "ntasks", format!("{ntasks_raw} is not positive")))?;
    let meta1 = meta1_len(ntasks).unwrap_or(u64::MAX);
    if meta1 > file_len {
        return Err(r.err(
            24,
            "ntasks",
            format!("{ntasks} tasks need a {meta1}-byte header but the file has {file_len} bytes"),
        ));
    }
    // meta1 <= file_len, so ntasks fits in usize from here on.
    let n = ntasks as usize;
    let nfiles_raw = r.i32(28, "nfiles")?;
    let nfiles = u32::try_from(nfiles_raw)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| r.err(28, "nfiles", format!("{nfiles_raw} is not positive")))?;
    let filenumber = r.i32(32, "filenumber")?;
    let flag1 = r.i64(36, "flag1")?;
    let flag2 = r.i64(44, "flag2")?;
    let prefix_bytes = r.bytes(52, PREFIX_LEN as u64, "filename prefix")?;
    let plen = prefix_bytes
        .iter()
        .position(|b| *b == 0)
        .unwrap_or(prefix_bytes.len());
    let prefix = String::from_utf8_lossy(prefix_bytes.get(..plen).unwrap_or_default()).into_owned();
    let globalranks = r.i64s(META1_FIXED_LEN, ntasks, "globalranks")?;
    let cs_off = META1_FIXED_LEN + 8 * ntasks;
    let raw_chunks = r.i64s(cs_off, ntasks, "chunksizes")?;
    let mut chunksizes = Vec::with_capacity(n);
    for (i, c) in raw_chunks.iter().enumerate() {
        let v = u64::try_from(*c).map_err(|_| {
            r.err(
                cs_off + 8 * i as u64,
                "chunksizes",
                format!("task {i}: negative chunk size {c}"),
            )
        })?;
        chunksizes.push(v);
    }
    // Format ≥ 4 stores already-expanded sizes; format 3 stored the request,
    // which the reader aligns itself.
    let effective_chunksizes: Vec<u64> = if format_version <= 3 {
        let mut v = Vec::with_capacity(n);
        for (i, c) in chunksizes.iter().enumerate() {
            v.push(align_up(*c, fsblksize).ok_or_else(|| {
                r.err(
                    cs_off + 8 * i as u64,
                    "chunksizes",
                    "chunk size overflows when aligned",
                )
            })?);
        }
        v
    } else {
        chunksizes.clone()
    };
    let mc_off = META1_FIXED_LEN + 16 * ntasks;
    let maxchunks_raw = r.i32(mc_off, "maxchunks")?;
    let maxchunks = u64::try_from(maxchunks_raw)
        .map_err(|_| r.err(mc_off, "maxchunks", format!("{maxchunks_raw} is negative")))?;
    let sov_raw = r.i64(mc_off + 4, "start_of_varheader")?;
    let start_of_varheader = u64::try_from(sov_raw)
        .ok()
        .filter(|v| *v >= meta1 && *v <= file_len)
        .ok_or_else(|| {
            r.err(
                mc_off + 4,
                "start_of_varheader",
                format!("{sov_raw} is outside the file (META1 ends at {meta1}, file has {file_len} bytes)"),
            )
        })?;
    let start_of_data = align_up(meta1, fsblksize)
        .ok_or_else(|| r.err(20, "fsblksize", "start of data overflows"))?;
    let mut globalskip: u64 = 0;
    for (i, c) in effective_chunksizes.iter().enumerate() {
        globalskip = globalskip.checked_add(*c).ok_or_else(|| {
            r.err(
                cs_off + 8 * i as u64,
                "chunksizes",
                "sum of chunk sizes overflows",
            )
        })?;
    }

    // META2: blockcount[n], blocksizes[maxchunks][n], optional mapping.
    let avail = file_len - start_of_varheader;
    let meta2_len = maxchunks
        .checked_add(1)
        .and_then(|m| m.checked_mul(ntasks))
        .and_then(|m| m.checked_mul(8));
    let meta2_len = match meta2_len {
        Some(l) if l <= avail => l,
        _ => {
            return Err(r.err(
                mc_off,
                "maxchunks",
                format!(
                    "{maxchunks} blocks for {ntasks} tasks need more META2 bytes than the {avail} after offset {start_of_varheader}"
                ),
            ));
        }
    };
    let bc_raw = r.i64s(start_of_varheader, ntasks, "blockcount")?;
    let mut blockcount = Vec::with_capacity(n);
    for (i, b) in bc_raw.iter().enumerate() {
        let off = start_of_varheader + 8 * i as u64;
        let v = u64::try_from(*b)
            .ok()
            .filter(|v| *v <= maxchunks)
            .ok_or_else(|| {
                r.err(
                    off,
                    "blockcount",
                    format!("task {i}: {b} blocks, outside 0..={maxchunks} (maxchunks)"),
                )
            })?;
        blockcount.push(v);
    }
    let bs_off = start_of_varheader + 8 * ntasks;
    let bs_raw = r.i64s(bs_off, maxchunks * ntasks, "blocksizes")?;
    let mut blocksizes = Vec::with_capacity(bs_raw.len());
    for (idx, s) in bs_raw.iter().enumerate() {
        let i = idx % n;
        let b = (idx / n) as u64;
        let off = bs_off + 8 * idx as u64;
        let used = blockcount.get(i).is_some_and(|c| b < *c);
        if !used {
            // Unused slots are 0 (SIONlib 1.7.6) or -1 (fileformat.dox); either is fine.
            blocksizes.push(0);
            continue;
        }
        let chunk = effective_chunksizes.get(i).copied().unwrap_or(0);
        let v = u64::try_from(*s)
            .ok()
            .filter(|v| *v <= chunk)
            .ok_or_else(|| {
                r.err(
                    off,
                    "blocksizes",
                    format!("task {i} block {b}: size {s} outside 0..={chunk} (its chunk size)"),
                )
            })?;
        blocksizes.push(v);
    }
    let mut mapping = Vec::new();
    let map_off = start_of_varheader + meta2_len;
    if file_len.saturating_sub(map_off) >= 4 {
        let ms = r.i32(map_off, "mapping_size")?;
        let ms = u64::try_from(ms)
            .ok()
            .filter(|m| {
                m.checked_mul(8)
                    .is_some_and(|l| l <= file_len - map_off - 4)
            })
            .ok_or_else(|| {
                r.err(
                    map_off,
                    "mapping_size",
                    format!("{ms} entries do not fit in the file"),
                )
            })?;
        mapping.reserve(ms as usize);
        for k in 0..ms {
            let off = map_off + 4 + 8 * k;
            mapping.push((r.i32(off, "mapping")?, r.i32(off + 4, "mapping")?));
        }
    }
    let h = FileHeader {
        byte_order,
        endianness_bytes,
        user_data_big_endian: m1 == 1,
        sion_version_major: version / 1000,
        sion_version_minor: version % 1000,
        sion_patch_level: patch,
        format_version,
        fsblksize,
        ntasks: n,
        nfiles,
        filenumber,
        flag1,
        flag2,
        keyval_mode: flag1 >> 32,
        prefix,
        globalranks,
        chunksizes,
        effective_chunksizes,
        maxchunks,
        start_of_varheader,
        start_of_data,
        globalskip,
        blockcount,
        blocksizes,
        mapping,
        file_len,
    };
    check_blocks_in_file(&h, &r)?;
    Ok(h)
}

/// Every used block must lie inside the file (chunk sizes pointing past the end
/// are the typical corruption).
fn check_blocks_in_file(h: &FileHeader, r: &Reader<'_>) -> Result<()> {
    let cs_off = META1_FIXED_LEN + 8 * h.ntasks as u64;
    let mut start = h.start_of_data;
    for i in 0..h.ntasks {
        let count = h.blockcount.get(i).copied().unwrap_or(0);
        for b in 0..count {
            let size = h.block_size(i, b).unwrap_or(0);
            let end = b
                .checked_mul(h.globalskip)
                .and_then(|o| o.checked_add(start))
                .and_then(|o| o.checked_add(size));
            match end {
                Some(e) if e <= h.file_len => {}
                _ => {
                    return Err(r.err(
                        cs_off + 8 * i as u64,
                        "chunksizes",
                        format!(
                            "task {i} block {b} ({size} bytes) would end past the end of the file ({} bytes)",
                            h.file_len
                        ),
                    ));
                }
            }
        }
        start = start.saturating_add(h.effective_chunksizes.get(i).copied().unwrap_or(0));
    }
    Ok(())
}
