//! Streaming reader of Dimemas `.dim` traces (the `#DIMEMAS` format of Dimemas ≥ 3).
//!
//! The header and the communicator definitions are read eagerly (they are small);
//! records are read lazily, one [`TaskStream`] per task, each positioned with the
//! offsets block at the end of the file (or, when the header says there is none, with
//! one scanning pass that only remembers where each task starts). Memory therefore
//! grows with the number of tasks, never with the length of the trace.
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::text::{Fields, malformed, parse_f64, parse_i64, trim};
use crate::error::{FormatError, Result};

/// Longest record line accepted (a guard against unbounded allocation on garbage).
const MAX_LINE: u64 = 1 << 20;
/// Most tasks / threads / communicator members accepted in a header.
const MAX_TASKS: u64 = 1 << 22;

/// The header line of a `.dim` trace.
#[derive(Debug, Clone, PartialEq)]
pub struct DimHeader {
    /// Application name (between the quotes).
    pub name: String,
    /// Byte offset of the offsets block, when the header announces one.
    pub offsets_offset: Option<u64>,
    /// Threads per task (its length is the number of tasks).
    pub threads: Vec<u32>,
    /// Number of communicators the header announces.
    pub ncomms: u32,
}

/// A communicator definition (`d:1:...`).
#[derive(Debug, Clone, PartialEq)]
pub struct Communicator {
    /// Communicator id as used by records.
    pub id: i64,
    /// Member tasks (0-based), in rank order.
    pub tasks: Vec<u32>,
}

/// The kind of a receive record (`3:` field 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvKind {
    /// Blocking `MPI_Recv`.
    Recv,
    /// `MPI_Irecv`: posts the receive and continues.
    Irecv,
    /// `MPI_Wait` completing an earlier `Irecv` (matched on source, tag, communicator).
    Wait,
}

/// One record of a task's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum DimRecord {
    /// `0`: nothing.
    Noop,
    /// `1`: CPU burst in seconds of the traced machine.
    Burst { seconds: f64 },
    /// `11`: GPU burst in seconds (replayed as a CPU burst).
    GpuBurst { seconds: f64 },
    /// `2`: point-to-point send. `sync` bit 0 = rendezvous, bit 1 = immediate.
    Send {
        dst: u32,
        size: u64,
        tag: i64,
        comm: i64,
        sync: u8,
    },
    /// `3`: receive, `src` = -1 means any source.
    Recv {
        src: i64,
        size: u64,
        tag: i64,
        comm: i64,
        kind: RecvKind,
    },
    /// `10`: collective operation. `root` is the record's field as written (a 0/1
    /// flag, or the root task id for `MPI_Reduce`, glop 10).
    GlobalOp {
        glop: u32,
        comm: i64,
        root: i64,
        bytes_send: u64,
        bytes_recv: u64,
        synch: u8,
    },
    /// `20`: user event or block begin/end.
    Event { etype: i64, value: i64 },
}

/// An open `.dim` trace: header, communicators and where each task's records start.
#[derive(Debug, Clone)]
pub struct DimTrace {
    path: PathBuf,
    /// The header line.
    pub header: DimHeader,
    /// Communicator definitions.
    pub comms: Vec<Communicator>,
    /// Byte offset of the first record of (task, thread 0), per task.
    offsets: Vec<u64>,
    /// Byte offset of the first record line (after the definitions).
    pub records_start: u64,
    /// Bytes in the file.
    file_len: u64,
}

fn read_line_limited<R: BufRead>(r: &mut R, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    buf.clear();
    let n = r.by_ref().take(MAX_LINE).read_until(b'\n', buf)?;
    Ok(n)
}

/// A last line without its newline: Dimemas and our tracer end every line with
/// one, so the file was cut short (`s:3:528` of `s:3:5282` would point a task
/// at the wrong record). `n` is the line's length as read, `buf` its bytes.
fn cut_short(path: &Path, field: &str, at: u64, n: usize, buf: &[u8]) -> Option<FormatError> {
    if buf.last() == Some(&b'\n') || n == 0 || n as u64 >= MAX_LINE {
        return None;
    }
    let head = buf.get(..buf.len().min(60)).unwrap_or_default();
    Some(FormatError::malformed(
        path,
        field,
        crate::error::Position::Offset(at),
        format!(
            "the file ends at byte {} in the middle of a line ('{}'): it is cut short",
            at + n as u64,
            String::from_utf8_lossy(head)
        ),
    ))
}

fn strip_eol(line: &[u8]) -> &[u8] {
    let mut l = line;
    while let Some((&last, rest)) = l.split_last() {
        if last == b'\n' || last == b'\r' {
            l = rest;
        } else {
            break;
        }
    }
    l
}

