//! Bandela text traces, one file per rank (`bandela.<rank>.txt`).
//!
//! Format v1 (from the record format proposed in reference/replay.md §3):
//! ```text
//! # bandela-replay v1  rank=<r> nranks=<n>        (comments start with '#')
//! H <rank> <nranks> <host_id>                       header, first record
//! C <seconds> [caliper=<idx>]                       computation before the next record
//! K <ord> <main_fn> isend <peer> <comm> <tag> <bytes> <req> <sym:0|1> [col=<idx>]
//! K <ord> <main_fn> irecv <peer|-1> <comm> <tag> <bytes> <req> <sym:0|1> [col=<idx>]
//! K <ord> <main_fn> wait <req>
//! K <ord> <main_fn> test <req> <completed:0|1>
//! K <ord> <main_fn> barrier <comm>
//! K <ord> <main_fn> get|put <peer> <comm> <bytes>
//! M comm <comm_id> <rank0,rank1,...>
//! M caliper push <idx> | M caliper pop | M ignore_next_col <idx>
//! ```
//! The manual's `format_event` layout (whitespace-separated `rank main kernel
//! dest|source comm tag count datatype request comput`, `-` for "none", a negative rank
//! −(r+1) marking a symmetric buffer) is accepted too (see [`RankTrace::open`]).
//! Records are read lazily; memory does not grow with the trace.
use std::borrow::Cow;
use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::{FormatError, Position, Result};

/// The longest line, newline included.
const MAX_LINE: usize = 1 << 16;

/// A communication kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kernel {
    /// Non-blocking send.
    Isend {
        peer: u32,
        comm: i64,
        tag: i64,
        bytes: u64,
        req: i64,
        sym: bool,
        col: Option<u32>,
    },
    /// Non-blocking receive (`peer` -1 = any source).
    Irecv {
        peer: i64,
        comm: i64,
        tag: i64,
        bytes: u64,
        req: i64,
        sym: bool,
        col: Option<u32>,
    },
    /// Wait for a request.
    Wait { req: i64 },
    /// Test a request (`completed` as traced).
    Test { req: i64, completed: bool },
    /// Barrier on a communicator.
    Barrier { comm: i64 },
    /// One-sided get.
    Get { peer: u32, comm: i64, bytes: u64 },
    /// One-sided put.
    Put { peer: u32, comm: i64, bytes: u64 },
}

/// One record of a rank's trace.
#[derive(Debug, Clone, PartialEq)]
pub enum BRecord {
    /// Computation burst (s) and the caliper it belongs to.
    Compute { seconds: f64, caliper: Option<u32> },
    /// A kernel of user routine `main_fn`.
    Kernel {
        ord: u64,
        main_fn: String,
        kernel: Kernel,
    },
    /// Communicator membership.
    Comm { id: i64, ranks: Vec<u32> },
    /// Caliper push.
    CaliperPush(u32),
    /// Caliper pop.
    CaliperPop,
    /// Marks the next collective with an ignore index.
    IgnoreNextCol(u32),
}

/// The header of a rank's trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankHeader {
    /// Rank.
    pub rank: u32,
    /// Ranks of the run.
    pub nranks: u32,
    /// Host the rank ran on.
    pub host: u32,
}

enum Layout {
    V1,
    FormatEvent,
}

/// Bytes of a rank trace's read buffer unless told otherwise.
pub const DEFAULT_BUFFER: usize = 16 << 10;

/// The smallest read buffer [`RankTrace::open_buffered`] uses.
pub const MIN_BUFFER: usize = 4 << 10;

/// Bytes of a rank file's first read, which finds the header and the first
/// records: a replay opens every rank before it starts, and a full buffer
/// there put a third of a 1,024-rank trace's bytes, and four fresh pages per
/// rank, on that one-threaded path (docs/replay.md, "Open files and read
/// buffers").
const FIRST_READ: usize = 2 << 10;

/// A rank file read through one buffer, its lines handed out where they lie
/// instead of copied out one by one.
struct Lines {
    file: File,
    /// `buf[start..end]` is read and not yet handed out; `buf.len()` is the
    /// part of the buffer in use (grown to `cap` after the first read, and
    /// past it only for a line longer than the buffer).
    buf: Vec<u8>,
    start: usize,
    end: usize,
    cap: usize,
    eof: bool,
}

impl Lines {
    fn new(file: File, cap: usize) -> Self {
        Self {
            file,
            buf: Vec::with_capacity(cap),
            start: 0,
            end: 0,
            cap,
            eof: false,
        }
    }

    /// The next line's range in [`Lines::bytes`], with its newline; without
    /// one for the file's last line if it has none, and for the first
    /// [`MAX_LINE`] bytes of a longer line. `None` at the end of the file.
    fn next(&mut self) -> std::io::Result<Option<Range<usize>>> {
        loop {
            let (s, e) = (self.start, self.end);
            let ahead = self.buf.get(s..e).unwrap_or_default();
            let window = ahead.get(..MAX_LINE).unwrap_or(ahead);
            let cut = match memchr::memchr(b'\n', window) {
                Some(i) => Some(s + i + 1),
                None if window.len() == MAX_LINE => Some(s + MAX_LINE),
                None if self.eof => (s < e).then_some(e),
                None => {
                    self.refill()?;
                    continue;
                }
            };
            if let Some(c) = cut {
                self.start = c;
            }
            return Ok(cut.map(|c| s..c));
        }
    }

