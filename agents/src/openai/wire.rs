//! The Chat Completions JSON shapes: the request body, the streamed chunks, the plain
//! (non-streaming) completion and the error object.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::strict::strict_schema;
use crate::catalog::ToolSpec;
use crate::http::{ReasoningEffort, WireError};
use crate::provider::{ChatMessage, Role, ToolCall, ToolChoice, Usage};
use crate::text_tools::InRequiredOrder;
use crate::turn::Turn;

// ---------------------------------------------------------------------------------------------
// Request body

#[derive(Debug, Serialize)]
pub(super) struct ChatBody<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    /// 1 beside a temperature: the whole distribution, for servers whose default is lower.
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<InRequiredOrder>,
}

impl<'a> ChatBody<'a> {
    /// A streamed request for `messages`, offering `tools` natively (none: no `tools` field).
    pub(super) fn new(
        model: &'a str,
        messages: &'a [ChatMessage],
        tools: &'a [ToolSpec],
        tool_choice: ToolChoice,
        max_tokens: Option<u32>,
    ) -> Self {
        let has_tools = !tools.is_empty();
        let samples = !is_reasoning_model(model);
        Self {
            model,
            messages: messages.iter().map(WireMessage::from).collect(),
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            temperature: samples.then_some(0.0),
            top_p: samples.then_some(1.0),
            reasoning_effort: None,
            tools: tools.iter().map(WireTool::from).collect(),
            tool_choice: has_tools.then_some(tool_choice_name(tool_choice)),
            parallel_tool_calls: has_tools.then_some(false),
            max_tokens,
            response_format: None,
        }
    }

    /// The request of `turn`'s next exchange (its tool mode decides tools and format; with
    /// `strict_tools`, native tools are sent in strict form).
    pub(super) fn for_turn(
        model: &'a str,
        turn: &'a Turn<'_>,
        max_tokens: Option<u32>,
        strict_tools: bool,
    ) -> Self {
        let mut body = Self::new(
            model,
            turn.messages(),
            turn.native_tools(),
            turn.tool_choice(),
            max_tokens,
        );
        if strict_tools {
            body.tools = turn.native_tools().iter().map(WireTool::strict).collect();
        }
        if turn.is_retry() && body.temperature.is_some() {
            body.temperature = Some(RETRY_TEMPERATURE);
        }
        match turn.response_format() {
            Some(format) => body.with_response_format(format),
            None => body,
        }
    }

    /// The same request with the profile's `reasoning_effort`, if it sets one.
    pub(super) fn with_reasoning_effort(self, effort: Option<ReasoningEffort>) -> Self {
        Self {
            reasoning_effort: effort.map(ReasoningEffort::as_str),
            ..self
        }
    }

    /// The same request with a `response_format` (constrained decoding).
    fn with_response_format(self, format: Value) -> Self {
        Self {
            response_format: Some(InRequiredOrder(format)),
            ..self
        }
    }
}

/// The temperature of a turn's retries (after a correction or nudge): at 0 a small model
/// tends to repeat the reply it was just told was unusable.
pub(super) const RETRY_TEMPERATURE: f64 = 0.6;

fn tool_choice_name(choice: ToolChoice) -> &'static str {
    match choice {
        ToolChoice::Auto => "auto",
        ToolChoice::Required => "required",
        ToolChoice::None => "none",
    }
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: Role,
    /// `null` for an assistant turn that only calls tools.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

impl<'a> From<&'a ChatMessage> for WireMessage<'a> {
    fn from(message: &'a ChatMessage) -> Self {
        let only_calls = message.content.is_empty() && !message.tool_calls.is_empty();
        Self {
            role: message.role,
            content: (!only_calls).then_some(message.content.as_str()),
            tool_calls: message.tool_calls.iter().map(WireToolCall::from).collect(),
            tool_call_id: message.tool_call_id.as_deref(),
        }
    }
}

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

