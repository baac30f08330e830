//! Tool calls for models without (reliable) native tool calling: how a profile's model is
//! offered tools ([`ToolMode`]), and reading calls out of text replies.
//!
//! - `native`: the request carries `tools`; the server returns structured `tool_calls`.
//! - `text`: no `tools` in the request; the catalog (names, descriptions, JSON-schema
//!   parameters) is added to the system message with the answer shape
//!   `{"tool": NAME, "parameters": {...}, "terminate": BOOL}`; the reply text is read into a
//!   call ([`read_reply`]). Earlier calls are replayed as their JSON text and tool results go
//!   back as user messages (`Tool result for NAME:` …, without the call's id).
//! - `auto`: a native request; a reply with no native call whose text holds a call in any
//!   accepted shape is read as that call.
//! - `constrained`: like `text`, plus a `response_format` JSON schema (`anyOf` the offered
//!   tools' call objects and the final-answer object) for servers with guided decoding.
//!
//! # Layout
//! - `parse`: [`read_reply`] and the accepted shapes.
//! - `prompt`: the catalog prompt, the text transcript, corrections.
//! - `schema`: constrained mode's `response_format`.

mod parse;
mod prompt;
mod schema;

use serde::{Deserialize, Serialize};

pub use parse::{Reading, read_reply};
pub use prompt::{
    ANSWER_SHAPE, CALL_SHAPE, CatalogStyle, answer_shape, calls_as_text, catalog_prompt,
    correction, text_transcript, with_system_text,
};
pub use schema::{InRequiredOrder, response_format};

/// How a model is offered tools and how its calls are read (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    #[default]
    Native,
    Text,
    Auto,
    Constrained,
}

impl ToolMode {
    /// True when the request carries the tools natively (`tools`, `tool_choice`).
    pub fn sends_native_tools(self) -> bool {
        matches!(self, ToolMode::Native | ToolMode::Auto)
    }
}
