//! What each phase asks and how it advances the state.
//!
//! What the engine checks before an item is done: a stated failure fails it; a reason that
//! no change is needed counts only when nothing was done, and never for a request that asks
//! for an artefact ([`crate::request`]); an item that names targets (`→ path`) is done only
//! when the draft changed each of them during the item (its files before its first attempt
//! are journaled, so this holds across attempts and restarts). The files an item changed are
//! recorded on it; its final answer may append plan items ([`plan::amendments`]).

use std::collections::BTreeMap;

use atelier_messages::job::{EventKind, ItemStatus, Phase, PlanItem};
use atelier_messages::outcome::JobOutcome;
use atelier_messages::{ErrorBody, ErrorCode, journal};
use tracing::{Instrument, info_span};

use super::driver::Driver;
use super::prompts::{self, ItemContext, item_failure};
use super::steps::{Expect, LoopEnd, LoopSpec, Scope};
use super::types::RpiState;
use crate::AgentError;
use crate::answer::AnswerShape;
use crate::catalog::{self, ToolSpec};
use crate::plan;
use crate::provider::{ChatMessage, ModelRequest, ToolChoice};

/// How an item ended: done, or failed.
type ItemOutcome = Result<Done, Failure>;

/// A done item: the model's reason when it changed nothing, its final answer (which may
/// append plan items), and whether a write call of its last attempt succeeded.
#[derive(Debug, PartialEq, Eq)]
struct Done {
    no_change: Option<String>,
    answer: String,
    wrote: bool,
}

fn plan_invalid(reason: &str) -> AgentError {
    AgentError::Job(ErrorBody::new(
        ErrorCode::PlanInvalid,
        format!("the model gave no usable plan: {reason}"),
    ))
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

/// How one failed attempt at a plan item ended.
#[derive(Debug)]
struct Failure {
    /// The stable code, when the failure has one (a model's own `ITEM_FAILED` has none).
    code: Option<ErrorCode>,
    reason: String,
    retry: bool,
}

/// What an attempt's final answer is judged with.
struct Answered<'a> {
    text: &'a str,
    /// The attempt's successful tool calls.
    successful_calls: u32,
    /// The attempt's calls the user rejected.
    rejected_calls: u32,
    /// The item's targets (`→ path`).
    targets: &'a [String],
    /// The paths the draft changed since the item's first attempt began.
    changed: &'a [String],
    /// Why the request asks for an artefact, when it does.
    asks_for: Option<&'a str>,
}

fn not_done(reason: String) -> Failure {
    Failure {
        code: Some(ErrorCode::ItemNotDone),
        reason,
        retry: true,
    }
}

/// How an item ends on the model's final answer: failed when it says so; failed
/// (`ITEM_NOT_DONE`) when a target was not written during the item, or when it changed
/// nothing and says no change is needed for a request that asks for an artefact; done
/// otherwise, with its reason when it changed nothing. A retry of an item the model itself
/// declared failed cannot be closed as needing no change: that contradicts the failure, and
/// would let a job succeed without its work.
fn answered_item(answered: &Answered<'_>, previous: Option<&Failure>) -> ItemOutcome {
    let text = answered.text;
    if let Some(reason) = item_failure(text) {
        return Err(Failure {
            code: None,
            reason,
            retry: true,
        });
    }
    // The reason that nothing changed counts only when nothing was done.
    let no_change = prompts::no_change(text).filter(|_| answered.successful_calls == 0);
    if let (Some(reason), Some(declared)) = (&no_change, previous)
        && declared.code.is_none()
    {
        return Err(Failure {
            code: Some(ErrorCode::ItemNotDone),
            reason: format!(
                "the previous attempt declared the item failed ({}); this one changed nothing \
                 and answered that no change is needed ({reason})",
                declared.reason
            ),
            retry: false,
        });
    }
    let missing: Vec<&str> = answered
        .targets
        .iter()
        .filter(|target| !answered.changed.contains(target))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        let claim = match &no_change {
            Some(reason) => format!("it answered that no change is needed ({reason})"),
            None => format!("it answered \"{}\"", first_line(text)),
        };
        let wrote = if answered.changed.is_empty() {
            "nothing".to_string()
        } else {
            answered.changed.join(", ")
        };
        return Err(not_done(format!(
            "the item names {} but did not write {} during the item (it changed {wrote}; {claim})",
            answered.targets.join(", "),
            missing.join(", ")
        )));
    }
    // The user's own refusal of a change is a fact the engine saw: then no change stands.
    if let (Some(reason), Some(why)) = (&no_change, answered.asks_for)
        && answered.changed.is_empty()
        && answered.rejected_calls == 0
    {
        return Err(not_done(format!(
            "it answered that no change is needed ({reason}), but the request asks for an \
             artefact ({why}) and the item changed nothing"
        )));
    }
    Ok(Done {
        no_change,
        answer: text.to_string(),
        wrote: false,
    })
}

fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("");
    line.trim().chars().take(120).collect()
}

/// The paths whose digest differs between `before` and `after` (added, modified or deleted),
/// sorted.
fn changed_paths(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<String> {
    JobOutcome::between(before, after).files().to_vec()
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
        let paths: Vec<String> = self
            .host
            .files()
            .await?
            .into_iter()
            .map(|file| file.path)
            .collect();
        state.asks_for = crate::request::classify(&self.job.message, &paths)
            .artefact()
            .map(str::to_string);
        state.requested_files = crate::request::missing_files(&self.job.message, &paths);
        if self.compact() {
            state.unwritten_quotes = crate::request::quoted_additions(&self.job.message);
            state.unreplaced_placeholders = crate::request::named_placeholders(&self.job.message);
        }
        let asks_for = state.asks_for.clone();
        let answer = AnswerShape::Plan {
            no_change: asks_for.is_none(),
            targets: state.requested_files.clone(),
        };
        let end = self
            .single_phase_loop(
                state,
                Phase::Plan,
                |manifest| prompts::plan(&research, manifest, asks_for.as_deref()),
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
        Ok(self
            .host
            .files()
            .await?
            .into_iter()
            .map(|file| (file.path, file.digest))
            .collect())
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
        let before = self.item_files(item.index).await?;
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
        let changed = changed_paths(&before, &self.file_digests().await?);
        Ok((attempt, outcome, changed))
    }

    async fn attempt_item(
        &self,
        state: &mut RpiState,
        item: &PlanItem,
        total: u32,
        attempt: u32,
        previous: Option<&Failure>,
        before: &BTreeMap<String, String>,
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
        let asks_for = state.asks_for.clone();
        // The no-change form only where the engine may accept it.
        let answer = AnswerShape::ItemResult {
            no_change: item.targets.is_empty() && asks_for.is_none(),
        };
        let item_owned = item.clone();
        let compact = self.compact();
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
                    asks_for: asks_for.as_deref(),
                    compact,
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
                    before: before.clone(),
                },
            )
            .await?;
        Ok(match end {
            LoopEnd::Answer {
                text,
                successful_calls,
                write_calls,
                rejected_calls,
            } => {
                let changed = changed_paths(before, &self.file_digests().await?);
                let answered = Answered {
                    text: &text,
                    successful_calls,
                    rejected_calls,
                    targets: &item.targets,
                    changed: &changed,
                    asks_for: state.asks_for.as_deref(),
                };
                answered_item(&answered, previous).map(|done| Done {
                    wrote: write_calls > 0,
                    ..done
                })
            }
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

    /// An answer after `successful_calls`, for an item without targets that changed nothing,
    /// in a job whose request asks only for an answer.
    fn plain(text: &str, successful_calls: u32) -> Answered<'_> {
        Answered {
            text,
            successful_calls,
            rejected_calls: 0,
            targets: &[],
            changed: &[],
            asks_for: None,
        }
    }

    /// The reason an item stayed undone (or `None` when it is done).
    fn no_change_of(outcome: ItemOutcome) -> Option<Option<String>> {
        outcome.ok().map(|done| done.no_change)
    }

    #[test]
    fn a_retry_after_a_declared_failure_cannot_end_as_no_change() {
        // As the 0.5B model answered launch-count: "ITEM_FAILED: Tool not found.", then
        // "NO_CHANGE_NEEDED: Plan item 1: 5 —" on the retry, with no call in either.
        let previous = declared("Tool not found.");
        let outcome = answered_item(
            &plain("NO_CHANGE_NEEDED: Plan item 1: 5 —", 0),
            Some(&previous),
        );
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
            no_change_of(answered_item(
                &plain("NO_CHANGE_NEEDED: already sorted", 0),
                None
            )),
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
            no_change_of(answered_item(
                &plain("NO_CHANGE_NEEDED: count.txt is written", 0),
                Some(&budget)
            )),
            Some(Some("count.txt is written".to_string()))
        );
        // A retry that did the work is done, whatever it adds.
        assert_eq!(
            no_change_of(answered_item(
                &plain("Wrote count.txt. NO_CHANGE_NEEDED: x", 1),
                Some(&previous)
            )),
            Some(None)
        );
        assert!(answered_item(&plain("ITEM_FAILED: no such column", 0), None).is_err());
    }

    fn paths(list: &[&str]) -> Vec<String> {
        list.iter().map(|path| path.to_string()).collect()
    }

    #[test]
    fn an_item_naming_targets_is_done_only_when_it_wrote_each() {
        let targets = paths(&["count.txt", "notes.txt"]);
        let answered = |text, changed| Answered {
            text,
            successful_calls: 1,
            rejected_calls: 0,
            targets: &targets,
            changed,
            asks_for: None,
        };
        let only_notes = paths(&["notes.txt"]);
        let failure = answered_item(&answered("Wrote count.txt.", &only_notes), None)
            .expect_err("count.txt was not written");
        assert_eq!(failure.code, Some(ErrorCode::ItemNotDone));
        assert!(failure.retry);
        assert!(
            failure.reason.contains("did not write count.txt")
                && failure.reason.contains("it changed notes.txt"),
            "{}",
            failure.reason
        );
        let nothing = answered_item(&answered("NO_CHANGE_NEEDED: already there", &[]), None)
            .expect_err("nothing was written");
        assert!(
            nothing.reason.contains("it changed nothing"),
            "{}",
            nothing.reason
        );
        let all = paths(&["count.txt", "extra.md", "notes.txt"]);
        let done = answered_item(&answered("Wrote both.", &all), None).expect("done");
        assert_eq!(done.no_change, None);
    }

    #[test]
    fn no_change_is_refused_for_a_request_that_asks_for_an_artefact() {
        let why = "it names count.txt, which the workbench does not have";
        let answered = |changed, rejected_calls| Answered {
            text: "NO_CHANGE_NEEDED: the research answers it",
            successful_calls: 0,
            rejected_calls,
            targets: &[],
            changed,
            asks_for: Some(why),
        };
        let failure = answered_item(&answered(&[], 0), None).expect_err("refused");
        assert_eq!(failure.code, Some(ErrorCode::ItemNotDone));
        assert!(failure.retry, "the retry is told why");
        assert!(failure.reason.contains(why), "{}", failure.reason);
        // An earlier attempt of the item wrote the file: the retry may say so.
        let written = paths(&["count.txt"]);
        assert!(answered_item(&answered(&written, 0), None).is_ok());
        // The user rejected the change the item tried: no change stands, as the user's.
        assert!(answered_item(&answered(&[], 1), None).is_ok());
    }

    #[test]
    fn changed_paths_are_added_modified_and_deleted_ones() {
        let files = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(p, d)| (p.to_string(), d.to_string()))
                .collect()
        };
        let before = files(&[("a.csv", "1"), ("b.txt", "2"), ("gone.bin", "3")]);
        let after = files(&[("a.csv", "1"), ("b.txt", "9"), ("new.txt", "4")]);
        assert_eq!(
            changed_paths(&before, &after),
            ["b.txt", "gone.bin", "new.txt"]
        );
        assert!(changed_paths(&before, &before).is_empty());
    }
}
