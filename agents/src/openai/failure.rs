//! Why one attempt at a model call failed, and whether another attempt may help.

use std::time::Duration;

use crate::AgentError;

/// Why one attempt failed, and whether another attempt may help.
#[derive(Debug)]
pub(super) enum Failure {
    Retryable {
        error: AgentError,
        retry_after: Option<Duration>,
    },
    Fatal(AgentError),
}

impl Failure {
    /// A transient failure: the server or the connection may recover.
    pub(super) fn unavailable(message: impl Into<String>) -> Self {
        Failure::Retryable {
            error: AgentError::Unavailable(message.into()),
            retry_after: None,
        }
    }

    /// An answer this client cannot use; asking again would not help.
    pub(super) fn bad_response(message: impl Into<String>) -> Self {
        Failure::Fatal(AgentError::BadResponse(message.into()))
    }

    pub(super) fn into_error(self) -> AgentError {
        match self {
            Failure::Retryable { error, .. } | Failure::Fatal(error) => error,
        }
    }
}