    /// Moves the part of a line left to the front and reads on after it.
    fn refill(&mut self) -> std::io::Result<()> {
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        let used = self.buf.len();
        let mut want = if used == 0 {
            FIRST_READ.min(self.cap)
        } else {
            used.max(self.cap)
        };
        if self.end == want {
            // One line fills the buffer: grow it (at most to twice MAX_LINE,
            // since a line stops at MAX_LINE bytes).
            want *= 2;
        }
        if want > used {
            self.buf.resize(want, 0);
        }
        loop {
            let Some(room) = self.buf.get_mut(self.end..) else {
                return Ok(());
            };
            match self.file.read(room) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            return Ok(());
        }
    }

    fn bytes(&self, r: Range<usize>) -> &[u8] {
        self.buf.get(r).unwrap_or_default()
    }
}

/// A line's text, trimmed: borrowed from the buffer when it is UTF-8 (the
/// rule, checked strictly first since the lossy conversion is slower).
fn line_text(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s.trim()),
        Err(_) => Cow::Owned(String::from_utf8_lossy(bytes).trim().to_string()),
    }
}

/// Whether `s` can name a routine (a C or Fortran identifier, as the
/// tracer and the manual's traces write them).
fn is_routine_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Bytes of whitespace a line starts with (what [`line_text`] trims).
fn leading_ws(bytes: &[u8]) -> u64 {
    let s = String::from_utf8_lossy(bytes);
    (s.len() - s.trim_start().len()).min(bytes.len()) as u64
}

/// The longest computation burst accepted (s): 10^7 s, 116 days, longer
/// than any batch system lets a job run.
pub const MAX_BURST_S: f64 = 1e7;

/// The largest message accepted (bytes): it must fit in one node's memory
/// (1 PiB, `hostinfo::MAX_MEMORY_BYTES`).
pub const MAX_MESSAGE_BYTES: u64 = 1 << 50;

/// A lazily read rank trace.
pub struct RankTrace {
    path: PathBuf,
    src: Lines,
    line: u64,
    /// Bytes read so far.
    offset: u64,
    /// Byte offset of the last line read, and of its first word.
    line_start: u64,
    word_start: u64,
    /// A routine name's buffer handed back ([`RankTrace::reuse_name`]), which
    /// the next kernel's name is written into instead of a new one.
    spare_name: std::cell::Cell<String>,
    layout: Layout,
    /// The header (format_event files get rank from their first record, host 0).
    pub header: RankHeader,
    /// Records read ahead: a `format_event` line is a computation, then
    /// (`kernel`) its kernel.
    pending: Option<BRecord>,
    pending_kernel: Option<BRecord>,
}

fn err(path: &Path, field: &str, line: u64, col: usize, msg: impl Into<String>) -> FormatError {
    FormatError::malformed(path, field, Position::LineCol(line, col as u64 + 1), msg)
}

/// The words of a line with their byte columns. A record has at most a dozen
/// words: their bounds are kept in place, and only a longer line allocates.
struct Words<'a> {
    line: &'a str,
    head: [(u32, u32); HEAD_WORDS],
    n: usize,
    rest: Vec<(u32, u32)>,
}

const HEAD_WORDS: usize = 16;

impl<'a> Words<'a> {
    fn push(&mut self, start: usize, end: usize) {
        // Lines are at most 64 KiB (MAX_LINE), so bounds fit in u32.
        let w = (start as u32, end as u32);
        match self.head.get_mut(self.n) {
            Some(slot) => *slot = w,
            None => self.rest.push(w),
        }
        self.n += 1;
    }

    /// Word `i` and its byte column.
    fn get(&self, i: usize) -> Option<(usize, &'a str)> {
        let (s, e) = if i >= self.n {
            return None;
        } else if i < HEAD_WORDS {
            *self.head.get(i)?
        } else {
            *self.rest.get(i - HEAD_WORDS)?
        };
        let (s, e) = (s as usize, e as usize);
        Some((s, self.line.get(s..e)?))
    }

    fn first(&self) -> Option<(usize, &'a str)> {
        self.get(0)
    }

    fn len(&self) -> usize {
        self.n
    }

    fn iter(&self) -> impl Iterator<Item = (usize, &'a str)> + '_ {
        (0..self.n).filter_map(|i| self.get(i))
    }
}

/// Words of a line with their byte columns, split at whitespace as
/// `char::is_whitespace` says (an ASCII line is split byte by byte).
fn words(line: &str) -> Words<'_> {
    let mut out = Words {
        line,
        head: [(0, 0); HEAD_WORDS],
        n: 0,
        rest: Vec::new(),
    };
    let mut start = None;
    if line.is_ascii() {
        for (i, &b) in line.as_bytes().iter().enumerate() {
            // char::is_whitespace over ASCII (u8::is_ascii_whitespace leaves
            // out the vertical tab).
            if matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
                if let Some(s) = start.take() {
                    out.push(s, i);
                }
            } else if start.is_none() {
                start = Some(i);
            }
        }
    } else {
        for (i, c) in line.char_indices() {
            if c.is_whitespace() {
                if let Some(s) = start.take() {
                    out.push(s, i);
                }
            } else if start.is_none() {
                start = Some(i);
            }
        }
    }
    if let Some(s) = start {
        out.push(s, line.len());
    }
    out
}

