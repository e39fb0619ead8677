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
    /// The state store failed (any backend; the message comes from it).
    #[error("state store: {message}")]
    Store {
        message: String,
        /// Whether the same request may succeed later (busy, lost connection).
        retryable: bool,
    },
    /// This coordinator is no longer the leader: another one took over (its
    /// fencing token is newer), so this write was refused.
    #[error("{0}")]
    Fenced(String),
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
            CoordError::Store { retryable, .. } => *retryable,
            CoordError::Fenced(_) => true,
            CoordError::Lake(e) => e.is_retryable(),
            _ => false,
        }
    }

    /// Shorthand for an invalid-argument error naming `field`.
    pub fn invalid(field: &str, message: impl std::fmt::Display) -> Self {
        CoordError::Invalid(format!("{field}: {message}"))
    }
}

impl From<rusqlite::Error> for CoordError {
    fn from(e: rusqlite::Error) -> Self {
        let retryable = matches!(
            &e,
            rusqlite::Error::SqliteFailure(f, _) if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            )
        );
        CoordError::Store {
            message: e.to_string(),
            retryable,
        }
    }
}

impl From<tokio_postgres::Error> for CoordError {
    fn from(e: tokio_postgres::Error) -> Self {
        use tokio_postgres::error::SqlState;
        // A lost connection, a serialization conflict or a server shutting
        // down may all pass; a constraint or syntax error will not.
        let retryable = e.is_closed()
            || e.code().is_some_and(|c| {
                *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED
                    || *c == SqlState::ADMIN_SHUTDOWN
                    || *c == SqlState::CANNOT_CONNECT_NOW
                    || *c == SqlState::LOCK_NOT_AVAILABLE
                    || *c == SqlState::QUERY_CANCELED
                    || *c == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
            })
            || e.code().is_none();
        let message = match e.as_db_error() {
            Some(d) => format!("{}: {}", d.severity(), d.message()),
            None => benchlake_proto::client::error_chain(&e),
        };
        CoordError::Store { message, retryable }
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
