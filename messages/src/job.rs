//! Jobs: submission, state, events and the control-plane views of them.

use serde::{Deserialize, Serialize};

use crate::ErrorBody;
use crate::budget::{Budget, Usd};
pub use crate::outcome::JobOutcome;
pub use crate::plan::{ItemStatus, PlanItem};

/// `atelier.job.submit` (JetStream, `Nats-Msg-Id` = `job_id` for de-duplication).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobSubmit {
    pub v: u16,
    /// Client-chosen id (a UUID v7 from the CLI); re-submitting the same id is a no-op.
    pub job_id: String,
    pub workbench: String,
    pub message: String,
    /// Model spec (`openai:MODEL`, `openai-compat:URL#MODEL`, `replay:FILE`); the coordinator's
    /// default when absent.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub submitted_at_ms: u64,
    /// Run every tool call without pausing for approval.
    #[serde(default)]
    pub auto_approve: bool,
    /// Accept the message although the workbench has a draft, and keep working on that draft
    /// (otherwise the job is refused with `DRAFT_EXISTS`).
    #[serde(default)]
    pub continue_draft: bool,
    /// Which action classes need approval in this job (default: the workbench's policy, else
    /// destructive calls ask).
    #[serde(default)]
    pub approvals: Option<crate::approval::ApprovalPolicy>,
    /// Run these tool calls instead of an agent (no model): `atelier run`, batch children.
    #[serde(default)]
    pub workflow: Option<crate::workflow::Workflow>,
    /// The batch this job is a target of.
    #[serde(default)]
    pub batch_id: Option<String>,
    /// The job's wall-clock limit in seconds, counted from its start (the operator's
    /// `job_time_limit_secs` when absent; more than `max_job_time_limit_secs` is refused).
    #[serde(default)]
    pub time_limit_secs: Option<u64>,
    /// How soon its model calls go when their profile's limits are saturated (default: `low`
    /// for a batch's target, else `normal`).
    #[serde(default)]
    pub priority: Option<crate::provider::Priority>,
    /// What the job may spend on model calls (tokens, dollars); left out: the operator's
    /// default for its workbench or profile, if any. Past it the job stops with
    /// `BUDGET_EXCEEDED` at its next model call.
    #[serde(default, skip_serializing_if = "Budget::is_none")]
    pub budget: Budget,
}

/// Longest accepted job id.
pub const MAX_JOB_ID_LEN: usize = 64;

/// Checks a job id: 1–64 characters of `A-Z a-z 0-9 - _`.
pub fn validate_job_id(job_id: &str) -> Result<(), ErrorBody> {
    let id_ok = !job_id.is_empty()
        && job_id.len() <= MAX_JOB_ID_LEN
        && job_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if id_ok {
        return Ok(());
    }
    Err(ErrorBody::new(
        crate::ErrorCode::ValidationFailed,
        format!("job_id {job_id:?} must be 1-{MAX_JOB_ID_LEN} characters of A-Z a-z 0-9 - _"),
    ))
}

/// Checks an asked-for time limit: at least one second (the coordinator knows the most).
pub fn validate_time_limit(secs: Option<u64>) -> Result<(), ErrorBody> {
    if secs == Some(0) {
        return Err(ErrorBody::new(
            crate::ErrorCode::ValidationFailed,
            "a time limit is at least 1 second",
        ));
    }
    Ok(())
}

impl JobSubmit {
    /// A submission of `message` on `workbench` with every option at its default (the
    /// workbench's model, its approval policy, no draft continued, the operator's time limit).
    pub fn new(job_id: String, workbench: String, message: String) -> Self {
        Self {
            v: crate::PROTOCOL_VERSION,
            job_id,
            workbench,
            message,
            model: None,
            submitted_at_ms: crate::now_ms(),
            auto_approve: false,
            continue_draft: false,
            approvals: None,
            workflow: None,
            batch_id: None,
            time_limit_secs: None,
            priority: None,
            budget: Budget::default(),
        }
    }

