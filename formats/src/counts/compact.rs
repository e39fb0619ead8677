//! Streaming reader of the compact count files (`send-counters.job<J>.rank<L>.txt`,
//! `recv-counters…`, format version 9): a pull parser that yields one block header
//! at a time and then its rows one by one, so a caller never holds more than one
//! row of a block (a 1024-rank recv block is ~4 MB of text; a file is many blocks).
//!
//! Tolerated variants (see docs/counts.md): blank lines anywhere between header
//! lines, `Alltoallv calls:` with a colon or extra spaces, `","` as list separator,
//! the seed's doubled colon (`Rank(s) 1-5,1024: : 0 0`), trailing spaces, `\r\n`,
//! the pre-v1 space-separated call list on the `Count:` line, and anything after
//! `" ("` on that line. Everything else is an error naming file, line and column.
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::lines::{Lines, find, labelled_uint, trim_end};
use super::ranklist::{self, CallList, Span};
use crate::error::{FormatError, Result};

/// Largest communicator accepted (bounds the per-block rank bitset).
pub const MAX_COMM_SIZE: u64 = 1 << 24;
/// Largest count accepted: counts are C `int` printed with `%d`.
pub const MAX_COUNT: u64 = i32::MAX as u64;
/// Largest datatype size accepted (`MPI_Type_size` returns an `int`).
pub const MAX_DATATYPE_SIZE: u64 = i32::MAX as u64;
/// Largest call ID accepted (calls are stored as `i64`).
pub const MAX_CALL_ID: u64 = i64::MAX as u64;

/// The header of one block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockHeader {
    /// 0-based index of the block in its file.
    pub index: u64,
    /// Line of `# Raw counters`.
    pub line: u64,
    /// Byte offset of `# Raw counters`.
    pub offset: u64,
    /// `Number of ranks`: the communicator size N.
    pub comm_size: u64,
    /// `Datatype size` in bytes (send type in send files, recv type in recv files).
    pub datatype_size: u64,
    /// `Alltoallv calls S-E` (not the calls of the block; see the reference).
    pub header_calls: (u64, u64),
    /// The calls having exactly this block's matrices (`Count:` line).
    pub calls: CallList,
}

/// One row: the ranks sharing it and their N counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    /// The ranks (ascending spans).
    pub ranks: Vec<Span>,
    /// The counts to (send) or from (recv) comm ranks 0..N-1.
    pub counts: Vec<u64>,
    /// Line of the row.
    pub line: u64,
}

impl Row {
    /// Number of ranks sharing the row.
    pub fn num_ranks(&self) -> u64 {
        ranklist::count(&self.ranks)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    Between,
    InData,
}

/// Pull parser over one compact file.
pub struct CompactReader<R> {
    lines: Lines<R>,
    state: State,
    next_index: u64,
    header: Option<BlockHeader>,
    /// Which ranks of the current block have had a row.
    seen: Vec<u64>,
    seen_count: u64,
    /// Blocks starting at or after this byte offset are not read.
    end: Option<u64>,
    /// A block start at or after `end` was reached (and pushed back).
    at_end: bool,
}

impl CompactReader<BufReader<File>> {
    /// Opens `path` from the start.
    pub fn open(path: &Path) -> Result<Self> {
        let f = File::open(path).map_err(|e| FormatError::io(path, e))?;
        Ok(Self::new(BufReader::with_capacity(1 << 16, f), path))
    }

    /// Opens `path` at a block start found earlier (byte offset, line number of the
    /// `# Raw counters` line, index of that block).
    pub fn open_at(path: &Path, offset: u64, line: u64, index: u64) -> Result<Self> {
        let mut f = File::open(path).map_err(|e| FormatError::io(path, e))?;
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| FormatError::io(path, e))?;
        let mut r = Self::new(BufReader::with_capacity(1 << 16, f), path);
        r.lines = r.lines.with_line(line.saturating_sub(1), offset);
        r.next_index = index;
        Ok(r)
    }

