//! The Messages API JSON shapes: the request body (system prompt, content blocks, tools,
//! `tool_choice`), the streamed events and the plain (non-streaming) message.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::catalog::ToolSpec;
use crate::http::WireError;
use crate::provider::{ChatMessage, Role, ToolCall, ToolChoice, Usage};
use crate::turn::Turn;

// ---------------------------------------------------------------------------------------------
// Request body

#[derive(Debug, Serialize)]
pub(super) struct MessagesBody<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice>,
}

impl<'a> MessagesBody<'a> {
    /// The streamed request of `turn`'s next exchange. System messages become the top-level
    /// `system` field; messages of the same role in a row are merged into one.
    pub(super) fn for_turn(model: &'a str, turn: &'a Turn<'_>, max_tokens: u32) -> Self {
        let tools = turn.native_tools();
        Self {
            model,
            max_tokens,
            system: system_prompt(turn.messages()),
            messages: conversation(turn.messages()),
            stream: true,
            tools: tools.iter().map(WireTool::from).collect(),
            tool_choice: (!tools.is_empty()).then(|| WireToolChoice::from(turn.tool_choice())),
        }
    }
}

/// Every system message's text, in order, separated by blank lines.
fn system_prompt(messages: &[ChatMessage]) -> Option<String> {
    let parts: Vec<&str> = messages
        .iter()
        .filter(|message| message.role == Role::System && !message.content.is_empty())
        .map(|message| message.content.as_str())
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

/// The user and assistant turns: tool results as `user` turns, consecutive turns of one role
/// merged, and turns without content left out (the API refuses empty ones).
fn conversation(messages: &[ChatMessage]) -> Vec<WireMessage<'_>> {
    let mut turns: Vec<WireMessage<'_>> = Vec::new();
    for message in messages {
        let Some(role) = wire_role(message.role) else {
            continue;
        };
        let blocks = blocks(message);
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => turns.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    turns
}

fn wire_role(role: Role) -> Option<&'static str> {
    match role {
        Role::System => None,
        Role::User | Role::Tool => Some("user"),
        Role::Assistant => Some("assistant"),
    }
}

fn blocks(message: &ChatMessage) -> Vec<WireBlock<'_>> {
    if message.role == Role::Tool {
        return vec![WireBlock::ToolResult {
            tool_use_id: message.tool_call_id.as_deref().unwrap_or_default(),
            content: &message.content,
        }];
    }
    let text = (!message.content.is_empty()).then_some(WireBlock::Text {
        text: &message.content,
    });
    text.into_iter()
        .chain(message.tool_calls.iter().map(tool_use))
        .collect()
}

/// A call sent back as a `tool_use` block; arguments that are not a JSON object go as `{}`.
fn tool_use(call: &ToolCall) -> WireBlock<'_> {
    let input = match serde_json::from_str::<Value>(&call.arguments) {
        Ok(Value::Object(object)) => object,
        _ => {
            tracing::warn!(tool = %call.name, "tool call arguments are not a JSON object; sent as {{}}");
            Map::new()
        }
    };
    WireBlock::ToolUse {
        id: &call.id,
        name: &call.name,
        input,
    }
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Map<String, Value>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
    },
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

impl<'a> From<&'a ToolSpec> for WireTool<'a> {
    fn from(spec: &'a ToolSpec) -> Self {
        Self {
            name: spec.name.as_str(),
            description: spec.description,
            input_schema: &spec.parameters,
        }
    }
}

#[derive(Debug, Serialize)]
struct WireToolChoice {
    #[serde(rename = "type")]
    kind: &'static str,
}

impl From<ToolChoice> for WireToolChoice {
    fn from(choice: ToolChoice) -> Self {
        let kind = match choice {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "any",
            ToolChoice::None => "none",
        };
        Self { kind }
    }
}

// ---------------------------------------------------------------------------------------------
// Streamed events

/// One streamed event (its `data`; the `type` field repeats the SSE event name).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Event {
    MessageStart {
        message: StartedMessage,
    },
    ContentBlockStart {
        index: u32,
        content_block: Block,
    },
    ContentBlockDelta {
        index: u32,
        delta: BlockDelta,
    },
    ContentBlockStop {},
    MessageDelta {
        delta: MessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: WireError,
    },
    /// Event types added after this client was written are ignored, as the API asks.
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
pub(super) struct StartedMessage {
    #[serde(default)]
    pub(super) usage: WireUsage,
}

/// A content block (as it starts, or whole in a plain message).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// Thinking and other blocks carry nothing the loop uses.
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
pub(super) struct MessageDelta {
    #[serde(default)]
    pub(super) stop_reason: Option<String>,
}

/// Token counts; cached prompt tokens count as prompt tokens.
#[derive(Debug, Default, Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    pub(super) output_tokens: u64,
}

impl WireUsage {
    pub(super) fn prompt_tokens(&self) -> u64 {
        self.input_tokens
            + self.cache_creation_input_tokens.unwrap_or(0)
            + self.cache_read_input_tokens.unwrap_or(0)
    }
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Usage {
            prompt_tokens: usage.prompt_tokens(),
            completion_tokens: usage.output_tokens,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Non-streaming answers

#[derive(Debug, Deserialize)]
pub(super) struct Message {
    #[serde(default)]
    pub(super) content: Vec<Block>,
    #[serde(default)]
    pub(super) stop_reason: Option<String>,
    #[serde(default)]
    pub(super) usage: WireUsage,
}
