//! A shard's changelog: its subject (`atelier.shardlog.<shard>`) in one JetStream stream.
//!
//! Every append names the subject's last sequence the owner knows
//! (`Nats-Expected-Last-Subject-Sequence`), so the server refuses it when anything else was
//! appended since. A new owner replays the subject, then appends a [`EntryKind::Fence`] of its
//! epoch the same way (again if an entry slipped in meanwhile: that entry was committed before the
//! fence, and counts). From then on the deposed owner's appends name a stale sequence and are
//! refused with `SHARD_FENCED`: nothing it does after losing its lease becomes part of the shard.
//!
//! Replay checks each entry before it is applied: one of another shard, a fence that does not
//! raise the epoch, or writes of an epoch other than the last fence's (only a forged or damaged
//! entry can be any of these) is refused with its code, logged, and skipped. The parts of a
//! change too large for one entry are held and applied together with the last; parts that no
//! last part follows (the owner died between them, so the change was never acknowledged) are
//! dropped at the next fence.

use async_nats::jetstream::{self, consumer, context::PublishErrorKind, stream};
use atelier_messages::shard::{ChangelogEntry, Deployment, EntryKind, Mutation};
use atelier_messages::subjects::shard;
use atelier_messages::{ErrorBody, ErrorCode, Format, PROTOCOL_VERSION, decode, encode};
use futures::StreamExt;

use super::{Checked, Position, RESERVED_TREE_PREFIX, ReplicationSettings};
use crate::error::CoordinatorError;

/// The changelog stream.
#[derive(Clone)]
pub struct Changelog {
    jetstream: jetstream::Context,
    stream: stream::Stream,
}

/// What one replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Where the store is now.
    pub position: Position,
    /// The sequence of the last entry read (past `position` when the changelog ends with parts
    /// of a change whose last part never came).
    pub last: u64,
    /// Entries applied (fences included).
    pub applied: u64,
    /// The refused entries' sequences and why.
    pub refused: Vec<(u64, ErrorBody)>,
}

impl Changelog {
    /// Opens the stream (creating it with `settings`).
    pub async fn open(
        jetstream: &jetstream::Context,
        settings: &ReplicationSettings,
    ) -> Result<Self, CoordinatorError> {
        let stream = jetstream
            .get_or_create_stream(stream::Config {
                name: shard::LOG_STREAM.to_string(),
                description: Some("Atelier shard changelogs (docs/adr/0014)".to_string()),
                subjects: vec![shard::LOG_ALL.to_string()],
                storage: settings.storage(),
                num_replicas: settings.replicas,
                allow_direct: true,
                ..Default::default()
            })
            .await
            .map_err(CoordinatorError::nats("the changelog stream"))?;
        Ok(Self {
            jetstream: jetstream.clone(),
            stream,
        })
    }

    /// The stream sequence of `shard`'s last entry (0 when it has none).
    pub async fn last(&self, shard: u32) -> Result<u64, CoordinatorError> {
        match self
            .stream
            .get_last_raw_message_by_subject(&shard::log(shard))
            .await
        {
            Ok(message) => Ok(message.sequence),
            Err(error) if error.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(0),
            Err(error) => Err(CoordinatorError::nats("reading the changelog")(error)),
        }
    }

    /// The deployment's shard count: the one recorded when it was created, else `proposed`,
    /// recorded now (the first coordinator's setting wins; one started with another count
    /// follows it).
    pub async fn shard_count(&self, proposed: u32) -> Result<u32, CoordinatorError> {
        loop {
            match self
                .stream
                .get_last_raw_message_by_subject(shard::DEPLOYMENT)
                .await
            {
                Ok(message) => {
                    let deployment: Deployment = decode(&message.payload, Format::MessagePack)?;
                    atelier_messages::shard::validate_count(deployment.shards)?;
                    return Ok(deployment.shards);
                }
                Err(error) if error.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {}
                Err(error) => return Err(CoordinatorError::nats("reading the deployment")(error)),
            }
            let deployment = Deployment {
                v: PROTOCOL_VERSION,
                shards: proposed,
            };
            let message = jetstream::message::PublishMessage::build()
                .payload(encode(&deployment, Format::MessagePack)?.into())
                .expected_last_subject_sequence(0);
            let published = self
                .jetstream
                .send_publish(shard::DEPLOYMENT, message)
                .await
                .map_err(CoordinatorError::nats("recording the deployment"))?
                .await;
            match published {
                Ok(_) => return Ok(proposed),
                // Another coordinator recorded it first: read it.
                Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => {}
                Err(error) => {
                    return Err(CoordinatorError::nats("recording the deployment")(error));
                }
            }
        }
    }

