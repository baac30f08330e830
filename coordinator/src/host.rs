//! What a running job sees of the world, as the RPI driver's [`AgentHost`]: tool calls to worker
//! pools over NATS, files and draft writes through the in-process DraftStore, the journal and
//! RPI checkpoints in sled, cancel and approval signals from the job's orchestrator actor.
//!
//! A tool call goes one way: the orchestrator sends the request (with the files the agent sees)
//! to the pool and the worker answers with its output and, for write tools, the draft changes;
//! the orchestrator applies those to the draft here, once per call id and durably, recording
//! the output with them. A call re-sent after its changes were applied gets the recorded output
//! instead of running again.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use atelier_agents::catalog::ToolSpec;
use atelier_agents::rpi::{AgentHost, RpiState};
use atelier_messages::approval::{ActionClass, ApprovalDecision, ApprovalMode};
use atelier_messages::job::{EventKind, PendingApproval};
use atelier_messages::journal::{self, StepKind};
use atelier_messages::store::{DraftDiff, ManifestEntry, View};
use atelier_messages::tool::{ToolOutput, ToolRequest};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use atelier_transport::Policy;
use serde_json::Value;
use tokio::sync::Notify;
use tracing::Instrument;

use crate::draft_store::DraftStoreHandle;
use crate::error::CoordinatorError;
use crate::events::EventSink;
use crate::jobs::{JobRecord, Jobs};
use crate::lifecycle::Transition;
use crate::storage::{Durability, Store};
use atelier_transport::failpoint;

/// How often a job awaiting approval re-reads its journal (a decision also wakes it at once).
const APPROVAL_POLL: Duration = Duration::from_secs(1);

/// Signals from the job's orchestrator actor to its run.
#[derive(Debug, Default)]
pub(crate) struct RunSignals {
    cancelled: AtomicBool,
    /// Woken when an approval decision is recorded (or the job is cancelled).
    decided: Notify,
}

