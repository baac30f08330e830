//! The store's trees as the coordinator writes them: every write to sled takes the store's order
//! lock and is counted, and recorded, in the order sled applied it, as a [`Mutation`] for the
//! changelog when the store is replicated (docs/adr/0014); [`Log::commit`] makes everything
//! written so far durable at once — the group commit: concurrent writers share one changelog
//! append (replicated) or one fsync (local, [`Log::local`]). Both stores take the same locks
//! through the same code, and a write that would take the order lock while its thread holds it
//! (a tree written inside a transaction's closure) is refused rather than left to deadlock.
//! Each tree's writes are also counted where a reader asked ([`Log::writes_to`]): a copy read
//! from a tree is current while its count has not moved since.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

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

/// A local store's sink: sled's own fsync (its writes are in sled already, none is recorded).
struct SledFlush(sled::Db);

impl Sink for SledFlush {
    fn commit(&self, _: Vec<Vec<Mutation>>) -> Result<(), CoordinatorError> {
        self.0.flush()?;
        Ok(())
    }
}

/// Mutations recorded and not yet committed, in groups that are applied whole.
#[derive(Default)]
struct Recorded {
    /// Whether the mutations themselves are kept for the sink (a replicated store's), or only
    /// counted (a local one's: sled holds them).
    keep: bool,
    groups: Vec<Vec<Mutation>>,
    /// How many mutations were ever recorded.
    count: u64,
    /// Told of every group recorded (see [`Log::recorded_since`]).
    told: Arc<tokio::sync::Notify>,
    /// Writes per tree, for the trees a reader asked about ([`Log::writes_to`]).
    per_tree: Arc<WritesPerTree>,
}

/// How many writes each tree had since a reader first asked; bumped after the write is in sled.
#[derive(Default)]
struct WritesPerTree(Mutex<HashMap<String, Arc<AtomicU64>>>);

impl WritesPerTree {
    fn trees(&self) -> MutexGuard<'_, HashMap<String, Arc<AtomicU64>>> {
        // A panic while holding it left it whole: each change is one insert or lookup.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count(&self, group: &[Mutation]) {
        let trees = self.trees();
        for mutation in group {
            if let Some(writes) = trees.get(&mutation.tree) {
                writes.fetch_add(1, Ordering::Release);
            }
        }
    }
}

impl Recorded {
    fn push(&mut self, group: Vec<Mutation>) {
        if group.is_empty() {
            return;
        }
        self.per_tree.count(&group);
        self.count += group.len() as u64;
        if self.keep {
            self.groups.push(group);
        }
        self.told.notify_one();
    }
}

thread_local! {
    /// Whether this thread holds a store's order lock.
    static HOLDS_ORDER_LOCK: Cell<bool> = const { Cell::new(false) };
}

/// The order lock, held: a write and its record happen under it. Marks its thread while held.
struct Ordered<'a> {
    guard: MutexGuard<'a, Recorded>,
}

impl Drop for Ordered<'_> {
    fn drop(&mut self) {
        HOLDS_ORDER_LOCK.with(|held| held.set(false));
    }
}

impl std::ops::Deref for Ordered<'_> {
    type Target = Recorded;

    fn deref(&self) -> &Recorded {
        &self.guard
    }
}

impl std::ops::DerefMut for Ordered<'_> {
    fn deref_mut(&mut self) -> &mut Recorded {
        &mut self.guard
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
    /// The record's, without its lock.
    per_tree: Arc<WritesPerTree>,
}

/// The record of a store's writes: what was written, in order, and how much of it is durable.
#[derive(Clone)]
pub struct Log {
    state: Arc<LogState>,
}

fn poisoned() -> CoordinatorError {
    CoordinatorError::Corrupt("a storage lock was poisoned by a panic".to_string())
}

impl Log {
    /// A replicated store's log: every write is recorded and committed to `sink`.
    pub fn new(sink: impl Sink + 'static) -> Self {
        Self::with(sink, true)
    }

    /// A local store's log: writes are counted, and committed by an fsync of `db`.
    pub fn local(db: sled::Db) -> Self {
        Self::with(SledFlush(db), false)
    }

    fn with(sink: impl Sink + 'static, keep: bool) -> Self {
        let recorded = Recorded {
            keep,
            ..Recorded::default()
        };
        let per_tree = Arc::clone(&recorded.per_tree);
        Self {
            state: Arc::new(LogState {
                recorded: Mutex::new(recorded),
                committed: Mutex::new(Committed::default()),
                done: Condvar::new(),
                sink: Box::new(sink),
                per_tree,
            }),
        }
    }

    /// The count of writes to the tree `name` from now on: a copy of what a reader read from the
    /// tree after loading the count is current while the count still has that value (every
    /// write through this log bumps it once the write is in sled).
    pub fn writes_to(&self, name: &str) -> Arc<AtomicU64> {
        let mut trees = self.state.per_tree.trees();
        Arc::clone(trees.entry(name.to_string()).or_default())
    }

