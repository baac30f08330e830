//! Workbench files as a worker sees them: the request's manifest, local blob paths (shared blob
//! directory, else fetched from the DraftStore and cached), and the draft changes a call makes.
//!
//! Tools never write the draft: they stage their changes on the [`ToolCall`], and the executor
//! returns them in the reply for the caller to apply (workers hold no right to write drafts).

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use atelier_messages::store::{FileContent, GetBlob, ManifestEntry};
use atelier_messages::tool::{DraftChanges, ToolRequest};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION, path};
use atelier_transport::Policy;
use serde_bytes::ByteBuf;
use sha2::{Digest, Sha256};

/// Finds a workbench file by path (normalized first: `SANDBOX_VIOLATION` on escapes).
pub(crate) fn find<'a>(
    files: &'a [ManifestEntry],
    raw_path: &str,
) -> Result<&'a ManifestEntry, ErrorBody> {
    let wanted = path::normalize(raw_path)?;
    files
        .iter()
        .find(|entry| entry.path == wanted)
        .ok_or_else(|| {
            ErrorBody::new(
                ErrorCode::FileReadFailed,
                format!("no such file in the workbench: {wanted}; call list_files"),
            )
        })
}

/// Lower-case hex sha256.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A path beside `target` that no other writer uses, for write-then-rename.
pub(crate) fn temp_path_for(target: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let serial = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = target
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(".tmp-{}-{serial}", std::process::id()));
    target.with_file_name(name)
}

/// Refuses a digest that is not 64 lower-case hex digits (digests become file names).
pub(crate) fn check_digest(digest: &str) -> Result<(), ErrorBody> {
    let valid = digest.len() == 64
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if valid {
        return Ok(());
    }
    Err(ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!("manifest digest {digest:?} is not a lower-case hex sha256"),
    ))
}

/// `<digest[0..2]>/<digest>`.
fn blob_relative(digest: &str) -> Result<PathBuf, ErrorBody> {
    check_digest(digest)?;
    Ok(Path::new(&digest[..2]).join(digest))
}

/// One tool call as the tools see it: the request (through `Deref`) and the draft changes the
/// call stages.
pub(crate) struct ToolCall {
    request: ToolRequest,
    staged: Mutex<DraftChanges>,
}

impl ToolCall {
    pub(crate) fn new(request: ToolRequest) -> Self {
        Self {
            request,
            staged: Mutex::new(DraftChanges::default()),
        }
    }

    /// Stages one file for the draft.
    pub(crate) fn write(&self, path: &str, content: Vec<u8>) {
        self.change(vec![(path.to_string(), content)], Vec::new());
    }

    /// Stages files to write and then paths to remove, applied atomically and once per call
    /// id (a rename is the new path in `files` and the old one in `delete`).
    pub(crate) fn change(&self, files: Vec<(String, Vec<u8>)>, delete: Vec<String>) {
        let mut staged = self
            .staged
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        staged
            .files
            .extend(files.into_iter().map(|(path, content)| FileContent {
                path,
                content: ByteBuf::from(content),
            }));
        staged.delete.extend(delete);
    }

    /// The request and what the call staged.
    pub(crate) fn finish(self) -> (ToolRequest, DraftChanges) {
        let staged = self
            .staged
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (self.request, staged)
    }
}

impl Deref for ToolCall {
    type Target = ToolRequest;

    fn deref(&self) -> &ToolRequest {
        &self.request
    }
}

/// Reads workbench content for tool calls.
pub(crate) struct FileAccess {
    client: async_nats::Client,
    blob_dir: Option<PathBuf>,
    blob_cache: PathBuf,
}

impl FileAccess {
    pub(crate) fn new(
        client: async_nats::Client,
        blob_dir: Option<PathBuf>,
        cache_dir: &Path,
    ) -> Self {
        Self {
            client,
            blob_dir,
            blob_cache: cache_dir.join("blobs"),
        }
    }

    /// A local file holding the entry's content.
    pub(crate) async fn local_path(&self, entry: &ManifestEntry) -> Result<PathBuf, ErrorBody> {
        let relative = blob_relative(&entry.digest)?;
        // Small blobs are only a cache in the shared directory (their durable copy is in the
        // coordinator's database): a file of the wrong size is fetched from the store instead.
        if let Some(shared) = self.blob_dir.as_ref().map(|dir| dir.join(&relative))
            && has_size(&shared, entry.size).await
        {
            return Ok(shared);
        }
        let cached = self.blob_cache.join(&relative);
        if !exists(&cached).await {
            self.fetch_blob(&entry.digest, cached.clone()).await?;
        }
        Ok(cached)
    }

