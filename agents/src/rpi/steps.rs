//! Journaled steps: model turns, tool calls, system prompts; budgets.
//!
//! Every step has a key naming its position (`model/<phase>/<item>/<attempt>/<turn>`,
//! `tool/<call id>`, …). A step found in the journal is taken from it; a new step runs and is
//! journaled before the driver moves on.

use std::time::Instant;

use atelier_messages::approval::ApprovalMode;
use atelier_messages::job::{EVENT_TEXT_LIMIT, EventKind, PendingApproval, Phase};
use atelier_messages::tool::ToolName;
use atelier_messages::{ErrorBody, ErrorCode, journal, now_ms};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::driver::Driver;
use super::loop_detector::LoopDetector;
use super::prompts;
use super::recall::{self, RecallRequest};
use super::types::{AgentHost, RpiState};
use crate::AgentError;
use crate::catalog::{self, Classified, ToolSpec};
use crate::provider::{
    ChatMessage, DeltaSink, ModelRequest, ModelResponse, ToolCall, ToolChoice, Usage,
};

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
    /// `successful_calls` successful tool calls in the loop.
    Answer { text: String, successful_calls: u32 },
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

/// What a phase accepts as the final answer of its tool loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expect {
    /// Research: findings, not an empty reply.
    Findings,
    /// Plan: a checklist, or the no-change marker.
    Checklist,
    /// An Implement item: at least one successful tool call, or a stated reason (no change
    /// needed, or the item failed).
    Work,
}

/// The verdict on an answer without tool calls.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Accept,
    /// Tell the model this and let it answer again.
    Nudge(String),
    /// Give up: the reason.
    Refuse(String),
}

/// How many times a phase tells the model its answer is not acceptable before giving up.
fn nudges_allowed(expect: Expect) -> u32 {
    match expect {
        Expect::Findings | Expect::Work => 1,
        Expect::Checklist => 2,
    }
}

/// Judges an answer given with no tool calls (`successful_calls`: the loop's successful tool
/// calls so far; `nudges`: how often the model was already told).
fn judge(expect: Expect, answer: &str, successful_calls: u32, nudges: u32) -> Verdict {
    let problem = match expect {
        Expect::Findings if answer.trim().is_empty() => {
            Some(("the research answer was empty", prompts::nudge_empty()))
        }
        Expect::Checklist
            if crate::plan::parse(answer).is_empty() && prompts::no_change(answer).is_none() =>
        {
            Some((
                "the plan is not a checklist of `- [ ] N. label — description` items",
                prompts::nudge_plan(),
            ))
        }
        Expect::Work
            if successful_calls == 0
                && prompts::no_change(answer).is_none()
                && prompts::item_failure(answer).is_none() =>
        {
            Some((
                "no tool call succeeded and no reason was given that no change is needed",
                prompts::nudge_no_tool_call(),
            ))
        }
        _ => None,
    };
    match problem {
        None => Verdict::Accept,
        Some((_, nudge)) if nudges < nudges_allowed(expect) => Verdict::Nudge(nudge),
        Some((reason, _)) => Verdict::Refuse(reason.to_string()),
    }
}

/// What the failed tries at one turn position used, over every run of the job (journaled).
#[derive(Debug, Default, Serialize, Deserialize)]
struct FailedTurns {
    turns: u64,
    usage: Usage,
}

/// A tool outcome as journaled.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    Ok(Value),
    Error(ErrorBody),
}

