//! Turning an answer into a [`ModelResponse`]: decoded stream events, text deltas passed on as
//! they arrive, tool-call fragments assembled by `index`;
//! and the same for a server that answers with one plain completion.

use std::collections::BTreeMap;

use super::wire::{Chunk, ChunkChoice, Completion};
use crate::http::{Answer, Failure};
use crate::provider::{DeltaSink, ModelResponse, ToolCall, Usage};

/// A tool call being assembled from stream fragments.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The turn so far, built from decoded stream events.
#[derive(Debug, Default)]
pub(super) struct StreamAccumulator {
    content: String,
    calls: BTreeMap<u32, PartialCall>,
    finish_reason: Option<String>,
    usage: Usage,
    done: bool,
}

impl StreamAccumulator {
    pub(super) fn apply_data(
        &mut self,
        data: &str,
        on_delta: DeltaSink<'_>,
    ) -> Result<(), Failure> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| Failure::bad_response(format!("a stream event is not valid JSON: {e}")))?;
        if let Some(error) = chunk.error {
            return Err(Failure::unavailable(format!(
                "the stream reported an error: {}",
                error.into_message()
            )));
        }
        if let Some(usage) = chunk.usage {
            self.usage = usage.into();
        }
        for choice in chunk.choices.unwrap_or_default() {
            self.apply_choice(choice, on_delta);
        }
        Ok(())
    }

    fn apply_choice(&mut self, choice: ChunkChoice, on_delta: DeltaSink<'_>) {
        if let Some(reason) = choice.finish_reason {
            self.finish_reason = Some(reason);
        }
        let Some(delta) = choice.delta else {
            return;
        };
        if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
            on_delta(&text);
            self.content.push_str(&text);
        }
        for (position, fragment) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let index = fragment
                .index
                .unwrap_or_else(|| u32::try_from(position).unwrap_or(u32::MAX));
            let call = self.calls.entry(index).or_default();
            if call.id.is_empty()
                && let Some(id) = fragment.id
            {
                call.id = id;
            }
            if let Some(function) = fragment.function {
                if call.name.is_empty()
                    && let Some(name) = function.name
                {
                    call.name = name;
                }
                if let Some(arguments) = function.arguments {
                    call.arguments.push_str(&arguments);
                }
            }
        }
    }

    pub(super) fn finish(self) -> Result<ModelResponse, Failure> {
        if !self.done && self.finish_reason.is_none() {
            return Err(Failure::unavailable(
                "the stream ended before the model finished its answer",
            ));
        }
        let tool_calls = self
            .calls
            .into_iter()
            .map(|(index, call)| finish_call(index, call))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ModelResponse {
            content: self.content,
            tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
        })
    }
}

fn finish_call(index: u32, call: PartialCall) -> Result<ToolCall, Failure> {
    if call.name.is_empty() {
        return Err(Failure::bad_response(format!(
            "tool call #{index} has no function name"
        )));
    }
    Ok(ToolCall {
        id: if call.id.is_empty() {
            format!("call_{index}")
        } else {
            call.id
        },
        name: call.name,
        arguments: normalize_arguments(call.arguments),
    })
}

/// A call without arguments is sent back as `{}`, which every server accepts.
fn normalize_arguments(arguments: String) -> String {
    if arguments.trim().is_empty() {
        "{}".to_string()
    } else {
        arguments
    }
}

/// The response in a plain (non-streaming) completion, its text sent to `on_delta` at once.
pub(super) fn from_completion(
    completion: Completion,
    on_delta: DeltaSink<'_>,
) -> Result<ModelResponse, Failure> {
    let Some(choice) = completion.choices.into_iter().next() else {
        return Err(Failure::bad_response("the completion has no choices"));
    };
    let content = choice.message.content.unwrap_or_default();
    if !content.is_empty() {
        on_delta(&content);
    }
    let calls = choice.message.tool_calls.unwrap_or_default();
    let tool_calls = (0u32..)
        .zip(calls)
        .map(|(index, call)| {
            finish_call(
                index,
                PartialCall {
                    id: call.id,
                    name: call.function.name,
                    arguments: call.function.arguments,
                },
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ModelResponse {
        content,
        tool_calls,
        finish_reason: choice.finish_reason,
        usage: completion.usage.map(Usage::from).unwrap_or_default(),
    })
}

impl Answer for StreamAccumulator {
    fn from_json(bytes: &[u8], on_delta: DeltaSink<'_>) -> Result<ModelResponse, Failure> {
        let completion: Completion = serde_json::from_slice(bytes)
            .map_err(|e| Failure::bad_response(format!("the completion is not valid JSON: {e}")))?;
        from_completion(completion, on_delta)
    }

    fn gather(&mut self, data: &str, on_delta: DeltaSink<'_>) -> Result<(), Failure> {
        self.apply_data(data, on_delta)
    }

    fn end(self) -> Result<ModelResponse, Failure> {
        self.finish()
    }
}
