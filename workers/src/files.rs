//! Workbench files as a worker sees them: the request's manifest, local blob paths (shared blob
//! directory, else fetched from the DraftStore and cached), and the draft changes a call makes.
//!
//! Tools never write the draft: they stage their changes on the [`ToolCall`], and the executor
//! returns them in the reply for the caller to apply (workers hold no right to write drafts).

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use atelier_messages::store::{BlobRef, FileContent, GetBlob, INLINE_BLOB_BYTES, ManifestEntry};
use atelier_messages::tool::{DraftChanges, ToolRequest};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION, path};
use atelier_transport::Policy;
use atelier_transport::blobs::blob_of_bytes;
use atelier_transport::pieces;
use sha2::{Digest, Sha256};

mod held;

use held::{HELD_TEXT_BYTES, HeldTexts};

/// Finds a workbench file by path (normalized first: `SANDBOX_VIOLATION` on escapes).
pub(crate) fn find<'a>(
    files: &'a [ManifestEntry],
    raw_path: &str,
) -> Result<&'a ManifestEntry, ErrorBody> {
    let wanted = path::normalize(raw_path)?;
    files
        .iter()
        .find(|entry| entry.path == wanted)
        .ok_or_else(|| not_found(files, &wanted))
}

/// How many of the workbench's paths a "no such file" refusal names.
const NAMED_WHEN_NOT_FOUND: usize = 10;

