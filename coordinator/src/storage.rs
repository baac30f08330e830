//! The sled database: one place that opens it, names its trees and encodes records, and the
//! one way async code reaches them ([`Store`]).
//!
//! Records are JSON (readable with any sled tool). A write is one of two kinds, and the
//! operation says which by the [`Store`] method it is called through ([`Durability`]):
//! **committed** ([`Store::commit`]) — durable before it returns, so the caller may acknowledge
//! it: the group commit of every write so far (`tree`), one fsync of a local store or one
//! changelog append of a replicated one — or **staged** ([`Store::stage`]) — a write a replay
//! rebuilds, made durable by the next commit or, when none comes, within [`IDLE_COMMIT`]
//! ([`commit_when_idle`]). Record types (jobs, batches, workbenches) only read and write; no
//! code outside this module commits. Both stores take the same order lock around every write,
//! through the same code, and run on blocking threads, never a runtime worker (`threads`).
//!
//! # Layout
//! - `store`: [`Store`], its `read`, `commit` and `stage`.
//! - `tree`: trees, transactions, the order lock and the group commit ([`Log`]).
//! - `threads`: where storage work runs, and the one checked wait.

mod store;
mod threads;
mod tree;

pub use store::{Records, Store};
pub(crate) use threads::{blocking, run_blocking, wait_for};
pub use tree::{Batch, Log, Sink, Tree, TxTree, transaction};

use std::path::Path;

use serde::{Serialize, de::DeserializeOwned};

use atelier_messages::ErrorBody;

use crate::error::CoordinatorError;

/// Tree names.
pub(crate) mod trees {
    pub const WORKBENCHES: &str = "workbenches";
    pub const MANIFESTS: &str = "manifests";
    pub const APPLIED_CALLS: &str = "applied_calls";
    pub const JOBS: &str = "jobs";
    pub const RPI: &str = "rpi";
    pub const JOURNAL: &str = "journal";
    /// Small blobs (see `workbench::INLINE_BLOB_BYTES`), durable with the manifests that
    /// name them.
    pub const BLOBS: &str = "blobs";
    pub const WORKSHOP: &str = "workshop";
    pub const BATCHES: &str = "batches";
    pub const BATCH_TARGETS: &str = "batch_targets";
    /// Workshop events not yet in their stream, by a growing id, written with the change they
    /// tell of (see `workshop_events`).
    pub const WORKSHOP_OUTBOX: &str = "workshop_outbox";
}

/// Opens the sled database at `path` as every store of the coordinator is opened. sled does
/// not flush on its own: the store's group commit does ([`Store::commit`], and
/// [`commit_when_idle`] for staged writes no commit followed), as a replicated store's does.
pub fn open_db(path: &Path) -> Result<sled::Db, CoordinatorError> {
    Ok(sled::Config::new()
        .path(path)
        .mode(sled::Mode::HighThroughput)
        .flush_every_ms(None)
        .open()?)
}

/// Opens the sled database of a replicated shard at `path`, caching up to `cache_bytes`: its
/// durability is the shard's changelog, and a new owner always starts from a fresh one
/// (restored from the snapshot and the changelog, `replication::ownership`), so sled neither
/// syncs its writes to disk nor flushes them periodically, and the directory is removed when
/// the store is dropped.
pub fn open_replica_db(path: &Path, cache_bytes: u64) -> Result<sled::Db, CoordinatorError> {
    Ok(sled::Config::new()
        .path(path)
        .mode(sled::Mode::HighThroughput)
        .cache_capacity(cache_bytes)
        .temporary(true)
        .flush_every_ms(None)
        .open()?)
}

/// How durable a write must be when it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Committed before the write returns: it may be acknowledged.
    Commit,
    /// Staged: made durable by the next commit (every write before a commit is, in order), or
    /// within [`IDLE_COMMIT`] when none comes ([`commit_when_idle`]), the same for a local and a
    /// replicated store. For a write a replay rebuilds: a crash before then loses nothing a
    /// restart does not redo.
    Stage,
}

/// The coordinator's durable state.
#[derive(Clone)]
pub struct Storage {
    db: sled::Db,
    /// The record of writes: synced by sled (local) or committed to a changelog (replicated).
    log: Log,
    replicated: bool,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("replicated", &self.replicated)
            .finish()
    }
}

impl Storage {
    pub fn open(path: &Path) -> Result<Self, CoordinatorError> {
        let db = open_db(path)?;
        Ok(Self {
            log: Log::local(db.clone()),
            db,
            replicated: false,
        })
    }

    /// The replicated store in `db`: its writes are recorded and committed to `log` (its
    /// changelog) on commit.
    pub fn replicated(db: sled::Db, log: Log) -> Self {
        Self {
            db,
            log,
            replicated: true,
        }
    }

    /// The record of its writes (for [`commit_when_idle`]).
    pub fn log(&self) -> Log {
        self.log.clone()
    }

    pub(crate) fn tree(&self, name: &'static str) -> Result<Tree, CoordinatorError> {
        Ok(Tree::new(self.db.open_tree(name)?, name, self.log.clone()))
    }

    /// Makes every write so far durable: one fsync, or one commit of the recorded writes, for
    /// every writer committing at once. Only a [`Store`] commits.
    fn commit(&self) -> Result<(), CoordinatorError> {
        self.log.commit()
    }