impl RunSignals {
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.decided.notify_waiters();
    }

    pub(crate) fn approval_decided(&self) {
        self.decided.notify_waiters();
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// The keys of a job's journal as its run knows them: those there when it started, and those it
/// wrote since. The run is the only writer of its job's journal but for approval decisions
/// (the control plane's), so a step key it does not know is not journaled and is answered
/// without reading the store; an approval is always read.
#[derive(Debug, Default)]
pub(crate) struct Journaled(Mutex<Known>);

#[derive(Debug, Default)]
struct Known {
    keys: HashSet<String>,
    /// The keys of tool results whose output is recorded with the call's applied draft changes
    /// (durable with them): a replay of such a call is answered from the draft's record without
    /// running it, so its journaled result needs no commit of its own.
    answered_by_draft: HashSet<String>,
}

impl Journaled {
    pub(crate) fn new(keys: HashSet<String>) -> Self {
        Self(Mutex::new(Known {
            keys,
            answered_by_draft: HashSet::new(),
        }))
    }

    fn may_hold(&self, key: &str) -> bool {
        StepKind::of(key) == Some(StepKind::Approval) || self.known().keys.contains(key)
    }

    fn add(&self, key: &str) {
        self.known().keys.insert(key.to_string());
    }

    /// Notes that `call_id`'s output is durable with its applied draft changes: a replay is
    /// answered from there without running the call, so its journaled result is rebuildable.
    fn add_answered_by_draft(&self, call_id: &str) {
        self.known()
            .answered_by_draft
            .insert(journal::tool_result(call_id));
    }

    fn answered_by_draft(&self, key: &str) -> bool {
        self.known().answered_by_draft.contains(key)
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        // A panic while holding it left the sets whole: inserts are their only change.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A run's writes that a replay rebuilds ([`Durability::Stage`]), held until its next
/// committed storage call carries them: the latest workflow state and journal entries such as
/// the files the job started from. Held or written, they are lost in a crash until the next
/// commit; held, they cost no storage call of their own.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    rpi: Option<RpiState>,
    journal: Vec<(String, Value)>,
}

impl Deferred {
    /// Writes what is held (the caller's write that follows commits it); each is a staged
    /// write until then (the crash tests' `after_rebuildable_write` kill point).
    pub(crate) fn write(&self, jobs: &Jobs, job_id: &str) -> Result<(), CoordinatorError> {
        for (key, value) in &self.journal {
            jobs.record(job_id, key, value)?;
            failpoint::hit("after_rebuildable_write");
        }
        if let Some(state) = &self.rpi {
            jobs.save_rpi(job_id, state)?;
            failpoint::hit("after_rebuildable_write");
        }
        Ok(())
    }

    fn journaled(&self, key: &str) -> Option<Value> {
        self.journal
            .iter()
            .rev()
            .find(|(held, _)| held == key)
            .map(|(_, value)| value.clone())
    }
}

/// Runs `write` on the job store right after the `held` writes, in one storage call that
/// commits them all.
pub(crate) async fn write_after_held<T: Send + 'static>(
    jobs: &Store<Jobs>,
    job_id: &str,
    held: Deferred,
    write: impl FnOnce(&Jobs, &str) -> Result<T, CoordinatorError> + Send + 'static,
) -> Result<T, ErrorBody> {
    let job_id = job_id.to_string();
    jobs.commit(move |jobs| {
        held.write(jobs, &job_id)?;
        write(jobs, &job_id)
    })
    .await
}

/// The host of one job's run.
pub(crate) struct JobHost {
    pub record: JobRecord,
    pub client: async_nats::Client,
    pub jobs: Store<Jobs>,
    pub store: DraftStoreHandle,
    pub events: EventSink,
    pub signals: Arc<RunSignals>,
    /// Workers that may die holding one call before it fails with `TOOL_CRASHED`.
    pub tool_crash_attempts: u32,
    pub journaled: Journaled,
    pub deferred: Mutex<Deferred>,
}

/// A reply is taken only when it answers the call that was sent (its call id and tool), and a
/// tool that only reads changes nothing: anything else is refused whole, before it is applied.
fn check_reply(call_id: &str, tool: &ToolSpec, output: &ToolOutput) -> Result<(), ErrorBody> {
    if output.call_id != call_id || output.tool != tool.name.as_str() {
        tracing::warn!(
            call_id,
            reply_call_id = %output.call_id,
            reply_tool = %output.tool,
            "refused a tool reply that answers another call"
        );
        return Err(ErrorBody::new(
            ErrorCode::ToolReplyInvalid,
            format!(
                "the reply to call {call_id} (`{}`) names call {} (`{}`); it was not applied",
                tool.name, output.call_id, output.tool
            ),
        ));
    }
    let changes_something = output
        .changes
        .as_ref()
        .is_some_and(|changes| !changes.is_empty());
    if tool.is_read_only() && changes_something {
        tracing::warn!(call_id, tool = %tool.name, "refused draft changes from a read tool");
        return Err(ErrorBody::new(
            ErrorCode::ToolReplyInvalid,
            format!(
                "the reply to call {call_id} carries draft changes, but `{}` only reads; it was \
                 not applied",
                tool.name
            ),
        ));
    }
    Ok(())
}

pub(crate) fn user_canceled() -> ErrorBody {
    ErrorBody::new(
        ErrorCode::UserCanceled,
        "the job was cancelled (`atelier cancel`)",
    )
}

impl JobHost {
    fn job_id(&self) -> &str {
        &self.record.job_id
    }

    fn workbench(&self) -> String {
        self.record.workbench.clone()
    }

    /// The tool's answer: recorded if this call id was already applied, else from a worker.
    async fn run_tool(
        &self,
        call_id: &str,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<ToolOutput, ErrorBody> {
        let (applied, files) = self
            .store
            .before_call(self.workbench(), call_id.into(), !tool.is_read_only())
            .await?;
        if let Some(output) = applied.and_then(|applied| applied.output) {
            self.journaled.add_answered_by_draft(call_id);
            tracing::info!(
                call_id,
                "tool call already applied; answering its recorded output"
            );
            return Ok(ToolOutput {
                call_id: call_id.to_string(),
                tool: tool.name.to_string(),
                output,
                worker: "recorded".into(),
                elapsed_ms: 0,
                changes: None,
            });
        }
        let Some(pool) = tool.pool() else {
            return Err(ErrorBody::new(
                ErrorCode::Internal,
                format!("`{}` is answered by the agent, not by a worker", tool.name),
            ));
        };
        let request = ToolRequest {
            v: PROTOCOL_VERSION,
            call_id: call_id.to_string(),
            job_id: Some(self.job_id().to_string()),
            workbench: self.workbench(),
            tool: tool.name.to_string(),
            args,
            files: files.as_ref().clone(),
        };
        let mut output = self.send(&pool.subject(), &request).await?;
        check_reply(call_id, tool, &output)?;
        if let Some(changes) = output.changes.take().filter(|changes| !changes.is_empty()) {
            self.store
                .write(
                    self.workbench(),
                    call_id.to_string(),
                    changes,
                    Some(output.output.clone()),
                )
                .await?;
            self.journaled.add_answered_by_draft(call_id);
        }
        Ok(output)
    }

    /// Sends a call until a worker answers it. Each worker lost while holding it is counted in
    /// the journal (so the count survives restarts); at `tool_crash_attempts` the call fails with
    /// `TOOL_CRASHED` instead of taking down worker after worker.
    async fn send(&self, subject: &str, request: &ToolRequest) -> Result<ToolOutput, ErrorBody> {
        let key = journal::crashes(&request.call_id);
        loop {
            let crashes = self
                .recall(&key)
                .await?
                .and_then(|count| count.as_u64())
                .unwrap_or(0);
            if crashes >= u64::from(self.tool_crash_attempts) {
                return Err(ErrorBody::new(
                    ErrorCode::ToolCrashed,
                    format!(
                        "the worker died holding this `{}` call {crashes} times, so it is not \
                         sent again; a file it reads may crash the reader (check it), or raise \
                         tool_crash_attempts",
                        request.tool
                    ),
                ));
            }
            match atelier_transport::request_to(&self.client, subject, request, Policy::TOOLS).await
            {
                Err(error) if error.code == ErrorCode::ToolCrashed => {
                    tracing::warn!(call_id = %request.call_id, crashes = crashes + 1, %error, "a worker died holding the call");
                    self.record(&key, &Value::from(crashes + 1)).await?;
                }
                answered => return answered,
            }
        }
    }

    /// The decision the control plane journaled for `call_id` (a bare boolean in journals
    /// written before decisions carried a reason).
    async fn journaled_decision(
        &self,
        call_id: &str,
    ) -> Result<Option<ApprovalDecision>, ErrorBody> {
        let Some(value) = self.recall(&journal::approval(call_id)).await? else {
            return Ok(None);
        };
        if let Some(approved) = value.as_bool() {
            return Ok(Some(ApprovalDecision {
                approved,
                reason: None,
            }));
        }
        serde_json::from_value(value).map(Some).map_err(|error| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!("the approval decision for {call_id} is corrupt: {error}"),
            )
        })
    }

    /// Saves the RPI state as durably as `durability` says (a staged one is held for the next
    /// committed storage call), then passes `point`.
    async fn save_rpi(
        &self,
        state: &RpiState,
        durability: Durability,
        point: &'static str,
    ) -> Result<(), ErrorBody> {
        if durability == Durability::Stage {
            self.held().rpi = Some(state.clone());
        } else {
            let state = state.clone();
            self.with_deferred(move |jobs, job_id| jobs.save_rpi(job_id, &state))
                .await?;
        }
        failpoint::hit(point);
        Ok(())
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Deferred> {
        // A panic while holding it left it whole: each change is one assignment or push.
        self.deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The held writes, which the caller now writes (the run's end does, with its record).
    pub(crate) fn take_deferred(&self) -> Deferred {
        std::mem::take(&mut *self.held())
    }

    /// Runs `write` on the job store after the held writes, in one storage call that commits
    /// them all.
    async fn with_deferred<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Jobs, &str) -> Result<T, CoordinatorError> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        write_after_held(&self.jobs, self.job_id(), self.take_deferred(), write).await
    }

    /// Journals `value` under `key` as durably as `durability` says (a staged entry is held for
    /// the next committed storage call).
    pub(crate) async fn journal(
        &self,
        key: &str,
        value: &Value,
        durability: Durability,
    ) -> Result<(), ErrorBody> {
        if durability == Durability::Stage {
            self.held().journal.push((key.to_string(), value.clone()));
        } else {
            let owned_key = key.to_string();
            let value = value.clone();
            self.with_deferred(move |jobs, job_id| jobs.record(job_id, &owned_key, &value))
                .await?;
        }
        self.journaled.add(key);
        Ok(())
    }

    async fn transition(&self, transition: Transition) -> Result<(), ErrorBody> {
        self.with_deferred(move |jobs, job_id| jobs.transition(job_id, transition).map(|_| ()))
            .await
    }
}

#[async_trait::async_trait]
impl AgentHost for JobHost {
    async fn call_tool(
        &self,
        call_id: &str,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<Value, ErrorBody> {
        let span = tracing::info_span!(
            "tool_call",
            tool = tool.name.as_str(),
            call_id,
            pool = tool.name.runs_on()
        );
        async {
            let started = Instant::now();
            let result = self.run_tool(call_id, tool, args).await;
            failpoint::hit("before_tool_result");
            let elapsed = started.elapsed();
            let elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
            let elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
            let (ok, error, worker) = match &result {
                Ok(output) => (true, None, Some(output.worker.clone())),
                Err(error) => (false, Some(error.clone()), None),
            };
            tracing::info!(ok, elapsed_ms, "tool call complete");
            self.events.emit(EventKind::ToolComplete {
                call_id: call_id.to_string(),
                tool: tool.name.to_string(),
                ok,
                error,
                elapsed_ms,
                worker,
                elapsed_us,
            });
            result.map(|output| output.output)
        }
        .instrument(span)
        .await
    }

    async fn files(&self) -> Result<Vec<ManifestEntry>, ErrorBody> {
        let listing = self
            .store
            .list_files(self.workbench(), View::Current)
            .await?;
        Ok(listing.files)
    }

    async fn draft_changes(&self) -> Result<DraftDiff, ErrorBody> {
        self.store.diff(self.workbench().to_string()).await
    }

    async fn save(&self, state: &RpiState) -> Result<(), ErrorBody> {
        self.save_rpi(state, Durability::Commit, "after_checkpoint")
            .await
    }

    async fn save_rebuildable(&self, state: &RpiState) -> Result<(), ErrorBody> {
        self.save_rpi(state, Durability::Stage, "after_rebuildable_save")
            .await
    }

    async fn recall(&self, key: &str) -> Result<Option<Value>, ErrorBody> {
        if !self.journaled.may_hold(key) {
            return Ok(None);
        }
        if let Some(held) = self.held().journaled(key) {
            return Ok(Some(held));
        }
        let job_id = self.job_id().to_string();
        let key = key.to_string();
        self.jobs.read(move |jobs| jobs.recall(&job_id, &key)).await
    }

    async fn record(&self, key: &str, value: &Value) -> Result<(), ErrorBody> {
        let durability = if self.journaled.answered_by_draft(key) {
            Durability::Stage
        } else {
            Durability::Commit
        };
        self.journal(key, value, durability).await?;
        match StepKind::of(key) {
            Some(StepKind::ModelTurn) => failpoint::hit("after_model_turn"),
            Some(StepKind::ToolResult) => failpoint::hit("after_tool_result"),
            _ => {}
        }
        Ok(())
    }

    async fn checkpoint(&self) -> Result<(), ErrorBody> {
        if self.signals.is_cancelled() {
            return Err(user_canceled());
        }
        Ok(())
    }

    fn approval_mode(&self, class: ActionClass) -> ApprovalMode {
        self.record.approval_policy().mode(class)
    }

    async fn already_applied(&self, call_id: &str) -> Result<bool, ErrorBody> {
        let applied = self.store.applied(self.workbench(), call_id.into()).await?;
        Ok(applied.is_some())
    }

    async fn approval(&self, pending: PendingApproval) -> Result<ApprovalDecision, ErrorBody> {
        let call_id = pending.call_id.clone();
        if let Some(decision) = self.journaled_decision(&call_id).await? {
            return Ok(decision);
        }
        self.transition(Transition::AwaitApproval(pending.clone()))
            .await?;
        tracing::info!(call_id, tool = %pending.tool, class = %pending.action_class, "waiting for approval");
        self.events.emit(EventKind::ApprovalRequested {
            call_id: pending.call_id,
            tool: pending.tool,
            arguments: pending.arguments,
            action_class: pending.action_class,
            why: pending.why,
        });
        loop {
            self.checkpoint().await?;
            if let Some(decision) = self.journaled_decision(&call_id).await? {
                self.transition(Transition::ApprovalResolved).await?;
                self.events.emit(EventKind::ApprovalResolved {
                    call_id: call_id.clone(),
                    approved: decision.approved,
                    reason: decision.reason.clone(),
                });
                return Ok(decision);
            }
            let _ = tokio::time::timeout(APPROVAL_POLL, self.signals.decided.notified()).await;
        }
    }

    fn emit(&self, kind: EventKind) {
        self.events.emit(kind);
    }
}

#[cfg(test)]
mod tests {
    use atelier_messages::journal;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_run_reads_only_the_steps_it_knows_of_and_every_approval() {
        let known = journal::tool_result("j.w1");
        let journaled = Journaled::new(HashSet::from([known.clone()]));
        assert!(journaled.may_hold(&known));
        assert!(!journaled.may_hold(&journal::tool_result("j.w2")));
        assert!(!journaled.may_hold(&journal::crashes("j.w2")));
        assert!(
            journaled.may_hold(&journal::approval("j.w2")),
            "the control plane journals decisions while the run waits"
        );
        journaled.add(&journal::tool_result("j.w2"));
        assert!(journaled.may_hold(&journal::tool_result("j.w2")));
    }

    #[test]
    fn only_a_call_answered_by_its_draft_write_has_a_rebuildable_result() {
        let journaled = Journaled::default();
        journaled.add_answered_by_draft("j.w1");
        assert!(journaled.answered_by_draft(&journal::tool_result("j.w1")));
        assert!(!journaled.answered_by_draft(&journal::tool_result("j.w2")));
        assert!(!journaled.answered_by_draft(&journal::crashes("j.w1")));
    }

    #[test]
    fn a_held_journal_entry_answers_with_its_latest_value() {
        let mut deferred = Deferred::default();
        deferred
            .journal
            .push((journal::job_files(), json!({"a.docx": "1"})));
        deferred
            .journal
            .push((journal::job_files(), json!({"a.docx": "2"})));
        assert_eq!(
            deferred.journaled(&journal::job_files()),
            Some(json!({"a.docx": "2"}))
        );
        assert_eq!(deferred.journaled(&journal::item_files(1)), None);
    }
}
