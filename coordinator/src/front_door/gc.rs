//! Garbage collection through the front door: a store of this data directory's own is swept by
//! its one shard; a replicated deployment's coordinators each sweep their own host against the
//! union of every shard's references ([`crate::collector`]), and the one a collection reaches
//! sweeps the store's bucket against it ([`atelier_transport::BlobBucket::collect`]).

use std::collections::BTreeSet;
use std::time::SystemTime;

use atelier_messages::shard::{HostSwept, ListReferences, MAX_LISTED_REFERENCES};
use atelier_messages::workshop::{CollectGarbage, Collected};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use futures::future::try_join_all;

use super::FrontDoor;
use crate::storage::blocking;

impl FrontDoor {
    /// Garbage collection: a replicated deployment's has every host's caches swept against
    /// every shard's references ([`crate::collector`]), then the store's bucket; a store of
    /// this data directory's own is swept by its one shard, in the order of its writes.
    pub(super) async fn collect_garbage(
        &self,
        request: CollectGarbage,
    ) -> Result<Collected, ErrorBody> {
        let Some(collector) = &self.inner.collector else {
            return self.forward(self.any_held_shard(), &request).await;
        };
        let mut collected = crate::collector::sweep_every_host(&self.inner.client).await?;
        if let Some(bucket) = collector.blobs.durable() {
            let gathered = SystemTime::now();
            let referenced = self.references().await?;
            let swept = bucket.collect(&referenced, gathered).await?;
            collected.removed_stored_blobs = swept.removed;
            collected.freed_stored_bytes = swept.freed_bytes;
            collected.kept_stored_blobs = swept.kept;
        }
        Ok(collected)
    }

    /// Sweeps this host's caches against every shard's references (none: not a replicated
    /// deployment's coordinator, which has no host cache of its own to sweep).
    pub(super) async fn sweep_this_host(&self) -> Result<HostSwept, ErrorBody> {
        let collector = (self.inner.collector.clone())
            .ok_or_else(|| ErrorBody::new(ErrorCode::ValidationFailed, "not a replicated store"))?;
        let referenced = self.references().await?;
        let collected = blocking(move || collector.sweep(&referenced)).await?;
        Ok(HostSwept {
            coordinator: self.inner.coordinator_id.clone(),
            collected,
        })
    }

    /// The union of the digests every shard references, each asked a page at a time; a shard
    /// that cannot answer fails the whole, so that nothing is swept on a partial view.
    pub async fn references(&self) -> Result<BTreeSet<String>, ErrorBody> {
        let shards = (0..self.inner.count).map(|shard| self.shard_references(shard));
        let mut union = BTreeSet::new();
        for digests in try_join_all(shards).await? {
            union.extend(digests);
        }
        Ok(union)
    }

    async fn shard_references(&self, shard: u32) -> Result<Vec<String>, ErrorBody> {
        let mut digests = Vec::new();
        let mut after = None;
        loop {
            let request = ListReferences {
                v: PROTOCOL_VERSION,
                after,
                limit: MAX_LISTED_REFERENCES,
            };
            let page = self.forward(shard, &request).await?;
            after = page.digests.last().cloned();
            digests.extend(page.digests);
            if !page.more || after.is_none() {
                return Ok(digests);
            }
        }
    }
}
