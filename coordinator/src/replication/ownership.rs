//! Holding a store by lease: a coordinator started with a replicated store waits (standby) until
//! it holds the lease, rebuilds its local sled from the latest snapshot and the changelog after
//! it (its own copy may hold writes that were never committed), fences the changelog with its
//! epoch, and from then on commits every write there ([`ChangelogSink`]); it renews the lease,
//! and when the lease is lost it says so ([`Ownership::lost`]) and commits nothing more.
//! Stopping, it releases the lease ([`Ownership::release`]), which wakes a standby at once: a
//! clean hand-over does not wait for the lease to run out.
//!
//! Every [`ReplicationSettings::snapshot_entries`] entries (and right after a take-over that
//! replayed as many) the owner snapshots its store into the object store and trims the
//! changelog up to the snapshot's position, so a take-over replays a bounded tail.
//!
//! Today the whole store is one shard (shard 0); shards of their own per workbench are the next
//! stage of docs/adr/0014.

use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use atelier_messages::shard::Mutation;
use futures::StreamExt;
use tokio::sync::{Notify, oneshot, watch};

use super::changelog::{Changelog, Replayed, ShardLog};
use super::lease::{Lease, Leases};
use super::replica::{Replica, Snapshots};
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
    /// Entries appended since the last snapshot was asked for.
    since_snapshot: AtomicU64,
    snapshot_entries: u64,
    /// Wakes the snapshot task.
    snapshot_due: Arc<Notify>,
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
            let seq =
                tokio::task::block_in_place(|| self.runtime.block_on(log.append_packed(entry)))?;
            self.replica.set_position(Position { seq, epoch })?;
            if self.since_snapshot.fetch_add(1, Ordering::Relaxed) + 1 >= self.snapshot_entries {
                self.since_snapshot.store(0, Ordering::Relaxed);
                self.snapshot_due.notify_one();
            }
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
    snapshotting: tokio::task::JoinHandle<()>,
}

impl Ownership {
    /// Waits until the lease is lost (never, while it is renewed).
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        let _ = lost.wait_for(|lost| *lost).await;
    }

    /// Gives the lease up (after serving stopped): a standby takes the store over at once.
    pub async fn release(self) {
        self.snapshotting.abort();
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
/// latest snapshot and the changelog after it, and takes the changelog over.
pub async fn take_store(
    jetstream: &async_nats::jetstream::Context,
    settings: ReplicationSettings,
    owner: &str,
    data_dir: &Path,
) -> Result<Ownership, CoordinatorError> {
    let leases = crate::patiently("opening the shard leases", || {
        Leases::open(jetstream, &settings, owner)
    })
    .await?;
    let changelog = crate::patiently("opening the changelog", || {
        Changelog::open(jetstream, &settings)
    })
    .await?;
    let snapshots = crate::patiently("opening the snapshots", || {
        Snapshots::open(jetstream, &settings)
    })
    .await?;
    let (lease, replica, shard_log, taken) = loop {
        let lease = acquire(&leases, &settings).await?;
        match take_over(&changelog, &snapshots, &lease, data_dir).await {
            Ok((replica, shard_log, taken)) => break (lease, replica, shard_log, taken),
            // The streams may still be electing leaders after a server died with the last
            // owner: stand by again (the lease released for whoever can) and retry.
            Err(error) => {
                tracing::warn!(%error, epoch = lease.epoch, "could not take the store over yet; standing by again");
                if let Err(error) = leases.release(lease).await {
                    tracing::warn!(%error, "could not release the store's lease; it runs out instead");
                }
                tokio::time::sleep(settings.lease_ttl / 3).await;
            }
        }
    };
    tracing::info!(
        owner,
        epoch = lease.epoch,
        snapshot_seq = taken.restored.seq,
        entries = taken.replayed.applied,
        refused = taken.replayed.refused.len(),
        elapsed_ms = taken.elapsed.as_millis() as u64,
        "took the store over from its snapshot and changelog"
    );
    let snapshot_due = Arc::new(Notify::new());
    if taken.replayed.applied >= settings.snapshot_entries {
        snapshot_due.notify_one();
    }
    let db = replica.db().clone();
    let log = Log::new(ChangelogSink {
        log: Mutex::new(shard_log),
        replica: replica.clone(),
        runtime: tokio::runtime::Handle::current(),
        since_snapshot: AtomicU64::new(0),
        snapshot_entries: settings.snapshot_entries.max(1),
        snapshot_due: snapshot_due.clone(),
    });
    let snapshotting = tokio::spawn(snapshot_when_due(
        Snapshotting {
            replica,
            log: log.clone(),
            changelog,
            snapshots,
        },
        snapshot_due,
    ));
    let (lost_tx, lost) = watch::channel(false);
    let (release, released) = oneshot::channel();
    let renewal = tokio::spawn(renew(leases, lease, settings, lost_tx, released));
    Ok(Ownership {
        db,
        log,
        lost,
        release,
        renewal,
        snapshotting,
    })
}

/// What a take-over found: the snapshot's position, what replay did and how long both took.
struct TakenOver {
    restored: Position,
    replayed: Replayed,
    elapsed: std::time::Duration,
}

/// Under `lease`: rebuilds the store under `data_dir/db` from the latest snapshot and the
/// changelog after it, and fences the changelog with the lease's epoch.
async fn take_over(
    changelog: &Changelog,
    snapshots: &Snapshots,
    lease: &Lease,
    data_dir: &Path,
) -> Result<(Replica, ShardLog, TakenOver), CoordinatorError> {
    let started = Instant::now();
    let replica = restore(snapshots, data_dir.join("db")).await?;
    let restored = replica.position()?;
    let mut apply =
        |seq: u64, checked: &Checked| tokio::task::block_in_place(|| replica.apply(seq, checked));
    let (shard_log, replayed) =
        ShardLog::take_over(changelog, WHOLE_STORE, lease.epoch, restored, &mut apply).await?;
    let taken = TakenOver {
        restored,
        replayed,
        elapsed: started.elapsed(),
    };
    Ok((replica, shard_log, taken))
}

/// A fresh store at `path` (whatever was there may hold uncommitted writes) holding the latest
/// snapshot, if there is one.
async fn restore(
    snapshots: &Snapshots,
    path: std::path::PathBuf,
) -> Result<Replica, CoordinatorError> {
    let snapshot = snapshots.get(WHOLE_STORE).await?;
    blocking(move || {
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(crate::error::io_error(&path))?;
        }
        match snapshot {
            Some(snapshot) => Replica::import(&path, &snapshot),
            None => Replica::from_db(crate::storage::open_db(&path)?),
        }
    })
    .await
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, CoordinatorError> + Send + 'static,
) -> Result<T, CoordinatorError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|join| CoordinatorError::Actor(join.to_string()))?
}

