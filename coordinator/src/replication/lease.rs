//! Shard leases: one owner per shard at a time. A lease is a key of the leases bucket, created
//! only if absent; its creating revision is the owner's epoch, kept by every renewal. Renewals
//! are compare-and-set on the last revision, so an owner that lost its lease (it expired while
//! the owner was paused, and another created it anew) learns so at its next renewal. The
//! bucket's `max_age` is the lease's life: each renewal is a new revision, living that long.

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
        // as "this revision".
        match self.kv.create(shard::key(shard), self.value(0)?).await {
            Ok(revision) => Ok(Some(Lease {
                shard,
                epoch: revision,
                revision,
            })),
            Err(error) if error.kind() == kv::CreateErrorKind::AlreadyExists => Ok(None),
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
        let entry = self
            .kv
            .entry(shard::key(shard))
            .await
            .map_err(CoordinatorError::nats("reading a shard lease"))?;
        let Some(entry) = entry.filter(|entry| entry.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        let lease: ShardLease = decode(&entry.value, Format::MessagePack)?;
        let epoch = if lease.epoch == 0 {
            entry.revision
        } else {
            lease.epoch
        };
        Ok(Some(Holder {
            owner: lease.owner,
            epoch,
        }))
    }
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
