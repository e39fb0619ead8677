//! Errors of the core crate.
use std::path::PathBuf;

/// Result alias of the core crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors raised by core: lake I/O, Parquet encoding, invalid names.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unknown table '{0}'")]
    UnknownTable(String),
    #[error("invalid {field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("batch for table '{table}' does not match the catalog schema: {message}")]
    SchemaMismatch { table: String, message: String },
    #[error("object store configuration: {0}")]
    Config(String),
    /// An object of the lake that should be Parquet does not decode.
    #[error("{key}: {message}")]
    Decode { key: String, message: String },
    /// A table object that was listed but is gone when read: a merge
    /// replaced it since (compaction), or retention deleted it. Reading the
    /// table again finds its rows where they are now (retryable).
    #[error("{key}: no such object (merged or deleted since it was listed)")]
    Gone { key: String },
    /// A raw bundle (`raw/{run_id}/bundle.tar.zst`) that does not decode or
    /// does not hold what it should, at byte `offset` of its tar stream.
    #[error("{key}: byte offset {offset}: {message}")]
    Bundle {
        key: String,
        offset: u64,
        message: String,
    },
}

impl Error {
    /// Whether retrying the same operation may succeed (transient store/network errors).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::ObjectStore(e) => !matches!(
                e,
                object_store::Error::NotFound { .. }
                    | object_store::Error::InvalidPath { .. }
                    | object_store::Error::NotSupported { .. }
                    | object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }
            ),
            Error::Io { .. } | Error::Gone { .. } => true,
            _ => false,
        }
    }

    /// Shorthand for an [`Error::Invalid`].
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Error::Invalid {
            field,
            message: message.into(),
        }
    }
}