/// MPT datatype codes seen in the manual: 14 is MPI_REAL (4 bytes). Other codes count
/// as 1-byte elements (documented in docs/replay.md).
fn datatype_size(code: i64) -> u64 {
    match code {
        14 => 4,
        _ => 1,
    }
}

impl RankTrace {
    /// Opens a rank trace; the layout is detected from the first non-comment line
    /// (`H ...` for v1, 10 whitespace-separated fields for format_event).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_buffered(path, DEFAULT_BUFFER)
    }

    /// [`RankTrace::open`] reading through a buffer of `capacity` bytes (a
    /// replay of many ranks holds one per rank).
    pub fn open_buffered(path: impl AsRef<Path>, capacity: usize) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let f = File::open(&path).map_err(|e| FormatError::io(&path, e))?;
        let mut t = Self {
            src: Lines::new(f, capacity.max(MIN_BUFFER)),
            path,
            line: 0,
            offset: 0,
            line_start: 0,
            word_start: 0,
            spare_name: std::cell::Cell::new(String::new()),
            layout: Layout::V1,
            header: RankHeader {
                rank: 0,
                nranks: 0,
                host: 0,
            },
            pending: None,
            pending_kernel: None,
        };
        let first = loop {
            let Some(r) = t.next_line()? else {
                return Err(err(
                    &t.path,
                    "header",
                    1,
                    0,
                    "empty trace (expected 'H <rank> <nranks> <host>')",
                ));
            };
            let bytes = t.src.bytes(r);
            t.word_start = t.line_start + leading_ws(bytes);
            let text = line_text(bytes);
            if !text.is_empty() {
                break text.into_owned();
            }
        };
        t.open_header(&first).map_err(|e| t.locate(e))?;
        Ok(t)
    }

    /// Reads the first record (`first`, trimmed): the header, or a
    /// `format_event` record.
    fn open_header(&mut self, first: &str) -> Result<()> {
        let t = self;
        let w = words(first);
        if w.first().map(|x| x.1) == Some("H") {
            let num = |i: usize, name: &str| -> Result<u32> {
                let (c, s) = w.get(i).unwrap_or((first.len(), ""));
                s.parse::<u32>().map_err(|_| {
                    err(
                        &t.path,
                        name,
                        t.line,
                        c,
                        format!("expected a non-negative integer, found '{s}'"),
                    )
                })
            };
            t.header = RankHeader {
                rank: num(1, "H.rank")?,
                nranks: num(2, "H.nranks")?,
                host: num(3, "H.host")?,
            };
            if t.header.rank >= t.header.nranks {
                return Err(err(
                    &t.path,
                    "H.rank",
                    t.line,
                    0,
                    "rank must be below nranks",
                ));
            }
        } else if w.len() == 10 {
            t.layout = Layout::FormatEvent;
            let (rank, rec, kernel) = t.parse_format_event(first)?;
            t.header = RankHeader {
                rank,
                nranks: rank + 1,
                host: 0,
            };
            t.pending = Some(rec);
            t.pending_kernel = kernel;
        } else {
            return Err(err(
                &t.path,
                "header",
                t.line,
                0,
                "expected 'H <rank> <nranks> <host>' or a 10-field format_event record",
            ));
        }
        Ok(())
    }

    /// `e` with its line and column also given as the byte offset in the
    /// file (columns count bytes of the line from its first word).
    fn locate(&self, e: FormatError) -> FormatError {
        match e {
            FormatError::Malformed {
                file,
                field,
                pos: Position::LineCol(line, col),
                message,
            } if line == self.line => FormatError::Malformed {
                file,
                field,
                pos: Position::Text {
                    offset: self.word_start + col.saturating_sub(1),
                    line,
                    col,
                },
                message,
            },
            e => e,
        }
    }

    /// Byte offset of the first word of the last record read: where an
    /// error about that record points.
    pub fn record_offset(&self) -> u64 {
        self.word_start
    }

    /// The next line's bytes before its comment (blank for a comment
    /// line), as a range in `src`; `None` at the end of the file.
    fn next_line(&mut self) -> Result<Option<Range<usize>>> {
        let Some(r) = self
            .src
            .next()
            .map_err(|e| FormatError::io(&self.path, e))?
        else {
            return Ok(None);
        };
        let bytes = self.src.bytes(r.clone());
        let n = bytes.len();
        self.line += 1;
        let start = self.offset;
        self.offset += n as u64;
        self.line_start = start;
        if n >= MAX_LINE && bytes.last() != Some(&b'\n') {
            return Err(err(
                &self.path,
                "line",
                self.line,
                0,
                "line longer than 64 KiB",
            ));
        }
        // Every record ends with a newline; a last line without one was cut
        // short (`C 0.` of `C 0.5`), and must not be read as a shorter value.
        if bytes.last() != Some(&b'\n') {
            let head = bytes.get(..n.min(60)).unwrap_or_default();
            return Err(FormatError::malformed(
                &self.path,
                "record",
                Position::Offset(start),
                format!(
                    "the file ends at byte {} in the middle of line {} ('{}'): it is cut short",
                    self.offset,
                    self.line,
                    String::from_utf8_lossy(head)
                ),
            ));
        }
        // `#` is ASCII, never part of a longer UTF-8 sequence: cutting the
        // bytes there cuts the text there.
        let body = memchr::memchr(b'#', bytes).unwrap_or(n.saturating_sub(1));
        Ok(Some(r.start..r.start + body))
    }

    /// The next record, `None` at the end.
    pub fn next_record(&mut self) -> Result<Option<BRecord>> {
        if let Some(r) = self.pending.take() {
            return Ok(Some(r));
        }
        if let Some(r) = self.pending_kernel.take() {
            return Ok(Some(r));
        }
        loop {
            let Some(r) = self.next_line()? else {
                return Ok(None);
            };
            // Parsed where it lies in the read buffer.
            let bytes = self.src.bytes(r);
            let lead = leading_ws(bytes);
            let text = line_text(bytes);
            if text.is_empty() {
                continue;
            }
            self.word_start = self.line_start + lead;
            let parsed = match self.layout {
                Layout::V1 => self.parse_v1(&text).map(|r| (r, None)),
                Layout::FormatEvent => self
                    .parse_format_event(&text)
                    .map(|(_, rec, kernel)| (rec, kernel)),
            };
            let (rec, kernel) = match parsed {
                Ok(x) => x,
                Err(e) => return Err(self.locate(e)),
            };
            self.pending_kernel = kernel;
            return Ok(Some(rec));
        }
    }

    fn parse_v1(&self, line: &str) -> Result<BRecord> {
        let w = words(line);
        let (p, ln) = (&self.path, self.line);
        let get = |i: usize, name: &str| -> Result<(usize, &str)> {
            w.get(i)
                .ok_or_else(|| err(p, name, ln, line.len(), "missing field"))
        };
        let int = |i: usize, name: &str| -> Result<i64> {
            let (c, s) = get(i, name)?;
            s.parse::<i64>()
                .map_err(|_| err(p, name, ln, c, format!("expected an integer, found '{s}'")))
        };
        let uint = |i: usize, name: &str| -> Result<u64> {
            let (c, s) = get(i, name)?;
            s.parse::<u64>().map_err(|_| {
                err(
                    p,
                    name,
                    ln,
                    c,
                    format!("expected a non-negative integer, found '{s}'"),
                )
            })
        };
        let u32f = |i: usize, name: &str| -> Result<u32> {
            let (c, _) = get(i, name)?;
            u32::try_from(uint(i, name)?).map_err(|_| err(p, name, ln, c, "value too large"))
        };
        let nranks = self.header.nranks;
        // A peer is a rank of the run.
        let peer = |i: usize, name: &str| -> Result<u32> {
            let v = u32f(i, name)?;
            if v >= nranks {
                return Err(err(
                    p,
                    name,
                    ln,
                    get(i, name)?.0,
                    format!("rank {v} of a run of {nranks} ranks"),
                ));
            }
            Ok(v)
        };
        // A tag is a C int (negative ones mark a collective's kernels, as
        // in the manual's examples).
        let tag = |i: usize, name: &str| -> Result<i64> {
            let v = int(i, name)?;
            if i32::try_from(v).is_err() {
                return Err(err(
                    p,
                    name,
                    ln,
                    get(i, name)?.0,
                    format!("tag {v} is not a C int"),
                ));
            }
            Ok(v)
        };
        let bytes = |i: usize, name: &str| -> Result<u64> {
            let v = uint(i, name)?;
            if v > MAX_MESSAGE_BYTES {
                return Err(err(
                    p,
                    name,
                    ln,
                    get(i, name)?.0,
                    format!("{v} bytes: more than a node's memory ({MAX_MESSAGE_BYTES})"),
                ));
            }
            Ok(v)
        };
        let flag = |i: usize, name: &str| -> Result<bool> {
            match get(i, name)? {
                (_, "0") => Ok(false),
                (_, "1") => Ok(true),
                (c, s) => Err(err(p, name, ln, c, format!("expected 0 or 1, found '{s}'"))),
            }
        };
        let opt = |key: &str| -> Result<Option<u32>> {
            for (c, s) in w.iter().skip(1) {
                if let Some(v) = s.strip_prefix(key) {
                    return v
                        .parse::<u32>()
                        .map(Some)
                        .map_err(|_| err(p, key, ln, c, format!("bad value '{v}'")));
                }
            }
            Ok(None)
        };
        match get(0, "record")?.1 {
            "C" => {
                let (c, s) = get(1, "C.seconds")?;
                let seconds = s
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && (0.0..=MAX_BURST_S).contains(v))
                    .ok_or_else(|| {
                        err(
                            p,
                            "C.seconds",
                            ln,
                            c,
                            format!(
                                "expected a number of seconds within 0..={MAX_BURST_S}, found '{s}'"
                            ),
                        )
                    })?;
                Ok(BRecord::Compute {
                    seconds,
                    caliper: opt("caliper=")?,
                })
            }
            "K" => {
                let ord = uint(1, "K.ord")?;
                let mut main_fn = self.spare_name.take();
                main_fn.clear();
                let (mc, name) = get(2, "K.main_fn")?;
                if !is_routine_name(name) {
                    return Err(err(
                        p,
                        "K.main_fn",
                        ln,
                        mc,
                        format!("'{name}' is not a routine name (letters, digits, '_')"),
                    ));
                }
                main_fn.push_str(name);
                let (kc, k) = get(3, "K.kernel")?;
                let kernel = match k {
                    "isend" => Kernel::Isend {
                        peer: peer(4, "isend.peer")?,
                        comm: int(5, "isend.comm")?,
                        tag: tag(6, "isend.tag")?,
                        bytes: bytes(7, "isend.bytes")?,
                        req: int(8, "isend.req")?,
                        sym: flag(9, "isend.sym")?,
                        col: opt("col=")?,
                    },
                    "irecv" => {
                        let peer = int(4, "irecv.peer")?;
                        if peer < -1 || peer >= i64::from(nranks) {
                            return Err(err(
                                p,
                                "irecv.peer",
                                ln,
                                get(4, "irecv.peer")?.0,
                                "peer must be a rank or -1",
                            ));
                        }
                        Kernel::Irecv {
                            peer,
                            comm: int(5, "irecv.comm")?,
                            tag: tag(6, "irecv.tag")?,
                            bytes: bytes(7, "irecv.bytes")?,
                            req: int(8, "irecv.req")?,
                            sym: flag(9, "irecv.sym")?,
                            col: opt("col=")?,
                        }
                    }
                    "wait" => Kernel::Wait {
                        req: int(4, "wait.req")?,
                    },
                    "test" => Kernel::Test {
                        req: int(4, "test.req")?,
                        completed: flag(5, "test.completed")?,
                    },
                    "barrier" => Kernel::Barrier {
                        comm: int(4, "barrier.comm")?,
                    },
                    "get" => Kernel::Get {
                        peer: peer(4, "get.peer")?,
                        comm: int(5, "get.comm")?,
                        bytes: bytes(6, "get.bytes")?,
                    },
                    "put" => Kernel::Put {
                        peer: peer(4, "put.peer")?,
                        comm: int(5, "put.comm")?,
                        bytes: bytes(6, "put.bytes")?,
                    },
                    other => {
                        return Err(err(
                            p,
                            "K.kernel",
                            ln,
                            kc,
                            format!(
                                "unknown kernel '{other}' (isend, irecv, wait, test, barrier, get, put)"
                            ),
                        ));
                    }
                };
                Ok(BRecord::Kernel {
                    ord,
                    main_fn,
                    kernel,
                })
            }
            "M" => match get(1, "M.kind")?.1 {
                "comm" => {
                    let id = int(2, "comm.id")?;
                    let (c, list) = get(3, "comm.ranks")?;
                    let mut ranks = Vec::new();
                    for r in list.split(',') {
                        ranks.push(
                            r.parse::<u32>().map_err(|_| {
                                err(p, "comm.ranks", ln, c, format!("bad rank '{r}'"))
                            })?,
                        );
                        if ranks.len() > 1 << 22 {
                            return Err(err(p, "comm.ranks", ln, c, "too many ranks"));
                        }
                    }
                    Ok(BRecord::Comm { id, ranks })
                }
                "caliper" => match get(2, "caliper.op")? {
                    (_, "push") => Ok(BRecord::CaliperPush(u32f(3, "caliper.idx")?)),
                    (_, "pop") => Ok(BRecord::CaliperPop),
                    (c, s) => Err(err(
                        p,
                        "caliper.op",
                        ln,
                        c,
                        format!("expected push or pop, found '{s}'"),
                    )),
                },
                "ignore_next_col" => Ok(BRecord::IgnoreNextCol(u32f(2, "ignore_next_col.idx")?)),
                other => Err(err(
                    p,
                    "M.kind",
                    ln,
                    get(1, "M.kind")?.0,
                    format!("unknown meta record '{other}'"),
                )),
            },
            "H" => Err(err(p, "H", ln, 0, "header repeated")),
            other => Err(err(
                p,
                "record",
                ln,
                0,
                format!("unknown record '{other}' (H, C, K, M)"),
            )),
        }
    }

    /// One `format_event` line: `rank main kernel peer comm tag count datatype request
    /// comput`: the rank, the computation, and the kernel after it (`None` for `init` and
    /// `finalize`), which the caller keeps pending.
    fn parse_format_event(&self, line: &str) -> Result<(u32, BRecord, Option<BRecord>)> {
        let w = words(line);
        let (p, ln) = (&self.path, self.line);
        if w.len() != 10 {
            return Err(err(
                p,
                "format_event",
                ln,
                0,
                format!("expected 10 fields, found {}", w.len()),
            ));
        }
        let f = |i: usize| w.get(i).unwrap_or((0, "-"));
        let int = |i: usize, name: &str| -> Result<Option<i64>> {
            let (c, s) = f(i);
            if s == "-" || s == "_" {
                return Ok(None);
            }
            s.parse::<i64>().map(Some).map_err(|_| {
                err(
                    p,
                    name,
                    ln,
                    c,
                    format!("expected an integer or '-', found '{s}'"),
                )
            })
        };
        let rank_raw = int(0, "rank")?.unwrap_or(0);
        let sym = rank_raw < 0;
        let rank = if sym { -(rank_raw + 1) } else { rank_raw };
        let rank = u32::try_from(rank).map_err(|_| err(p, "rank", ln, 0, "bad rank"))?;
        let main_fn = f(1).1.to_string();
        if !is_routine_name(&main_fn) {
            return Err(err(
                p,
                "main",
                ln,
                f(1).0,
                format!("'{main_fn}' is not a routine name (letters, digits, '_')"),
            ));
        }
        let kernel = f(2).1;
        let peer = int(3, "dest_or_source")?;
        let comm = int(4, "comm")?.unwrap_or(0);
        let tag = int(5, "tag")?.unwrap_or(0);
        let count = int(6, "count")?.unwrap_or(0);
        let dtype = int(7, "datatype")?.unwrap_or(0);
        let req = int(8, "request")?.unwrap_or(-1);
        let (cc, cs) = f(9);
        let comput = cs
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && (0.0..=MAX_BURST_S).contains(v))
            .ok_or_else(|| {
                err(
                    p,
                    "comput",
                    ln,
                    cc,
                    format!("expected a number of seconds within 0..={MAX_BURST_S}, found '{cs}'"),
                )
            })?;
        let bytes = u64::try_from(count)
            .unwrap_or(0)
            .saturating_mul(datatype_size(dtype));
        let peer_u = |name: &str| -> Result<u32> {
            peer.and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| err(p, name, ln, f(3).0, "expected a rank"))
        };
        let k = match kernel {
            "isend" => Some(Kernel::Isend {
                peer: peer_u("dest")?,
                comm,
                tag,
                bytes,
                req,
                sym,
                col: None,
            }),
            "irecv" => Some(Kernel::Irecv {
                peer: peer.unwrap_or(-1),
                comm,
                tag,
                bytes,
                req,
                sym,
                col: None,
            }),
            "wait" => Some(Kernel::Wait { req }),
            "test" => Some(Kernel::Test {
                req,
                completed: true,
            }),
            "barrier" => Some(Kernel::Barrier { comm }),
            "init" | "finalize" => None,
            other => {
                return Err(err(
                    p,
                    "kernel",
                    ln,
                    f(2).0,
                    format!("unknown kernel '{other}'"),
                ));
            }
        };
        let ord = ln;
        let compute = BRecord::Compute {
            seconds: comput,
            caliper: None,
        };
        Ok((
            rank,
            compute,
            k.map(|kernel| BRecord::Kernel {
                ord,
                main_fn,
                kernel,
            }),
        ))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Line of the last record read (for diagnostics).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// Hands back a kernel's `main_fn` once the caller is done with it: the
    /// next kernel's name is written into it, which saves an allocation per
    /// record for a reader that only looks at names.
    pub fn reuse_name(&mut self, name: String) {
        self.spare_name = std::cell::Cell::new(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    /// How lines were split before `Words`: a vector of every word.
    fn words_by_char(line: &str) -> Vec<(usize, &str)> {
        let mut out = Vec::new();
        let mut start = None;
        for (i, c) in line.char_indices() {
            if c.is_whitespace() {
                if let Some(s) = start.take() {
                    out.push((s, &line[s..i]));
                }
            } else if start.is_none() {
                start = Some(i);
            }
        }
        if let Some(s) = start {
            out.push((s, &line[s..]));
        }
        out
    }

    #[test]
    fn words_split_like_char_is_whitespace() {
        for line in [
            "",
            "   ",
            "K 0 MPI_Isend isend 1 1 7 400000 3 0 col=2",
            "a\x0bb\x0cc\td\re",
            "x\u{a0}y\u{3000}z é",
            &"w ".repeat(40),
        ] {
            let w = words(line);
            assert_eq!(
                w.iter().collect::<Vec<_>>(),
                words_by_char(line),
                "{line:?}"
            );
            assert_eq!(w.len(), words_by_char(line).len());
            assert_eq!(w.get(w.len()), None);
        }
    }

    proptest! {
        /// Any line, ASCII or not, longer than the words kept in place or
        /// not, splits into the same words at the same columns.
        #[test]
        fn words_agree_with_the_char_split(
            line in "[ a-z0-9=\t\x0b\x0c\u{a0}\u{2003}é#-]{0,120}",
        ) {
            let w = words(&line);
            let want = words_by_char(&line);
            prop_assert_eq!(w.iter().collect::<Vec<_>>(), want.clone());
            prop_assert_eq!(w.len(), want.len());
            for (i, x) in want.iter().enumerate() {
                prop_assert_eq!(w.get(i), Some(*x));
            }
            prop_assert_eq!(w.first(), want.first().copied());
        }
    }

    #[test]
    fn names_handed_back_do_not_change_the_records() {
        let d = tempfile::tempdir().expect("tmp");
        let p = write(
            d.path(),
            "bandela.1.txt",
            "H 1 2 0\nK 0 MPI_Isend isend 0 1 7 8 3 0\nK 1 MPI_Waitall_with_a_longer_name wait 3\nC 0.5\nK 2 X barrier 1\nK 3 MPI_Isend isend 0 1 7 8 4 0 col=2\n",
        );
        let plain = all(&p).expect("plain");
        let mut t = RankTrace::open(&p).expect("open");
        let mut reused = Vec::new();
        while let Some(r) = t.next_record().expect("record") {
            reused.push(r.clone());
            if let BRecord::Kernel { main_fn, .. } = r {
                t.reuse_name(main_fn);
            }
        }
        assert_eq!(plain, reused);
        assert_eq!(plain.len(), 5);
    }

    fn all(p: &Path) -> Result<Vec<BRecord>> {
        let mut t = RankTrace::open(p)?;
        let mut v = Vec::new();
        while let Some(r) = t.next_record()? {
            v.push(r);
        }
        Ok(v)
    }

    #[test]
    fn reads_v1_records() {
        let d = tempfile::tempdir().expect("tmp");
        let p = write(
            d.path(),
            "bandela.1.txt",
            "# bandela-replay v1 rank=1 nranks=2\nH 1 2 0\nM comm 1 0,1\nC 0.5 caliper=2\nK 0 MPI_Bcast irecv 0 1 -3 400000 7 1 col=1\nK 1 MPI_Bcast wait 7 # done\nK 2 MPI_Barrier barrier 1\n",
        );
        let t = RankTrace::open(&p).expect("open");
        assert_eq!(
            t.header,
            RankHeader {
                rank: 1,
                nranks: 2,
                host: 0
            }
        );
        let v = all(&p).expect("records");
        assert_eq!(v.len(), 5);
        assert_eq!(
            v[0],
            BRecord::Comm {
                id: 1,
                ranks: vec![0, 1]
            }
        );
        assert_eq!(
            v[1],
            BRecord::Compute {
                seconds: 0.5,
                caliper: Some(2)
            }
        );
        assert_eq!(
            v[2],
            BRecord::Kernel {
                ord: 0,
                main_fn: "MPI_Bcast".into(),
                kernel: Kernel::Irecv {
                    peer: 0,
                    comm: 1,
                    tag: -3,
                    bytes: 400000,
                    req: 7,
                    sym: true,
                    col: Some(1)
                }
            }
        );
        assert_eq!(
            v[3],
            BRecord::Kernel {
                ord: 1,
                main_fn: "MPI_Bcast".into(),
                kernel: Kernel::Wait { req: 7 }
            }
        );
    }

    #[test]
    fn reads_the_manual_format_event_layout() {
        let d = tempfile::tempdir().expect("tmp");
        // Lines of the manual's bandela.0 (MPI_Bcast on 4 ranks).
        let p = write(
            d.path(),
            "bandela.0",
            "0 init init - - - 0 0 - 0.000443\n0 bcast isend 2 1 -3 1 12 0 0.119647\n0 bcast wait - - - 1 0 0 0.000002\n-1 bcast irecv 3 1 -3 10000 14 1 0.000001\n0 finalize finalize - - - 0 0 - 0.000008\n",
        );
        let v = all(&p).expect("records");
        assert_eq!(
            v[0],
            BRecord::Compute {
                seconds: 0.000443,
                caliper: None
            }
        );
        assert_eq!(
            v[1],
            BRecord::Compute {
                seconds: 0.119647,
                caliper: None
            }
        );
        assert!(matches!(
            &v[2],
            BRecord::Kernel {
                kernel: Kernel::Isend {
                    peer: 2,
                    tag: -3,
                    bytes: 1,
                    req: 0,
                    sym: false,
                    ..
                },
                ..
            }
        ));
        assert!(matches!(
            &v[6],
            BRecord::Kernel {
                kernel: Kernel::Irecv {
                    peer: 3,
                    bytes: 40000,
                    req: 1,
                    sym: true,
                    ..
                },
                ..
            }
        ));
        assert_eq!(
            v.last(),
            Some(&BRecord::Compute {
                seconds: 0.000008,
                caliper: None
            })
        );
    }

    #[test]
    fn errors_name_line_and_column() {
        let d = tempfile::tempdir().expect("tmp");
        let p = write(d.path(), "b", "H 0 1 0\nK 0 f isend x 1 1 8 1 0\n");
        let e = all(&p).expect_err("bad peer").to_string();
        assert!(
            e.contains("isend.peer") && e.contains("line 2, column 13"),
            "{e}"
        );
        let p = write(d.path(), "c", "H 0 1 0\nK 0 f fly 1\n");
        let e = all(&p).expect_err("kernel").to_string();
        assert!(e.contains("unknown kernel 'fly'"), "{e}");
        let p = write(d.path(), "e", "");
        assert!(RankTrace::open(&p).is_err());
    }

    #[test]
    fn a_64_kib_line_is_read_and_a_longer_one_refused() {
        let d = tempfile::tempdir().expect("tmp");
        // 65,536 bytes with the newline: the longest line there may be.
        let long = format!("C 0.5{}\n", " ".repeat(65_536 - 6));
        let p = write(d.path(), "a", &format!("H 0 1 0\n{long}C 0.25\n"));
        let v = all(&p).expect("a 64 KiB line");
        assert_eq!(
            v,
            vec![
                BRecord::Compute {
                    seconds: 0.5,
                    caliper: None
                },
                BRecord::Compute {
                    seconds: 0.25,
                    caliper: None
                }
            ]
        );
        let p = write(d.path(), "b", &format!("H 0 1 0\n {long}C 0.25\n"));
        let e = all(&p).expect_err("too long").to_string();
        assert!(
            e.contains("line longer than 64 KiB") && e.contains("line 2"),
            "{e}"
        );
    }

    #[test]
    fn errors_past_the_first_buffers_name_their_line_and_byte() {
        let d = tempfile::tempdir().expect("tmp");
        let mut text = "# a comment line\nH 0 2 0\n".to_string();
        for i in 0..700 {
            text.push_str(&format!("C 0.{i:04}  # burst {i}\n"));
        }
        let good = text.clone();
        text.push_str("K 9 f isend x 1 1 8 1 0\n");
        let p = write(d.path(), "a", &text);
        let mut t = RankTrace::open_buffered(&p, MIN_BUFFER).expect("open");
        for i in 0..700 {
            let r = t.next_record().expect("a burst");
            let want = format!("0.{i:04}").parse::<f64>().expect("number");
            assert_eq!(
                r,
                Some(BRecord::Compute {
                    seconds: want,
                    caliper: None
                })
            );
        }
        let e = t.next_record().expect_err("bad peer").to_string();
        assert!(
            e.contains("isend.peer") && e.contains("line 703, column 13"),
            "{e}"
        );
        // A last line cut short: the byte where the file ends.
        let cut = format!("{good}C 0.");
        let p = write(d.path(), "b", &cut);
        let e = all(&p).expect_err("cut short").to_string();
        assert!(
            e.contains(&format!(
                "ends at byte {} in the middle of line 703",
                cut.len()
            )),
            "{e}"
        );
    }

    #[test]
    fn a_format_event_file_that_starts_with_a_send_keeps_it() {
        let d = tempfile::tempdir().expect("tmp");
        let p = write(
            d.path(),
            "bandela.3",
            "3 main isend 1 1 0 8 1 0 0.5\n3 main wait - - - 1 0 0 0.25\n",
        );
        let t = RankTrace::open(&p).expect("open");
        assert_eq!(
            t.header,
            RankHeader {
                rank: 3,
                nranks: 4,
                host: 0
            }
        );
        let v = all(&p).expect("records");
        assert_eq!(v.len(), 4, "{v:?}");
        assert_eq!(
            v[0],
            BRecord::Compute {
                seconds: 0.5,
                caliper: None
            }
        );
        assert!(
            matches!(
                &v[1],
                BRecord::Kernel {
                    ord: 1,
                    kernel: Kernel::Isend {
                        peer: 1,
                        bytes: 8,
                        ..
                    },
                    ..
                }
            ),
            "{v:?}"
        );
        assert!(
            matches!(
                &v[3],
                BRecord::Kernel {
                    ord: 2,
                    kernel: Kernel::Wait { req: 0 },
                    ..
                }
            ),
            "{v:?}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn lines_come_out_whole_whatever_the_buffer(
            lines in proptest::collection::vec(
                prop_oneof![
                    8 => "[a-z0-9 #é\r]{0,40}",
                    1 => "[a-z]{3000,9000}",
                ],
                0..40,
            ),
            newline_at_end in any::<bool>(),
            cap in prop_oneof![Just(1usize), Just(7), Just(100), Just(MIN_BUFFER), Just(DEFAULT_BUFFER)],
        ) {
            let d = tempfile::tempdir().expect("tmp");
            let mut text = lines.join("\n");
            if newline_at_end && !text.is_empty() {
                text.push('\n');
            }
            let p = write(d.path(), "f", &text);
            let mut src = Lines::new(File::open(&p).expect("open"), cap);
            let mut got = Vec::new();
            while let Some(r) = src.next().expect("read") {
                got.push(String::from_utf8(src.bytes(r).to_vec()).expect("utf-8"));
            }
            let want: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn arbitrary_lines_never_panic(lines in proptest::collection::vec("[A-Za-z0-9_=,.# -]{0,60}", 0..8), v1 in any::<bool>()) {
            let d = tempfile::tempdir().expect("tmp");
            let mut text = if v1 { "H 0 2 0\n".to_string() } else { String::new() };
            for l in lines {
                text.push_str(&l);
                text.push('\n');
            }
            let p = write(d.path(), "f", &text);
            if let Ok(mut t) = RankTrace::open(&p) {
                let mut n = 0;
                while let Ok(Some(_)) = t.next_record() {
                    n += 1;
                    prop_assert!(n < 100);
                }
            }
        }
    }
}
