//! The office pool's content review verb, `atelier.review.file`: reads both versions of a file
//! (shared blob directory or `atelier.store.blob`) and compares them with the office readers
//! (see `office::review`). Served by every office worker in the `atelier-review` queue group.

use std::sync::Arc;

use atelier_messages::review::{Change, DEFAULT_SAMPLE, DiffFile, FileDiff};
use atelier_messages::store::ManifestEntry;
use atelier_messages::subjects::review;
use atelier_messages::{ErrorBody, ErrorCode, path};
use atelier_transport::{Router, TransportError};

use crate::files::FileAccess;
use crate::office;

/// The largest sample a request may ask for.
pub const MAX_SAMPLE: u32 = 1_000;

/// Serves `atelier.review.*` until the returned task is aborted.
pub(crate) async fn serve(
    client: async_nats::Client,
    files: Arc<FileAccess>,
) -> Result<tokio::task::JoinHandle<()>, TransportError> {
    Router::new(files)
        .route(|files, request: DiffFile| async move { diff_file(&files, request).await })
        .serve(client, review::WILDCARD, review::QUEUE)
        .await
}

async fn read(
    files: &FileAccess,
    entry: Option<&ManifestEntry>,
) -> Result<Option<Vec<u8>>, ErrorBody> {
    match entry {
        Some(entry) => files.read(None, entry).await.map(Some),
        None => Ok(None),
    }
}

async fn diff_file(files: &FileAccess, request: DiffFile) -> Result<FileDiff, ErrorBody> {
    let path = path::normalize(&request.path)?;
    let change = match (&request.old, &request.new) {
        (None, Some(_)) => Change::Added,
        (Some(_), None) => Change::Deleted,
        (Some(_), Some(_)) => Change::Modified,
        (None, None) => {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                "a file diff needs `old`, `new` or both",
            ));
        }
    };
    let old = read(files, request.old.as_ref()).await?;
    let new = read(files, request.new.as_ref()).await?;
    let limit = request
        .sample
        .unwrap_or(DEFAULT_SAMPLE)
        .clamp(1, MAX_SAMPLE) as usize;
    let compared = path.clone();
    let content = tokio::task::spawn_blocking(move || {
        office::review_diff(&compared, old.as_deref(), new.as_deref(), limit)
    })
    .await
    .map_err(|e| ErrorBody::new(ErrorCode::Internal, format!("review task failed: {e}")))?;
    Ok(FileDiff {
        path,
        change,
        content,
    })
}
