//! The agent side of Atelier: model providers, the tool catalog, and the RPI loop.
//!
//! A job runs Research → Plan → Implement (one plan item at a time) → Summary. This crate
//! holds that logic independent of transport: the coordinator supplies an [`rpi::AgentHost`]
//! that executes tool calls over NATS, checkpoints state in sled and publishes events.
//!
//! # Layout
//! - [`answer`]: the shapes of the answers the engine reads (a plan, an item's result), as
//!   JSON schemas for constrained decoding and back as text.
//! - [`provider`]: the [`provider::ModelProvider`] trait and the chat types.
//! - [`spec`]: model specs ([`spec::ModelSpec`]), [`spec::ProviderSettings`] and
//!   [`spec::provider_from_spec`], the one place that knows every provider.
//! - [`openai`]: Chat Completions (OpenAI and compatible servers) with streaming and tool calls.
//! - [`anthropic`]: the Anthropic Messages API with streaming and tool use.
//! - [`http`]: what HTTP providers share: options, retries, failure classification, SSE
//!   decoding, size caps, the idle timeout and key redaction.
//! - `turn`: one model turn across tool modes, with in-turn corrections and nudges.
//! - [`replay`]: a deterministic scripted provider for demos and tests.
//! - [`catalog`]: tool specs named by `ToolName` (JSON schemas, capability, action class; the
//!   pool follows from the name) and phase subsets.
//! - [`text_tools`]: tool calls written as text (text, auto and constrained tool modes).
//! - [`window`]: the model's context window as a budget: measuring each request and cutting
//!   it down in a documented order, or `CONTEXT_OVERFLOW`.
//! - [`degenerate`]: empty or runaway-repetitive model output.
//! - [`contract`]: target contracts in a plan: their checklist lines and schema, and the
//!   check of written content against one.
//! - [`plan`]: parsing and rendering the plan checklist (items, their targets, amendments).
//! - [`request`]: whether a request asks for an artefact or only an answer.
//! - [`rpi`]: the Research → Plan → Implement → Summary driver.
//! - [`compress`]: a model-made summary of older conversation (`summarize_history`).
//! - [`error`]: the crate error type, [`AgentError`].
//! - `captured` (tests only): replies captured from a real model, read by the parsers, judges
//!   and providers (`tests/fixtures/qwen0.5b/`).

pub mod answer;
pub mod anthropic;
pub mod catalog;
pub mod compress;
pub mod contract;
pub mod degenerate;
pub mod error;
pub mod http;
pub mod openai;
pub mod plan;
pub mod provider;
pub mod replay;
pub mod request;
pub mod rpi;
pub mod spec;
pub mod text_tools;
mod turn;
pub mod window;

pub use error::AgentError;

#[cfg(test)]
mod captured;
