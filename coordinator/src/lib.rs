//! The coordinator: job intake, one PhaseOrchestrator per running job, the DraftStore, and the
//! control plane, all reachable only over NATS.
//!
//! Durable state lives in sled (jobs, RPI checkpoints, manifests, applied call ids) and in a
//! content-addressed blob directory. A restarted coordinator adopts every unfinished job and
//! continues it from its last checkpoint.
//!
//! # Layout
//! - [`storage`]: the sled database and its trees.
//! - [`blobs`]: content-addressed blobs on disk. [`collector`]: a replicated deployment's
//!   garbage collection of this host's caches, against every shard's references.
//! - [`workbench`]: manifests, drafts, publish/discard, idempotent draft writes.
//! - [`jobs`]: job records and RPI checkpoints.
//! - [`lifecycle`]: job state transitions, the one place that decides them.
//! - [`draft_store`]: the DraftStore actor and its typed handle (in-process for orchestrators).
//! - [`store_service`]: the DraftStore's `atelier.store.*` verbs over NATS.
//! - `store_claim`: one store per NATS deployment (a store of its own claims it; a second
//!   coordinator refuses to start with `STORE_CLAIMED`).
//! - [`orchestrator`]: the PhaseOrchestrator actor (one per running job) and [`Orchestrators`],
//!   which starts them and reaches them by job id.
//! - [`host`]: what a running job sees: tool calls, files, journal, signals.
//! - `outcome`: what a succeeded job changed, from its files at its start and at its end.
//! - [`context`]: what a job's model calls carry besides the manifest (conversation, budgets);
//!   `compression`: the model's summary of older conversation, kept in it.
//! - [`defaults`]: what a submission leaves out (model, time limit) and a run's deadline.
//! - [`replication`]: shard leases, the fenced changelog, shard stores and their snapshots
//!   (docs/adr/0014).
//! - `engine`: everything that serves one shard's store; a process runs one per shard it
//!   holds. [`front_door`]: the public verbs, each handed to the shard it is about (in process
//!   or to its owner under `atelier.shard.N.`). `balancer`: which shards of a replicated
//!   deployment this coordinator holds, balanced with the live others.
//! - [`review`]: the draft's content review, with the office pool's file diffs.
//! - [`control`]: the `atelier.ctl.*` verbs.
//! - `workshop_service`: the `atelier.workshop.*` verbs (conversation, rewind, regenerate,
//!   models, checkpoints, restore, blob collection).
//! - [`batches`]: batch records and their targets; [`batch_runner`]: the BatchRunner actor
//!   (one per running batch), which reaches its children over NATS ([`children`]);
//!   `batch_service`: the `atelier.batch.*` verbs.
//! - [`templates`]: `{{variables}}` in workflows and batch messages, target globs.
//! - [`intake`]: streams and the JetStream job consumer; `copies`: streams and buckets made
//!   before with fewer copies than `store_replicas`, raised at start.
//! - [`events`]: ordered event publishing into the EVENTS stream; `event_feed`: the event
//!   streams read a page at a time for clients (`atelier.ctl.events`).
//! - `pieces`: blobs read and uploaded in pieces (`atelier.store.blob`, `atelier.store.upload`).
//! - `workshop_events`: the workshop events' outbox published into its stream.
//! - [`error`]: the crate error type, [`CoordinatorError`].
//!
//! Imports flow one way: `balancer` → `engine` → `intake`, `control` → `orchestrator` (→
//! `outcome`) → `host` → `draft_store`, `jobs` → `lifecycle`, `storage`.

mod balancer;
pub mod batch_runner;
mod batch_service;
pub mod batches;
pub mod blobs;
pub mod children;
pub mod collector;
mod compression;
pub mod context;
mod control;
mod copies;
pub mod defaults;
pub mod draft_store;
mod engine;
pub mod error;
mod event_feed;
pub mod events;
pub mod front_door;
mod host;
pub mod intake;
mod job_gate;
pub mod jobs;
pub mod lifecycle;
pub mod orchestrator;
mod outcome;
mod pieces;
pub mod provider_limits;
pub mod replication;
pub mod review;
pub mod storage;
mod store_claim;
mod store_service;
pub mod templates;
pub mod workbench;
mod workshop_events;
mod workshop_service;

use std::path::PathBuf;
use std::time::Duration;

use atelier_agents::rpi::Budgets;
use atelier_agents::spec::ProviderSettings;

pub use defaults::{JobDefaults, TimeLimits};
pub use error::CoordinatorError;
pub use orchestrator::Orchestrators;

use crate::blobs::BlobDir;
use crate::front_door::FrontDoor;
use crate::jobs::Jobs;
use crate::storage::{Storage, Store, blocking};