    /// The entry's content.
    pub(crate) async fn read(&self, entry: &ManifestEntry) -> Result<Vec<u8>, ErrorBody> {
        let local = self.local_path(entry).await?;
        tokio::fs::read(&local).await.map_err(|e| {
            ErrorBody::new(
                ErrorCode::FileReadFailed,
                format!("cannot read {}: {e}", entry.path),
            )
        })
    }

    async fn fetch_blob(&self, digest: &str, target: PathBuf) -> Result<(), ErrorBody> {
        let get = GetBlob {
            v: PROTOCOL_VERSION,
            digest: digest.to_string(),
        };
        let blob = atelier_transport::request(&self.client, &get, Policy::STORE)
            .await
            .map_err(|error| store_failure(ErrorCode::FileReadFailed, error))?;
        let digest = digest.to_string();
        tokio::task::spawn_blocking(move || store_verified(&blob.content, &digest, &target))
            .await
            .map_err(|e| {
                ErrorBody::new(ErrorCode::Internal, format!("blob cache task failed: {e}"))
            })?
    }
}

/// A store request that failed in transport is the tool's read or write failure.
fn store_failure(code: ErrorCode, error: ErrorBody) -> ErrorBody {
    match error.code {
        ErrorCode::ToolWorkerUnavailable | ErrorCode::ToolTimeout => ErrorBody::new(
            code,
            format!("the DraftStore did not answer: {}", error.message),
        ),
        _ => error,
    }
}

async fn exists(path: &Path) -> bool {
    tokio::fs::try_exists(path).await.unwrap_or(false)
}

async fn has_size(path: &Path, size: u64) -> bool {
    tokio::fs::metadata(path)
        .await
        .is_ok_and(|meta| meta.len() == size)
}

/// Checks a fetched blob against its digest and caches it atomically.
fn store_verified(content: &[u8], digest: &str, target: &Path) -> Result<(), ErrorBody> {
    let actual = sha256_hex(content);
    if actual != digest {
        return Err(ErrorBody::new(
            ErrorCode::FileReadFailed,
            format!("blob {digest} from the store has digest {actual}; refusing corrupt content"),
        ));
    }
    let cache_error = |e: std::io::Error| {
        ErrorBody::new(
            ErrorCode::Internal,
            format!("cannot cache blob {digest}: {e}"),
        )
    };
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(cache_error)?;
    }
    let temp = temp_path_for(target);
    std::fs::write(&temp, content).map_err(cache_error)?;
    std::fs::rename(&temp, target).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        cache_error(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> ManifestEntry {
        ManifestEntry {
            path: path.into(),
            digest: "ab".repeat(32),
            size: 3,
            kind: path::kind_of(path).into(),
        }
    }

    #[test]
    fn finds_normalized_paths_and_refuses_escapes() {
        let files = vec![entry("data/a.csv")];
        assert_eq!(
            find(&files, "./data//a.csv").map(|e| e.path.as_str()),
            Ok("data/a.csv")
        );
        let missing = find(&files, "b.csv").unwrap_err();
        assert_eq!(missing.code, ErrorCode::FileReadFailed);
        assert!(
            missing
                .message
                .contains("no such file in the workbench: b.csv; call list_files")
        );
        assert_eq!(
            find(&files, "../a.csv").unwrap_err().code,
            ErrorCode::SandboxViolation
        );
        assert_eq!(
            find(&files, "/etc/passwd").unwrap_err().code,
            ErrorCode::SandboxViolation
        );
    }

    #[test]
    fn digests_must_be_hex_before_becoming_paths() {
        let digest = sha256_hex(b"abc");
        assert_eq!(
            blob_relative(&digest).unwrap(),
            Path::new(&digest[..2]).join(&digest)
        );
        for bad in [
            "../../etc/passwd",
            "AB",
            &"G".repeat(64),
            &digest.to_uppercase(),
        ] {
            assert_eq!(
                blob_relative(bad).unwrap_err().code,
                ErrorCode::ValidationFailed,
                "{bad}"
            );
        }
    }

    #[test]
    fn verified_store_refuses_wrong_content_and_caches_right_content() {
        let dir = tempfile::tempdir().unwrap();
        let digest = sha256_hex(b"hello");
        let target = dir
            .path()
            .join("blobs")
            .join(blob_relative(&digest).unwrap());
        let err = store_verified(b"other", &digest, &target).unwrap_err();
        assert_eq!(err.code, ErrorCode::FileReadFailed);
        assert!(!target.exists());
        store_verified(b"hello", &digest, &target).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"hello");
    }
}
