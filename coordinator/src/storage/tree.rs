//! The store's trees as the coordinator writes them: each write to sled is also recorded, in the
//! order sled applied it, as a [`Mutation`] for the changelog when the store is replicated
//! (docs/adr/0014), and [`Log::commit`] hands everything recorded to the changelog at once — the
//! group commit: concurrent writers share one append.
//!
//! Without a log (the store is not replicated) the trees are sled's, with nothing recorded.

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use atelier_messages::shard::Mutation;
use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};
use sled::{IVec, Transactional};

use crate::error::CoordinatorError;

/// Where committed mutations go (the shard's changelog).
pub trait Sink: Send + Sync {
    /// Makes `groups` durable, in order, each group whole (one write, one batch or one
    /// transaction); an error means they may not be.
    fn commit(&self, groups: Vec<Vec<Mutation>>) -> Result<(), CoordinatorError>;
}

/// Mutations recorded and not yet committed, in groups that are applied whole.
#[derive(Default)]
struct Recorded {
    groups: Vec<Vec<Mutation>>,
    /// How many mutations were ever recorded.
    count: u64,
    /// Told of every group recorded (see [`Log::recorded_since`]).
    told: Arc<tokio::sync::Notify>,
}

impl Recorded {
    fn push(&mut self, group: Vec<Mutation>) {
        if group.is_empty() {
            return;
        }
        self.count += group.len() as u64;
        self.groups.push(group);
        self.told.notify_one();
    }
}

/// Group commit's state.
#[derive(Default)]
struct Committed {
    /// How many recorded mutations are durable.
    count: u64,
    /// A writer is committing for everyone.
    leader: bool,
    /// Why commits stopped: once one fails, nothing is acknowledged any more.
    failed: Option<String>,
}

struct LogState {
    /// Also the order lock: a write and its record happen under it, so the record's order is
    /// sled's.
    recorded: Mutex<Recorded>,
    committed: Mutex<Committed>,
    done: Condvar,
    sink: Box<dyn Sink>,
}

/// The record of a replicated store's writes.
#[derive(Clone)]
pub struct Log {
    state: Arc<LogState>,
}

fn poisoned() -> CoordinatorError {
    CoordinatorError::Corrupt("a storage lock was poisoned by a panic".to_string())
}

