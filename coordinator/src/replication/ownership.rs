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
//! A coordinator holds any number of a deployment's shards ([`Holding::try_take`]), each with a
//! store of its own under `shards/N/db`; which ones is the balancer's choice.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use atelier_messages::shard::Mutation;
use tokio::sync::{Notify, oneshot, watch};

use super::changelog::{Changelog, Replayed, ShardLog};
use super::lease::{Lease, Leases};
use super::replica::{Replica, Snapshots};
use super::{Checked, Position, ReplicationSettings};
use crate::error::CoordinatorError;
use crate::storage::{Log, Sink, run_blocking as blocking, wait_for};

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
            // Commits run on the storage's blocking threads, which wait for the append here.
            let seq = wait_for(
                &self.runtime,
                "a changelog append",
                log.append_packed(entry),
            )??;
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
    idle_commits: tokio::task::JoinHandle<()>,
}

impl Ownership {
    /// Whether the lease was lost.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Gives the lease up (after serving stopped): a standby takes the store over at once.
    pub async fn release(self) {
        self.snapshotting.abort();
        self.idle_commits.abort();
        // Staged writes go with the store: the next owner starts from them.
        if let Err(error) = crate::storage::commit_all(&self.log).await {
            tracing::warn!(%error, "the store's last writes were not committed; the next owner redoes them");
        }
        let _ = self.release.send(());
        if tokio::time::timeout(RELEASE_PATIENCE, self.renewal)
            .await
            .is_err()
        {
            tracing::warn!("the store's lease was not released in time; it runs out instead");
        }
    }
}

/// The leases, changelogs and snapshots of a deployment's shards, as one coordinator holds
/// them, and where it keeps the stores of those it holds.
#[derive(Clone)]
pub struct Holding {
    leases: Leases,
    changelog: Changelog,
    snapshots: Snapshots,
    settings: ReplicationSettings,
    data_dir: PathBuf,
    /// The page cache of each shard store it holds ([`Holding::sized_for`]).
    shard_cache_bytes: u64,
}

impl Holding {
    /// Opens the leases bucket, the changelog and the snapshots (waiting for JetStream a while)
    /// for `owner`, keeping shard stores under `data_dir/shards`.
    pub async fn open(
        jetstream: &async_nats::jetstream::Context,
        settings: ReplicationSettings,
        owner: &str,
        data_dir: &Path,
    ) -> Result<Self, CoordinatorError> {
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
        Ok(Self {
            leases,
            changelog,
            snapshots,
            settings,
            data_dir: data_dir.to_path_buf(),
            shard_cache_bytes: settings.shard_cache_bytes(1),
        })
    }

    /// Splits the cache budget over a deployment of `shards` shards.
    pub fn sized_for(self, shards: u32) -> Self {
        Self {
            shard_cache_bytes: self.settings.shard_cache_bytes(shards),
            ..self
        }
    }

    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    pub fn settings(&self) -> &ReplicationSettings {
        &self.settings
    }

    /// The deployment's shard count: the recorded one, else the settings', recorded now. A
    /// deployment whose store was one shard before counts were recorded stays one shard.
    pub async fn shard_count(&self) -> Result<u32, CoordinatorError> {
        let before =
            self.changelog.last(0).await? > 0 || !self.snapshots.names(0).await?.is_empty();
        let proposed = match before {
            true => 1,
            false => self.settings.shards,
        };
        crate::patiently("reading the deployment", || {
            self.changelog.shard_count(proposed)
        })
        .await
    }

    /// Takes `shard` if no one holds it now (`None` when someone does), rebuilding its store from
    /// the latest snapshot and the changelog after it. A take-over that fails half-way (the
    /// streams may still elect leaders after a server died with the last owner) gives the lease
    /// back for whoever can.
    pub async fn try_take(&self, shard: u32) -> Result<Option<Ownership>, CoordinatorError> {
        let Some(lease) = self.leases.acquire(shard).await? else {
            return Ok(None);
        };
        let epoch = lease.epoch;
        let path = self.shard_dir(shard).join("db");
        let store = StoreAt {
            path,
            cache_bytes: self.shard_cache_bytes,
        };
        match take_over(&self.changelog, &self.snapshots, &lease, shard, store).await {
            Ok((replica, shard_log, taken)) => {
                Ok(Some(self.hold(shard, lease, replica, shard_log, taken)))
            }
            Err(error) => {
                tracing::warn!(%error, shard, epoch, "could not take the shard over yet");
                if let Err(error) = self.leases.release(lease).await {
                    tracing::warn!(%error, shard, "could not release the shard's lease; it runs out instead");
                }
                Err(error)
            }
        }
    }

    /// Where `shard`'s store and its snapshot files are kept.
    fn shard_dir(&self, shard: u32) -> PathBuf {
        self.data_dir.join("shards").join(shard.to_string())
    }

    /// Serves the store taken over: commits its writes to the changelog, snapshots it when due
    /// and renews the lease.
    fn hold(
        &self,
        shard: u32,
        lease: Lease,
        replica: Replica,
        shard_log: ShardLog,
        taken: TakenOver,
    ) -> Ownership {
        let settings = self.settings;
        tracing::info!(
            shard,
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
                shard,
                dir: self.shard_dir(shard),
                replica,
                log: log.clone(),
                changelog: self.changelog.clone(),
                snapshots: self.snapshots.clone(),
            },
            snapshot_due,
        ));
        let idle_commits = tokio::spawn(crate::storage::commit_when_idle(log.clone()));
        let (lost_tx, lost) = watch::channel(false);
        let (release, released) = oneshot::channel();
        let renewal = tokio::spawn(renew(
            self.leases.clone(),
            lease,
            settings,
            lost_tx,
            released,
        ));
        Ownership {
            db,
            log,
            lost,
            release,
            renewal,
            snapshotting,
            idle_commits,
        }
    }
}

