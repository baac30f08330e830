//! The content review of a draft (`atelier.workshop.review`): the changed paths from the
//! manifests, and for each changed file its content diff from the office pool
//! (`atelier.review.file`), which has the file readers. A file the pool cannot compare (no
//! worker, a timeout) is listed with an `unavailable` diff saying why.

use std::time::Duration;

use atelier_messages::review::{ContentDiff, DiffFile, FileDiff, Review};
use atelier_messages::store::{ManifestEntry, View};
use atelier_messages::{ErrorBody, PROTOCOL_VERSION};
use atelier_transport::Policy;

use crate::draft_store::DraftStoreHandle;

/// How long one file's diff may take.
const FILE_DIFF_TIMEOUT: Duration = Duration::from_secs(60);

fn entry_of(files: &[ManifestEntry], path: &str) -> Option<ManifestEntry> {
    files.iter().find(|file| file.path == path).cloned()
}

/// Reviews `workbench`'s draft; `sample` bounds each file's sample of changes.
pub async fn review(
    client: &async_nats::Client,
    store: &DraftStoreHandle,
    workbench: String,
    sample: Option<u32>,
) -> Result<Review, ErrorBody> {
    let paths = store.diff(workbench.clone()).await?;
    let mut review = Review {
        workbench: workbench.clone(),
        has_draft: paths.has_draft,
        added: paths.added,
        modified: paths.modified,
        deleted: paths.deleted,
        files: Vec::new(),
    };
    if !review.has_draft {
        return Ok(review);
    }
    let published = store.list_files(workbench.clone(), View::Published).await?;
    let draft = store.list_files(workbench, View::Draft).await?;
    let changed = review
        .added
        .iter()
        .chain(&review.modified)
        .chain(&review.deleted)
        .map(|path| DiffFile {
            v: PROTOCOL_VERSION,
            path: path.clone(),
            old: entry_of(&published.files, path),
            new: entry_of(&draft.files, path),
            sample,
        });
    let diffs = changed.map(|request| file_diff(client, request));
    review.files = futures::future::join_all(diffs).await;
    Ok(review)
}

async fn file_diff(client: &async_nats::Client, request: DiffFile) -> FileDiff {
    let path = request.path.clone();
    let change = match (&request.old, &request.new) {
        (None, _) => atelier_messages::review::Change::Added,
        (_, None) => atelier_messages::review::Change::Deleted,
        _ => atelier_messages::review::Change::Modified,
    };
    match atelier_transport::request(client, &request, Policy::once(FILE_DIFF_TIMEOUT)).await {
        Ok(diff) => diff,
        Err(error) => FileDiff {
            path,
            change,
            content: ContentDiff::Unavailable {
                reason: format!("the office pool could not compare it: {error}"),
            },
        },
    }
}
