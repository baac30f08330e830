//! Turning Messages events into a [`ModelResponse`]: text deltas passed on as they arrive,
//! `tool_use` blocks assembled from their `input_json_delta` fragments by block index, the stop
//! reason and usage captured; and the same for a plain (non-streaming) message.

use std::collections::BTreeMap;

use serde_json::Value;

use super::wire::{Block, BlockDelta, Event, Message};
use crate::AgentError;
use crate::http::{Answer, Failure, WireError};
use crate::provider::{DeltaSink, ModelResponse, ToolCall, Usage};

/// A `tool_use` block being assembled.
#[derive(Debug)]
struct PartialCall {
    id: String,
    name: String,
    /// The input the block started with (`{}` when it streams its input).
    input: Value,
    /// The `partial_json` fragments so far.
    json: String,
}

/// The message so far, built from decoded stream events.
#[derive(Debug, Default)]
pub(super) struct EventAccumulator {
    content: String,
    calls: BTreeMap<u32, PartialCall>,
    stop_reason: Option<String>,
    usage: Usage,
    stopped: bool,
}

impl EventAccumulator {
    pub(super) fn apply_data(
        &mut self,
        data: &str,
        on_delta: DeltaSink<'_>,
    ) -> Result<(), Failure> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let event: Event = serde_json::from_str(data)
            .map_err(|e| Failure::bad_response(format!("a stream event is not valid JSON: {e}")))?;
        match event {
            Event::MessageStart { message } => self.usage = message.usage.into(),
            Event::ContentBlockStart {
                index,
                content_block,
            } => self.start_block(index, content_block, on_delta),
            Event::ContentBlockDelta { index, delta } => self.apply_delta(index, delta, on_delta),
            Event::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                if let Some(usage) = usage {
                    self.usage.completion_tokens = usage.output_tokens;
                }
            }
            Event::MessageStop => self.stopped = true,
            Event::Error { error } => return Err(stream_error(error)),
            Event::ContentBlockStop {} | Event::Ping | Event::Unknown => {}
        }
        Ok(())
    }

    fn start_block(&mut self, index: u32, block: Block, on_delta: DeltaSink<'_>) {
        match block {
            Block::Text { text } => self.push_text(&text, on_delta),
            Block::ToolUse { id, name, input } => {
                self.calls.insert(
                    index,
                    PartialCall {
                        id,
                        name,
                        input,
                        json: String::new(),
                    },
                );
            }
            Block::Other => {}
        }
    }

    fn apply_delta(&mut self, index: u32, delta: BlockDelta, on_delta: DeltaSink<'_>) {
        match delta {
            BlockDelta::TextDelta { text } => self.push_text(&text, on_delta),
            BlockDelta::InputJsonDelta { partial_json } => {
                if let Some(call) = self.calls.get_mut(&index) {
                    call.json.push_str(&partial_json);
                }
            }
            BlockDelta::Other => {}
        }
    }

    fn push_text(&mut self, text: &str, on_delta: DeltaSink<'_>) {
        if !text.is_empty() {
            on_delta(text);
            self.content.push_str(text);
        }
    }

    pub(super) fn finish(self) -> Result<ModelResponse, Failure> {
        if !self.stopped && self.stop_reason.is_none() {
            return Err(Failure::unavailable(
                "the stream ended before the model finished its answer",
            ));
        }
        Ok(self.into_response())
    }

    fn into_response(self) -> ModelResponse {
        ModelResponse {
            content: self.content,
            tool_calls: self.calls.into_values().map(finish_call).collect(),
            finish_reason: self.stop_reason.map(finish_reason),
            usage: self.usage,
        }
    }
}

fn finish_call(call: PartialCall) -> ToolCall {
    let arguments = if call.json.trim().is_empty() {
        match call.input {
            Value::Object(input) => Value::Object(input).to_string(),
            _ => "{}".to_string(),
        }
    } else {
        call.json
    };
    ToolCall {
        id: call.id,
        name: call.name,
        arguments,
    }
}

/// The stop reason in the words the rest of the crate uses (`stop`, `length`, `tool_calls`).
fn finish_reason(stop_reason: String) -> String {
    match stop_reason.as_str() {
        "end_turn" | "stop_sequence" => "stop".into(),
        "max_tokens" => "length".into(),
        "tool_use" => "tool_calls".into(),
        _ => stop_reason,
    }
}

/// An `error` event: overload and server errors may pass, rate limits wait, the rest is final.
fn stream_error(error: WireError) -> Failure {
    let kind = match &error {
        WireError::Object { kind, .. } => kind.clone().unwrap_or_default(),
        WireError::Text(_) => String::new(),
    };
    let message = format!("the stream reported an error: {}", error.into_message());
    match kind.as_str() {
        "rate_limit_error" => Failure::Retryable {
            error: AgentError::RateLimited(message),
            retry_after: None,
        },
        "invalid_request_error" | "authentication_error" | "permission_error" => {
            Failure::bad_response(message)
        }
        _ => Failure::unavailable(message),
    }
}

/// The response in a plain message, its text sent to `on_delta` at once.
pub(super) fn from_message(message: Message, on_delta: DeltaSink<'_>) -> ModelResponse {
    let mut stream = EventAccumulator {
        usage: message.usage.into(),
        stop_reason: message.stop_reason,
        stopped: true,
        ..EventAccumulator::default()
    };
    for (index, block) in (0u32..).zip(message.content) {
        stream.start_block(index, block, on_delta);
    }
    stream.into_response()
}

impl Answer for EventAccumulator {
    fn from_json(bytes: &[u8], on_delta: DeltaSink<'_>) -> Result<ModelResponse, Failure> {
        let message: Message = serde_json::from_slice(bytes)
            .map_err(|e| Failure::bad_response(format!("the message is not valid JSON: {e}")))?;
        Ok(from_message(message, on_delta))
    }

    fn gather(&mut self, data: &str, on_delta: DeltaSink<'_>) -> Result<(), Failure> {
        self.apply_data(data, on_delta)
    }

    fn end(self) -> Result<ModelResponse, Failure> {
        self.finish()
    }
}
