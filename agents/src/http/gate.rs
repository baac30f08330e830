//! What a provider's HTTP attempts wait for: the limits a deployment keeps on one model
//! profile (calls in flight, requests and tokens a minute), enforced by whoever implements
//! [`ProviderGate`] (the coordinator, over NATS KV, for every coordinator at once).
//!
//! Every attempt of a call, retries included, passes the gate: it is admitted with an
//! estimate of its tokens, given back with what the provider reported, and a 429 slows the
//! gate down for everyone.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::AgentError;

/// One admitted attempt, given back with [`ProviderGate::release`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permit {
    /// The lease the attempt holds.
    pub id: String,
    /// The tokens it was admitted for.
    pub estimate: u64,
}

/// The limits a provider's calls wait for.
#[async_trait::async_trait]
pub trait ProviderGate: Send + Sync {
    /// Waits until an attempt of about `estimate` tokens (prompt and reply) may be sent.
    async fn acquire(&self, estimate: u64) -> Result<Permit, AgentError>;

    /// Gives `permit` back once the attempt ended; `used` is the tokens the provider
    /// reported, when it answered.
    async fn release(&self, permit: Permit, used: Option<u64>);

    /// The provider refused an attempt for its rate (429): nothing is sent for `retry_after`.
    async fn rate_limited(&self, retry_after: Duration);
}

/// A shared [`ProviderGate`], as client options carry it.
#[derive(Clone)]
pub struct Gate(pub Arc<dyn ProviderGate>);

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Gate")
    }
}

/// The tokens an attempt is estimated at before it is sent: its body's bytes over four (a
/// token is about four bytes of text), plus the most the reply may have.
pub fn estimate(body_bytes: usize, max_tokens: Option<u32>) -> u64 {
    let prompt = u64::try_from(body_bytes / 4).unwrap_or(u64::MAX);
    prompt.saturating_add(u64::from(max_tokens.unwrap_or(DEFAULT_REPLY_ESTIMATE)))
}

/// [`estimate`] of a request body as it is sent (JSON).
pub(crate) fn estimate_of<B: serde::Serialize + ?Sized>(body: &B, max_tokens: Option<u32>) -> u64 {
    let bytes = serde_json::to_vec(body).map_or(0, |bytes| bytes.len());
    estimate(bytes, max_tokens)
}

/// The reply's estimate when the request sets no `max_tokens`.
const DEFAULT_REPLY_ESTIMATE: u32 = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_is_the_body_over_four_and_the_reply_ceiling() {
        assert_eq!(estimate(4000, Some(256)), 1256);
        assert_eq!(estimate(0, None), 1024);
    }
}
