//! Errors of the coordinator and their gRPC status codes.

/// Result alias of the coordinator.
pub type Result<T, E = CoordError> = std::result::Result<T, E>;

/// What can go wrong in the coordinator.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    /// A request field is invalid; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The named thing does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is valid but the system is not in a state to take it.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The caller's lease is no longer valid (expired and re-leased, or cancelled).
    #[error("{0}")]
    LeaseLost(String),
    /// The caller's role may not do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// The state store failed.
    #[error("state store: {0}")]
    Store(#[from] rusqlite::Error),
    /// The object store failed.
    #[error("lake: {0}")]
    Lake(#[from] benchlake_core::Error),
    /// Stored data could not be decoded (a bug or a corrupted database).
    #[error("stored record: {0}")]
    Decode(#[from] serde_json::Error),
    /// Server setup failed.
    #[error("{0}")]
    Setup(String),
}

impl CoordError {
    /// Whether a retry of the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            CoordError::Store(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ),
            CoordError::Lake(e) => e.is_retryable(),
            _ => false,
        }
    }

    /// Shorthand for an invalid-argument error naming `field`.
    pub fn invalid(field: &str, message: impl std::fmt::Display) -> Self {
        CoordError::Invalid(format!("{field}: {message}"))
    }
}

impl From<CoordError> for tonic::Status {
    fn from(e: CoordError) -> Self {
        let msg = e.to_string();
        match e {
            CoordError::Invalid(_) => tonic::Status::invalid_argument(msg),
            CoordError::NotFound(_) => tonic::Status::not_found(msg),
            CoordError::FailedPrecondition(_) => tonic::Status::failed_precondition(msg),
            CoordError::LeaseLost(_) => tonic::Status::aborted(msg),
            CoordError::PermissionDenied(_) => tonic::Status::permission_denied(msg),
            ref e if e.is_retryable() => tonic::Status::unavailable(msg),
            _ => {
                tracing::error!(error = %msg, "internal error");
                tonic::Status::internal(msg)
            }
        }
    }
}
