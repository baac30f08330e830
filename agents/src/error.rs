//! The agents crate's error type.

use atelier_messages::{ErrorBody, ErrorCode};

use crate::provider::Usage;

/// Everything that can go wrong while talking to a model or running the agent loop.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("no model provider is configured: {0}")]
    NotConfigured(String),
    #[error("invalid model spec `{spec}`: {reason}")]
    InvalidSpec { spec: String, reason: String },
    #[error("model spec `{spec}` is not allowed: {reason}")]
    NotAllowed { spec: String, reason: String },
    #[error("the provider rejected the credentials: {0}")]
    AuthFailed(String),
    #[error("the provider is rate limiting: {0}")]
    RateLimited(String),
    #[error("the provider is unavailable: {0}")]
    Unavailable(String),
    #[error("the provider answered something this client cannot use: {0}")]
    BadResponse(String),
    /// The server refused the request itself (HTTP 400, 404, 422, …): sending it again
    /// unchanged would not help.
    #[error("the provider refused the request: HTTP {status}: {message}")]
    RequestRefused { status: u16, message: String },
    /// The request does not fit the model's context window (measured before sending, or the
    /// server said so).
    #[error("the request does not fit the model's context window: {0}")]
    ContextOverflow(String),
    #[error("the model's tool call is still invalid after corrections: {0}")]
    ToolCallInvalid(String),
    #[error("the model's output is degenerate: {0}")]
    Degenerate(String),
    #[error("replay script: {0}")]
    Replay(String),
    #[error(transparent)]
    Job(#[from] ErrorBody),
    /// A turn that failed after the model had answered at least once: the failure, and the
    /// tokens its requests used.
    #[error("{error}")]
    TurnFailed {
        error: Box<AgentError>,
        usage: Usage,
    },
}

impl AgentError {
    /// The stable code this error maps to when it ends a job.
    pub fn code(&self) -> ErrorCode {
        match self {
            AgentError::NotConfigured(_) | AgentError::InvalidSpec { .. } => {
                ErrorCode::ProviderNotConfigured
            }
            AgentError::NotAllowed { .. } => ErrorCode::ModelNotAllowed,
            AgentError::AuthFailed(_) => ErrorCode::ProviderAuthFailed,
            AgentError::RateLimited(_) => ErrorCode::ProviderRateLimited,
            AgentError::Unavailable(_)
            | AgentError::BadResponse(_)
            | AgentError::RequestRefused { .. } => ErrorCode::ProviderUnavailable,
            AgentError::ContextOverflow(_) => ErrorCode::ContextOverflow,
            AgentError::ToolCallInvalid(_) => ErrorCode::ToolCallInvalid,
            AgentError::Degenerate(_) => ErrorCode::ModelOutputDegenerate,
            AgentError::Replay(_) => ErrorCode::ProviderUnavailable,
            AgentError::Job(body) => body.code,
            AgentError::TurnFailed { error, .. } => error.code(),
        }
    }

    /// `self` as the failure of a turn whose requests used `usage`.
    pub fn after_usage(self, usage: Usage) -> AgentError {
        match self {
            AgentError::TurnFailed { error, usage: used } => AgentError::TurnFailed {
                error,
                usage: used.plus(usage),
            },
            error => AgentError::TurnFailed {
                error: Box::new(error),
                usage,
            },
        }
    }

    /// The tokens a failed turn used, when the model answered before it failed.
    pub fn spent(&self) -> Option<Usage> {
        match self {
            AgentError::TurnFailed { usage, .. } => Some(*usage),
            _ => None,
        }
    }

    /// The error as a wire body.
    pub fn to_body(&self) -> ErrorBody {
        match self {
            AgentError::Job(body) => body.clone(),
            AgentError::TurnFailed { error, .. } => error.to_body(),
            other => ErrorBody::new(other.code(), other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_and_degenerate_failures_have_their_own_codes() {
        let invalid = AgentError::ToolCallInvalid("unknown tool `x`".into());
        assert_eq!(invalid.code(), ErrorCode::ToolCallInvalid);
        assert_eq!(invalid.to_body().code.as_str(), "TOOL_CALL_INVALID");
        let degenerate = AgentError::Degenerate("empty reply".into());
        assert_eq!(degenerate.code().as_str(), "MODEL_OUTPUT_DEGENERATE");
        assert_eq!(
            degenerate.to_string(),
            "the model's output is degenerate: empty reply"
        );
    }

    #[test]
    fn a_failed_turn_keeps_its_code_message_and_usage() {
        let usage = Usage {
            prompt_tokens: 300,
            completion_tokens: 60,
        };
        let failed = AgentError::Degenerate("empty reply".into()).after_usage(usage);
        assert_eq!(failed.code(), ErrorCode::ModelOutputDegenerate);
        assert_eq!(
            failed.to_body().message,
            "the model's output is degenerate: empty reply"
        );
        assert_eq!(failed.spent(), Some(usage));
        let twice = failed.after_usage(usage);
        assert_eq!(twice.spent().map(|u| u.prompt_tokens), Some(600));
        assert_eq!(AgentError::Unavailable("down".into()).spent(), None);
    }
}
