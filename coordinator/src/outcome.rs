//! What a job did to its workbench ([`JobOutcome`]): its files when it first started,
//! journaled, against its files when it ended, both as the store lists them.

use std::collections::BTreeMap;

use atelier_agents::rpi::AgentHost;
use atelier_messages::job::JobOutcome;
use atelier_messages::{ErrorBody, ErrorCode, journal};

use crate::host::JobHost;
use crate::storage::Durability;

/// A workbench's current files: path → digest.
pub(crate) type Files = BTreeMap<String, String>;

/// The files when the job first started: listed and journaled (`files/job`) the first time,
/// recalled by every later run, so a restarted or resumed job is compared with where it began.
pub(crate) async fn files_at_start(host: &JobHost) -> Result<Files, ErrorBody> {
    let key = journal::job_files();
    if let Some(journaled) = host.recall(&key).await? {
        return serde_json::from_value(journaled).map_err(|error| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!("the journaled files of the job's start are corrupt: {error}"),
            )
        });
    }
    let files = current_files(host).await?;
    let value = serde_json::to_value(&files)
        .map_err(|error| ErrorBody::new(ErrorCode::Internal, error.to_string()))?;
    // Staged: until a later step's commit makes it durable, nothing the job
    // did is, so a run after a crash lists the same files again.
    host.journal(&key, &value, Durability::Stage).await?;
    Ok(files)
}

/// What the job changed since it started with `before`.
pub(crate) async fn since(host: &JobHost, before: &Files) -> Result<JobOutcome, ErrorBody> {
    Ok(JobOutcome::between(before, &current_files(host).await?))
}

async fn current_files(host: &JobHost) -> Result<Files, ErrorBody> {
    Ok(host
        .files()
        .await?
        .into_iter()
        .map(|file| (file.path, file.digest))
        .collect())
}
