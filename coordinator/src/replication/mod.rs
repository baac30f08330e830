//! Shard ownership and the replicated changelog (docs/adr/0014): the pieces with which a
//! coordinator holds a shard, makes each of its writes survive the host, and hands it over.
//!
//! - [`lease`]: one owner per shard, by a lease in a KV bucket; the revision that created the
//!   lease is the owner's epoch.
//! - [`changelog`]: the shard's subject in one JetStream stream. An owner appends with the
//!   subject's last sequence as a precondition, so nothing can be appended behind its back; a new
//!   owner replays what is there and appends a `Fence` of its epoch, after which a deposed
//!   owner's append is refused (`SHARD_FENCED`). Replay refuses entries of another shard or of a
//!   superseded epoch.
//! - [`replica`]: a shard's sled store, applying entries together with the position they bring
//!   it to, and snapshots of it in the object store, checked by digest when restored.
//! - [`ownership`]: a coordinator holding its store by lease: standby until it holds it, then
//!   rebuilt from the latest snapshot and the changelog after it, committing every write there
//!   and snapshotting the store every [`ReplicationSettings::snapshot_entries`] entries.

pub mod changelog;
pub mod lease;
pub mod ownership;
pub mod replica;
pub mod snapshot_file;

use std::time::Duration;

use async_nats::jetstream::kv;
use async_nats::jetstream::stream::StorageType;
use atelier_messages::shard::Mutation;
use serde::{Deserialize, Serialize};

/// Trees of the replication itself (and sled's own), never written by an entry.
pub const RESERVED_TREE_PREFIX: &str = "__";

/// An entry as replay hands it to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// A new owner's epoch starts here.
    Fence {
        epoch: u64,
    },
    Mutations(Vec<Mutation>),
    /// A part of a change that goes on in the next entry: replay holds it until the last part.
    Part(Vec<Mutation>),
    /// A refused entry: nothing to apply, only the position moves past it.
    Skip,
}

/// How far a store has applied its shard's changelog.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The stream sequence of the last entry applied (0: none).
    pub seq: u64,
    /// The epoch of the last fence applied.
    pub epoch: u64,
}

impl Position {
    /// The position after applying `checked` at `seq`.
    pub fn after(self, seq: u64, checked: &Checked) -> Self {
        let epoch = match checked {
            Checked::Fence { epoch } => *epoch,
            _ => self.epoch,
        };
        Self { seq, epoch }
    }
}

/// The most bytes of keys and values one changelog entry carries: half of a stock server's
/// 1 MB `max_payload`.
pub const ENTRY_BUDGET: usize = 512 << 10;

/// One changelog entry's writes, as [`pack`] cuts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    pub mutations: Vec<Mutation>,
    /// The change goes on in the next entry.
    pub continued: bool,
}

/// Groups of writes, in order, packed into entries of at most `budget` bytes of tree names, keys
/// and values each. A group (one write, batch or transaction) is never split between two
/// groups' entries, so each entry applies whole changes; a group larger than the budget gets
/// entries of its own, each but the last `continued`, which replay applies together.
pub fn pack(groups: Vec<Vec<Mutation>>, budget: usize) -> Vec<Packed> {
    let mut entries: Vec<Packed> = Vec::new();
    // The bytes of the last entry, while it may take more groups.
    let mut open: Option<usize> = None;
    for group in groups {
        let group_size: usize = group.iter().map(size_of).sum();
        if group_size > budget {
            entries.extend(split(group, budget));
            open = None;
            continue;
        }
        let size = match open {
            Some(size) if size + group_size <= budget => size,
            _ => {
                entries.push(Packed {
                    mutations: Vec::new(),
                    continued: false,
                });
                0
            }
        };
        open = Some(size + group_size);
        if let Some(entry) = entries.last_mut() {
            entry.mutations.extend(group);
        }
    }
    entries
}

/// One change larger than `budget` as entries of at most `budget` bytes (a single larger write
/// alone), each but the last `continued`.
fn split(group: Vec<Mutation>, budget: usize) -> Vec<Packed> {
    let mut parts: Vec<Packed> = Vec::new();
    let mut size = 0;
    for mutation in group {
        let mutation_size = size_of(&mutation);
        let fits = parts.last().is_some_and(|part| !part.mutations.is_empty())
            && size + mutation_size <= budget;
        if !fits {
            if let Some(last) = parts.last_mut() {
                last.continued = true;
            }
            parts.push(Packed {
                mutations: Vec::new(),
                continued: false,
            });
            size = 0;
        }
        size += mutation_size;
        if let Some(part) = parts.last_mut() {
            part.mutations.push(mutation);
        }
    }
    parts
}

/// The bytes of a write's tree name, key and value.
fn size_of(mutation: &Mutation) -> usize {
    mutation.tree.len() + mutation.key.len() + mutation.value.as_ref().map_or(0, Vec::len)
}

