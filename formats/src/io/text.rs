//! Shared helpers of the text readers: bounded file reading, line/column
//! positions, number parsing that reports where it failed.
use std::path::Path;

use crate::error::{FormatError, Position, Result};

/// Largest input the I/O readers accept. IOR/mdtest/pio outputs are kilobytes to
/// a few megabytes; refusing more keeps a wrong path from exhausting memory.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// Reads a whole file, refusing anything over [`MAX_INPUT_BYTES`].
pub fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| FormatError::io(path, e))?;
    let mut buf = Vec::new();
    f.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| FormatError::io(path, e))?;
    if buf.len() as u64 > MAX_INPUT_BYTES {
        return Err(FormatError::malformed(
            path,
            "file",
            Position::Offset(MAX_INPUT_BYTES),
            format!("larger than {MAX_INPUT_BYTES} bytes"),
        ));
    }
    Ok(buf)
}

/// The bytes as UTF-8, or an error at the first invalid byte (as line/column).
pub fn utf8<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| {
        let ok = bytes.get(..e.valid_up_to()).unwrap_or_default();
        // The valid prefix is valid UTF-8 by construction.
        let prefix = std::str::from_utf8(ok).unwrap_or_default();
        let (l, c) = line_col(prefix, prefix.len());
        FormatError::malformed(path, "text", Position::LineCol(l, c), "invalid UTF-8")
    })
}

/// Fails unless `text` ends with a newline. IOR, mdtest and their per-rank CSVs
/// end every line with `\n`, so a last line without one was cut short (a copy
/// interrupted, a job killed mid-write): the error names `field` and the byte
/// offset where that line starts, instead of a row with a shortened number.
pub fn require_complete(path: &Path, text: &str, field: &str) -> Result<()> {
    if text.is_empty() || text.ends_with('\n') {
        return Ok(());
    }
    let start = text.rfind('\n').map_or(0, |i| i + 1);
    let (line, _) = line_col(text, start);
    let last = text.get(start..).unwrap_or_default();
    let shown: String = last.chars().take(60).collect();
    Err(FormatError::malformed(
        path,
        field,
        Position::Offset(start as u64),
        format!(
            "the file ends at byte {} in the middle of line {line} ('{shown}'): it is cut short",
            text.len()
        ),
    ))
}

/// The error of an input with no rows where its format requires at least one:
/// named at the end of the file.
pub fn no_rows(path: &Path, text: &str, field: &str, what: &str) -> FormatError {
    FormatError::malformed(
        path,
        field,
        Position::Offset(text.len() as u64),
        format!(
            "no {what} in the file ({} bytes): it is cut short or not this format",
            text.len()
        ),
    )
}

/// Per-rank files (IOR's and mdtest's CSVs) hold one row per rank, in rank
/// order, for every phase: a group is a run of rows with the same `tag` and
/// increasing ranks. Returns `(rows of the last group, rows of the one before)`
/// when the last group is the shorter, which is how a file cut at a line
/// boundary looks (a later group with fewer tasks would need a task count that
/// decreases, which neither tool does).
pub fn short_last_group<'a>(
    rows: impl IntoIterator<Item = (&'a str, i64)>,
) -> Option<(usize, usize)> {
    let (mut prev, mut cur) = (0usize, 0usize);
    let mut last: Option<(&str, i64)> = None;
    for (tag, rank) in rows {
        match last {
            Some((t, r)) if t == tag && rank > r => cur += 1,
            _ => {
                prev = cur;
                cur = 1;
            }
        }
        last = Some((tag, rank));
    }
    (prev > 0 && cur < prev).then_some((cur, prev))
}

/// [`short_last_group`] as the reader's error: the per-rank file `path` (its
/// `text`) is cut short when its last group of rows is the shorter.
pub fn check_last_group<'a>(
    path: &std::path::Path,
    text: &str,
    rows: impl IntoIterator<Item = (&'a str, i64)>,
) -> Result<()> {
    match short_last_group(rows) {
        None => Ok(()),
        Some((n, prev)) => Err(FormatError::malformed(
            path,
            "row",
            Position::Offset(text.len() as u64),
            format!(
                "the last group of rows has {n} rank(s) where the one before has {prev}: \
                 the file is cut short at byte {}",
                text.len()
            ),
        )),
    }
}

/// 1-based line and column (in characters) of byte offset `at` of `text`.
pub fn line_col(text: &str, at: usize) -> (u64, u64) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() as u64 + 1;
    let col = match before.rfind('\n') {
        Some(nl) => before.get(nl + 1..).unwrap_or("").chars().count(),
        None => before.chars().count(),
    } as u64
        + 1;
    (line, col)
}

/// A field of a delimited or whitespace-separated line: its text, 1-based line
/// and 1-based column, so parse errors can point at it.
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    pub text: &'a str,
    pub line: u64,
    pub col: u64,
}

impl<'a> Field<'a> {
    /// The field as a finite-or-infinite `f64` (C's `%e` prints `inf`/`nan`).
    pub fn f64(&self, path: &Path, name: &str) -> Result<f64> {
        let t = self.text.trim();
        let v = match t {
            "inf" | "+inf" | "Inf" => Some(f64::INFINITY),
            "-inf" | "-Inf" => Some(f64::NEG_INFINITY),
            _ => t.parse::<f64>().ok().filter(|v| !v.is_nan()),
        };
        v.ok_or_else(|| self.err(path, name, format!("'{t}' is not a number")))
    }
    /// The field as an `i64`.
    pub fn i64(&self, path: &Path, name: &str) -> Result<i64> {
        let t = self.text.trim();
        t.parse::<i64>()
            .map_err(|_| self.err(path, name, format!("'{t}' is not an integer")))
    }
    /// A malformed error at this field.
    pub fn err(&self, path: &Path, name: &str, msg: impl Into<String>) -> FormatError {
        FormatError::malformed(path, name, Position::LineCol(self.line, self.col), msg)
    }
}

