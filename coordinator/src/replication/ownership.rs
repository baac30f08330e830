//! Holding a store by lease: a coordinator started with a replicated store waits (standby) until
//! it holds the lease, rebuilds its local sled from the changelog (its own copy may hold writes
//! that were never committed), fences the changelog with its epoch, and from then on commits
//! every write there ([`ChangelogSink`]); it renews the lease, and when the lease is lost it
//! says so ([`Ownership::lost`]) and commits nothing more. Stopping, it releases the lease
//! ([`Ownership::release`]), which wakes a standby at once: a clean hand-over does not wait for
//! the lease to run out.
//!
//! Today the whole store is one shard (shard 0); shards of their own per workbench are the next
//! stage of docs/adr/0014.

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use atelier_messages::shard::Mutation;
use futures::StreamExt;
use tokio::sync::{oneshot, watch};

use super::changelog::{Changelog, ShardLog};
use super::lease::{Lease, Leases};
use super::replica::Replica;
use super::{Checked, Position, ReplicationSettings};
use crate::error::CoordinatorError;
use crate::storage::{Log, Sink};

/// The shard that holds the whole store until stores are split per workbench.
pub const WHOLE_STORE: u32 = 0;

/// Commits a store's recorded writes to its changelog, then notes the position reached in the
/// store itself.
struct ChangelogSink {
    log: Mutex<ShardLog>,
    replica: Replica,
    runtime: tokio::runtime::Handle,
}

impl Sink for ChangelogSink {
    fn commit(&self, groups: Vec<Vec<Mutation>>) -> Result<(), CoordinatorError> {
        let mut log = self
            .log
            .lock()
            .map_err(|_| CoordinatorError::Corrupt("the changelog lock was poisoned".into()))?;
        let epoch = log.epoch();
        for entry in super::pack(groups, super::ENTRY_BUDGET) {
            // Commits come from blocking threads and, rarely, from the runtime's own: either way
            // the append is waited for here.
            let seq = tokio::task::block_in_place(|| self.runtime.block_on(log.append(entry)))?;
            self.replica.set_position(Position { seq, epoch })?;
        }
        Ok(())
    }
}

/// A store held by lease.
pub struct Ownership {
    /// The store's sled database, rebuilt from the changelog.
    pub db: sled::Db,
    /// Where the store's writes are committed.
    pub log: Log,
    lost: watch::Receiver<bool>,
    release: oneshot::Sender<()>,
    renewal: tokio::task::JoinHandle<()>,
}

impl Ownership {
    /// Waits until the lease is lost (never, while it is renewed).
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        let _ = lost.wait_for(|lost| *lost).await;
    }

    /// Gives the lease up (after serving stopped): a standby takes the store over at once.
    pub async fn release(self) {
        let _ = self.release.send(());
        if tokio::time::timeout(RELEASE_PATIENCE, self.renewal)
            .await
            .is_err()
        {
            tracing::warn!("the store's lease was not released in time; it runs out instead");
        }
    }
}

/// Waits for the store's lease as `owner`, then rebuilds the store under `data_dir/db` from the
/// changelog and takes the changelog over.
pub async fn take_store(
    jetstream: &async_nats::jetstream::Context,
    settings: ReplicationSettings,
    owner: &str,
    data_dir: &Path,
) -> Result<Ownership, CoordinatorError> {
    let leases = Leases::open(jetstream, &settings, owner).await?;
    let changelog = Changelog::open(jetstream, &settings).await?;
    let lease = acquire(&leases, &settings).await?;
    let path = data_dir.join("db");
    let db = tokio::task::spawn_blocking(move || -> Result<sled::Db, CoordinatorError> {
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(crate::error::io_error(&path))?;
        }
        crate::storage::open_db(&path)
    })
    .await
    .map_err(|join| CoordinatorError::Actor(join.to_string()))??;
    let replica = Replica::from_db(db.clone())?;
    let started = Instant::now();
    let mut apply =
        |seq: u64, checked: &Checked| tokio::task::block_in_place(|| replica.apply(seq, checked));
    let (shard_log, replayed) = ShardLog::take_over(
        &changelog,
        WHOLE_STORE,
        lease.epoch,
        Position::default(),
        &mut apply,
    )
    .await?;
    tracing::info!(
        owner,
        epoch = lease.epoch,
        entries = replayed.applied,
        refused = replayed.refused.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "took the store over from its changelog"
    );
    let log = Log::new(ChangelogSink {
        log: Mutex::new(shard_log),
        replica,
        runtime: tokio::runtime::Handle::current(),
    });
    let (lost_tx, lost) = watch::channel(false);
    let (release, released) = oneshot::channel();
    let renewal = tokio::spawn(renew(leases, lease, settings, lost_tx, released));
    Ok(Ownership {
        db,
        log,
        lost,
        release,
        renewal,
    })
}

/// How long a stopping owner waits for its lease's release.
const RELEASE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// Takes the lease once it is free, telling who holds it meanwhile. A release wakes this at
/// once; a lease that runs out is seen at the next look, a third of its life later at most.
async fn acquire(
    leases: &Leases,
    settings: &ReplicationSettings,
) -> Result<Lease, CoordinatorError> {
    let mut changes = leases.watch(WHOLE_STORE).await?;
    let mut told = None;
    loop {
        if let Some(lease) = leases.acquire(WHOLE_STORE).await? {
            return Ok(lease);
        }
        let holder = leases.holder(WHOLE_STORE).await?.map(|holder| holder.owner);
        if holder != told {
            tracing::info!(holder = ?holder, "standby: another coordinator holds the store");
            told = holder;
        }
        let _ = tokio::time::timeout(settings.lease_ttl / 3, changes.next()).await;
    }
}

/// Renews `lease` three times per its life; once it is lost (refused, or not renewed for a
/// whole life), says so and stops; asked to release it, releases it and stops.
async fn renew(
    leases: Leases,
    mut lease: Lease,
    settings: ReplicationSettings,
    lost: watch::Sender<bool>,
    mut release: oneshot::Receiver<()>,
) {
    let mut renewed = Instant::now();
    loop {
        tokio::select! {
            _ = &mut release => {
                match leases.release(lease).await {
                    Ok(()) => tracing::info!("released the store's lease"),
                    Err(error) => tracing::warn!(%error, "could not release the store's lease; it runs out instead"),
                }
                return;
            }
            () = tokio::time::sleep(settings.lease_ttl / 3) => {}
        }
        match leases.renew(&mut lease).await {
            Ok(()) => renewed = Instant::now(),
            Err(error) if renewed.elapsed() < settings.lease_ttl && !is_fenced(&error) => {
                tracing::warn!(%error, "could not renew the store's lease; retrying");
                continue;
            }
            Err(error) => {
                tracing::error!(%error, epoch = lease.epoch, "lost the store's lease: serving stops");
                let _ = lost.send(true);
                return;
            }
        }
    }
}

fn is_fenced(error: &CoordinatorError) -> bool {
    matches!(error, CoordinatorError::Rejected(body) if body.code == atelier_messages::ErrorCode::ShardFenced)
}