impl DimTrace {
    /// Opens `path`, reads the header, the definitions and the offsets.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| FormatError::io(&path, e))?;
        let file_len = file
            .metadata()
            .map_err(|e| FormatError::io(&path, e))?
            .len();
        let mut r = BufReader::new(file);
        let mut buf = Vec::new();
        let n = read_line_limited(&mut r, &mut buf).map_err(|e| FormatError::io(&path, e))?;
        let header = parse_header(&path, strip_eol(&buf))?;
        let mut pos = n as u64;
        let mut comms = Vec::new();
        // Definitions come before the first record.
        let records_start = loop {
            let n = read_line_limited(&mut r, &mut buf).map_err(|e| FormatError::io(&path, e))?;
            if n == 0 {
                break pos;
            }
            let line = strip_eol(&buf);
            if trim(line).is_empty() {
                pos += n as u64;
                continue;
            }
            if line.starts_with(b"d:") {
                if let Some(c) = parse_definition(&path, line, pos, header.threads.len())? {
                    comms.push(c);
                }
                pos += n as u64;
                continue;
            }
            break pos;
        };
        let ntasks = header.threads.len();
        let offsets = match header.offsets_offset {
            Some(off) if off < file_len => read_offsets(&path, off, ntasks)?,
            Some(off) => {
                return Err(malformed(
                    &path,
                    "header.offsets_offset",
                    0,
                    format!(
                        "offsets block at byte {off} is past the end of the file ({file_len} bytes)"
                    ),
                ));
            }
            None => scan_offsets(&path, records_start, ntasks)?,
        };
        for (t, &o) in offsets.iter().enumerate() {
            if o < records_start || o > file_len {
                return Err(malformed(
                    &path,
                    "s (offsets)",
                    header.offsets_offset.unwrap_or(0),
                    format!(
                        "offset {o} of task {t} is outside the records ({records_start}..{file_len})"
                    ),
                ));
            }
        }
        Ok(Self {
            path,
            header,
            comms,
            offsets,
            records_start,
            file_len,
        })
    }

    /// The file this trace was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of tasks.
    pub fn ntasks(&self) -> usize {
        self.header.threads.len()
    }

    /// Byte offset of the first record of `task`; an error naming the trace
    /// when the task does not exist.
    fn task_offset(&self, task: u32) -> Result<u64> {
        self.offsets.get(task as usize).copied().ok_or_else(|| {
            FormatError::malformed(
                &self.path,
                "task",
                crate::error::Position::None,
                format!(
                    "task {task} does not exist (trace has {} tasks)",
                    self.ntasks()
                ),
            )
        })
    }

    /// Where the records of `task` end: the start of the next task's
    /// records, else of the offsets block, else the end of the file. Its
    /// stream must stop there ([`TaskStream::stopped_at`]): a record of
    /// another task or thread before it is a damaged task id, or records of
    /// tasks interleaved, which this reader does not read.
    pub fn task_end(&self, task: u32) -> u64 {
        let start = self.offsets.get(task as usize).copied().unwrap_or(0);
        self.offsets
            .iter()
            .copied()
            .filter(|o| *o > start)
            .chain(self.header.offsets_offset)
            .chain(std::iter::once(self.file_len))
            .filter(|o| *o >= start)
            .min()
            .unwrap_or(self.file_len)
    }

    /// A lazy stream over the records of `task` (thread 0).
    pub fn task_stream(&self, task: u32) -> Result<TaskStream> {
        let off = self.task_offset(task)?;
        let mut f = File::open(&self.path).map_err(|e| FormatError::io(&self.path, e))?;
        f.seek(SeekFrom::Start(off))
            .map_err(|e| FormatError::io(&self.path, e))?;
        Ok(TaskStream {
            path: self.path.clone(),
            reader: BufReader::with_capacity(16 * 1024, f),
            task,
            pos: off,
            buf: Vec::with_capacity(64),
            done: false,
            stopped_at: None,
        })
    }
}

/// The records of one task, read lazily from the file.
#[derive(Debug)]
pub struct TaskStream {
    path: PathBuf,
    reader: BufReader<File>,
    task: u32,
    pos: u64,
    buf: Vec<u8>,
    done: bool,
    /// Byte offset of the line the stream stopped at (the file's length at
    /// its end).
    stopped_at: Option<u64>,
}

impl TaskStream {
    /// Where the stream stopped: the line that is not one of its records,
    /// or the end of the file; `None` before it stopped.
    pub fn stopped_at(&self) -> Option<u64> {
        self.stopped_at
    }