/// The refusal when a call that needs approval (by its action class and the job's policy) is
/// rejected; `None` when it may run. Waits for the decision through the host.
pub(crate) async fn approval_refusal(
    host: &dyn AgentHost,
    call_id: &str,
    spec: &ToolSpec,
    args: &Value,
) -> Result<Option<ErrorBody>, AgentError> {
    if spec.is_read_only() {
        return Ok(None);
    }
    let files = host.files().await?;
    let Classified { class, why } = catalog::classify(spec, args, &files);
    if host.approval_mode(class) == ApprovalMode::Auto || host.already_applied(call_id).await? {
        return Ok(None);
    }
    let pending = PendingApproval {
        call_id: call_id.to_string(),
        tool: spec.name.to_string(),
        arguments: args.to_string(),
        requested_at_ms: now_ms(),
        action_class: class,
        why,
    };
    let decision = host.approval(pending).await?;
    if decision.approved {
        return Ok(None);
    }
    let reason = decision
        .reason
        .map(|reason| format!(" ({reason})"))
        .unwrap_or_default();
    Ok(Some(ErrorBody::new(
        ErrorCode::ApprovalRejected,
        format!(
            "the user rejected this `{}` call{reason}; do not repeat it — continue another way or finish",
            spec.name
        ),
    )))
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
        let prompt = build(&prompts::workbench(&files, &self.job.context));
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

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn tool_loop(
        &self,
        state: &mut RpiState,
        scope: Scope,
        system: String,
        task: String,
        tools: Vec<ToolSpec>,
        budget: u32,
        expect: Expect,
    ) -> Result<LoopEnd, AgentError> {
        let mut messages = vec![ChatMessage::system(system), ChatMessage::user(task)];
        let mut detector = LoopDetector::new(&self.budgets);
        let mut successful_calls = 0;
        let mut nudges = 0;
        for turn in 0..budget {
            let request = ModelRequest {
                phase: scope.phase.as_str().to_string(),
                item_index: scope.item_index(),
                messages: messages.clone(),
                tools: tools.clone(),
                tool_choice: tool_choice(&tools, scope.phase, turn),
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
                match judge(expect, &response.content, successful_calls, nudges) {
                    Verdict::Accept => {
                        return Ok(LoopEnd::Answer {
                            text: response.content,
                            successful_calls,
                        });
                    }
                    Verdict::Refuse(reason) => return Ok(LoopEnd::Refused(reason)),
                    Verdict::Nudge(nudge) => {
                        nudges += 1;
                        messages.push(ChatMessage::assistant(response.content, Vec::new()));
                        messages.push(ChatMessage::user(nudge));
                        continue;
                    }
                }
            }
            messages.push(ChatMessage::assistant(
                response.content.clone(),
                response.tool_calls.clone(),
            ));
            for (index, call) in response.tool_calls.iter().enumerate() {
                let repeats = detector.observe(call);
                if repeats >= self.budgets.loop_hard_stop {
                    return Ok(LoopEnd::LoopDetected(format!(
                        "{ITEM_LOOP}: `{}` was called {repeats} times with the same arguments",
                        call.name
                    )));
                }
                let call_id = scope.call_id(&self.job.job_id, turn, index);
                let (mut result, succeeded) =
                    self.execute(state, scope, &call_id, call, &tools).await?;
                successful_calls += u32::from(succeeded);
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

    /// Runs (or recalls) one tool call; returns the text the model sees and whether the call
    /// succeeded. Infrastructure failures after the host's retries end the attempt (`Err`).
    async fn execute(
        &self,
        state: &mut RpiState,
        scope: Scope,
        call_id: &str,
        call: &ToolCall,
        allowed: &[ToolSpec],
    ) -> Result<(String, bool), AgentError> {
        let Some(spec) = allowed.iter().find(|spec| spec.name.as_str() == call.name) else {
            let names: Vec<_> = allowed.iter().map(|spec| spec.name.as_str()).collect();
            let error = ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "tool `{}` is not available in this phase; available: {}",
                    call.name,
                    names.join(", ")
                ),
            );
            return Ok((error_text(&error), false));
        };
        let args = match parse_arguments(&call.arguments) {
            Ok(args) => args,
            Err(error) => return Ok((error_text(&error), false)),
        };
        let key = journal::tool_result(call_id);
        let outcome = match self.recall::<Outcome>(&key).await? {
            Some(outcome) => outcome,
            None => {
                let outcome = self.run_tool(state, call_id, spec, args.clone()).await?;
                self.record(&key, &outcome).await?;
                let full = render(&outcome);
                self.host.emit(EventKind::ToolIo {
                    call_id: call_id.to_string(),
                    tool: spec.name.to_string(),
                    pool: Some(spec.name.runs_on().to_string()),
                    phase: Some(scope.phase),
                    item: scope.item_index(),
                    arguments: cut(&args.to_string()),
                    result: cut(&full),
                    result_bytes: full.len() as u64,
                });
                outcome
            }
        };
        state.tool_calls += 1;
        let succeeded = matches!(outcome, Outcome::Ok(_));
        let shown = recall::present(
            call_id,
            spec.name,
            render(&outcome),
            self.budgets.receipt_over_chars,
        );
        Ok((shown, succeeded))
    }

    async fn run_tool(
        &self,
        state: &RpiState,
        call_id: &str,
        spec: &ToolSpec,
        args: Value,
    ) -> Result<Outcome, AgentError> {
        self.host.checkpoint().await?;
        if state.tool_calls >= self.budgets.max_tool_calls {
            return Err(budget_error(format!(
                "the job reached its limit of {} tool calls",
                self.budgets.max_tool_calls
            )));
        }
        if let Some(rejected) = self.approval_refusal(call_id, spec, &args).await? {
            return Ok(Outcome::Error(rejected));
        }
        let path = args.get("path").and_then(Value::as_str).map(str::to_string);
        self.host.emit(EventKind::ToolExecuting {
            call_id: call_id.to_string(),
            tool: spec.name.to_string(),
            path,
        });
        if spec.name.is_local() {
            return self.answer_locally(call_id, spec, &args).await;
        }
        // Every tool failure — transient ones too (`TOOL_TIMEOUT`, `TOOL_WORKER_UNAVAILABLE`,
        // after the transport's retries) — is journaled and told to the model, in every phase;
        // only a cancel ends the job here.
        match self.host.call_tool(call_id, spec, args).await {
            Ok(output) => Ok(Outcome::Ok(output)),
            Err(error) if error.code == ErrorCode::UserCanceled => Err(AgentError::Job(error)),
            Err(error) => Ok(Outcome::Error(error)),
        }
    }

    /// A local tool's answer, from the job's journal (no worker is asked); its completion is
    /// published like a worker call's.
    async fn answer_locally(
        &self,
        call_id: &str,
        spec: &ToolSpec,
        args: &Value,
    ) -> Result<Outcome, AgentError> {
        let started = Instant::now();
        let outcome = match spec.name {
            ToolName::RecallToolResult => self.recall_tool_result(args).await?,
            other => {
                return Err(AgentError::Job(ErrorBody::new(
                    ErrorCode::Internal,
                    format!("no local answer for `{other}`"),
                )));
            }
        };
        let elapsed = started.elapsed();
        let error = match &outcome {
            Outcome::Ok(_) => None,
            Outcome::Error(error) => Some(error.clone()),
        };
        tracing::debug!(call_id, tool = %spec.name, ok = error.is_none(), "local tool answered");
        self.host.emit(EventKind::ToolComplete {
            call_id: call_id.to_string(),
            tool: spec.name.to_string(),
            ok: error.is_none(),
            error,
            elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            worker: Some(spec.name.runs_on().to_string()),
            elapsed_us: u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        });
        Ok(outcome)
    }

    /// A slice of an earlier call's full result. Journal keys are per job, and only call ids of
    /// this job are looked up, so another job's results cannot be named.
    async fn recall_tool_result(&self, args: &Value) -> Result<Outcome, AgentError> {
        let request = match RecallRequest::parse(args) {
            Ok(request) => request,
            Err(error) => return Ok(Outcome::Error(error)),
        };
        let ours = request
            .call_id
            .strip_prefix(self.job.job_id.as_str())
            .is_some_and(|rest| rest.starts_with('.'));
        let stored = if ours {
            self.recall::<Outcome>(&journal::tool_result(&request.call_id))
                .await?
        } else {
            None
        };
        Ok(match stored {
            Some(stored) => Outcome::Ok(request.slice(&render(&stored))),
            None => Outcome::Error(recall::not_found(&request.call_id)),
        })
    }

    /// The refusal told to the model when a call that needs approval is rejected.
    async fn approval_refusal(
        &self,
        call_id: &str,
        spec: &ToolSpec,
        args: &Value,
    ) -> Result<Option<ErrorBody>, AgentError> {
        approval_refusal(self.host, call_id, spec, args).await
    }

    /// A journaled step, if it already happened.
    async fn recall<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, AgentError> {
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
    async fn record<T: Serialize>(&self, key: &str, step: &T) -> Result<(), AgentError> {
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

fn tool_choice(tools: &[ToolSpec], phase: Phase, turn: u32) -> ToolChoice {
    if tools.is_empty() {
        ToolChoice::None
    } else if turn == 0 && phase == Phase::Research {
        ToolChoice::Required
    } else {
        ToolChoice::Auto
    }
}

fn count_turns(state: &mut RpiState, turns: u64, usage: &Usage) {
    state.model_turns += turns;
    state.prompt_tokens += usage.prompt_tokens;
    state.completion_tokens += usage.completion_tokens;
}

fn parse_arguments(arguments: &str) -> Result<Value, ErrorBody> {
    let trimmed = arguments.trim();
    if trimmed.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            "tool arguments must be a JSON object",
        )),
        Err(error) => Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!("tool arguments are not valid JSON: {error}"),
        )),
    }
}

