//! Garbage collection of a replicated deployment (docs/adr/0014) on this host. Its shards share
//! the host's blob directory and its workers' table databases, which are caches there: a large
//! blob's durable copy is in the replicated store's bucket, a small one's in its shard's store.
//! So what is kept is the union of the digests every shard references, gathered a page at a
//! time from each ([`FrontDoor::references`]), and whatever was written within a grace period:
//! another shard's write may be between storing its blob here and referencing it, and no order
//! between shards says otherwise. The blobs of a shard another coordinator holds now are kept
//! as long as that shard references them. Every coordinator sweeps its own host: the one a
//! collection reaches asks them all ([`sweep_every_host`]) and adds up their answers.
//!
//! [`FrontDoor::references`]: crate::front_door::FrontDoor::references

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use atelier_messages::shard::{HostSwept, SweepHost};
use atelier_messages::workshop::Collected;
use atelier_messages::{
    ErrorBody, ErrorCode, Format, PROTOCOL_VERSION, decode_reply, encode, subjects,
};
use atelier_transport::headers::{format_of, with_format};
use futures::StreamExt;

use crate::blobs::{BlobDir, Swept, sweep_tables};
use crate::error::{CoordinatorError, unavailable};

/// This host's caches and how long a new file in them is kept whatever references it.
#[derive(Debug, Clone)]
pub struct HostCollector {
    pub blobs: BlobDir,
    pub table_cache: PathBuf,
    pub grace: Duration,
}

impl HostCollector {
    /// Sweeps this host's caches of every blob not in `referenced` (every shard's references)
    /// and not written within the grace period.
    pub fn sweep(&self, referenced: &BTreeSet<String>) -> Result<Collected, CoordinatorError> {
        let now = SystemTime::now();
        let keep_blob = |digest: &str| {
            referenced.contains(digest)
                || (self.blobs.path_for(digest)).is_some_and(|path| self.young(&path, now))
        };
        let swept: Swept = self.blobs.sweep(keep_blob)?;
        let keep_table = |digest: &str| {
            referenced.contains(digest)
                || self.young(&self.table_cache.join(format!("{digest}.duckdb")), now)
        };
        let tables = sweep_tables(&self.table_cache, keep_table)?;
        tracing::debug!(
            referenced = referenced.len(),
            "this host's caches swept against every shard's references"
        );
        Ok(swept.with_tables(tables))
    }

    /// Whether the file at `path` was written within the grace period before `now`.
    fn young(&self, path: &Path, now: SystemTime) -> bool {
        let Ok(modified) = std::fs::metadata(path).and_then(|meta| meta.modified()) else {
            return false;
        };
        now.duration_since(modified)
            .map_or(true, |age| age < self.grace)
    }
}

/// How long a collection waits for every coordinator's host to be swept.
const SWEEP_PATIENCE: Duration = Duration::from_secs(30);

/// Asks every coordinator alive to sweep its host ([`SweepHost`]) and adds up their answers;
/// one that does not answer within [`SWEEP_PATIENCE`] is counted in `hosts_unanswered`. The
/// first host that could not sweep (a shard with no owner now) fails the collection.
pub async fn sweep_every_host(client: &async_nats::Client) -> Result<Collected, ErrorBody> {
    let alive = coordinators_alive(client).await?;
    let inbox = client.new_inbox();
    let mut answers = (client.subscribe(inbox.clone()).await)
        .map_err(|error| unavailable("hear the hosts' sweeps", error))?;
    let request = encode(
        &SweepHost {
            v: PROTOCOL_VERSION,
        },
        Format::MessagePack,
    )?;
    client
        .publish_with_reply_and_headers(
            subjects::shard::SWEEP_HOST,
            inbox,
            with_format(Format::MessagePack),
            request.into(),
        )
        .await
        .map_err(|error| unavailable("ask the hosts to sweep", error))?;
    let deadline = tokio::time::Instant::now() + SWEEP_PATIENCE;
    let mut answered = BTreeSet::new();
    let mut total = Collected::default();
    while answered.len() < alive {
        let Ok(Some(answer)) = tokio::time::timeout_at(deadline, answers.next()).await else {
            break;
        };
        let format = format_of(answer.headers.as_ref());
        let swept: HostSwept = decode_reply(&answer.payload, format)?;
        if answered.insert(swept.coordinator) {
            total.add(&swept.collected);
        }
    }
    if answered.is_empty() {
        return Err(ErrorBody::new(
            ErrorCode::ShardUnavailable,
            "no coordinator swept its host: check that `atelier coordinator` processes run",
        ));
    }
    total.hosts_unanswered = alive.saturating_sub(answered.len()) as u64;
    Ok(total)
}

/// How many coordinators the members bucket lists alive (at least this one).
async fn coordinators_alive(client: &async_nats::Client) -> Result<usize, ErrorBody> {
    let jetstream = async_nats::jetstream::new(client.clone());
    let members = (jetstream
        .get_key_value(subjects::shard::MEMBERS_BUCKET)
        .await)
        .map_err(|error| unavailable("list the coordinators", error))?;
    let mut keys =
        (members.keys().await).map_err(|error| unavailable("list the coordinators", error))?;
    let mut alive = 0;
    while let Some(key) = keys.next().await {
        if key.is_ok() {
            alive += 1;
        }
    }
    Ok(alive.max(1))
}
