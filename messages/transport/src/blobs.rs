//! Large files through JetStream's object store, between coordinators: a replicated store's
//! bucket [`BLOB_STORE_BUCKET`] holds each large blob as an object named by its lower-case hex
//! sha256, stored in chunks far below any server's
//! `max_payload`. Uploads stream from a file or a buffer; downloads stream into a temporary file
//! beside the target while the content is hashed, and only a file whose size and sha256 match
//! the name is renamed into place, so neither side holds a large file whole in memory and a
//! corrupt or truncated transfer never becomes a blob. Names are content addresses, so a
//! transfer interrupted half-way is simply repeated, and a blob already in the bucket is never
//! sent twice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::object_store::{self, ObjectStore};
use atelier_messages::store::BlobRef;
use atelier_messages::subjects::BLOB_STORE_BUCKET;
use atelier_messages::{ErrorBody, ErrorCode};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Files up to this size travel inline in their request; larger ones through the bucket.
pub const INLINE_MAX_BYTES: usize = 256 * 1024;

/// How many bytes of files one request or reply to or from `client` may carry inline: at most
/// [`INLINE_MAX_BYTES`], and at most half the server's `max_payload` (room for the rest).
pub fn inline_budget(client: &async_nats::Client) -> usize {
    match client.server_info().max_payload {
        0 => INLINE_MAX_BYTES,
        max_payload => INLINE_MAX_BYTES.min(max_payload / 2),
    }
}

/// Largest chunk of an upload; a chunk is also at most half the server's `max_payload`.
const CHUNK_BYTES: usize = 512 * 1024;

/// Read buffer of downloads and digests.
const BUFFER_BYTES: usize = 256 * 1024;

/// The blob bucket.
#[derive(Clone)]
pub struct BlobBucket {
    store: ObjectStore,
    /// The bucket's name, for messages.
    name: &'static str,
    /// The server's `max_payload` when the bucket was opened (0: unknown).
    max_payload: usize,
    uploads: Uploads,
    /// Set on a bucket whose objects are collected ([`collect`]): reused objects are freshened.
    freshness: Option<Arc<collect::Freshness>>,
}

mod collect;
pub use collect::BucketSwept;

/// Uploads under way through one bucket handle (and its clones), by digest: a second upload of
/// a digest waits for the first and then finds the object there. Two uploads of one object at
/// once would each replace it, taking its chunks away from a reader of the first (two calls of
/// a batch reading one file each had it staged).
#[derive(Clone, Default)]
struct Uploads {
    digests: Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl Uploads {
    /// The lock of `digest`'s uploads.
    fn lock_of(&self, digest: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut digests = self
            .digests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        digests.entry(digest.to_string()).or_default().clone()
    }

    /// Forgets `digest`'s lock once nobody else holds or waits for it.
    fn release(&self, digest: &str, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut digests = self
            .digests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Ours and the map's: nobody else has it.
        if Arc::strong_count(&lock) <= 2 {
            digests.remove(digest);
        }
    }
}

impl std::fmt::Debug for BlobBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlobBucket { .. }")
    }
}

fn unavailable(name: &str, what: &str, error: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ToolWorkerUnavailable,
        format!(
            "the blob bucket `{name}` is unavailable ({what}): {error}; is JetStream enabled on the NATS server?"
        ),
    )
}

/// The object store `config.bucket` as it was made, or made with `config` when missing: a
/// store made before keeps its settings (creating it again with others would be refused).
pub async fn object_store_or_create(
    jetstream: &async_nats::jetstream::Context,
    config: object_store::Config,
) -> Result<ObjectStore, async_nats::jetstream::context::CreateObjectStoreError> {
    if let Ok(store) = jetstream.get_object_store(&config.bucket).await {
        return Ok(store);
    }
    jetstream.create_object_store(config).await
}

impl BlobBucket {
    /// Opens (creating it when missing, with `replicas` copies) the bucket that keeps a
    /// replicated store's large blobs for good: a coordinator that takes the store over reads
    /// them from there. Its garbage is collected with `grace` ([`BlobBucket::collect`]): an
    /// object reused more than half of it after it was written is freshened first.
    pub async fn ensure_durable(
        client: &async_nats::Client,
        replicas: usize,
        grace: Duration,
    ) -> Result<Self, ErrorBody> {
        let jetstream = async_nats::jetstream::new(client.clone());
        let name = BLOB_STORE_BUCKET;
        let config = object_store::Config {
            bucket: name.to_string(),
            description: Some("Atelier blobs of a replicated store, named by sha256".into()),
            num_replicas: replicas,
            ..Default::default()
        };
        let store = (object_store_or_create(&jetstream, config).await)
            .map_err(|error| unavailable(name, "create", error))?;
        let freshness = collect::Freshness::open(&jetstream, name, grace).await?;
        Ok(Self {
            store,
            name,
            max_payload: client.server_info().max_payload,
            uploads: Uploads::default(),
            freshness: Some(Arc::new(freshness)),
        })
    }

