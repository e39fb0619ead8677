//! Small helpers shared by the Dimemas text readers: field splitting with column
//! tracking and the line/column of a byte offset (computed only on the error path,
//! so the happy path never counts lines).
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::error::{FormatError, Position};

/// Line and column (1-based) of byte `offset` in the file at `path`; falls back to a
/// byte offset if the file cannot be re-read.
pub(crate) fn position_of(path: &Path, offset: u64) -> Position {
    let Ok(f) = std::fs::File::open(path) else {
        return Position::Offset(offset);
    };
    let mut r = BufReader::new(f.take(offset));
    let mut line = 1u64;
    let mut col = 1u64;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(_) => return Position::Offset(offset),
        };
        if buf.is_empty() {
            break;
        }
        for &b in buf {
            if b == b'\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
        }
        let n = buf.len();
        r.consume(n);
    }
    Position::Text { offset, line, col }
}

/// A cursor over the `:`-separated fields of one record line.
pub(crate) struct Fields<'a> {
    line: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(line: &'a [u8]) -> Self {
        Self { line, pos: 0 }
    }

    /// Byte column (0-based) where the next field starts.
    pub(crate) fn col(&self) -> usize {
        self.pos
    }

    /// Number of fields left (including the next one).
    pub(crate) fn remaining(&self) -> usize {
        if self.pos > self.line.len() {
            return 0;
        }
        1 + self
            .line
            .get(self.pos..)
            .map_or(0, |r| r.iter().filter(|&&b| b == b':').count())
    }

    /// The next raw field, or `None` at the end of the line.
    pub(crate) fn next_raw(&mut self) -> Option<&'a [u8]> {
        if self.pos > self.line.len() {
            return None;
        }
        let rest = self.line.get(self.pos..)?;
        let end = rest.iter().position(|&b| b == b':').unwrap_or(rest.len());
        let field = rest.get(..end)?;
        self.pos += end + 1;
        Some(field)
    }
}

/// Parses a signed decimal integer (no sign allowed for `u64` callers).
pub(crate) fn parse_i64(s: &[u8]) -> Option<i64> {
    let s = trim(s);
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, s.get(1..)?),
        Some(b'+') => (false, s.get(1..)?),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut v: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(i64::from(b - b'0'))?;
    }
    Some(if neg { -v } else { v })
}

/// Parses a finite floating-point number.
pub(crate) fn parse_f64(s: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(trim(s)).ok()?;
    let v: f64 = s.parse().ok()?;
    v.is_finite().then_some(v)
}

pub(crate) fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    s.get(start..end.max(start)).unwrap_or(&[])
}

/// Builds a malformed-input error at byte `offset` of `path`.
pub(crate) fn malformed(
    path: &Path,
    field: &str,
    offset: u64,
    message: impl Into<String>,
) -> FormatError {
    FormatError::malformed(path, field, position_of(path, offset), message)
}
