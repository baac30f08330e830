//! Shards: the parts a deployment's state is split into, their owners' leases and the changelog
//! each owner appends to (docs/adr/0014).
//!
//! A workbench belongs to shard [`shard_of`]`(name, count)`: FNV-1a (32 bits: offset basis
//! 2166136261, prime 16777619) over the name's UTF-8 bytes, modulo the deployment's shard count.
//! Any client in any language computes the same shard; the count is fixed when the deployment is
//! created, since changing it would move workbenches between shards.
//!
//! ```
//! use atelier_messages::shard::shard_of;
//! assert_eq!(shard_of("q3", 16), 13); // 0x9e4c94bd % 16
//! ```
//!
//! A job id the CLI and the front doors make carries its workbench's key ([`job_id_for`]:
//! `…-w9e4c94bd` for `q3`), so a job's verbs go to its shard alone; any other id is looked for
//! in every shard.

use serde::{Deserialize, Serialize};

pub use crate::shard_key::{carried_key, job_id_for, shard_key};
use crate::{ErrorBody, ErrorCode};

/// Shards of a deployment that sets none.
pub const DEFAULT_SHARD_COUNT: u32 = 16;
/// The most shards a deployment may have.
pub const MAX_SHARD_COUNT: u32 = 1024;

/// The shard of `workbench` among `count` (a count of 0 is taken as 1).
pub fn shard_of(workbench: &str, count: u32) -> u32 {
    shard_of_key(shard_key(workbench), count)
}

/// The shard of a workbench's [`shard_key`] among `count` (a count of 0 is taken as 1).
pub fn shard_of_key(key: u32, count: u32) -> u32 {
    key % count.max(1)
}

/// Refuses a shard count outside `1..=MAX_SHARD_COUNT`.
pub fn validate_count(count: u32) -> Result<(), ErrorBody> {
    if (1..=MAX_SHARD_COUNT).contains(&count) {
        return Ok(());
    }
    Err(ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!("a deployment has 1 to {MAX_SHARD_COUNT} shards, not {count}"),
    ))
}

/// What a replicated deployment fixed when it was created, kept in its changelog stream
/// (`atelier.shardlog.deployment`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    pub v: u16,
    pub shards: u32,
}

/// A job submission the coordinator that took it off the job queue hands to the owner of its
/// workbench's shard, answered once recorded (the queue's message is acknowledged then).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordSubmission {
    pub v: u16,
    pub submit: crate::job::JobSubmit,
    /// Recorded only if the workbench answers no other job: otherwise `WORKBENCH_BUSY` and
    /// nothing recorded (a batch's child waits for its workbench instead of failing). Without
    /// it a busy workbench refuses the job, recorded as failed with that code.
    #[serde(default)]
    pub only_if_idle: bool,
    /// Set when the intake refused the submission itself (nested too deep, a message over the
    /// limit…): `submit` then holds only what could be read of it (its id, workbench and the start
    /// of its message), and the shard records it as a failed job with this error, never running
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<ErrorBody>,
}

/// The most digests one [`References`] page holds (about 600 KB in MessagePack, under NATS's
/// default payload limit of 1 MB).
pub const MAX_LISTED_REFERENCES: u32 = 8_192;

/// The blob digests a shard's manifests (published, draft, checkpoints) and draft revisions
/// reference, in digest order, from just after `after`: what a replicated deployment's garbage
/// collection must keep, gathered from every shard a page at a time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListReferences {
    pub v: u16,
    /// The last digest of the page before (none: from the first).
    #[serde(default)]
    pub after: Option<String>,
    /// At most this many (1 to [`MAX_LISTED_REFERENCES`]).
    pub limit: u32,
}

impl ListReferences {
    /// Refuses a limit outside `1..=MAX_LISTED_REFERENCES`.
    pub fn validate(&self) -> Result<(), ErrorBody> {
        if (1..=MAX_LISTED_REFERENCES).contains(&self.limit) {
            return Ok(());
        }
        Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "a page lists 1 to {MAX_LISTED_REFERENCES} references, not {}",
                self.limit
            ),
        ))
    }
}

/// A page of a shard's referenced digests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct References {
    pub digests: Vec<String>,
    /// Whether more follow the page's last digest.
    pub more: bool,
}

/// Asks every coordinator of a replicated deployment (on [`SWEEP_HOST`], no queue group) to
/// sweep its host's caches against the union of every shard's references; each answers
/// [`HostSwept`]. What `atelier gc` does with a replicated store.
///
/// [`SWEEP_HOST`]: crate::subjects::shard::SWEEP_HOST
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepHost {
    pub v: u16,
}

/// What one coordinator's host collected.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSwept {
    pub coordinator: String,
    pub collected: crate::workshop::Collected,
}

