//! What every HTTP model provider shares: client options, the retry policy and loop, failure
//! classification, server-sent-event decoding, size caps, the idle timeout and key redaction.
//!
//! Waiting: a connect timeout, then an idle timeout while waiting for the answer to start and
//! between streamed chunks (a long answer that keeps streaming is fine; a silent one fails as
//! a retryable [`AgentError::Unavailable`](crate::AgentError::Unavailable)).
//!
//! Failures: 401/403 end the call at once
//! ([`AgentError::AuthFailed`](crate::AgentError::AuthFailed)); 429 is rate limiting; 408, 5xx
//! (529 "overloaded" included) and connection or timeout errors are transient. A retryable
//! failure waits for `Retry-After` (capped at 60 s) or backs off exponentially with full jitter.
//! After `max_retries` retries the call fails with
//! [`AgentError::RateLimited`](crate::AgentError::RateLimited) or
//! [`AgentError::Unavailable`](crate::AgentError::Unavailable). A 4xx answer saying the prompt
//! is longer than the model's context is
//! [`AgentError::ContextOverflow`](crate::AgentError::ContextOverflow) (`CONTEXT_OVERFLOW`);
//! other 4xx answers are [`AgentError::RequestRefused`](crate::AgentError::RequestRefused)
//! carrying the status and the server's message. Neither is retried.
//!
//! The API key is redacted from `Debug` output and from every error message.
//!
//! # Layout
//! - `options`: [`ClientOptions`] and [`RetryPolicy`].
//! - `endpoint`: one endpoint: posting, the retry loop, reading streams and bodies within caps.
//! - `failure`: whether a failed attempt may be retried; statuses and `Retry-After`.
//! - `gate`: the profile's limits every attempt waits for ([`ProviderGate`]).
//! - `sse`: the server-sent-event decoder.
//! - `test_server` (tests only): a local stand-in for a model server.

mod endpoint;
mod failure;
mod gate;
mod options;
mod sse;
#[cfg(test)]
pub(crate) mod test_server;

pub(crate) use endpoint::{Answer, Auth, Endpoint, WireError};
pub(crate) use failure::Failure;
pub(crate) use gate::estimate_of;
pub use gate::{Gate, Permit, ProviderGate, estimate};
pub use options::{
    ClientOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, ReasoningEffort, RetryPolicy,
};
