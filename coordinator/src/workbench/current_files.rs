//! The files a workbench's agent sees (its current view: the draft, else published), kept in
//! memory between writes, so a read-only tool call gets them without a storage thread.
//!
//! A copy is kept with the counts of writes to the trees it was read from, loaded before the
//! read ([`Log::writes_to`](crate::storage::Log::writes_to)); it is handed out only while both
//! counts still have those values. Every write to those trees through this store moves them,
//! whoever makes it (a tool call, `wb add`, publish, discard, restore), and the copies live and
//! die with the shard's engine, so a coordinator that loses a shard keeps nothing of it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use atelier_messages::store::{ManifestEntry, View};

use super::Workbenches;
use crate::error::CoordinatorError;
use crate::storage::{Storage, trees};

/// Workbenches whose files are kept at most; past it the copies are dropped and read again.
const KEPT_WORKBENCHES: usize = 256;

/// The write counts a copy was read under: manifests (every file change) and workbench records
/// (a workbench created or deleted).
type Seen = (u64, u64);

/// Each kept workbench's copy of its files and the counts it was read under.
type Kept = HashMap<String, (Seen, Arc<Vec<ManifestEntry>>)>;

pub(crate) struct CurrentFiles {
    manifests: Arc<AtomicU64>,
    records: Arc<AtomicU64>,
    kept: Mutex<Kept>,
}

impl std::fmt::Debug for CurrentFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentFiles")
            .field("seen", &self.seen())
            .field("workbenches", &self.kept().len())
            .finish()
    }
}

impl CurrentFiles {
    pub(crate) fn new(storage: &Storage) -> Self {
        let log = storage.log();
        Self {
            manifests: log.writes_to(trees::MANIFESTS),
            records: log.writes_to(trees::WORKBENCHES),
            kept: Mutex::default(),
        }
    }

    /// The counts to keep a copy under: loaded before the copy is read.
    pub(crate) fn seen(&self) -> Seen {
        (
            self.manifests.load(Ordering::Acquire),
            self.records.load(Ordering::Acquire),
        )
    }

    /// `workbench`'s files, when a copy read since the last write to their trees is kept.
    pub(crate) fn get(&self, workbench: &str) -> Option<Arc<Vec<ManifestEntry>>> {
        let kept = self.kept();
        let (seen, files) = kept.get(workbench)?;
        (*seen == self.seen()).then(|| Arc::clone(files))
    }

    /// Keeps `files`, read after the counts were `seen`.
    pub(crate) fn keep(&self, workbench: &str, seen: Seen, files: Arc<Vec<ManifestEntry>>) {
        let mut kept = self.kept();
        if kept.len() >= KEPT_WORKBENCHES && !kept.contains_key(workbench) {
            kept.clear();
        }
        kept.insert(workbench.to_string(), (seen, files));
    }

    fn kept(&self) -> MutexGuard<'_, Kept> {
        // A panic while holding it left it whole: each change is one insert or clear.
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Workbenches {
    /// The files of `workbench`'s current view (the draft, else published), when no write
    /// touched them since they were last read ([`Workbenches::current_files`]); no storage read.
    pub fn kept_current_files(&self, workbench: &str) -> Option<Arc<Vec<ManifestEntry>>> {
        self.current.get(workbench)
    }

    /// Reads the files of `workbench`'s current view and keeps them for
    /// [`Workbenches::kept_current_files`].
    pub fn current_files(
        &self,
        workbench: &str,
    ) -> Result<Arc<Vec<ManifestEntry>>, CoordinatorError> {
        let seen = self.current.seen();
        let (_, manifest) = self.resolve(workbench, View::Current)?;
        let files = Arc::new(manifest.into_values().collect::<Vec<_>>());
        self.current.keep(workbench, seen, Arc::clone(&files));
        Ok(files)
    }
}
