//! Batches (`atelier.batch.<verb>`): one action over many targets — an agent message, a tool
//! call or a workflow per workbench, or per file of one workbench — run durably by a
//! coordinator with bounded concurrency, partial failure, cancel and retry.
//!
//! A batch's child jobs have ids derived from the batch id, the target's index and the
//! attempt ([`child_job_id`]), so a coordinator that crashes while starting one never starts
//! it twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::budget::{Budget, Spent};
use crate::outcome::JobOutcome;
use crate::workflow::Workflow;
use crate::{ErrorBody, ErrorCode};

/// Longest accepted batch id (child job ids add up to 24 characters).
pub const MAX_BATCH_ID_LEN: usize = 40;
/// Targets in flight when the submitter names no concurrency.
pub const DEFAULT_CONCURRENCY: u32 = 4;
/// Most targets in flight at once.
pub const MAX_CONCURRENCY: u32 = 256;
/// Most targets in one batch.
pub const MAX_TARGETS: usize = 100_000;
/// Most failures a batch view lists (the counts are always whole).
pub const FAILURES_SHOWN: usize = 100;

/// The id of the child job of target `index`, attempt `attempt` (0 first, one more per retry).
pub fn child_job_id(batch_id: &str, index: u64, attempt: u32) -> String {
    format!("{batch_id}-t{index}-a{attempt}")
}

/// Which targets a batch acts on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TargetSet {
    /// Workbenches named in a list, or matching a glob (`*`, `?`), or both (each once).
    Workbenches {
        #[serde(default)]
        names: Vec<String>,
        #[serde(default)]
        glob: Option<String>,
    },
    /// Each file of one workbench whose path matches the glob (`*` stays within a folder,
    /// `**` crosses folders); the targets run one after another on its draft.
    EachFile { workbench: String, glob: String },
}

/// What is done to each target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BatchAction {
    /// An agent job per target; `{{workbench}}`, `{{file}}` are filled in the message.
    Message {
        message: String,
        #[serde(default)]
        model: Option<String>,
    },
    /// One tool call per target, without a model.
    Tool { tool: String, args: Value },
    /// A workflow per target; `{{variables}}` come from `vars` and the target
    /// (`workbench`, `file`, `file_stem`, `index`).
    Workflow {
        workflow: Workflow,
        #[serde(default)]
        vars: BTreeMap<String, String>,
    },
}

impl BatchAction {
    /// A line saying what the batch does.
    pub fn describe(&self) -> String {
        match self {
            BatchAction::Message { message, .. } => format!("message: {message}"),
            BatchAction::Tool { tool, .. } => format!("tool: {tool}"),
            BatchAction::Workflow { workflow, .. } => match &workflow.name {
                Some(name) => format!("workflow: {name} ({} steps)", workflow.steps.len()),
                None => format!("workflow: {} steps", workflow.steps.len()),
            },
        }
    }
}

/// How many failed targets a batch tolerates before it stops dispatching and ends `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureTolerance {
    /// At most this many failed targets.
    Count(u64),
    /// At most this percentage (0–100) of all targets failed.
    Percent(u8),
}

impl FailureTolerance {
    /// True when `failed` failures out of `total` targets are beyond the tolerance.
    pub fn exceeded(self, failed: u64, total: u64) -> bool {
        match self {
            FailureTolerance::Count(allowed) => failed > allowed,
            FailureTolerance::Percent(percent) => failed * 100 > u64::from(percent) * total,
        }
    }

    /// Parses `N` or `P%`.
    pub fn parse(text: &str) -> Result<Self, ErrorBody> {
        let text = text.trim();
        let bad = || {
            ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("tolerated failures {text:?} must be a count (`3`) or a percentage (`5%`)"),
            )
        };
        if let Some(percent) = text.strip_suffix('%') {
            let percent: u8 = percent.trim().parse().map_err(|_| bad())?;
            if percent > 100 {
                return Err(bad());
            }
            return Ok(FailureTolerance::Percent(percent));
        }
        text.parse().map(FailureTolerance::Count).map_err(|_| bad())
    }
}

impl std::fmt::Display for FailureTolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureTolerance::Count(count) => write!(f, "{count}"),
            FailureTolerance::Percent(percent) => write!(f, "{percent}%"),
        }
    }
}

