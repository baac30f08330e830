//! Why a workbench refuses a message or a change now: a job is answering on it
//! (`WORKBENCH_BUSY`), or it has a draft the message does not continue (`DRAFT_EXISTS`).

use atelier_messages::{ErrorBody, ErrorCode};

use super::tx::{Tx, TxResult, WorkshopState, get};
use super::{WorkbenchRecord, abort, not_found};

fn busy(workbench: &str, job_id: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::WorkbenchBusy,
        format!(
            "job `{job_id}` is answering on workbench `{workbench}`; wait for it (`atelier watch {job_id}`) or cancel it"
        ),
    )
}

fn draft_exists(workbench: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::DraftExists,
        format!(
            "workbench `{workbench}` has a draft; publish or discard it first (`atelier draft publish|discard {workbench}`), or pass --continue-draft to keep working on it"
        ),
    )
}

/// Why a new message would be refused now, if it would.
pub(super) fn refusal(
    tx: &Tx<'_>,
    workbench: &str,
    continue_draft: bool,
) -> TxResult<Option<ErrorBody>> {
    if get::<WorkbenchRecord>(tx.records, workbench.as_bytes())?.is_none() {
        return Ok(Some(not_found(workbench).to_body()));
    }
    let running = tx.state(workbench)?.running_job;
    let has_draft = tx.draft(workbench)?.is_some();
    Ok(refusal_of(workbench, running, has_draft, continue_draft))
}

/// Why an existing workbench refuses a message: a job runs on it, or it has a draft the
/// message does not continue.
pub(super) fn refusal_of(
    workbench: &str,
    running_job: Option<String>,
    has_draft: bool,
    continue_draft: bool,
) -> Option<ErrorBody> {
    if let Some(job_id) = running_job {
        return Some(busy(workbench, &job_id));
    }
    if !continue_draft && has_draft {
        return Some(draft_exists(workbench));
    }
    None
}

/// Refuses when a job runs on the workbench.
pub(super) fn ensure_idle(state: &WorkshopState, workbench: &str) -> TxResult<()> {
    match &state.running_job {
        Some(job_id) => Err(abort(busy(workbench, job_id).into())),
        None => Ok(()),
    }
}