impl<'a> From<&'a ToolCall> for WireToolCall<'a> {
    fn from(call: &'a ToolCall) -> Self {
        Self {
            id: &call.id,
            kind: "function",
            function: WireFunctionCall {
                name: &call.name,
                arguments: &call.arguments,
            },
        }
    }
}

#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

impl<'a> From<&'a ToolSpec> for WireTool<'a> {
    fn from(spec: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: WireFunction {
                name: spec.name.as_str(),
                description: spec.description,
                parameters: Cow::Borrowed(&spec.parameters),
                strict: None,
            },
        }
    }
}

impl<'a> WireTool<'a> {
    /// The tool in strict form, when its schema can be made strict; else as it is.
    fn strict(spec: &'a ToolSpec) -> Self {
        let plain = Self::from(spec);
        match strict_schema(&spec.parameters) {
            Some(parameters) => Self {
                function: WireFunction {
                    parameters: Cow::Owned(parameters),
                    strict: Some(true),
                    ..plain.function
                },
                ..plain
            },
            None => plain,
        }
    }
}

#[derive(Debug, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: Cow<'a, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

/// Reasoning models reject sampling parameters such as `temperature`.
fn is_reasoning_model(model: &str) -> bool {
    // Routers spell models as `vendor/model`.
    let name = model.rsplit('/').next().unwrap_or(model);
    let mut chars = name.chars();
    name.starts_with("gpt-5")
        || (chars.next() == Some('o') && chars.next().is_some_and(|c| c.is_ascii_digit()))
}

// ---------------------------------------------------------------------------------------------
// Streamed chunks

#[derive(Debug, Deserialize)]
pub(super) struct Chunk {
    pub(super) choices: Option<Vec<ChunkChoice>>,
    pub(super) usage: Option<WireUsage>,
    pub(super) error: Option<WireError>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ChunkChoice {
    pub(super) delta: Option<Delta>,
    pub(super) finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Delta {
    pub(super) content: Option<String>,
    pub(super) tool_calls: Option<Vec<DeltaToolCall>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct DeltaToolCall {
    pub(super) index: Option<u32>,
    pub(super) id: Option<String>,
    pub(super) function: Option<DeltaFunction>,
}

#[derive(Debug, Deserialize)]
pub(super) struct DeltaFunction {
    pub(super) name: Option<String>,
    pub(super) arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Usage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Non-streaming answers

#[derive(Debug, Deserialize)]
pub(super) struct Completion {
    #[serde(default)]
    pub(super) choices: Vec<CompletionChoice>,
    pub(super) usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
pub(super) struct CompletionChoice {
    pub(super) message: CompletionMessage,
    pub(super) finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct CompletionMessage {
    pub(super) content: Option<String>,
    pub(super) tool_calls: Option<Vec<CompletionToolCall>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct CompletionToolCall {
    #[serde(default)]
    pub(super) id: String,
    pub(super) function: CompletionFunction,
}

#[derive(Debug, Deserialize)]
pub(super) struct CompletionFunction {
    pub(super) name: String,
    #[serde(default)]
    pub(super) arguments: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ModelRequest;

    #[test]
    fn openai_omits_temperature_for_reasoning_models() {
        let request = ModelRequest {
            resample: false,
            phase: "research".into(),
            item_index: None,
            messages: vec![ChatMessage::user("Hi")],
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            answer: crate::answer::AnswerShape::Text,
        };
        for (model, expected) in [
            ("gpt-4o-mini", Some(0.0)),
            ("gpt-4.1", Some(0.0)),
            ("qwen2.5-7b", Some(0.0)),
            ("gpt-5.2", None),
            ("o3-mini", None),
            ("o4-mini", None),
            ("openai/gpt-5", None),
        ] {
            let body = ChatBody::new(
                model,
                &request.messages,
                &request.tools,
                request.tool_choice,
                None,
            );
            assert_eq!(body.temperature, expected, "{model}");
        }
    }
}