/// `atelier.batch.submit`: starts a batch; re-submitting its id answers the existing batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitBatch {
    pub v: u16,
    /// Client-chosen id (a UUID v7 from the CLI): 1–40 characters of `A-Z a-z 0-9 - _`.
    pub batch_id: String,
    pub targets: TargetSet,
    pub action: BatchAction,
    /// Targets in flight at once (different workbenches; one workbench's targets run one
    /// after another). Default [`DEFAULT_CONCURRENCY`].
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// Unlimited when absent: every target runs whatever fails.
    #[serde(default)]
    pub tolerate_failures: Option<FailureTolerance>,
    /// The children run every tool call without pausing for approval.
    #[serde(default)]
    pub auto_approve: bool,
    /// The first target of a workbench that has a draft keeps working on it (else that target
    /// fails with `DRAFT_EXISTS`).
    #[serde(default)]
    pub continue_draft: bool,
    /// Each target's wall-clock limit in seconds (see `JobSubmit::time_limit_secs`).
    #[serde(default)]
    pub time_limit_secs: Option<u64>,
    /// How soon the targets' model calls go when their profile's limits are saturated
    /// (default: `low`).
    #[serde(default)]
    pub priority: Option<crate::provider::Priority>,
    /// What all the targets' model calls together may spend: reached, no new target starts
    /// and the batch ends `budget_exhausted` (each target gets what is left when it starts).
    #[serde(default, skip_serializing_if = "Budget::is_none")]
    pub budget: Budget,
}

impl SubmitBatch {
    /// Checks the request's own fields.
    pub fn validate(&self) -> Result<(), ErrorBody> {
        validate_batch_id(&self.batch_id)?;
        crate::job::validate_time_limit(self.time_limit_secs)?;
        self.budget.validate("budget_")?;
        if let Some(concurrency) = self.concurrency {
            validate_concurrency(concurrency)?;
        }
        match &self.targets {
            TargetSet::Workbenches { names, glob } if names.is_empty() && glob.is_none() => {
                return Err(invalid("name the target workbenches (a list or a glob)"));
            }
            TargetSet::EachFile { glob, .. } if glob.trim().is_empty() => {
                return Err(invalid("the file glob is empty"));
            }
            _ => {}
        }
        match &self.action {
            BatchAction::Message { message, .. } if message.trim().is_empty() => {
                Err(invalid("the batch message is empty"))
            }
            BatchAction::Tool { tool, args } => Workflow::single(tool, args.clone()).validate(),
            BatchAction::Workflow { workflow, .. } => workflow.validate(),
            BatchAction::Message { .. } => Ok(()),
        }
    }
}

/// Checks a batch id: 1–40 characters of `A-Z a-z 0-9 - _`.
pub fn validate_batch_id(batch_id: &str) -> Result<(), ErrorBody> {
    let ok = !batch_id.is_empty()
        && batch_id.len() <= MAX_BATCH_ID_LEN
        && batch_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        return Ok(());
    }
    Err(invalid(format!(
        "batch_id {batch_id:?} must be 1-{MAX_BATCH_ID_LEN} characters of A-Z a-z 0-9 - _"
    )))
}

/// Checks a concurrency: 1 to [`MAX_CONCURRENCY`].
pub fn validate_concurrency(concurrency: u32) -> Result<(), ErrorBody> {
    if (1..=MAX_CONCURRENCY).contains(&concurrency) {
        return Ok(());
    }
    Err(invalid(format!(
        "concurrency {concurrency} must be between 1 and {MAX_CONCURRENCY}"
    )))
}

fn invalid(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// Lifecycle state of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchState {
    Running,
    /// Every target succeeded.
    Succeeded,
    /// Every target ran; some failed (within the tolerance).
    CompletedWithFailures,
    /// More targets failed than tolerated; the rest were not dispatched.
    Failed,
    Cancelled,
    /// Its budget was reached: the targets not started stay queued.
    BudgetExhausted,
}

impl BatchState {
    pub const ALL: [BatchState; 6] = [
        BatchState::Running,
        BatchState::Succeeded,
        BatchState::CompletedWithFailures,
        BatchState::Failed,
        BatchState::Cancelled,
        BatchState::BudgetExhausted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Running => "running",
            BatchState::Succeeded => "succeeded",
            BatchState::CompletedWithFailures => "completed_with_failures",
            BatchState::Failed => "failed",
            BatchState::Cancelled => "cancelled",
            BatchState::BudgetExhausted => "budget_exhausted",
        }
    }

    pub fn is_terminal(self) -> bool {
        self != BatchState::Running
    }
}