    /// Bytes on disk.
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CoordinatorError> {
    serde_json::to_vec(value).map_err(|error| CoordinatorError::Corrupt(error.to_string()))
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CoordinatorError> {
    serde_json::from_slice(bytes).map_err(|error| CoordinatorError::Corrupt(error.to_string()))
}

/// Every record of `tree` that reads back, and the keys of those that do not: one unreadable
/// record (written by an older version, or damaged) is logged and left for inspection, and never
/// stops a listing or a start-up.
pub(crate) fn readable<T: DeserializeOwned>(
    tree: &Tree,
) -> Result<(Vec<T>, Vec<String>), CoordinatorError> {
    let mut records = Vec::new();
    let mut unreadable = Vec::new();
    for entry in tree.iter() {
        let (key, bytes) = entry?;
        match decode(&bytes) {
            Ok(record) => records.push(record),
            Err(error) => {
                let key = String::from_utf8_lossy(&key).to_string();
                tracing::error!(tree = %tree.name(), %key, %error, "skipping a stored record that cannot be read");
                unreadable.push(key);
            }
        }
    }
    Ok((records, unreadable))
}

pub(crate) fn get<T: DeserializeOwned>(
    tree: &Tree,
    key: &[u8],
) -> Result<Option<T>, CoordinatorError> {
    tree.get(key)?.map(|bytes| decode(&bytes)).transpose()
}

impl Storage {
    /// Applies `change` to the record under `key` (compare-and-swap, retried on a concurrent
    /// change); `change` may refuse with an error; `missing` is the error when there is no
    /// record.
    pub(crate) fn update<T: Serialize + DeserializeOwned>(
        &self,
        tree: &'static str,
        key: &[u8],
        missing: impl Fn() -> ErrorBody,
        change: impl Fn(&mut T) -> Result<(), ErrorBody>,
    ) -> Result<T, CoordinatorError> {
        self.swap(tree, key, change)?
            .ok_or_else(|| CoordinatorError::Rejected(missing()))
    }

    /// Applies `change` to the record under `key` by compare-and-swap, read again and retried
    /// when another writer changed it in between, so no concurrent update is lost; `None` when
    /// there is no record.
    pub(crate) fn swap<T: Serialize + DeserializeOwned>(
        &self,
        tree: &'static str,
        key: &[u8],
        change: impl Fn(&mut T) -> Result<(), ErrorBody>,
    ) -> Result<Option<T>, CoordinatorError> {
        let tree = self.tree(tree)?;
        loop {
            let Some(current) = tree.get(key)? else {
                return Ok(None);
            };
            let mut record: T = decode(&current)?;
            change(&mut record)?;
            if tree.compare_and_swap(key, Some(current), Some(encode(&record)?))? {
                return Ok(Some(record));
            }
        }
    }
}

/// Helpers for sled transactions over several trees.
pub(crate) mod txn {
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use sled::transaction::{ConflictableTransactionError, TransactionError};

    use super::TxTree;

    use crate::error::CoordinatorError;

    /// What a transaction's closure returns.
    pub(crate) type TxResult<T> = Result<T, ConflictableTransactionError<CoordinatorError>>;

    /// Aborts the transaction with `error`.
    pub(crate) fn abort(error: CoordinatorError) -> ConflictableTransactionError<CoordinatorError> {
        ConflictableTransactionError::Abort(error)
    }

    /// The transaction's error as the crate's.
    pub(crate) fn flatten(error: TransactionError<CoordinatorError>) -> CoordinatorError {
        match error {
            TransactionError::Abort(inner) => inner,
            TransactionError::Storage(inner) => CoordinatorError::Storage(inner),
        }
    }

    pub(crate) fn get<T: DeserializeOwned>(tree: &TxTree<'_>, key: &[u8]) -> TxResult<Option<T>> {
        tree.get(key)?
            .map(|bytes| super::decode(&bytes).map_err(abort))
            .transpose()
    }

    pub(crate) fn put<T: Serialize>(tree: &TxTree<'_>, key: &[u8], value: &T) -> TxResult<()> {
        tree.insert(key, super::encode(value).map_err(abort)?)?;
        Ok(())
    }
}

/// How soon a staged write is committed when no commit follows it.
pub const IDLE_COMMIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Commits the staged writes ([`Durability::Stage`]) when no commit came within
/// [`IDLE_COMMIT`] of one, so a store gone quiet has all of its state durable: one rule for a
/// local store (an fsync) and a replicated one (its changelog). Asleep while nothing is written.
pub async fn commit_when_idle(log: Log) {
    loop {
        if let Err(error) = log.recorded_since().await {
            tracing::warn!(%error, "the store's idle writes are no longer committed");
            return;
        }
        tokio::time::sleep(IDLE_COMMIT).await;
        if !log.has_uncommitted().unwrap_or(false) {
            continue;
        }
        if let Err(error) = commit_all(&log).await {
            tracing::warn!(%error, "could not commit the store's idle writes");
        }
    }
}

/// Commits every write recorded in `log` so far, staged ones included: the store's idle
/// committer, a snapshot (which must hold no write the changelog lacks) and a handover (the
/// next owner starts from them).
pub async fn commit_all(log: &Log) -> Result<(), ErrorBody> {
    let log = log.clone();
    blocking(move || log.commit()).await
}
