//! The coordinator: job intake, one PhaseOrchestrator per running job, the DraftStore, and the
//! control plane, all reachable only over NATS.
//!
//! Durable state lives in sled (jobs, RPI checkpoints, manifests, applied call ids) and in a
//! content-addressed blob directory. A restarted coordinator adopts every unfinished job and
//! continues it from its last checkpoint.
//!
//! # Layout
//! - [`storage`]: the sled database and its trees.
//! - [`blobs`]: content-addressed blobs on disk.
//! - [`workbench`]: manifests, drafts, publish/discard, idempotent draft writes.
//! - [`jobs`]: job records and RPI checkpoints.
//! - [`draft_store`]: the DraftStore actor and its handle.
//! - [`orchestrator`]: the PhaseOrchestrator actor.
//! - [`intake`]: streams, the JetStream job consumer, job start-up.
//! - [`events`]: ordered event publishing into the EVENTS stream.
//! - [`service`]: NATS front ends for `atelier.store.*` and `atelier.ctl.*`.
//! - [`calls`]: orchestrator requests with retries and progress-kept deadlines.
//! - [`registry`]: jobs running in this process, cancel and approval switches.
//! - [`failpoint`]: named kill points for crash tests.
//! - [`rpc`]: typed NATS request/reply.
//! - [`error`]: the crate error type, [`CoordinatorError`].

pub mod blobs;
pub mod calls;
pub mod draft_store;
pub mod error;
pub mod events;
pub mod failpoint;
pub mod intake;
pub mod jobs;
pub mod orchestrator;
pub mod registry;
pub mod rpc;
pub mod service;
pub mod storage;
pub mod workbench;

use std::path::PathBuf;
use std::time::Duration;

use atelier_agents::rpi::Budgets;
use atelier_agents::spec::ProviderSettings;

pub use error::CoordinatorError;

use crate::blobs::BlobDir;
use crate::draft_store::{DraftStoreConfig, DraftStoreHandle};
use crate::intake::{JobStarter, OrchestratorTemplate};
use crate::jobs::Jobs;
use crate::registry::Registry;
use crate::storage::Storage;
use crate::workbench::Workbenches;

/// How to run a coordinator.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Holds `db/` (sled) and `blobs/`.
    pub data_dir: PathBuf,
    pub coordinator_id: String,
    /// Model spec for jobs that name none.
    pub default_model: Option<String>,
    pub provider_settings: ProviderSettings,
    pub budgets: Budgets,
    /// How long the journal of a finished job is kept.
    pub journal_retention: Duration,
}

impl CoordinatorConfig {
    /// The blob directory workers on this host may read directly.
    pub fn blob_dir(&self) -> PathBuf {
        self.data_dir.join("blobs")
    }
}

/// A running coordinator.
pub struct CoordinatorHandle {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    store: DraftStoreHandle,
    store_join: tokio::task::JoinHandle<()>,
}

impl CoordinatorHandle {
    /// Stops serving (running jobs stop with the process; they resume at the next start).
    pub async fn shutdown(self) {
        for task in &self.tasks {
            task.abort();
        }
        self.store.stop();
        let _ = self.store_join.await;
    }
}

/// Opens storage, creates the streams, serves the store and control plane, adopts unfinished
/// jobs, and starts consuming submissions.
pub async fn start_coordinator(
    client: async_nats::Client,
    config: CoordinatorConfig,
) -> Result<CoordinatorHandle, CoordinatorError> {
    let storage = {
        let path = config.data_dir.join("db");
        tokio::task::spawn_blocking(move || Storage::open(&path))
            .await
            .map_err(|join| CoordinatorError::Actor(join.to_string()))??
    };
    let blobs = BlobDir::open(config.blob_dir())?;
    let jobs = Jobs::new(storage.clone());
    let jetstream = async_nats::jetstream::new(client.clone());
    intake::ensure_streams(&jetstream).await?;

    let (store, store_join) = DraftStoreHandle::spawn(DraftStoreConfig {
        workbenches: Workbenches::new(storage, blobs),
    })
    .await?;
    let registry = Registry::default();
    let starter = JobStarter::new(OrchestratorTemplate {
        client: client.clone(),
        jetstream: jetstream.clone(),
        jobs: jobs.clone(),
        provider_settings: config.provider_settings.clone(),
        budgets: config.budgets,
        registry: registry.clone(),
    });
    let control = service::Control {
        jobs: jobs.clone(),
        coordinator_id: config.coordinator_id.clone(),
        registry,
        starter: starter.clone(),
    };
    let mut tasks = vec![
        service::serve_store(client.clone(), store.clone()).await?,
        service::serve_control(client.clone(), control).await?,
        spawn_journal_pruning(jobs.clone(), config.journal_retention),
    ];
    let unfinished = {
        let jobs = jobs.clone();
        service::blocking(move || jobs.unfinished()).await?
    };
    for record in unfinished {
        tracing::info!(job_id = %record.job_id, state = %record.state, "adopting unfinished job");
        starter.start(record).await?;
    }
    tasks.push(intake::run_intake(jetstream, starter, config.default_model.clone()).await?);
    tracing::info!(coordinator = %config.coordinator_id, data = %config.data_dir.display(), "coordinator ready");
    Ok(CoordinatorHandle {
        tasks,
        store,
        store_join,
    })
}

/// How often finished jobs' journals are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// Prunes the journal of finished jobs older than `retention`, now and then every 10 minutes.
fn spawn_journal_pruning(jobs: Jobs, retention: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let cutoff = atelier_messages::now_ms()
                .saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
            let jobs_for_prune = jobs.clone();
            match service::blocking(move || jobs_for_prune.prune_journal(cutoff)).await {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "pruned journal entries of finished jobs"),
                Err(error) => tracing::warn!(%error, "journal pruning failed"),
            }
            tokio::time::sleep(PRUNE_EVERY).await;
        }
    })
}