    /// Checks the submission's own fields (the CLI before it publishes, the coordinator before
    /// it records): an id of 1–64 characters of `A-Z a-z 0-9 - _`, and a message.
    pub fn validate(&self) -> Result<(), ErrorBody> {
        validate_job_id(&self.job_id)?;
        validate_time_limit(self.time_limit_secs)?;
        self.budget.validate("budget_")?;
        if crate::shard_key::carried_key(&self.job_id)
            .is_some_and(|key| key != crate::shard_key::shard_key(&self.workbench))
        {
            return Err(ErrorBody::new(
                crate::ErrorCode::ValidationFailed,
                format!(
                    "job_id {:?} ends with the shard key of another workbench than `{}`; end it \
                     with `-w{:08x}` or choose an id without a `-wXXXXXXXX` ending",
                    self.job_id,
                    self.workbench,
                    crate::shard_key::shard_key(&self.workbench)
                ),
            ));
        }
        if let Some(workflow) = &self.workflow {
            workflow.validate()?;
        }
        if self.message.trim().is_empty() {
            return Err(ErrorBody::new(
                crate::ErrorCode::ValidationFailed,
                "the job message is empty",
            ));
        }
        if self.message.len() > crate::limits::MAX_MESSAGE_BYTES {
            return Err(ErrorBody::new(
                crate::ErrorCode::ValidationFailed,
                format!(
                    "the job message has {} bytes, more than {}; put long text into a file of \
                     the workbench (`atelier wb add`) and name it in the message",
                    self.message.len(),
                    crate::limits::MAX_MESSAGE_BYTES
                ),
            ));
        }
        Ok(())
    }
}

/// Lifecycle state of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    AwaitingApproval,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Running,
        JobState::AwaitingApproval,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::AwaitingApproval => "awaiting_approval",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// RPI phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Research,
    Plan,
    Implement,
    Summary,
    Done,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Research => "research",
            Phase::Plan => "plan",
            Phase::Implement => "implement",
            Phase::Summary => "summary",
            Phase::Done => "done",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the control plane tells about a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    pub job_id: String,
    pub workbench: String,
    pub message: String,
    pub model: String,
    pub state: JobState,
    pub phase: Phase,
    pub items: Vec<PlanItem>,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
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
    /// A destructive call waiting for `atelier approve` (state `awaiting_approval`).
    #[serde(default)]
    pub pending_approval: Option<PendingApproval>,
    /// The plan as markdown with `[x]`/`[!]` marks.
    #[serde(default)]
    pub plan_md: Option<String>,
    /// The job's current run (0 for the first; each `atelier resume` adds one).
    #[serde(default)]
    pub run: u32,
    /// What the job did, set when it ended `succeeded`: the files it changed, or it answered
    /// (absent in records written before outcomes were).
    #[serde(default)]
    pub outcome: Option<JobOutcome>,
    /// The wall-clock limit of each run in seconds (0: none, in records written before limits
    /// were).
    #[serde(default)]
    pub time_limit_secs: u64,
    /// When the current run started (none while it is queued).
    #[serde(default)]
    pub started_at_ms: Option<u64>,
    /// The priority it asked for with the model provider (none: `low` for a batch's target,
    /// else `normal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<crate::provider::Priority>,
    /// What the job may spend on model calls (none: no limit but the operator's per-job
    /// `job_max_tokens`).
    #[serde(default, skip_serializing_if = "Budget::is_none")]
    pub budget: Budget,
    /// What its tokens cost at its profile's prices (none: the profile has no prices, so the
    /// cost is unknown; never shown as 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<Usd>,
}

/// A tool call paused until a person approves or rejects it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    pub call_id: String,
    pub tool: String,
    /// The call's arguments as JSON text.
    pub arguments: String,
    pub requested_at_ms: u64,
    /// Why it waits: its action class…
    #[serde(default = "destructive")]
    pub action_class: crate::approval::ActionClass,
    /// …and what makes it so (e.g. "overwrites reports/q3.csv").
    #[serde(default)]
    pub why: Option<String>,
}

fn destructive() -> crate::approval::ActionClass {
    crate::approval::ActionClass::Destructive
}

impl JobView {
    pub fn items_done(&self) -> usize {
        self.count_items(ItemStatus::Done)
    }

    pub fn items_failed(&self) -> usize {
        self.count_items(ItemStatus::Failed)
    }

    fn count_items(&self, status: ItemStatus) -> usize {
        self.items
            .iter()
            .filter(|item| item.status == status)
            .count()
    }
}

/// `atelier.ctl.jobs`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListJobs {
    pub v: u16,
    #[serde(default)]
    pub state: Option<JobState>,
    #[serde(default)]
    pub workbench: Option<String>,
    /// Jobs to skip, newest first (for the next page).
    #[serde(default)]
    pub offset: u64,
    /// Jobs in this page: at most [`MAX_LISTED_JOBS`], which is also the default. A reply with
    /// fewer is the last page.
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Most jobs one `atelier.ctl.jobs` reply carries (list views carry no plans and cut messages,
/// so a page stays far below any server's `max_payload`).
pub const MAX_LISTED_JOBS: u32 = 200;

/// `atelier.ctl.job`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GetJob {
    pub v: u16,
    pub job_id: String,
}

/// `atelier.ctl.cancel`: stop a job at its next step boundary (`USER_CANCELED`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CancelJob {
    pub v: u16,
    pub job_id: String,
}

