//! Typed request/reply: encode, send with trace context, wait under a [`Policy`], decode.
//!
//! Quick verbs use the client's shared reply subscription and one deadline. Long calls (tools)
//! ask for progress: the responder publishes progress messages to the reply subject while it
//! works, and each one restarts the idle deadline, so a dead, hung or partitioned responder is
//! noticed after `idle_timeout` while a live one may run up to `max_duration`. Calls that fail
//! transiently (`TOOL_WORKER_UNAVAILABLE`, `TOOL_TIMEOUT`) are retried with jittered
//! exponential backoff, with the same payload (so the same call id).

use std::time::{Duration, Instant};

use async_nats::StatusCode;
use async_nats::client::{PublishErrorKind, RequestErrorKind};
use atelier_messages::codec::PROGRESS_HEADER;
use atelier_messages::verb::Verb;
use atelier_messages::{ErrorBody, ErrorCode, Format, decode_partial_reply, encode};
use bytes::Bytes;
use futures::StreamExt;
use rand::Rng;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::headers::{has_progress_mark, inject_trace_context, with_format};

/// How long to wait and how hard to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Tries in all (the first plus retries).
    pub attempts: u32,
    /// Silence (no reply, no progress) after which a try is abandoned.
    pub idle_timeout: Duration,
    /// Longest a single try may run even with progress.
    pub max_duration: Duration,
    /// First backoff; doubled per retry, with jitter.
    pub backoff: Duration,
    /// Ask the responder for progress messages (long-running calls).
    pub progress: bool,
}

impl Policy {
    /// Tool calls: long-running work allowed while the worker reports progress; retried on
    /// worker loss.
    pub const TOOLS: Policy = Policy {
        attempts: 4,
        idle_timeout: Duration::from_secs(10),
        max_duration: Duration::from_secs(600),
        backoff: Duration::from_millis(250),
        progress: true,
    };

    /// Store requests from workers (blobs can be tens of MiB): retried through reconnects.
    pub const STORE: Policy = Policy {
        attempts: 6,
        idle_timeout: Duration::from_secs(30),
        max_duration: Duration::from_secs(30),
        backoff: Duration::from_millis(250),
        progress: false,
    };

    /// One try with one deadline (CLI and dashboard requests).
    pub const fn once(timeout: Duration) -> Policy {
        Policy {
            attempts: 1,
            idle_timeout: timeout,
            max_duration: timeout,
            backoff: Duration::ZERO,
            progress: false,
        }
    }
}

/// Sends a verb to its subject and decodes its reply.
pub async fn request<V: Verb>(
    client: &async_nats::Client,
    request: &V,
    policy: Policy,
) -> Result<V::Reply, ErrorBody> {
    request_to(client, V::SUBJECT, request, policy).await
}

/// [`request`] for a verb whose answer may leave part of what was asked out (a listing over
/// shards): its value and what it leaves out.
pub async fn request_partial<V: Verb>(
    client: &async_nats::Client,
    request: &V,
    policy: Policy,
) -> Result<(V::Reply, Option<ErrorBody>), ErrorBody> {
    partial_to(client, V::SUBJECT, request, policy).await
}

/// Sends `request` to `subject` (for requests whose subject depends on their content, such as
/// a tool call to its pool) and decodes the reply.
pub async fn request_to<Req: Serialize, Res: DeserializeOwned>(
    client: &async_nats::Client,
    subject: &str,
    request: &Req,
    policy: Policy,
) -> Result<Res, ErrorBody> {
    let (value, _) = partial_to(client, subject, request, policy).await?;
    Ok(value)
}

/// Sends `request` to `subject`; the reply's value and what it leaves out.
async fn partial_to<Req: Serialize, Res: DeserializeOwned>(
    client: &async_nats::Client,
    subject: &str,
    request: &Req,
    policy: Policy,
) -> Result<(Res, Option<ErrorBody>), ErrorBody> {
    let payload: Bytes = encode(request, Format::MessagePack)?.into();
    let reply = request_bytes(client, subject, payload, policy).await?;
    decode_partial_reply(&reply, Format::MessagePack)
}

/// Sends an encoded MessagePack request to `subject` and returns the encoded reply, undecoded:
/// an error here is the transport's alone (no responder, no reply in time, too large), never
/// the responder's answer.
pub async fn request_bytes(
    client: &async_nats::Client,
    subject: &str,
    payload: Bytes,
    policy: Policy,
) -> Result<Bytes, ErrorBody> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let reply = match policy.progress {
            true => try_with_progress(client, subject, payload.clone(), policy).await,
            false => try_once(client, subject, payload.clone(), policy.idle_timeout).await,
        };
        match reply {
            Ok(reply) => return Ok(reply),
            Err(error) if is_transient(&error) && attempt < policy.attempts => {
                let delay = backoff(policy.backoff, attempt);
                tracing::warn!(subject, attempt, code = %error.code, delay_ms = delay.as_millis() as u64, "retrying request");
                tokio::time::sleep(delay).await;
            }
            Err(error) => return Err(error),
        }
    }
}

