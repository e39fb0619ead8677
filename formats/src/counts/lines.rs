//! Line-by-line reading of the profiler's text files with line numbers, so every
//! reader can report `file, line, column`. Lines are bounded in length so a file
//! without newlines cannot make a reader allocate without limit.
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use crate::error::{FormatError, Position, Result};

/// Longest line accepted (a 1024-rank row is about 4 KiB; 2^20 ranks of 10-digit
/// counts still fit).
pub const MAX_LINE: u64 = 64 << 20;

/// A line reader over any `BufRead`.
pub struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    line: u64,
    /// Byte offset of the start of the current line, and of the next one.
    start: u64,
    next: u64,
    path: PathBuf,
    /// A line pushed back by [`Lines::unread`].
    pending: bool,
    /// The field named when the last line is cut short (see [`Lines::record`]).
    record: &'static str,
}

impl<R: BufRead> Lines<R> {
    /// Reads `reader`, naming `path` in errors.
    pub fn new(reader: R, path: impl AsRef<Path>) -> Self {
        Self {
            reader,
            buf: Vec::with_capacity(4096),
            line: 0,
            start: 0,
            next: 0,
            path: path.as_ref().to_path_buf(),
            pending: false,
            record: "record",
        }
    }

    /// Names the field reported when the file ends in the middle of a line
    /// (`time` for a timing file, whose lines are nearly all times).
    pub fn record(mut self, field: &'static str) -> Self {
        self.record = field;
        self
    }

    /// Starts numbering at `line` (the line before the first one read), for readers
    /// that resume in the middle of a file.
    pub fn with_line(mut self, line: u64, offset: u64) -> Self {
        self.line = line;
        self.next = offset;
        self
    }

    /// Byte offset of the start of the current line.
    pub fn offset(&self) -> u64 {
        self.start
    }

    /// Bytes read so far (the file's length once [`Lines::advance`] returned `false`).
    pub fn consumed(&self) -> u64 {
        self.next
    }

    /// The error of a file that has its header but none of the records it exists
    /// for: named at the end of the file.
    pub fn no_records(&self, field: &str, what: &str) -> FormatError {
        FormatError::malformed(
            &self.path,
            field,
            Position::Offset(self.next),
            format!(
                "no {what} in the file ({} bytes): it is cut short or not a profiler file",
                self.next
            ),
        )
    }

    /// Advances to the next line (without `\n`/`\r\n`); `false` at end of file.
    ///
    /// The profiler ends every line with `\n`, so a last line without one is a
    /// record cut short (a copy or a job killed mid-write): it is an error naming
    /// the byte offset where that line starts, never a shorter value (`0` for
    /// `0.000023`).
    pub fn advance(&mut self) -> Result<bool> {
        if self.pending {
            self.pending = false;
            return Ok(true);
        }
        self.buf.clear();
        let n = (&mut self.reader)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| FormatError::io(&self.path, e))?;
        if n == 0 {
            return Ok(false);
        }
        self.line += 1;
        self.start = self.next;
        self.next += n as u64;
        if self.buf.len() as u64 > MAX_LINE {
            return Err(self.error("line", 1, format!("line longer than {MAX_LINE} bytes")));
        }
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        } else {
            let head = self.buf.get(..self.buf.len().min(60)).unwrap_or_default();
            let shown = String::from_utf8_lossy(head).into_owned();
            return Err(FormatError::malformed(
                &self.path,
                self.record,
                Position::Offset(self.start),
                format!(
                    "the file ends at byte {} in the middle of line {} ('{shown}'): it is cut short",
                    self.next, self.line
                ),
            ));
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(true)
    }

    /// Makes the next [`Lines::advance`] return the current line again.
    pub fn unread(&mut self) {
        self.pending = true;
    }

    /// The current line.
    pub fn text(&self) -> &[u8] {
        &self.buf
    }

    /// The current line number (1-based; 0 before the first line).
    pub fn number(&self) -> u64 {
        self.line
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Advances past blank lines; `false` at end of file. The current line is the
    /// first non-blank one.
    pub fn skip_blank(&mut self) -> Result<bool> {
        while self.advance()? {
            if !self.buf.iter().all(|c| c.is_ascii_whitespace()) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Advances to the next line or fails with "unexpected end of file, expected WHAT".
    pub fn expect_line(&mut self, what: &str) -> Result<()> {
        if self.advance()? {
            Ok(())
        } else {
            Err(self.error_at(
                what,
                self.line + 1,
                1,
                format!("unexpected end of file, expected {what}"),
            ))
        }
    }

    /// A malformed error at column `col` (1-based) of the current line.
    pub fn error(&self, field: &str, col: usize, msg: impl Into<String>) -> FormatError {
        self.error_at(field, self.line, col as u64, msg)
    }

    /// The byte offset of 1-based column `col` of the current line.
    fn offset_of(&self, col: u64) -> u64 {
        self.start + col.saturating_sub(1).min(self.buf.len() as u64)
    }

    /// A malformed error at an explicit line and column.
    pub fn error_at(
        &self,
        field: &str,
        line: u64,
        col: u64,
        msg: impl Into<String>,
    ) -> FormatError {
        // On the current line the byte offset is known too.
        let pos = if line == self.line && self.line > 0 {
            Position::Text {
                offset: self.offset_of(col),
                line,
                col,
            }
        } else {
            Position::LineCol(line, col)
        };
        FormatError::malformed(&self.path, field, pos, msg)
    }
}

/// Parses a non-negative decimal that must fill `s` entirely; `Err(offset)` names
/// the first bad byte, `Err(usize::MAX)` an overflow of `max`.
pub fn parse_uint(s: &[u8], max: u64) -> std::result::Result<u64, usize> {
    if s.is_empty() {
        return Err(0);
    }
    let mut v: u64 = 0;
    for (i, &c) in s.iter().enumerate() {
        if !c.is_ascii_digit() {
            return Err(i);
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .filter(|v| *v <= max)
            .ok_or(usize::MAX)?;
    }
    Ok(v)
}

/// Parses `PREFIX<uint>` on the current line (trailing spaces allowed) and returns
/// the value, with an error naming `field` otherwise.
pub fn labelled_uint<R: BufRead>(
    lines: &Lines<R>,
    prefix: &str,
    field: &str,
    max: u64,
) -> Result<u64> {
    let t = lines.text();
    let Some(rest) = t.strip_prefix(prefix.as_bytes()) else {
        return Err(lines.error(
            field,
            1,
            format!(
                "expected '{prefix}...', found '{}'",
                String::from_utf8_lossy(&t[..t.len().min(60)])
            ),
        ));
    };
    let rest = trim_end(rest);
    parse_uint(rest, max).map_err(|off| {
        if off == usize::MAX {
            lines.error(field, prefix.len() + 1, format!("value exceeds {max}"))
        } else {
            lines.error(
                field,
                prefix.len() + off + 1,
                "expected a non-negative integer",
            )
        }
    })
}

/// `s` without trailing ASCII whitespace.
pub fn trim_end(s: &[u8]) -> &[u8] {
    let mut e = s.len();
    while e > 0 && s.get(e - 1).is_some_and(|c| c.is_ascii_whitespace()) {
        e -= 1;
    }
    s.get(..e).unwrap_or(s)
}

/// Finds `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}
