//! Journaled steps: system prompts, model turns and the tool loop; budgets.
//!
//! Every step has a key naming its position (`model/<phase>/<item>/<attempt>/<turn>`,
//! `tool/<call id>`, …). A step found in the journal is taken from it; a new step runs and is
//! journaled before the driver moves on. One tool call of the loop is run in `tool_calls`; an
//! answer without tool calls is judged in `judge`.

use std::collections::BTreeMap;
use std::time::Instant;

use atelier_messages::budget::Spent;
use atelier_messages::contract::Contract;
use atelier_messages::job::{EVENT_TEXT_LIMIT, EventKind, Phase};
use atelier_messages::{ErrorBody, ErrorCode, journal};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::driver::Driver;
use super::prompts;
use super::types::RpiState;
use crate::AgentError;
use crate::answer::AnswerShape;
use crate::catalog::ToolSpec;
use crate::provider::{DeltaSink, ModelRequest, ModelResponse, Usage};

mod changes;
mod judge;
mod refusal;
mod stage;
mod tool_calls;
mod tool_loop;

use super::grounding::not_written;
pub(super) use judge::Expect;
pub(crate) use tool_calls::{Outcome, approval_refusal, render};

/// Where a step sits: phase, plan item (0 outside Implement), attempt.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scope {
    pub phase: Phase,
    pub item: u32,
    pub attempt: u32,
}

impl Scope {
    /// A phase that is not per item and has one attempt.
    pub(super) fn single(phase: Phase) -> Self {
        Self {
            phase,
            item: 0,
            attempt: 1,
        }
    }

    fn system_key(&self) -> String {
        journal::system_prompt(self.phase, self.item, self.attempt)
    }

    fn model_key(&self, turn: u32) -> String {
        journal::model_turn(self.phase, self.item, self.attempt, turn)
    }

    fn failed_turn_key(&self, turn: u32) -> String {
        journal::failed_model_turn(self.phase, self.item, self.attempt, turn)
    }

    fn call_id(&self, job_id: &str, turn: u32, index: usize) -> String {
        format!(
            "{job_id}.{}.{}.{}.{turn}.{index}",
            self.phase.as_str(),
            self.item,
            self.attempt
        )
    }

    fn item_index(&self) -> Option<u32> {
        (self.item > 0).then_some(self.item)
    }
}

/// The tool calls a loop made.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Calls {
    /// Calls that succeeded.
    pub successful: u32,
    /// Successful calls by tools that do not only read (a write that changed nothing is none
    /// with a compact prompt).
    pub writes: u32,
    /// Calls the user rejected.
    pub rejected: u32,
    /// Successful calls by tools that only read.
    pub reads: u32,
    /// Queries of a workbench table (tabular tools that only read): that succeeded, that
    /// failed.
    pub queries: u32,
    pub failed_queries: u32,
}

/// How a tool loop ended.
pub(super) enum LoopEnd {
    /// The model answered with text and no tool calls, and the phase accepted it, after the
    /// loop's `calls`.
    Answer { text: String, calls: Calls },
    /// The model's answers stayed unacceptable after it was told why (the reason).
    Refused(String),
    /// The turn budget ran out.
    BudgetExhausted,
    /// The model kept repeating the same call.
    LoopDetected(String),
    /// A turn's replies stayed unusable after the in-turn corrections and nudges
    /// (`TOOL_CALL_INVALID`, `MODEL_OUTPUT_DEGENERATE`).
    Unusable(AgentError),
}

/// What the failed tries at one turn position used, over every run of the job (journaled).
#[derive(Debug, Default, Serialize, Deserialize)]
struct FailedTurns {
    turns: u64,
    usage: Usage,
}

