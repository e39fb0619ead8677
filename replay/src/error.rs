//! Errors of the replay engine.
use std::path::PathBuf;

/// Result alias of the replay crate.
pub type Result<T, E = ReplayError> = std::result::Result<T, E>;

/// Why a replay could not produce a prediction.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A trace or configuration could not be read.
    #[error(transparent)]
    Format(#[from] benchlake_formats::FormatError),
    /// The trace is inconsistent (deadlock, unmatched receive, unknown request ...).
    /// `record` names the rank's record the diagnosis is about.
    #[error("{file}: {message}")]
    Inconsistent {
        /// The trace.
        file: PathBuf,
        /// Diagnosis, naming rank and record.
        message: String,
    },
    /// A parameter is missing, unknown or out of range.
    #[error("parameter '{name}': {message}")]
    Param {
        /// Parameter name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The trace uses a feature the model does not implement.
    #[error("{file}: unsupported: {message}")]
    Unsupported {
        /// The trace or configuration.
        file: PathBuf,
        /// What is not supported.
        message: String,
    },
    /// The machine's limits stop the replay (too few open files allowed for
    /// the trace's rank files).
    #[error("{file}: {message}")]
    Limit {
        /// The file that could not be opened.
        file: PathBuf,
        /// What limit, and how to raise it.
        message: String,
    },
    /// Building the output tables failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// Catalog / core error.
    #[error(transparent)]
    Core(#[from] benchlake_core::Error),
    /// I/O on an output or plug-in.
    #[error("{0}")]
    Io(String),
}

impl ReplayError {
    /// A parameter error.
    pub fn param(name: &str, message: impl Into<String>) -> Self {
        Self::Param {
            name: name.to_string(),
            message: message.into(),
        }
    }
}