/// The refusal of a path the workbench lacks, naming the paths it has (the first few, and how
/// to see the rest): a caller that mistook a file it means to write for one it reads, or
/// misspelt one, can correct itself without another call.
fn not_found(files: &[ManifestEntry], wanted: &str) -> ErrorBody {
    let named: Vec<&str> = files
        .iter()
        .take(NAMED_WHEN_NOT_FOUND)
        .map(|entry| entry.path.as_str())
        .collect();
    let has = match files.len() {
        0 => "it has no files yet".to_string(),
        count if count <= NAMED_WHEN_NOT_FOUND => format!("it has {}", named.join(", ")),
        count => format!(
            "it has {} and {} more (call list_files)",
            named.join(", "),
            count - NAMED_WHEN_NOT_FOUND
        ),
    };
    ErrorBody::new(
        ErrorCode::FileReadFailed,
        format!("no such file in the workbench: {wanted}; {has}"),
    )
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
        staged.files.extend(
            files
                .into_iter()
                .map(|(path, content)| FileContent::inline(path, content)),
        );
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

/// Reads workbench content for tool calls, and sends large draft writes to the store in
/// pieces.
pub(crate) struct FileAccess {
    client: async_nats::Client,
    blob_dir: Option<PathBuf>,
    blob_cache: PathBuf,
    /// Most bytes the fetched-blob cache keeps (least recently used blobs go first).
    cache_bytes: u64,
    /// Small texts' content, worked on without a blocking thread.
    held: std::sync::Arc<HeldTexts>,
}

impl FileAccess {
    pub(crate) fn new(
        client: async_nats::Client,
        blob_dir: Option<PathBuf>,
        cache_dir: &Path,
        cache_bytes: u64,
    ) -> Self {
        Self {
            client,
            blob_dir,
            blob_cache: cache_dir.join("blobs"),
            cache_bytes,
            held: std::sync::Arc::default(),
        }
    }

    /// A local file holding the content of `workbench`'s file `entry` (the workbench, when
    /// known, lets the store answer from its shard at once).
    pub(crate) async fn local_path(
        &self,
        workbench: Option<&str>,
        entry: &ManifestEntry,
    ) -> Result<PathBuf, ErrorBody> {
        let copies = self.copies(entry)?;
        let cached = copies.cached.clone();
        if let Ok(Some(found)) = on_disk(move || Ok(copies.find())).await {
            return Ok(found);
        }
        self.fetch(workbench, entry, &cached).await
    }

    /// The content of `workbench`'s file `entry`: a copy on disk is found and read in one
    /// blocking call (each would cost a thread hand-off), else it is fetched from the store.
    pub(crate) async fn read(
        &self,
        workbench: Option<&str>,
        entry: &ManifestEntry,
    ) -> Result<Vec<u8>, ErrorBody> {
        self.read_then(workbench, entry, Ok).await
    }

    /// Runs `work` on `workbench`'s file `entry`'s content on a blocking thread: the one that
    /// finds and reads a copy on disk (one hand-off for the read and the work), or, for a file
    /// fetched from the store, one of its own.
    pub(crate) async fn read_then<T: Send + 'static>(
        &self,
        workbench: Option<&str>,
        entry: &ManifestEntry,
        work: impl FnOnce(Vec<u8>) -> Result<T, ErrorBody> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        let copies = self.copies(entry)?;
        let cached = copies.cached.clone();
        let cannot_read = unreadable(&entry.path);
        let on_this_machine = in_thread(move || match copies.find() {
            Some(copy) => Ok(std::fs::read(copy).map_err(cannot_read).and_then(work)),
            None => Err(work),
        })
        .await?;
        let work = match on_this_machine {
            Ok(done) => return done,
            Err(work) => work,
        };
        let fetched = self.fetch(workbench, entry, &cached).await?;
        let cannot_read = unreadable(&entry.path);
        in_thread(move || std::fs::read(fetched).map_err(cannot_read).and_then(work)).await?
    }

    /// Runs `work` on the content of a text file (`work` being a scan of its bytes): on this
    /// thread when the content is held in memory ([`held`]), else as [`Self::read_then`] does,
    /// holding a small content for the next call.
    pub(crate) async fn text_then<T: Send + 'static>(
        &self,
        workbench: Option<&str>,
        entry: &ManifestEntry,
        work: impl FnOnce(Vec<u8>) -> Result<T, ErrorBody> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        if entry.size > HELD_TEXT_BYTES {
            return self.read_then(workbench, entry, work).await;
        }
        if let Some(content) = self.held.get(&entry.digest) {
            return work(content.to_vec());
        }
        let held = std::sync::Arc::clone(&self.held);
        let digest = entry.digest.clone();
        self.read_then(workbench, entry, move |content| {
            held.hold(&digest, &content);
            work(content)
        })
        .await
    }

    /// Where a copy of `entry`'s content may be on this machine.
    fn copies(&self, entry: &ManifestEntry) -> Result<LocalCopies, ErrorBody> {
        let relative = blob_relative(&entry.digest)?;
        Ok(LocalCopies {
            shared: self.blob_dir.as_ref().map(|dir| dir.join(&relative)),
            cached: self.blob_cache.join(&relative),
            size: entry.size,
        })
    }

    /// Fetches `entry` from the store into the cache at `cached` and keeps the cache bounded.
    async fn fetch(
        &self,
        workbench: Option<&str>,
        entry: &ManifestEntry,
        cached: &Path,
    ) -> Result<PathBuf, ErrorBody> {
        self.fetch_blob(workbench, entry, cached).await?;
        self.evict_beyond_bound(cached).await;
        Ok(cached.to_path_buf())
    }

    /// Fetches a blob into `target`: a small one whole, a large one in pieces, from the store.
    async fn fetch_blob(
        &self,
        workbench: Option<&str>,
        entry: &ManifestEntry,
        target: &Path,
    ) -> Result<(), ErrorBody> {
        if entry.size <= INLINE_BLOB_BYTES as u64 {
            return self.fetch_small(workbench, entry, target).await;
        }
        let blob = BlobRef {
            digest: entry.digest.clone(),
            size: entry.size,
        };
        pieces::fetch_to(&self.client, workbench, &blob, target, false, &|_| {})
            .await
            .map_err(|error| store_failure(ErrorCode::FileReadFailed, error))
    }

    /// Fetches a small blob (kept in the store's database, not always in the shared blob
    /// directory: a tool call's writes are not) whole from the store into `target`, checked
    /// against its digest.
    async fn fetch_small(
        &self,
        workbench: Option<&str>,
        entry: &ManifestEntry,
        target: &Path,
    ) -> Result<(), ErrorBody> {
        let request = GetBlob {
            v: PROTOCOL_VERSION,
            digest: entry.digest.clone(),
            workbench: workbench.map(str::to_string),
            offset: 0,
            length: None,
        };
        let reply = atelier_transport::request(&self.client, &request, Policy::STORE)
            .await
            .map_err(|error| store_failure(ErrorCode::FileReadFailed, error))?;
        let content = reply.content.into_vec();
        if sha256_hex(&content) != entry.digest {
            return Err(ErrorBody::new(
                ErrorCode::FileReadFailed,
                format!(
                    "the store answered other content for {} than its digest names",
                    entry.path
                ),
            ));
        }
        let target = target.to_path_buf();
        let written = tokio::task::spawn_blocking(move || write_whole(&target, &content)).await;
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(ErrorBody::new(
                ErrorCode::FileReadFailed,
                format!("cannot cache {}: {error}", entry.path),
            )),
            Err(error) => Err(ErrorBody::new(
                ErrorCode::Internal,
                format!("caching {} stopped: {error}", entry.path),
            )),
        }
    }

    /// Removes the least recently used cached blobs (never `keep`) until the cache fits its
    /// bound.
    async fn evict_beyond_bound(&self, keep: &Path) {
        let root = self.blob_cache.clone();
        let keep = keep.to_path_buf();
        let bound = self.cache_bytes;
        let evicted = tokio::task::spawn_blocking(move || evict(&root, bound, &keep)).await;
        if let Ok(Ok(evicted)) = evicted
            && evicted.removed > 0
        {
            tracing::info!(
                removed = evicted.removed,
                freed_bytes = evicted.freed_bytes,
                "evicted cached blobs"
            );
        }
    }

    /// The draft changes with the files beyond the inline budget
    /// ([`inline_budget`](atelier_transport::blobs::inline_budget), counted over the files in
    /// order) uploaded to `workbench`'s store in pieces and named by digest instead of carried
    /// inline.
    pub(crate) async fn stage_large_files(
        &self,
        workbench: &str,
        mut changes: DraftChanges,
    ) -> Result<DraftChanges, ErrorBody> {
        let budget = atelier_transport::blobs::inline_budget(&self.client);
        let mut inline = 0;
        for file in &mut changes.files {
            if inline + file.content.len() <= budget {
                inline += file.content.len();
                continue;
            }
            let blob = blob_of_bytes(&file.content);
            let source = pieces::Source::Bytes(&file.content);
            pieces::upload(&self.client, workbench, source, &blob, &|_| {})
                .await
                .map_err(|error| store_failure(ErrorCode::FileWriteFailed, error))?;
            *file = FileContent::staged(std::mem::take(&mut file.path), blob);
        }
        Ok(changes)
    }
}

