//! One model turn as the RPI loop sees it, whatever the provider: the conversation and tools
//! shaped for the profile's tool mode, the reply read into ordinary [`ToolCall`]s, and the
//! in-turn retries. Each provider builds its own request body from [`Turn`]'s parts.
//!
//! - An unusable tool call written as text (unknown tool, parameters not an object, a missing
//!   required parameter, broken JSON; or no call where text mode required one) is told back to
//!   the model with the exact problem and the expected shape, up to
//!   [`MAX_CALL_CORRECTIONS`] times; then the turn fails with `TOOL_CALL_INVALID`.
//! - A reply cut off by the length limit (`finish_reason` `length`) that is not a usable call or
//!   answer is answered the same way, counted with the corrections, but only its start is
//!   replayed and the model is asked for a shorter reply: replaying the whole cut reply and
//!   calling it broken JSON had a small model write the same long reply again, cut the same way.
//! - A degenerate reply (empty where a call was required, runaway repetition; see
//!   [`crate::degenerate`]) is retried once with a nudge; then the turn fails with
//!   `MODEL_OUTPUT_DEGENERATE`.
//!
//! The tokens of every request in the turn, retries included, are in the returned usage, or,
//! when the turn fails after the model answered, in the error ([`AgentError::spent`]). A
//! call read from text gets the id `call_tN`, N counting the assistant turns so far, so a
//! replayed conversation gets the same ids.

use serde_json::Value;

use std::future::Future;

use tracing::Instrument;

use crate::AgentError;
use crate::answer::AnswerShape;
use crate::catalog::ToolSpec;
use crate::degenerate::{self, Degenerate};
use crate::provider::{
    ChatMessage, DeltaSink, ModelProvider, ModelRequest, ModelResponse, PromptStyle, Role,
    ToolCall, ToolChoice, Usage,
};
use crate::text_tools::{
    self, CALL_SHAPE, CatalogStyle, Reading, ToolMode, answer_shape, catalog_prompt, correction,
    text_transcript,
};
use crate::window::Window;

/// Corrections of unusable text tool calls within one turn.
pub(crate) const MAX_CALL_CORRECTIONS: u32 = 3;
/// Nudges after degenerate output within one turn.
pub(crate) const MAX_NUDGES: u32 = 1;
/// How much of an unusable reply is kept in the conversation that follows it.
const REPLAYED_REPLY_CHARS: usize = 2_000;
/// How much of a reply cut off by the length limit is kept: what it began with, not the whole
/// long form to write again.
pub(crate) const REPLAYED_CUT_CHARS: usize = 200;

/// A turn in progress: the conversation sent, and what the retries used so far.
pub(crate) struct Turn<'r> {
    request: &'r ModelRequest,
    mode: ToolMode,
    transcript: Vec<ChatMessage>,
    usage: Usage,
    /// Replies received so far.
    replies: u32,
    corrections: u32,
    nudges: u32,
}

impl<'r> Turn<'r> {
    pub(crate) fn new(request: &'r ModelRequest, mode: ToolMode, style: PromptStyle) -> Self {
        let offers_tools = offers_tools(request);
        let transcript = if mode.sends_native_tools() {
            request.messages.clone()
        } else {
            let style = CatalogStyle {
                answer: shown_answer(mode, &request.answer),
                compact: style == PromptStyle::Compact,
            };
            let catalog =
                offers_tools.then(|| catalog_prompt(&request.tools, request.tool_choice, &style));
            text_transcript(&request.messages, catalog.as_deref())
        };
        Self {
            request,
            mode,
            transcript,
            usage: Usage::default(),
            replies: 0,
            corrections: 0,
            nudges: 0,
        }
    }

    /// The conversation to send next (in text modes, with the catalog and calls as text).
    pub(crate) fn messages(&self) -> &[ChatMessage] {
        &self.transcript
    }

    /// The conversation to send next, to cut it down to the model's window.
    pub(crate) fn messages_mut(&mut self) -> &mut [ChatMessage] {
        &mut self.transcript
    }

    /// The native tools' names, descriptions and schemas as text (what they add to a
    /// request's size).
    pub(crate) fn native_tools_text(&self) -> String {
        self.native_tools()
            .iter()
            .map(|spec| {
                format!(
                    "{} {} {}\n",
                    spec.name.as_str(),
                    spec.description,
                    spec.parameters
                )
            })
            .collect()
    }