/// How to run a coordinator.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Holds `db/` (sled) and `blobs/`.
    pub data_dir: PathBuf,
    pub coordinator_id: String,
    /// The model and time limit of jobs that name none, and the most time a job may ask for.
    pub defaults: JobDefaults,
    pub provider_settings: ProviderSettings,
    pub budgets: Budgets,
    /// How long the journal of a finished job is kept.
    pub journal_retention: Duration,
    /// Jobs run at once; more wait (submissions stay in JetStream, adopted jobs `queued`).
    pub max_running_jobs: usize,
    /// Checkpoints kept per workbench.
    pub checkpoints_kept: u64,
    /// How old a draft is before history, chat and the dashboard point it out.
    pub stale_draft_after: Duration,
    /// The format of the event streams' messages (each also says it in `Content-Type`).
    pub events_format: atelier_messages::Format,
    /// Hold the store by lease and commit every write to its changelog on JetStream, so that
    /// another coordinator can take it over (docs/adr/0014); `None`: the store is this data
    /// directory's alone.
    pub replication: Option<replication::ReplicationSettings>,
}

impl CoordinatorConfig {
    /// The blob directory workers on this host may read directly.
    pub fn blob_dir(&self) -> PathBuf {
        self.data_dir.join("blobs")
    }

    /// Where the workers sharing this data directory cache table databases.
    pub fn table_cache_dir(&self) -> PathBuf {
        self.data_dir.join("cache").join("tabular")
    }
}

/// A running coordinator.
pub struct CoordinatorHandle {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    front: FrontDoor,
    held: Held,
}

/// How a coordinator holds its shards.
enum Held {
    /// This data directory's own store: the deployment's one shard, held while its claim on
    /// the deployment is ([`store_claim`]).
    Own(Box<engine::Engine>, Box<store_claim::Claim>),
    /// A replicated deployment's shards, balanced with the other coordinators.
    Balanced(balancer::Balancer),
}

impl CoordinatorHandle {
    /// Waits until this coordinator lost a replicated shard's lease, or its store's claim on
    /// the deployment: it must stop, since another coordinator serves the shard now.
    pub async fn lost(&self) {
        match &self.held {
            Held::Own(_, claim) => claim.lost().await,
            Held::Balanced(balancer) => balancer.lost().await,
        }
    }

    /// Stops serving (running jobs stop with the process; they resume at the next start, or on
    /// the coordinators a replicated deployment's shards are then handed to).
    pub async fn shutdown(self) {
        for task in &self.tasks {
            task.abort();
        }
        match self.held {
            Held::Own(engine, claim) => {
                engine.stop(&self.front).await;
                claim.release().await;
            }
            Held::Balanced(balancer) => balancer.stop().await,
        }
    }
}

/// Opens storage, creates the streams, serves the store and control plane, adopts unfinished
/// jobs, and starts consuming submissions.
pub async fn start_coordinator(
    client: async_nats::Client,
    config: CoordinatorConfig,
) -> Result<CoordinatorHandle, CoordinatorError> {
    let jetstream = async_nats::jetstream::new(client.clone());
    // Streams and buckets are made before any shard is taken, each with as many copies as a
    // replicated store's: a coordinator takes shards over when a server may have just died with
    // their last owner, and JetStream may not answer for a while then (the intake attaches with
    // retries).
    let replicas = config.replication.map_or(1, |settings| settings.replicas);
    refuse_replicas_without_a_cluster(&client, replicas)?;
    patiently("creating the streams", || {
        intake::ensure_streams(&jetstream, replicas)
    })
    .await?;
    let mut blobs = BlobDir::open(config.blob_dir())?;
    let serving = take_the_store(&client, &jetstream, &config, &mut blobs).await?;
    let (count, serving) = match serving {
        Serving::Own(claim) => (1, Serving::Own(claim)),
        Serving::Replicated(holding) => {
            let count = holding.shard_count().await?;
            (
                count,
                Serving::Replicated(Box::new(holding.sized_for(count))),
            )
        }
    };
    let collector = config.replication.map(|settings| collector::HostCollector {
        blobs: blobs.clone(),
        table_cache: config.table_cache_dir(),
        grace: settings.blob_grace,
    });
    let front = FrontDoor::new(
        client.clone(),
        config.coordinator_id.clone(),
        count,
        collector,
    );
    let limiters =
        provider_limits::Limiters::open(&jetstream, &config.coordinator_id, replicas).await?;
    let shared = engine::Shared {
        client: client.clone(),
        jetstream: jetstream.clone(),
        limiters,
        blobs,
        slots: std::sync::Arc::new(tokio::sync::Semaphore::new(config.max_running_jobs.max(1))),
        front: front.clone(),
        config: std::sync::Arc::new(config.clone()),
    };
    // The public verbs are answered from now on: a request for a shard not held yet waits for
    // it (an adopted batch's runner asks after its children as soon as its shard is served).
    let mut tasks = front.serve().await?;
    let held = match serving {
        Serving::Replicated(holding) => {
            Held::Balanced(balancer::Balancer::start(shared, *holding).await?)
        }
        Serving::Own(claim) => {
            let path = config.data_dir.join("db");
            let storage = blocking(move || Storage::open(&path)).await?;
            tasks.push(tokio::spawn(crate::storage::commit_when_idle(
                storage.log(),
            )));
            Held::Own(
                Box::new(engine::Engine::start(&shared, 0, storage, None).await?),
                claim,
            )
        }
    };
    if replicas > 1 {
        copies::raise_all(&jetstream, replicas).await;
    }
    tasks.push(intake::run_intake(jetstream, front.clone()));
    tracing::info!(coordinator = %config.coordinator_id, data = %config.data_dir.display(), shards = count, "coordinator ready");
    Ok(CoordinatorHandle { tasks, front, held })
}