/// Waits for shard 0's lease as `owner` (a deployment of one shard), then takes it over.
pub async fn take_store(
    jetstream: &async_nats::jetstream::Context,
    settings: ReplicationSettings,
    owner: &str,
    data_dir: &Path,
) -> Result<Ownership, CoordinatorError> {
    let holding = Holding::open(jetstream, settings, owner, data_dir).await?;
    loop {
        // Held by another, or not taken yet (`try_take` says why): look again.
        if let Ok(Some(ownership)) = holding.try_take(0).await {
            return Ok(ownership);
        }
        tokio::time::sleep(settings.lease_ttl / 3).await;
    }
}

/// What a take-over found: the snapshot's position, what replay did and how long both took.
struct TakenOver {
    restored: Position,
    replayed: Replayed,
    elapsed: Duration,
}

/// Where a shard's store is opened, and how much it may cache.
struct StoreAt {
    path: PathBuf,
    cache_bytes: u64,
}

/// Under `lease`: rebuilds `shard`'s store at `store` from the latest snapshot and the
/// changelog after it, and fences the changelog with the lease's epoch.
async fn take_over(
    changelog: &Changelog,
    snapshots: &Snapshots,
    lease: &Lease,
    shard: u32,
    store: StoreAt,
) -> Result<(Replica, ShardLog, TakenOver), CoordinatorError> {
    let started = Instant::now();
    let replica = restore(snapshots, shard, store).await?;
    let restored = replica.position()?;
    let applier = Applier::start(replica.clone());
    let mut apply = |seq: u64, checked: &Checked| applier.send(seq, checked);
    let replay = ShardLog::take_over(changelog, shard, lease.epoch, restored, &mut apply).await;
    // The applier's own error first: a replay that stopped because the applier did says why.
    applier.finish().await?;
    let (shard_log, replayed) = replay?;
    let taken = TakenOver {
        restored,
        replayed,
        elapsed: started.elapsed(),
    };
    Ok((replica, shard_log, taken))
}

/// Applies the entries a replay reads to a store, in order, on a blocking thread (sled's writes
/// never run on the runtime's), as the replay hands them over.
struct Applier {
    entries: std::sync::mpsc::Sender<(u64, Checked)>,
    applying: tokio::task::JoinHandle<Result<(), CoordinatorError>>,
}

impl Applier {
    fn start(replica: Replica) -> Self {
        let (entries, received) = std::sync::mpsc::channel::<(u64, Checked)>();
        let applying = tokio::spawn(blocking(move || {
            for (seq, checked) in received {
                replica.apply(seq, &checked)?;
            }
            Ok(())
        }));
        Self { entries, applying }
    }

    /// Hands an entry over; refused once the applier stopped on an error.
    fn send(&self, seq: u64, checked: &Checked) -> Result<(), CoordinatorError> {
        self.entries
            .send((seq, checked.clone()))
            .map_err(|_| CoordinatorError::Corrupt("the replay's applier stopped".to_string()))
    }

    /// Waits until every entry handed over is applied; the first error applying one.
    async fn finish(self) -> Result<(), CoordinatorError> {
        drop(self.entries);
        self.applying
            .await
            .map_err(|join| CoordinatorError::Corrupt(format!("the replay's applier: {join}")))?
    }
}

/// A fresh store at `store` (whatever was there may hold uncommitted writes) holding the latest
/// snapshot, if there is one.
async fn restore(
    snapshots: &Snapshots,
    shard: u32,
    store: StoreAt,
) -> Result<Replica, CoordinatorError> {
    let StoreAt { path, cache_bytes } = store;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let snapshot = snapshots.fetch(shard, &dir).await?;
    blocking(move || {
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(crate::error::io_error(&path))?;
        }
        let Some(snapshot) = snapshot else {
            return Replica::open(&path, cache_bytes);
        };
        let restored = Replica::import_from(&path, cache_bytes, &snapshot);
        let _ = std::fs::remove_file(&snapshot.path);
        restored
    })
    .await
}

/// What a snapshot is taken from and stored in.
struct Snapshotting {
    shard: u32,
    /// The shard's directory (snapshot files are written there before they are stored).
    dir: PathBuf,
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
    let shard = snapshotting.shard;
    let path = snapshotting.dir.join("snapshot.taken");
    let snapshot = blocking(move || replica.export_to(shard, &path)).await?;
    crate::storage::commit_all(&snapshotting.log).await?;
    let stored = snapshotting.snapshots.put_file(&snapshot).await;
    let _ = tokio::fs::remove_file(&snapshot.path).await;
    let bytes = stored?;
    let seq = snapshot.header.position.seq;
    let trimmed = snapshotting.changelog.trim(shard, seq).await?;
    tracing::info!(
        shard,
        seq,
        bytes,
        trimmed,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "snapshotted the store and trimmed its changelog"
    );
    Ok(())
}

/// How long a stopping owner waits for its lease's release.
const RELEASE_PATIENCE: Duration = Duration::from_secs(5);

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
