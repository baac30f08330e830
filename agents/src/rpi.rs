//! Research → Plan → Implement → Summary, independent of transport.
//!
//! The driver owns the phase logic and the agent loop; an [`AgentHost`] supplies tool
//! execution, checkpointing and events. State is saved after every phase and every plan item,
//! so a restarted coordinator continues from the last completed step.

use atelier_messages::job::{EventKind, ItemStatus, Phase, PlanItem};
use atelier_messages::store::ManifestEntry;
use atelier_messages::{ErrorBody, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{Instrument, info_span};

use crate::AgentError;
use crate::catalog::{self, ToolSpec};
use crate::plan;
use crate::provider::{ChatMessage, ModelProvider, ModelRequest, ToolChoice};

/// Tool results longer than this are cut in the prompt (the full result stays with the host).
pub const MAX_TOOL_RESULT_CHARS: usize = 16_000;

/// The marker a model writes to declare a plan item failed.
pub const ITEM_FAILED_MARKER: &str = "ITEM_FAILED:";

/// Turn budgets per phase (seed: research 30, plan 10, 30 per item).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Budgets {
    pub research_turns: u32,
    pub plan_turns: u32,
    pub item_turns: u32,
    /// Attempts per plan item (the first try plus one retry).
    pub item_attempts: u32,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            research_turns: 30,
            plan_turns: 10,
            item_turns: 30,
            item_attempts: 2,
        }
    }
}

/// What the job asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobInput {
    pub job_id: String,
    pub workbench: String,
    pub message: String,
}

/// The resumable state of one job's RPI run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RpiState {
    pub phase: Phase,
    #[serde(default)]
    pub research: Option<String>,
    #[serde(default)]
    pub plan_md: Option<String>,
    #[serde(default)]
    pub items: Vec<PlanItem>,
    #[serde(default)]
    pub original_count: usize,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub model_turns: u64,
    #[serde(default)]
    pub tool_calls: u64,
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

impl Default for RpiState {
    fn default() -> Self {
        Self {
            phase: Phase::Research,
            research: None,
            plan_md: None,
            items: Vec::new(),
            original_count: 0,
            summary: None,
            model_turns: 0,
            tool_calls: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
        }
    }
}

/// What the driver needs from its environment.
#[async_trait::async_trait]
pub trait AgentHost: Send + Sync {
    /// Runs one tool call (the call id is deterministic per job step).
    async fn call_tool(
        &self,
        call_id: &str,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<Value, ErrorBody>;
    /// The files the agent currently sees.
    async fn files(&self) -> Result<Vec<ManifestEntry>, ErrorBody>;
    /// Durably records the state (called after every completed step).
    async fn save(&self, state: &RpiState) -> Result<(), ErrorBody>;
    /// Publishes a progress event.
    fn emit(&self, kind: EventKind);
}

/// Runs the job from `state.phase` to the end, saving after every step.
pub async fn run(
    job: &JobInput,
    state: &mut RpiState,
    provider: &dyn ModelProvider,
    host: &dyn AgentHost,
    budgets: Budgets,
) -> Result<(), AgentError> {
    let driver = Driver {
        job,
        provider,
        host,
        budgets,
    };
    while state.phase != Phase::Done {
        let phase = state.phase;
        let span = info_span!("phase", job_id = %job.job_id, phase = %phase);
        host.emit(EventKind::PhaseStarted { phase });
        async {
            match phase {
                Phase::Research => driver.research(state).await,
                Phase::Plan => driver.plan(state).await,
                Phase::Implement => driver.implement(state).await,
                Phase::Summary => driver.summary(state).await,
                Phase::Done => Ok(()),
            }
        }
        .instrument(span)
        .await?;
        host.emit(EventKind::PhaseCompleted { phase });
    }
    Ok(())
}

struct Driver<'a> {
    job: &'a JobInput,
    provider: &'a dyn ModelProvider,
    host: &'a dyn AgentHost,
    budgets: Budgets,
}

/// How a tool loop ended.
enum LoopEnd {
    /// The model answered with text and no tool calls.
    Answer(String),
    /// The turn budget ran out.
    BudgetExhausted,
}

