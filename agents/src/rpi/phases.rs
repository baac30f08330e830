//! What each phase asks and how it advances the state.

use atelier_messages::ErrorCode;
use atelier_messages::job::{EventKind, ItemStatus, Phase, PlanItem};
use tracing::{Instrument, info_span};

use super::driver::Driver;
use super::prompts::{self, ItemContext, item_failure};
use super::steps::{Expect, LoopEnd, Scope};
use super::types::RpiState;
use crate::AgentError;
use crate::catalog::{self, ToolSpec};
use crate::plan;
use crate::provider::{ChatMessage, ModelRequest, ToolChoice};

/// How an item ended: done (with the model's reason when it changed nothing), or failed.
type ItemOutcome = Result<Option<String>, Failure>;

fn plan_invalid(reason: &str) -> AgentError {
    AgentError::Job(atelier_messages::ErrorBody::new(
        ErrorCode::PlanInvalid,
        format!("the model gave no usable plan: {reason}"),
    ))
}

/// How one failed attempt at a plan item ended.
struct Failure {
    /// The stable code, when the failure has one (a model's own `ITEM_FAILED` has none).
    code: Option<ErrorCode>,
    reason: String,
    retry: bool,
}

/// How an item ends on the model's final answer, after `successful_calls` successful calls:
/// failed when it says so; done, with its reason when it changed nothing. A retry of an item
/// the model itself declared failed cannot be closed as needing no change: that contradicts
/// the failure, and would let a job succeed without its work.
fn answered_item(text: &str, successful_calls: u32, previous: Option<&Failure>) -> ItemOutcome {
    if let Some(reason) = item_failure(text) {
        return Err(Failure {
            code: None,
            reason,
            retry: true,
        });
    }
    // The reason that nothing changed counts only when nothing was done.
    let no_change = prompts::no_change(text).filter(|_| successful_calls == 0);
    match (no_change, previous) {
        (Some(reason), Some(declared)) if declared.code.is_none() => Err(Failure {
            code: Some(ErrorCode::ItemNotDone),
            reason: format!(
                "the previous attempt declared the item failed ({}); this one changed nothing \
                 and answered that no change is needed ({reason})",
                declared.reason
            ),
            retry: false,
        }),
        (no_change, _) => Ok(no_change),
    }
}