/// What an eviction removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Evicted {
    pub(crate) removed: u64,
    pub(crate) freed_bytes: u64,
}

/// A cached file: when it was last used (its modification time), its size, its path and the
/// files that go with it (a database's write-ahead log).
pub(crate) struct Cached {
    pub(crate) used: std::time::SystemTime,
    pub(crate) bytes: u64,
    pub(crate) path: PathBuf,
    pub(crate) companions: Vec<PathBuf>,
}

impl Cached {
    /// `path` as its metadata says, with `companions` (their bytes counted, a missing one as
    /// none).
    pub(crate) fn of(path: PathBuf, companions: Vec<PathBuf>) -> std::io::Result<Self> {
        let meta = std::fs::metadata(&path)?;
        let companion_bytes: u64 = companions
            .iter()
            .map(|companion| std::fs::metadata(companion).map_or(0, |meta| meta.len()))
            .sum();
        Ok(Self {
            used: meta.modified().unwrap_or(std::time::UNIX_EPOCH),
            bytes: meta.len() + companion_bytes,
            path,
            companions,
        })
    }
}

/// Removes the oldest (by modification time, refreshed on every use) blob files under `root`
/// until their total is at most `bound` bytes; `keep` stays whatever its age.
fn evict(root: &Path, bound: u64, keep: &Path) -> std::io::Result<Evicted> {
    let mut blobs = Vec::new();
    for shard in std::fs::read_dir(root)? {
        let shard = shard?.path();
        if !shard.is_dir() {
            continue;
        }
        for blob in std::fs::read_dir(&shard)? {
            let path = blob?.path();
            let named_by_digest = path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| check_digest(name).is_ok());
            if !named_by_digest {
                continue;
            }
            blobs.push(Cached::of(path, Vec::new())?);
        }
    }
    evict_oldest(blobs, bound, keep)
}

