//! Stable error codes and the error body carried by every failed reply.

use serde::{Deserialize, Serialize};

/// A stable, machine-readable error code. The string form never changes once released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    ValidationFailed,
    SandboxViolation,
    FileReadFailed,
    FileWriteFailed,
    ToolWorkerUnavailable,
    ToolTimeout,
    DraftExists,
    NoDraft,
    NotFound,
    ProviderNotConfigured,
    ProviderAuthFailed,
    ProviderRateLimited,
    ProviderUnavailable,
    AgentLoopDetected,
    BudgetExceeded,
    UserCanceled,
    ApprovalRejected,
    UnsupportedVersion,
    ResultTooLarge,
    ModelNotAllowed,
    Internal,
    /// A job is answering on the workbench; wait for it (or cancel it) first.
    WorkbenchBusy,
    /// The draft revision of a rewind's target was pruned (by a publish, discard or retention).
    RevisionPruned,
    /// The model's plan is not a checklist (after being told the format), or it insists that
    /// nothing needs to change for a request that asks for a file (after being told why).
    PlanInvalid,
    /// A plan item ended without a successful tool call and without a reason that no change
    /// was needed; or without writing a target it names; or with no change for a request that
    /// asks for a file. Also the job's code when such a request ends with no file changed.
    ItemNotDone,
    /// The job ran to its end but some plan items failed; the draft holds what was done.
    ItemsFailed,
    /// The model kept answering with tool calls that could not be parsed or did not match a
    /// tool's schema, after being told what was wrong.
    ToolCallInvalid,
    /// The model kept answering with empty or runaway-repetitive output, after a nudge.
    ModelOutputDegenerate,
    /// More of a batch's targets failed than it tolerates; it stopped dispatching.
    FailureThresholdExceeded,
    /// A batch ran every target but some failed (within its tolerance).
    TargetsFailed,
    /// A tool reply that does not answer the call that was sent (another call id or tool), or
    /// that carries draft changes from a tool that only reads; nothing of it was applied.
    ToolReplyInvalid,
    /// A file the readers refuse to parse because it would need more than their budgets: a
    /// spreadsheet's cells beyond Excel's grid or over the memory budget of a sheet, counts a
    /// part's size cannot hold, or a document with more XML nodes, depth, relationships or slide
    /// references than it can have. Nothing of it was read.
    FileTooComplex,
    /// The worker that held a tool call died (went silent) on it as many times as the
    /// coordinator allows (`tool_crash_attempts`); the call is not sent again.
    ToolCrashed,
    /// The coordinator stopped again and again while running this job, with no step journaled
    /// in between; the job was set aside (its journal kept for inspection) so the coordinator
    /// could start. `atelier resume` tries it again.
    CrashLoop,
    /// A model request does not fit the model's context window (its profile's
    /// `context_tokens`, else the server's own figure), even after the engine dropped what it
    /// may drop; or the server answered that the prompt exceeds its context. Never retried
    /// unchanged.
    ContextOverflow,
    /// A worker's disk filled up while it cached a file (a table's database); the operator
    /// frees space or lowers the cache bound, and the call can be retried.
    DiskFull,
    /// The job ran past its wall-clock time limit (`submit --time-limit`, else the operator's
    /// `job_time_limit_secs`); it ended within seconds of it, the draft holding what it wrote
    /// until then. `atelier resume` continues it with the limit again.
    JobTimeLimit,
    /// A shard's owner was deposed: another coordinator holds the shard at a later epoch, so this
    /// one's write was refused (docs/adr/0014). Nothing was applied; the new owner serves it.
    ShardFenced,
    /// No coordinator owns the workbench's shard right now (a hand-over is under way); retry.
    ShardUnavailable,
    /// A shard snapshot's content does not match its digest; it is not restored.
    SnapshotCorrupt,
    /// A table tool's DuckDB work (the query, or loading the table) needed more memory than the
    /// worker's budget allows; nothing was returned. Narrow the query (filters, fewer columns,
    /// aggregate in steps) rather than retrying it unchanged.
    QueryOutOfMemory,
    /// Another coordinator already serves this NATS deployment (a store of its own, or a
    /// replicated store when this one has its own): a second would split the workbenches and
    /// jobs between two stores. Run one coordinator per deployment, or set `replicated_store`
    /// on every coordinator.
    StoreClaimed,
    /// An upload is larger than the operator allows (the dashboard's `upload_max_bytes`);
    /// nothing of it was stored.
    FileTooLarge,
}