    /// The record, for reading its counts (not the order lock's marker: a reader may be inside
    /// a write's lock).
    fn counts(&self) -> Result<MutexGuard<'_, Recorded>, CoordinatorError> {
        self.state.recorded.lock().map_err(|_| poisoned())
    }

    /// The order lock; refused when this thread holds it already, which would deadlock.
    fn lock(&self) -> Result<Ordered<'_>, CoordinatorError> {
        if HOLDS_ORDER_LOCK.with(Cell::get) {
            return Err(CoordinatorError::Corrupt(
                "a store write was made while the same thread held the store's order lock (a \
                 tree written inside a transaction's closure): use the transaction's trees"
                    .to_string(),
            ));
        }
        let guard = self.counts()?;
        HOLDS_ORDER_LOCK.with(|held| held.set(true));
        Ok(Ordered { guard })
    }

    /// Returns once a write was recorded since the last return (at once for a write recorded
    /// before the first call); for one waiter, the shard's idle committer.
    pub async fn recorded_since(&self) -> Result<(), CoordinatorError> {
        let told = Arc::clone(&self.counts()?.told);
        told.notified().await;
        Ok(())
    }

    /// Whether some recorded write is not committed yet (a staged one).
    pub fn has_uncommitted(&self) -> Result<bool, CoordinatorError> {
        let recorded = self.counts()?.count;
        let committed = self.state.committed.lock().map_err(|_| poisoned())?;
        Ok(committed.count < recorded)
    }

    /// Commits everything recorded before this call, with whatever else is recorded meanwhile:
    /// one writer commits for all who wait.
    pub(super) fn commit(&self) -> Result<(), CoordinatorError> {
        let target = self.counts()?.count;
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
                let mut recorded = self.counts()?;
                (std::mem::take(&mut recorded.groups), recorded.count)
            };
            // A local store's batch is empty: its writes are in sled, and the sink syncs them.
            let result = state.sink.commit(batch);
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
    log: Log,
}

impl Tree {
    pub(super) fn new(inner: sled::Tree, name: &'static str, log: Log) -> Self {
        Self { inner, name, log }
    }

    fn record(recorded: &mut Recorded, mutation: impl FnOnce() -> Mutation) {
        recorded.push(vec![mutation()]);
    }

    fn mutation(&self, key: &[u8], value: Option<&[u8]>) -> Mutation {
        Mutation {
            tree: self.name.to_string(),
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        }
    }