/// How shards are held and replicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationSettings {
    /// How long a lease lasts without renewal: an owner that stops renewing (killed, paused,
    /// cut off) loses its shards this long after its last renewal.
    pub lease_ttl: Duration,
    /// Copies of the changelog, leases and snapshots (3 in a cluster of three or more servers).
    pub replicas: usize,
    /// Changelog entries an owner appends between two snapshots of its store; each snapshot
    /// bounds a new owner's replay and lets the changelog be trimmed up to it.
    pub snapshot_entries: u64,
    /// The shards a new deployment is split into (one made before keeps its own count).
    pub shards: u32,
    /// The page cache of all of the deployment's shard stores together, split evenly over its
    /// shards: a coordinator holding every shard caches at most this much.
    pub cache_bytes: u64,
    /// How long a blob or table database written to a host's caches is kept by a garbage
    /// collection whatever references it: a write of another shard may be between storing its
    /// blob and referencing it.
    pub blob_grace: Duration,
}

impl Default for ReplicationSettings {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(6),
            replicas: 1,
            snapshot_entries: 10_000,
            shards: atelier_messages::shard::DEFAULT_SHARD_COUNT,
            cache_bytes: DEFAULT_CACHE_BYTES,
            blob_grace: DEFAULT_BLOB_GRACE,
        }
    }
}

/// [`ReplicationSettings::blob_grace`] by default: an hour, far beyond any write's time
/// between storing its blobs and referencing them.
pub const DEFAULT_BLOB_GRACE: Duration = Duration::from_secs(3600);

/// [`ReplicationSettings::cache_bytes`] by default: sled's own default for one store.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

/// The least page cache a shard store gets, however many shards share the budget.
pub const MIN_SHARD_CACHE_BYTES: u64 = 8 << 20;

impl ReplicationSettings {
    /// The page cache of one shard store when the deployment has `shards` shards.
    pub fn shard_cache_bytes(&self, shards: u32) -> u64 {
        (self.cache_bytes / u64::from(shards.max(1))).max(MIN_SHARD_CACHE_BYTES)
    }

    pub(crate) fn storage(&self) -> StorageType {
        StorageType::File
    }

    /// A KV bucket of one value per key whose entries run out a lease's life after their last
    /// write (the shard leases, the live coordinators), with this deployment's copies.
    pub(crate) fn expiring_bucket(&self, bucket: &str, description: &str) -> kv::Config {
        kv::Config {
            bucket: bucket.to_string(),
            description: description.to_string(),
            history: 1,
            max_age: self.lease_ttl,
            storage: self.storage(),
            num_replicas: self.replicas,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_budget_is_split_over_the_deployments_shards_with_a_floor() {
        let settings = ReplicationSettings::default();
        assert_eq!(settings.shard_cache_bytes(1), 1 << 30);
        assert_eq!(settings.shard_cache_bytes(16), 64 << 20);
        assert_eq!(
            settings.shard_cache_bytes(1024),
            8 << 20,
            "1 MiB each is raised"
        );
        assert_eq!(settings.shard_cache_bytes(0), 1 << 30);
    }

    fn group(sizes: &[usize]) -> Vec<Mutation> {
        sizes
            .iter()
            .map(|size| Mutation {
                tree: "t".into(),
                key: vec![b'k'],
                value: Some(vec![0; *size]),
            })
            .collect()
    }

    #[test]
    fn writes_are_packed_in_order_into_entries_under_the_budget_without_splitting_a_change() {
        // Each mutation counts its tree (1) and key (1) besides the value.
        let groups = vec![
            group(&[48]),
            group(&[48]),
            group(&[98]),
            group(&[10, 10]),
            group(&[300]),
        ];
        let sizes = |entries: Vec<Packed>| -> Vec<(Vec<usize>, bool)> {
            entries
                .iter()
                .map(|entry| {
                    let values = entry.mutations.iter();
                    let sizes = values.map(|m| m.value.as_ref().map_or(0, Vec::len));
                    (sizes.collect(), entry.continued)
                })
                .collect()
        };
        assert_eq!(
            sizes(pack(groups, 100)),
            vec![
                (vec![48, 48], false),
                (vec![98], false),
                (vec![10, 10], false),
                (vec![300], false)
            ]
        );
        assert!(pack(Vec::new(), 100).is_empty());
        // A change larger than an entry: entries of its own, continued but the last, and the
        // next change starts an entry of its own too.
        let large = vec![group(&[10]), group(&[40, 40, 40, 200, 10]), group(&[10])];
        assert_eq!(
            sizes(pack(large, 100)),
            vec![
                (vec![10], false),
                (vec![40, 40], true),
                (vec![40], true),
                (vec![200], true),
                (vec![10], false),
                (vec![10], false)
            ]
        );
    }
}
