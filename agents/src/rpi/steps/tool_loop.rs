//! The tool loop of a phase or an item's attempt: model turns and the tool calls they ask
//! for, until the phase accepts a final answer, the model's answers stay refused, a call
//! repeats past the hard stop, or the turn budget runs out.
//!
//! Each turn is built from what the loop did so far ([`Stage`]); an answer without calls is
//! judged ([`judge`]) and a plan's contracts reviewed once; each call is run (or refused by a
//! compact profile's rule, [`refusal`]) and its result shown to the model.

use std::collections::HashSet;

use atelier_messages::job::EventKind;
use atelier_messages::tool::{Pool, ToolName};

use super::changes::{self, Changes};
use super::judge::{Expect, Judging, Verdict, judge};
use super::refusal::{self, Shown};
use super::stage::Stage;
use super::{
    Calls, ITEM_LOOP, LoopEnd, LoopSpec, REPEATED_WRITE, exact, is_unusable_output, named_paths,
};
use crate::AgentError;
use crate::provider::{ChatMessage, ModelRequest, ToolCall};
use crate::rpi::driver::Driver;
use crate::rpi::form::{self, FormRule};
use crate::rpi::loop_detector::LoopDetector;
use crate::rpi::prompts;
use crate::rpi::quotes;
use crate::rpi::types::RpiState;

/// What a loop runs with, fixed for the loop: its spec (its system prompt and starting files
/// taken out) and what the request and the maps give.
struct Fixed {
    spec: LoopSpec,
    /// The forms the request states, and the pattern they give a written text.
    form: Vec<FormRule>,
    content_pattern: Option<String>,
    /// The texts the request quotes.
    quoted: Vec<String>,
    /// The workbench's maps as shown: with the request, what a written number may come from.
    maps: Vec<String>,
    /// The files when the item started: what its reading turns may read.
    sources: Vec<String>,
    compact: bool,
}

/// What a loop did so far.
#[derive(Default)]
struct Progress {
    calls: Calls,
    /// How often the model was told its answer was not acceptable.
    nudges: u32,
    /// How often a plan's no-change answer was refused.
    refusals: u32,
    /// The plan's contracts were reviewed and the model told what was wrong.
    reviewed: bool,
    /// The successful writes, exactly as called.
    writes_done: HashSet<(String, String)>,
    /// The results of the tools the loop ran (not the engine's refusals).
    results_seen: Vec<String>,
    /// The results of the calls that failed, as shown.
    errors_seen: Vec<String>,
    /// The model was shown what its targets hold.
    reported: bool,
    /// A write was refused (made-up numbers, a copied row) since the last successful read:
    /// the item reads again.
    back_to_reading: bool,
    /// The last turn had a call that failed, was refused or repeated one, or its answer was
    /// refused.
    resample: bool,
}

impl Progress {
    fn answer(&self, text: String) -> LoopEnd {
        LoopEnd::Answer {
            text,
            calls: self.calls,
        }
    }
}

/// A call the loop ran: its result, whether it succeeded or the user rejected it, whether its
/// tool writes, and how often the model made exactly this call.
struct Ran {
    result: String,
    succeeded: bool,
    rejected: bool,
    writes: bool,
    repeats: u32,
}

/// A loop's moving parts: the conversation, the repeat counter, the files' changes.
struct Running<'a> {
    messages: Vec<ChatMessage>,
    detector: LoopDetector,
    changes: Changes<'a>,
    progress: Progress,
}

