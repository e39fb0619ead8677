//! Opening a SION file set (`name`, `name.000001`, …) and yielding each task's
//! logical byte stream.
//!
//! Files are memory-mapped; a task's stream is a list of borrowed block slices
//! (`blockcount` blocks, `globalskip` apart), so nothing is copied unless a
//! caller asks for a contiguous view of a multi-block stream.
use std::borrow::Cow;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::header::{FileHeader, parse_header};
use crate::error::{FormatError, Position, Result};

/// Files smaller than this are read into memory instead of mapped (and empty
/// files cannot be mapped at all).
const MAP_THRESHOLD: u64 = 64 * 1024;

/// The bytes of one physical file.
enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// One physical file of a set.
pub struct SionFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its parsed metadata.
    pub header: FileHeader,
    data: Storage,
}

impl SionFile {
    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.data.bytes()
    }
}

impl std::fmt::Debug for SionFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SionFile")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

/// Where a global rank lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TaskLoc {
    file: usize,
    local: usize,
}

/// A whole SION file set, indexed by global rank.
#[derive(Debug)]
pub struct SionSet {
    files: Vec<SionFile>,
    tasks: Vec<TaskLoc>,
}

/// One block of a task's stream.
#[derive(Debug, Clone, Copy)]
pub struct BlockRef<'a> {
    /// Index of the physical file in the set.
    pub file: usize,
    /// Offset of the block in that file.
    pub offset: u64,
    /// The block's valid bytes.
    pub data: &'a [u8],
}

/// The logical byte stream of one task: its blocks in order.
#[derive(Debug, Clone)]
pub struct TaskStream<'a> {
    /// Global rank.
    pub rank: usize,
    /// Path of the physical file holding it.
    pub path: &'a Path,
    /// The blocks.
    pub blocks: Vec<BlockRef<'a>>,
}

impl<'a> TaskStream<'a> {
    /// Total valid bytes.
    pub fn len(&self) -> u64 {
        self.blocks.iter().map(|b| b.data.len() as u64).sum()
    }

    /// True when the task wrote nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stream as one slice: borrowed when it is a single block, copied otherwise.
    pub fn contiguous(&self) -> Cow<'a, [u8]> {
        match self.blocks.as_slice() {
            [] => Cow::Borrowed(&[]),
            [one] => Cow::Borrowed(one.data),
            many => {
                let mut v = Vec::with_capacity(many.iter().map(|b| b.data.len()).sum());
                for b in many {
                    v.extend_from_slice(b.data);
                }
                Cow::Owned(v)
            }
        }
    }

    /// The file offset of logical byte `pos` of the stream (for error messages);
    /// the end of the last block when `pos` is past the end.
    pub fn file_offset(&self, pos: u64) -> u64 {
        let mut rest = pos;
        for b in &self.blocks {
            let len = b.data.len() as u64;
            if rest < len {
                return b.offset + rest;
            }
            rest -= len;
        }
        self.blocks
            .last()
            .map(|b| b.offset + b.data.len() as u64)
            .unwrap_or(0)
    }
}

/// Name of physical file `k` of the set whose file 0 is `base` (`name.%06d`).
pub fn multi_file_name(base: &Path, k: u32) -> PathBuf {
    if k == 0 {
        return base.to_path_buf();
    }
    let mut s = base.as_os_str().to_owned();
    s.push(format!(".{k:06}"));
    PathBuf::from(s)
}

/// How a set's files are mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Pages are read as they are touched.
    OnDemand,
    /// Every byte will be read once, front to back: the kernel is told to read
    /// ahead (MADV_SEQUENTIAL), and the reader lets the pages it is done with go
    /// ([`SionSet::release`]). (Populating the whole mapping up front, measured,
    /// saved no CPU and put the whole file in the resident set at once.)
    Whole,
}

fn load(path: &Path, access: Access) -> Result<Storage> {
    let f = std::fs::File::open(path).map_err(|e| FormatError::io(path, e))?;
    let len = f.metadata().map_err(|e| FormatError::io(path, e))?.len();
    if len < MAP_THRESHOLD {
        // Read through the handle already open (not a second open by name),
        // the size it had when opened, as a mapping would: one read, where
        // `read_to_end` also asked the size again, the position, and read
        // once more to see the end (a thousand small files: 3 of 7 calls).
        let mut v = vec![0; len as usize];
        std::io::Read::read_exact(&mut &f, &mut v).map_err(|e| {
            let e = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "ended before the {len} bytes it had when opened (changed while read?)"
                    ),
                )
            } else {
                e
            };
            FormatError::io(path, e)
        })?;
        return Ok(Storage::Owned(v));
    }
    // SAFETY: the map is read-only and private to this process. If another
    // process truncates the file while it is mapped, reads past the new end
    // fault (SIGBUS); raw benchmark outputs are immutable once collected, which
    // is the contract of the `raw/` store this reader serves.
    let m = unsafe { Mmap::map(&f) }.map_err(|e| FormatError::io(path, e))?;
    #[cfg(unix)]
    if access == Access::Whole
        && let Err(e) = m.advise(memmap2::Advice::Sequential)
    {
        tracing::debug!(error = %e, "madvise(MADV_SEQUENTIAL) refused");
    }
    Ok(Storage::Mapped(m))
}

