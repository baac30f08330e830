//! Why one attempt at a model call failed, and whether another attempt may help; HTTP statuses
//! and `Retry-After` read into that.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};

use crate::AgentError;

/// The longest `Retry-After` honoured.
pub(super) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Why one attempt failed, and whether another attempt may help.
#[derive(Debug)]
pub(crate) enum Failure {
    Retryable {
        error: AgentError,
        retry_after: Option<Duration>,
    },
    Fatal(AgentError),
}

impl Failure {
    /// A transient failure: the server or the connection may recover.
    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Failure::Retryable {
            error: AgentError::Unavailable(message.into()),
            retry_after: None,
        }
    }

    /// An answer this client cannot use; asking again would not help.
    pub(crate) fn bad_response(message: impl Into<String>) -> Self {
        Failure::Fatal(AgentError::BadResponse(message.into()))
    }

    pub(crate) fn into_error(self) -> AgentError {
        match self {
            Failure::Retryable { error, .. } | Failure::Fatal(error) => error,
        }
    }
}

/// A failed HTTP status as a failure: 401/403 end the call, 429 is rate limiting, 408 and 5xx
/// (Anthropic's 529 "overloaded" included) are transient, any other status is fatal.
/// `Retry-After` applies to every retryable status.
pub(super) fn classify_status(
    status: StatusCode,
    message: &str,
    retry_after: Option<Duration>,
) -> Failure {
    let detail = format!("HTTP {}: {message}", status.as_u16());
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            Failure::Fatal(AgentError::AuthFailed(detail))
        }
        StatusCode::TOO_MANY_REQUESTS => Failure::Retryable {
            error: AgentError::RateLimited(detail),
            retry_after,
        },
        s if s == StatusCode::REQUEST_TIMEOUT || s.is_server_error() => Failure::Retryable {
            error: AgentError::Unavailable(detail),
            retry_after,
        },
        s if s.is_redirection() => Failure::Fatal(AgentError::NotConfigured(format!(
            "{detail}; a model server's redirects are not followed (they could lead where the \
             model URL's check never looked): configure the URL it redirects to"
        ))),
        s if s.is_client_error() && names_context_overflow(message) => {
            Failure::Fatal(AgentError::ContextOverflow(detail))
        }
        s if s.is_client_error() => Failure::Fatal(AgentError::RequestRefused {
            status: s.as_u16(),
            message: message.to_string(),
        }),
        _ => Failure::bad_response(detail),
    }
}

/// How servers say a prompt is longer than the model's context: llama.cpp's
/// `exceed_context_size_error`, OpenAI's `context_length_exceeded`, vLLM's "maximum context
/// length", Anthropic's "prompt is too long", Ollama's "context length".
const CONTEXT_OVERFLOW_WORDS: &[&str] = &[
    "exceed_context_size",
    "context_length_exceeded",
    "maximum context length",
    "exceeds the available context",
    "prompt is too long",
    "context length",
    "context window",
];

/// True when an error message says the prompt does not fit the model's context.
fn names_context_overflow(message: &str) -> bool {
    let lower = message.to_lowercase();
    CONTEXT_OVERFLOW_WORDS
        .iter()
        .any(|words| lower.contains(words))
}

/// `Retry-After` in seconds, capped; HTTP dates are ignored (the backoff applies instead).
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let delay = Duration::try_from_secs_f64(seconds).ok()?;
    Some(delay.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_parsed_and_capped() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, "2".parse().expect("header"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(RETRY_AFTER, "3600".parse().expect("header"));
        assert_eq!(retry_after(&headers), Some(MAX_RETRY_AFTER));
        headers.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().expect("header"),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn statuses_are_classified_with_their_retry_after() {
        let wait = Some(Duration::from_secs(1));
        let overloaded = classify_status(StatusCode::from_u16(529).expect("529"), "busy", wait);
        assert!(
            matches!(overloaded, Failure::Retryable { error: AgentError::Unavailable(ref m), retry_after }
                if m == "HTTP 529: busy" && retry_after == wait),
            "{overloaded:?}"
        );
        let limited = classify_status(StatusCode::TOO_MANY_REQUESTS, "slow", wait);
        assert!(matches!(
            limited,
            Failure::Retryable {
                error: AgentError::RateLimited(_),
                ..
            }
        ));
        let denied = classify_status(StatusCode::FORBIDDEN, "no", wait);
        assert!(matches!(denied, Failure::Fatal(AgentError::AuthFailed(_))));
        let invalid = classify_status(StatusCode::BAD_REQUEST, "bad", wait);
        assert!(matches!(
            invalid,
            Failure::Fatal(AgentError::RequestRefused { status: 400, .. })
        ));
        // A redirect is not followed and not tried again: the URL is the operator's to fix.
        let moved = classify_status(StatusCode::FOUND, "", wait);
        assert!(matches!(
            moved,
            Failure::Fatal(AgentError::NotConfigured(_))
        ));
    }

    #[test]
    fn a_prompt_over_the_context_is_a_context_overflow_of_every_server() {
        // llama.cpp's answer, as the local 0.5B model's server sent it for a 17,188-token
        // request to a 16,384-token context.
        let llama = "exceed_context_size_error: the request exceeds the available context size, \
                     try increasing it";
        let openai = "This model's maximum context length is 128000 tokens. However, your \
                      messages resulted in 130000 tokens.";
        let anthropic = "invalid_request_error: prompt is too long: 210000 tokens > 200000 maximum";
        for message in [llama, openai, anthropic] {
            let failure = classify_status(StatusCode::BAD_REQUEST, message, None);
            let error = failure.into_error();
            assert_eq!(
                error.code(),
                atelier_messages::ErrorCode::ContextOverflow,
                "{message}"
            );
        }
        let other = classify_status(StatusCode::UNPROCESSABLE_ENTITY, "bad schema", None);
        assert_eq!(
            other.into_error().code(),
            atelier_messages::ErrorCode::ProviderUnavailable
        );
    }
}