    /// The size of the blob `digest` the bucket holds whole, if it does.
    pub async fn size_of(&self, digest: &str) -> Option<u64> {
        match self.store.info(digest).await {
            Ok(info) if !info.deleted => Some(info.size as u64),
            _ => None,
        }
    }

    /// Whether the bucket holds `blob` whole.
    pub async fn contains(&self, blob: &BlobRef) -> bool {
        match self.store.info(&blob.digest).await {
            Ok(info) => holds_whole(&info, blob),
            Err(_) => false,
        }
    }

    /// Uploads the file at `path`, whose content is `blob`, unless the bucket holds it already.
    pub async fn put_file(&self, path: &Path, blob: &BlobRef) -> Result<(), ErrorBody> {
        self.upload_once(blob, || async {
            let file = tokio::fs::File::open(path).await.map_err(|error| {
                ErrorBody::new(
                    ErrorCode::FileReadFailed,
                    format!("cannot read {}: {error}", path.display()),
                )
            })?;
            let mut reader = tokio::io::BufReader::with_capacity(BUFFER_BYTES, file);
            self.put(&mut reader, blob).await
        })
        .await
    }

    /// Uploads what `reader` yields (whose digest and size are `blob`) unless the bucket holds
    /// it already; for callers that watch the bytes go by (a progress bar).
    pub async fn put_reader(
        &self,
        reader: &mut (impl tokio::io::AsyncRead + Unpin),
        blob: &BlobRef,
    ) -> Result<(), ErrorBody> {
        self.upload_once(blob, || self.put(reader, blob)).await
    }

    /// Uploads `bytes` (whose digest and size are `blob`) unless the bucket holds them already.
    pub async fn put_bytes(&self, bytes: &[u8], blob: &BlobRef) -> Result<(), ErrorBody> {
        self.upload_once(blob, || async {
            let mut reader = bytes;
            self.put(&mut reader, blob).await
        })
        .await
    }

    /// Runs `upload` unless the bucket holds `blob` whole, one upload of a digest at a time.
    async fn upload_once<Upload, Uploaded>(
        &self,
        blob: &BlobRef,
        upload: Upload,
    ) -> Result<(), ErrorBody>
    where
        Upload: FnOnce() -> Uploaded,
        Uploaded: std::future::Future<Output = Result<(), ErrorBody>>,
    {
        let lock = self.uploads.lock_of(&blob.digest);
        let uploaded = {
            let _one_at_a_time = lock.lock().await;
            match self.holds(blob).await {
                Ok(true) => Ok(()),
                Ok(false) => upload().await,
                Err(error) => Err(error),
            }
        };
        self.uploads.release(&blob.digest, lock);
        uploaded
    }

    async fn put(
        &self,
        reader: &mut (impl tokio::io::AsyncRead + Unpin),
        blob: &BlobRef,
    ) -> Result<(), ErrorBody> {
        let max_payload = self.max_payload;
        let chunk = match max_payload {
            0 => CHUNK_BYTES,
            max_payload => CHUNK_BYTES.min(max_payload / 2),
        };
        let meta = object_store::ObjectMetadata {
            name: blob.digest.clone(),
            chunk_size: Some(chunk),
            ..Default::default()
        };
        let info = self
            .store
            .put(meta, reader)
            .await
            .map_err(|error| unavailable(self.name, "upload", error))?;
        if info.size as u64 != blob.size {
            return Err(ErrorBody::new(
                ErrorCode::FileReadFailed,
                format!(
                    "blob {} changed while it was uploaded ({} bytes sent, {} expected)",
                    blob.digest, info.size, blob.size
                ),
            ));
        }
        tracing::debug!(digest = %blob.digest, size = blob.size, "blob uploaded");
        Ok(())
    }

    /// The bucket's object `blob`; `NOT_FOUND` when the bucket does not hold it.
    async fn object(&self, blob: &BlobRef) -> Result<object_store::Object, ErrorBody> {
        self.store
            .get(&blob.digest)
            .await
            .map_err(|error| match error.kind() {
                object_store::GetErrorKind::NotFound => ErrorBody::new(
                    ErrorCode::NotFound,
                    format!("blob {} is not in the bucket `{}`", blob.digest, self.name),
                ),
                _ => unavailable(self.name, "download", error),
            })
    }

