//! What each phase asks and how it advances the state.
//!
//! What the engine checks before an item is done is in `item_end` and `contracts`. The files
//! an item changed are recorded on it; its final answer may append plan items
//! ([`plan::amendments`]).

use std::collections::BTreeMap;

use atelier_messages::job::{EventKind, ItemStatus, Phase, PlanItem};
use atelier_messages::{ErrorBody, ErrorCode, journal};
use tracing::{Instrument, info_span};

use super::contracts::{BROKEN_CONTRACT, EditsBefore, ItemBefore, earlier_contracts};
use super::driver::Driver;
use super::item_end::{
    Answered, Done, Failure, ItemOutcome, LEFT_A_COPY, answered_item, changed_paths, copy_kept,
    digests, told_before, wrote_without_data,
};
use super::prompts::{self, ItemContext};
use super::steps::{Calls, Expect, LoopEnd, LoopSpec, Scope};
use super::types::RpiState;
use crate::AgentError;
use crate::answer::AnswerShape;
use crate::catalog::{self, ToolSpec};
use crate::contract::review::Sources;
use crate::plan;
use crate::provider::{ChatMessage, ModelRequest, ToolChoice};

fn plan_invalid(reason: &str) -> AgentError {
    AgentError::Job(ErrorBody::new(
        ErrorCode::PlanInvalid,
        format!("the model gave no usable plan: {reason}"),
    ))
}

/// What an item started from, before its first attempt (journaled): its files, and the
/// workbooks its edit contracts name.
struct ItemStart {
    files: BTreeMap<String, String>,
    edits: EditsBefore,
    /// What its contracts' sources give, as the model is told.
    sources: Option<String>,
}

/// One attempt at a plan item, as its end is judged.
struct Attempt<'a> {
    item: &'a PlanItem,
    /// 1 for the first attempt.
    number: u32,
    /// How the attempt before it failed.
    previous: Option<&'a Failure>,
    before: &'a ItemStart,
}

/// `ITEM_NOT_DONE` for an item whose written content breaks its contracts: tried again once
/// with what differs, then failed; failed at once when a contract cannot be checked (another
/// attempt under the same contract cannot mend that).
fn contract_broken(reason: String, uncheckable: bool, previous: Option<&Failure>) -> Failure {
    Failure {
        code: Some(ErrorCode::ItemNotDone),
        retry: !told_before(previous, BROKEN_CONTRACT) && !uncheckable,
        reason,
    }
}