fn is_transient(error: &ErrorBody) -> bool {
    matches!(
        error.code,
        ErrorCode::ToolWorkerUnavailable | ErrorCode::ToolTimeout
    )
}

fn backoff(base: Duration, attempt: u32) -> Duration {
    let ceiling = base.saturating_mul(1 << attempt.min(8));
    let millis = u64::try_from(ceiling.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    Duration::from_millis(rand::rng().random_range(millis / 2..=millis))
}

fn no_responders(subject: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ToolWorkerUnavailable,
        format!(
            "nothing is serving `{subject}`; start the matching `atelier worker` or `atelier coordinator`"
        ),
    )
}

fn too_large(subject: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!("request on `{subject}` exceeds the server's max payload"),
    )
}

fn request_headers(format: Format, progress: bool) -> async_nats::HeaderMap {
    let mut headers = with_format(format);
    if progress {
        headers.insert(PROGRESS_HEADER, "1");
    }
    inject_trace_context(&mut headers);
    headers
}

/// One try on the client's shared reply subscription.
async fn try_once(
    client: &async_nats::Client,
    subject: &str,
    payload: Bytes,
    timeout: Duration,
) -> Result<Bytes, ErrorBody> {
    let outgoing = async_nats::Request::new()
        .payload(payload)
        .headers(request_headers(Format::MessagePack, false))
        .timeout(Some(timeout));
    let reply = client
        .send_request(subject.to_string(), outgoing)
        .await
        .map_err(|error| match error.kind() {
            RequestErrorKind::NoResponders => no_responders(subject),
            RequestErrorKind::TimedOut => ErrorBody::new(
                ErrorCode::ToolTimeout,
                format!("no reply on `{subject}` within {} s", timeout.as_secs()),
            ),
            RequestErrorKind::MaxPayloadExceeded => too_large(subject),
            _ => ErrorBody::new(
                ErrorCode::ToolWorkerUnavailable,
                format!("request on `{subject}` failed: {error}"),
            ),
        })?;
    Ok(reply.payload)
}

/// One try on a reply subscription of its own, where progress messages restart the idle timer.
async fn try_with_progress(
    client: &async_nats::Client,
    subject: &str,
    payload: Bytes,
    policy: Policy,
) -> Result<Bytes, ErrorBody> {
    let transport = |error: String| {
        ErrorBody::new(
            ErrorCode::ToolWorkerUnavailable,
            format!("`{subject}`: {error}"),
        )
    };
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| transport(e.to_string()))?;
    client
        .publish_with_reply_and_headers(
            subject.to_string(),
            inbox,
            request_headers(Format::MessagePack, true),
            payload,
        )
        .await
        .map_err(|error| match error.kind() {
            PublishErrorKind::MaxPayloadExceeded => too_large(subject),
            _ => transport(error.to_string()),
        })?;
    let deadline = Instant::now() + policy.max_duration;
    let mut taken = false;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let wait = policy.idle_timeout.min(remaining);
        let message = match tokio::time::timeout(wait, replies.next()).await {
            Err(_) if taken && !remaining.is_zero() => return Err(lost(subject, wait)),
            Err(_) => {
                return Err(ErrorBody::new(
                    ErrorCode::ToolTimeout,
                    format!(
                        "no reply or progress on `{subject}` for {} s",
                        wait.as_secs()
                    ),
                ));
            }
            Ok(None) => return Err(transport("the reply subscription closed".into())),
            Ok(Some(message)) => message,
        };
        if message.status == Some(StatusCode::NO_RESPONDERS) {
            return Err(no_responders(subject));
        }
        if !has_progress_mark(message.headers.as_ref()) {
            return Ok(message.payload);
        }
        taken = true;
    }
}

/// The worker that took a call stopped reporting progress before answering: it died, or was cut
/// off. The caller decides whether to send the call again (and counts how often this happened).
fn lost(subject: &str, silence: Duration) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ToolCrashed,
        format!(
            "the worker holding the call on `{subject}` went silent for {} s after taking it \
             (it died or was cut off)",
            silence.as_secs()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_stays_jittered_within_bounds() {
        let base = Duration::from_millis(100);
        for attempt in 1..6 {
            let ceiling = 100u128 << attempt;
            let delay = backoff(base, attempt).as_millis();
            assert!(
                delay >= ceiling / 2 && delay <= ceiling,
                "attempt {attempt}: {delay}"
            );
        }
    }

    #[test]
    fn only_worker_loss_and_timeouts_are_retried() {
        assert!(is_transient(&no_responders("s")));
        assert!(!is_transient(&ErrorBody::new(ErrorCode::NotFound, "x")));
        // A worker lost while holding a call is the caller's to count and retry.
        assert!(!is_transient(&lost("s", Duration::from_secs(10))));
    }
}