    /// Byte offset of the next line.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The next record, `None` at the end of the task's stream. The second element is
    /// the byte offset of the record's line (for diagnostics).
    pub fn next_record(&mut self) -> Result<Option<(DimRecord, u64)>> {
        loop {
            if self.done {
                return Ok(None);
            }
            let n = read_line_limited(&mut self.reader, &mut self.buf)
                .map_err(|e| FormatError::io(&self.path, e))?;
            let at = self.pos;
            self.pos += n as u64;
            if n == 0 {
                self.done = true;
                self.stopped_at = Some(at);
                return Ok(None);
            }
            if let Some(e) = cut_short(&self.path, "record", at, n, &self.buf) {
                return Err(e);
            }
            let line = strip_eol(&self.buf);
            if trim(line).is_empty() {
                continue;
            }
            if line.starts_with(b"s:") || line.starts_with(b"#") || line.starts_with(b"d:") {
                self.done = true;
                self.stopped_at = Some(at);
                return Ok(None);
            }
            let (task, thread, rec) = parse_record(&self.path, line, at)?;
            if task != self.task || thread != 0 {
                self.done = true;
                self.stopped_at = Some(at);
                return Ok(None);
            }
            return Ok(Some((rec, at)));
        }
    }
}

/// Where one task's records are read next, without a read buffer of its own:
/// [`TaskCursor::fill`] reads the file at the cursor with positioned reads into
/// a scratch buffer the caller shares between all tasks, and decodes up to a
/// given number of records. A replay of N tasks keeps N cursors (a few bytes
/// each) and one scratch buffer instead of N buffered readers, and the decoding
/// can run on another thread than the simulation. The records, their offsets
/// and the errors are those [`TaskStream`] gives, in the same order.
#[derive(Debug)]
pub struct TaskCursor {
    task: u32,
    pos: u64,
    done: bool,
    /// An error met after records that were handed out first.
    pending: Option<FormatError>,
}

impl DimTrace {
    /// A cursor at the first record of `task` (thread 0); see [`TaskCursor`].
    pub fn task_cursor(&self, task: u32) -> Result<TaskCursor> {
        let off = self.task_offset(task)?;
        Ok(TaskCursor {
            task,
            pos: off,
            done: false,
            pending: None,
        })
    }
}