    /// Opens the blocks of `path` that start in the byte range `start..end`
    /// (`end`: to the end of the file), where `start` is the start of a block,
    /// `line_before` the number of the line before it and `index` that block's
    /// index. Readers of consecutive ranges cut at block starts
    /// ([`next_block_start`]) together read the file exactly as one reader
    /// does, errors included: a reader sees the lines after its range (a block
    /// cut short by the next one is the same error). A range whose line number
    /// is not known yet is read with `line_before` 0 and its numbers shifted
    /// afterwards.
    pub fn open_range(
        path: &Path,
        start: u64,
        end: Option<u64>,
        line_before: u64,
        index: u64,
    ) -> Result<Self> {
        let mut f = File::open(path).map_err(|e| FormatError::io(path, e))?;
        f.seek(SeekFrom::Start(start))
            .map_err(|e| FormatError::io(path, e))?;
        let mut r = Self::new(BufReader::with_capacity(1 << 16, f), path);
        r.lines = r.lines.with_line(line_before, start);
        r.next_index = index;
        r.end = end;
        Ok(r)
    }
}

impl<R: BufRead> CompactReader<R> {
    /// Reads `reader`, naming `path` in errors.
    pub fn new(reader: R, path: &Path) -> Self {
        Self {
            lines: Lines::new(reader, path),
            state: State::Between,
            next_index: 0,
            header: None,
            seen: Vec::new(),
            seen_count: 0,
            end: None,
            at_end: false,
        }
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        self.lines.path()
    }

    /// The number of the last line read (the number of lines of the input
    /// once [`CompactReader::next_block`] returned `None`).
    pub fn line(&self) -> u64 {
        self.lines.number() - u64::from(self.at_end)
    }

    /// The current block's header.
    pub fn header(&self) -> Option<&BlockHeader> {
        self.header.as_ref()
    }

    /// Reads the next block header; `None` at end of file. Unread rows of the
    /// current block are parsed (and checked) and skipped.
    pub fn next_block(&mut self) -> Result<Option<BlockHeader>> {
        if self.state == State::InData {
            let mut row = Row::default();
            while self.next_row(&mut row)? {}
        }
        if self.at_end || !self.lines.skip_blank()? {
            return Ok(None);
        }
        if self.end.is_some_and(|e| self.lines.offset() >= e) {
            // The next range's first line.
            self.lines.unread();
            self.at_end = true;
            return Ok(None);
        }
        let l = &mut self.lines;
        if trim_end(l.text()) != b"# Raw counters" {
            return Err(l.error(
                "block header",
                1,
                format!(
                    "expected '# Raw counters', found '{}'",
                    String::from_utf8_lossy(&l.text()[..l.text().len().min(60)])
                ),
            ));
        }
        let line = l.number();
        let offset = l.offset();
        next_nonblank(l, "Number of ranks")?;
        let comm_size = labelled_uint(l, "Number of ranks: ", "Number of ranks", MAX_COMM_SIZE)?;
        if comm_size == 0 {
            return Err(l.error("Number of ranks", 18, "communicator size 0"));
        }
        next_nonblank(l, "Datatype size")?;
        let datatype_size =
            labelled_uint(l, "Datatype size: ", "Datatype size", MAX_DATATYPE_SIZE)?;
        next_nonblank(l, "Alltoallv calls")?;
        let header_calls = parse_calls_header(l)?;
        next_nonblank(l, "Count")?;
        let calls = parse_count_line(l)?;
        next_nonblank(l, "BEGINNING DATA")?;
        if trim_end(l.text()) != b"BEGINNING DATA" {
            return Err(l.error("BEGINNING DATA", 1, "expected 'BEGINNING DATA'"));
        }
        let h = BlockHeader {
            index: self.next_index,
            line,
            offset,
            comm_size,
            datatype_size,
            header_calls,
            calls,
        };
        self.next_index += 1;
        self.state = State::InData;
        self.seen.clear();
        self.seen.resize(comm_size.div_ceil(64) as usize, 0);
        self.seen_count = 0;
        self.header = Some(h.clone());
        Ok(Some(h))
    }

