//! Uploads from the browser: `POST /api/workbenches/{name}/files` with `multipart/form-data`,
//! one part per file named by its part's file name (a path in the workbench). Each part is
//! spooled to a temporary file (never held in memory), refused with `FILE_TOO_LARGE` (413) past
//! [`MAX_UPLOAD_BYTES`] (at once when the request's length says so), then added as `atelier wb
//! add` adds it: small files inline, large ones through the blob store, to the published state
//! when there is no draft (else `DRAFT_EXISTS`); the store refuses a path leaving the workbench
//! (`SANDBOX_VIOLATION`). A crafted office file is stored as `wb add` stores it: what reads it
//! (a preview, a tool) is refused with its code (`FILE_TOO_COMPLEX`).

use std::path::{Path as FsPath, PathBuf};
use std::time::Duration;

use atelier_messages::store::{AddFiles, FileContent, Listing};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use atelier_transport::Policy;
use atelier_transport::blobs::{blob_of_file, inline_budget};
use atelier_transport::pieces::{self, Source};
use axum::extract::multipart::{Field, Multipart, MultipartRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use tokio::io::AsyncWriteExt;

use super::requests::{Shared, answer, coded};

/// The largest upload the dashboard takes, all its files together.
pub const MAX_UPLOAD_BYTES: u64 = 1 << 30;
/// How long the store may take to import what was uploaded.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(900);

/// The body limit of the upload route (the multipart framing beyond the files' bytes).
pub(super) fn body_limit() -> DefaultBodyLimit {
    DefaultBodyLimit::max(usize::try_from(MAX_UPLOAD_BYTES).unwrap_or(usize::MAX) + (1 << 20))
}

/// `POST /api/workbenches/{name}/files`: adds the request's files; `{"ok": Listing}`.
pub(super) async fn upload(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Response {
    if declared_length(&headers).is_some_and(|length| length > MAX_UPLOAD_BYTES) {
        return coded(too_large());
    }
    let multipart = match multipart {
        Ok(multipart) => multipart,
        Err(rejection) => return coded(invalid(&rejection.body_text())),
    };
    let result = async {
        let spool = tempfile::tempdir().map_err(|error| internal(&error))?;
        let parts = spool_parts(multipart, spool.path()).await?;
        let files = contents(&state.nats, &name, &parts).await?;
        add(&state.nats, &name, files).await
    };
    answer(result.await.map_err(coded))
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A part spooled to disk: its path in the workbench and where its bytes are.
struct Spooled {
    path: String,
    local: PathBuf,
    size: u64,
}

/// Writes every file part under `dir`, refusing past [`MAX_UPLOAD_BYTES`] in all.
async fn spool_parts(mut multipart: Multipart, dir: &FsPath) -> Result<Vec<Spooled>, ErrorBody> {
    let mut parts = Vec::new();
    let mut total = 0;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|error| invalid(&error.body_text()))?
    {
        let Some(path) = field.file_name().map(str::to_string) else {
            continue;
        };
        let local = dir.join(format!("part-{}", parts.len()));
        let size = spool(field, &local, MAX_UPLOAD_BYTES - total).await?;
        total += size;
        parts.push(Spooled { path, local, size });
    }
    if parts.is_empty() {
        return Err(invalid(
            "the request holds no file part (multipart/form-data, `file` parts with a file name)",
        ));
    }
    Ok(parts)
}

/// Writes one part to `local`; `FILE_TOO_LARGE` past `room` bytes.
async fn spool(mut field: Field<'_>, local: &FsPath, room: u64) -> Result<u64, ErrorBody> {
    let mut file = tokio::fs::File::create(local)
        .await
        .map_err(|error| internal(&error))?;
    let mut size: u64 = 0;
    while let Some(chunk) = field
        .chunk()
        .await
        .map_err(|error| invalid(&error.body_text()))?
    {
        size += chunk.len() as u64;
        if size > room {
            return Err(too_large());
        }
        file.write_all(&chunk)
            .await
            .map_err(|error| internal(&error))?;
    }
    file.flush().await.map_err(|error| internal(&error))?;
    Ok(size)
}

/// The parts as the store takes them: inline while they fit the inline budget together, the
/// others uploaded to the blob store first.
async fn contents(
    nats: &async_nats::Client,
    workbench: &str,
    parts: &[Spooled],
) -> Result<Vec<FileContent>, ErrorBody> {
    let budget = inline_budget(nats) as u64;
    let mut inline_bytes = 0;
    let mut files = Vec::with_capacity(parts.len());
    for part in parts {
        if inline_bytes + part.size <= budget {
            inline_bytes += part.size;
            let bytes = tokio::fs::read(&part.local)
                .await
                .map_err(|error| internal(&error))?;
            files.push(FileContent::inline(part.path.clone(), bytes));
            continue;
        }
        let blob = blob_of_file(&part.local).await?;
        pieces::upload(nats, workbench, Source::File(&part.local), &blob, &|_| {}).await?;
        files.push(FileContent::staged(part.path.clone(), blob));
    }
    Ok(files)
}

async fn add(
    nats: &async_nats::Client,
    workbench: &str,
    files: Vec<FileContent>,
) -> Result<Listing, ErrorBody> {
    let add = AddFiles {
        v: PROTOCOL_VERSION,
        workbench: workbench.to_string(),
        files,
    };
    atelier_transport::request(nats, &add, Policy::once(IMPORT_TIMEOUT)).await
}

fn too_large() -> ErrorBody {
    ErrorBody::new(
        ErrorCode::FileTooLarge,
        format!(
            "the upload is larger than the {} MiB the dashboard takes; add the file with \
             `atelier wb add` instead",
            MAX_UPLOAD_BYTES >> 20
        ),
    )
}

fn invalid(why: &str) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, format!("not an upload: {why}"))
}

fn internal(error: &dyn std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Internal,
        format!("cannot spool the upload: {error}"),
    )
}
