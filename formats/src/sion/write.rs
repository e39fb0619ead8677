//! Writing SION file sets (format 5, as SIONlib 1.7.6 lays them out).
//!
//! The writer takes each task's blocks, chooses chunk sizes by SIONlib's rules
//! (non-collective: every chunk rounded up to `fsblksize`; collective: only the
//! last task of each collector group is enlarged so the group ends on a block
//! boundary), and emits META1, the data area and META2 (+ the rank mapping in
//! file 0 of a multi-file set).
use std::path::{Path, PathBuf};

use super::header::ByteOrder;
use super::read::multi_file_name;
use super::{KEYVAL_NONE, PREFIX_LEN, align_up, meta1_len};
use crate::error::{FormatError, Position, Result};

/// How chunk sizes are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkLayout {
    /// `sion_paropen` without `collective`: each chunk rounded up to `fsblksize`.
    Aligned,
    /// `collective` mode: tasks in groups of `group_size`, only each group's last
    /// chunk is enlarged to end on an `fsblksize` boundary.
    Collective {
        /// Tasks per collector group (≥ 1).
        group_size: usize,
    },
}

/// Options of the writer.
#[derive(Debug, Clone)]
pub struct SionWriteOptions {
    /// File-system block size (≥ 1; 1 disables alignment as `siondefrag -q 1`).
    pub fsblksize: u32,
    /// Physical files; tasks are split into `nfiles` contiguous rank ranges.
    pub nfiles: u32,
    /// Byte order of the metadata.
    pub byte_order: ByteOrder,
    /// Sets the "user data is big-endian" flag.
    pub user_data_big_endian: bool,
    /// Chunk size rule.
    pub layout: ChunkLayout,
}

impl Default for SionWriteOptions {
    fn default() -> Self {
        Self {
            fsblksize: 4096,
            nfiles: 1,
            byte_order: ByteOrder::native(),
            user_data_big_endian: ByteOrder::native() == ByteOrder::Big,
            layout: ChunkLayout::Aligned,
        }
    }
}

/// What one task wrote.
#[derive(Debug, Clone, Default)]
pub struct TaskData<'a> {
    /// Requested chunk size (at least the largest block is used).
    pub chunksize: u64,
    /// The task's blocks, in order.
    pub blocks: Vec<&'a [u8]>,
}

impl<'a> TaskData<'a> {
    /// A single-block task.
    pub fn single(data: &'a [u8]) -> Self {
        Self {
            chunksize: data.len() as u64,
            blocks: vec![data],
        }
    }

    /// A stream split into blocks of at most `chunksize` bytes (at least one block).
    pub fn split(data: &'a [u8], chunksize: u64) -> Self {
        let size = usize::try_from(chunksize.max(1)).unwrap_or(usize::MAX);
        let mut blocks: Vec<&[u8]> = data.chunks(size).collect();
        if blocks.is_empty() {
            blocks.push(&[]);
        }
        Self { chunksize, blocks }
    }
}

fn bad(path: &Path, field: &str, msg: impl Into<String>) -> FormatError {
    FormatError::malformed(path, field, Position::None, msg)
}