/// Reads at `pos` until `buf` is full or the file ends; the bytes read.
fn read_full_at(file: &File, buf: &mut [u8], pos: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < buf.len() {
        let Some(rest) = buf.get_mut(n..) else { break };
        match file.read_at(rest, pos + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl TaskCursor {
    /// The task this cursor reads.
    pub fn task(&self) -> u32 {
        self.task
    }

    /// Whether the task's stream has ended (every record was handed out).
    pub fn is_done(&self) -> bool {
        self.done && self.pending.is_none()
    }

    /// Appends up to `max` of the task's next records, each with the byte
    /// offset of its line, to `out`, reading `file` (the trace at `path`)
    /// into `scratch`. Appends nothing once the stream has ended. An error
    /// met after some records is returned by the next call, so the records
    /// before it are replayed first, as with [`TaskStream`].
    pub fn fill(
        &mut self,
        path: &Path,
        file: &File,
        scratch: &mut Vec<u8>,
        out: &mut Vec<(DimRecord, u64)>,
        max: usize,
    ) -> Result<()> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        let start = out.len();
        let mut want = (max.saturating_mul(40)).clamp(512, MAX_LINE as usize);
        while !self.done && out.len() - start < max {
            if scratch.len() < want {
                scratch.resize(want, 0);
            }
            let buf = scratch.get_mut(..want).unwrap_or_default();
            let n = read_full_at(file, buf, self.pos).map_err(|e| FormatError::io(path, e))?;
            let data = buf.get(..n).unwrap_or_default();
            let eof = n < want;
            let mut used = 0usize;
            while out.len() - start < max {
                let rest = data.get(used..).unwrap_or_default();
                if rest.is_empty() {
                    if eof {
                        self.done = true;
                    }
                    break;
                }
                let (line_len, whole) = match rest.iter().position(|&b| b == b'\n') {
                    Some(k) => (k + 1, true),
                    None if eof || rest.len() as u64 >= MAX_LINE => (rest.len(), false),
                    None => break,
                };
                let raw = rest.get(..line_len).unwrap_or_default();
                let at = self.pos + used as u64;
                used += line_len;
                if !whole && let Some(e) = cut_short(path, "record", at, line_len, raw) {
                    self.done = true;
                    return self.stop(e, out.len() > start);
                }
                let line = strip_eol(raw);
                if trim(line).is_empty() {
                    continue;
                }
                if line.starts_with(b"s:") || line.starts_with(b"#") || line.starts_with(b"d:") {
                    self.done = true;
                    break;
                }
                match parse_record(path, line, at) {
                    Ok((task, thread, rec)) => {
                        if task != self.task || thread != 0 {
                            self.done = true;
                            break;
                        }
                        out.push((rec, at));
                    }
                    Err(e) => {
                        self.done = true;
                        self.pos += used as u64;
                        return self.stop(e, out.len() > start);
                    }
                }
            }
            self.pos += used as u64;
            if used == 0 && !self.done {
                // A line longer than the read: read more at once.
                want = (want * 4).min(MAX_LINE as usize);
            }
        }
        Ok(())
    }

    /// An error: now when nothing was appended, else after the records.
    fn stop(&mut self, e: FormatError, appended: bool) -> Result<()> {
        if appended {
            self.pending = Some(e);
            Ok(())
        } else {
            Err(e)
        }
    }
}

fn parse_header(path: &Path, line: &[u8]) -> Result<DimHeader> {
    let bad = |col: usize, msg: &str| malformed(path, "header", col as u64, msg.to_string());
    let rest = line.strip_prefix(b"#DIMEMAS:").ok_or_else(|| {
        bad(
            0,
            "expected '#DIMEMAS:' (only the #DIMEMAS trace format is supported)",
        )
    })?;
    let mut col = 9usize;
    let rest = rest
        .strip_prefix(b"\"")
        .ok_or_else(|| bad(col, "expected '\"' before the application name"))?;
    col += 1;
    let q = rest
        .iter()
        .position(|&b| b == b'"')
        .ok_or_else(|| bad(col, "unterminated application name"))?;
    let name = String::from_utf8_lossy(rest.get(..q).unwrap_or(&[])).into_owned();
    col += q + 1;
    let rest = rest.get(q + 1..).unwrap_or(&[]);
    let rest = rest
        .strip_prefix(b":")
        .ok_or_else(|| bad(col, "expected ':' after the name"))?;
    col += 1;
    // <flag>[,<offset>]:
    let colon = rest
        .iter()
        .position(|&b| b == b':')
        .ok_or_else(|| bad(col, "expected ':' after the offsets flag"))?;
    let flagpart = rest.get(..colon).unwrap_or(&[]);
    let mut it = flagpart.splitn(2, |&b| b == b',');
    let flag = parse_i64(it.next().unwrap_or(&[])).ok_or_else(|| bad(col, "bad offsets flag"))?;
    let offsets_offset = match (flag, it.next()) {
        (1, Some(o)) => Some(
            parse_i64(o)
                .and_then(|v| u64::try_from(v).ok())
                .ok_or_else(|| bad(col, "bad offsets position"))?,
        ),
        (0, _) | (1, None) => None,
        _ => return Err(bad(col, "offsets flag must be 0 or 1")),
    };
    col += colon + 1;
    let rest = rest.get(colon + 1..).unwrap_or(&[]);
    let lp = rest
        .iter()
        .position(|&b| b == b'(')
        .ok_or_else(|| bad(col, "expected '(' after the task count"))?;
    let ntasks = parse_i64(rest.get(..lp).unwrap_or(&[]))
        .and_then(|v| u64::try_from(v).ok())
        .filter(|&v| v > 0 && v <= MAX_TASKS)
        .ok_or_else(|| bad(col, "bad task count"))?;
    col += lp + 1;
    let rest = rest.get(lp + 1..).unwrap_or(&[]);
    let rp = rest
        .iter()
        .position(|&b| b == b')')
        .ok_or_else(|| bad(col, "expected ')' after the thread counts"))?;
    let mut threads = Vec::new();
    for t in rest.get(..rp).unwrap_or(&[]).split(|&b| b == b',') {
        let v = parse_i64(t)
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| v > 0)
            .ok_or_else(|| bad(col, "bad thread count"))?;
        threads.push(v);
        if threads.len() as u64 > ntasks {
            break;
        }
    }
    if threads.len() as u64 != ntasks {
        return Err(bad(
            col,
            &format!(
                "{ntasks} tasks announced but {} thread counts given",
                threads.len()
            ),
        ));
    }
    col += rp + 1;
    let rest = rest.get(rp + 1..).unwrap_or(&[]);
    let rest = rest
        .strip_prefix(b",")
        .ok_or_else(|| bad(col, "expected ',' before the communicator count"))?;
    let ncomms_field = rest.split(|&b| b == b',').next().unwrap_or(&[]);
    let ncomms = parse_i64(ncomms_field)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| bad(col + 1, "bad communicator count"))?;
    Ok(DimHeader {
        name,
        offsets_offset,
        threads,
        ncomms,
    })
}

