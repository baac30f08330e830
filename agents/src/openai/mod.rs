//! Chat Completions for OpenAI and compatible servers (vLLM, llama.cpp, Ollama, LM Studio …).
//!
//! One [`ModelProvider::complete`](crate::provider::ModelProvider::complete) call is one `POST {base_url}/chat/completions` with
//! `stream: true`. The server-sent events are decoded as they arrive: text deltas go to the
//! caller's sink, tool-call fragments are assembled by `index`, and the finish reason and token
//! usage are captured. Servers that ignore `stream` and answer with one JSON document work too.
//!
//! Request profile: `parallel_tool_calls: false` whenever tools are offered, and
//! `temperature: 0` except for reasoning models (`gpt-5*`, `o1`, `o3`, …) that reject it; a
//! turn's retries after a correction or nudge are sent at `temperature: 0.6`, since at 0 a small
//! model tends to repeat the reply it was just told was unusable.
//!
//! Tool modes ([`ToolMode`](crate::text_tools::ToolMode)): `native` sends `tools`; `text` and
//! `constrained` describe the tools in the system message and read calls from the reply text
//! (`constrained` adds a `response_format` schema); `auto` sends `tools` and also reads a call
//! written as text. Unusable calls are corrected up to three times within the turn, then fail
//! with `TOOL_CALL_INVALID`; degenerate output is nudged once, then fails with
//! `MODEL_OUTPUT_DEGENERATE` (the shared `turn`).
//!
//! Waiting, retries and failures are the shared ones of [`crate::http`]: 401/403 end the call
//! at once, 429, 5xx, 408 and connection or timeout errors are retried per `Retry-After` or with
//! jittered backoff, other 4xx answers carry the server's message. A retried turn streams its
//! text again from the start.
//!
//! `strict_tools` (a profile flag, off by default): native tools go out with `"strict": true`
//! and their schemas normalized for OpenAI's strict mode (every property required, optional
//! ones nullable, `additionalProperties: false`); the `null`s the model writes for optional
//! properties are dropped before the call reaches the tool (`strict`).
//!
//! The API key is sent as a bearer token only; it is redacted from `Debug` output and from
//! every error message.
//!
//! # Layout
//! - `wire`: the request, stream-chunk and completion JSON shapes.
//! - `stream`: assembling text and tool calls into a response.
//! - `strict`: strict-mode schemas and reading strict arguments back.
//! - `client`: [`OpenAiProvider`]: one exchange per attempt over the shared endpoint.

mod client;
mod stream;
mod strict;
mod wire;

#[cfg(test)]
mod small_model_tests;
#[cfg(test)]
mod tests;

pub use crate::http::{ClientOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, RetryPolicy};
pub(crate) use client::chat_completions_url;
pub use client::{DEFAULT_BASE_URL, Flavor, OpenAiProvider};