    /// The tools the model may call this turn (none when the turn asks for its answer).
    fn offered_tools(&self) -> &[ToolSpec] {
        if offers_tools(self.request) {
            &self.request.tools
        } else {
            &[]
        }
    }

    /// The tools to offer natively (none in text and constrained modes).
    pub(crate) fn native_tools(&self) -> &[ToolSpec] {
        if self.mode.sends_native_tools() {
            &self.request.tools
        } else {
            &[]
        }
    }

    /// True once the model has answered in this turn (the next request is a retry), or when
    /// the loop asks to resample ([`ModelRequest::resample`]).
    pub(crate) fn is_retry(&self) -> bool {
        self.replies > 0 || self.request.resample
    }

    pub(crate) fn tool_choice(&self) -> ToolChoice {
        self.request.tool_choice
    }

    /// The JSON-schema `response_format` of constrained mode, when tools are offered or the
    /// phase's answer has a shape.
    pub(crate) fn response_format(&self) -> Option<Value> {
        (self.mode == ToolMode::Constrained && self.reads_text()).then(|| {
            text_tools::response_format(
                &self.request.tools,
                self.request.tool_choice,
                &self.request.answer,
            )
        })
    }

    /// The rest of this turn in text mode: the server refused constrained mode's
    /// `response_format` (the catalog already asks for the same JSON).
    pub(crate) fn without_response_format(&mut self) {
        if self.mode == ToolMode::Constrained {
            self.mode = ToolMode::Text;
        }
    }

    /// Judges one reply: `Some` ends the turn with it, `None` asks again (the conversation now
    /// holds the reply and the correction or nudge).
    pub(crate) fn judge(
        &mut self,
        mut response: ModelResponse,
    ) -> Result<Option<ModelResponse>, AgentError> {
        self.usage = self.usage.plus(response.usage);
        self.replies += 1;
        if !response.tool_calls.is_empty() {
            return Ok(Some(self.finish(response)));
        }
        let reading = if self.reads_text() {
            text_tools::read_reply(&response.content, &self.request.tools)
        } else {
            Reading::Answer(response.content.clone())
        };
        match reading {
            Reading::Call {
                name,
                arguments,
                note,
            } => {
                if let Some(note) = note {
                    tracing::warn!(tool = %name, "{note}");
                }
                response.tool_calls = vec![ToolCall {
                    id: self.text_call_id(),
                    name,
                    arguments: Value::Object(arguments).to_string(),
                }];
                Ok(Some(self.finish(response)))
            }
            _ if self.nudged_after_degenerate(&response)? => Ok(None),
            Reading::Invalid(_) if cut_by_length(&response) => {
                self.correct_cut(&response).map(|()| None)
            }
            Reading::Invalid(problem) => self.correct(&problem, &response).map(|()| None),
            Reading::Answer(_) if self.must_call_in_text() => self
                .correct(
                    "this reply must call a tool, and it holds no tool call",
                    &response,
                )
                .map(|()| None),
            Reading::Answer(text) => {
                // A structured answer (a plan, an item's result) as the text its phase reads.
                response.content = self.request.answer.to_text(&text).unwrap_or(text);
                Ok(Some(self.finish(response)))
            }
        }
    }

    /// True when replies are searched for calls (or a structured answer) written as text.
    fn reads_text(&self) -> bool {
        self.mode != ToolMode::Native
            && (offers_tools(self.request) || self.request.answer != AnswerShape::Text)
    }

    /// True when text mode asked for a call this turn (a native server enforces it itself).
    fn must_call_in_text(&self) -> bool {
        !self.mode.sends_native_tools() && self.request.tool_choice == ToolChoice::Required
    }

    fn degenerate(&self, response: &ModelResponse) -> Option<Degenerate> {
        let required =
            offers_tools(self.request) && self.request.tool_choice == ToolChoice::Required;
        if response.content.trim().is_empty() {
            return required.then_some(Degenerate::Empty);
        }
        degenerate::repetition(&response.content, cut_by_length(response))
    }