/// Splits `line` (1-based number `line_no`) at `sep`, keeping columns.
pub fn split_fields(line: &str, line_no: u64, sep: char) -> Vec<Field<'_>> {
    let mut out = Vec::new();
    let mut start = 0usize;
    for (i, ch) in line.char_indices() {
        if ch == sep {
            out.push(field(line, start, i, line_no));
            start = i + ch.len_utf8();
        }
    }
    out.push(field(line, start, line.len(), line_no));
    out
}

/// Splits `line` at runs of whitespace, keeping columns.
pub fn split_ws(line: &str, line_no: u64) -> Vec<Field<'_>> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    for (i, ch) in line.char_indices() {
        match (ch.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push(field(line, s, i, line_no));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push(field(line, s, line.len(), line_no));
    }
    out
}

fn field(line: &str, start: usize, end: usize, line_no: u64) -> Field<'_> {
    Field {
        text: line.get(start..end).unwrap_or(""),
        line: line_no,
        col: line
            .get(..start)
            .map_or(1, |p| p.chars().count() as u64 + 1),
    }
}

/// A serde_json error as a malformed error with its line and column.
pub fn json_err(path: &Path, what: &str, e: &serde_json::Error) -> FormatError {
    let pos = if e.line() == 0 {
        Position::None
    } else {
        Position::LineCol(e.line() as u64, e.column() as u64)
    };
    FormatError::malformed(path, what, pos, e.to_string())
}

/// Byte offset of the value at `path` (`phases[2].tasks[0].rank`, keys and
/// indices) in the JSON document `doc`, for errors found after parsing. When
/// the path does not reach a value, the offset of the deepest value it does
/// reach (0 for the document).
pub fn json_offset(doc: &[u8], path: &str) -> u64 {
    let mut segs = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (part.get(..i).unwrap_or(""), part.get(i..).unwrap_or("")),
            None => (part, ""),
        };
        if !key.is_empty() {
            segs.push(JsonSeg::Key(key));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').unwrap_or(r.len());
            segs.push(JsonSeg::Index(
                r.get(..end)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(usize::MAX),
            ));
            rest = r.get(end + 1..).unwrap_or("");
        }
    }
    let mut at = ws(doc, 0);
    for seg in segs {
        match json_child(doc, at, seg) {
            Some(v) => at = v,
            None => break,
        }
    }
    at as u64
}

#[derive(Clone, Copy)]
enum JsonSeg<'a> {
    Key(&'a str),
    Index(usize),
}

fn ws(doc: &[u8], mut i: usize) -> usize {
    while doc.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

/// The end of the string starting at `i` (its opening quote).
fn json_string_end(doc: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    loop {
        match doc.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// The end of the value starting at `i`.
fn json_value_end(doc: &[u8], i: usize) -> Option<usize> {
    match doc.get(i)? {
        b'"' => json_string_end(doc, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match doc.get(j)? {
                    b'"' => {
                        j = json_string_end(doc, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while doc
                .get(j)
                .is_some_and(|c| !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace())
            {
                j += 1;
            }
            Some(j)
        }
    }
}

/// The start of the member `seg` of the object or array at `at`.
fn json_child(doc: &[u8], at: usize, seg: JsonSeg<'_>) -> Option<usize> {
    let open = *doc.get(at)?;
    let mut i = ws(doc, at + 1);
    let mut n = 0usize;
    loop {
        if matches!(doc.get(i)?, b'}' | b']') {
            return None;
        }
        let value = if open == b'{' {
            let kend = json_string_end(doc, i)?;
            let key = doc.get(i + 1..kend - 1)?;
            let colon = ws(doc, kend);
            let v = ws(doc, colon + 1);
            if let JsonSeg::Key(k) = seg
                && key == k.as_bytes()
            {
                return Some(v);
            }
            v
        } else {
            if let JsonSeg::Index(k) = seg
                && k == n
            {
                return Some(i);
            }
            i
        };
        n += 1;
        i = ws(doc, json_value_end(doc, value)?);
        if doc.get(i) == Some(&b',') {
            i = ws(doc, i + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        let f = split_fields("a,bb,,c", 3, ',');
        let cols: Vec<_> = f.iter().map(|f| (f.text, f.col)).collect();
        assert_eq!(cols, [("a", 1), ("bb", 3), ("", 6), ("c", 7)]);
        let w = split_ws("  x  yz ", 1);
        assert_eq!(w.len(), 2);
        assert_eq!((w[1].text, w[1].col), ("yz", 6));
    }

    #[test]
    fn json_offsets_follow_paths() {
        let d = br#"{"a": 1, "b": [ {"x": "]}"}, {"x": 7, "y": [1, 2]} ], "c": "q"}"#;
        let at = |p: &str| json_offset(d, p) as usize;
        assert_eq!(&d[at("a")..at("a") + 1], b"1");
        assert_eq!(&d[at("b[1].x")..at("b[1].x") + 1], b"7");
        assert_eq!(&d[at("b[1].y[1]")..at("b[1].y[1]") + 1], b"2");
        assert_eq!(&d[at("c")..at("c") + 3], b"\"q\"");
        // A path that stops short: the deepest value reached.
        assert_eq!(at("b[5].x"), at("b"));
        assert_eq!(json_offset(b"", "a"), 0);
    }
}