impl SionSet {
    /// Opens the set whose file 0 is `path`, following `nfiles` to `path.000001`, ….
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, Access::OnDemand)
    }

    /// [`SionSet::open`] for a reader that reads every byte once, front to
    /// back (the LinkTest ingest): the kernel reads ahead.
    pub fn open_whole(path: &Path) -> Result<Self> {
        Self::open_with(path, Access::Whole)
    }

    fn open_with(path: &Path, access: Access) -> Result<Self> {
        let first = load(path, access)?;
        let header = parse_header(path, first.bytes())?;
        let nfiles = header.nfiles;
        let mut files = vec![SionFile {
            path: path.to_path_buf(),
            header,
            data: first,
        }];
        for k in 1..nfiles {
            let p = multi_file_name(path, k);
            let data = load(&p, access)?;
            let header = parse_header(&p, data.bytes())?;
            files.push(SionFile {
                path: p,
                header,
                data,
            });
        }
        Self::index(files)
    }

    /// A set from in-memory files (file 0 first); `path` names it in errors.
    pub fn from_bytes(path: &Path, files: Vec<Vec<u8>>) -> Result<Self> {
        let mut out = Vec::with_capacity(files.len());
        for (k, data) in files.into_iter().enumerate() {
            let p = multi_file_name(path, k as u32);
            let header = parse_header(&p, &data)?;
            out.push(SionFile {
                path: p,
                header,
                data: Storage::Owned(data),
            });
        }
        if out.is_empty() {
            return Err(FormatError::malformed(
                path,
                "file set",
                Position::None,
                "no files",
            ));
        }
        let want = out.first().map(|f| f.header.nfiles as usize).unwrap_or(0);
        if want != out.len() {
            return Err(FormatError::malformed(
                path,
                "nfiles",
                Position::Offset(28),
                format!("header says {want} files, {} given", out.len()),
            ));
        }
        Self::index(out)
    }

    /// Checks that the files form one set and builds the global-rank index.
    fn index(files: Vec<SionFile>) -> Result<Self> {
        let nfiles = files.first().map(|f| f.header.nfiles).unwrap_or(0);
        let mut total: usize = 0;
        for (k, f) in files.iter().enumerate() {
            if f.header.nfiles != nfiles {
                return Err(FormatError::malformed(
                    &f.path,
                    "nfiles",
                    Position::Offset(28),
                    format!("{} here but {nfiles} in file 0", f.header.nfiles),
                ));
            }
            // Serial writers put 1 for a single file, so only a real set is checked.
            if nfiles > 1 && f.header.filenumber != k as i32 {
                return Err(FormatError::malformed(
                    &f.path,
                    "filenumber",
                    Position::Offset(32),
                    format!("{} but this is file {k} of the set", f.header.filenumber),
                ));
            }
            total = total.saturating_add(f.header.ntasks);
        }
        // `total` is bounded by the file sizes (each task costs 16 header bytes).
        let mut tasks: Vec<Option<TaskLoc>> = vec![None; total];
        for (k, f) in files.iter().enumerate() {
            for (i, g) in f.header.globalranks.iter().enumerate() {
                let off = super::META1_FIXED_LEN + 8 * i as u64;
                let slot = usize::try_from(*g)
                    .ok()
                    .and_then(|g| tasks.get_mut(g))
                    .ok_or_else(|| {
                        FormatError::malformed(
                            &f.path,
                            "globalranks",
                            Position::Offset(off),
                            format!("task {i}: global rank {g} outside 0..{total}"),
                        )
                    })?;
                if slot.is_some() {
                    return Err(FormatError::malformed(
                        &f.path,
                        "globalranks",
                        Position::Offset(off),
                        format!("task {i}: global rank {g} appears twice in the set"),
                    ));
                }
                *slot = Some(TaskLoc { file: k, local: i });
            }
        }
        // Every slot is filled: `total` ranks were placed without duplicates.
        let tasks: Vec<TaskLoc> = tasks.into_iter().flatten().collect();
        if let Some(f0) = files.first() {
            let map = &f0.header.mapping;
            if nfiles > 1 && !map.is_empty() {
                if map.len() != total {
                    return Err(FormatError::malformed(
                        &f0.path,
                        "mapping_size",
                        Position::Offset(mapping_offset(&f0.header)),
                        format!("{} entries for {total} tasks", map.len()),
                    ));
                }
                for (g, ((mf, ml), loc)) in map.iter().zip(&tasks).enumerate() {
                    if *mf as i64 != loc.file as i64 || *ml as i64 != loc.local as i64 {
                        return Err(FormatError::malformed(
                            &f0.path,
                            "mapping",
                            Position::Offset(mapping_offset(&f0.header) + 4 + 8 * g as u64),
                            format!(
                                "global rank {g} mapped to file {mf} task {ml}, but globalranks put it in file {} task {}",
                                loc.file, loc.local
                            ),
                        ));
                    }
                }
            }
        }
        Ok(SionSet { files, tasks })
    }

    /// Tasks in the whole set.
    pub fn ntasks(&self) -> usize {
        self.tasks.len()
    }

    /// The physical files.
    pub fn files(&self) -> &[SionFile] {
        &self.files
    }

    /// Path of file 0.
    pub fn path(&self) -> &Path {
        self.files
            .first()
            .map(|f| f.path.as_path())
            .unwrap_or(Path::new(""))
    }

    /// (file index, local task) of a global rank.
    pub fn location(&self, rank: usize) -> Option<(usize, usize)> {
        self.tasks.get(rank).map(|l| (l.file, l.local))
    }

    /// The logical stream of global rank `rank` (`None` if out of range).
    pub fn task(&self, rank: usize) -> Option<TaskStream<'_>> {
        let loc = self.tasks.get(rank)?;
        let f = self.files.get(loc.file)?;
        let h = &f.header;
        let start = h.chunk_start(loc.local)?;
        let count = *h.blockcount.get(loc.local)?;
        let data = f.bytes();
        let mut blocks = Vec::with_capacity(count.min(1024) as usize);
        for b in 0..count {
            let size = h.block_size(loc.local, b)?;
            // Bounds were checked when the header was parsed; `get` keeps it panic-free.
            let off = b.checked_mul(h.globalskip)?.checked_add(start)?;
            let s = usize::try_from(off).ok()?;
            let e = s.checked_add(usize::try_from(size).ok()?)?;
            blocks.push(BlockRef {
                file: loc.file,
                offset: off,
                data: data.get(s..e)?,
            });
        }
        Some(TaskStream {
            rank,
            path: &f.path,
            blocks,
        })
    }

    /// Tells the kernel that the streams of `ranks` will not be read again, so
    /// their pages leave this process's resident set (they stay in the page
    /// cache, and a later read brings them back unchanged). For readers that go
    /// through a large file once; small files read into memory are left alone.
    pub fn release(&self, ranks: std::ops::Range<usize>) {
        const PAGE: usize = 4096;
        // Per file: the span of the ranks' blocks (chunks lie in rank order
        // in the usual layouts; a span that takes in other ranks' pages only
        // costs a re-read from the page cache).
        let mut spans: Vec<Option<(usize, usize)>> = vec![None; self.files.len()];
        for r in ranks {
            let Some(t) = self.task(r) else { continue };
            for b in &t.blocks {
                let (Ok(s), Some(span)) = (usize::try_from(b.offset), spans.get_mut(b.file)) else {
                    continue;
                };
                let e = s.saturating_add(b.data.len());
                *span = Some(match *span {
                    Some((a, z)) => (a.min(s), z.max(e)),
                    None => (s, e),
                });
            }
        }
        for (f, span) in self.files.iter().zip(spans) {
            let (Storage::Mapped(m), Some((s, e))) = (&f.data, span) else {
                continue;
            };
            let (s, e) = (s.next_multiple_of(PAGE), e / PAGE * PAGE);
            if e > s && e <= m.len() {
                // SAFETY: the mapping is a private read-only map of a file this
                // process never writes; MADV_DONTNEED only drops its page table
                // entries, and any later access re-reads the same bytes from
                // the file (the immutability `load` already relies on).
                let r = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, s, e - s)
                };
                if let Err(err) = r {
                    tracing::debug!(error = %err, "madvise(MADV_DONTNEED) refused");
                }
            }
        }
    }

    /// Every task's stream, in global-rank order.
    pub fn tasks(&self) -> impl Iterator<Item = TaskStream<'_>> {
        (0..self.ntasks()).filter_map(|r| self.task(r))
    }
}

fn mapping_offset(h: &FileHeader) -> u64 {
    h.start_of_varheader + 8 * (h.maxchunks + 1) * h.ntasks as u64
}