/// Encodes a set in memory: one `Vec<u8>` per physical file (file 0 first).
/// `name` is the file name recorded as the prefix (and used in errors).
pub fn encode_sion_set(
    name: &Path,
    tasks: &[TaskData<'_>],
    opts: &SionWriteOptions,
) -> Result<Vec<Vec<u8>>> {
    let n = tasks.len();
    let nfiles = opts.nfiles as usize;
    if n == 0 {
        return Err(bad(name, "ntasks", "a SION file needs at least one task"));
    }
    if nfiles == 0 || nfiles > n {
        return Err(bad(
            name,
            "nfiles",
            format!("{nfiles} files for {n} tasks (need 1..={n})"),
        ));
    }
    if opts.fsblksize == 0 || i32::try_from(opts.fsblksize).is_err() {
        return Err(bad(name, "fsblksize", "must be in 1..=i32::MAX"));
    }
    if i32::try_from(n).is_err() {
        return Err(bad(name, "ntasks", "more tasks than an i32 can count"));
    }
    // Contiguous rank ranges: file k holds [k n / nfiles, (k+1) n / nfiles).
    let bounds: Vec<usize> = (0..=nfiles).map(|k| k * n / nfiles).collect();
    let mut mapping = Vec::with_capacity(if nfiles > 1 { n } else { 0 });
    for k in 0..nfiles {
        let (lo, hi) = (bounds[k], bounds[k + 1]);
        for l in 0..hi - lo {
            mapping.push((k as i32, l as i32));
        }
    }
    let prefix = name
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(nfiles);
    for k in 0..nfiles {
        let (lo, hi) = (bounds[k], bounds[k + 1]);
        let file_tasks = tasks.get(lo..hi).unwrap_or_default();
        let with_mapping = nfiles > 1 && k == 0;
        out.push(encode_file(
            &multi_file_name(name, k as u32),
            &prefix,
            file_tasks,
            lo,
            k as i32,
            opts,
            if with_mapping { Some(&mapping) } else { None },
        )?);
    }
    Ok(out)
}

/// Writes a set to disk: `path`, `path.000001`, …; returns the paths written.
pub fn write_sion_set(
    path: &Path,
    tasks: &[TaskData<'_>],
    opts: &SionWriteOptions,
) -> Result<Vec<PathBuf>> {
    let files = encode_sion_set(path, tasks, opts)?;
    let mut paths = Vec::with_capacity(files.len());
    for (k, data) in files.iter().enumerate() {
        let p = multi_file_name(path, k as u32);
        std::fs::write(&p, data).map_err(|e| FormatError::io(&p, e))?;
        paths.push(p);
    }
    Ok(paths)
}

/// Chunk sizes for one file's tasks by the layout rule.
fn chunk_sizes(tasks: &[TaskData<'_>], opts: &SionWriteOptions) -> Option<Vec<u64>> {
    let fs = u64::from(opts.fsblksize);
    let need: Vec<u64> = tasks
        .iter()
        .map(|t| {
            let max_block = t.blocks.iter().map(|b| b.len() as u64).max().unwrap_or(0);
            t.chunksize.max(max_block).max(1)
        })
        .collect();
    match opts.layout {
        ChunkLayout::Aligned => need.iter().map(|c| align_up(*c, fs)).collect(),
        ChunkLayout::Collective { group_size } => {
            let g = group_size.max(1);
            let mut out = need.clone();
            for start in (0..need.len()).step_by(g) {
                let end = (start + g).min(need.len());
                let sum: u64 = need.get(start..end)?.iter().sum();
                let pad = align_up(sum, fs)? - sum;
                let last = out.get_mut(end - 1)?;
                *last = last.checked_add(pad)?;
            }
            Some(out)
        }
    }
}

struct Out {
    buf: Vec<u8>,
    order: ByteOrder,
}

impl Out {
    fn put(&mut self, off: usize, bytes: &[u8]) {
        // `buf` was sized for the whole layout before any put.
        if let Some(dst) = self.buf.get_mut(off..off + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
    }
    fn i32(&mut self, off: usize, v: i32) {
        let b = match self.order {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        };
        self.put(off, &b);
    }
    fn i64(&mut self, off: usize, v: i64) {
        let b = match self.order {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        };
        self.put(off, &b);
    }
}

fn encode_file(
    path: &Path,
    prefix: &str,
    tasks: &[TaskData<'_>],
    first_rank: usize,
    filenumber: i32,
    opts: &SionWriteOptions,
    mapping: Option<&Vec<(i32, i32)>>,
) -> Result<Vec<u8>> {
    let n = tasks.len();
    let overflow = || bad(path, "layout", "file size overflows");
    let chunks = chunk_sizes(tasks, opts).ok_or_else(overflow)?;
    let fs = u64::from(opts.fsblksize);
    let meta1 = meta1_len(n as u64).ok_or_else(overflow)?;
    let start_of_data = align_up(meta1, fs).ok_or_else(overflow)?;
    let globalskip: u64 = chunks.iter().sum();
    // A task that wrote nothing still owns one (empty) block, as in SIONlib.
    let counts: Vec<u64> = tasks.iter().map(|t| t.blocks.len().max(1) as u64).collect();
    let maxchunks = counts.iter().copied().max().unwrap_or(1);
    if i32::try_from(maxchunks).is_err() {
        return Err(bad(path, "maxchunks", "too many blocks"));
    }
    let sov = maxchunks
        .checked_mul(globalskip)
        .and_then(|d| d.checked_add(start_of_data))
        .ok_or_else(overflow)?;
    let meta2 = (maxchunks + 1) * n as u64 * 8;
    let map_len = mapping.map(|m| 4 + 8 * m.len() as u64).unwrap_or(0);
    let total = sov
        .checked_add(meta2)
        .and_then(|t| t.checked_add(map_len))
        .and_then(|t| usize::try_from(t).ok())
        .ok_or_else(overflow)?;
    let mut o = Out {
        buf: vec![0u8; total],
        order: opts.byte_order,
    };
    o.put(0, b"sion");
    let e = u8::from(opts.byte_order == ByteOrder::Big);
    let u = u8::from(opts.user_data_big_endian);
    o.put(4, &[e, u, u, e]);
    o.i32(8, 1007);
    o.i32(12, 6);
    o.i32(16, 5);
    o.i32(20, opts.fsblksize as i32);
    o.i32(24, n as i32);
    o.i32(28, opts.nfiles as i32);
    o.i32(32, filenumber);
    o.i64(36, KEYVAL_NONE << 32);
    o.i64(44, 0);
    let pb = prefix.as_bytes();
    o.put(
        52,
        pb.get(..pb.len().min(PREFIX_LEN - 1)).unwrap_or_default(),
    );
    let base = super::META1_FIXED_LEN as usize;
    for i in 0..n {
        o.i64(base + 8 * i, (first_rank + i) as i64);
        o.i64(
            base + 8 * n + 8 * i,
            chunks.get(i).copied().unwrap_or(0) as i64,
        );
    }
    o.i32(base + 16 * n, maxchunks as i32);
    o.i64(base + 16 * n + 4, sov as i64);
    let mut start = start_of_data as usize;
    let sov = sov as usize;
    for (i, t) in tasks.iter().enumerate() {
        o.i64(sov + 8 * i, counts.get(i).copied().unwrap_or(1) as i64);
        for (b, block) in t.blocks.iter().enumerate() {
            let off = start + b * globalskip as usize;
            o.put(off, block);
            o.i64(sov + 8 * n + 8 * (b * n + i), block.len() as i64);
        }
        start += chunks.get(i).copied().unwrap_or(0) as usize;
    }
    if let Some(m) = mapping {
        let moff = sov + meta2 as usize;
        o.i32(moff, m.len() as i32);
        for (g, (f, l)) in m.iter().enumerate() {
            o.i32(moff + 4 + 8 * g, *f);
            o.i32(moff + 8 + 8 * g, *l);
        }
    }
    Ok(o.buf)
}
