//! Journaled steps: system prompts, model turns and the tool loop; budgets.
//!
//! Every step has a key naming its position (`model/<phase>/<item>/<attempt>/<turn>`,
//! `tool/<call id>`, …). A step found in the journal is taken from it; a new step runs and is
//! journaled before the driver moves on. One tool call of the loop is run in `tool_calls`; an
//! answer without tool calls is judged in `judge`.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use atelier_messages::contract::Contract;
use atelier_messages::job::{EVENT_TEXT_LIMIT, EventKind, Phase};
use atelier_messages::{ErrorBody, ErrorCode, journal};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::driver::Driver;
use super::form;
use super::loop_detector::LoopDetector;
use super::prompts;
use super::quotes;
use super::types::RpiState;
use crate::AgentError;
use crate::answer::AnswerShape;
use crate::catalog::ToolSpec;
use crate::provider::{ChatMessage, DeltaSink, ModelRequest, ModelResponse, Usage};

mod changes;
mod judge;
mod refusal;
mod stage;
mod tool_calls;

use super::grounding::not_written;
use changes::Changes;
pub(super) use judge::Expect;
use judge::{Judging, Verdict, judge};
use refusal::Shown;
use stage::Stage;
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

/// How a tool loop ended.
pub(super) enum LoopEnd {
    /// The model answered with text and no tool calls, and the phase accepted it, after
    /// `successful_calls` successful tool calls in the loop (`write_calls` of them by tools
    /// that do not only read), after `rejected_calls` calls the user rejected.
    Answer {
        text: String,
        successful_calls: u32,
        write_calls: u32,
        rejected_calls: u32,
    },
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
        });
        Ok(response)
    }

    pub(super) async fn tool_loop(
        &self,
        state: &mut RpiState,
        spec: LoopSpec,
    ) -> Result<LoopEnd, AgentError> {
        let LoopSpec {
            scope,
            system,
            task,
            tools,
            budget,
            expect,
            answer,
            targets,
            contracts,
            before,
        } = spec;
        let task_text = task.clone();
        let form = form::rules(&self.job.message);
        let content_pattern = form::pattern(&form::with_contracts(&form, &contracts, &targets));
        let quoted = crate::request::quoted_texts(&self.job.message);
        let mut messages = vec![ChatMessage::system(system), ChatMessage::user(task)];
        let mut detector = LoopDetector::new(&self.budgets);
        let mut successful_calls = 0;
        let mut rejected_calls = 0;
        let mut write_calls = 0;
        let mut nudges = 0;
        let mut refusals = 0;
        // The plan's contracts were reviewed and the model told what was wrong.
        let mut reviewed = false;
        // The successful writes of this loop, exactly as called.
        let mut writes_done: HashSet<(String, String)> = HashSet::new();
        let compact = self.compact();
        let mut successful_reads = 0;
        // What a written number may come from: the request and the maps (as shown).
        let maps: Vec<String> = (self.job.context.maps.iter())
            .map(|map| prompts::compact_map(&map.map))
            .collect();
        let facts: Vec<&str> = std::iter::once(self.job.message.as_str())
            .chain(maps.iter().map(String::as_str))
            .collect();
        // The results of the tools this loop ran (not the engine's refusals).
        let mut results_seen: Vec<String> = Vec::new();
        // What its successful writes did to the files.
        let mut changes = Changes::new(&before);
        let sources = changes.sources();
        // The model was shown what its targets hold.
        let mut reported = false;
        // A write was refused (made-up numbers, a copied row) since the last successful read:
        // the item reads again.
        let mut back_to_reading = false;
        // The last turn had a call that failed, was refused or repeated one, or its answer was
        // refused.
        let mut resample = false;
        for turn in 0..budget {
            let unwritten_quotes = state.unwritten_quotes.clone();
            let stage = Stage {
                phase: scope.phase,
                turn,
                compact,
                reads: successful_reads,
                writes: write_calls,
                refused: back_to_reading,
                targets: &targets,
                sources: &sources,
                request: &self.job.message,
                unwritten_quotes: &unwritten_quotes,
                targets_written: changes.cover(&targets),
                content_pattern: content_pattern.as_deref(),
            };
            if compact && stage.targets_written && !reported {
                reported = true;
                messages.push(ChatMessage::user(changes.report(&targets)));
            }
            let (offered, choice) = stage.tools(&tools);
            let request = ModelRequest {
                phase: scope.phase.as_str().to_string(),
                item_index: scope.item_index(),
                messages: messages.clone(),
                tools: offered,
                tool_choice: choice,
                answer: answer.clone(),
                // A capable model is not sampled: it reads a refusal and changes its call.
                resample: compact && resample,
            };
            let response = match self
                .model_turn(state, scope, turn, &request, &|_: &str| {})
                .await
            {
                Ok(response) => response,
                Err(error) if is_unusable_output(&error) => return Ok(LoopEnd::Unusable(error)),
                Err(error) => return Err(error),
            };
            if response.tool_calls.is_empty() {
                let judging = Judging {
                    successful_calls,
                    nudges,
                    refusals,
                    asks_for: state.asks_for.as_deref(),
                    requested_files: &state.requested_files,
                };
                match judge(expect, &response.content, judging) {
                    Verdict::Accept => {
                        // A plan's contracts are reviewed once, while a turn is left for the
                        // corrected plan.
                        let review = expect == Expect::Checklist && !reviewed && turn + 1 < budget;
                        if let Some(told) = match review {
                            true => self.review_plan(&response.content, turn).await?,
                            false => None,
                        } {
                            reviewed = true;
                            resample = true;
                            messages.push(ChatMessage::assistant(response.content, Vec::new()));
                            messages.push(ChatMessage::user(told));
                            continue;
                        }
                        return Ok(LoopEnd::Answer {
                            text: response.content,
                            successful_calls,
                            write_calls,
                            rejected_calls,
                        });
                    }
                    Verdict::Refuse(reason) => return Ok(LoopEnd::Refused(reason)),
                    Verdict::Nudge(nudge) => {
                        nudges += 1;
                        resample = true;
                        messages.push(ChatMessage::assistant(response.content, Vec::new()));
                        messages.push(ChatMessage::user(nudge));
                        continue;
                    }
                    Verdict::RefuseNoChange(told) => {
                        refusals += 1;
                        resample = true;
                        messages.push(ChatMessage::assistant(response.content, Vec::new()));
                        messages.push(ChatMessage::user(told));
                        continue;
                    }
                }
            }
            messages.push(ChatMessage::assistant(
                response.content.clone(),
                response.tool_calls.clone(),
            ));
            resample = false;
            for (index, call) in response.tool_calls.iter().enumerate() {
                let writes = tools
                    .iter()
                    .any(|spec| spec.name.as_str() == call.name && !spec.is_read_only());
                if writes && writes_done.contains(&exact(call)) {
                    // The same write again changes nothing: the work is over (a small model
                    // repeats its last write instead of answering). Its targets are still
                    // checked as for any answer.
                    return Ok(LoopEnd::Answer {
                        text: REPEATED_WRITE.to_string(),
                        successful_calls,
                        write_calls,
                        rejected_calls,
                    });
                }
                let repeats = detector.observe(call);
                resample |= repeats >= 2;
                if repeats >= self.budgets.loop_hard_stop {
                    return Ok(LoopEnd::LoopDetected(format!(
                        "{ITEM_LOOP}: `{}` was called {repeats} times with the same arguments",
                        call.name
                    )));
                }
                let call_id = scope.call_id(&self.job.job_id, turn, index);
                let shown = Shown {
                    offered: &request.tools,
                    facts: &facts,
                    results: &results_seen,
                    task: &[self.job.message.as_str(), task_text.as_str()],
                    form: &form,
                    quoted: &quoted,
                    contracts: &contracts,
                };
                if let Some(refusal) = compact.then(|| refusal::of(call, &shown)).flatten() {
                    back_to_reading |= refusal.back_to_reading;
                    resample = true;
                    messages.push(ChatMessage::tool_result(call.id.clone(), refusal.told));
                    continue;
                }
                let (mut result, succeeded, rejected) =
                    self.execute(state, scope, &call_id, call, &tools).await?;
                results_seen.push(result.clone());
                let unchanged = (succeeded && writes)
                    .then(|| changes.record(call, &named_paths(call), &result))
                    .flatten();
                // With a compact prompt a write that changed nothing is no work done.
                let wrote = succeeded && writes && !(compact && unchanged.is_some());
                if let Some(path) = unchanged.filter(|_| compact) {
                    result.push_str(&changes::unchanged_note(&path));
                }
                successful_calls += u32::from(succeeded);
                resample |= !succeeded;
                rejected_calls += u32::from(rejected);
                write_calls += u32::from(wrote);
                successful_reads += u32::from(succeeded && !writes);
                back_to_reading &= !succeeded || writes;
                if succeeded && writes {
                    writes_done.insert(exact(call));
                    quotes::record(state, call);
                }
                if repeats >= self.budgets.loop_warning {
                    self.host.emit(EventKind::LoopWarning {
                        tool: call.name.clone(),
                        repeats,
                    });
                    result.push_str(&format!(
                        "\n[warning: you called `{}` with these exact arguments {repeats} times; the result will not change. \
                         Use what you have, change the arguments, or finish. At {} repeats the item is stopped.]",
                        call.name, self.budgets.loop_hard_stop
                    ));
                }
                messages.push(ChatMessage::tool_result(call.id.clone(), result));
            }
        }
        Ok(LoopEnd::BudgetExhausted)
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