/// `atelier.ctl.approve`: approve (or reject) the job's pending call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApproveCall {
    pub v: u16,
    pub job_id: String,
    #[serde(default)]
    pub reject: bool,
    /// Recorded with the decision; a rejection's reason is told to the model.
    #[serde(default)]
    pub reason: Option<String>,
    /// The call this decision is for: a decision about another call than the one now pending
    /// (a stale page, a second person) is refused. Without it, the pending call is decided.
    #[serde(default)]
    pub call_id: Option<String>,
}

/// `atelier.ctl.resume`: continue a failed job from its journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResumeJob {
    pub v: u16,
    pub job_id: String,
    /// A new budget for the whole job, what it spent before included (a limit left out keeps
    /// the job's own): how a job stopped with `BUDGET_EXCEEDED` continues.
    #[serde(default, skip_serializing_if = "Budget::is_none")]
    pub budget: Budget,
}

/// `atelier.ctl.stats`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GetStats {
    pub v: u16,
}

/// Storage and job counts of a coordinator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorStats {
    pub coordinator: String,
    pub storage_bytes: u64,
    pub jobs_by_state: std::collections::BTreeMap<String, u64>,
    pub journal_entries: u64,
}

/// `atelier.ctl.ping`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ping {
    pub v: u16,
}

/// Answer to a ping.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pong {
    pub coordinator: String,
    pub protocol_version: u16,
    pub running_jobs: u64,
}

/// The most bytes of free text (arguments, results, model text) one event carries.
pub const EVENT_TEXT_LIMIT: usize = 4096;

/// An event of a job, published on `atelier.evt.<job>.<kind>` into the EVENTS stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    pub v: u16,
    pub job_id: String,
    pub at_ms: u64,
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    JobAccepted,
    PhaseStarted {
        phase: Phase,
    },
    PhaseCompleted {
        phase: Phase,
    },
    ItemStarted {
        index: u32,
        total: u32,
        label: String,
        attempt: u32,
    },
    ItemFinished {
        index: u32,
        status: ItemStatus,
    },
    ToolExecuting {
        call_id: String,
        tool: String,
        #[serde(default)]
        path: Option<String>,
    },
    ToolComplete {
        call_id: String,
        tool: String,
        ok: bool,
        #[serde(default)]
        error: Option<ErrorBody>,
        elapsed_ms: u64,
        #[serde(default)]
        worker: Option<String>,
        /// The same duration in microseconds (for latency measurements below a millisecond).
        #[serde(default)]
        elapsed_us: u64,
    },
    /// The I/O record of one tool call (after its `tool_complete`): what went in and what
    /// came out, for the tool I/O log. Free text is cut at [`EVENT_TEXT_LIMIT`] bytes.
    ToolIo {
        call_id: String,
        #[serde(default)]
        tool: String,
        /// The pool that ran it (`tabular`, `office`).
        #[serde(default)]
        pool: Option<String>,
        #[serde(default)]
        phase: Option<Phase>,
        #[serde(default)]
        item: Option<u32>,
        /// The arguments as JSON text.
        #[serde(default)]
        arguments: String,
        /// The result (or error) as the model saw it, summarized.
        #[serde(default)]
        result: String,
        /// Size of the full result in bytes.
        #[serde(default)]
        result_bytes: u64,
    },
    /// One model response (a turn of a tool loop, or the summary).
    ModelTurn {
        phase: Phase,
        #[serde(default)]
        item: Option<u32>,
        #[serde(default)]
        turn: u32,
        #[serde(default)]
        model: String,
        /// The assistant's text (cut at [`EVENT_TEXT_LIMIT`] bytes).
        #[serde(default)]
        text: String,
        /// Names of the tools the model asked for in this turn.
        #[serde(default)]
        tool_calls: Vec<String>,
        #[serde(default)]
        prompt_tokens: u64,
        #[serde(default)]
        completion_tokens: u64,
        #[serde(default)]
        elapsed_ms: u64,
        /// What the turn cost at its profile's prices (none: unknown).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<Usd>,
    },
    AssistantDelta {
        text: String,
    },
    /// A destructive call is waiting for approval.
    ApprovalRequested {
        call_id: String,
        tool: String,
        arguments: String,
        #[serde(default = "destructive")]
        action_class: crate::approval::ActionClass,
        #[serde(default)]
        why: Option<String>,
    },
    ApprovalResolved {
        call_id: String,
        approved: bool,
        #[serde(default)]
        reason: Option<String>,
    },
    /// The model repeats itself; it was told so.
    LoopWarning {
        tool: String,
        repeats: u32,
    },
    /// A model call must wait for its profile's limits before it is sent (emitted once per
    /// call, when it starts waiting).
    ProviderWaiting {
        /// The model profile.
        profile: String,
        reason: crate::provider::WaitReason,
        /// How long the wait looks from here (0: until a call in flight ends).
        expected_ms: u64,
    },
    JobFinished {
        state: JobState,
        #[serde(default)]
        error: Option<ErrorBody>,
        /// Which run of the job ended (0 for the first; each `atelier resume` adds one).
        #[serde(default)]
        run: u32,
        /// What the job did, when it ended `succeeded`.
        #[serde(default)]
        outcome: Option<JobOutcome>,
        /// What its model calls spent, over all its runs (none: not told here; the job's
        /// view has it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spent: Option<crate::budget::Spent>,
    },
}