impl std::fmt::Display for BatchState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// State of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl TargetState {
    pub const ALL: [TargetState; 5] = [
        TargetState::Queued,
        TargetState::Running,
        TargetState::Succeeded,
        TargetState::Failed,
        TargetState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TargetState::Queued => "queued",
            TargetState::Running => "running",
            TargetState::Succeeded => "succeeded",
            TargetState::Failed => "failed",
            TargetState::Cancelled => "cancelled",
        }
    }
}

/// Targets per state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchCounts {
    pub total: u64,
    pub queued: u64,
    pub running: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Of the succeeded targets, those whose job changed files ([`JobOutcome::Changed`]).
    #[serde(default)]
    pub changed: u64,
    /// Of the succeeded targets, those whose job changed no file ([`JobOutcome::Answered`]).
    /// Targets that succeeded before outcomes were recorded are in neither count.
    #[serde(default)]
    pub answered: u64,
}

impl BatchCounts {
    /// Targets that ended (succeeded, failed or cancelled).
    pub fn done(&self) -> u64 {
        self.succeeded + self.failed + self.cancelled
    }

    /// The count of `state`.
    pub fn of(&self, state: TargetState) -> u64 {
        match state {
            TargetState::Queued => self.queued,
            TargetState::Running => self.running,
            TargetState::Succeeded => self.succeeded,
            TargetState::Failed => self.failed,
            TargetState::Cancelled => self.cancelled,
        }
    }

    /// The counter of `state`.
    pub fn of_mut(&mut self, state: TargetState) -> &mut u64 {
        match state {
            TargetState::Queued => &mut self.queued,
            TargetState::Running => &mut self.running,
            TargetState::Succeeded => &mut self.succeeded,
            TargetState::Failed => &mut self.failed,
            TargetState::Cancelled => &mut self.cancelled,
        }
    }

    /// Adds another batch's counts to these.
    pub fn add(&mut self, other: &BatchCounts) {
        self.total += other.total;
        for state in TargetState::ALL {
            *self.of_mut(state) += other.of(state);
        }
        self.changed += other.changed;
        self.answered += other.answered;
    }

    /// Counts a target that succeeded with `outcome` as changed or answered.
    pub fn count_outcome(&mut self, outcome: &JobOutcome) {
        match outcome {
            JobOutcome::Changed { .. } => self.changed += 1,
            JobOutcome::Answered => self.answered += 1,
        }
    }

    /// Moves one target from `from` to `to`.
    pub fn shift(&mut self, from: TargetState, to: TargetState) {
        let source = self.of_mut(from);
        *source = source.saturating_sub(1);
        *self.of_mut(to) += 1;
    }
}

/// One target as the control plane shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetView {
    pub index: u64,
    pub workbench: String,
    /// The file, for a batch over the files of one workbench.
    #[serde(default)]
    pub file: Option<String>,
    pub state: TargetState,
    /// The child job of the latest attempt, once dispatched.
    #[serde(default)]
    pub job_id: Option<String>,
    #[serde(default)]
    pub attempt: u32,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    /// What the child did, once it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<JobOutcome>,
}

/// What `atelier batch status` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchView {
    pub batch_id: String,
    pub state: BatchState,
    /// What each target gets.
    pub action: String,
    #[serde(flatten)]
    pub counts: BatchCounts,
    pub concurrency: u32,
    #[serde(default)]
    pub tolerate_failures: Option<FailureTolerance>,
    /// Why the batch failed or was cancelled.
    #[serde(default)]
    pub error: Option<ErrorBody>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    #[serde(default)]
    pub finished_at_ms: Option<u64>,
    #[serde(default)]
    pub cancel_requested: bool,
    /// The failed targets, at most [`FAILURES_SHOWN`] (lowest indexes first).
    #[serde(default)]
    pub failures: Vec<TargetView>,
    /// What the batch may spend (none: no limit).
    #[serde(default, skip_serializing_if = "Budget::is_none")]
    pub budget: Budget,
    /// What its ended targets spent (a target's spending is counted when it ends).
    #[serde(default)]
    pub spent: Spent,
}

/// `atelier.batch.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetBatch {
    pub v: u16,
    pub batch_id: String,
}

/// `atelier.batch.list`: every batch, newest first (without their failures).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListBatches {
    pub v: u16,
}

/// `atelier.batch.targets`: a page of a batch's targets, optionally of one state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListTargets {
    pub v: u16,
    pub batch_id: String,
    #[serde(default)]
    pub state: Option<TargetState>,
    /// Index of the first target looked at.
    #[serde(default)]
    pub from: u64,
    /// Most targets answered (default and cap 1,000).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// `atelier.batch.cancel`: queued targets are cancelled, running children are cancelled at
