//! The one way async code reaches a shard's records: [`Store`]. Each operation runs on a
//! storage thread ([`run_blocking`]) and says, by the method it is called through, how durable
//! its writes are when it returns — [`Store::commit`] or [`Store::stage`] — so no record type
//! commits on its own and no caller flushes: the rule is written here once.

use atelier_messages::ErrorBody;

use super::{Durability, Storage, run_blocking};
use crate::error::CoordinatorError;

/// Records kept in a shard's [`Storage`] (jobs, batches, workbenches): their operations read
/// and write, and leave durability to the [`Store`] they are called through.
pub trait Records: Clone + Send + Sync + 'static {
    /// The storage the records live in.
    fn storage(&self) -> &Storage;
}

/// A shard's records as async code reaches them.
#[derive(Debug, Clone)]
pub struct Store<R> {
    records: R,
}

impl<R: Records> Store<R> {
    pub fn new(records: R) -> Self {
        Self { records }
    }

    /// The records, for code already on a storage thread that composes their operations (and
    /// is itself called through a store).
    pub fn records(&self) -> &R {
        &self.records
    }

    /// Runs a read.
    pub async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&R) -> Result<T, CoordinatorError> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        let records = self.records.clone();
        run_blocking(move || read(&records))
            .await
            .map_err(ErrorBody::from)
    }

    /// Runs a write and commits it (and every write before it) before returning: what it wrote
    /// may be acknowledged.
    pub async fn commit<T: Send + 'static>(
        &self,
        write: impl FnOnce(&R) -> Result<T, CoordinatorError> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        self.write(Durability::Commit, write).await
    }

    /// Runs a write a replay rebuilds and stages it: durable with the next commit, or within
    /// [`IDLE_COMMIT`](super::IDLE_COMMIT) when none comes.
    pub async fn stage<T: Send + 'static>(
        &self,
        write: impl FnOnce(&R) -> Result<T, CoordinatorError> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        self.write(Durability::Stage, write).await
    }

    /// Runs a write as durably as `durability` says.
    async fn write<T: Send + 'static>(
        &self,
        durability: Durability,
        write: impl FnOnce(&R) -> Result<T, CoordinatorError> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        let records = self.records.clone();
        run_blocking(move || written(&records, durability, write))
            .await
            .map_err(ErrorBody::from)
    }

    /// [`Store::write`] on this thread, which must not be a runtime worker: the actor that
    /// orders a shard's workbench changes runs them on a storage thread of its own, and a tool
    /// or benchmark with no runtime may call it.
    pub fn write_here<T>(
        &self,
        durability: Durability,
        write: impl FnOnce(&R) -> Result<T, CoordinatorError>,
    ) -> Result<T, CoordinatorError> {
        written(&self.records, durability, write)
    }
}

/// Runs `write`, then makes what it wrote as durable as `durability` says.
fn written<R: Records, T>(
    records: &R,
    durability: Durability,
    write: impl FnOnce(&R) -> Result<T, CoordinatorError>,
) -> Result<T, CoordinatorError> {
    let value = write(records)?;
    match durability {
        Durability::Commit => records.storage().commit()?,
        Durability::Stage => atelier_transport::failpoint::hit("after_rebuildable_write"),
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use atelier_messages::shard::Mutation;
    use serde_json::json;

    use super::*;
    use crate::jobs::Jobs;
    use crate::storage::{Log, Sink};

    /// A changelog that keeps what it was given.
    #[derive(Clone, Default)]
    struct Changelog {
        commits: Arc<AtomicU64>,
        keys: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl Sink for Changelog {
        fn commit(&self, groups: Vec<Vec<Mutation>>) -> Result<(), CoordinatorError> {
            self.commits.fetch_add(1, Ordering::SeqCst);
            let mut keys = self.keys.lock().unwrap_or_else(|e| panic!("{e}"));
            keys.extend(groups.into_iter().flatten().map(|mutation| mutation.key));
            Ok(())
        }
    }

    fn journaled(changelog: &Changelog) -> Vec<String> {
        let keys = changelog.keys.lock().unwrap_or_else(|e| panic!("{e}"));
        keys.iter()
            .map(|key| String::from_utf8_lossy(key).replace('\u{0}', "/"))
            .collect()
    }

    #[tokio::test]
    async fn a_committed_write_is_in_the_changelog_when_it_returns_and_a_staged_one_waits() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let changelog = Changelog::default();
        let log = Log::new(changelog.clone());
        let storage = crate::storage::open_db(&dir.path().join("db"))
            .map(|db| Storage::replicated(db, log.clone()))
            .unwrap_or_else(|e| panic!("{e}"));
        let store = Store::new(Jobs::new(storage));

        store
            .stage(|jobs| jobs.record("j", "staged", &json!(1)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(changelog.commits.load(Ordering::SeqCst), 0);
        assert!(log.has_uncommitted().unwrap_or_else(|e| panic!("{e}")));

        store
            .commit(|jobs| jobs.record("j", "committed", &json!(2)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(changelog.commits.load(Ordering::SeqCst), 1);
        assert_eq!(journaled(&changelog), ["j/staged", "j/committed"]);
        assert!(!log.has_uncommitted().unwrap_or_else(|e| panic!("{e}")));

        let read = store
            .read(|jobs| jobs.recall("j", "committed"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read, Some(json!(2)));
        assert_eq!(
            changelog.commits.load(Ordering::SeqCst),
            1,
            "a read commits nothing"
        );

        let refused = store
            .commit(|jobs| {
                jobs.record("j", "refused", &json!(3))?;
                Err::<(), _>(CoordinatorError::Corrupt("refused".into()))
            })
            .await;
        assert!(refused.is_err());
        assert_eq!(
            changelog.commits.load(Ordering::SeqCst),
            1,
            "a write that fails is not committed by its call"
        );
    }
}