    /// Reads the next row of the current block into `row`; `false` after `END DATA`.
    pub fn next_row(&mut self, row: &mut Row) -> Result<bool> {
        if self.state != State::InData {
            return Ok(false);
        }
        let n = self.header.as_ref().map(|h| h.comm_size).unwrap_or(0);
        let l = &mut self.lines;
        if !l.advance()? {
            return Err(l.error_at(
                "END DATA",
                l.number() + 1,
                1,
                "unexpected end of file: missing 'END DATA'",
            ));
        }
        let t = l.text();
        if trim_end(t) == b"END DATA" {
            self.state = State::Between;
            if self.seen_count != n {
                let missing = (0..n).find(|r| !bit(&self.seen, *r)).unwrap_or_default();
                return Err(l.error(
                    "END DATA",
                    1,
                    format!(
                        "block has rows for {} of {} ranks (rank {missing} has none)",
                        self.seen_count, n
                    ),
                ));
            }
            return Ok(false);
        }
        if t.starts_with(b"# Raw counters") {
            return Err(l.error("END DATA", 1, "missing 'END DATA' before the next block"));
        }
        let Some(rest) = t.strip_prefix(b"Rank(s) ") else {
            return Err(l.error("row", 1, "expected 'Rank(s) LIST: COUNTS' or 'END DATA'"));
        };
        let base = 8;
        let Some(colon) = rest.iter().position(|&c| c == b':') else {
            return Err(l.error("row", base + 1, "missing ':' after the rank list"));
        };
        let list = rest.get(..colon).unwrap_or_default();
        row.ranks = ranklist::parse(list)
            .map_err(|e| l.error("rank list", base + e.offset + 1, e.message))?;
        row.line = l.number();
        let mut pos = base + colon + 1;
        let mut counts = rest.get(colon + 1..).unwrap_or_default();
        // The seed's doubled colon `1-5,1024: : 0 0` is unambiguous: skip it.
        if let Some(r) = counts.strip_prefix(b" :") {
            counts = r;
            pos += 2;
        }
        for &(a, b) in &row.ranks {
            if b >= n {
                return Err(l.error(
                    "rank list",
                    base + 1,
                    format!("rank {b} out of range for a communicator of {n} ranks"),
                ));
            }
            for r in a..=b {
                if bit(&self.seen, r) {
                    return Err(l.error(
                        "rank list",
                        base + 1,
                        format!("rank {r} already has a row in this block"),
                    ));
                }
                set_bit(&mut self.seen, r);
            }
            self.seen_count += b - a + 1;
        }
        parse_counts(l, counts, pos, n, &mut row.counts)?;
        Ok(true)
    }
}

fn bit(v: &[u64], r: u64) -> bool {
    v.get((r / 64) as usize)
        .is_some_and(|w| w & (1u64 << (r % 64)) != 0)
}

fn set_bit(v: &mut [u64], r: u64) {
    if let Some(w) = v.get_mut((r / 64) as usize) {
        *w |= 1u64 << (r % 64);
    }
}

fn next_nonblank<R: BufRead>(l: &mut Lines<R>, what: &str) -> Result<()> {
    if l.skip_blank()? {
        Ok(())
    } else {
        Err(l.error_at(
            what,
            l.number() + 1,
            1,
            format!("unexpected end of file, expected '{what}'"),
        ))
    }
}

/// `Alltoallv calls S-E` (also `Alltoallv calls: S-E`, extra spaces).
fn parse_calls_header<R: BufRead>(l: &Lines<R>) -> Result<(u64, u64)> {
    let t = trim_end(l.text());
    let Some(rest) = t.strip_prefix(b"Alltoallv calls") else {
        let what = t.split(|c| *c == b' ').next().unwrap_or_default();
        return Err(l.error(
            "Alltoallv calls",
            1,
            format!(
                "expected 'Alltoallv calls S-E', found '{}' (only alltoallv count files are supported)",
                String::from_utf8_lossy(&what[..what.len().min(40)])
            ),
        ));
    };
    let mut i = 15;
    let mut rest = rest;
    if let Some(r) = rest.strip_prefix(b":") {
        rest = r;
        i += 1;
    }
    let before = rest.len();
    while let Some(r) = rest.strip_prefix(b" ") {
        rest = r;
    }
    i += before - rest.len();
    if i == 15 {
        return Err(l.error(
            "Alltoallv calls",
            16,
            "expected ' ' after 'Alltoallv calls'",
        ));
    }
    let spans = ranklist::parse(rest)
        .map_err(|e| l.error("Alltoallv calls", i + e.offset + 1, e.message))?;
    match spans.as_slice() {
        [(a, b)] if *b <= MAX_CALL_ID => Ok((*a, *b)),
        _ => Err(l.error("Alltoallv calls", i + 1, "expected one range S-E")),
    }
}