impl Driver<'_> {
    async fn research(&self, state: &mut RpiState) -> Result<(), AgentError> {
        let system = format!(
            "You are in the Research phase of a job on the workbench `{}`. Use the read-only tools to \
             learn what the files contain that matters for the request. Do not change anything. When \
             you know enough, answer with concise research notes (facts, file structure, numbers) and \
             no tool calls.\n\n{}",
            self.job.workbench,
            self.manifest_section().await?
        );
        let end = self
            .tool_loop(
                state,
                "research",
                None,
                system,
                self.job.message.clone(),
                catalog::research_tools(),
                self.budgets.research_turns,
            )
            .await?;
        state.research = Some(match end {
            LoopEnd::Answer(text) => text,
            LoopEnd::BudgetExhausted => "Research stopped at its turn budget.".to_string(),
        });
        state.phase = Phase::Plan;
        self.save(state).await
    }

    async fn plan(&self, state: &mut RpiState) -> Result<(), AgentError> {
        let system = format!(
            "You are in the Plan phase. Write a checklist of the steps that fulfil the request, one per \
             line, exactly in the form `- [ ] N. label — description`. Keep it short (1 to 8 items); each \
             item must be doable with the workbench tools. If nothing needs to change, write no items.\n\n\
             Research notes:\n{}\n\n{}",
            state.research.as_deref().unwrap_or("(none)"),
            self.manifest_section().await?
        );
        let end = self
            .tool_loop(
                state,
                "plan",
                None,
                system,
                self.job.message.clone(),
                catalog::plan_tools(),
                self.budgets.plan_turns,
            )
            .await?;
        let text = match end {
            LoopEnd::Answer(text) => text,
            LoopEnd::BudgetExhausted => String::new(),
        };
        state.items = plan::parse(&text);
        state.original_count = state.items.len();
        state.plan_md = Some(plan::render(&state.items, state.original_count));
        state.phase = Phase::Implement;
        self.save(state).await
    }

    async fn implement(&self, state: &mut RpiState) -> Result<(), AgentError> {
        let total = u32::try_from(state.items.len()).unwrap_or(u32::MAX);
        while let Some(position) = state
            .items
            .iter()
            .position(|item| item.status == ItemStatus::Pending)
        {
            let item = state.items[position].clone();
            let span = info_span!("item", index = item.index, label = %item.label);
            let outcome = self.run_item(state, &item, total).instrument(span).await?;
            let entry = &mut state.items[position];
            entry.attempts = outcome.attempts;
            match outcome.failure {
                None => entry.status = ItemStatus::Done,
                Some(reason) => {
                    entry.status = ItemStatus::Failed;
                    entry.failure = Some(reason);
                }
            }
            state.plan_md = Some(plan::render(&state.items, state.original_count));
            self.host.emit(EventKind::ItemFinished {
                index: item.index,
                status: state.items[position].status,
            });
            self.save(state).await?;
        }
        state.phase = Phase::Summary;
        self.save(state).await
    }

    async fn run_item(
        &self,
        state: &mut RpiState,
        item: &PlanItem,
        total: u32,
    ) -> Result<ItemOutcome, AgentError> {
        let mut failure = None;
        let mut attempt = item.attempts;
        while attempt < self.budgets.item_attempts {
            attempt += 1;
            self.host.emit(EventKind::ItemStarted {
                index: item.index,
                total,
                label: item.label.clone(),
                attempt,
            });
            let system = self
                .implement_prompt(state, item, total, failure.as_deref())
                .await?;
            let task = format!(
                "Do plan item {}: {} — {}",
                item.index, item.label, item.description
            );
            let end = self
                .tool_loop(
                    state,
                    "implement",
                    Some(item.index),
                    system,
                    task,
                    catalog::implement_tools(),
                    self.budgets.item_turns,
                )
                .await?;
            failure = match end {
                LoopEnd::Answer(text) => item_failure(&text),
                LoopEnd::BudgetExhausted => Some(format!(
                    "turn budget of {} exhausted",
                    self.budgets.item_turns
                )),
            };
            if failure.is_none() {
                break;
            }
        }
        Ok(ItemOutcome {
            attempts: attempt,
            failure,
        })
    }

    async fn implement_prompt(
        &self,
        state: &RpiState,
        item: &PlanItem,
        total: u32,
        previous_failure: Option<&str>,
    ) -> Result<String, AgentError> {
        let mut prompt = format!(
            "You are in the Implement phase, working on plan item {} of {}: {} — {}.\n\
             Use the tools to do exactly this item. Every write lands in the draft, never in the \
             published files. When the item is done, answer with a one-line result and no tool calls. \
             If it cannot be done, answer `{ITEM_FAILED_MARKER} <reason>`.\n\nUser request:\n{}\n\n\
             Research notes:\n{}\n\nPlan:\n{}\n\n{}",
            item.index,
            total,
            item.label,
            item.description,
            self.job.message,
            state.research.as_deref().unwrap_or("(none)"),
            state.plan_md.as_deref().unwrap_or("(none)"),
            self.manifest_section().await?
        );
        if let Some(reason) = previous_failure {
            prompt.push_str(&format!(
                "\n\nThe previous attempt failed: {reason}. Try another way."
            ));
        }
        Ok(prompt)
    }

    async fn summary(&self, state: &mut RpiState) -> Result<(), AgentError> {
        let system = format!(
            "You are in the Summary phase. Tell the user, briefly and concretely, what was done and \
             what is in the draft for them to review (publish or discard). Mention failed items.\n\n\
             Plan with results:\n{}\n\n{}",
            state.plan_md.as_deref().unwrap_or("(no plan)"),
            self.manifest_section().await?
        );
        let request = ModelRequest {
            phase: "summary".into(),
            item_index: None,
            messages: vec![
                ChatMessage::system(system),
                ChatMessage::user(self.job.message.clone()),
            ],
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
        };
        let on_delta = |text: &str| {
            self.host.emit(EventKind::AssistantDelta {
                text: text.to_string(),
            });
        };
        let response = self.provider.complete(&request, &on_delta).await?;
        count_turn(state, &response.usage);
        state.summary = Some(response.content);
        state.phase = Phase::Done;
        self.save(state).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn tool_loop(
        &self,
        state: &mut RpiState,
        phase: &str,
        item_index: Option<u32>,
        system: String,
        task: String,
        tools: Vec<ToolSpec>,
        budget: u32,
    ) -> Result<LoopEnd, AgentError> {
        let mut messages = vec![ChatMessage::system(system), ChatMessage::user(task)];
        for turn in 0..budget {
            let tool_choice = if tools.is_empty() {
                ToolChoice::None
            } else if turn == 0 && phase == "research" {
                ToolChoice::Required
            } else {
                ToolChoice::Auto
            };
            let request = ModelRequest {
                phase: phase.to_string(),
                item_index,
                messages: messages.clone(),
                tools: tools.clone(),
                tool_choice,
            };
            let response = self.provider.complete(&request, &|_: &str| {}).await?;
            count_turn(state, &response.usage);
            if response.tool_calls.is_empty() {
                return Ok(LoopEnd::Answer(response.content));
            }
            messages.push(ChatMessage::assistant(
                response.content.clone(),
                response.tool_calls.clone(),
            ));
            for (k, call) in response.tool_calls.iter().enumerate() {
                let call_id = format!(
                    "{}.{phase}.{}.{turn}.{k}",
                    self.job.job_id,
                    item_index.unwrap_or(0)
                );
                let result = self
                    .execute(state, &call_id, &call.name, &call.arguments, &tools)
                    .await;
                messages.push(ChatMessage::tool_result(call.id.clone(), result));
            }
        }
        Ok(LoopEnd::BudgetExhausted)
    }

    /// Runs one tool call and renders its result (or error) as the text the model sees.
    async fn execute(
        &self,
        state: &mut RpiState,
        call_id: &str,
        name: &str,
        arguments: &str,
        allowed: &[ToolSpec],
    ) -> String {
        let Some(spec) = allowed.iter().find(|spec| spec.name == name) else {
            let names: Vec<_> = allowed.iter().map(|spec| spec.name).collect();
            return error_text(&ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "tool `{name}` is not available in this phase; available: {}",
                    names.join(", ")
                ),
            ));
        };
        let args = match parse_arguments(arguments) {
            Ok(args) => args,
            Err(error) => return error_text(&error),
        };
        state.tool_calls += 1;
        let path = args.get("path").and_then(Value::as_str).map(str::to_string);
        self.host.emit(EventKind::ToolExecuting {
            call_id: call_id.to_string(),
            tool: name.to_string(),
            path,
        });
        match self.host.call_tool(call_id, spec, args).await {
            Ok(output) => truncate(output.to_string()),
            Err(error) => error_text(&error),
        }
    }

    async fn manifest_section(&self) -> Result<String, AgentError> {
        let files = self.host.files().await.map_err(AgentError::Job)?;
        if files.is_empty() {
            return Ok("The workbench has no files.".to_string());
        }
        let mut out = String::from(
            "Files already in the workbench (do not ask the user to upload them; read them with the tools):\n",
        );
        for file in files {
            out.push_str(&format!(
                "- {} ({}, {} bytes)\n",
                file.path, file.kind, file.size
            ));
        }
        Ok(out)
    }

    async fn save(&self, state: &RpiState) -> Result<(), AgentError> {
        self.host.save(state).await.map_err(AgentError::Job)
    }
}

struct ItemOutcome {
    attempts: u32,
    failure: Option<String>,
}

fn count_turn(state: &mut RpiState, usage: &crate::provider::Usage) {
    state.model_turns += 1;
    state.prompt_tokens += usage.prompt_tokens;
    state.completion_tokens += usage.completion_tokens;
}

fn item_failure(answer: &str) -> Option<String> {
    answer
        .lines()
        .find_map(|line| line.trim().strip_prefix(ITEM_FAILED_MARKER))
        .map(|reason| reason.trim().to_string())
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

fn error_text(error: &ErrorBody) -> String {
    serde_json::json!({"error": {"code": error.code, "message": error.message}}).to_string()
}

fn truncate(text: String) -> String {
    if text.chars().count() <= MAX_TOOL_RESULT_CHARS {
        return text;
    }
    let cut: String = text.chars().take(MAX_TOOL_RESULT_CHARS).collect();
    format!(
        "{cut}… [result truncated at {MAX_TOOL_RESULT_CHARS} characters; ask for a smaller window]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_failure_marker_is_found_on_any_line() {
        assert_eq!(
            item_failure("tried\nITEM_FAILED: no such column").as_deref(),
            Some("no such column")
        );
        assert_eq!(item_failure("All done."), None);
    }

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
}