    /// Downloads `blob` into `target` (temp file beside it, hashed on the way, renamed only when
    /// size and sha256 match; fsynced with its directory when `durable`). `NOT_FOUND` when the
    /// bucket does not hold it. A download that receives nothing for [`STALL`] starts again
    /// once (see there).
    pub async fn fetch_to(
        &self,
        blob: &BlobRef,
        target: &Path,
        durable: bool,
    ) -> Result<(), ErrorBody> {
        let started = std::time::Instant::now();
        let temp = temp_beside(target);
        for attempt in 1.. {
            let mut object = self.object(blob).await?;
            let result = download(&mut object, blob, &temp, durable, STALL).await;
            if result.is_err() {
                let _ = tokio::fs::remove_file(&temp).await;
            }
            match result {
                Ok(()) => break,
                Err(Download::Stalled(error)) if attempt < DOWNLOADS => {
                    tracing::warn!(digest = %blob.digest, %error, "blob download stalled; starting again");
                }
                Err(Download::Stalled(error) | Download::Failed(error)) => return Err(error),
            }
        }
        put_in_place(&temp, target, durable).await?;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::info!(digest = %blob.digest, size = blob.size, elapsed_ms, "blob fetched from the bucket");
        Ok(())
    }
}

/// Whether the object `info` describes is `blob` whole: not deleted, of its size, and recorded
/// with its content's sha256 (an object of the right size whose content is another's, written
/// under its name, is not: it is uploaded again).
pub(crate) fn holds_whole(info: &object_store::ObjectInfo, blob: &BlobRef) -> bool {
    let recorded = hex::decode(&blob.digest)
        .ok()
        .map(|digest| format!("SHA-256={}", data_encoding::BASE64URL.encode(&digest)));
    !info.deleted && info.size as u64 == blob.size && recorded.is_some() && info.digest == recorded
}

/// How long a download waits for its next bytes before it gives up on that reading: an object
/// uploaded again while it is read (two processes staging one digest at once) has its first
/// chunks purged, and a reader of those waits for messages that are gone. Reading it again
/// finds the object whole. (A chunk of [`CHUNK_BYTES`] must come within it: about 50 KB/s.)
const STALL: Duration = Duration::from_secs(10);

/// Readings of an object one fetch starts at most: the first, and one after a stall.
const DOWNLOADS: u32 = 2;

/// Why a download failed.
#[derive(Debug)]
enum Download {
    /// No bytes came for the stall timeout.
    Stalled(ErrorBody),
    Failed(ErrorBody),
}

impl From<ErrorBody> for Download {
    fn from(error: ErrorBody) -> Self {
        Download::Failed(error)
    }
}

async fn download(
    object: &mut (impl tokio::io::AsyncRead + Unpin),
    blob: &BlobRef,
    temp: &Path,
    durable: bool,
    stall: Duration,
) -> Result<(), Download> {
    let mut file = Checked::create(temp).await?;
    let mut buffer = vec![0u8; BUFFER_BYTES];
    loop {
        let Ok(read) = tokio::time::timeout(stall, object.read(&mut buffer)).await else {
            return Err(Download::Stalled(ErrorBody::new(
                ErrorCode::FileReadFailed,
                format!(
                    "blob {} stalled after {} bytes: nothing came for {} s; fetch it again",
                    blob.digest,
                    file.size,
                    stall.as_secs_f64()
                ),
            )));
        };
        let read = read.map_err(|error| {
            ErrorBody::new(
                ErrorCode::FileReadFailed,
                format!("blob {} broke off in transfer: {error}", blob.digest),
            )
        })?;
        if read == 0 {
            break;
        }
        file.write(&buffer[..read]).await?;
    }
    Ok(file.finish(blob, durable).await?)
}

/// A file a transfer writes, hashed on the way: it is kept only when what arrived is the blob
/// (the caller renames it into place).
pub(crate) struct Checked<'a> {
    file: tokio::fs::File,
    path: &'a Path,
    hasher: Sha256,
    /// Bytes written so far.
    pub(crate) size: u64,
}