/// their next step boundary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelBatch {
    pub v: u16,
    pub batch_id: String,
}

/// `atelier.batch.retry`: runs the failed targets again, each as a new child job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryBatch {
    pub v: u16,
    pub batch_id: String,
}

/// `atelier.batch.update`: changes a running batch's concurrency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateBatch {
    pub v: u16,
    pub batch_id: String,
    pub concurrency: u32,
}

/// `atelier.batch.publish` / `atelier.batch.discard`: the drafts of the workbenches whose
/// targets succeeded (the batch must have ended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettleBatch {
    pub v: u16,
    pub batch_id: String,
    /// Publish when true, discard when false.
    pub publish: bool,
}

/// What a publish or discard of a batch did, per workbench.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSettled {
    /// Workbenches whose draft was published (or discarded).
    pub settled: Vec<String>,
    /// Workbenches skipped, with why (e.g. `NO_DRAFT`).
    #[serde(default)]
    pub skipped: Vec<SkippedWorkbench>,
}

/// A workbench a batch publish or discard left alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedWorkbench {
    pub workbench: String,
    pub error: ErrorBody,
}

/// A batch event on `atelier.batch.evt.<batch>.<kind>` (stream `ATELIER_BATCH_EVENTS`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchEvent {
    pub v: u16,
    pub batch_id: String,
    pub at_ms: u64,
    pub kind: BatchEventKind,
    pub state: BatchState,
    #[serde(flatten)]
    pub counts: BatchCounts,
    #[serde(default)]
    pub error: Option<ErrorBody>,
}

/// Which batch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchEventKind {
    BatchStarted,
    BatchProgress,
    BatchFinished,
}

impl BatchEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchEventKind::BatchStarted => "batch_started",
            BatchEventKind::BatchProgress => "batch_progress",
            BatchEventKind::BatchFinished => "batch_finished",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerances_parse_counts_and_percentages() {
        assert_eq!(FailureTolerance::parse("3"), Ok(FailureTolerance::Count(3)));
        assert_eq!(
            FailureTolerance::parse("5%"),
            Ok(FailureTolerance::Percent(5))
        );
        for bad in ["", "-1", "101%", "x%", "2.5"] {
            assert_eq!(
                FailureTolerance::parse(bad).err().map(|e| e.code),
                Some(ErrorCode::ValidationFailed),
                "{bad}"
            );
        }
        assert!(!FailureTolerance::Count(1).exceeded(1, 40));
        assert!(FailureTolerance::Count(1).exceeded(2, 40));
        assert!(!FailureTolerance::Percent(5).exceeded(2, 40));
        assert!(FailureTolerance::Percent(5).exceeded(3, 40));
    }

    #[test]
    fn child_ids_are_valid_job_ids_for_the_longest_batch_id() {
        let batch_id = "b".repeat(MAX_BATCH_ID_LEN);
        let child = child_job_id(&batch_id, 99_999, 9_999);
        assert!(crate::job::validate_job_id(&child).is_ok(), "{child}");
    }

    #[test]
    fn counts_move_between_states() {
        let mut counts = BatchCounts {
            total: 2,
            queued: 2,
            ..BatchCounts::default()
        };
        counts.shift(TargetState::Queued, TargetState::Running);
        counts.shift(TargetState::Running, TargetState::Failed);
        assert_eq!((counts.queued, counts.running, counts.failed), (1, 0, 1));
        assert_eq!(counts.done(), 1);
        counts.shift(TargetState::Queued, TargetState::Succeeded);
        counts.count_outcome(&JobOutcome::Answered);
        assert_eq!(
            (counts.succeeded, counts.changed, counts.answered),
            (1, 0, 1)
        );
        let mut sum = counts;
        sum.add(&counts);
        assert_eq!((sum.total, sum.queued, sum.failed), (4, 0, 2));
        assert_eq!((sum.succeeded, sum.changed, sum.answered), (2, 0, 2));
    }

    #[test]
    fn counts_recorded_before_outcomes_decode_with_neither() {
        let old = serde_json::json!({
            "total": 2, "queued": 0, "running": 0, "succeeded": 2, "failed": 0, "cancelled": 0
        });
        let counts: BatchCounts = serde_json::from_value(old).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (counts.succeeded, counts.changed, counts.answered),
            (2, 0, 0)
        );
    }
}