    /// True when the reply is degenerate and a nudge was added; an error once nudged enough.
    fn nudged_after_degenerate(&mut self, response: &ModelResponse) -> Result<bool, AgentError> {
        match self.degenerate(response) {
            Some(degenerate) => self.nudge(&degenerate, response).map(|()| true),
            None => Ok(false),
        }
    }

    fn nudge(
        &mut self,
        degenerate: &Degenerate,
        response: &ModelResponse,
    ) -> Result<(), AgentError> {
        if self.nudges >= MAX_NUDGES {
            return Err(AgentError::Degenerate(format!(
                "{} (also after a nudge)",
                degenerate.describe()
            )));
        }
        self.nudges += 1;
        tracing::warn!(problem = %degenerate.describe(), "degenerate model output; nudging once");
        let nudge = degenerate.nudge(&self.expected());
        self.push_retry(start_of(response, REPLAYED_REPLY_CHARS), nudge);
        Ok(())
    }

    fn correct(&mut self, problem: &str, response: &ModelResponse) -> Result<(), AgentError> {
        self.count_correction(problem)?;
        let text = correction(problem, &self.expected(), self.offered_tools());
        self.push_retry(start_of(response, REPLAYED_REPLY_CHARS), text);
        Ok(())
    }

    /// Answers a reply the length limit cut off before it was usable: its start replayed, and
    /// a request for a shorter reply of the expected shape.
    fn correct_cut(&mut self, response: &ModelResponse) -> Result<(), AgentError> {
        self.count_correction(
            "the reply was cut off by the length limit of one reply before it ended; a larger \
             `max_tokens` in the model's profile gives it more room",
        )?;
        let start = format!("{} …", start_of(response, REPLAYED_CUT_CHARS));
        let text = cut_correction(&self.expected());
        self.push_retry(start, text);
        Ok(())
    }

    /// Counts one more correction of `problem`; the turn's error once they ran out.
    fn count_correction(&mut self, problem: &str) -> Result<(), AgentError> {
        if self.corrections >= MAX_CALL_CORRECTIONS {
            return Err(AgentError::ToolCallInvalid(format!(
                "{problem} (after {MAX_CALL_CORRECTIONS} corrections)"
            )));
        }
        self.corrections += 1;
        tracing::warn!(%problem, correction = self.corrections, "unusable tool call; correcting");
        Ok(())
    }

    /// The unusable reply, as replayed, and the message that answers it.
    fn push_retry(&mut self, replayed: String, message: String) {
        self.transcript
            .push(ChatMessage::assistant(replayed, Vec::new()));
        self.transcript.push(ChatMessage::user(message));
    }

    /// What the model should answer with, for a nudge.
    fn expected(&self) -> String {
        let required = self.request.tool_choice == ToolChoice::Required;
        match (
            offers_tools(self.request),
            self.mode.sends_native_tools(),
            required,
        ) {
            (false, false, _) if self.request.answer != AnswerShape::Text => format!(
                "exactly one JSON object: {}",
                answer_shape(&shown_answer(self.mode, &self.request.answer))
            ),
            (false, _, _) => "a short answer".into(),
            (true, true, true) => "a call to one of the offered tools".into(),
            (true, true, false) => {
                "a call to one of the offered tools or a short final answer".into()
            }
            (true, false, true) => format!("exactly one JSON object: {CALL_SHAPE}"),
            (true, false, false) => format!(
                "exactly one JSON object: {CALL_SHAPE}, or {}",
                answer_shape(&shown_answer(self.mode, &self.request.answer))
            ),
        }
    }

    fn text_call_id(&self) -> String {
        let turns = self
            .request
            .messages
            .iter()
            .filter(|message| message.role == Role::Assistant)
            .count();
        format!("call_t{}", turns + 1)
    }

    /// `error` as this turn's failure: with the tokens used, once the model has answered.
    fn failed(&self, error: AgentError) -> AgentError {
        if self.replies == 0 {
            error
        } else {
            error.after_usage(self.usage)
        }
    }

    fn finish(&self, response: ModelResponse) -> ModelResponse {
        ModelResponse {
            usage: self.usage,
            ..response
        }
    }
}

/// The final answer's shape as a text-mode model is shown it: structured only where a schema
/// binds it (constrained mode); elsewhere the phase's prompt asks for its text form.
fn shown_answer(mode: ToolMode, answer: &AnswerShape) -> AnswerShape {
    if mode == ToolMode::Constrained {
        answer.clone()
    } else {
        AnswerShape::Text
    }
}

