//! Garbage collection of a bucket whose objects are kept for good (a replicated store's): an
//! object that no shard references and that was neither written nor reused within the grace
//! period is removed. Both sides change an object's metadata only if it is still the one they
//! read (the server checks the subject's last sequence), so a removal and a reuse cannot both
//! win:
//!
//! - a writer about to reference an object written more than half the grace period ago
//!   freshens it first (its metadata rewritten with the time now); if that write is refused,
//!   it looks again and uploads the object anew if it was removed;
//! - a collection removes an object only if it was not freshened within the grace period
//!   before the references were gathered, by a tombstone written under the same check, then
//!   the object's chunks.
//!
//! Chunks no object names (an upload that died before its metadata, a removal whose purge
//! failed) are removed too, once their last chunk is older than the grace period.
//!
//! A writer that references an object within half the grace period of reading it (far more
//! than any write takes) is thus never left with a removed object, whichever comes first.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, SystemTime};

use async_nats::datetime::{self, DateTime};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::object_store::ObjectInfo;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use atelier_messages::store::BlobRef;
use atelier_messages::{ErrorBody, ErrorCode};
use futures::StreamExt;

use super::{BlobBucket, unavailable};

/// What a bucket collected needs: its stream, to read an object's metadata with its sequence
/// and write it under a check of that sequence.
pub(super) struct Freshness {
    stream: Stream,
    jetstream: async_nats::jetstream::Context,
    grace: Duration,
}

impl Freshness {
    pub(super) async fn open(
        jetstream: &async_nats::jetstream::Context,
        bucket: &str,
        grace: Duration,
    ) -> Result<Self, ErrorBody> {
        let stream = (jetstream.get_stream(format!("OBJ_{bucket}")).await)
            .map_err(|error| unavailable(bucket, "open its stream", error))?;
        Ok(Self {
            stream,
            jetstream: jetstream.clone(),
            grace,
        })
    }
}

/// What a collection of the bucket removed and kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketSwept {
    pub removed: u64,
    pub freed_bytes: u64,
    pub kept: u64,
    /// Sets of chunks no object's metadata names (an upload that died before writing it, a
    /// removal whose purge failed), removed.
    pub orphans: u64,
}

/// An object's metadata as last written, and the stream sequence of that write.
struct Meta {
    info: ObjectInfo,
    seq: u64,
}

/// `at` minus `span`, as the object store's time type.
fn before(at: SystemTime, span: Duration) -> Option<DateTime> {
    let nanos = at.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_nanos() as i128;
    datetime::from_nanos(nanos - span.as_nanos() as i128).ok()
}

/// Whether `info` was written (or freshened) before `cutoff`.
fn older_than(info: &ObjectInfo, cutoff: Option<DateTime>) -> bool {
    match (info.modified, cutoff) {
        (Some(modified), Some(cutoff)) => modified < cutoff,
        _ => false,
    }
}