impl EventKind {
    /// The last token of the event's subject.
    pub fn subject_token(&self) -> &'static str {
        match self {
            EventKind::JobAccepted => "accepted",
            EventKind::PhaseStarted { .. } => "phase_started",
            EventKind::PhaseCompleted { .. } => "phase_completed",
            EventKind::ItemStarted { .. } => "item_started",
            EventKind::ItemFinished { .. } => "item_finished",
            EventKind::ToolExecuting { .. } => "tool_executing",
            EventKind::ToolComplete { .. } => "tool_complete",
            EventKind::ToolIo { .. } => "tool_io",
            EventKind::ModelTurn { .. } => "model_turn",
            EventKind::AssistantDelta { .. } => "delta",
            EventKind::ApprovalRequested { .. } => "approval_requested",
            EventKind::ApprovalResolved { .. } => "approval_resolved",
            EventKind::LoopWarning { .. } => "loop_warning",
            EventKind::ProviderWaiting { .. } => "provider_waiting",
            EventKind::JobFinished { .. } => "finished",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Format, PROTOCOL_VERSION, decode, encode};

    #[test]
    fn tagged_events_round_trip_through_messagepack() {
        let event = JobEvent {
            v: PROTOCOL_VERSION,
            job_id: "j1".into(),
            at_ms: 7,
            kind: EventKind::ItemStarted {
                index: 2,
                total: 3,
                label: "Export".into(),
                attempt: 1,
            },
        };
        let bytes = encode(&event, Format::MessagePack).unwrap_or_default();
        let back: JobEvent = decode(&bytes, Format::MessagePack).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, event);
    }

    #[test]
    fn a_job_id_carrying_another_workbenchs_shard_key_is_refused() {
        let id = |workbench: &str| crate::shard_key::job_id_for("0195f1c2", workbench);
        let submit = |job_id: String| JobSubmit::new(job_id, "q3".into(), "go".into());
        assert_eq!(submit(id("q3")).validate(), Ok(()));
        assert_eq!(submit("plain-id".into()).validate(), Ok(()));
        let refused = submit(id("q4")).validate().map_err(|error| error.code);
        assert_eq!(refused, Err(crate::ErrorCode::ValidationFailed));
    }

    #[test]
    fn a_job_view_recorded_before_outcomes_decodes_without_one() {
        let old = serde_json::json!({
            "job_id": "j1", "workbench": "w", "message": "Count", "model": "replay:x",
            "state": "succeeded", "phase": "done", "items": [],
            "created_at_ms": 1, "updated_at_ms": 2, "run": 0
        });
        let view: JobView = serde_json::from_value(old).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((view.state, &view.outcome), (JobState::Succeeded, &None));
        let bytes = encode(&view, Format::MessagePack).unwrap_or_default();
        let back: Result<JobView, _> = rmp_serde::from_slice(&bytes);
        assert_eq!(back.ok(), Some(view));
    }

    #[test]
    fn a_finished_event_carries_its_outcome_and_an_older_one_decodes_without() {
        let finished = |outcome, spent| JobEvent {
            v: PROTOCOL_VERSION,
            job_id: "j1".into(),
            at_ms: 7,
            kind: EventKind::JobFinished {
                state: JobState::Succeeded,
                error: None,
                run: 0,
                outcome,
                spent,
            },
        };
        let spent = crate::budget::Spent {
            tokens: 1_200,
            cost_usd: Some(Usd::from_micros(4_500)),
        };
        let event = finished(
            Some(JobOutcome::Changed {
                files: vec!["count.txt".into(), "notes.txt".into()],
            }),
            Some(spent),
        );
        let bytes = encode(&event, Format::MessagePack).unwrap_or_default();
        let back: JobEvent = decode(&bytes, Format::MessagePack).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, event);
        let old = serde_json::json!({
            "v": 1, "job_id": "j1", "at_ms": 7,
            "kind": {"type": "job_finished", "state": "succeeded", "error": null, "run": 0}
        });
        let bytes = rmp_serde::to_vec_named(&old).unwrap_or_default();
        let back: JobEvent = decode(&bytes, Format::MessagePack).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, finished(None, None));
    }
}