    /// The order lock.
    fn guard(&self) -> Result<Ordered<'_>, CoordinatorError> {
        self.log.lock()
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
        Self::record(&mut guard, || self.mutation(key.as_ref(), Some(&value)));
        Ok(old)
    }

    pub fn remove(&self, key: impl AsRef<[u8]>) -> Result<Option<IVec>, CoordinatorError> {
        let mut guard = self.guard()?;
        let old = self.inner.remove(key.as_ref())?;
        if old.is_some() {
            Self::record(&mut guard, || self.mutation(key.as_ref(), None));
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
            Self::record(&mut guard, || self.mutation(key.as_ref(), new.as_deref()));
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
        let group = batch.writes.into_iter().map(|(key, value)| Mutation {
            tree: self.name.to_string(),
            key,
            value,
        });
        guard.push(group.collect());
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
    let committed = RefCell::new(Vec::new());
    let Some(first) = trees.first() else {
        return Err(TransactionError::Storage(sled::Error::Unsupported(
            "a transaction over no tree".to_string(),
        )));
    };
    let mut guard = first.log.lock().map_err(|error| {
        TransactionError::Storage(sled::Error::ReportableBug(error.to_string()))
    })?;
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
    guard.push(committed.into_inner());
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
                        storage.commit().unwrap_or_else(|e| panic!("{e}"));
                    }
                });
            }
        });
        let commits = sink.commits.load(Ordering::SeqCst);
        let commits_asked = writers * writes;
        assert!(
            commits < commits_asked / 2,
            "{commits} commits for {commits_asked} asked: writers share commits"
        );
        let recorded = sink.mutations.lock().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            recorded.len(),
            2 * commits_asked as usize,
            "each write once"
        );
        let last_shared = recorded.iter().rev().find(|m| m.key == b"shared");
        let tree = storage.tree("jobs").unwrap_or_else(|e| panic!("{e}"));
        let stored = tree.get(b"shared").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            last_shared.and_then(|m| m.value.clone()),
            stored.map(|v| v.to_vec())
        );
    }

    #[test]
    fn a_staged_write_is_committed_by_the_next_commit_in_order() {
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
        assert!(uncommitted());
        assert_eq!(sink.commits.load(Ordering::SeqCst), 0);
        tree.insert(b"journaled", vec![2])
            .unwrap_or_else(|e| panic!("{e}"));
        storage.commit().unwrap_or_else(|e| panic!("{e}"));
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
        storage.commit().unwrap_or_else(|e| panic!("{e}"));
        let woken = tokio::time::timeout(quiet, log.recorded_since()).await;
        assert!(
            woken.is_err(),
            "two writes wake it once; a commit records nothing"
        );
    }

    #[test]
    fn every_kind_of_write_moves_its_trees_count_and_no_other() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for storage in both_stores(dir.path()) {
            let log = storage.log();
            let (manifests, jobs) = (log.writes_to("manifests"), log.writes_to("jobs"));
            let tree = storage.tree("manifests").unwrap_or_else(|e| panic!("{e}"));
            let count = || manifests.load(Ordering::Acquire);
            tree.insert(b"a", vec![1]).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(count(), 1);
            tree.remove(b"missing").unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(count(), 1, "removing nothing writes nothing");
            let swapped = tree
                .compare_and_swap(b"a", Some([9u8]), Some(vec![2]))
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!swapped);
            assert_eq!(count(), 1, "a failed swap writes nothing");
            tree.compare_and_swap(b"a", Some([1u8]), Some(vec![2]))
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(count(), 2);
            let mut batch = Batch::default();
            batch.insert(b"b", vec![3]);
            tree.apply_batch(batch).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(count(), 3);
            transaction([&tree], |[tree]| {
                tree.insert(b"c", vec![4])?;
                Ok::<_, ConflictableTransactionError<CoordinatorError>>(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(count(), 4);
            tree.remove(b"a").unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(count(), 5);
            assert_eq!(
                jobs.load(Ordering::Acquire),
                0,
                "another tree's count stays"
            );
        }
    }

    /// A local and a replicated store of a fresh database.
    fn both_stores(dir: &std::path::Path) -> [Storage; 2] {
        let local = Storage::open(&dir.join("local")).unwrap_or_else(|e| panic!("{e}"));
        let replicated = crate::storage::open_db(&dir.join("replicated"))
            .map(|db| Storage::replicated(db, Log::new(Collecting::default())))
            .unwrap_or_else(|e| panic!("{e}"));
        [local, replicated]
    }

    #[test]
    fn a_tree_written_inside_a_transaction_is_refused_the_same_in_both_stores() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for storage in both_stores(dir.path()) {
            let jobs = storage.tree("jobs").unwrap_or_else(|e| panic!("{e}"));
            let outside = jobs.clone();
            let result = transaction([&jobs], |[tx]| {
                tx.insert(b"inside", vec![1])?;
                outside
                    .insert(b"outside", vec![2])
                    .map_err(ConflictableTransactionError::Abort)?;
                Ok(())
            });
            let refused = matches!(result, Err(TransactionError::Abort(CoordinatorError::Corrupt(ref why))) if why.contains("inside a transaction"));
            assert!(refused, "{storage:?}: {result:?}");
            // Nothing of the refused transaction was written, and the store goes on.
            assert_eq!(jobs.get(b"inside").ok().flatten(), None, "{storage:?}");
            jobs.insert(b"after", vec![3])
                .unwrap_or_else(|e| panic!("{e}"));
            storage.commit().unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn both_stores_count_their_writes_and_a_commit_makes_them_all_durable() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for storage in both_stores(dir.path()) {
            let tree = storage.tree("jobs").unwrap_or_else(|e| panic!("{e}"));
            let uncommitted = || {
                storage
                    .log
                    .has_uncommitted()
                    .unwrap_or_else(|e| panic!("{e}"))
            };
            assert!(!uncommitted(), "{storage:?}");
            tree.insert(b"a", vec![1]).unwrap_or_else(|e| panic!("{e}"));
            let mut batch = Batch::default();
            batch.insert(b"b", vec![2]);
            tree.apply_batch(batch).unwrap_or_else(|e| panic!("{e}"));
            assert!(uncommitted(), "{storage:?}");
            storage.commit().unwrap_or_else(|e| panic!("{e}"));
            assert!(!uncommitted(), "{storage:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_write_no_commit_follows_is_committed_within_the_idle_delay_in_both_stores() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for storage in both_stores(dir.path()) {
            let committer = tokio::spawn(crate::storage::commit_when_idle(storage.log()));
            let tree = storage.tree("jobs").unwrap_or_else(|e| panic!("{e}"));
            tree.insert(b"started", vec![1])
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(
                storage.log.has_uncommitted().unwrap_or(false),
                "{storage:?}"
            );
            tokio::time::sleep(crate::storage::IDLE_COMMIT * 3).await;
            assert!(
                !storage.log.has_uncommitted().unwrap_or(true),
                "{storage:?}: committed by the idle committer"
            );
            committer.abort();
        }
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
        assert!(storage.commit().is_err());
        assert!(
            storage.commit().is_err(),
            "nothing is acknowledged any more"
        );
    }
}