impl Driver<'_> {
    pub(in crate::rpi) async fn tool_loop(
        &self,
        state: &mut RpiState,
        spec: LoopSpec,
    ) -> Result<LoopEnd, AgentError> {
        let mut spec = spec;
        let system = std::mem::take(&mut spec.system);
        let before = std::mem::take(&mut spec.before);
        let form = form::rules(&self.job.message);
        let content_pattern =
            form::pattern(&form::with_contracts(&form, &spec.contracts, &spec.targets));
        let changes = Changes::new(&before);
        let task = spec.task.clone();
        let fixed = Fixed {
            spec,
            form,
            content_pattern,
            quoted: crate::request::quoted_texts(&self.job.message),
            maps: (self.job.context.maps.iter())
                .map(|map| prompts::compact_map(&map.map))
                .collect(),
            sources: changes.sources(),
            compact: self.compact(),
        };
        let mut running = Running {
            messages: vec![ChatMessage::system(system), ChatMessage::user(task)],
            detector: LoopDetector::new(&self.budgets),
            changes,
            progress: Progress::default(),
        };
        let (scope, budget) = (fixed.spec.scope, fixed.spec.budget);
        for turn in 0..budget {
            let request = self.turn_request(state, &fixed, turn, &mut running);
            let response = match self
                .model_turn(state, scope, turn, &request, &|_: &str| {})
                .await
            {
                Ok(response) => response,
                Err(error) if is_unusable_output(&error) => return Ok(LoopEnd::Unusable(error)),
                Err(error) => return Err(error),
            };
            let end = if response.tool_calls.is_empty() {
                self.answered(state, &fixed, turn, response.content, &mut running)
                    .await?
            } else {
                running.messages.push(ChatMessage::assistant(
                    response.content.clone(),
                    response.tool_calls.clone(),
                ));
                running.progress.resample = false;
                self.run_calls(
                    state,
                    &fixed,
                    turn,
                    &request,
                    &response.tool_calls,
                    &mut running,
                )
                .await?
            };
            if let Some(end) = end {
                return Ok(end);
            }
        }
        Ok(LoopEnd::BudgetExhausted)
    }

    /// The request of turn `turn`: the tools its stage offers, and, with a compact prompt once
    /// the targets are written, what they hold (told once).
    fn turn_request(
        &self,
        state: &RpiState,
        fixed: &Fixed,
        turn: u32,
        running: &mut Running<'_>,
    ) -> ModelRequest {
        let progress = &running.progress;
        let stage = Stage {
            phase: fixed.spec.scope.phase,
            turn,
            compact: fixed.compact,
            reads: progress.calls.reads,
            writes: progress.calls.writes,
            refused: progress.back_to_reading,
            targets: &fixed.spec.targets,
            sources: &fixed.sources,
            request: &self.job.message,
            unwritten_quotes: &state.unwritten_quotes,
            targets_written: running.changes.cover(&fixed.spec.targets),
            content_pattern: fixed.content_pattern.as_deref(),
        };
        if fixed.compact && stage.targets_written && !progress.reported {
            let report = running.changes.report(&fixed.spec.targets);
            running.progress.reported = true;
            running.messages.push(ChatMessage::user(report));
        }
        let (offered, choice) = stage.tools(&fixed.spec.tools);
        ModelRequest {
            phase: fixed.spec.scope.phase.as_str().to_string(),
            item_index: fixed.spec.scope.item_index(),
            messages: running.messages.clone(),
            tools: offered,
            tool_choice: choice,
            answer: fixed.spec.answer.clone(),
            // A capable model is not sampled: it reads a refusal and changes its call.
            resample: fixed.compact && running.progress.resample,
        }
    }

    /// An answer without tool calls, judged: the loop's end, or `None` when the model was
    /// told what is missing and answers again.
    async fn answered(
        &self,
        state: &RpiState,
        fixed: &Fixed,
        turn: u32,
        content: String,
        running: &mut Running<'_>,
    ) -> Result<Option<LoopEnd>, AgentError> {
        let progress = &mut running.progress;
        let judging = Judging {
            successful_calls: progress.calls.successful,
            nudges: progress.nudges,
            refusals: progress.refusals,
            asks_for: state.asks_for.as_deref(),
            requested_files: &state.requested_files,
        };
        let told = match judge(fixed.spec.expect, &content, judging) {
            Verdict::Accept => {
                // A plan's contracts are reviewed once, while a turn is left for the corrected
                // plan.
                let review = fixed.spec.expect == Expect::Checklist
                    && !progress.reviewed
                    && turn + 1 < fixed.spec.budget;
                let review = match review {
                    true => self.review_plan(&content, turn).await?,
                    false => None,
                };
                let Some(told) = review else {
                    return Ok(Some(progress.answer(content)));
                };
                progress.reviewed = true;
                told
            }
            Verdict::Refuse(reason) => return Ok(Some(LoopEnd::Refused(reason))),
            Verdict::Nudge(nudge) => {
                progress.nudges += 1;
                nudge
            }
            Verdict::RefuseNoChange(told) => {
                progress.refusals += 1;
                told
            }
        };
        progress.resample = true;
        running
            .messages
            .push(ChatMessage::assistant(content, Vec::new()));
        running.messages.push(ChatMessage::user(told));
        Ok(None)
    }

    /// Runs a turn's calls in order, each result shown to the model: the loop's end when a
    /// write repeats one already made or a call repeats past the hard stop, else `None`.
    async fn run_calls(
        &self,
        state: &mut RpiState,
        fixed: &Fixed,
        turn: u32,
        request: &ModelRequest,
        calls: &[ToolCall],
        running: &mut Running<'_>,
    ) -> Result<Option<LoopEnd>, AgentError> {
        let facts: Vec<&str> = std::iter::once(self.job.message.as_str())
            .chain(fixed.maps.iter().map(String::as_str))
            .collect();
        for (index, call) in calls.iter().enumerate() {
            let writes = fixed
                .spec
                .tools
                .iter()
                .any(|spec| spec.name.as_str() == call.name && !spec.is_read_only());
            let progress = &mut running.progress;
            if writes && progress.writes_done.contains(&exact(call)) {
                // The same write again changes nothing: the work is over (a small model
                // repeats its last write instead of answering). Its targets are still checked
                // as for any answer.
                return Ok(Some(progress.answer(REPEATED_WRITE.to_string())));
            }
            let repeats = running.detector.observe(call);
            progress.resample |= repeats >= 2;
            if repeats >= self.budgets.loop_hard_stop {
                return Ok(Some(LoopEnd::LoopDetected(format!(
                    "{ITEM_LOOP}: `{}` was called {repeats} times with the same arguments",
                    call.name
                ))));
            }
            let shown = Shown {
                offered: &request.tools,
                facts: &facts,
                results: &progress.results_seen,
                task: &[self.job.message.as_str(), fixed.spec.task.as_str()],
                form: &fixed.form,
                quoted: &fixed.quoted,
                contracts: &fixed.spec.contracts,
            };
            let refusal = refusal::repeats_error(call, &progress.errors_seen)
                .or_else(|| fixed.compact.then(|| refusal::of(call, &shown)).flatten());
            if let Some(refusal) = refusal {
                progress.back_to_reading |= refusal.back_to_reading;
                progress.resample = true;
                running
                    .messages
                    .push(ChatMessage::tool_result(call.id.clone(), refusal.told));
                continue;
            }
            let call_id = fixed.spec.scope.call_id(&self.job.job_id, turn, index);
            let (result, succeeded, rejected) = self
                .execute(state, fixed.spec.scope, &call_id, call, &fixed.spec.tools)
                .await?;
            let ran = Ran {
                result,
                succeeded,
                rejected,
                writes,
                repeats,
            };
            let result = self.after_call(state, fixed, call, ran, running);
            running
                .messages
                .push(ChatMessage::tool_result(call.id.clone(), result));
        }
        Ok(None)
    }

    /// Counts a run call and what it changed; its result as the model is shown it (with a
    /// note when a compact write changed nothing, and a warning on repeats).
    fn after_call(
        &self,
        state: &mut RpiState,
        fixed: &Fixed,
        call: &ToolCall,
        ran: Ran,
        running: &mut Running<'_>,
    ) -> String {
        let Ran {
            mut result,
            succeeded,
            rejected,
            writes,
            repeats,
        } = ran;
        let progress = &mut running.progress;
        progress.results_seen.push(result.clone());
        if !succeeded {
            progress.errors_seen.push(result.clone());
        }
        let unchanged = (succeeded && writes)
            .then(|| running.changes.record(call, &named_paths(call), &result))
            .flatten();
        // With a compact prompt a write that changed nothing is no work done.
        let wrote = succeeded && writes && !(fixed.compact && unchanged.is_some());
        if let Some(path) = unchanged.filter(|_| fixed.compact) {
            result.push_str(&changes::unchanged_note(&path));
        }
        progress.calls.successful += u32::from(succeeded);
        progress.resample |= !succeeded;
        progress.calls.rejected += u32::from(rejected);
        progress.calls.writes += u32::from(wrote);
        progress.calls.reads += u32::from(succeeded && !writes);
        let query =
            !writes && ToolName::parse(&call.name).and_then(ToolName::pool) == Some(Pool::Tabular);
        progress.calls.queries += u32::from(query && succeeded);
        progress.calls.failed_queries += u32::from(query && !succeeded);
        progress.back_to_reading &= !succeeded || writes;
        if succeeded && writes {
            progress.writes_done.insert(exact(call));
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
        result
    }
}
