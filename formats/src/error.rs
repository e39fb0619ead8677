//! The error type of every reader: what went wrong, in which file, where.
use std::path::PathBuf;

/// Result alias of the formats crate.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;

/// Where in a file an error was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// Byte offset in a binary file.
    Offset(u64),
    /// 1-based line and column in a text file.
    LineCol(u64, u64),
    /// Byte offset in a text file, with its 1-based line and column
    /// (shown as `line L, column C (byte offset N)`).
    Text { offset: u64, line: u64, col: u64 },
    /// Not tied to a position (e.g. a missing file in a set).
    None,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::Offset(o) => write!(f, "byte offset {o}"),
            Position::LineCol(l, c) => write!(f, "line {l}, column {c}"),
            Position::Text { offset, line, col } => {
                write!(f, "line {line}, column {col} (byte offset {offset})")
            }
            Position::None => Ok(()),
        }
    }
}

/// Errors of the readers.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The input is malformed.
    #[error("{}: {}{}{}", file.display(), field, if matches!(pos, Position::None) { String::new() } else { format!(" at {pos}") }, if message.is_empty() { String::new() } else { format!(": {message}") })]
    Malformed {
        file: PathBuf,
        field: String,
        pos: Position,
        message: String,
    },
    /// The input could not be read.
    #[error("{}: {source}", file.display())]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An unknown ingest kind was requested.
    #[error("unknown ingest kind '{0}' (known: {1})")]
    UnknownKind(String, String),
    /// Building Arrow arrays failed (a bug or a schema mismatch).
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// A core error (catalog, lake).
    #[error(transparent)]
    Core(#[from] benchlake_core::Error),
}

impl FormatError {
    /// A malformed-input error.
    pub fn malformed(
        file: impl Into<PathBuf>,
        field: impl Into<String>,
        pos: Position,
        message: impl Into<String>,
    ) -> Self {
        FormatError::Malformed {
            file: file.into(),
            field: field.into(),
            pos,
            message: message.into(),
        }
    }

    /// An I/O error on `file`.
    pub fn io(file: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io {
            file: file.into(),
            source,
        }
    }

    /// This error with its line/column position also given as the byte
    /// offset in `text`, the file's bytes (columns count characters).
    pub fn with_offset(self, text: &[u8]) -> Self {
        match self {
            FormatError::Malformed {
                file,
                field,
                pos: Position::LineCol(line, col),
                message,
            } => FormatError::Malformed {
                file,
                field,
                pos: Position::Text {
                    offset: text_offset(text, line, col),
                    line,
                    col,
                },
                message,
            },
            e => e,
        }
    }

    /// This error with its line/column position also given as the byte
    /// offset, read from the file it names (only the lines before it; for
    /// errors found where the file's bytes are no longer at hand).
    pub fn located(self) -> Self {
        match self {
            FormatError::Malformed {
                file,
                field,
                pos: Position::LineCol(line, col),
                message,
            } => {
                let pos = match file_offset(&file, line, col) {
                    Some(offset) => Position::Text { offset, line, col },
                    None => Position::LineCol(line, col),
                };
                FormatError::Malformed {
                    file,
                    field,
                    pos,
                    message,
                }
            }
            e => e,
        }
    }

    /// Retrying cannot fix malformed input; I/O may be transient.
    pub fn is_retryable(&self) -> bool {
        matches!(self, FormatError::Io { .. })
    }
}

/// The byte offset of 1-based `line` and `col` (in characters) of `text`.
pub fn text_offset(text: &[u8], line: u64, col: u64) -> u64 {
    let mut start = 0usize;
    for _ in 1..line.max(1) {
        match memchr::memchr(b'\n', text.get(start..).unwrap_or_default()) {
            Some(i) => start += i + 1,
            None => {
                start = text.len();
                break;
            }
        }
    }
    let rest = text.get(start..).unwrap_or_default();
    let rest = rest
        .get(..memchr::memchr(b'\n', rest).unwrap_or(rest.len()))
        .unwrap_or_default();
    let s = String::from_utf8_lossy(rest);
    let skip = s
        .char_indices()
        .nth(col.saturating_sub(1) as usize)
        .map_or(rest.len(), |(i, _)| i.min(rest.len()));
    (start + skip) as u64
}

/// The byte offset of 1-based `line` and `col` (bytes) in the file at
/// `path`, reading only up to it; the file's length for a line past its end.
fn file_offset(path: &std::path::Path, line: u64, col: u64) -> Option<u64> {
    use std::io::BufRead;
    let f = std::fs::File::open(path).ok()?;
    let mut r = std::io::BufReader::new(f);
    let mut offset = 0u64;
    let mut buf = Vec::new();
    for _ in 1..line.max(1) {
        buf.clear();
        let n = r.read_until(b'\n', &mut buf).ok()?;
        if n == 0 {
            return Some(offset);
        }
        offset += n as u64;
    }
    buf.clear();
    let n = r.read_until(b'\n', &mut buf).ok()? as u64;
    Some(offset + col.saturating_sub(1).min(n))
}
