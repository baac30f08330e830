//! Research → Plan → Implement → Summary, independent of transport.
//!
//! The driver owns the phase logic and the agent loop; an [`AgentHost`] supplies tool
//! execution, the journal, checkpoints, approvals and events.
//!
//! Durability: every model answer and every tool result is recorded in the host's journal
//! (which makes it durable) under a key that names its exact position — phase, plan item,
//! attempt, turn, call — before the driver moves on. A restarted driver walks the same
//! positions and takes journaled answers instead of asking again, so it continues from the
//! exact turn inside the exact plan item. The phase/item state is also saved after every step.
//!
//! # Layout
//! - this file: the module list, re-exports and [`run`].
//! - `types`: the public types ([`RpiState`], [`Budgets`], [`JobInput`] with its
//!   [`WorkbenchContext`], [`AgentHost`]).
//! - `driver`: the driver of one run, which `phases` and `steps` extend.
//! - `phases`: what each phase asks and how it advances the state.
//! - `plan_review`: a plan's contracts checked before it is accepted (told to the model once).
//! - `item_end`: how an attempt at an item ends on its final answer (done, or failed).
//! - `contracts`: a done item's targets checked against their contracts.
//! - `copies`: a copy an item left beside the file it found (a move that kept the original).
//! - `steps`: journaled model turns and tool calls, budgets.
//! - `recall`: large results as receipts, and the slices `recall_tool_result` reads back.
//! - `loop_detector`: counting repeated tool calls.
//! - `grounding`: with a compact prompt, numbers written into text files must have been shown.
//! - `filters`: with a compact prompt, the values a query filters on must have been shown.
//! - `form`: the form a request gives the text it asks for (just the number, one per line).
//! - `quotes`: with a compact prompt, the texts a request quotes to be added must be written.
//! - `prompts`: the system prompts and the item-failed marker.
//! - `workflow`: tool calls given by the user instead of a model ([`run_workflow`]).

mod contracts;
mod copies;
mod driver;
mod filters;
mod form;
mod grounding;
mod item_end;
mod loop_detector;
mod phases;
mod plan_review;
mod prompts;
mod quotes;
mod recall;
mod steps;
mod types;
mod workflow;

use atelier_messages::job::{EventKind, ItemStatus, Phase};
use atelier_messages::{ErrorBody, ErrorCode};
use tracing::{Instrument, info_span};

use crate::AgentError;
use crate::provider::ModelProvider;
use driver::Driver;

pub use types::{
    AgentHost, Budgets, FileMapText, JobInput, PriorMessage, RpiState, SkillText, Totals,
    WorkbenchContext,
};
pub use workflow::{SUMMARY_OUTPUT_CHARS, run_workflow};

/// Runs the job from `state.phase` to the end, saving after every step. A run that ends with
/// an error saves its totals too (turns, tool calls and tokens of the unfinished phase and of
/// a failed turn's requests), so the job shows what it used.
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
    state.restore_settled();
    while state.phase != Phase::Done {
        let phase = state.phase;
        let span = info_span!("phase", job_id = %job.job_id, phase = %phase);
        host.emit(EventKind::PhaseStarted { phase });
        if let Err(error) = driver.run_phase(phase, state).instrument(span).await {
            save_totals(host, state).await;
            return Err(error);
        }
        host.emit(EventKind::PhaseCompleted { phase });
    }
    match failed_items(state)
        .or_else(|| unchanged_artefact(state))
        .or_else(|| unwritten_requested_files(state))
        .or_else(|| quotes::unwritten(state))
    {
        Some(error) => Err(AgentError::Job(error)),
        None => Ok(()),
    }
}

/// `ITEM_NOT_DONE` when the request asks for an artefact (`state.asks_for`) and no plan item
/// changed a file nor wrote one: every item said it was done, yet the job did not do what was
/// asked. (A file written again with the content it had changes nothing, but was written.) An
/// item's no-change reason stands for such a request only when the engine saw why (the user
/// rejected the item's change), so a job with one is not refused here.
fn unchanged_artefact(state: &RpiState) -> Option<ErrorBody> {
    let why = state.asks_for.as_deref()?;
    if state
        .items
        .iter()
        .any(|item| !item.changed.is_empty() || item.wrote || item.no_change.is_some())
    {
        return None;
    }
    Some(ErrorBody::new(
        ErrorCode::ItemNotDone,
        format!(
            "the request asks for an artefact ({why}), but none of the {} plan items changed a \
             file; the job did not do what was asked",
            state.items.len()
        ),
    ))
}

