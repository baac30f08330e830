//! How a client authenticates, waits, retries and offers tools.

use std::time::Duration;

use rand::Rng;

use crate::provider::PromptStyle;
use crate::text_tools::ToolMode;

const BACKOFF_BASE: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(8);

/// The default longest silence of a streaming answer.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default longest wait for a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often and how patiently a call is retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The backoff ceiling of the first retry; it doubles with every further one.
    pub base: Duration,
    /// The largest backoff ceiling.
    pub cap: Duration,
}

impl RetryPolicy {
    /// `max_retries` retries with the standard backoff (0.5 s doubling up to 8 s, full jitter).
    pub fn new(max_retries: u32) -> Self {
        Self {
            max_retries,
            base: BACKOFF_BASE,
            cap: BACKOFF_CAP,
        }
    }

    /// Full jitter: a uniform delay between zero and `min(cap, base · 2^attempt)`.
    pub(super) fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(2u32.saturating_pow(attempt))
            .min(self.cap);
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::rng().random_range(0..=millis))
    }
}

/// How much a reasoning model thinks before it answers (`reasoning_effort`), where a profile
/// asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// How a client authenticates, waits, retries and offers tools.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The API key (a bearer token, or the provider's key header); blank counts as none.
    pub api_key: Option<String>,
    /// The longest silence allowed while waiting for the answer to start and between streamed
    /// chunks; a long answer that keeps streaming is never cut.
    pub idle_timeout: Duration,
    /// The longest wait for the connection.
    pub connect_timeout: Duration,
    /// An optional ceiling on one whole HTTP exchange (none: only the idle timeout applies).
    pub request_timeout: Option<Duration>,
    pub retry: RetryPolicy,
    /// The most tokens one turn may generate (`max_tokens`; none: the server's default).
    pub max_tokens: Option<u32>,
    /// How the model is offered tools and how its calls are read.
    pub tool_mode: ToolMode,
    /// OpenAI protocol: native tools are sent with `"strict": true` and schemas normalized for
    /// strict mode (tools whose schema cannot be strict are sent as they are).
    pub strict_tools: bool,
    /// The model's context window in tokens (none: ask the server, else unknown).
    pub context_tokens: Option<u32>,
    /// How much the prompts say.
    pub prompt_style: PromptStyle,
    /// OpenAI protocol: `reasoning_effort` to send (none: the server's default).
    pub reasoning_effort: Option<ReasoningEffort>,
    /// The limits every attempt waits for (none: sent at once).
    pub gate: Option<super::Gate>,
}

impl ClientOptions {
    /// Options with the standard waits (idle 60 s, connect 10 s), native tools, no key.
    pub fn new(retry: RetryPolicy) -> Self {
        Self {
            api_key: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: None,
            retry,
            max_tokens: None,
            tool_mode: ToolMode::Native,
            strict_tools: false,
            context_tokens: None,
            prompt_style: PromptStyle::Full,
            reasoning_effort: None,
            gate: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_within_the_cap() {
        let policy = RetryPolicy::new(3);
        for attempt in 0..40 {
            assert!(policy.backoff(attempt) <= BACKOFF_CAP);
        }
        assert!(policy.backoff(0) <= BACKOFF_BASE);
    }
}