fn parse_definition(
    path: &Path,
    line: &[u8],
    at: u64,
    ntasks: usize,
) -> Result<Option<Communicator>> {
    let mut f = Fields::new(line);
    let _d = f.next_raw();
    let kind = f.next_raw().and_then(parse_i64);
    if kind != Some(1) {
        // d:2 (files) and d:3 (one-sided windows) are parsed by Dimemas but unused.
        return Ok(None);
    }
    let col = f.col();
    let id = f
        .next_raw()
        .and_then(parse_i64)
        .ok_or_else(|| malformed(path, "d:1.comm_id", at + col as u64, "bad communicator id"))?;
    let col = f.col();
    let n = f
        .next_raw()
        .and_then(parse_i64)
        .and_then(|v| usize::try_from(v).ok())
        .filter(|&v| v <= ntasks)
        .ok_or_else(|| malformed(path, "d:1.ntasks", at + col as u64, "bad member count"))?;
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let col = f.col();
        let t = f
            .next_raw()
            .and_then(parse_i64)
            .and_then(|v| u32::try_from(v).ok())
            .filter(|&v| (v as usize) < ntasks)
            .ok_or_else(|| {
                malformed(
                    path,
                    "d:1.task",
                    at + col as u64,
                    format!("bad member task (trace has {ntasks} tasks)"),
                )
            })?;
        tasks.push(t);
    }
    Ok(Some(Communicator { id, tasks }))
}

fn read_offsets(path: &Path, off: u64, ntasks: usize) -> Result<Vec<u64>> {
    let mut f = File::open(path).map_err(|e| FormatError::io(path, e))?;
    f.seek(SeekFrom::Start(off))
        .map_err(|e| FormatError::io(path, e))?;
    let mut r = BufReader::new(f);
    let mut out: Vec<Option<u64>> = vec![None; ntasks];
    let mut buf = Vec::new();
    let mut pos = off;
    loop {
        let n = read_line_limited(&mut r, &mut buf).map_err(|e| FormatError::io(path, e))?;
        if n == 0 {
            break;
        }
        if let Some(e) = cut_short(path, "s (offsets)", pos, n, &buf) {
            return Err(e);
        }
        let line = strip_eol(&buf);
        if !trim(line).is_empty() {
            let mut fl = Fields::new(line);
            if fl.next_raw() != Some(b"s") {
                return Err(malformed(
                    path,
                    "s (offsets)",
                    pos,
                    "expected an 's:<task>:<offset>' line",
                ));
            }
            let col = fl.col();
            let t = fl
                .next_raw()
                .and_then(parse_i64)
                .and_then(|v| usize::try_from(v).ok())
                .filter(|&v| v < ntasks)
                .ok_or_else(|| malformed(path, "s.task", pos + col as u64, "bad task id"))?;
            let col = fl.col();
            let o = fl
                .next_raw()
                .and_then(parse_i64)
                .and_then(|v| u64::try_from(v).ok())
                .ok_or_else(|| malformed(path, "s.offset", pos + col as u64, "bad offset"))?;
            if let Some(slot) = out.get_mut(t) {
                *slot = Some(o);
            }
        }
        pos += n as u64;
    }
    out.iter()
        .enumerate()
        .map(|(t, o)| {
            o.ok_or_else(|| malformed(path, "s (offsets)", off, format!("no offset for task {t}")))
        })
        .collect()
}

/// One pass over the records, remembering where each task's thread-0 stream starts.
fn scan_offsets(path: &Path, start: u64, ntasks: usize) -> Result<Vec<u64>> {
    let mut f = File::open(path).map_err(|e| FormatError::io(path, e))?;
    f.seek(SeekFrom::Start(start))
        .map_err(|e| FormatError::io(path, e))?;
    let mut r = BufReader::new(f);
    let mut out: Vec<Option<u64>> = vec![None; ntasks];
    let mut buf = Vec::new();
    let mut pos = start;
    loop {
        let n = read_line_limited(&mut r, &mut buf).map_err(|e| FormatError::io(path, e))?;
        if n == 0 {
            break;
        }
        let line = strip_eol(&buf);
        if line.starts_with(b"s:") {
            break;
        }
        if !trim(line).is_empty() {
            let mut fl = Fields::new(line);
            let _op = fl.next_raw();
            let task = fl
                .next_raw()
                .and_then(parse_i64)
                .and_then(|v| usize::try_from(v).ok());
            let thread = fl.next_raw().and_then(parse_i64);
            if let (Some(t), Some(0)) = (task, thread)
                && let Some(slot) = out.get_mut(t)
            {
                slot.get_or_insert(pos);
            }
        }
        pos += n as u64;
    }
    // A task without records gets an empty stream positioned at the end.
    Ok(out.into_iter().map(|o| o.unwrap_or(pos)).collect())
}

