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
//! - [`rpc`]: typed NATS request/reply.
//! - [`error`]: the crate error type, [`CoordinatorError`].

pub mod blobs;
pub mod draft_store;
pub mod error;
pub mod events;
pub mod intake;
pub mod jobs;
pub mod orchestrator;
pub mod rpc;
pub mod service;
pub mod storage;
pub mod workbench;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use atelier_agents::provider::ProviderSettings;
use atelier_agents::rpi::Budgets;

pub use error::CoordinatorError;

use crate::blobs::BlobDir;
use crate::draft_store::{DraftStoreConfig, DraftStoreHandle};
use crate::intake::{JobStarter, OrchestratorTemplate};
use crate::jobs::Jobs;
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
    let running = Arc::new(AtomicU64::new(0));
    let mut tasks = vec![
        service::serve_store(client.clone(), store.clone()).await?,
        service::serve_control(
            client.clone(),
            jobs.clone(),
            config.coordinator_id.clone(),
            Arc::clone(&running),
        )
        .await?,
    ];
    let starter = JobStarter::new(OrchestratorTemplate {
        client: client.clone(),
        jetstream: jetstream.clone(),
        jobs: jobs.clone(),
        provider_settings: config.provider_settings.clone(),
        budgets: config.budgets,
        running,
    });
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
