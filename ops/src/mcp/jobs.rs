//! The MCP calls that run as jobs: a writing tool (a one-step workflow, as `atelier run`) and
//! `submit_job` (a message for Atelier's own agent). Each job's id is the call's id (the
//! session, the MCP request id and what the call asks), so a request sent again finds its job
//! instead of starting another, and a request id used again for another call starts its own; the
//! call waits for the job's end, telling the client of its progress (and of an approval it
//! waits for) when the client asked for progress.

use atelier_agents::catalog::ToolSpec;
use atelier_messages::budget::Budget;
use atelier_messages::job::{GetJob, JobState, JobSubmit, JobView};
use atelier_messages::workflow::Workflow;
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use super::{AtelierMcp, invalid, to_value};
use crate::follow;

/// A writing tool as a one-step job on the workbench's draft.
pub(super) async fn write(
    server: &AtelierMcp,
    call_id: &str,
    spec: &ToolSpec,
    workbench: &str,
    args: Value,
    context: &RequestContext<RoleServer>,
) -> Result<Value, ErrorBody> {
    let workflow = Workflow::single(spec.name.as_str(), args);
    workflow.validate()?;
    let submit = JobSubmit {
        message: workflow.describe(),
        workflow: Some(workflow),
        continue_draft: true,
        ..job(call_id, workbench)
    };
    let view = run(server, submit, context).await?;
    Ok(json!({
        "job_id": view.job_id,
        "state": view.state,
        "outcome": view.outcome,
        "summary": view.summary,
    }))
}

/// `submit_job`: a message for Atelier's agent; its summary and outcome.
pub(super) async fn submit_job(
    server: &AtelierMcp,
    call_id: &str,
    workbench: &str,
    args: &Value,
    context: &RequestContext<RoleServer>,
) -> Result<Value, ErrorBody> {
    let Some(message) = args.get("message").and_then(Value::as_str) else {
        return Err(invalid("submit_job needs `message`, the task"));
    };
    let submit = JobSubmit {
        message: message.to_string(),
        model: args
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
        continue_draft: args
            .get("continue_draft")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        budget: budget_of(args)?,
        ..job(call_id, workbench)
    };
    let view = run(server, submit, context).await?;
    to_value(&view)
}

/// `budget_tokens` and `budget_usd`, checked as `atelier submit --budget-*` checks them.
fn budget_of(args: &Value) -> Result<Budget, ErrorBody> {
    let given = |key: &str| args.get(key).filter(|value| !value.is_null());
    let tokens = given("budget_tokens")
        .map(|value| {
            value
                .as_u64()
                .ok_or_else(|| invalid("budget_tokens must be a whole number of tokens"))
        })
        .transpose()?;
    let usd = given("budget_usd")
        .map(|value| {
            value
                .as_f64()
                .ok_or_else(|| invalid("budget_usd must be a number of dollars"))
        })
        .transpose()?;
    Budget::parse(tokens, usd, "budget_")
}

/// A submission for this call, to be completed.
fn job(call_id: &str, workbench: &str) -> JobSubmit {
    JobSubmit::new(call_id.to_string(), workbench.to_string(), String::new())
}

/// Submits (once per id) and waits for the job's end; a job that did not succeed is its error.
async fn run(
    server: &AtelierMcp,
    submit: JobSubmit,
    context: &RequestContext<RoleServer>,
) -> Result<JobView, ErrorBody> {
    crate::client::publish_job(&server.nats, &submit).await?;
    let view = wait(server, &submit.job_id, context).await?;
    if view.state == JobState::Succeeded {
        return Ok(view);
    }
    Err(view.error.unwrap_or_else(|| {
        ErrorBody::new(
            ErrorCode::Internal,
            format!("job {} ended {}", view.job_id, view.state),
        )
    }))
}

/// The job once it ended, telling the client what it does meanwhile; a cancelled call stops
/// waiting, not the job.
async fn wait(
    server: &AtelierMcp,
    job_id: &str,
    context: &RequestContext<RoleServer>,
) -> Result<JobView, ErrorBody> {
    let mut told = String::new();
    let read = || async move {
        let request = GetJob {
            v: PROTOCOL_VERSION,
            job_id: job_id.to_string(),
        };
        server.ask(&request).await
    };
    let seen = |view: JobView| {
        let now = progress_of(&view);
        let changed = now != told;
        if changed {
            told.clone_from(&now);
        }
        async move {
            if changed {
                notify(context, &view, &now).await;
            }
        }
    };
    tokio::select! {
        () = context.ct.cancelled() => Err(ErrorBody::new(
            ErrorCode::UserCanceled,
            format!(
                "the client cancelled the call; job {job_id} goes on (`atelier cancel {job_id}` stops it)"
            ),
        )),
        followed = follow::until_ended(read, follow::POLL, None, seen) => followed?.ok_or_else(|| {
            ErrorBody::new(ErrorCode::Internal, "an unbounded wait ended")
        }),
    }
}

/// What a running job is doing, in a line.
fn progress_of(view: &JobView) -> String {
    if view.state == JobState::AwaitingApproval {
        return format!(
            "job {} waits for approval: `atelier approve {}` (or --reject)",
            view.job_id, view.job_id
        );
    }
    format!(
        "job {}: {}, {} of {} item(s) done",
        view.job_id,
        view.phase,
        view.items_done(),
        view.items.len()
    )
}

async fn notify(context: &RequestContext<RoleServer>, view: &JobView, message: &str) {
    let Some(token) = context.meta.get_progress_token() else {
        return;
    };
    let progress = ProgressNotificationParam::new(token, view.items_done() as f64)
        .with_total(view.items.len().max(1) as f64)
        .with_message(message.to_string());
    if let Err(error) = context.peer.notify_progress(progress).await {
        tracing::debug!(%error, "progress not sent");
    }
}