/// `ITEM_NOT_DONE` when a file the request names, which the workbench did not have, was
/// written by no plan item: the job changed something, but not what was asked for.
fn unwritten_requested_files(state: &RpiState) -> Option<ErrorBody> {
    // The user's own rejection of an item's change lets its reason stand (as above).
    if state.items.iter().any(|item| item.no_change.is_some()) {
        return None;
    }
    let unwritten: Vec<&str> = state
        .requested_files
        .iter()
        .filter(|file| {
            !state
                .items
                .iter()
                .flat_map(|item| &item.changed)
                .any(|path| crate::plan::same_file(path, file))
        })
        .map(String::as_str)
        .collect();
    if unwritten.is_empty() {
        return None;
    }
    let changed: Vec<&str> = state
        .items
        .iter()
        .flat_map(|item| &item.changed)
        .map(String::as_str)
        .collect();
    let changed = if changed.is_empty() {
        "nothing".to_string()
    } else {
        changed.join(", ")
    };
    Some(ErrorBody::new(
        ErrorCode::ItemNotDone,
        format!(
            "the request names {}, which no plan item wrote (the items changed {changed}); the \
             job did not do what was asked",
            unwritten.join(", ")
        ),
    ))
}

/// Saves the totals of a run that ended early; the run's own error is what the job reports,
/// so a failure to save is only logged.
async fn save_totals(host: &dyn AgentHost, state: &RpiState) {
    if let Err(error) = host.save(state).await {
        tracing::warn!(code = %error.code, reason = %error.message, "could not save the totals of a failed run");
    }
}

/// `ITEMS_FAILED` when any plan item failed: a job whose work was not all done does not
/// succeed, though it ran to its end (the draft holds what was done).
fn failed_items(state: &RpiState) -> Option<ErrorBody> {
    let failed: Vec<String> = state
        .items
        .iter()
        .filter(|item| item.status == ItemStatus::Failed)
        .map(|item| {
            let code = item
                .failure_code
                .map(|code| format!("{code}: "))
                .unwrap_or_default();
            let reason = item.failure.as_deref().unwrap_or("failed");
            format!("{}. {} ({code}{reason})", item.index, item.label)
        })
        .collect();
    if failed.is_empty() {
        return None;
    }
    Some(ErrorBody::new(
        ErrorCode::ItemsFailed,
        format!(
            "{} of {} plan items failed: {}; the draft holds what the others did",
            failed.len(),
            state.items.len(),
            failed.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(changed: &[&str]) -> RpiState {
        let mut items = crate::plan::parse("- [ ] 1. Write — the count");
        items[0].status = ItemStatus::Done;
        items[0].changed = changed.iter().map(|path| path.to_string()).collect();
        RpiState {
            asks_for: Some("it names count.txt, which the workbench does not have".into()),
            requested_files: vec!["count.txt".into()],
            items,
            ..RpiState::default()
        }
    }

    #[test]
    fn a_job_succeeds_only_when_the_files_its_request_names_were_written() {
        let wrong = unwritten_requested_files(&state(&["notes.txt"])).expect("not done");
        assert_eq!(wrong.code, ErrorCode::ItemNotDone);
        assert!(
            wrong
                .message
                .contains("names count.txt, which no plan item wrote")
                && wrong.message.contains("changed notes.txt"),
            "{}",
            wrong.message
        );
        assert!(unwritten_requested_files(&state(&["out/count.txt"])).is_none());
        // The user's own rejection of the change lets its reason stand.
        let mut rejected = state(&[]);
        rejected.items[0].no_change = Some("the user rejected the write".into());
        assert!(unwritten_requested_files(&rejected).is_none());
    }
}