impl BlobBucket {
    fn freshness(&self) -> Result<&Freshness, ErrorBody> {
        self.freshness.as_deref().ok_or_else(|| {
            ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("the bucket `{}` is not collected", self.name),
            )
        })
    }

    fn meta_subject(&self, digest: &str) -> String {
        let name = data_encoding::BASE64URL.encode(digest.as_bytes());
        format!("$O.{}.M.{name}", self.name)
    }

    /// The metadata of object `digest` as last written; `None` when it never was.
    async fn meta(&self, digest: &str) -> Result<Option<Meta>, ErrorBody> {
        let freshness = self.freshness()?;
        let subject = self.meta_subject(digest);
        let message = match freshness
            .stream
            .get_last_raw_message_by_subject(&subject)
            .await
        {
            Ok(message) => message,
            Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => {
                return Ok(None);
            }
            Err(error) => return Err(unavailable(self.name, "read an object's metadata", error)),
        };
        let info: ObjectInfo = serde_json::from_slice(&message.payload).map_err(|error| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!(
                    "the metadata of {digest} in `{}` is unreadable: {error}",
                    self.name
                ),
            )
        })?;
        Ok(Some(Meta {
            info,
            seq: message.sequence,
        }))
    }

    /// Writes `info` as its object's metadata if the last written is still at `seq`; false when
    /// it is not (the object changed meanwhile).
    async fn write_meta_if(&self, info: &ObjectInfo, seq: u64) -> Result<bool, ErrorBody> {
        let freshness = self.freshness()?;
        let payload = serde_json::to_vec(info).map_err(|error| {
            ErrorBody::new(ErrorCode::Internal, format!("object metadata: {error}"))
        })?;
        let message = PublishMessage::build()
            .payload(payload.into())
            .header("Nats-Rollup", "sub")
            .expected_last_subject_sequence(seq);
        let subject = self.meta_subject(&info.name);
        let refused = |error: async_nats::jetstream::context::PublishError| match error.kind() {
            PublishErrorKind::WrongLastSequence => Ok(false),
            _ => Err(unavailable(self.name, "write an object's metadata", error)),
        };
        let ack = match freshness.jetstream.send_publish(subject, message).await {
            Ok(ack) => ack,
            Err(error) => return refused(error),
        };
        match ack.await {
            Ok(_) => Ok(true),
            Err(error) => refused(error),
        }
    }

    /// Whether the bucket holds `blob` whole; on a collected bucket, an object written more
    /// than half the grace period ago is freshened first, and one removed meanwhile is not
    /// held (the caller uploads it).
    pub(super) async fn holds(&self, blob: &BlobRef) -> Result<bool, ErrorBody> {
        let Some(freshness) = self.freshness.as_deref() else {
            return Ok(self.contains(blob).await);
        };
        for _ in 0..3 {
            let Some(Meta { mut info, seq }) = self.meta(&blob.digest).await? else {
                return Ok(false);
            };
            if !super::holds_whole(&info, blob) {
                return Ok(false);
            }
            if !older_than(&info, before(SystemTime::now(), freshness.grace / 2)) {
                return Ok(true);
            }
            info.modified = Some(datetime::now());
            if self.write_meta_if(&info, seq).await? {
                tracing::debug!(digest = %blob.digest, "reused blob freshened");
                return Ok(true);
            }
        }
        // Changed under us each time: uploading it anew is always safe.
        Ok(false)
    }

    /// Removes every object not in `referenced` and not written or freshened within the grace
    /// period before `gathered` (when the gathering of the references began).
    pub async fn collect(
        &self,
        referenced: &BTreeSet<String>,
        gathered: SystemTime,
    ) -> Result<BucketSwept, ErrorBody> {
        let freshness = self.freshness()?;
        let cutoff = before(gathered, freshness.grace);
        let mut listed = (self.store.list().await)
            .map_err(|error| unavailable(self.name, "list its objects", error))?;
        let mut candidates = Vec::new();
        let mut live = HashSet::new();
        let mut swept = BucketSwept::default();
        while let Some(info) = listed.next().await {
            let info = info.map_err(|error| unavailable(self.name, "list its objects", error))?;
            if info.deleted {
                continue;
            }
            live.insert(info.nuid.clone());
            match referenced.contains(&info.name) || !older_than(&info, cutoff) {
                true => swept.kept += 1,
                false => candidates.push(info.name),
            }
        }
        for digest in candidates {
            match self.remove_if_old(&digest, cutoff).await? {
                Some(bytes) => {
                    swept.removed += 1;
                    swept.freed_bytes += bytes;
                }
                None => swept.kept += 1,
            }
        }
        swept.orphans = self.remove_orphan_chunks(&live, cutoff).await?;
        Ok(swept)
    }

    /// Removes the chunks of every upload no listed object names (`live`: the listed objects'
    /// upload ids) whose last chunk is older than `cutoff`; an upload under way, whose chunks
    /// are new, is left alone. How many uploads' chunks were removed.
    async fn remove_orphan_chunks(
        &self,
        live: &HashSet<String>,
        cutoff: Option<DateTime>,
    ) -> Result<u64, ErrorBody> {
        let freshness = self.freshness()?;
        let Some(cutoff) = cutoff else {
            return Ok(0);
        };
        let prefix = format!("$O.{}.C.", self.name);
        let mut subjects = (freshness
            .stream
            .info_with_subjects(format!("{prefix}>"))
            .await)
            .map_err(|error| unavailable(self.name, "list its chunks", error))?;
        let mut orphans = Vec::new();
        while let Some(entry) = subjects.next().await {
            let (subject, _) =
                entry.map_err(|error| unavailable(self.name, "list its chunks", error))?;
            let nuid = subject.strip_prefix(&prefix).unwrap_or_default();
            if !nuid.is_empty() && !live.contains(nuid) {
                orphans.push(subject);
            }
        }
        let mut removed = 0;
        for subject in orphans {
            let last = freshness
                .stream
                .get_last_raw_message_by_subject(&subject)
                .await;
            if !last.is_ok_and(|message| message.time < cutoff) {
                continue;
            }
            (freshness.stream.purge().filter(&subject).await)
                .map_err(|error| unavailable(self.name, "remove orphan chunks", error))?;
            removed += 1;
        }
        if removed > 0 {
            tracing::info!(
                removed,
                bucket = self.name,
                "chunks no object names removed"
            );
        }
        Ok(removed)
    }

    /// Removes object `digest` if it is still older than `cutoff` when its tombstone is
    /// written; its size when removed.
    async fn remove_if_old(
        &self,
        digest: &str,
        cutoff: Option<DateTime>,
    ) -> Result<Option<u64>, ErrorBody> {
        let freshness = self.freshness()?;
        let Some(Meta { info, seq }) = self.meta(digest).await? else {
            return Ok(None);
        };
        if info.deleted || !older_than(&info, cutoff) {
            return Ok(None);
        }
        let size = info.size as u64;
        let nuid = info.nuid.clone();
        let tombstone = ObjectInfo {
            deleted: true,
            chunks: 0,
            size: 0,
            ..info
        };
        if !self.write_meta_if(&tombstone, seq).await? {
            return Ok(None);
        }
        let chunks = format!("$O.{}.C.{nuid}", self.name);
        (freshness.stream.purge().filter(&chunks).await)
            .map_err(|error| unavailable(self.name, "remove an object's chunks", error))?;
        tracing::info!(
            digest,
            size,
            bucket = self.name,
            "unreferenced blob removed"
        );
        Ok(Some(size))
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Child, Command, Stdio};

    use super::*;

    /// A throwaway nats-server with JetStream (on the PATH: scripts/setup.sh), killed on drop
    /// before its store directory is removed.
    struct Server {
        child: Child,
        _store: tempfile::TempDir,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    async fn server() -> (Server, async_nats::Client) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|listener| listener.local_addr())
            .map(|address| address.port())
            .unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("nats-server (scripts/setup.sh): {e}"));
        let server = Server { child, _store: dir };
        let url = format!("nats://127.0.0.1:{port}");
        for _ in 0..100 {
            if let Ok(client) = async_nats::connect(&url).await {
                return (server, client);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("nats-server did not start on {url}");
    }

    fn blob(bytes: &[u8]) -> BlobRef {
        BlobRef {
            digest: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes)),
            size: bytes.len() as u64,
        }
    }

    async fn meta(bucket: &BlobBucket, blob: &BlobRef) -> Meta {
        (bucket.meta(&blob.digest).await)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no metadata of {}", blob.digest))
    }

    /// A removal and a reuse of one object both write its metadata only if it is still the
    /// one they read: whichever comes second is refused, so the reuse never keeps a removed
    /// object and the removal never takes a freshened one.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_removal_and_a_reuse_of_one_object_cannot_both_win() {
        let (_server, client) = server().await;
        let grace = Duration::from_millis(400);
        let bucket =
            (BlobBucket::ensure_durable(&client, 1, grace).await).unwrap_or_else(|e| panic!("{e}"));
        let bytes = vec![7u8; 100_000];
        let object = blob(&bytes);
        let put = bucket.put_bytes(&bytes, &object).await;
        put.unwrap_or_else(|e| panic!("{e}"));

        // Read by a collection, then reused (freshened) before its tombstone is written.
        let read_by_collection = meta(&bucket, &object).await;
        tokio::time::sleep(grace).await;
        assert!(
            bucket
                .holds(&object)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        );
        let freshened = meta(&bucket, &object).await;
        assert!(freshened.seq > read_by_collection.seq);
        let tombstone = ObjectInfo {
            deleted: true,
            ..read_by_collection.info
        };
        let removed = bucket
            .write_meta_if(&tombstone, read_by_collection.seq)
            .await;
        assert!(!removed.unwrap_or_else(|e| panic!("{e}")));
        assert!(bucket.contains(&object).await);

        // Read by a writer, then removed before the writer's freshening is written: the writer
        // is refused and finds the object gone, so it uploads it again.
        let read_by_writer = meta(&bucket, &object).await;
        let later = SystemTime::now() + Duration::from_secs(60);
        let swept = bucket.collect(&BTreeSet::new(), later).await;
        assert_eq!(swept.unwrap_or_else(|e| panic!("{e}")).removed, 1);
        let mut fresh = read_by_writer.info;
        fresh.modified = Some(datetime::now());
        let freshened = bucket.write_meta_if(&fresh, read_by_writer.seq).await;
        assert!(!freshened.unwrap_or_else(|e| panic!("{e}")));
        assert!(
            !bucket
                .holds(&object)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        );
        assert!(!bucket.contains(&object).await);
        let again = bucket.put_bytes(&bytes, &object).await;
        again.unwrap_or_else(|e| panic!("{e}"));
        assert!(bucket.contains(&object).await);

        // Referenced, it stays whatever its age.
        let referenced = BTreeSet::from([object.digest.clone()]);
        let swept = bucket.collect(&referenced, later).await;
        let swept = swept.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((swept.removed, swept.kept, swept.orphans), (0, 1, 0));
    }

    /// Chunks no object names (an upload that died before its metadata) are removed once
    /// older than the grace period; new ones (an upload under way) and a live object's stay.
    #[tokio::test(flavor = "multi_thread")]
    async fn chunks_no_object_names_are_removed_once_old() {
        let (_server, client) = server().await;
        let grace = Duration::from_secs(60);
        let bucket =
            (BlobBucket::ensure_durable(&client, 1, grace).await).unwrap_or_else(|e| panic!("{e}"));
        let bytes = vec![3u8; 50_000];
        let object = blob(&bytes);
        let put = bucket.put_bytes(&bytes, &object).await;
        put.unwrap_or_else(|e| panic!("{e}"));
        let jetstream = async_nats::jetstream::new(client.clone());
        let orphan = format!("$O.{}.C.deadupload", bucket.name);
        let published = jetstream
            .publish(orphan.clone(), vec![1u8; 10].into())
            .await;
        let acked = published.unwrap_or_else(|e| panic!("{e}")).await;
        acked.unwrap_or_else(|e| panic!("{e}"));
        let referenced = BTreeSet::from([object.digest.clone()]);

        let now = bucket.collect(&referenced, SystemTime::now()).await;
        assert_eq!(now.unwrap_or_else(|e| panic!("{e}")).orphans, 0);
        let later = SystemTime::now() + grace * 2;
        let swept = bucket.collect(&referenced, later).await;
        let swept = swept.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((swept.orphans, swept.removed, swept.kept), (1, 0, 1));
        let freshness = bucket.freshness().unwrap_or_else(|e| panic!("{e}"));
        let left = freshness
            .stream
            .get_last_raw_message_by_subject(&orphan)
            .await;
        assert!(left.is_err(), "the orphan chunk is gone");
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let target = dir.path().join("blob");
        let fetched = bucket.fetch_to(&object, &target, false).await;
        fetched.unwrap_or_else(|e| panic!("{e}"));
        let read = std::fs::read(&target).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read, bytes);
    }
}