    /// Appends `entry` to its shard's subject if the subject's last entry is `expected_last`;
    /// its sequence. Another last entry is `SHARD_FENCED`.
    pub async fn append(
        &self,
        entry: &ChangelogEntry,
        expected_last: u64,
    ) -> Result<u64, CoordinatorError> {
        let payload = encode(entry, Format::MessagePack)?;
        // The id makes a retry after a lost acknowledgement a duplicate the server answers with
        // the first append's sequence, not a refusal of this owner's own entry.
        let message = jetstream::message::PublishMessage::build()
            .payload(payload.into())
            .header("Content-Type", Format::MessagePack.content_type())
            .message_id(format!("{}-{}-{expected_last}", entry.shard, entry.epoch))
            .expected_last_subject_sequence(expected_last);
        let subject = shard::log(entry.shard);
        let refused = |error: jetstream::context::PublishError| {
            if error.kind() == PublishErrorKind::WrongLastSequence {
                return CoordinatorError::Rejected(ErrorBody::new(
                    ErrorCode::ShardFenced,
                    format!(
                        "shard {} has entries after {expected_last}: its changelog moved on \
                         without this owner (epoch {})",
                        entry.shard, entry.epoch
                    ),
                ));
            }
            CoordinatorError::nats("appending to the changelog")(error)
        };
        let ack = self
            .jetstream
            .send_publish(subject, message)
            .await
            .map_err(refused)?
            .await
            .map_err(refused)?;
        Ok(ack.sequence)
    }

    /// Removes `shard`'s entries before sequence `upto` (a stored snapshot holds them and the
    /// one at `upto`); how many were removed. The entry at `upto` stays: it may be the subject's
    /// last, which the owner's next append names as its expected last sequence.
    pub async fn trim(&self, shard: u32, upto: u64) -> Result<u64, CoordinatorError> {
        let purged = self
            .stream
            .purge()
            .filter(shard::log(shard))
            .sequence(upto)
            .await
            .map_err(CoordinatorError::nats("trimming the changelog"))?;
        Ok(purged.purged)
    }

    /// Replays `shard` from `position` to its last entry into `apply`, checking each entry.
    pub async fn replay(
        &self,
        shard: u32,
        mut position: Position,
        apply: &mut impl FnMut(u64, &Checked) -> Result<(), CoordinatorError>,
    ) -> Result<Replayed, CoordinatorError> {
        let until = self.last(shard).await?;
        let mut replayed = Replayed::default();
        let mut last = position.seq;
        // The parts read of a change whose last part has not come yet.
        let mut parts: Vec<Mutation> = Vec::new();
        if until > position.seq {
            let mut messages = self.messages_after(shard, position.seq).await?;
            while last < until {
                let Some(message) = messages.next().await else {
                    return Err(CoordinatorError::nats("replaying the changelog")(
                        "the stream ended early".to_string(),
                    ));
                };
                let message = message.map_err(CoordinatorError::nats("replaying"))?;
                let seq = message
                    .info()
                    .map_err(CoordinatorError::nats("replaying"))?
                    .stream_sequence;
                last = seq;
                let checked = check(&message.payload, shard, position.epoch).unwrap_or_else(|refusal| {
                    tracing::warn!(shard, seq, code = %refusal.code, reason = %refusal.message, "refused a changelog entry");
                    replayed.refused.push((seq, refusal));
                    Checked::Skip
                });
                let checked = match checked {
                    Checked::Part(mutations) => {
                        parts.extend(mutations);
                        continue;
                    }
                    Checked::Mutations(mutations) if !parts.is_empty() => {
                        let mut whole = std::mem::take(&mut parts);
                        whole.extend(mutations);
                        Checked::Mutations(whole)
                    }
                    Checked::Fence { .. } if !parts.is_empty() => {
                        tracing::warn!(
                            shard,
                            seq,
                            parts = parts.len(),
                            "dropped the parts of a change that was never finished"
                        );
                        parts.clear();
                        checked
                    }
                    checked => checked,
                };
                apply(seq, &checked)?;
                position = position.after(seq, &checked);
                if checked != Checked::Skip {
                    replayed.applied += 1;
                }
            }
        }
        replayed.position = position;
        replayed.last = last;
        Ok(replayed)
    }

    async fn messages_after(
        &self,
        shard: u32,
        after: u64,
    ) -> Result<consumer::pull::Ordered, CoordinatorError> {
        let consumer = self
            .stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: shard::log(shard),
                deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: after + 1,
                },
                ..Default::default()
            })
            .await
            .map_err(CoordinatorError::nats("reading the changelog"))?;
        consumer
            .messages()
            .await
            .map_err(CoordinatorError::nats("reading the changelog"))
    }
}