impl Log {
    pub fn new(sink: impl Sink + 'static) -> Self {
        Self {
            state: Arc::new(LogState {
                recorded: Mutex::new(Recorded::default()),
                committed: Mutex::new(Committed::default()),
                done: Condvar::new(),
                sink: Box::new(sink),
            }),
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Recorded>, CoordinatorError> {
        self.state.recorded.lock().map_err(|_| poisoned())
    }

    /// Returns once a write was recorded since the last return (at once for a write recorded
    /// before the first call); for one waiter, the shard's idle committer.
    pub async fn recorded_since(&self) -> Result<(), CoordinatorError> {
        let told = Arc::clone(&self.lock()?.told);
        told.notified().await;
        Ok(())
    }

    /// Whether some recorded write is not committed yet (one written without a flush).
    pub fn has_uncommitted(&self) -> Result<bool, CoordinatorError> {
        let recorded = self.lock()?.count;
        let committed = self.state.committed.lock().map_err(|_| poisoned())?;
        Ok(committed.count < recorded)
    }

    /// Commits everything recorded before this call, with whatever else is recorded meanwhile:
    /// one writer commits for all who wait.
    pub fn commit(&self) -> Result<(), CoordinatorError> {
        let target = self.lock()?.count;
        let state = &self.state;
        let mut committed = state.committed.lock().map_err(|_| poisoned())?;
        loop {
            if let Some(failed) = &committed.failed {
                return Err(CoordinatorError::Corrupt(format!(
                    "the store's changelog stopped taking writes: {failed}"
                )));
            }
            if committed.count >= target {
                return Ok(());
            }
            if committed.leader {
                committed = state.done.wait(committed).map_err(|_| poisoned())?;
                continue;
            }
            committed.leader = true;
            drop(committed);
            let (batch, upto) = {
                let mut recorded = self.lock()?;
                (std::mem::take(&mut recorded.groups), recorded.count)
            };
            let result = if batch.is_empty() {
                Ok(())
            } else {
                state.sink.commit(batch)
            };
            committed = state.committed.lock().map_err(|_| poisoned())?;
            committed.leader = false;
            match result {
                Ok(()) => committed.count = upto,
                Err(error) => committed.failed = Some(error.to_string()),
            }
            state.done.notify_all();
        }
    }
}

/// One tree of the store.
#[derive(Clone)]
pub struct Tree {
    inner: sled::Tree,
    name: &'static str,
    log: Option<Log>,
}

impl Tree {
    pub(super) fn new(inner: sled::Tree, name: &'static str, log: Option<Log>) -> Self {
        Self { inner, name, log }
    }

    fn record(recorded: Option<&mut Recorded>, mutation: impl FnOnce() -> Mutation) {
        if let Some(recorded) = recorded {
            recorded.push(vec![mutation()]);
        }
    }

    fn mutation(&self, key: &[u8], value: Option<&[u8]>) -> Mutation {
        Mutation {
            tree: self.name.to_string(),
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        }
    }

    /// The order lock, when the store is replicated.
    fn guard(&self) -> Result<Option<MutexGuard<'_, Recorded>>, CoordinatorError> {
        self.log.as_ref().map(Log::lock).transpose()
    }

    pub fn name(&self) -> &str {
        self.name
    }

    pub fn get(&self, key: impl AsRef<[u8]>) -> sled::Result<Option<IVec>> {
        self.inner.get(key)
    }

    pub fn iter(&self) -> sled::Iter {
        self.inner.iter()
    }

    pub fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> sled::Iter {
        self.inner.scan_prefix(prefix)
    }

    pub fn range<K: AsRef<[u8]>, R: std::ops::RangeBounds<K>>(&self, range: R) -> sled::Iter {
        self.inner.range(range)
    }

    pub fn len(&self) -> usize {
        self.inner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    pub fn insert(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<IVec>,
    ) -> Result<Option<IVec>, CoordinatorError> {
        let value: IVec = value.into();
        let mut guard = self.guard()?;
        let old = self.inner.insert(key.as_ref(), value.clone())?;
        Self::record(guard.as_deref_mut(), || {
            self.mutation(key.as_ref(), Some(&value))
        });
        Ok(old)
    }

    pub fn remove(&self, key: impl AsRef<[u8]>) -> Result<Option<IVec>, CoordinatorError> {
        let mut guard = self.guard()?;
        let old = self.inner.remove(key.as_ref())?;
        if old.is_some() {
            Self::record(guard.as_deref_mut(), || self.mutation(key.as_ref(), None));
        }
        Ok(old)
    }

    /// Sled's compare-and-swap; `Ok(false)` when the current value was not `old`.
    pub fn compare_and_swap(
        &self,
        key: impl AsRef<[u8]>,
        old: Option<impl AsRef<[u8]>>,
        new: Option<Vec<u8>>,
    ) -> Result<bool, CoordinatorError> {
        let mut guard = self.guard()?;
        let swapped = self
            .inner
            .compare_and_swap(key.as_ref(), old, new.clone())?
            .is_ok();
        if swapped {
            Self::record(guard.as_deref_mut(), || {
                self.mutation(key.as_ref(), new.as_deref())
            });
        }
        Ok(swapped)
    }

    /// Applies `batch` atomically.
    pub fn apply_batch(&self, batch: Batch) -> Result<(), CoordinatorError> {
        let mut guard = self.guard()?;
        let mut writes = sled::Batch::default();
        for (key, value) in &batch.writes {
            match value {
                Some(value) => writes.insert(key.as_slice(), value.as_slice()),
                None => writes.remove(key.as_slice()),
            }
        }
        self.inner.apply_batch(writes)?;
        if let Some(recorded) = guard.as_deref_mut() {
            let group = batch.writes.into_iter().map(|(key, value)| Mutation {
                tree: self.name.to_string(),
                key,
                value,
            });
            recorded.push(group.collect());
        }
        Ok(())
    }
}

/// Writes applied to one tree at once ([`Tree::apply_batch`]).
#[derive(Default)]
pub struct Batch {
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Batch {
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: Vec<u8>) {
        self.writes.push((key.as_ref().to_vec(), Some(value)));
    }

    pub fn remove(&mut self, key: impl AsRef<[u8]>) {
        self.writes.push((key.as_ref().to_vec(), None));
    }
}

/// One tree inside a transaction: its writes are recorded with the transaction's, kept only if
/// it commits.
pub struct TxTree<'a> {
    inner: &'a TransactionalTree,
    name: &'a str,
    writes: &'a RefCell<Vec<Mutation>>,
}

impl TxTree<'_> {
    pub fn get(
        &self,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<IVec>, sled::transaction::UnabortableTransactionError> {
        self.inner.get(key)
    }

    pub fn insert(
        &self,
        key: impl AsRef<[u8]>,
        value: impl Into<IVec>,
    ) -> Result<Option<IVec>, sled::transaction::UnabortableTransactionError> {
        let value: IVec = value.into();
        let old = self.inner.insert(key.as_ref(), value.clone())?;
        self.writes.borrow_mut().push(Mutation {
            tree: self.name.to_string(),
            key: key.as_ref().to_vec(),
            value: Some(value.to_vec()),
        });
        Ok(old)
    }

    /// A number never handed out before in this store (sled's id generator).
    pub fn generate_id(&self) -> Result<u64, sled::Error> {
        self.inner.generate_id()
    }

    pub fn remove(
        &self,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<IVec>, sled::transaction::UnabortableTransactionError> {
        let old = self.inner.remove(key.as_ref())?;
        if old.is_some() {
            self.writes.borrow_mut().push(Mutation {
                tree: self.name.to_string(),
                key: key.as_ref().to_vec(),
                value: None,
            });
        }
        Ok(old)
    }
}

/// Runs `work` as one sled transaction over `trees`, retried on conflicts like sled's; the
/// writes of the attempt that commits are recorded together.
pub fn transaction<const N: usize, T, E>(
    trees: [&Tree; N],
    work: impl Fn([TxTree<'_>; N]) -> Result<T, ConflictableTransactionError<E>>,
) -> Result<T, TransactionError<E>> {
    let inners: Vec<sled::Tree> = trees.iter().map(|tree| tree.inner.clone()).collect();
    let log = trees.iter().find_map(|tree| tree.log.clone());
    let committed = RefCell::new(Vec::new());
    let mut guard = match &log {
        Some(log) => Some(log.lock().map_err(|_| {
            TransactionError::Storage(sled::Error::ReportableBug(
                "a storage lock was poisoned by a panic".to_string(),
            ))
        })?),
        None => None,
    };
    let result = inners.as_slice().transaction(|transactional| {
        let writes = RefCell::new(Vec::new());
        let wrapped: [TxTree<'_>; N] = std::array::from_fn(|index| TxTree {
            inner: &transactional[index],
            name: trees[index].name,
            writes: &writes,
        });
        let out = work(wrapped)?;
        committed.replace(writes.into_inner());
        Ok(out)
    })?;
    if let Some(recorded) = guard.as_deref_mut() {
        recorded.push(committed.into_inner());
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::storage::Storage;

    /// Counts commits and keeps every committed mutation, in order.
    #[derive(Clone, Default)]
    struct Collecting {
        commits: Arc<AtomicU64>,
        mutations: Arc<Mutex<Vec<Mutation>>>,
    }

    impl Sink for Collecting {
        fn commit(&self, groups: Vec<Vec<Mutation>>) -> Result<(), CoordinatorError> {
            self.commits.fetch_add(1, Ordering::SeqCst);
            // Slow enough for writers to pile up behind the one committing.
            std::thread::sleep(std::time::Duration::from_millis(5));
            self.mutations
                .lock()
                .map_err(|_| poisoned())?
                .extend(groups.into_iter().flatten());
            Ok(())
        }
    }

    #[test]
    fn concurrent_writers_share_commits_and_the_record_keeps_sleds_order() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let sink = Collecting::default();
        let storage = crate::storage::open_db(&dir.path().join("db"))
            .map(|db| Storage::replicated(db, Log::new(sink.clone())))
            .unwrap_or_else(|e| panic!("{e}"));
        let (writers, writes) = (8, 50);
        std::thread::scope(|scope| {
            for writer in 0..writers {
                let storage = storage.clone();
                scope.spawn(move || {
                    let tree = storage.tree("jobs").unwrap_or_else(|e| panic!("{e}"));
                    for n in 0..writes {
                        // Every writer also overwrites one shared key: its last value in the
                        // record must be sled's.
                        tree.insert(b"shared", format!("{writer}-{n}").into_bytes())
                            .unwrap_or_else(|e| panic!("{e}"));
                        tree.insert(format!("{writer}-{n}"), vec![1])
                            .unwrap_or_else(|e| panic!("{e}"));
                        storage.flush().unwrap_or_else(|e| panic!("{e}"));
                    }
                });
            }
        });
        let commits = sink.commits.load(Ordering::SeqCst);
        let flushes = writers * writes;
        assert!(
            commits < flushes / 2,
            "{commits} commits for {flushes} flushes: writers share commits"
        );
        let recorded = sink.mutations.lock().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recorded.len(), 2 * flushes as usize, "each write once");
        let last_shared = recorded.iter().rev().find(|m| m.key == b"shared");
        let tree = storage.tree("jobs").unwrap_or_else(|e| panic!("{e}"));
        let stored = tree.get(b"shared").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            last_shared.and_then(|m| m.value.clone()),
            stored.map(|v| v.to_vec())
        );
    }

    #[test]
    fn a_write_left_to_the_next_flush_is_committed_by_it_in_order() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let sink = Collecting::default();
        let log = Log::new(sink.clone());
        let storage = crate::storage::open_db(&dir.path().join("db"))
            .map(|db| Storage::replicated(db, log.clone()))
            .unwrap_or_else(|e| panic!("{e}"));
        let tree = storage.tree("jobs").unwrap_or_else(|e| panic!("{e}"));
        let uncommitted = || log.has_uncommitted().unwrap_or_else(|e| panic!("{e}"));
        assert!(!uncommitted());
        tree.insert(b"started", vec![1])
            .unwrap_or_else(|e| panic!("{e}"));
        storage
            .made(crate::storage::Durability::Rebuildable)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(uncommitted());
        assert_eq!(sink.commits.load(Ordering::SeqCst), 0);
        tree.insert(b"journaled", vec![2])
            .unwrap_or_else(|e| panic!("{e}"));
        storage
            .made(crate::storage::Durability::Flushed)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!uncommitted());
        assert_eq!(sink.commits.load(Ordering::SeqCst), 1);
        let recorded = sink.mutations.lock().unwrap_or_else(|e| panic!("{e}"));
        let keys: Vec<&[u8]> = recorded.iter().map(|m| m.key.as_slice()).collect();
        assert_eq!(keys, [b"started".as_slice(), b"journaled".as_slice()]);
    }

    #[tokio::test]
    async fn the_idle_committer_is_woken_by_a_write_and_sleeps_without_one() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let log = Log::new(Collecting::default());
        let storage = crate::storage::open_db(&dir.path().join("db"))
            .map(|db| Storage::replicated(db, log.clone()))
            .unwrap_or_else(|e| panic!("{e}"));
        let tree = storage.tree("jobs").unwrap_or_else(|e| panic!("{e}"));
        let quiet = std::time::Duration::from_millis(100);
        let woken = tokio::time::timeout(quiet, log.recorded_since()).await;
        assert!(woken.is_err(), "nothing written: no wake-up");
        tree.insert(b"started", vec![1])
            .unwrap_or_else(|e| panic!("{e}"));
        tree.insert(b"journaled", vec![2])
            .unwrap_or_else(|e| panic!("{e}"));
        let woken = tokio::time::timeout(quiet, log.recorded_since()).await;
        assert!(matches!(woken, Ok(Ok(()))), "a write wakes the committer");
        storage.flush().unwrap_or_else(|e| panic!("{e}"));
        let woken = tokio::time::timeout(quiet, log.recorded_since()).await;
        assert!(
            woken.is_err(),
            "two writes wake it once; a flush records nothing"
        );
    }

    #[test]
    fn a_failed_commit_stops_every_later_acknowledgement() {
        struct Failing;
        impl Sink for Failing {
            fn commit(&self, _: Vec<Vec<Mutation>>) -> Result<(), CoordinatorError> {
                Err(CoordinatorError::Nats(
                    "the changelog is unreachable".into(),
                ))
            }
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let storage = crate::storage::open_db(&dir.path().join("db"))
            .map(|db| Storage::replicated(db, Log::new(Failing)))
            .unwrap_or_else(|e| panic!("{e}"));
        let tree = storage.tree("jobs").unwrap_or_else(|e| panic!("{e}"));
        tree.insert(b"a", vec![1]).unwrap_or_else(|e| panic!("{e}"));
        assert!(storage.flush().is_err());
        assert!(storage.flush().is_err(), "nothing is acknowledged any more");
    }
}