/// The value of a shard's lease in the leases bucket (key `shard-N`). The epoch is the bucket
/// revision that created the lease; renewals keep it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardLease {
    pub v: u16,
    /// The coordinator holding the shard.
    pub owner: String,
    pub epoch: u64,
    pub acquired_at_ms: u64,
}

/// The value of the claim a coordinator with a store of its own holds on its NATS deployment
/// (bucket `atelier-store-claims`, key `own-store`): one store per deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreClaim {
    pub v: u16,
    /// The coordinator holding the claim.
    pub coordinator: String,
    /// Its host name and process id.
    pub host: String,
    #[serde(default)]
    pub pid: u32,
    /// Its data directory (where the store is).
    pub data_dir: String,
    pub renewed_at_ms: u64,
}

/// One write to a tree of a shard's store: a value, or its removal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mutation {
    pub tree: String,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    /// `None` removes the key.
    #[serde(default, with = "serde_bytes")]
    pub value: Option<Vec<u8>>,
}

/// What a changelog entry carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EntryKind {
    /// A new owner took the shard over at `epoch`: entries of earlier epochs after this one are
    /// refused.
    Fence,
    /// Writes applied together.
    Mutations {
        mutations: Vec<Mutation>,
        /// The change goes on in the next entry (it is larger than one entry may carry):
        /// replay applies the parts together, with the last; parts no last one follows were
        /// never acknowledged and are dropped.
        #[serde(default)]
        continued: bool,
    },
}

/// One entry of a shard's changelog (`atelier.shardlog.<shard>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangelogEntry {
    pub v: u16,
    pub shard: u32,
    /// The epoch of the owner that appended it.
    pub epoch: u64,
    pub kind: EntryKind,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Format, decode, encode};

    #[test]
    fn the_shard_function_is_fnv1a_modulo_the_count() {
        // Reference values of 32-bit FNV-1a.
        assert_eq!(shard_key(""), 0x811c_9dc5);
        assert_eq!(shard_key("a"), 0xe40c_292c);
        assert_eq!(shard_key("foobar"), 0xbf9c_f968);
        assert_eq!(shard_of("foobar", 16), 0xbf9c_f968 % 16);
        assert_eq!(shard_of("anything", 1), 0);
        assert_eq!(shard_of("anything", 0), 0);
        let spread: std::collections::BTreeSet<u32> =
            (0..200).map(|n| shard_of(&format!("wb-{n}"), 16)).collect();
        assert_eq!(spread.len(), 16, "200 names reach every one of 16 shards");
    }

    #[test]
    fn a_job_id_made_for_a_workbench_carries_its_shard_key() {
        let id = job_id_for("0195f1c2a3b4", "q3");
        assert_eq!(id, "0195f1c2a3b4-w9e4c94bd");
        assert_eq!(carried_key(&id), Some(shard_key("q3")));
        assert_eq!(
            carried_key(&id).map(|key| key % 16),
            Some(shard_of("q3", 16))
        );
        assert!(crate::job::validate_job_id(&job_id_for(&"u".repeat(32), "q3")).is_ok());
        // Ids made otherwise carry none: a batch's child, upper-case hex, a bare tail.
        for other in [
            "b-t0-a0",
            "x-w9E4C94BD",
            "-w9e4c94bd",
            "w9e4c94bd",
            "x-w9e4c94b",
        ] {
            assert_eq!(carried_key(other), None, "{other}");
        }
    }

    #[test]
    fn counts_outside_the_bounds_are_refused() {
        assert!(validate_count(1).is_ok());
        assert!(validate_count(MAX_SHARD_COUNT).is_ok());
        for bad in [0, MAX_SHARD_COUNT + 1] {
            let refused = validate_count(bad).expect_err("refused");
            assert_eq!(refused.code, ErrorCode::ValidationFailed);
        }
    }

    #[test]
    fn entries_round_trip_with_keys_and_values_as_binary() {
        let entry = ChangelogEntry {
            v: crate::PROTOCOL_VERSION,
            shard: 3,
            epoch: 41,
            kind: EntryKind::Mutations {
                mutations: vec![
                    Mutation {
                        tree: "jobs".into(),
                        key: b"j1".to_vec(),
                        value: Some(vec![0, 255, 7]),
                    },
                    Mutation {
                        tree: "jobs".into(),
                        key: b"j0".to_vec(),
                        value: None,
                    },
                ],
                continued: false,
            },
        };
        for format in [Format::MessagePack, Format::Json] {
            let bytes = encode(&entry, format).expect("encode");
            let back: ChangelogEntry = decode(&bytes, format).expect("decode");
            assert_eq!(back, entry);
        }
        let packed = encode(&entry, Format::MessagePack).expect("encode");
        // `bin 8` of three bytes: the value is binary, not an array of numbers.
        assert!(packed.windows(5).any(|w| w == [0xc4, 3, 0, 255, 7]));
    }
}