/// The first `chars` characters of a reply, as the conversation replays it.
fn start_of(response: &ModelResponse, chars: usize) -> String {
    response.content.chars().take(chars).collect()
}

/// True when the server stopped the reply at its length limit (`max_tokens`).
fn cut_by_length(response: &ModelResponse) -> bool {
    response.finish_reason.as_deref() == Some("length")
}

/// The message answering a reply the length limit cut off: what to send instead.
fn cut_correction(expected: &str) -> String {
    format!(
        "Your last reply was cut off before it ended: it was longer than one reply may be, so \
         it could not be used. Answer again, much shorter (a few words in each text field, \
         nothing repeated), with {expected}."
    )
}

fn offers_tools(request: &ModelRequest) -> bool {
    !request.tools.is_empty() && request.tool_choice != ToolChoice::None
}

/// Runs one provider call inside a `model_call` span (provider, phase, item, attempt) and logs
/// how it finished.
/// An HTTP provider: it sends a turn as it stands, its own retries included; the turn's
/// corrections, nudges and tracing are common to all of them (see [`ModelProvider`] below).
pub(crate) trait SendTurn: Send + Sync {
    fn label(&self) -> &str;
    fn tool_mode(&self) -> ToolMode;
    fn prompt_style(&self) -> PromptStyle {
        PromptStyle::Full
    }
    /// The server refused constrained mode's `response_format`: later turns use text mode.
    fn response_format_refused(&self) {}
    /// The model's context window, which every request is cut down to (see
    /// [`crate::window`]).
    fn window(&self) -> &Window;
    fn send_turn(
        &self,
        turn: &Turn<'_>,
        on_delta: DeltaSink<'_>,
    ) -> impl Future<Output = Result<ModelResponse, AgentError>> + Send;
}

#[async_trait::async_trait]
impl<P: SendTurn> ModelProvider for P {
    fn label(&self) -> String {
        SendTurn::label(self).to_string()
    }

    fn prompt_style(&self) -> PromptStyle {
        SendTurn::prompt_style(self)
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, AgentError> {
        let label = SendTurn::label(self);
        traced(label, request, run_turn(self, request, on_delta)).await
    }
}

/// Runs one turn: sends it until a reply is usable or the in-turn retries run out.
async fn run_turn(
    provider: &impl SendTurn,
    request: &ModelRequest,
    on_delta: DeltaSink<'_>,
) -> Result<ModelResponse, AgentError> {
    let mut turn = Turn::new(request, provider.tool_mode(), provider.prompt_style());
    loop {
        let tools = turn.native_tools_text();
        provider
            .window()
            .keep(turn.messages_mut(), &tools)
            .await
            .map_err(|error| turn.failed(error))?;
        let response = match provider.send_turn(&turn, on_delta).await {
            Ok(response) => response,
            Err(AgentError::RequestRefused { status, message })
                if turn.response_format().is_some() =>
            {
                tracing::warn!(
                    provider = %provider.label(),
                    status,
                    %message,
                    "the server refused the JSON-schema response_format; this profile falls \
                     back to text mode"
                );
                provider.response_format_refused();
                turn.without_response_format();
                continue;
            }
            Err(error) => return Err(turn.failed(error)),
        };
        match turn.judge(response) {
            Ok(Some(response)) => return Ok(response),
            Ok(None) => {}
            Err(error) => return Err(turn.failed(error)),
        }
    }
}

async fn traced(
    label: &str,
    request: &ModelRequest,
    call: impl Future<Output = Result<ModelResponse, AgentError>>,
) -> Result<ModelResponse, AgentError> {
    let span = tracing::info_span!(
        "model_call",
        provider = %label,
        phase = %request.phase,
        item = ?request.item_index,
        attempt = tracing::field::Empty,
    );
    async {
        let response = call.await?;
        tracing::debug!(
            finish_reason = ?response.finish_reason,
            tool_calls = response.tool_calls.len(),
            prompt_tokens = response.usage.prompt_tokens,
            completion_tokens = response.usage.completion_tokens,
            "model call finished"
        );
        Ok(response)
    }
    .instrument(span)
    .await
}
