//! Workflows: a job's tool calls given by the user instead of a model (`atelier run`, batch
//! children). Each step is a plan item; the steps run in order under the same rules as an
//! agent's calls — journaled results, approvals, idempotent draft writes — and the first
//! failing step ends the job with its own error code (the steps after it stay pending).

use atelier_messages::job::{EventKind, ItemStatus, Phase, PlanItem};
use atelier_messages::workflow::WorkflowStep;
use atelier_messages::{ErrorBody, ErrorCode, journal};
use serde_json::Value;

use super::steps::{Outcome, approval_refusal, cut, render};
use super::types::{AgentHost, RpiState};
use crate::AgentError;
use crate::catalog::{self, ToolSpec};
use crate::plan;

/// Characters of a read step's output the summary holds (the full output stays in the
/// journal and in the job's `tool_io` events).
pub const SUMMARY_OUTPUT_CHARS: usize = 16_000;

/// Runs the workflow's steps from the first one not done, saving after every step. Every
/// state saved here follows from the steps and their journaled results (a replay recomputes
/// it), so none costs a flush of its own: each is made durable by the journal entry or the
/// job's end that comes after it.
pub async fn run_workflow(
    job_id: &str,
    steps: &[WorkflowStep],
    state: &mut RpiState,
    host: &dyn AgentHost,
) -> Result<(), AgentError> {
    if state.items.is_empty() {
        start(steps, state);
        host.save_rebuildable(state).await?;
        host.emit(EventKind::PhaseStarted {
            phase: Phase::Implement,
        });
    }
    let total = u32::try_from(steps.len()).unwrap_or(u32::MAX);
    let mut outputs = Vec::new();
    for (position, step) in steps.iter().enumerate() {
        let index = u32::try_from(position + 1).unwrap_or(u32::MAX);
        let call_id = format!("{job_id}.w{index}");
        let spec = spec_of(step)?;
        let outcome = match host.recall(&journal::tool_result(&call_id)).await? {
            Some(journaled) => decode(&journaled)?,
            None => {
                host.emit(EventKind::ItemStarted {
                    index,
                    total,
                    label: step.label(),
                    attempt: 1,
                });
                let outcome = run_step(host, &call_id, &spec, step.args.clone()).await?;
                let value = serde_json::to_value(&outcome)
                    .map_err(|error| ErrorBody::new(ErrorCode::Internal, error.to_string()))?;
                host.record(&journal::tool_result(&call_id), &value).await?;
                emit_io(host, &call_id, &spec, &step.args, &outcome, index);
                outcome
            }
        };
        let failed = finish_item(state, position, &outcome);
        if failed.is_none() {
            outputs.push((index, spec.is_read_only(), outcome));
        }
        host.save_rebuildable(state).await?;
        host.emit(EventKind::ItemFinished {
            index,
            status: state.items[position].status,
        });
        if let Some(error) = failed {
            state.summary = Some(failure_summary(index, step, &error));
            host.save_rebuildable(state).await?;
            return Err(AgentError::Job(ErrorBody::new(
                error.code,
                format!(
                    "step {index} of {total} (`{}`) failed: {}",
                    step.tool, error.message
                ),
            )));
        }
    }
    state.phase = Phase::Done;
    state.summary = Some(summary(steps, &outputs));
    host.save_rebuildable(state).await?;
    host.emit(EventKind::PhaseCompleted {
        phase: Phase::Implement,
    });
    Ok(())
}

/// The plan: one item per step.
fn start(steps: &[WorkflowStep], state: &mut RpiState) {
    state.phase = Phase::Implement;
    state.items = steps
        .iter()
        .enumerate()
        .map(|(position, step)| {
            PlanItem::pending(
                u32::try_from(position + 1).unwrap_or(u32::MAX),
                step.label(),
                String::new(),
            )
        })
        .collect();
    state.original_count = state.items.len();
    state.plan_md = Some(plan::render(&state.items, state.original_count));
}

fn spec_of(step: &WorkflowStep) -> Result<ToolSpec, AgentError> {
    let tool = step.tool_name()?;
    catalog::find(tool.as_str()).ok_or_else(|| {
        AgentError::Job(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!("`{tool}` is not in the tool catalog"),
        ))
    })
}