/// `Count: K calls - LIST[ (…)]`.
fn parse_count_line<R: BufRead>(l: &Lines<R>) -> Result<CallList> {
    let t = trim_end(l.text());
    let Some(rest) = t.strip_prefix(b"Count: ") else {
        return Err(l.error("Count", 1, "expected 'Count: K calls - LIST'"));
    };
    let Some(sp) = rest.iter().position(|&c| c == b' ') else {
        return Err(l.error("Count", 8, "expected 'K calls - LIST'"));
    };
    let k = super::lines::parse_uint(rest.get(..sp).unwrap_or_default(), MAX_CALL_ID)
        .map_err(|_| l.error("Count", 8, "expected the number of calls"))?;
    let after = rest.get(sp..).unwrap_or_default();
    let Some(list) = after.strip_prefix(b" calls - ") else {
        return Err(l.error(
            "Count",
            8 + sp + 1,
            "expected ' calls - ' after the number of calls",
        ));
    };
    let col = 7 + sp + 9;
    let list = match find(list, b" (") {
        Some(p) => list.get(..p).unwrap_or_default(),
        None => list,
    };
    let spans = match ranklist::parse(list) {
        Ok(s) => s,
        Err(e) => {
            // Pre-v1 files list the calls separated by spaces, truncated at
            // MAX_TRACKED_CALLS: accept that when the list has no comma at all.
            if !list.contains(&b',')
                && let Ok(s) = ranklist::parse_spaced(list)
                && ranklist::count(&s) <= k
            {
                if ranklist::count(&s) < k {
                    tracing::warn!(file = %l.path().display(), line = l.number(), "pre-v1 call list truncated: {} of {k} calls listed", ranklist::count(&s));
                }
                return Ok(CallList(s));
            }
            return Err(l.error("Count", col + e.offset + 1, e.message));
        }
    };
    if spans.last().is_some_and(|s| s.1 > MAX_CALL_ID) {
        return Err(l.error("Count", col + 1, "call ID exceeds the i64 range"));
    }
    let n = ranklist::count(&spans);
    if n != k {
        return Err(l.error("Count", 8, format!("says {k} calls but lists {n}")));
    }
    Ok(CallList(spans))
}

/// Parses exactly `n` space-separated counts from `s` (which starts at 1-based
/// column `col0 + 1` of the line) into `out`.
pub(crate) fn parse_counts<R: BufRead>(
    l: &Lines<R>,
    s: &[u8],
    col0: usize,
    n: u64,
    out: &mut Vec<u64>,
) -> Result<()> {
    out.clear();
    // Every count needs at least two bytes ("0 "), so this bounds the reservation
    // by the line length, not by the header's N.
    out.reserve((n as usize).min(s.len() / 2 + 1));
    // Hot loop (every count of a file goes through it): one pass over the bytes,
    // errors in cold functions. A token of more than 10 digits cannot be a C int;
    // `v` may wrap for such tokens but is then rejected.
    let mut v: u64 = 0;
    let mut digits = 0usize;
    let mut start = 0usize;
    for (i, &c) in s.iter().enumerate() {
        let d = c.wrapping_sub(b'0');
        if d < 10 {
            if digits == 0 {
                start = i;
                v = 0;
            }
            v = v.wrapping_mul(10).wrapping_add(u64::from(d));
            digits += 1;
        } else if c == b' ' {
            if digits > 0 {
                if digits > 10 || v > MAX_COUNT || out.len() as u64 == n {
                    return Err(count_error(l, col0 + start + 1, n, out.len()));
                }
                out.push(v);
                digits = 0;
            }
        } else {
            return Err(char_error(l, col0 + i + 1, c));
        }
    }
    if digits > 0 {
        if digits > 10 || v > MAX_COUNT || out.len() as u64 == n {
            return Err(count_error(l, col0 + start + 1, n, out.len()));
        }
        out.push(v);
    }
    if (out.len() as u64) != n {
        return Err(l.error(
            "counts",
            col0 + s.len() + 1,
            format!("row has {} counts, expected {n}", out.len()),
        ));
    }
    Ok(())
}

