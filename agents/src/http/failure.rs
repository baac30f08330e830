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
        _ => Failure::bad_response(detail),
    }
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
            Failure::Fatal(AgentError::BadResponse(_))
        ));
    }
}