/// Runs one step's call: the approval first (per the job's policy), then the pool.
async fn run_step(
    host: &dyn AgentHost,
    call_id: &str,
    spec: &ToolSpec,
    args: Value,
) -> Result<Outcome, AgentError> {
    host.checkpoint().await?;
    if let Some(rejected) = approval_refusal(host, call_id, spec, &args).await? {
        return Ok(Outcome::Error(rejected));
    }
    let path = args.get("path").and_then(Value::as_str).map(str::to_string);
    host.emit(EventKind::ToolExecuting {
        call_id: call_id.to_string(),
        tool: spec.name.to_string(),
        path,
    });
    match host.call_tool(call_id, spec, args).await {
        Ok(output) => Ok(Outcome::Ok(output)),
        Err(error) if error.code == ErrorCode::UserCanceled => Err(AgentError::Job(error)),
        Err(error) => Ok(Outcome::Error(error)),
    }
}

fn decode(journaled: &Value) -> Result<Outcome, AgentError> {
    serde_json::from_value(journaled.clone()).map_err(|error| {
        AgentError::Job(ErrorBody::new(
            ErrorCode::Internal,
            format!("a journaled workflow step is corrupt: {error}"),
        ))
    })
}

fn emit_io(
    host: &dyn AgentHost,
    call_id: &str,
    spec: &ToolSpec,
    args: &Value,
    outcome: &Outcome,
    index: u32,
) {
    let full = render(outcome);
    host.emit(EventKind::ToolIo {
        call_id: call_id.to_string(),
        tool: spec.name.to_string(),
        pool: Some(spec.name.runs_on().to_string()),
        phase: Some(Phase::Implement),
        item: Some(index),
        arguments: cut(&args.to_string()),
        result: cut(&full),
        result_bytes: full.len() as u64,
    });
}

/// Marks the step's item done or failed; the error when it failed.
fn finish_item(state: &mut RpiState, position: usize, outcome: &Outcome) -> Option<ErrorBody> {
    state.tool_calls += 1;
    let item = &mut state.items[position];
    item.attempts = 1;
    let failed = match outcome {
        Outcome::Ok(_) => {
            item.status = ItemStatus::Done;
            None
        }
        Outcome::Error(error) => {
            item.status = ItemStatus::Failed;
            item.failure = Some(error.message.clone());
            item.failure_code = Some(error.code);
            Some(error.clone())
        }
    };
    state.plan_md = Some(plan::render(&state.items, state.original_count));
    failed
}

/// What the user reads: a line per step, and the output of each read step.
fn summary(steps: &[WorkflowStep], outputs: &[(u32, bool, Outcome)]) -> String {
    let mut text = format!("Ran {} step(s) without a model:\n", steps.len());
    for (index, read_only, outcome) in outputs {
        let label = steps
            .get(*index as usize - 1)
            .map(WorkflowStep::label)
            .unwrap_or_default();
        text.push_str(&format!("{index}. {label}: done\n"));
        if *read_only && let Outcome::Ok(output) = outcome {
            text.push_str(&cut_chars(&pretty(output), SUMMARY_OUTPUT_CHARS));
            text.push('\n');
        }
    }
    text
}

fn failure_summary(index: u32, step: &WorkflowStep, error: &ErrorBody) -> String {
    format!(
        "Step {index} ({}) failed with {}: {}. The steps before it are in the draft; the steps \
         after it did not run.",
        step.label(),
        error.code,
        error.message
    )
}

fn pretty(output: &Value) -> String {
    serde_json::to_string_pretty(output).unwrap_or_else(|_| output.to_string())
}

fn cut_chars(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!("{}\n… (cut at {limit} characters)", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_shows_read_outputs_and_cuts_long_ones() {
        let steps = vec![
            WorkflowStep {
                tool: "table_query".into(),
                args: serde_json::json!({"path": "a.csv"}),
                name: None,
            },
            WorkflowStep {
                tool: "table_export".into(),
                args: serde_json::json!({"path": "a.csv"}),
                name: Some("export".into()),
            },
        ];
        let outputs = vec![
            (1, true, Outcome::Ok(serde_json::json!({"rows": [[3]]}))),
            (
                2,
                false,
                Outcome::Ok(serde_json::json!({"written": "b.csv"})),
            ),
        ];
        let text = summary(&steps, &outputs);
        assert!(text.contains("1. table_query a.csv: done"), "{text}");
        assert!(text.contains("\"rows\""), "{text}");
        assert!(text.contains("2. export: done"), "{text}");
        assert!(!text.contains("written"), "{text}");
        assert_eq!(cut_chars("abcdef", 3), "abc\n… (cut at 3 characters)");
    }
}