/// Removes the least recently used of `cached` (with their companions) until their total is
/// at most `bound` bytes; `keep` stays whatever its age. A file already gone counts as removed.
pub(crate) fn evict_oldest(
    mut cached: Vec<Cached>,
    bound: u64,
    keep: &Path,
) -> std::io::Result<Evicted> {
    let mut total: u64 = cached.iter().map(|file| file.bytes).sum();
    cached.sort_by(|a, b| (a.used, &a.path).cmp(&(b.used, &b.path)));
    let mut evicted = Evicted::default();
    for file in cached {
        if total <= bound {
            break;
        }
        if file.path == keep {
            continue;
        }
        for path in std::iter::once(&file.path).chain(&file.companions) {
            match std::fs::remove_file(path) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
        total -= file.bytes;
        evicted.removed += 1;
        evicted.freed_bytes += file.bytes;
    }
    Ok(evicted)
}

/// The places a copy of a file's content may be on this machine.
struct LocalCopies {
    /// The coordinator's blob directory, when it is shared with this worker.
    shared: Option<PathBuf>,
    /// This worker's cache of fetched blobs.
    cached: PathBuf,
    size: u64,
}

impl LocalCopies {
    /// The copy to read, if one is here (blocking). Small blobs are only a cache in the
    /// shared directory (their durable copy is in the coordinator's database): a file of the
    /// wrong size is fetched from the store instead. A cached copy found is marked used.
    fn find(self) -> Option<PathBuf> {
        let has_size =
            |path: &Path| std::fs::metadata(path).is_ok_and(|meta| meta.len() == self.size);
        if let Some(shared) = self.shared.filter(|shared| has_size(shared)) {
            return Some(shared);
        }
        if !has_size(&self.cached) {
            return None;
        }
        let _ = mark_used(&self.cached);
        Some(self.cached)
    }
}

/// The `FILE_READ_FAILED` error for the workbench file `path` whose copy cannot be read.
fn unreadable(path: &str) -> impl Fn(std::io::Error) -> ErrorBody + Send + 'static {
    let path = path.to_string();
    move |error| {
        ErrorBody::new(
            ErrorCode::FileReadFailed,
            format!("cannot read {path}: {error}"),
        )
    }
}

/// `work` on a blocking thread; `INTERNAL` if it panicked.
async fn in_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ErrorBody> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| ErrorBody::new(ErrorCode::Internal, format!("read task failed: {error}")))
}

/// Runs local file work on the blocking threads.
async fn on_disk<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(std::io::Error::other)?
}

/// Writes `content` to `target` through a file beside it, so no reader sees it half written
/// (blocking).
fn write_whole(target: &Path, content: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let temp = temp_path_for(target);
    std::fs::write(&temp, content)?;
    std::fs::rename(&temp, target)
}

/// Sets a cached file's modification time to now: the order of eviction (blocking).
pub(crate) fn mark_used(path: &Path) -> std::io::Result<()> {
    std::fs::File::options()
        .append(true)
        .open(path)
        .and_then(|file| file.set_modified(std::time::SystemTime::now()))
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
        assert_eq!(
            missing.message,
            "no such file in the workbench: b.csv; it has data/a.csv"
        );
        assert_eq!(
            find(&[], "b.csv").unwrap_err().message,
            "no such file in the workbench: b.csv; it has no files yet"
        );
        let many: Vec<ManifestEntry> = (1..=12).map(|n| entry(&format!("f{n}.txt"))).collect();
        assert_eq!(
            find(&many, "b.csv").unwrap_err().message,
            "no such file in the workbench: b.csv; it has f1.txt, f2.txt, f3.txt, f4.txt, \
             f5.txt, f6.txt, f7.txt, f8.txt, f9.txt, f10.txt and 2 more (call list_files)"
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
    fn eviction_removes_least_recently_used_blobs_down_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("blobs");
        let mut paths = Vec::new();
        for (age, content) in [(300u64, "old"), (200, "mid"), (100, "new")] {
            let digest = sha256_hex(content.as_bytes());
            let path = root.join(blob_relative(&digest).unwrap());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, vec![b'x'; 1000]).unwrap();
            let used = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
            std::fs::File::options()
                .append(true)
                .open(&path)
                .unwrap()
                .set_modified(used)
                .unwrap();
            paths.push(path);
        }
        std::fs::write(root.join("not-a-blob"), vec![b'x'; 5000]).unwrap();
        // The oldest is kept because it was just fetched; the next oldest goes.
        let evicted = evict(&root, 2000, &paths[0]).unwrap();
        assert_eq!(
            evicted,
            Evicted {
                removed: 1,
                freed_bytes: 1000
            }
        );
        assert!(paths[0].exists());
        assert!(!paths[1].exists());
        assert!(paths[2].exists());
        assert!(root.join("not-a-blob").exists());
        assert_eq!(evict(&root, 2000, &paths[0]).unwrap(), Evicted::default());
    }
}
