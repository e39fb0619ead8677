//! The error type of pio.
use std::path::PathBuf;

/// Result alias of pio.
pub type Result<T, E = PioError> = std::result::Result<T, E>;

/// What can go wrong in a pio run.
#[derive(Debug, thiserror::Error)]
pub enum PioError {
    /// A parameter is unknown or its value invalid.
    #[error("parameter {name}: {message}")]
    Param { name: String, message: String },
    /// A file operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The processes could not meet or talk (rendezvous, barrier, gather).
    #[error("communication: {0}")]
    Comm(String),
    /// Another process failed and the run was aborted.
    #[error("aborted: {0}")]
    Aborted(String),
    /// Launching local processes failed.
    #[error("launch: {0}")]
    Launch(String),
    /// Writing the result file failed.
    #[error("result: {0}")]
    Result(String),
}

impl PioError {
    /// A parameter error.
    pub fn param(name: impl Into<String>, message: impl Into<String>) -> Self {
        PioError::Param {
            name: name.into(),
            message: message.into(),
        }
    }
    /// An I/O error of `op` on `path`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PioError::Io {
            op,
            path: path.into(),
            source,
        }
    }
    /// Bad parameters and aborted runs do not get better on retry; I/O and
    /// communication failures may.
    pub fn is_retryable(&self) -> bool {
        matches!(self, PioError::Io { .. } | PioError::Comm(_))
    }
}
