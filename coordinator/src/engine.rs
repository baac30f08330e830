//! A shard engine: everything that serves one shard's store (docs/adr/0014) — its workbenches,
//! jobs and batches, the DraftStore, the orchestrators of its jobs, its workshop events' outbox,
//! journal pruning and the adoption of what was unfinished — answering the public verbs in
//! process (through the [`FrontDoor`]) and under the shard's prefix for the other coordinators.
//! A process runs one engine per shard it holds; they share the NATS client, the blob
//! directory and the limit of running jobs.

use std::sync::Arc;

use atelier_messages::job::JobState;
use atelier_messages::shard::{ListReferences, RecordSubmission};
use atelier_messages::store::Done;
use atelier_messages::subjects;
use atelier_transport::{Router, Routes};

use crate::batches::Batches;
use crate::blobs::BlobDir;
use crate::draft_store::{DraftStoreConfig, DraftStoreHandle};
use crate::error::CoordinatorError;
use crate::front_door::FrontDoor;
use crate::jobs::Jobs;
use crate::orchestrator::{OrchestratorTemplate, Orchestrators};
use crate::replication::ownership::Ownership;
use crate::storage::{Storage, Store};
use crate::workbench::Workbenches;
use crate::{CoordinatorConfig, batch_service, control, intake, store_service};
use crate::{workshop_events, workshop_service};

/// What every engine of a process shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub client: async_nats::Client,
    pub jetstream: async_nats::jetstream::Context,
    /// The deployment's limiters on model profiles.
    pub limiters: crate::provider_limits::Limiters,
    pub blobs: BlobDir,
    /// Jobs running at once in this process, whatever their shard.
    pub slots: Arc<tokio::sync::Semaphore>,
    pub front: FrontDoor,
    pub config: Arc<CoordinatorConfig>,
}

/// One shard served.
pub(crate) struct Engine {
    shard: u32,
    jobs: Store<Jobs>,
    batches: Store<Batches>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    store: DraftStoreHandle,
    store_join: tokio::task::JoinHandle<()>,
    ownership: Option<Ownership>,
}

impl Engine {
    /// Serves `shard` from `storage`: adopts what was unfinished there and answers its verbs.
    pub async fn start(
        shared: &Shared,
        shard: u32,
        storage: Storage,
        ownership: Option<Ownership>,
    ) -> Result<Self, CoordinatorError> {
        let config = &shared.config;
        let jobs = Store::new(Jobs::new(storage.clone()));
        let changed = Arc::new(tokio::sync::Notify::new());
        let mut tasks = vec![workshop_events::spawn(
            shared.jetstream.clone(),
            shard,
            storage.clone(),
            changed.clone(),
            config.events_format,
        )];
        let (store, store_join) = DraftStoreHandle::spawn(DraftStoreConfig {
            workbenches: Workbenches::new(storage.clone(), shared.blobs.clone())
                .with_checkpoints_kept(config.checkpoints_kept)
                .with_stale_draft_after(config.stale_draft_after)
                .with_table_cache(config.table_cache_dir()),
            changed,
        })
        .await?;
        let orchestrators = Orchestrators::new(OrchestratorTemplate {
            client: shared.client.clone(),
            jetstream: shared.jetstream.clone(),
            limiters: shared.limiters.clone(),
            jobs: jobs.clone(),
            store: store.clone(),
            provider_settings: config.provider_settings.clone(),
            budgets: config.budgets,
            slots: shared.slots.clone(),
            events_format: config.events_format,
        });
        let batches = Store::new(Batches::new(storage));
        let batch_service = batch_service::BatchService {
            batches: batches.clone(),
            orchestrators: orchestrators.clone(),
            front: shared.front.clone(),
            defaults: config.defaults.clone(),
            submitting: Default::default(),
        };
        let routes = routes(shared, &store, &orchestrators, batch_service.clone());
        tasks.push(
            routes
                .clone()
                .serve(
                    shared.client.clone(),
                    ">".into(),
                    None,
                    &subjects::shard::prefix(shard),
                )
                .await?,
        );
        // Answered here before anything is adopted: an adopted batch's runner asks after its
        // children through the front door at once.
        shared.front.hold(shard, routes);
        tasks.push(crate::spawn_journal_pruning(
            jobs.clone(),
            config.journal_retention,
        ));
        let adopting = match adopt_jobs(jobs.clone(), orchestrators).await {
            Ok(adopting) => adopting,
            Err(error) => {
                shared.front.let_go(shard);
                return Err(error);
            }
        };
        tasks.push(adopting);
        // A batch's children in flight are among the adopted jobs; the runner only follows
        // them (and submits a child that was dispatched but never recorded).
        tasks.push(tokio::spawn(async move {
            if let Err(error) = batch_service::adopt(&batch_service).await {
                tracing::error!(%error, shard, "could not adopt the unfinished batches");
            }
        }));
        tracing::info!(shard, "serving the shard");
        Ok(Self {
            shard,
            jobs,
            batches,
            tasks,
            store,
            store_join,
            ownership,
        })
    }