/// The store a coordinator serves, taken before anything is served.
enum Serving {
    /// A store of its own in its data directory, with its claim on the deployment.
    Own(Box<store_claim::Claim>),
    /// A replicated store's shards (the blob directory reads the blob bucket too).
    Replicated(Box<replication::ownership::Holding>),
}

/// One store per deployment: a store of its own claims it, a replicated one refuses to start
/// beside such a claim, then opens its blob bucket and its shard ownership.
async fn take_the_store(
    client: &async_nats::Client,
    jetstream: &async_nats::jetstream::Context,
    config: &CoordinatorConfig,
    blobs: &mut BlobDir,
) -> Result<Serving, CoordinatorError> {
    let Some(settings) = config.replication else {
        let claim =
            store_claim::claim_own_store(jetstream, &config.coordinator_id, &config.data_dir)
                .await?;
        return Ok(Serving::Own(Box::new(claim)));
    };
    store_claim::refuse_beside_an_own_store(jetstream).await?;
    warn_of_a_store_of_its_own(&config.data_dir);
    let durable = patiently("opening the replicated store's blob bucket", || async {
        Ok(atelier_transport::BlobBucket::ensure_durable(
            client,
            settings.replicas,
            settings.blob_grace,
        )
        .await?)
    })
    .await?;
    *blobs = blobs.clone().with_remote(durable);
    let holding = replication::ownership::Holding::open(
        jetstream,
        settings,
        &config.coordinator_id,
        &config.data_dir,
    )
    .await?;
    Ok(Serving::Replicated(Box::new(holding)))
}

/// Refuses `store_replicas` above one on a server that is not in a cluster.
fn refuse_replicas_without_a_cluster(
    client: &async_nats::Client,
    replicas: usize,
) -> Result<(), CoordinatorError> {
    if replicas <= 1 || client.server_info().cluster.is_some() {
        return Ok(());
    }
    Err(CoordinatorError::Rejected(
        atelier_messages::ErrorBody::new(
            atelier_messages::ErrorCode::ValidationFailed,
            format!(
                "store_replicas = {replicas} needs a cluster of at least {replicas} NATS servers with \
             JetStream, and the server this coordinator reached is not in a cluster: connect to \
             the cluster, or set store_replicas = 1 for a single server"
            ),
        ),
    ))
}

/// Says so when the data directory also holds a store of its own, which a replicated store does
/// not read: its workbenches and jobs are not served while the store is replicated.
fn warn_of_a_store_of_its_own(data_dir: &std::path::Path) {
    let own = data_dir.join("db");
    let holds_something = std::fs::read_dir(&own).is_ok_and(|mut entries| entries.next().is_some());
    if holds_something {
        tracing::warn!(store = %own.display(), "this data directory holds a store of its own, which a replicated store does not read: its workbenches and jobs are not served while replicated_store is on (start without it to serve them again; moving them into a replicated store is not built)");
    }
}

/// How long start-up waits for JetStream to answer: a server that has just restarted, or
/// streams electing new leaders after a server died, answer again within seconds.
const JETSTREAM_PATIENCE: Duration = Duration::from_secs(60);

/// Runs `attempt` until it succeeds, once a second for [`JETSTREAM_PATIENCE`], logging why it
/// did not; then its error.
pub(crate) async fn patiently<T, Attempt, Fut>(
    what: &str,
    mut attempt: Attempt,
) -> Result<T, CoordinatorError>
where
    Attempt: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, CoordinatorError>>,
{
    let deadline = tokio::time::Instant::now() + JETSTREAM_PATIENCE;
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(%error, what, "JetStream does not answer yet; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// How often finished jobs' journals are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// Prunes the journal of finished jobs older than `retention`, now and then every 10 minutes.
pub(crate) fn spawn_journal_pruning(
    jobs: Store<Jobs>,
    retention: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let cutoff = atelier_messages::now_ms()
                .saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
            match jobs.commit(move |jobs| jobs.prune_journal(cutoff)).await {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "pruned journal entries of finished jobs"),
                Err(error) => tracing::warn!(%error, "journal pruning failed"),
            }
            tokio::time::sleep(PRUNE_EVERY).await;
        }
    })
}
