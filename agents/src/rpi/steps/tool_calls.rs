//! One tool call of a tool loop: checked against the phase's tools, approved when its action
//! class asks for it, run on a worker or answered locally (`recall_tool_result`), and journaled
//! as an [`Outcome`] that a resumed run takes instead of calling again.

use std::collections::BTreeMap;
use std::time::Instant;

use atelier_messages::approval::ApprovalMode;
use atelier_messages::job::{EventKind, PendingApproval};
use atelier_messages::store::ManifestEntry;
use atelier_messages::tool::ToolName;
use atelier_messages::{ErrorBody, ErrorCode, journal, now_ms};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Scope, budget_error, cut};
use crate::AgentError;
use crate::catalog::{self, Classified, ToolSpec};
use crate::provider::ToolCall;
use crate::rpi::driver::Driver;
use crate::rpi::recall::{self, RecallRequest};
use crate::rpi::types::{AgentHost, RpiState};

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
    let files = files_before_the_job(host).await?;
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

/// The workbench's files that were there when the job started (their paths in the journal's
/// [`journal::job_files`]) as they are now: what a call may not lose without asking. Without
/// that journal entry (a host that keeps none), every current file.
async fn files_before_the_job(host: &dyn AgentHost) -> Result<Vec<ManifestEntry>, AgentError> {
    let files = host.files().await?;
    let Some(at_start) = host.recall(&journal::job_files()).await? else {
        return Ok(files);
    };
    let Ok(at_start) = serde_json::from_value::<BTreeMap<String, String>>(at_start) else {
        return Ok(files);
    };
    Ok(files
        .into_iter()
        .filter(|file| at_start.contains_key(&file.path))
        .collect())
}

impl Driver<'_> {
    /// Runs (or recalls) one tool call; returns the text the model sees, whether the call
    /// succeeded, and whether the user rejected it (`APPROVAL_REJECTED`). Infrastructure
    /// failures after the host's retries end the attempt (`Err`).
    pub(super) async fn execute(
        &self,
        state: &mut RpiState,
        scope: Scope,
        call_id: &str,
        call: &ToolCall,
        allowed: &[ToolSpec],
    ) -> Result<(String, bool, bool), AgentError> {
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
            return Ok((error_text(&error), false, false));
        };
        let args = match parse_arguments(&call.arguments) {
            Ok(args) => args,
            Err(error) => return Ok((error_text(&error), false, false)),
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
        let rejected =
            matches!(&outcome, Outcome::Error(error) if error.code == ErrorCode::ApprovalRejected);
        let shown = recall::present(
            call_id,
            spec.name,
            render(&outcome),
            self.budgets.receipt_over_chars,
        );
        Ok((shown, succeeded, rejected))
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

fn error_text(error: &ErrorBody) -> String {
    serde_json::json!({"error": {"code": error.code, "message": error.message}}).to_string()
}

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
}
