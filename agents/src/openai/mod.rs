//! Chat Completions for OpenAI and compatible servers (vLLM, llama.cpp, Ollama, LM Studio …).
//!
//! One [`ModelProvider::complete`](crate::provider::ModelProvider::complete) call is one `POST {base_url}/chat/completions` with
//! `stream: true`. The server-sent events are decoded as they arrive: text deltas go to the
//! caller's sink, tool-call fragments are assembled by `index`, and the finish reason and token
//! usage are captured. Servers that ignore `stream` and answer with one JSON document work too.
//!
//! Request profile: `parallel_tool_calls: false` whenever tools are offered, and
//! `temperature: 0` except for reasoning models (`gpt-5*`, `o1`, `o3`, …) that reject it.
//!
//! Tool modes ([`ToolMode`](crate::text_tools::ToolMode)): `native` sends `tools`; `text` and
//! `constrained` describe the tools in the system message and read calls from the reply text
//! (`constrained` adds a `response_format` schema); `auto` sends `tools` and also reads a call
//! written as text. Unusable calls are corrected up to three times within the turn, then fail
//! with `TOOL_CALL_INVALID`; degenerate output is nudged once, then fails with
//! `MODEL_OUTPUT_DEGENERATE` (see `turn`).
//!
//! Waiting: a connect timeout, then an idle timeout while waiting for the answer to start and
//! between streamed chunks (a long answer that keeps streaming is fine; a silent one fails as
//! a retryable [`AgentError::Unavailable`](crate::AgentError::Unavailable)).
//!
//! Failures: 401/403 end the call at once ([`AgentError::AuthFailed`](crate::AgentError::AuthFailed)); 429 waits for
//! `Retry-After` (capped at 60 s) or backs off; 5xx, 408 and connection or timeout errors back
//! off exponentially with full jitter. After `max_retries` retries the call fails with
//! [`AgentError::RateLimited`](crate::AgentError::RateLimited) or
//! [`AgentError::Unavailable`](crate::AgentError::Unavailable). Other 4xx answers are
//! [`AgentError::BadResponse`](crate::AgentError::BadResponse) carrying the server's message. A retried turn streams its text
//! again from the start.
//!
//! The API key is sent as a bearer token only; it is redacted from `Debug` output and from
//! every error message.
//!
//! # Layout
//! - `wire`: the request, stream-chunk, completion and error JSON shapes.
//! - `stream`: SSE decoding and assembling text and tool calls into a response.
//! - `client`: [`OpenAiProvider`]: HTTP, retries, and failures mapped to errors.
//! - `turn`: one turn for the RPI loop: the request per tool mode, calls read from text, and
//!   corrections and nudges within the turn.
//! - `failure`: whether a failed attempt may be retried.

mod client;
mod failure;
mod stream;
mod turn;
mod wire;

#[cfg(test)]
mod tests;

pub use client::{
    ClientOptions, DEFAULT_BASE_URL, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, Flavor,
    OpenAiProvider, RetryPolicy,
};
