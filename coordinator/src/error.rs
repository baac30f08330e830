//! The coordinator crate's error type.

use atelier_messages::{ErrorBody, ErrorCode};

/// Everything that can go wrong in the coordinator.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("storage: {0}")]
    Storage(#[from] sled::Error),
    #[error("storage transaction: {0}")]
    Transaction(String),
    #[error("i/o on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("stored record is corrupt: {0}")]
    Corrupt(String),
    #[error("nats: {0}")]
    Nats(String),
    #[error("actor: {0}")]
    Actor(String),
    /// Blocking storage code waited on a runtime worker thread, where the wait would stall the
    /// worker (see `storage::wait_for`): a bug, refused rather than risked.
    #[error("waited for {0} on a runtime thread: storage waits run on blocking threads")]
    WaitOnRuntimeThread(&'static str),
    #[error(transparent)]
    Transport(#[from] atelier_transport::TransportError),
    #[error(transparent)]
    Rejected(#[from] ErrorBody),
}

impl CoordinatorError {
    /// The wire form: rejections keep their code, everything else is `INTERNAL`.
    pub fn to_body(&self) -> ErrorBody {
        match self {
            CoordinatorError::Rejected(body) => body.clone(),
            other => ErrorBody::new(ErrorCode::Internal, other.to_string()),
        }
    }

    /// A NATS failure while doing `context` (`reading the store claim: …`), as `map_err` takes
    /// it.
    pub(crate) fn nats<E: std::fmt::Display>(context: &str) -> impl FnOnce(E) -> Self + '_ {
        move |error| CoordinatorError::Nats(format!("{context}: {error}"))
    }
}

impl From<CoordinatorError> for ErrorBody {
    fn from(error: CoordinatorError) -> Self {
        error.to_body()
    }
}

pub(crate) fn io_error(
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> CoordinatorError + '_ {
    move |source| CoordinatorError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// A NATS call that failed: `TOOL_WORKER_UNAVAILABLE`, saying what could not be done.
pub(crate) fn unavailable(what: &str, error: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ToolWorkerUnavailable,
        format!("could not {what}: {error}"),
    )
}