pub(crate) fn render(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Ok(output) => output.to_string(),
        Outcome::Error(error) => error_text(error),
    }
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

fn error_text(error: &ErrorBody) -> String {
    serde_json::json!({"error": {"code": error.code, "message": error.message}}).to_string()
}

#[cfg(test)]
#[path = "steps_recall_tests.rs"]
mod recall_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_objects() {
        assert!(parse_arguments("").is_ok());
        assert_eq!(
            parse_arguments("[1]").err().map(|e| e.code),
            Some(ErrorCode::ValidationFailed)
        );
        assert_eq!(
            parse_arguments("{oops").err().map(|e| e.code),
            Some(ErrorCode::ValidationFailed)
        );
    }

    #[test]
    fn answers_are_judged_by_what_their_phase_needs() {
        use Verdict::{Accept, Nudge, Refuse};
        // Research: an empty reply is nudged once, then given up on.
        assert!(matches!(judge(Expect::Findings, "  \n", 0, 0), Nudge(_)));
        assert!(matches!(judge(Expect::Findings, "", 0, 1), Refuse(_)));
        assert_eq!(judge(Expect::Findings, "Five rows.", 0, 0), Accept);
        // Plan: garbled text (as a small model wrote it) is told the format twice.
        let garbled = "41 N. Count the number of rows in penguins.csv";
        assert!(
            matches!(judge(Expect::Checklist, garbled, 0, 0), Nudge(n) if n.contains("- [ ] N. label"))
        );
        assert!(matches!(judge(Expect::Checklist, garbled, 0, 1), Nudge(_)));
        assert!(
            matches!(judge(Expect::Checklist, garbled, 0, 2), Refuse(r) if r.contains("checklist"))
        );
        assert_eq!(
            judge(Expect::Checklist, "- [ ] 1. Count — rows", 0, 0),
            Accept
        );
        assert_eq!(
            judge(Expect::Checklist, "NO_CHANGE_NEEDED: a question", 0, 0),
            Accept
        );
        // An item: a claim without a successful call is nudged once, then refused; a stated
        // reason or a failure marker is an answer.
        assert!(
            matches!(judge(Expect::Work, "Item 1 complete.", 0, 0), Nudge(n) if n.contains("no successful tool call"))
        );
        assert!(matches!(
            judge(Expect::Work, "Item 1 complete.", 0, 1),
            Refuse(_)
        ));
        assert_eq!(judge(Expect::Work, "Item 1 complete.", 1, 0), Accept);
        assert_eq!(
            judge(Expect::Work, "NO_CHANGE_NEEDED: already sorted", 0, 0),
            Accept
        );
        assert_eq!(
            judge(Expect::Work, "ITEM_FAILED: no such column", 0, 0),
            Accept
        );
    }

    #[test]
    fn captured_plans_of_a_small_model_are_judged_as_plans() {
        use crate::captured::captured;
        use crate::text_tools::{Reading, read_reply};
        let answer =
            |name: &str| match read_reply(&captured(name).reply().text, &catalog::plan_tools()) {
                Reading::Answer(answer) => answer,
                other => panic!("{other:?}"),
            };
        // `12345` is told the format twice, then refused (PLAN_INVALID).
        let number = answer("constrained-plan-number.json");
        assert!(matches!(
            judge(Expect::Checklist, &number, 0, 0),
            Verdict::Nudge(_)
        ));
        assert!(matches!(
            judge(Expect::Checklist, &number, 0, 1),
            Verdict::Nudge(_)
        ));
        assert!(matches!(
            judge(Expect::Checklist, &number, 0, 2),
            Verdict::Refuse(_)
        ));
        // A numbered step is a plan; whether it works is up to its item's tool calls.
        let copied = answer("constrained-plan-copied-example.json");
        assert_eq!(judge(Expect::Checklist, &copied, 0, 0), Verdict::Accept);
        // Research notes that are a made-up object are still findings (not empty).
        let made_up = captured("text-research-bare-object.json").reply().text;
        assert_eq!(judge(Expect::Findings, &made_up, 0, 0), Verdict::Accept);
        // The same text as an item's answer, with no successful call, is not work.
        assert!(matches!(
            judge(Expect::Work, &made_up, 0, 0),
            Verdict::Nudge(_)
        ));
        assert!(matches!(
            judge(Expect::Work, &made_up, 0, 1),
            Verdict::Refuse(_)
        ));
    }

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