impl ErrorCode {
    /// Every code, in declaration order (for docs and exhaustive tests).
    pub const ALL: [ErrorCode; 43] = [
        ErrorCode::ValidationFailed,
        ErrorCode::SandboxViolation,
        ErrorCode::FileReadFailed,
        ErrorCode::FileWriteFailed,
        ErrorCode::ToolWorkerUnavailable,
        ErrorCode::ToolTimeout,
        ErrorCode::DraftExists,
        ErrorCode::NoDraft,
        ErrorCode::NotFound,
        ErrorCode::ProviderNotConfigured,
        ErrorCode::ProviderAuthFailed,
        ErrorCode::ProviderRateLimited,
        ErrorCode::ProviderUnavailable,
        ErrorCode::AgentLoopDetected,
        ErrorCode::BudgetExceeded,
        ErrorCode::UserCanceled,
        ErrorCode::ApprovalRejected,
        ErrorCode::UnsupportedVersion,
        ErrorCode::ResultTooLarge,
        ErrorCode::ModelNotAllowed,
        ErrorCode::Internal,
        ErrorCode::WorkbenchBusy,
        ErrorCode::RevisionPruned,
        ErrorCode::PlanInvalid,
        ErrorCode::ItemNotDone,
        ErrorCode::ItemsFailed,
        ErrorCode::ToolCallInvalid,
        ErrorCode::ModelOutputDegenerate,
        ErrorCode::FailureThresholdExceeded,
        ErrorCode::TargetsFailed,
        ErrorCode::ToolReplyInvalid,
        ErrorCode::FileTooComplex,
        ErrorCode::ToolCrashed,
        ErrorCode::CrashLoop,
        ErrorCode::ContextOverflow,
        ErrorCode::DiskFull,
        ErrorCode::JobTimeLimit,
        ErrorCode::ShardFenced,
        ErrorCode::ShardUnavailable,
        ErrorCode::SnapshotCorrupt,
        ErrorCode::QueryOutOfMemory,
        ErrorCode::StoreClaimed,
        ErrorCode::FileTooLarge,
    ];

    /// The stable string form, e.g. `SANDBOX_VIOLATION`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ValidationFailed => "VALIDATION_FAILED",
            ErrorCode::SandboxViolation => "SANDBOX_VIOLATION",
            ErrorCode::FileReadFailed => "FILE_READ_FAILED",
            ErrorCode::FileWriteFailed => "FILE_WRITE_FAILED",
            ErrorCode::ToolWorkerUnavailable => "TOOL_WORKER_UNAVAILABLE",
            ErrorCode::ToolTimeout => "TOOL_TIMEOUT",
            ErrorCode::DraftExists => "DRAFT_EXISTS",
            ErrorCode::NoDraft => "NO_DRAFT",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::ProviderNotConfigured => "PROVIDER_NOT_CONFIGURED",
            ErrorCode::ProviderAuthFailed => "PROVIDER_AUTH_FAILED",
            ErrorCode::ProviderRateLimited => "PROVIDER_RATE_LIMITED",
            ErrorCode::ProviderUnavailable => "PROVIDER_UNAVAILABLE",
            ErrorCode::AgentLoopDetected => "AGENT_LOOP_DETECTED",
            ErrorCode::BudgetExceeded => "BUDGET_EXCEEDED",
            ErrorCode::UserCanceled => "USER_CANCELED",
            ErrorCode::ApprovalRejected => "APPROVAL_REJECTED",
            ErrorCode::UnsupportedVersion => "UNSUPPORTED_VERSION",
            ErrorCode::ResultTooLarge => "RESULT_TOO_LARGE",
            ErrorCode::ModelNotAllowed => "MODEL_NOT_ALLOWED",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::WorkbenchBusy => "WORKBENCH_BUSY",
            ErrorCode::RevisionPruned => "REVISION_PRUNED",
            ErrorCode::PlanInvalid => "PLAN_INVALID",
            ErrorCode::ItemNotDone => "ITEM_NOT_DONE",
            ErrorCode::ItemsFailed => "ITEMS_FAILED",
            ErrorCode::ToolCallInvalid => "TOOL_CALL_INVALID",
            ErrorCode::ModelOutputDegenerate => "MODEL_OUTPUT_DEGENERATE",
            ErrorCode::FailureThresholdExceeded => "FAILURE_THRESHOLD_EXCEEDED",
            ErrorCode::TargetsFailed => "TARGETS_FAILED",
            ErrorCode::ToolReplyInvalid => "TOOL_REPLY_INVALID",
            ErrorCode::FileTooComplex => "FILE_TOO_COMPLEX",
            ErrorCode::ToolCrashed => "TOOL_CRASHED",
            ErrorCode::CrashLoop => "CRASH_LOOP",
            ErrorCode::ContextOverflow => "CONTEXT_OVERFLOW",
            ErrorCode::DiskFull => "DISK_FULL",
            ErrorCode::JobTimeLimit => "JOB_TIME_LIMIT",
            ErrorCode::ShardFenced => "SHARD_FENCED",
            ErrorCode::ShardUnavailable => "SHARD_UNAVAILABLE",
            ErrorCode::SnapshotCorrupt => "SNAPSHOT_CORRUPT",
            ErrorCode::QueryOutOfMemory => "QUERY_OUT_OF_MEMORY",
            ErrorCode::StoreClaimed => "STORE_CLAIMED",
            ErrorCode::FileTooLarge => "FILE_TOO_LARGE",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of a failed reply or a failed job: a stable code and a human sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_form_matches_as_str_for_every_code() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }
}
