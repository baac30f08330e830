//! Shard leases: one owner per shard at a time. A lease is a key of the leases bucket, created
//! only if absent; its creating revision is the owner's epoch, kept by every renewal. Renewals
//! are compare-and-set on the last revision, so an owner that lost its lease (it expired while
//! the owner was paused, and another created it anew) learns so at its next renewal. The
//! bucket's `max_age` is the lease's life: each renewal is a new revision, living that long.
//!
//! Every read a lease decision rests on goes to the bucket stream's leader. A key-value bucket
//! answers its own reads with direct gets, which any replica serves, and a replica may not yet
//! have applied the last write: right after a release it can still show the old holder (the
//! shard looks held for a whole lease life), right after a take it can show nobody.

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, kv};
use atelier_messages::shard::ShardLease;
use atelier_messages::{ErrorBody, ErrorCode, Format, PROTOCOL_VERSION, decode, encode, now_ms};

use super::ReplicationSettings;
use crate::error::CoordinatorError;
use atelier_messages::subjects::shard;

/// A shard this coordinator holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub shard: u32,
    pub epoch: u64,
    /// The bucket revision of the last renewal.
    revision: u64,
}

/// The leases bucket, as one coordinator sees it.
#[derive(Clone)]
pub struct Leases {
    kv: kv::Store,
    owner: String,
}

/// Who holds a shard, as the bucket says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub owner: String,
    pub epoch: u64,
}

impl Leases {
    /// Opens the bucket (creating it with `settings`) for `owner`, this coordinator's id.
    pub async fn open(
        jetstream: &jetstream::Context,
        settings: &ReplicationSettings,
        owner: &str,
    ) -> Result<Self, CoordinatorError> {
        let kv = jetstream
            .create_or_update_key_value(settings.expiring_bucket(
                shard::LEASES_BUCKET,
                "Atelier shard leases: one owner per shard",
            ))
            .await
            .map_err(CoordinatorError::nats("the shard leases bucket"))?;
        Ok(Self {
            kv,
            owner: owner.to_string(),
        })
    }

    fn value(&self, epoch: u64) -> Result<bytes::Bytes, CoordinatorError> {
        let lease = ShardLease {
            v: PROTOCOL_VERSION,
            owner: self.owner.clone(),
            epoch,
            acquired_at_ms: now_ms(),
        };
        Ok(encode(&lease, Format::MessagePack)?.into())
    }

    /// Takes `shard` if no one holds it; `None` when someone does.
    pub async fn acquire(&self, shard: u32) -> Result<Option<Lease>, CoordinatorError> {
        // The epoch is the revision the create gets, so the first value cannot name it: 0 reads
        // as "this revision". A key never written (or whose entries aged out) is created at
        // last revision 0; a released one at its deletion's revision.
        let last_revision = match self.last(shard).await? {
            None => 0,
            Some(last) if last.released => last.revision,
            Some(_) => return Ok(None),
        };
        match self
            .kv
            .update(shard::key(shard), self.value(0)?, last_revision)
            .await
        {
            Ok(revision) => Ok(Some(Lease {
                shard,
                epoch: revision,
                revision,
            })),
            // Taken (or renewed, or released) between the read and the create.
            Err(error) if error.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(error) => Err(CoordinatorError::nats("acquiring a shard lease")(error)),
        }
    }

    /// Extends `lease`; `SHARD_FENCED` when it was lost (expired and taken, or released).
    pub async fn renew(&self, lease: &mut Lease) -> Result<(), CoordinatorError> {
        let value = self.value(lease.epoch)?;
        match self
            .kv
            .update(shard::key(lease.shard), value, lease.revision)
            .await
        {
            Ok(revision) => {
                lease.revision = revision;
                Ok(())
            }
            Err(error) if error.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                Err(lost(lease))
            }
            Err(error) => Err(CoordinatorError::nats("renewing a shard lease")(error)),
        }
    }

    /// Gives `lease` up at once (a clean hand-over), unless it was already lost.
    pub async fn release(&self, lease: Lease) -> Result<(), CoordinatorError> {
        self.kv
            .delete_expect_revision(shard::key(lease.shard), Some(lease.revision))
            .await
            .map_err(CoordinatorError::nats("releasing a shard lease"))
    }

    /// Changes of `shard`'s lease from now on (renewed, released, taken).
    pub async fn watch(&self, shard: u32) -> Result<kv::Watch, CoordinatorError> {
        self.kv
            .watch(shard::key(shard))
            .await
            .map_err(CoordinatorError::nats("watching a shard lease"))
    }

    /// Changes of every shard's lease from now on.
    pub async fn watch_all(&self) -> Result<kv::Watch, CoordinatorError> {
        self.kv
            .watch_all()
            .await
            .map_err(CoordinatorError::nats("watching the shard leases"))
    }

    /// Who holds `shard` now, if anyone.
    pub async fn holder(&self, shard: u32) -> Result<Option<Holder>, CoordinatorError> {
        let Some(last) = self.last(shard).await?.filter(|last| !last.released) else {
            return Ok(None);
        };
        let lease: ShardLease = decode(&last.value, Format::MessagePack)?;
        let epoch = if lease.epoch == 0 {
            last.revision
        } else {
            lease.epoch
        };
        Ok(Some(Holder {
            owner: lease.owner,
            epoch,
        }))
    }

    /// The last entry of `shard`'s key, read from the bucket stream's leader.
    async fn last(&self, shard: u32) -> Result<Option<LastEntry>, CoordinatorError> {
        let subject = format!("{}{}", self.kv.prefix, shard::key(shard));
        match self
            .kv
            .stream
            .get_last_raw_message_by_subject(&subject)
            .await
        {
            Ok(message) => Ok(Some(LastEntry {
                revision: message.sequence,
                released: is_removal(&message.headers),
                value: message.payload,
            })),
            Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(error) => Err(CoordinatorError::nats("reading a shard lease")(error)),
        }
    }
}

/// A lease key's last entry in the bucket's stream.
struct LastEntry {
    revision: u64,
    /// A deletion or purge: the lease was given up (or cleared), and the shard is free.
    released: bool,
    value: bytes::Bytes,
}

/// Whether a key-value entry's headers mark a deletion or purge rather than a value (the header
/// and its values are the key-value protocol's; a server-placed marker says why instead).
fn is_removal(headers: &async_nats::HeaderMap) -> bool {
    let operation = headers.get("KV-Operation").map(|value| value.as_str());
    matches!(operation, Some("DEL" | "PURGE")) || headers.get("Nats-Marker-Reason").is_some()
}

fn lost(lease: &Lease) -> CoordinatorError {
    CoordinatorError::Rejected(ErrorBody::new(
        ErrorCode::ShardFenced,
        format!(
            "the lease of shard {} (epoch {}) was lost: another coordinator holds the shard now",
            lease.shard, lease.epoch
        ),
    ))
}
