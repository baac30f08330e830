//! Requests the orchestrator makes to workers and the store: retried with backoff on worker
//! loss, with a deadline that progress messages keep alive instead of one huge timeout.
//!
//! A worker that runs a long call publishes progress messages (header `Atelier-Progress`) to
//! the request's reply subject; each one restarts the idle timer. A silent worker (dead, hung,
//! partitioned) is detected after `idle_timeout`, and the same request — same call id — goes to
//! another worker of the pool. Write tools are idempotent per call id, so a call that did run
//! on the lost worker is not applied twice.

use std::time::{Duration, Instant};

use async_nats::StatusCode;
use atelier_messages::codec::{CONTENT_TYPE_HEADER, PROGRESS_HEADER};
use atelier_messages::{ErrorBody, ErrorCode, Format, decode_reply, encode};
use bytes::Bytes;
use futures::StreamExt;
use rand::Rng;
use serde::{Serialize, de::DeserializeOwned};

/// How hard to try.
#[derive(Debug, Clone, Copy)]
pub struct CallPolicy {
    /// Tries in all (the first plus retries).
    pub attempts: u32,
    /// Silence (no reply, no progress) after which a try is abandoned.
    pub idle_timeout: Duration,
    /// Longest a single try may run even with progress.
    pub max_duration: Duration,
    /// First backoff; doubled per retry, with full jitter.
    pub backoff: Duration,
}

impl CallPolicy {
    /// Tool calls: long-running work allowed while the worker reports progress.
    pub const TOOLS: CallPolicy = CallPolicy {
        attempts: 4,
        idle_timeout: Duration::from_secs(10),
        max_duration: Duration::from_secs(600),
        backoff: Duration::from_millis(250),
    };

    /// Store requests: quick, retried through NATS reconnects.
    pub const STORE: CallPolicy = CallPolicy {
        attempts: 6,
        idle_timeout: Duration::from_secs(30),
        max_duration: Duration::from_secs(120),
        backoff: Duration::from_millis(250),
    };
}

/// Sends `request` and decodes the reply, retrying on `TOOL_WORKER_UNAVAILABLE`/`TOOL_TIMEOUT`.
pub async fn call<Req: Serialize, Res: DeserializeOwned>(
    client: &async_nats::Client,
    subject: &str,
    request: &Req,
    policy: CallPolicy,
) -> Result<Res, ErrorBody> {
    let payload: Bytes = encode(request, Format::MessagePack)?.into();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match try_once(client, subject, payload.clone(), policy).await {
            Ok(reply) => return decode_reply(&reply, Format::MessagePack),
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

async fn try_once(
    client: &async_nats::Client,
    subject: &str,
    payload: Bytes,
    policy: CallPolicy,
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
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(CONTENT_TYPE_HEADER, Format::MessagePack.content_type());
    headers.insert(PROGRESS_HEADER, "1");
    crate::rpc::inject_trace_context(&mut headers);
    client
        .publish_with_reply_and_headers(subject.to_string(), inbox, headers, payload)
        .await
        .map_err(|e| transport(e.to_string()))?;
    let deadline = Instant::now() + policy.max_duration;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let wait = policy.idle_timeout.min(remaining);
        let message = match tokio::time::timeout(wait, replies.next()).await {
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
            return Err(ErrorBody::new(
                ErrorCode::ToolWorkerUnavailable,
                format!(
                    "nothing is serving `{subject}`; start the matching `atelier worker` or coordinator"
                ),
            ));
        }
        let is_progress = message
            .headers
            .as_ref()
            .is_some_and(|headers| headers.get(PROGRESS_HEADER).is_some());
        if !is_progress {
            return Ok(message.payload);
        }
    }
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
}