/// `SANDBOX_VIOLATION` for a plan item whose target lies outside the workbench.
fn target_outside(items: &[PlanItem], what: &str) -> Result<(), AgentError> {
    match plan::target_outside(items) {
        None => Ok(()),
        Some((index, target)) => Err(AgentError::Job(ErrorBody::new(
            ErrorCode::SandboxViolation,
            format!(
                "{what} item {index} names `{target}`, which is outside the workbench; nothing \
                 of the plan ran"
            ),
        ))),
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
        if let Some(notes) = self.research_skipped().await? {
            state.research = Some(notes);
            state.phase = Phase::Plan;
            return self.save(state).await;
        }
        let workbench = &self.job.workbench;
        let end = self
            .single_phase_loop(
                state,
                Phase::Research,
                |manifest| prompts::research(workbench, manifest),
                self.offered(Phase::Research, catalog::research_tools())
                    .await?,
                self.budgets.research_turns,
                Expect::Findings,
                AnswerShape::Text,
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
        let paths = self.paths().await?;
        state.asks_for = crate::request::classify(&self.job.message, &paths)
            .artefact()
            .map(str::to_string);
        state.requested_files = crate::request::missing_files(&self.job.message, &paths);
        if self.compact() {
            state.unwritten_quotes = crate::request::quoted_additions(&self.job.message);
            state.unreplaced_placeholders = crate::request::named_placeholders(&self.job.message);
        }
        let asks_for = state.asks_for.clone();
        // The answer-only way out is offered to a question only (a plan may still declare it).
        let asks_question = crate::request::asks_a_question(&self.job.message);
        let sources = Sources::of(&paths);
        let texts = !sources.texts.is_empty();
        let answer = AnswerShape::Plan {
            no_change: asks_for.is_none() && asks_question,
            targets: state.requested_files.clone(),
            sources: sources.paths(),
        };
        let end = self
            .single_phase_loop(
                state,
                Phase::Plan,
                |manifest| {
                    prompts::plan(
                        &research,
                        manifest,
                        asks_for.as_deref(),
                        asks_question,
                        texts,
                    )
                },
                self.offered(Phase::Plan, catalog::plan_tools()).await?,
                self.budgets.plan_turns,
                Expect::Checklist,
                answer,
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
        let mut items = plan::parse(&text);
        plan::assign_requested(&mut items, &state.requested_files);
        target_outside(&items, "plan")?;
        state.items = items;
        state.original_count = state.items.len();
        state.plan_md = Some(plan::render(&state.items, state.original_count));
        state.phase = Phase::Implement;
        self.save(state).await
    }

    /// A phase that is not per item: its journaled system prompt, then the tool loop on the
    /// user's request.
    #[allow(clippy::too_many_arguments)]
    async fn single_phase_loop(
        &self,
        state: &mut RpiState,
        phase: Phase,
        build_prompt: impl FnOnce(&str) -> String,
        tools: Vec<ToolSpec>,
        budget: u32,
        expect: Expect,
        answer: AnswerShape,
    ) -> Result<LoopEnd, AgentError> {
        let scope = Scope::single(phase);
        let system = self.system_prompt(scope, build_prompt).await?;
        let spec = LoopSpec {
            scope,
            system,
            task: self.job.message.clone(),
            tools,
            budget,
            expect,
            answer,
            targets: Vec::new(),
            contracts: Vec::new(),
            before: BTreeMap::new(),
        };
        self.tool_loop(state, spec).await
    }

    async fn implement(&self, state: &mut RpiState) -> Result<(), AgentError> {
        while let Some(position) = state
            .items
            .iter()
            .position(|item| item.status == ItemStatus::Pending)
        {
            let total = u32::try_from(state.items.len()).unwrap_or(u32::MAX);
            let item = state.items[position].clone();
            let span = info_span!("item", index = item.index, label = %item.label);
            let (attempts, outcome, changed) =
                self.run_item(state, &item, total).instrument(span).await?;
            let entry = &mut state.items[position];
            entry.attempts = attempts;
            entry.changed = changed;
            match outcome {
                Ok(done) => {
                    entry.status = ItemStatus::Done;
                    entry.no_change = done.no_change;
                    entry.wrote = done.wrote;
                    self.amend(state, &item, &done.answer)?;
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

    /// Appends the items a done item's final answer adds to the plan (append-only, capped at
    /// twice the original count). They are saved with the item's status, from its journaled
    /// answer, so a resumed job neither repeats nor loses them.
    fn amend(&self, state: &mut RpiState, item: &PlanItem, answer: &str) -> Result<(), AgentError> {
        let amendment = plan::amendments(answer, &state.items, state.original_count);
        target_outside(&amendment.items, "an amended")?;
        if amendment.dropped > 0 {
            tracing::warn!(
                item = item.index,
                dropped = amendment.dropped,
                cap = state.original_count * 2,
                "plan amendments beyond twice the original item count were dropped"
            );
        }
        state.items.extend(amendment.items);
        Ok(())
    }

    /// The workbench's files as the agent sees them: path → digest.
    async fn file_digests(&self) -> Result<BTreeMap<String, String>, AgentError> {
        Ok(digests(&self.host.files().await?))
    }

    /// The files before the item's first attempt, journaled the first time.
    async fn item_files(&self, item: u32) -> Result<BTreeMap<String, String>, AgentError> {
        let key = journal::item_files(item);
        if let Some(files) = self.recall(&key).await? {
            return Ok(files);
        }
        let files = self.file_digests().await?;
        self.record(&key, &files).await?;
        Ok(files)
    }

    /// Runs an item's attempts; returns how many were made, how the last one ended (done, or
    /// failed) and the paths the draft changed during the item.
    async fn run_item(
        &self,
        state: &mut RpiState,
        item: &PlanItem,
        total: u32,
    ) -> Result<(u32, ItemOutcome, Vec<String>), AgentError> {
        let before = ItemStart {
            files: self.item_files(item.index).await?,
            edits: self.edits_before(item).await?,
            sources: self.sources_told(item).await?,
        };
        let mut attempt = 0;
        let mut previous: Option<Failure> = None;
        let outcome = loop {
            attempt += 1;
            self.host.emit(EventKind::ItemStarted {
                index: item.index,
                total,
                label: item.label.clone(),
                attempt,
            });
            let outcome = self
                .attempt_item(state, item, total, attempt, previous.as_ref(), &before)
                .await?;
            match outcome {
                Ok(done) => break Ok(done),
                Err(failure) if !failure.retry || attempt >= self.budgets.item_attempts => {
                    break Err(failure);
                }
                Err(failure) => previous = Some(failure),
            }
        };
        let changed = changed_paths(&before.files, &self.file_digests().await?);
        Ok((attempt, outcome, changed))
    }

    async fn attempt_item(
        &self,
        state: &mut RpiState,
        item: &PlanItem,
        total: u32,
        attempt: u32,
        previous: Option<&Failure>,
        before: &ItemStart,
    ) -> Result<ItemOutcome, AgentError> {
        let scope = Scope {
            phase: Phase::Implement,
            item: item.index,
            attempt,
        };
        let asks_for = state.asks_for.clone();
        // The no-change form only where the engine may accept it.
        let answer = AnswerShape::ItemResult {
            no_change: item.targets.is_empty() && asks_for.is_none(),
        };
        let system = self
            .item_prompt(state, scope, item, total, previous, before)
            .await?;
        let task = format!(
            "Do plan item {}: {} — {}",
            item.index, item.label, item.description
        );
        let end = self
            .tool_loop(
                state,
                LoopSpec {
                    scope,
                    system,
                    task,
                    tools: self
                        .offered(Phase::Implement, catalog::implement_tools())
                        .await?,
                    budget: self.budgets.item_turns,
                    expect: Expect::Work,
                    answer,
                    targets: item.targets.clone(),
                    contracts: item.contracts.clone(),
                    before: before.files.clone(),
                },
            )
            .await?;
        let attempt = Attempt {
            item,
            number: attempt,
            previous,
            before,
        };
        match end {
            LoopEnd::Answer { text, calls } => {
                self.item_answered(state, &attempt, &text, calls).await
            }
            LoopEnd::Refused(reason) => Ok(Err(Failure {
                code: Some(ErrorCode::ItemNotDone),
                reason,
                retry: true,
            })),
            LoopEnd::BudgetExhausted => Ok(Err(Failure {
                code: Some(ErrorCode::BudgetExceeded),
                reason: format!("turn budget of {} exhausted", self.budgets.item_turns),
                retry: true,
            })),
            LoopEnd::LoopDetected(reason) => Ok(Err(Failure {
                code: Some(ErrorCode::AgentLoopDetected),
                reason,
                retry: false,
            })),
            LoopEnd::Unusable(error) => Ok(Err(Failure {
                code: Some(error.code()),
                reason: error.to_string(),
                retry: true,
            })),
        }
    }

    /// The journaled system prompt of an attempt at `item`.
    async fn item_prompt(
        &self,
        state: &RpiState,
        scope: Scope,
        item: &PlanItem,
        total: u32,
        previous: Option<&Failure>,
        before: &ItemStart,
    ) -> Result<String, AgentError> {
        let request = self.job.message.clone();
        let research = state.research.clone().unwrap_or_default();
        let plan_md = state.plan_md.clone().unwrap_or_default();
        let previous_failure = previous.map(|failure| failure.reason.clone());
        let asks_for = state.asks_for.clone();
        let item = item.clone();
        let compact = self.compact();
        let sources = before.sources.clone();
        self.system_prompt(scope, move |manifest| {
            prompts::implement(&ItemContext {
                item: &item,
                total,
                request: &request,
                research: &research,
                plan_md: &plan_md,
                manifest,
                previous_failure: previous_failure.as_deref(),
                asks_for: asks_for.as_deref(),
                compact,
                sources: sources.as_deref(),
            })
        })
        .await
    }

    /// How an attempt whose tool loop ended with a final answer ends: the answer judged
    /// ([`answered_item`]), then the item's contracts checked.
    async fn item_answered(
        &self,
        state: &RpiState,
        attempt: &Attempt<'_>,
        text: &str,
        calls: Calls,
    ) -> Result<ItemOutcome, AgentError> {
        let item = attempt.item;
        let files = self.host.files().await?;
        let changed = changed_paths(&attempt.before.files, &digests(&files));
        let handed_on: Vec<String> = plan::amendments(text, &state.items, state.original_count)
            .items
            .into_iter()
            .flat_map(|amended| amended.targets)
            .collect();
        let answered = Answered {
            text,
            successful_calls: calls.successful,
            rejected_calls: calls.rejected,
            targets: &item.targets,
            changed: &changed,
            asks_for: state.asks_for.as_deref(),
            handed_on: &handed_on,
        };
        let done = match answered_item(&answered, attempt.previous) {
            Ok(done) => done,
            Err(failure) => return Ok(Err(failure)),
        };
        if let Some(failure) = wrote_without_data(&calls, attempt.previous) {
            return Ok(Err(failure));
        }
        let prefix = format!(
            "{}.contract.{}.{}",
            self.job.job_id, item.index, attempt.number
        );
        let copy_told_before = told_before(attempt.previous, LEFT_A_COPY);
        if let Some((copy, original)) = self
            .copy_left(&attempt.before.files, &files, &prefix)
            .await?
            && let Some(failure) = copy_kept(&copy, &original, copy_told_before, &done)
        {
            return Ok(Err(failure));
        }
        let files: Vec<String> = attempt.before.files.keys().cloned().collect();
        let start = ItemBefore {
            files: &files,
            edits: &attempt.before.edits,
            sources: &Sources::of(&files),
        };
        let earlier = earlier_contracts(item, &state.items, &changed);
        let checked = self
            .check_contracts(&item.contracts, &earlier, &prefix, &changed, &start)
            .await?;
        Ok(match checked.reason() {
            Some(reason) => Err(contract_broken(
                reason,
                checked.uncheckable,
                attempt.previous,
            )),
            None => Ok(Done {
                wrote: calls.writes > 0,
                ..done
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
            resample: false,
            phase: "summary".into(),
            item_index: None,
            messages: vec![
                ChatMessage::system(system),
                ChatMessage::user(self.job.message.clone()),
            ],
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
            answer: crate::answer::AnswerShape::Text,
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
        let mut summary = format!(
            "{}\n\n{}",
            response.content.trim_end(),
            prompts::draft_changes(&changes)
        );
        let unnamed = prompts::unnamed_changes(&state.items);
        if !unnamed.is_empty() {
            summary.push_str(&format!("\n{unnamed}"));
        }
        state.summary = Some(summary);
        state.phase = Phase::Done;
        self.save(state).await
    }

    /// Saves the state at a phase or item boundary, its totals settled.
    pub(super) async fn save(&self, state: &mut RpiState) -> Result<(), AgentError> {
        state.settle();
        self.host.save(state).await.map_err(AgentError::Job)
    }
}