impl<'a> Checked<'a> {
    /// Creates the file at `path` (and its directory).
    pub(crate) async fn create(path: &'a Path) -> Result<Self, ErrorBody> {
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(write_error(parent))?;
        }
        let file = tokio::fs::File::create(path)
            .await
            .map_err(write_error(path))?;
        Ok(Self {
            file,
            path,
            hasher: Sha256::new(),
            size: 0,
        })
    }

    pub(crate) async fn write(&mut self, chunk: &[u8]) -> Result<(), ErrorBody> {
        self.hasher.update(chunk);
        self.size += chunk.len() as u64;
        self.file
            .write_all(chunk)
            .await
            .map_err(write_error(self.path))
    }

    /// Checks that what was written is `blob` (`FILE_READ_FAILED` otherwise), and flushes it
    /// (fsynced when `durable`).
    pub(crate) async fn finish(mut self, blob: &BlobRef, durable: bool) -> Result<(), ErrorBody> {
        let digest = hex::encode(self.hasher.finalize());
        if digest != blob.digest || self.size != blob.size {
            return Err(ErrorBody::new(
                ErrorCode::FileReadFailed,
                format!(
                    "blob {} arrived as {} bytes with digest {digest}; refusing corrupt content",
                    blob.digest, self.size
                ),
            ));
        }
        self.file.flush().await.map_err(write_error(self.path))?;
        if durable {
            self.file.sync_all().await.map_err(write_error(self.path))?;
        }
        Ok(())
    }
}

/// Renames a checked download `temp` to `target`, the rename made durable (its directory
/// fsynced) when `durable`.
pub(crate) async fn put_in_place(
    temp: &Path,
    target: &Path,
    durable: bool,
) -> Result<(), ErrorBody> {
    tokio::fs::rename(temp, target)
        .await
        .map_err(write_error(target))?;
    if durable && let Some(parent) = target.parent() {
        let dir = tokio::fs::File::open(parent)
            .await
            .map_err(write_error(parent))?;
        dir.sync_all().await.map_err(write_error(parent))?;
    }
    Ok(())
}

fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> ErrorBody + '_ {
    move |error| {
        ErrorBody::new(
            ErrorCode::FileWriteFailed,
            format!("cannot write {}: {error}", path.display()),
        )
    }
}

/// A path beside `target` no other download uses.
pub(crate) fn temp_beside(target: &Path) -> PathBuf {
    let mut name = target
        .file_name()
        .map(|name| name.to_os_string())
        .unwrap_or_default();
    name.push(format!(
        ".part-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    target.with_file_name(name)
}

/// The digest and size of `bytes`.
pub fn blob_of_bytes(bytes: &[u8]) -> BlobRef {
    BlobRef {
        digest: hex::encode(Sha256::digest(bytes)),
        size: bytes.len() as u64,
    }
}

/// The digest and size of the file at `path`, read in pieces on the blocking pool.
pub async fn blob_of_file(path: &Path) -> Result<BlobRef, ErrorBody> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || hash_file(&owned))
        .await
        .map_err(|error| ErrorBody::new(ErrorCode::Internal, format!("digest task: {error}")))?
        .map_err(|error| {
            ErrorBody::new(
                ErrorCode::FileReadFailed,
                format!("cannot read {}: {error}", path.display()),
            )
        })
}

fn hash_file(path: &Path) -> std::io::Result<BlobRef> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut buffer = vec![0u8; BUFFER_BYTES];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        size += read as u64;
    }
    Ok(BlobRef {
        digest: hex::encode(hasher.finalize()),
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_download_that_stops_receiving_is_told_stalled_and_a_whole_one_completes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let temp = dir.path().join("blob.part");
        let bytes = b"the first half of a blob whose rest never comes";
        let blob = blob_of_bytes(bytes);
        // The sender stays open and silent: the reader waits, as on purged chunks.
        let (mut sender, mut reader) = tokio::io::duplex(1024);
        sender
            .write_all(&bytes[..20])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let stall = Duration::from_millis(200);
        let result = download(&mut reader, &blob, &temp, false, stall).await;
        match result {
            Err(Download::Stalled(error)) => {
                assert_eq!(error.code, ErrorCode::FileReadFailed);
                assert!(
                    error.message.contains("stalled after 20 bytes"),
                    "{error:?}"
                );
            }
            other => panic!("a silent sender is a stall, not {other:?}"),
        }
        drop(sender);
        // A whole object read again completes.
        let (mut sender, mut reader) = tokio::io::duplex(1024);
        sender
            .write_all(bytes)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        drop(sender);
        let result = download(&mut reader, &blob, &temp, false, stall).await;
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(std::fs::read(&temp).unwrap_or_default(), bytes);
    }

    #[tokio::test]
    async fn file_and_bytes_digests_agree() {
        let dir = std::env::temp_dir().join(format!("atelier-blob-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let path = dir.join("data.bin");
        let bytes: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap_or_default();
        let from_file = blob_of_file(&path).await.ok();
        assert_eq!(from_file, Some(blob_of_bytes(&bytes)));
        assert_eq!(
            blob_of_bytes(b"hello").digest,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