impl Driver<'_> {
    /// The phase's system prompt, journaled so a resumed run sees the same context.
    pub(super) async fn system_prompt(
        &self,
        scope: Scope,
        build: impl FnOnce(&str) -> String,
    ) -> Result<String, AgentError> {
        let key = scope.system_key();
        if let Some(Value::String(prompt)) = self.host.recall(&key).await? {
            return Ok(prompt);
        }
        let files = self.host.files().await?;
        let compact = self.compact();
        let prompt = build(&prompts::workbench(&files, &self.job.context, compact));
        self.host
            .record(&key, &Value::String(prompt.clone()))
            .await?;
        Ok(prompt)
    }

    /// One model turn: the journaled answer, or a fresh one journaled before it is used.
    pub(super) async fn model_turn(
        &self,
        state: &mut RpiState,
        scope: Scope,
        turn: u32,
        request: &ModelRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, AgentError> {
        let key = scope.model_key(turn);
        let failed_key = scope.failed_turn_key(turn);
        let failed = self.recall::<FailedTurns>(&failed_key).await?;
        if let Some(failed) = &failed {
            count_turns(state, failed.turns, &failed.usage);
        }
        if let Some(response) = self.recall::<ModelResponse>(&key).await? {
            count_turns(state, 1, &response.usage);
            return Ok(response);
        }
        self.host.checkpoint().await?;
        self.check_budgets(state)?;
        let started = Instant::now();
        let response = match self.provider.complete(request, on_delta).await {
            Ok(response) => response,
            Err(error) => {
                if let Some(usage) = error.spent() {
                    let mut failed = failed.unwrap_or_default();
                    failed.turns += 1;
                    failed.usage = failed.usage.plus(usage);
                    self.record(&failed_key, &failed).await?;
                    count_turns(state, 1, &usage);
                }
                return Err(error);
            }
        };
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.record(&key, &response).await?;
        count_turns(state, 1, &response.usage);
        self.host.emit(EventKind::ModelTurn {
            phase: scope.phase,
            item: scope.item_index(),
            turn,
            model: self.provider.label(),
            text: cut(&response.content),
            tool_calls: response
                .tool_calls
                .iter()
                .map(|call| call.name.clone())
                .collect(),
            prompt_tokens: response.usage.prompt_tokens,
            completion_tokens: response.usage.completion_tokens,
            elapsed_ms,
            cost_usd: self.budgets.prices.map(|prices| {
                prices.cost(
                    response.usage.prompt_tokens,
                    response.usage.completion_tokens,
                )
            }),
        });
        Ok(response)
    }

    /// A journaled step, if it already happened.
    pub(super) async fn recall<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, AgentError> {
        let Some(value) = self.host.recall(key).await? else {
            return Ok(None);
        };
        let step = serde_json::from_value(value).map_err(|error| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!("journal entry {key} is corrupt: {error}"),
            )
        })?;
        Ok(Some(step))
    }

    /// Journals a step; returns once it is durable.
    pub(super) async fn record<T: Serialize>(&self, key: &str, step: &T) -> Result<(), AgentError> {
        let value = serde_json::to_value(step)
            .map_err(|error| ErrorBody::new(ErrorCode::Internal, error.to_string()))?;
        self.host.record(key, &value).await?;
        Ok(())
    }

    fn check_budgets(&self, state: &RpiState) -> Result<(), AgentError> {
        if state.model_turns >= self.budgets.max_model_turns {
            return Err(budget_error(format!(
                "the job reached its limit of {} model turns",
                self.budgets.max_model_turns
            )));
        }
        let tokens = state.prompt_tokens + state.completion_tokens;
        if tokens >= self.budgets.max_tokens {
            return Err(budget_error(format!(
                "the job used {tokens} tokens, over its limit of {}",
                self.budgets.max_tokens
            )));
        }
        let spent = Spent::of(
            state.prompt_tokens,
            state.completion_tokens,
            self.budgets.prices,
        );
        if let Some(reached) = self.budgets.spend.reached_by(&spent) {
            return Err(budget_error(format!(
                "the job reached its budget ({reached}); its draft keeps what it wrote, and \
                 `atelier resume {} --budget-tokens N` (or `--budget-usd X`) continues it with a \
                 larger budget",
                self.job.job_id
            )));
        }
        Ok(())
    }
}

const ITEM_LOOP: &str = "loop detected";

/// The answer an implement loop ends with when the model repeats a write it already made.
pub(super) const REPEATED_WRITE: &str = "The last write was repeated with the same arguments, which changes nothing; the item's work ended there.";

/// The workbench paths a write call names (`path`, `target_path`, `new_path`).
fn named_paths(call: &crate::provider::ToolCall) -> Vec<String> {
    let Ok(arguments) = serde_json::from_str::<Value>(&call.arguments) else {
        return Vec::new();
    };
    ["path", "target_path", "new_path"]
        .iter()
        .filter_map(|key| arguments.get(*key)?.as_str().map(str::to_string))
        .collect()
}

/// A call as (tool, arguments with sorted keys): equal only for exactly the same call.
fn exact(call: &crate::provider::ToolCall) -> (String, String) {
    let arguments = serde_json::from_str::<Value>(&call.arguments)
        .map_or_else(|_| call.arguments.clone(), |value| value.to_string());
    (call.name.clone(), arguments)
}

fn budget_error(message: String) -> AgentError {
    AgentError::Job(ErrorBody::new(ErrorCode::BudgetExceeded, message))
}

/// True for a turn that failed on what the model wrote, not on the provider or the job: the
/// phase decides what that means (research goes on without notes, an item fails).
fn is_unusable_output(error: &AgentError) -> bool {
    matches!(
        error.code(),
        ErrorCode::ToolCallInvalid | ErrorCode::ModelOutputDegenerate
    )
}

/// One tool loop: where it runs, what it starts from, what it may call and how its answer is
/// judged.
pub(super) struct LoopSpec {
    pub scope: Scope,
    pub system: String,
    pub task: String,
    pub tools: Vec<ToolSpec>,
    pub budget: u32,
    pub expect: Expect,
    pub answer: AnswerShape,
    /// The plan item's targets (none outside Implement).
    pub targets: Vec<String>,
    /// What the plan item's targets must hold (none outside Implement).
    pub contracts: Vec<Contract>,
    /// The files (path → digest) when the item started (none outside Implement).
    pub before: BTreeMap<String, String>,
}

fn count_turns(state: &mut RpiState, turns: u64, usage: &Usage) {
    state.model_turns += turns;
    state.prompt_tokens += usage.prompt_tokens;
    state.completion_tokens += usage.completion_tokens;
}

/// `text` cut to the event size limit at a character boundary.
pub(crate) fn cut(text: &str) -> String {
    if text.len() <= EVENT_TEXT_LIMIT {
        return text.to_string();
    }
    let mut end = EVENT_TEXT_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
#[path = "steps_recall_tests.rs"]
mod recall_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_keys_name_their_position() {
        let scope = Scope {
            phase: Phase::Implement,
            item: 2,
            attempt: 1,
        };
        assert_eq!(scope.model_key(3), "model/implement/2/1/3");
        assert_eq!(scope.system_key(), "system/implement/2/1");
        assert_eq!(scope.call_id("job", 3, 0), "job.implement.2.1.3.0");
        assert_eq!(Scope::single(Phase::Research).item_index(), None);
    }
}