    /// Whether the shard's lease was lost.
    pub fn is_lost(&self) -> bool {
        self.ownership.as_ref().is_some_and(Ownership::is_lost)
    }

    /// Stops serving the shard — its verbs, its jobs' orchestrators and batches' runners (they
    /// resume from their journals where the shard is next held) — and gives its lease up, which
    /// wakes the next owner at once.
    pub async fn stop(self, front: &FrontDoor) {
        front.let_go(self.shard);
        for task in &self.tasks {
            task.abort();
        }
        self.stop_runs().await;
        self.store.stop();
        let _ = self.store_join.await;
        if let Some(ownership) = self.ownership {
            ownership.release().await;
        }
    }
}

impl Engine {
    /// Stops the orchestrators of the shard's unfinished jobs (aborting their runs) and its
    /// batches' runners, and waits (a few seconds at most) until the orchestrators are gone.
    async fn stop_runs(&self) {
        let (jobs, batches) = (self.jobs.clone(), self.batches.clone());
        let unfinished = jobs
            .read(move |jobs| {
                let jobs: Vec<String> = jobs.unfinished()?.into_iter().map(|r| r.job_id).collect();
                let batches: Vec<String> = (batches.records().unfinished()?.into_iter())
                    .map(|r| r.batch_id)
                    .collect();
                Ok((jobs, batches))
            })
            .await;
        let Ok((jobs, batches)) = unfinished else {
            return;
        };
        for batch_id in &batches {
            crate::batch_runner::kill(batch_id);
        }
        let stopping: Vec<&String> = jobs
            .iter()
            .filter(|job_id| crate::orchestrator::stop_here(job_id))
            .collect();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while stopping
            .iter()
            .any(|job_id| crate::orchestrator::runs_here(job_id))
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// The shard's verbs: the public ones and the intake's hand-over of a submission.
fn routes(
    shared: &Shared,
    store: &DraftStoreHandle,
    orchestrators: &Orchestrators,
    batches: batch_service::BatchService,
) -> Routes {
    let config = &shared.config;
    let control = control::Control {
        coordinator_id: config.coordinator_id.clone(),
        orchestrators: orchestrators.clone(),
    };
    let workshop = workshop_service::Workshop {
        client: shared.client.clone(),
        orchestrators: orchestrators.clone(),
        defaults: config.defaults.clone(),
    };
    let intake = Router::new((orchestrators.clone(), config.defaults.clone()))
        .route(
            |(orchestrators, defaults), request: RecordSubmission| async move {
                intake::record(&orchestrators, &defaults, request).await?;
                Ok(Done {})
            },
        )
        .into_routes();
    let references = Router::new(store.clone())
        .route(|store, request: ListReferences| async move {
            request.validate()?;
            store
                .references(request.after, request.limit as usize)
                .await
        })
        .into_routes();
    store_service::routes(&shared.client, store.clone())
        .join(control::routes(control))
        .join(workshop_service::routes(workshop))
        .join(batch_service::routes(batches))
        .join(intake)
        .join(references)
}

/// Starts every unfinished job of the shard, each waiting for a slot like a new one, without
/// holding up the start.
async fn adopt_jobs(
    jobs: Store<Jobs>,
    orchestrators: Orchestrators,
) -> Result<tokio::task::JoinHandle<()>, CoordinatorError> {
    let unfinished = jobs.read(|jobs| jobs.unfinished()).await?;
    Ok(tokio::spawn(async move {
        for record in unfinished {
            // Only a job that was running counts: a queued one or one waiting for a person did
            // nothing that could have stopped the coordinator.
            let job_id = record.job_id.clone();
            let adoptions = match record.state == JobState::Running {
                true => jobs
                    .commit(move |jobs| jobs.count_adoption(&job_id))
                    .await
                    .ok(),
                false => None,
            };
            tracing::info!(job_id = %record.job_id, state = %record.state, adoptions = ?adoptions, "adopting unfinished job");
            if let Err(error) = orchestrators.start(record).await {
                tracing::error!(%error, "could not adopt a job");
            }
        }
    }))
}