/// Parses one record line into (task, thread, record).
pub fn parse_record(path: &Path, line: &[u8], at: u64) -> Result<(u32, u32, DimRecord)> {
    let mut f = Fields::new(line);
    let nfields = f.remaining();
    let field = |f: &mut Fields, name: &str| -> Result<i64> {
        let col = f.col();
        let raw = f
            .next_raw()
            .ok_or_else(|| malformed(path, name, at + col as u64, "missing field"))?;
        parse_i64(raw).ok_or_else(|| {
            malformed(
                path,
                name,
                at + col as u64,
                format!("not an integer: '{}'", String::from_utf8_lossy(raw)),
            )
        })
    };
    let op = field(&mut f, "op")?;
    let task = field(&mut f, "task")?;
    let task = u32::try_from(task).map_err(|_| malformed(path, "task", at, "negative task id"))?;
    let thread = field(&mut f, "thread")?;
    let thread =
        u32::try_from(thread).map_err(|_| malformed(path, "thread", at, "negative thread id"))?;
    let nonneg = |v: i64, name: &str, col: usize| -> Result<u64> {
        u64::try_from(v).map_err(|_| malformed(path, name, at + col as u64, "must not be negative"))
    };
    let secs = |f: &mut Fields, name: &str| -> Result<f64> {
        let col = f.col();
        let raw = f
            .next_raw()
            .ok_or_else(|| malformed(path, name, at + col as u64, "missing field"))?;
        parse_f64(raw).filter(|v| *v >= 0.0).ok_or_else(|| {
            malformed(
                path,
                name,
                at + col as u64,
                format!(
                    "not a non-negative number: '{}'",
                    String::from_utf8_lossy(raw)
                ),
            )
        })
    };
    let rec = match op {
        0 => DimRecord::Noop,
        1 => DimRecord::Burst {
            seconds: secs(&mut f, "burst_s")?,
        },
        11 => DimRecord::GpuBurst {
            seconds: secs(&mut f, "gpu_burst_s")?,
        },
        2 => {
            let col = f.col();
            let dst = field(&mut f, "send.dst_task")?;
            let dst = u32::try_from(dst).map_err(|_| {
                malformed(path, "send.dst_task", at + col as u64, "negative task id")
            })?;
            if nfields >= 9 {
                let col = f.col();
                let th = field(&mut f, "send.dst_thread")?;
                if th >= 0 {
                    return Err(malformed(
                        path,
                        "send.dst_thread",
                        at + col as u64,
                        "thread-to-thread messages (dst_thread >= 0) are not supported; MPI sends use -1",
                    ));
                }
            }
            let col = f.col();
            let size = field(&mut f, "send.size")?;
            let size = nonneg(size, "send.size", col)?;
            let tag = field(&mut f, "send.tag")?;
            let comm = field(&mut f, "send.comm")?;
            let col = f.col();
            let sync = field(&mut f, "send.sync")?;
            let sync = u8::try_from(sync).ok().filter(|&s| s <= 3).ok_or_else(|| {
                malformed(path, "send.sync", at + col as u64, "sync must be 0..=3")
            })?;
            DimRecord::Send {
                dst,
                size,
                tag,
                comm,
                sync,
            }
        }
        3 => {
            let src = field(&mut f, "recv.src_task")?;
            if src < -1 {
                return Err(malformed(
                    path,
                    "recv.src_task",
                    at,
                    "source must be a task id or -1",
                ));
            }
            if nfields >= 9 {
                let col = f.col();
                let th = field(&mut f, "recv.src_thread")?;
                if th >= 0 {
                    return Err(malformed(
                        path,
                        "recv.src_thread",
                        at + col as u64,
                        "thread-to-thread messages (src_thread >= 0) are not supported; MPI receives use -1",
                    ));
                }
            }
            let col = f.col();
            let size = field(&mut f, "recv.size")?;
            let size = nonneg(size, "recv.size", col)?;
            let tag = field(&mut f, "recv.tag")?;
            let comm = field(&mut f, "recv.comm")?;
            let col = f.col();
            let kind = match field(&mut f, "recv.type")? {
                0 => RecvKind::Recv,
                1 => RecvKind::Irecv,
                2 => RecvKind::Wait,
                _ => {
                    return Err(malformed(
                        path,
                        "recv.type",
                        at + col as u64,
                        "type must be 0 (Recv), 1 (Irecv) or 2 (Wait)",
                    ));
                }
            };
            DimRecord::Recv {
                src,
                size,
                tag,
                comm,
                kind,
            }
        }
        10 => {
            let col = f.col();
            let glop = field(&mut f, "glop.id")?;
            let glop = u32::try_from(glop)
                .ok()
                .filter(|&g| g <= 31)
                .ok_or_else(|| {
                    malformed(
                        path,
                        "glop.id",
                        at + col as u64,
                        "collective id must be 0..=31",
                    )
                })?;
            let comm = field(&mut f, "glop.comm")?;
            let root = field(&mut f, "glop.root")?;
            let _root_thread = field(&mut f, "glop.root_thread")?;
            let col = f.col();
            let s = field(&mut f, "glop.bytes_send")?;
            let bytes_send = nonneg(s, "glop.bytes_send", col)?;
            let col = f.col();
            let r = field(&mut f, "glop.bytes_recv")?;
            let bytes_recv = nonneg(r, "glop.bytes_recv", col)?;
            let synch = if f.remaining() > 0 {
                let col = f.col();
                let s = field(&mut f, "glop.synch")?;
                u8::try_from(s).ok().filter(|&s| s <= 3).ok_or_else(|| {
                    malformed(path, "glop.synch", at + col as u64, "synch must be 0..=3")
                })?
            } else {
                1
            };
            DimRecord::GlobalOp {
                glop,
                comm,
                root,
                bytes_send,
                bytes_recv,
                synch,
            }
        }
        20 => {
            let etype = field(&mut f, "event.type")?;
            let value = field(&mut f, "event.value")?;
            DimRecord::Event { etype, value }
        }
        other => {
            return Err(malformed(
                path,
                "op",
                at,
                format!("unsupported record type {other} (supported: 0, 1, 2, 3, 10, 11, 20)"),
            ));
        }
    };
    Ok((task, thread, rec))
}

