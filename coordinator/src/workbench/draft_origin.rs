//! When and by what each workbench's draft was started, kept in the workshop tree
//! (`<wb>\0draft-origin`; the manifests tree holds manifests only): written in the transaction
//! that creates the draft, removed with it.

use std::time::Duration;

use atelier_messages::now_ms;
use atelier_messages::store::DraftOrigin;

use super::{Workbenches, key};
use crate::error::CoordinatorError;
use crate::jobs::JobRecord;
use crate::storage::txn::{TxResult, put};
use crate::storage::{self, TxTree, trees};

/// How old a draft is before history, chat and the dashboard point it out (24 h).
pub const DEFAULT_STALE_DRAFT_SECS: u64 = 24 * 3600;

fn origin_key(workbench: &str) -> Vec<u8> {
    key(workbench, "draft-origin")
}

/// Records the origin of a draft being created (inside the transaction that creates it).
pub(crate) fn begin(workshop: &TxTree<'_>, workbench: &str, origin: &DraftOrigin) -> TxResult<()> {
    put(workshop, &origin_key(workbench), origin)
}

/// Forgets the origin of a draft that is gone.
pub(crate) fn end(workshop: &TxTree<'_>, workbench: &str) -> TxResult<()> {
    workshop.remove(origin_key(workbench))?;
    Ok(())
}

impl Workbenches {
    /// The origin of a draft the job running on `workbench` (if any) would start now.
    pub(crate) fn new_draft_origin(
        &self,
        workbench: &str,
    ) -> Result<DraftOrigin, CoordinatorError> {
        let job_id = self.workshop_state(workbench)?.running_job;
        let job = match &job_id {
            Some(job_id) => {
                storage::get::<JobRecord>(&self.storage.tree(trees::JOBS)?, job_id.as_bytes())?
            }
            None => None,
        };
        Ok(DraftOrigin {
            started_at_ms: now_ms(),
            job_id,
            message_id: job.as_ref().and_then(|job| job.message_id.clone()),
            batch_id: job.and_then(|job| job.batch_id),
            stale: false,
        })
    }

    /// The origin of the workbench's draft (none without a draft), `stale` when it is older
    /// than the coordinator's limit.
    pub fn draft_origin(&self, workbench: &str) -> Result<Option<DraftOrigin>, CoordinatorError> {
        if self.manifest(workbench, "draft")?.is_none() {
            return Ok(None);
        }
        let stored: Option<DraftOrigin> =
            storage::get(&self.storage.tree(trees::WORKSHOP)?, &origin_key(workbench))?;
        Ok(stored.map(|mut origin| {
            origin.stale = is_stale(origin.started_at_ms, self.stale_draft_after);
            origin
        }))
    }
}

fn is_stale(started_at_ms: u64, after: Duration) -> bool {
    let age = Duration::from_millis(now_ms().saturating_sub(started_at_ms));
    age > after
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_is_stale_past_the_limit() {
        let day = Duration::from_secs(DEFAULT_STALE_DRAFT_SECS);
        assert!(!is_stale(now_ms() - 3_600_000, day));
        assert!(is_stale(now_ms() - 25 * 3_600_000, day));
    }
}