/// An entry read back, checked against the shard it was read from and the current epoch.
pub fn check(bytes: &[u8], shard: u32, epoch: u64) -> Result<Checked, ErrorBody> {
    let entry: ChangelogEntry = decode(bytes, Format::MessagePack)?;
    if entry.shard != shard {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "an entry for shard {} in shard {shard}'s changelog",
                entry.shard
            ),
        ));
    }
    let stale = |what: &str| {
        ErrorBody::new(
            ErrorCode::ShardFenced,
            format!(
                "{what} of epoch {} where shard {shard} is at epoch {epoch}",
                entry.epoch
            ),
        )
    };
    match entry.kind {
        EntryKind::Fence if entry.epoch > epoch => Ok(Checked::Fence { epoch: entry.epoch }),
        EntryKind::Fence => Err(stale("a fence")),
        EntryKind::Mutations { .. } if entry.epoch != epoch => Err(stale("writes")),
        EntryKind::Mutations {
            mutations,
            continued,
        } => {
            if let Some(reserved) = mutations
                .iter()
                .find(|m| m.tree.starts_with(RESERVED_TREE_PREFIX))
            {
                return Err(ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!("an entry writing the reserved tree `{}`", reserved.tree),
                ));
            }
            Ok(if continued {
                Checked::Part(mutations)
            } else {
                Checked::Mutations(mutations)
            })
        }
    }
}

/// The owner's side of a shard's changelog: where it last appended, at which epoch.
pub struct ShardLog {
    changelog: Changelog,
    shard: u32,
    epoch: u64,
    last: u64,
}

impl ShardLog {
    /// Takes `shard` over at `epoch` (its lease's): replays what follows `position` into
    /// `apply`, then appends the fence (replaying again first if an entry slipped in). Refused
    /// with `SHARD_FENCED` when the changelog already holds this epoch or a later one.
    pub async fn take_over(
        changelog: &Changelog,
        shard: u32,
        epoch: u64,
        mut position: Position,
        apply: &mut impl FnMut(u64, &Checked) -> Result<(), CoordinatorError>,
    ) -> Result<(Self, Replayed), CoordinatorError> {
        let mut total = Replayed::default();
        loop {
            let replayed = changelog.replay(shard, position, apply).await?;
            position = replayed.position;
            total.applied += replayed.applied;
            total.refused.extend(replayed.refused);
            if position.epoch >= epoch {
                return Err(CoordinatorError::Rejected(ErrorBody::new(
                    ErrorCode::ShardFenced,
                    format!(
                        "shard {shard} is already at epoch {}, not before {epoch}",
                        position.epoch
                    ),
                )));
            }
            let fence = entry(shard, epoch, EntryKind::Fence);
            // After the last entry read: unfinished parts at the end are fenced off, never
            // applied.
            match changelog.append(&fence, replayed.last).await {
                Ok(seq) => {
                    let checked = Checked::Fence { epoch };
                    apply(seq, &checked)?;
                    total.position = position.after(seq, &checked);
                    total.applied += 1;
                    let log = Self {
                        changelog: changelog.clone(),
                        shard,
                        epoch,
                        last: seq,
                    };
                    return Ok((log, total));
                }
                Err(CoordinatorError::Rejected(body)) if body.code == ErrorCode::ShardFenced => {}
                Err(error) => return Err(error),
            }
        }
    }

    /// The epoch this owner appends with.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Appends `mutations` as one whole change; their sequence. `SHARD_FENCED` once another
    /// owner took over.
    pub async fn append(&mut self, mutations: Vec<Mutation>) -> Result<u64, CoordinatorError> {
        self.append_packed(super::Packed {
            mutations,
            continued: false,
        })
        .await
    }

    /// Appends one entry as [`super::pack`] cut it; its sequence.
    pub async fn append_packed(&mut self, packed: super::Packed) -> Result<u64, CoordinatorError> {
        let kind = EntryKind::Mutations {
            mutations: packed.mutations,
            continued: packed.continued,
        };
        let entry = entry(self.shard, self.epoch, kind);
        let seq = self.changelog.append(&entry, self.last).await?;
        self.last = seq;
        Ok(seq)
    }
}

fn entry(shard: u32, epoch: u64, kind: EntryKind) -> ChangelogEntry {
    ChangelogEntry {
        v: PROTOCOL_VERSION,
        shard,
        epoch,
        kind,
    }
}