/// "line L, column 1" (or the byte offset) of byte `offset` in `path`, for diagnostics
/// that name a record.
pub fn describe_offset(path: &Path, offset: u64) -> String {
    super::text::position_of(path, offset).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn write(dir: &Path, text: &[u8]) -> PathBuf {
        let p = dir.join("t.dim");
        std::fs::write(&p, text).expect("write");
        p
    }

    const REF: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/replay/dimemas/traces"
    );

    #[test]
    fn reads_the_reference_ring_trace() {
        let t = DimTrace::open(format!("{REF}/ring_np4.dim")).expect("open");
        assert_eq!(t.header.name, "ring_np4");
        assert_eq!(t.header.offsets_offset, Some(7019));
        assert_eq!(t.header.threads, vec![1, 1, 1, 1]);
        assert_eq!(
            t.comms,
            vec![Communicator {
                id: 1,
                tasks: vec![0, 1, 2, 3]
            }]
        );
        let mut s = t.task_stream(1).expect("stream");
        let mut n = 0;
        let mut first = None;
        let mut sends = 0;
        while let Some((r, _)) = s.next_record().expect("record") {
            if first.is_none() {
                first = Some(r.clone());
            }
            if matches!(
                r,
                DimRecord::Send {
                    dst: 2,
                    size: 65536,
                    tag: 10,
                    comm: 1,
                    sync: 0
                }
            ) {
                sends += 1;
            }
            n += 1;
        }
        // 42 bursts + 20 sends + 20 receives + 1 barrier per task (from the file).
        assert_eq!(n, 83);
        assert_eq!(sends, 20);
        assert_eq!(
            first,
            Some(DimRecord::Burst {
                seconds: 0.000756383
            })
        );
    }

    #[test]
    fn locates_tasks_without_an_offsets_block() {
        let d = tempfile::tempdir().expect("tmp");
        let p = write(
            d.path(),
            b"#DIMEMAS:\"x\":0:2(1,1),1\nd:1:1:2:0:1\n1:0:0:0.5\n2:0:0:1:-1:8:3:1:0\n1:1:0:0.25\n3:1:0:0:-1:8:3:1:0\n",
        );
        let t = DimTrace::open(&p).expect("open");
        let mut s = t.task_stream(1).expect("stream");
        assert_eq!(
            s.next_record().expect("r").map(|r| r.0),
            Some(DimRecord::Burst { seconds: 0.25 })
        );
        assert_eq!(
            s.next_record().expect("r").map(|r| r.0),
            Some(DimRecord::Recv {
                src: 0,
                size: 8,
                tag: 3,
                comm: 1,
                kind: RecvKind::Recv
            })
        );
        assert_eq!(s.next_record().expect("r"), None);
    }

    #[test]
    fn errors_name_field_line_and_column() {
        let d = tempfile::tempdir().expect("tmp");
        let p = write(
            d.path(),
            b"#DIMEMAS:\"x\":0:1(1),1\n1:0:0:0.5\n2:0:0:0:-1:abc:3:1:0\n",
        );
        let t = DimTrace::open(&p).expect("open");
        let mut s = t.task_stream(0).expect("stream");
        assert!(s.next_record().expect("first").is_some());
        let e = s.next_record().expect_err("bad size").to_string();
        assert!(
            e.contains("send.size") && e.contains("line 3, column 12"),
            "{e}"
        );
        let p = write(d.path(), b"#DIMEMAS:\"x\":1,9999:1(1),1\n");
        let e = DimTrace::open(&p).expect_err("offset").to_string();
        assert!(e.contains("offsets_offset"), "{e}");
        let p = write(d.path(), b"garbage\n");
        let e = DimTrace::open(&p).expect_err("header").to_string();
        assert!(e.contains("header") && e.contains("line 1"), "{e}");
        let p = write(d.path(), b"#DIMEMAS:\"x\":0:1(1),1\n7:0:0:1\n");
        let t = DimTrace::open(&p).expect("open");
        let e = t
            .task_stream(0)
            .expect("s")
            .next_record()
            .expect_err("op")
            .to_string();
        assert!(
            e.contains("unsupported record type 7") && e.contains("line 2"),
            "{e}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..400), hdr in 0usize..3) {
            let d = tempfile::tempdir().expect("tmp");
            let mut text: Vec<u8> = match hdr {
                0 => b"#DIMEMAS:\"p\":0:3(1,1,1),1\n".to_vec(),
                1 => b"#DIMEMAS:\"p\":1,40:2(1,1),1\n".to_vec(),
                _ => Vec::new(),
            };
            text.extend_from_slice(&body);
            let p = write(d.path(), &text);
            if let Ok(t) = DimTrace::open(&p) {
                for task in 0..t.ntasks() as u32 {
                    if let Ok(mut s) = t.task_stream(task) {
                        let mut guard = 0;
                        while let Ok(Some(_)) = s.next_record() {
                            guard += 1;
                            prop_assert!(guard < 1000);
                        }
                    }
                }
            }
        }

        /// A cursor hands out what a stream does: the same records, offsets
        /// and error, whatever its chunk size, on blank lines, CRLF, other
        /// tasks' lines, garbage and a missing last newline.
        #[test]
        fn cursors_read_what_streams_read(
            lines in proptest::collection::vec(prop_oneof![
                Just("1:0:0:0.5".to_string()),
                Just("2:0:0:1:-1:8:1:1:0".to_string()),
                Just("3:0:0:1:-1:8:1:1:2".to_string()),
                Just("1:1:0:0.25".to_string()),
                Just(String::new()),
                Just("  ".to_string()),
                Just("1:0:0:0.5\r".to_string()),
                Just("20:0:0:5:1".to_string()),
                "[0-9:.x]{0,12}",
                "1:0:0:[0-9.]{1,30}",
            ], 0..60),
            last_newline in any::<bool>(),
            chunk in 1usize..6,
        ) {
            let d = tempfile::tempdir().expect("tmp");
            let mut text = String::from("#DIMEMAS:\"p\":0:2(1,1),1\n");
            text.push_str(&lines.join("\n"));
            if last_newline {
                text.push('\n');
            }
            let p = write(d.path(), text.as_bytes());
            let Ok(t) = DimTrace::open(&p) else { return Ok(()) };
            let file = File::open(&p).expect("open");
            let mut scratch = Vec::new();
            for task in 0..t.ntasks() as u32 {
                let mut want = Vec::new();
                let mut want_err = None;
                let mut s = t.task_stream(task).expect("stream");
                loop {
                    match s.next_record() {
                        Ok(Some(r)) => want.push(r),
                        Ok(None) => break,
                        Err(e) => {
                            want_err = Some(e.to_string());
                            break;
                        }
                    }
                }
                let mut got = Vec::new();
                let mut got_err = None;
                let mut c = t.task_cursor(task).expect("cursor");
                let mut guard = 0;
                while !c.is_done() {
                    let before = got.len();
                    if let Err(e) = c.fill(&p, &file, &mut scratch, &mut got, chunk) {
                        got_err = Some(e.to_string());
                        break;
                    }
                    prop_assert!(got.len() - before <= chunk);
                    guard += 1;
                    prop_assert!(guard < 1000);
                }
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(got_err, want_err);
            }
        }

        #[test]
        fn mutated_records_never_panic(line in "[0-9:.\\-a-z ]{0,40}") {
            let d = tempfile::tempdir().expect("tmp");
            let text = format!("#DIMEMAS:\"p\":0:1(1),1\n{line}\n");
            let p = write(d.path(), text.as_bytes());
            if let Ok(t) = DimTrace::open(&p)
                && let Ok(mut s) = t.task_stream(0)
            {
                let _ = s.next_record();
            }
        }
    }
}
