//! Garbage collection of a replicated deployment (docs/adr/0014) on this host. Its shards share
//! the host's blob directory and its workers' table databases, which are caches there: a large
//! blob's durable copy is in the replicated store's bucket, a small one's in its shard's store.
//! So what is kept is the union of the digests every shard references, gathered a page at a
//! time from each ([`FrontDoor::references`](crate::front_door::FrontDoor::references)), and whatever was written within a grace period: another
//! shard's write may be between storing its blob here and referencing it, and no order between
//! shards says otherwise. The blobs of a shard another coordinator holds now are kept as long
//! as that shard references them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use atelier_messages::workshop::Collected;

use crate::blobs::{BlobDir, Swept, sweep_tables};
use crate::error::CoordinatorError;

/// This host's caches and how long a new file in them is kept whatever references it.
#[derive(Debug, Clone)]
pub struct HostCollector {
    pub blobs: BlobDir,
    pub table_cache: PathBuf,
    pub grace: Duration,
}

impl HostCollector {
    /// Sweeps this host's caches of every blob not in `referenced` (every shard's references)
    /// and not written within the grace period.
    pub fn sweep(&self, referenced: &BTreeSet<String>) -> Result<Collected, CoordinatorError> {
        let now = SystemTime::now();
        let keep_blob = |digest: &str| {
            referenced.contains(digest)
                || (self.blobs.path_for(digest)).is_some_and(|path| self.young(&path, now))
        };
        let swept: Swept = self.blobs.sweep(keep_blob)?;
        let keep_table = |digest: &str| {
            referenced.contains(digest)
                || self.young(&self.table_cache.join(format!("{digest}.duckdb")), now)
        };
        let tables = sweep_tables(&self.table_cache, keep_table)?;
        tracing::info!(
            referenced = referenced.len(),
            removed = swept.removed,
            freed_bytes = swept.freed_bytes,
            removed_tables = tables.removed,
            "this host's blob caches garbage collected"
        );
        Ok(Collected {
            removed_blobs: swept.removed,
            freed_bytes: swept.freed_bytes + tables.freed_bytes,
            kept_blobs: swept.kept,
            removed_tables: tables.removed,
        })
    }

    /// Whether the file at `path` was written within the grace period before `now`.
    fn young(&self, path: &Path, now: SystemTime) -> bool {
        let Ok(modified) = std::fs::metadata(path).and_then(|meta| meta.modified()) else {
            return false;
        };
        now.duration_since(modified)
            .map_or(true, |age| age < self.grace)
    }
}