/// What a snapshot is taken from and stored in.
struct Snapshotting {
    replica: Replica,
    log: Log,
    changelog: Changelog,
    snapshots: Snapshots,
}

/// Takes a snapshot each time one is due, until the ownership ends. A failed snapshot is
/// logged and the changelog stays untrimmed until the next one succeeds.
async fn snapshot_when_due(snapshotting: Snapshotting, due: Arc<Notify>) {
    loop {
        due.notified().await;
        if let Err(error) = snapshot(&snapshotting).await {
            tracing::warn!(%error, "could not snapshot the store; its changelog is kept whole");
        }
    }
}

/// Reads the store (as it is being written), commits everything written meanwhile (so the
/// snapshot holds no write the changelog lacks), stores the snapshot and trims the changelog up
/// to its position.
async fn snapshot(snapshotting: &Snapshotting) -> Result<(), CoordinatorError> {
    let started = Instant::now();
    let replica = snapshotting.replica.clone();
    let snapshot = blocking(move || replica.export(WHOLE_STORE)).await?;
    let log = snapshotting.log.clone();
    blocking(move || log.commit()).await?;
    let bytes = snapshotting.snapshots.put(&snapshot).await?;
    let trimmed = snapshotting
        .changelog
        .trim(WHOLE_STORE, snapshot.position.seq)
        .await?;
    tracing::info!(
        seq = snapshot.position.seq,
        bytes,
        trimmed,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "snapshotted the store and trimmed its changelog"
    );
    Ok(())
}

/// How long a stopping owner waits for its lease's release.
const RELEASE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// Takes the lease once it is free, telling who holds it meanwhile. A release wakes this at
/// once; a lease that runs out is seen at the next look, a third of its life later at most.
/// The bucket may not answer for a while (its server died and its replicas elect a new
/// leader): a standby waits that out and looks again, since that is when it is needed.
async fn acquire(
    leases: &Leases,
    settings: &ReplicationSettings,
) -> Result<Lease, CoordinatorError> {
    let look_again = settings.lease_ttl / 3;
    let mut changes = None;
    let mut told = None;
    loop {
        if changes.is_none() {
            changes = leases.watch(WHOLE_STORE).await.ok();
        }
        match look(leases).await {
            Ok(Look::Free(lease)) => return Ok(lease),
            Ok(Look::Held(holder)) if holder != told => {
                tracing::info!(holder = ?holder, "standby: another coordinator holds the store");
                told = holder;
            }
            Ok(Look::Held(_)) => {}
            Err(error) => {
                tracing::warn!(%error, "standby: the store's lease cannot be read now; looking again");
                changes = None;
            }
        }
        match changes.as_mut() {
            Some(watch) => {
                if let Ok(None) = tokio::time::timeout(look_again, watch.next()).await {
                    changes = None;
                }
            }
            None => tokio::time::sleep(look_again).await,
        }
    }
}

/// What a look at the store's lease found.
enum Look {
    /// It was free: now it is ours.
    Free(Lease),
    /// Held, by this owner (if it still is when asked).
    Held(Option<String>),
}

/// Takes the lease if it is free now, else tells who holds it.
async fn look(leases: &Leases) -> Result<Look, CoordinatorError> {
    if let Some(lease) = leases.acquire(WHOLE_STORE).await? {
        return Ok(Look::Free(lease));
    }
    let holder = leases.holder(WHOLE_STORE).await?;
    Ok(Look::Held(holder.map(|holder| holder.owner)))
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
