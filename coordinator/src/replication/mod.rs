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

use std::time::Duration;

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

/// Groups of writes, in order, packed into entries of at most `budget` bytes of tree names, keys
/// and values each. A group (one write, batch or transaction) is never split, so each entry
/// applies whole changes; a group larger than the budget makes an entry of its own.
pub fn pack(groups: Vec<Vec<Mutation>>, budget: usize) -> Vec<Vec<Mutation>> {
    let mut entries: Vec<Vec<Mutation>> = Vec::new();
    let mut size = 0;
    for group in groups {
        let group_size: usize = group
            .iter()
            .map(|m| m.tree.len() + m.key.len() + m.value.as_ref().map_or(0, Vec::len))
            .sum();
        let full =
            entries.last().is_some_and(|entry| !entry.is_empty()) && size + group_size > budget;
        if entries.is_empty() || full {
            entries.push(Vec::new());
            size = 0;
        }
        size += group_size;
        if let Some(entry) = entries.last_mut() {
            entry.extend(group);
        }
    }
    entries
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
}

impl Default for ReplicationSettings {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(6),
            replicas: 1,
            snapshot_entries: 10_000,
        }
    }
}

impl ReplicationSettings {
    pub(crate) fn storage(&self) -> StorageType {
        StorageType::File
    }
}

fn nats_error(context: &str) -> impl FnOnce(String) -> crate::error::CoordinatorError + '_ {
    move |error| crate::error::CoordinatorError::Nats(format!("{context}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let entries = pack(groups, 100);
        let sizes: Vec<Vec<usize>> = entries
            .iter()
            .map(|entry| {
                entry
                    .iter()
                    .map(|m| m.value.as_ref().map_or(0, Vec::len))
                    .collect()
            })
            .collect();
        assert_eq!(sizes, vec![vec![48, 48], vec![98], vec![10, 10], vec![300]]);
        assert!(pack(Vec::new(), 100).is_empty());
    }
}