impl Driver<'_> {
    pub(super) async fn run_phase(
        &self,
        phase: Phase,
        state: &mut RpiState,
    ) -> Result<(), AgentError> {
        match phase {
            Phase::Research => self.research(state).await,
            Phase::Plan => self.plan(state).await,
            Phase::Implement => self.implement(state).await,
            Phase::Summary => self.summary(state).await,
            Phase::Done => Ok(()),
        }
    }

    async fn research(&self, state: &mut RpiState) -> Result<(), AgentError> {
        let workbench = &self.job.workbench;
        let end = self
            .single_phase_loop(
                state,
                Phase::Research,
                |manifest| prompts::research(workbench, manifest),
                catalog::research_tools(),
                self.budgets.research_turns,
                Expect::Findings,
            )
            .await?;
        state.research = Some(match end {
            LoopEnd::Answer { text, .. } => text,
            LoopEnd::Refused(reason) => format!("Research found nothing ({reason})."),
            LoopEnd::BudgetExhausted => "Research stopped at its turn budget.".to_string(),
            LoopEnd::LoopDetected(reason) => format!("Research stopped: {reason}"),
            LoopEnd::Unusable(error) => format!("Research stopped: {error}"),
        });
        state.phase = Phase::Plan;
        self.save(state).await
    }

    async fn plan(&self, state: &mut RpiState) -> Result<(), AgentError> {
        let research = state.research.clone().unwrap_or_default();
        let end = self
            .single_phase_loop(
                state,
                Phase::Plan,
                |manifest| prompts::plan(&research, manifest),
                catalog::plan_tools(),
                self.budgets.plan_turns,
                Expect::Checklist,
            )
            .await?;
        let text = match end {
            LoopEnd::Answer { text, .. } => text,
            LoopEnd::Refused(reason) => return Err(plan_invalid(&reason)),
            LoopEnd::BudgetExhausted => {
                return Err(plan_invalid(
                    "the plan phase ran out of turns before a checklist",
                ));
            }
            LoopEnd::LoopDetected(reason) => return Err(plan_invalid(&reason)),
            LoopEnd::Unusable(error) => return Err(error),
        };
        state.items = plan::parse(&text);
        state.original_count = state.items.len();
        state.plan_md = Some(plan::render(&state.items, state.original_count));
        state.phase = Phase::Implement;
        self.save(state).await
    }

    /// A phase that is not per item: its journaled system prompt, then the tool loop on the
    /// user's request.
    async fn single_phase_loop(
        &self,
        state: &mut RpiState,
        phase: Phase,
        build_prompt: impl FnOnce(&str) -> String,
        tools: Vec<ToolSpec>,
        budget: u32,
        expect: Expect,
    ) -> Result<LoopEnd, AgentError> {
        let scope = Scope::single(phase);
        let system = self.system_prompt(scope, build_prompt).await?;
        self.tool_loop(
            state,
            scope,
            system,
            self.job.message.clone(),
            tools,
            budget,
            expect,
        )
        .await
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
            let (attempts, outcome) = self.run_item(state, &item, total).instrument(span).await?;
            let entry = &mut state.items[position];
            entry.attempts = attempts;
            match outcome {
                Ok(no_change) => {
                    entry.status = ItemStatus::Done;
                    entry.no_change = no_change;
                }
                Err(failure) => {
                    entry.status = ItemStatus::Failed;
                    entry.failure = Some(failure.reason);
                    entry.failure_code = failure.code;
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

    /// Runs an item's attempts; returns how many were made and how the last one ended: done
    /// (with the model's reason when it changed nothing) or failed.
    async fn run_item(
        &self,
        state: &mut RpiState,
        item: &PlanItem,
        total: u32,
    ) -> Result<(u32, ItemOutcome), AgentError> {
        let mut outcome: ItemOutcome = Ok(None);
        let mut attempt = 0;
        while attempt < self.budgets.item_attempts {
            attempt += 1;
            self.host.emit(EventKind::ItemStarted {
                index: item.index,
                total,
                label: item.label.clone(),
                attempt,
            });
            let previous = std::mem::replace(&mut outcome, Ok(None)).err();
            outcome = self
                .attempt_item(state, item, total, attempt, previous.as_ref())
                .await?;
            match &outcome {
                Ok(_) => break,
                Err(failure) if !failure.retry => break,
                Err(_) => {}
            }
        }
        Ok((attempt, outcome))
    }

    async fn attempt_item(
        &self,
        state: &mut RpiState,
        item: &PlanItem,
        total: u32,
        attempt: u32,
        previous: Option<&Failure>,
    ) -> Result<ItemOutcome, AgentError> {
        let scope = Scope {
            phase: Phase::Implement,
            item: item.index,
            attempt,
        };
        let request_text = self.job.message.clone();
        let research = state.research.clone().unwrap_or_default();
        let plan_md = state.plan_md.clone().unwrap_or_default();
        let previous_reason = previous.map(|failure| failure.reason.clone());
        let item_owned = item.clone();
        let system = self
            .system_prompt(scope, move |manifest| {
                prompts::implement(&ItemContext {
                    item: &item_owned,
                    total,
                    request: &request_text,
                    research: &research,
                    plan_md: &plan_md,
                    manifest,
                    previous_failure: previous_reason.as_deref(),
                })
            })
            .await?;
        let task = format!(
            "Do plan item {}: {} — {}",
            item.index, item.label, item.description
        );
        let end = self
            .tool_loop(
                state,
                scope,
                system,
                task,
                catalog::implement_tools(),
                self.budgets.item_turns,
                Expect::Work,
            )
            .await?;
        Ok(match end {
            LoopEnd::Answer {
                text,
                successful_calls,
            } => answered_item(&text, successful_calls, previous),
            LoopEnd::Refused(reason) => Err(Failure {
                code: Some(ErrorCode::ItemNotDone),
                reason,
                retry: true,
            }),
            LoopEnd::BudgetExhausted => Err(Failure {
                code: Some(ErrorCode::BudgetExceeded),
                reason: format!("turn budget of {} exhausted", self.budgets.item_turns),
                retry: true,
            }),
            LoopEnd::LoopDetected(reason) => Err(Failure {
                code: Some(ErrorCode::AgentLoopDetected),
                reason,
                retry: false,
            }),
            LoopEnd::Unusable(error) => Err(Failure {
                code: Some(error.code()),
                reason: error.to_string(),
                retry: true,
            }),
        })
    }

    async fn summary(&self, state: &mut RpiState) -> Result<(), AgentError> {
        let scope = Scope::single(Phase::Summary);
        let plan_md = state
            .plan_md
            .clone()
            .unwrap_or_else(|| "(no plan)".to_string());
        let system = self
            .system_prompt(scope, move |manifest| prompts::summary(&plan_md, manifest))
            .await?;
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
            })
        };
        let response = self
            .model_turn(state, scope, 0, &request, &on_delta)
            .await?;
        let changes = self.host.draft_changes().await?;
        state.summary = Some(format!(
            "{}\n\n{}",
            response.content.trim_end(),
            prompts::draft_changes(&changes)
        ));
        state.phase = Phase::Done;
        self.save(state).await
    }

    /// Saves the state at a phase or item boundary, its totals settled.
    pub(super) async fn save(&self, state: &mut RpiState) -> Result<(), AgentError> {
        state.settle();
        self.host.save(state).await.map_err(AgentError::Job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared(reason: &str) -> Failure {
        Failure {
            code: None,
            reason: reason.into(),
            retry: true,
        }
    }

    #[test]
    fn a_retry_after_a_declared_failure_cannot_end_as_no_change() {
        // As the 0.5B model answered launch-count: "ITEM_FAILED: Tool not found.", then
        // "NO_CHANGE_NEEDED: Plan item 1: 5 —" on the retry, with no call in either.
        let previous = declared("Tool not found.");
        let outcome = answered_item("NO_CHANGE_NEEDED: Plan item 1: 5 —", 0, Some(&previous));
        let failure = outcome.expect_err("failed");
        assert_eq!(failure.code, Some(ErrorCode::ItemNotDone));
        assert!(!failure.retry);
        assert!(
            failure.reason.contains("Tool not found."),
            "{}",
            failure.reason
        );
        // Without a declared failure before it, the stated reason stands.
        assert_eq!(
            answered_item("NO_CHANGE_NEEDED: already sorted", 0, None).ok(),
            Some(Some("already sorted".to_string()))
        );
        // After a failure with a code (a budget, unusable replies) the first attempt may have
        // done the work: the retry may say so.
        let budget = Failure {
            code: Some(ErrorCode::BudgetExceeded),
            reason: "turn budget of 30 exhausted".into(),
            retry: true,
        };
        assert_eq!(
            answered_item("NO_CHANGE_NEEDED: count.txt is written", 0, Some(&budget)).ok(),
            Some(Some("count.txt is written".to_string()))
        );
        // A retry that did the work is done, whatever it adds.
        assert_eq!(
            answered_item("Wrote count.txt. NO_CHANGE_NEEDED: x", 1, Some(&previous)).ok(),
            Some(None)
        );
        assert!(answered_item("ITEM_FAILED: no such column", 0, None).is_err());
    }
}
