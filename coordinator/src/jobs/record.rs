//! The durable record of a job: what was submitted, its lifecycle state and its run. A leaf
//! module, so that [`lifecycle`](crate::lifecycle) can change a record without importing the
//! store in [`jobs`](crate::jobs) that applies its transitions.

use atelier_messages::approval::ApprovalPolicy;
use atelier_messages::budget::{Budget, Prices, Spent};
use atelier_messages::job::{EventKind, JobOutcome, JobState, JobSubmit, PendingApproval};
use atelier_messages::workflow::Workflow;
use atelier_messages::{ErrorBody, now_ms};
use serde::{Deserialize, Serialize};

/// The durable record of a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub job_id: String,
    pub workbench: String,
    pub message: String,
    /// The resolved model spec.
    pub model: String,
    pub state: JobState,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    #[serde(default)]
    pub auto_approve: bool,
    /// Set by `atelier cancel`; honoured at the next step boundary, also after a restart.
    #[serde(default)]
    pub cancel_requested: bool,
    #[serde(default)]
    pub pending_approval: Option<PendingApproval>,
    /// The current run: 0 for the first, one more per resume.
    #[serde(default)]
    pub run: u32,
    /// Which action classes wait for approval, fixed when the job was accepted.
    #[serde(default)]
    pub approvals: ApprovalPolicy,
    /// The conversation message this job answers.
    #[serde(default)]
    pub message_id: Option<String>,
    /// The tool calls this job runs instead of an agent.
    #[serde(default)]
    pub workflow: Option<Workflow>,
    /// The batch this job is a target of.
    #[serde(default)]
    pub batch_id: Option<String>,
    /// What the job did, recorded with its end when it succeeded.
    #[serde(default)]
    pub outcome: Option<JobOutcome>,
    /// The wall-clock limit of each run in seconds (0: none, as in records written before
    /// limits were).
    #[serde(default)]
    pub time_limit_secs: u64,
    /// When the current run left `queued` (none until it does).
    #[serde(default)]
    pub started_at_ms: Option<u64>,
    /// How soon its model calls go when their profile's limits are saturated (none: `low`
    /// for a batch's target, else `normal`).
    #[serde(default)]
    pub priority: Option<atelier_messages::provider::Priority>,
    /// What it may spend, fixed when it was accepted (its own, else the operator's default)
    /// and changed by `atelier resume --budget-*`.
    #[serde(default)]
    pub budget: Budget,
    /// Its model profile's prices when it was accepted (none: its cost is unknown).
    #[serde(default)]
    pub prices: Option<Prices>,
}

impl JobRecord {
    /// The `job_finished` event of the job as it is recorded now.
    pub fn end_event(&self) -> EventKind {
        EventKind::JobFinished {
            state: self.state,
            error: self.error.clone(),
            run: self.run,
            outcome: self.outcome.clone(),
            spent: None,
        }
    }

    /// What `prompt` and `completion` tokens of this job cost.
    pub fn spent(&self, prompt: u64, completion: u64) -> Spent {
        Spent::of(prompt, completion, self.prices)
    }

    /// The job's approval policy (`--auto-approve` lets every call run).
    pub fn approval_policy(&self) -> ApprovalPolicy {
        if self.auto_approve {
            return ApprovalPolicy::AUTO;
        }
        self.approvals
    }

    /// A job about to run, answering `message_id`.
    pub fn queued(submit: &JobSubmit, model: &str, message_id: Option<String>) -> Self {
        let now = now_ms();
        JobRecord {
            job_id: submit.job_id.clone(),
            workbench: submit.workbench.clone(),
            message: submit.message.clone(),
            model: model.to_string(),
            state: JobState::Queued,
            error: None,
            created_at_ms: now,
            updated_at_ms: now,
            auto_approve: submit.auto_approve,
            cancel_requested: false,
            pending_approval: None,
            run: 0,
            approvals: submit.approvals.unwrap_or_default(),
            message_id,
            workflow: submit.workflow.clone(),
            batch_id: submit.batch_id.clone(),
            outcome: None,
            time_limit_secs: submit.time_limit_secs.unwrap_or_default(),
            started_at_ms: None,
            priority: submit.priority,
            budget: submit.budget,
            prices: None,
        }
    }

    /// A submission refused with `error`: failed before it ran.
    pub fn refused(submit: &JobSubmit, error: ErrorBody) -> Self {
        let mut record = Self::queued(submit, submit.model.as_deref().unwrap_or_default(), None);
        record.state = JobState::Failed;
        record.error = Some(error);
        record
    }
}