#[cold]
fn count_error<R: BufRead>(l: &Lines<R>, col: usize, n: u64, have: usize) -> FormatError {
    if have as u64 == n {
        l.error("counts", col, format!("row has more than {n} counts"))
    } else {
        l.error(
            "counts",
            col,
            format!("count exceeds the C int range ({MAX_COUNT})"),
        )
    }
}

#[cold]
fn char_error<R: BufRead>(l: &Lines<R>, col: usize, c: u8) -> FormatError {
    let msg = if c == b'-' {
        "negative count".to_string()
    } else {
        format!("expected a count, found '{}'", char::from(c))
    };
    l.error("counts", col, msg)
}

/// The first line of `path` at or after byte `from` that starts with
/// `# Raw counters` (a block start, or a line no block may hold): its byte
/// offset, `None` when there is none. Reads from `from` on only, so a file can
/// be cut for several readers ([`CompactReader::open_range`]) without a scan of
/// what comes before.
pub fn next_block_start(path: &Path, from: u64) -> Result<Option<u64>> {
    next_block_start_buf(path, from, 1 << 16)
}

/// [`next_block_start`] reading `buf_len` bytes at a time (at least 32).
fn next_block_start_buf(path: &Path, from: u64, buf_len: usize) -> Result<Option<u64>> {
    use std::io::Read;
    const TAG: &[u8] = b"# Raw counters";
    let mut f = File::open(path).map_err(|e| FormatError::io(path, e))?;
    // Start one byte early: a line starts at `from` when the byte before it is
    // a newline (or `from` is the start of the file).
    let begin = from.saturating_sub(1);
    f.seek(SeekFrom::Start(begin))
        .map_err(|e| FormatError::io(path, e))?;
    let mut buf = vec![0u8; buf_len.max(32)];
    // `buf[..keep]` holds the unsearched tail of the previous read, at file
    // offset `at`.
    let (mut keep, mut at) = (0usize, begin);
    let mut first = true;
    loop {
        let n = f
            .read(buf.get_mut(keep..).unwrap_or_default())
            .map_err(|e| FormatError::io(path, e))?;
        let have = keep + n;
        let hay = buf.get(..have).unwrap_or_default();
        if first && from == 0 && hay.starts_with(TAG) {
            return Ok(Some(0));
        }
        first = false;
        let mut i = 0;
        while let Some(p) = hay
            .get(i..)
            .and_then(|h| h.iter().position(|&c| c == b'\n'))
        {
            let line = i + p + 1;
            match hay.get(line..line + TAG.len()) {
                Some(t) if t == TAG => return Ok(Some(at + line as u64)),
                Some(_) => i = line,
                // Too few bytes after the newline: keep them for the next read.
                None => break,
            }
        }
        if n == 0 {
            return Ok(None);
        }
        // Keep from the last newline on (at most TAG.len() bytes matter).
        let tail = hay.len().saturating_sub(i).min(TAG.len() + 1);
        let from_tail = have - tail;
        buf.copy_within(from_tail..have, 0);
        at += from_tail as u64;
        keep = tail;
    }
}

