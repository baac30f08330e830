//! The model-provider abstraction: a chat request with tools in, text and tool calls out.
//!
//! Providers implement [`ModelProvider`]; `crate::spec` builds one from a model spec.

use serde::{Deserialize, Serialize};

use crate::AgentError;
use crate::answer::AnswerShape;
use crate::catalog::ToolSpec;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call (echoed back with the result).
    pub id: String,
    pub name: String,
    /// The arguments as the JSON text the model wrote.
    pub arguments: String,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> Self {
        Self::text(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self::text(Role::User, content)
    }

    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
            tool_calls,
            tool_call_id: None,
        }
    }

    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(tool_call_id.into()),
        }
    }

    fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// Whether the model must, may or must not call tools on this turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    Auto,
    Required,
    None,
}

/// One model turn to run.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// Which RPI phase asks (`research`, `plan`, `implement`, `summary`); providers may log it.
    pub phase: String,
    /// The plan item being implemented (1-based), in the implement phase.
    pub item_index: Option<u32>,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    /// The shape of the phase's final answer (bound by a schema in constrained mode).
    pub answer: AnswerShape,
    /// With a compact prompt, the loop's last turn had a call that failed, was refused or
    /// repeated an earlier one, or its answer was refused: the turn samples as a retry does (at
    /// a temperature of 0 a small model repeats the call it was just told is wrong, and again
    /// after reading once more).
    pub resample: bool,
}

/// Token accounting of one turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Usage {
    /// Both counts added.
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens + other.prompt_tokens,
            completion_tokens: self.completion_tokens + other.completion_tokens,
        }
    }
}

/// What the model answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelResponse {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub usage: Usage,
}

/// How much the prompts say: everything, or the compact form for small models (only the tools
/// the phase and the workbench's file kinds need, their first sentences and bare schemas, one
/// filled-in example per phase).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptStyle {
    #[default]
    Full,
    Compact,
}

/// Receives streamed text as it arrives.
pub type DeltaSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// A chat model with native tool calls.
#[async_trait::async_trait]
pub trait ModelProvider: Send + Sync {
    /// A stable label for logs, job views and metrics (e.g. `openai:gpt-4o-mini`).
    fn label(&self) -> String;

    /// How much the prompts for this model say (its profile's `prompt`).
    fn prompt_style(&self) -> PromptStyle {
        PromptStyle::Full
    }

    /// Runs one turn, streaming text deltas to `on_delta`.
    async fn complete(
        &self,
        request: &ModelRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, AgentError>;
}
