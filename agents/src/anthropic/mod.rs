//! The Anthropic Messages API.
//!
//! One [`ModelProvider::complete`](crate::provider::ModelProvider::complete) call is one
//! `POST {base_url}/v1/messages` with `stream: true`, the key in `x-api-key` and
//! `anthropic-version: 2023-06-01`. The events are decoded as they arrive: `text_delta`s go to
//! the caller's sink, a `tool_use` block's `input_json_delta` fragments are assembled into its
//! arguments, `message_delta` carries the stop reason and output tokens, `message_start` the
//! input tokens; `ping` and unknown events are ignored and an `error` event fails the attempt
//! (retried when it is an overload or server error). A server that answers with one plain
//! message works too.
//!
//! Request shape: the system messages become the top-level `system` field; tools go as
//! `{name, description, input_schema}` with `tool_choice` `auto`, `any` (a call is required) or
//! `none`; assistant tool calls are `tool_use` blocks and tool results `tool_result` blocks in a
//! user turn, consecutive turns of one role merged into one. `max_tokens` is required: the
//! profile's value, else 4096. Stop reasons are reported as the rest of the crate names them
//! (`end_turn` → `stop`, `max_tokens` → `length`, `tool_use` → `tool_calls`).
//!
//! Tool modes work as for Chat Completions (the shared `turn`); `constrained` has no
//! `response_format` here and behaves as `text`.
//!
//! Waiting, retries and failures are the shared ones of [`crate::http`]: 429, 529
//! (overloaded), other 5xx and connection errors are retried per `Retry-After` or with jittered
//! backoff; 401/403 fail at once as `PROVIDER_AUTH_FAILED`; 400 fails at once with the server's
//! message. The key never appears in `Debug` output or error messages.
//!
//! # Layout
//! - `wire`: the request body, the streamed events and the plain message.
//! - `stream`: assembling events (or a plain message) into a response.
//! - `client`: [`AnthropicProvider`]: one exchange per attempt over the shared endpoint.

mod client;
mod stream;
mod wire;

#[cfg(test)]
mod tests;

pub use client::{API_VERSION, AnthropicProvider, DEFAULT_BASE_URL, DEFAULT_MAX_TOKENS};