/// Where each block of a compact file starts (for splitting work): byte offset,
/// line and index, found by a light scan for `# Raw counters` lines.
pub fn block_starts(path: &Path) -> Result<Vec<(u64, u64, u64)>> {
    use std::io::Read;
    let mut f = BufReader::with_capacity(
        1 << 20,
        File::open(path).map_err(|e| FormatError::io(path, e))?,
    );
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    let mut line = 1u64;
    let mut at_line_start = true;
    // Bytes of a line start carried over a chunk boundary.
    let mut carry: Vec<u8> = Vec::new();
    let mut carry_pos: Option<(u64, u64)> = None;
    const TAG: &[u8] = b"# Raw counters";
    loop {
        let n = f.read(&mut buf).map_err(|e| FormatError::io(path, e))?;
        if n == 0 {
            break;
        }
        for (i, &c) in buf.iter().take(n).enumerate() {
            if let Some((o, ln)) = carry_pos {
                carry.push(c);
                if carry.len() == TAG.len() {
                    if carry == TAG {
                        out.push((o, ln, out.len() as u64));
                    }
                    carry.clear();
                    carry_pos = None;
                } else if TAG.get(carry.len() - 1) != Some(&c) {
                    carry.clear();
                    carry_pos = None;
                }
            }
            if at_line_start && c == b'#' && carry_pos.is_none() {
                carry.clear();
                carry.push(c);
                carry_pos = Some((offset + i as u64, line));
            }
            at_line_start = c == b'\n';
            if c == b'\n' {
                line += 1;
            }
        }
        offset += n as u64;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Cursor;

    /// Writes a block the way the profiler does (rows grouped, `", "` lists).
    fn write_block(n: usize, dt: u64, calls: &str, m: &[Vec<u64>], sep: &str) -> String {
        let mut s = format!(
            "# Raw counters\n\nNumber of ranks: {n}\nDatatype size: {dt}\nAlltoallv calls 0-9\nCount: {} calls - {calls}\n\n\nBEGINNING DATA\n",
            ranklist::count(&ranklist::parse(calls.as_bytes()).unwrap())
        );
        let mut groups: Vec<(Vec<Span>, &Vec<u64>)> = Vec::new();
        for (r, row) in m.iter().enumerate() {
            match groups.iter_mut().find(|g| g.1 == row) {
                Some(g) => g.0.push((r as u64, r as u64)),
                None => groups.push((vec![(r as u64, r as u64)], row)),
            }
        }
        for (ranks, row) in groups {
            s.push_str(&format!("Rank(s) {}: ", ranklist::format(&ranks, sep)));
            for c in row {
                s.push_str(&format!("{c} "));
            }
            s.push('\n');
        }
        s.push_str("END DATA\n");
        s
    }

    fn parse_all(text: &str) -> Result<Vec<(BlockHeader, Vec<Row>)>> {
        let mut r = CompactReader::new(Cursor::new(text.as_bytes().to_vec()), Path::new("t"));
        let mut out = Vec::new();
        while let Some(h) = r.next_block()? {
            let mut rows = Vec::new();
            let mut row = Row::default();
            while r.next_row(&mut row)? {
                rows.push(row.clone());
            }
            out.push((h, rows));
        }
        Ok(out)
    }

    proptest! {
        #[test]
        fn generated_blocks_roundtrip(
            n in 1usize..7,
            seed in proptest::collection::vec(0u64..3, 49),
            spaced in any::<bool>(),
        ) {
            // Few distinct values so that rows repeat and rank lists get ranges.
            let m: Vec<Vec<u64>> = (0..n).map(|i| (0..n).map(|j| seed[(i * 7 + j) % 49] * 5).collect()).collect();
            let text = write_block(n, 4, "0-2, 7", &m, if spaced { ", " } else { "," });
            let blocks = parse_all(&text).unwrap();
            prop_assert_eq!(blocks.len(), 1);
            let (h, rows) = &blocks[0];
            prop_assert_eq!(h.comm_size, n as u64);
            prop_assert_eq!(&h.calls.0, &vec![(0, 2), (7, 7)]);
            let mut back = vec![Vec::new(); n];
            for row in rows {
                for &(a, b) in &row.ranks {
                    for r in a..=b {
                        back[r as usize] = row.counts.clone();
                    }
                }
            }
            prop_assert_eq!(back, m);
        }

        #[test]
        fn arbitrary_input_never_panics(text in "[#RankBEGINDTA(s)0-9:, \n-]{0,300}") {
            let _ = parse_all(&text);
        }

        #[test]
        fn truncated_blocks_are_errors(cut in 1usize..150) {
            let m = vec![vec![1, 0, 2], vec![0, 0, 0], vec![1, 0, 2]];
            let text = write_block(3, 8, "4", &m, ", ");
            let cut = cut.min(text.len() - 1);
            // Cutting anywhere before the final newline of END DATA loses data.
            if cut < text.len() - "END DATA\n".len() {
                prop_assert!(parse_all(&text[..cut]).is_err() || text[..cut].trim().is_empty());
            }
        }
    }

    #[test]
    fn next_block_start_and_ranges_read_as_one_reader() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("recv-counters.job0.rank0.txt");
        let m = vec![vec![1, 2, 0], vec![3, 4, 5], vec![0, 0, 7]];
        // Blank lines between blocks; a '#' mid-line is not a block start.
        let blocks: Vec<String> = (0..200)
            .map(|i| write_block(3, 4, &i.to_string(), &m, ", "))
            .collect();
        let text = blocks
            .join("\n")
            .replace("\n\n\nBEGINNING", " (# Raw counters)\n\n\nBEGINNING");
        std::fs::write(&p, &text).unwrap();
        let starts: Vec<u64> = block_starts(&p).unwrap().iter().map(|t| t.0).collect();
        assert_eq!(starts.len(), 200);
        // From every offset: the first block start at or after it (reads that
        // end inside the tag are carried over).
        for from in (0..text.len() as u64 + 2).step_by(7) {
            let want = starts.iter().copied().find(|&s| s >= from);
            assert_eq!(next_block_start(&p, from).unwrap(), want, "from {from}");
            for buf in [32, 33, 47, 100] {
                let got = next_block_start_buf(&p, from, buf).unwrap();
                assert_eq!(got, want, "from {from}, {buf}-byte reads");
            }
        }
        // Ranges cut at block starts: the blocks and rows of one reader, with
        // line numbers and indices shifted by those of the ranges before.
        let whole = {
            let mut r = CompactReader::open(&p).unwrap();
            let mut out = Vec::new();
            while let Some(h) = r.next_block().unwrap() {
                let mut row = Row::default();
                while r.next_row(&mut row).unwrap() {
                    out.push((h.clone(), row.clone()));
                }
            }
            out
        };
        let cuts = [0, starts[37], starts[38], starts[150], text.len() as u64];
        let (mut got, mut lines, mut index) = (Vec::new(), 0, 0);
        for w in cuts.windows(2) {
            let mut r = CompactReader::open_range(&p, w[0], Some(w[1]), 0, 0).unwrap();
            let mut n = 0;
            while let Some(mut h) = r.next_block().unwrap() {
                n += 1;
                h.line += lines;
                h.index += index;
                let mut row = Row::default();
                while r.next_row(&mut row).unwrap() {
                    row.line += lines;
                    got.push((h.clone(), row.clone()));
                }
            }
            lines += r.line();
            index += n;
        }
        assert_eq!(got, whole);
        assert_eq!(lines, text.lines().count() as u64);
    }

    #[test]
    fn block_starts_finds_every_block() {
        let dir = std::env::temp_dir().join(format!("bl-counts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("send-counters.job0.rank0.txt");
        let m = vec![vec![1, 2], vec![3, 4]];
        let a = write_block(2, 4, "0", &m, ", ");
        let b = write_block(2, 4, "1", &m, ", ");
        std::fs::write(&p, format!("{a}{b}")).unwrap();
        let starts = block_starts(&p).unwrap();
        assert_eq!(starts, vec![(0, 1, 0), (a.len() as u64, 13, 1)]);
        let mut r = CompactReader::open_at(&p, starts[1].0, starts[1].1, starts[1].2).unwrap();
        let h = r.next_block().unwrap().unwrap();
        assert_eq!((h.index, h.line, h.calls.0.clone()), (1, 13, vec![(1, 1)]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
