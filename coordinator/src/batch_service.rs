//! Batches behind NATS: the `atelier.batch.*` verbs (submit, status, list, targets, cancel,
//! retry, update, settle). A submit resolves the target set against the store, records the
//! batch and starts its runner; the other verbs read the records or tell the runner.

use std::collections::BTreeSet;

use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::batch::{
    BatchAction, BatchSettled, BatchView, CancelBatch, DEFAULT_CONCURRENCY, GetBatch, ListBatches,
    ListTargets, MAX_TARGETS, RetryBatch, SettleBatch, SkippedWorkbench, SubmitBatch, TargetSet,
    TargetState, TargetView, UpdateBatch, validate_concurrency,
};
use atelier_messages::store::View;
use atelier_messages::store::{DiscardDraft, ListFiles, PublishDraft};
use atelier_messages::{ErrorBody, ErrorCode};
use atelier_transport::{Router, Routes};

use crate::batch_runner::{self, BatchRunnerConfig, BatchRunnerMsg};
use crate::batches::{BatchRecord, Batches, TargetRecord};
use crate::children::Children;
use crate::orchestrator::Orchestrators;
use crate::storage::Store;
use crate::templates;

/// Most targets one `atelier.batch.targets` request answers.
const PAGE_LIMIT: u32 = 1_000;

/// What the batch verbs act on.
#[derive(Clone)]
pub(crate) struct BatchService {
    pub batches: Store<Batches>,
    pub orchestrators: Orchestrators,
    /// Reaches the workbenches of the targets, whatever their shard.
    pub front: crate::front_door::FrontDoor,
    pub defaults: crate::JobDefaults,
    /// Submissions one at a time, so a batch id sent twice at once is created once.
    pub submitting: std::sync::Arc<tokio::sync::Mutex<()>>,
}

/// Every batch verb.
pub(crate) fn routes(service: BatchService) -> Routes {
    Router::new(service)
        .route(|service, request: SubmitBatch| async move { service.submit(request).await })
        .route(|service, request: GetBatch| async move {
            let batches = &service.batches;
            batches
                .read(move |batches| batches.view(&request.batch_id))
                .await
        })
        .route(|service, _: ListBatches| async move {
            let batches = &service.batches;
            let records = batches.read(move |batches| batches.list()).await?;
            Ok::<_, ErrorBody>(records.iter().map(BatchRecord::view).collect::<Vec<_>>())
        })
        .route(|service, request: ListTargets| async move { service.targets(request).await })
        .route(|service, request: CancelBatch| async move { service.cancel(request).await })
        .route(|service, request: RetryBatch| async move {
            let batches = &service.batches;
            let batch_id = request.batch_id.clone();
            batches
                .commit(move |batches| batches.retry(&batch_id))
                .await?;
            service.start_runner(&request.batch_id).await?;
            service.view(&request.batch_id).await
        })
        .route(|service, request: UpdateBatch| async move { service.update(request).await })
        .route(|service, request: SettleBatch| async move { service.settle(request).await })
        .into_routes()
}

/// Starts the runner of every batch that was running when the coordinator stopped.
pub(crate) async fn adopt(service: &BatchService) -> Result<(), ErrorBody> {
    let batches = &service.batches;
    for record in batches.read(move |batches| batches.unfinished()).await? {
        tracing::info!(batch_id = %record.batch_id, "adopting unfinished batch");
        service.start_runner(&record.batch_id).await?;
    }
    Ok(())
}

impl BatchService {
    async fn view(&self, batch_id: &str) -> Result<BatchView, ErrorBody> {
        let batches = &self.batches;
        let batch_id = batch_id.to_string();
        batches.read(move |batches| batches.view(&batch_id)).await
    }

    async fn start_runner(&self, batch_id: &str) -> Result<(), ErrorBody> {
        batch_runner::start(BatchRunnerConfig {
            batch_id: batch_id.to_string(),
            batches: self.batches.clone(),
            children: Children::new(self.orchestrators.client().clone(), self.front.clone()),
            jetstream: self.orchestrators.jetstream().clone(),
            events_format: self.orchestrators.events_format(),
        })
        .await
        .map_err(ErrorBody::from)
    }

    async fn submit(&self, request: SubmitBatch) -> Result<BatchView, ErrorBody> {
        request.validate()?;
        let _one_at_a_time = self.submitting.lock().await;
        let batches = &self.batches;
        let batch_id = request.batch_id.clone();
        if batches
            .read(move |batches| batches.get(&batch_id))
            .await?
            .is_some()
        {
            return self.view(&request.batch_id).await;
        }
        if let BatchAction::Message {
            model: Some(model), ..
        } = &request.action
        {
            atelier_agents::spec::check(model, self.orchestrators.provider_settings())
                .map_err(|error| error.to_body())?;
        }
        if request.time_limit_secs.is_some() {
            self.defaults.time_limits.of(request.time_limit_secs)?;
        }
        self.check_budget(&request)?;
        let targets = self.resolve(&request.targets).await?;
        check_first_target(&request, &targets)?;
        let concurrency = request.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        let batches = &self.batches;
        let submitted = request.clone();
        let record = batches
            .commit(move |batches| batches.create(&submitted, concurrency, &targets))
            .await?;
        tracing::info!(batch_id = %record.batch_id, total = record.counts.total, action = %record.action.describe(), "batch submitted");
        self.start_runner(&record.batch_id).await?;
        self.view(&record.batch_id).await
    }

    /// A budget in dollars needs the prices of the model the message names (else of the
    /// operator's default; a target whose workbench chose another model without prices fails
    /// with the same code when it starts).
    fn check_budget(&self, request: &SubmitBatch) -> Result<(), ErrorBody> {
        let BatchAction::Message { model, .. } = &request.action else {
            return Ok(());
        };
        if request.budget.usd.is_none() {
            return Ok(());
        }
        let model = model.as_ref().or(self.defaults.model.as_ref());
        let model = model.map(String::as_str).unwrap_or_default();
        (self.defaults.spending)
            .of("", model, request.budget)
            .map(|_| ())
    }

    /// The targets, in order: `(workbench, file)`.
    async fn resolve(
        &self,
        targets: &TargetSet,
    ) -> Result<Vec<(String, Option<String>)>, ErrorBody> {
        let resolved: Vec<(String, Option<String>)> = match targets {
            TargetSet::Workbenches { names, glob } => {
                let mut chosen: BTreeSet<String> = names.iter().cloned().collect();
                if let Some(glob) = glob {
                    for info in self.front.list_workbenches().await? {
                        if templates::glob_matches(glob, &info.name) {
                            chosen.insert(info.name);
                        }
                    }
                }
                chosen.into_iter().map(|name| (name, None)).collect()
            }
            TargetSet::EachFile { workbench, glob } => self
                .front
                .to_workbench(
                    workbench,
                    &ListFiles {
                        v: PROTOCOL_VERSION,
                        workbench: workbench.clone(),
                        view: View::Current,
                    },
                )
                .await?
                .files
                .into_iter()
                .filter(|entry| templates::glob_matches(glob, &entry.path))
                .map(|entry| (workbench.clone(), Some(entry.path)))
                .collect(),
        };
        if resolved.is_empty() {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                "the batch has no targets: nothing matches (list workbenches with `atelier wb list`, files with `atelier wb ls`)",
            ));
        }
        if resolved.len() > MAX_TARGETS {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "the batch has {} targets; at most {MAX_TARGETS} run in one batch (split it)",
                    resolved.len()
                ),
            ));
        }
        Ok(resolved)
    }

    async fn targets(&self, request: ListTargets) -> Result<Vec<TargetView>, ErrorBody> {
        let batches = &self.batches;
        let limit = request.limit.unwrap_or(PAGE_LIMIT).min(PAGE_LIMIT) as usize;
        let page = batches
            .read(move |batches| {
                batches.require(&request.batch_id)?;
                batches.page(&request.batch_id, request.state, request.from, limit)
            })
            .await?;
        Ok(page.iter().map(TargetRecord::view).collect())
    }

    async fn cancel(&self, request: CancelBatch) -> Result<BatchView, ErrorBody> {
        let batches = &self.batches;
        let batch_id = request.batch_id.clone();
        batches
            .commit(move |batches| {
                batches.update_running(&batch_id, |record| record.cancel_requested = true)
            })
            .await?;
        if !batch_runner::tell(&request.batch_id, BatchRunnerMsg::Cancel) {
            self.start_runner(&request.batch_id).await?;
        }
        self.view(&request.batch_id).await
    }

    async fn update(&self, request: UpdateBatch) -> Result<BatchView, ErrorBody> {
        validate_concurrency(request.concurrency)?;
        let batches = &self.batches;
        let batch_id = request.batch_id.clone();
        batches
            .commit(move |batches| {
                batches.update_running(&batch_id, |record| {
                    record.concurrency = request.concurrency;
                })
            })
            .await?;
        batch_runner::tell(&request.batch_id, BatchRunnerMsg::Reload);
        self.view(&request.batch_id).await
    }

    /// Publishes (or discards) the drafts of the workbenches whose targets succeeded.
    async fn settle(&self, request: SettleBatch) -> Result<BatchSettled, ErrorBody> {
        let batches = &self.batches;
        let batch_id = request.batch_id.clone();
        let workbenches = batches.read(move |batches| {
            let record = batches.require(&batch_id)?;
            if !record.state.is_terminal() {
                return Err(ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!(
                        "batch `{batch_id}` is still running; wait for it (`atelier batch watch {batch_id}`) first"
                    ),
                )
                .into());
            }
            let succeeded =
                batches.page(&batch_id, Some(TargetState::Succeeded), 0, usize::MAX)?;
            Ok(succeeded
                .into_iter()
                .map(|target| target.workbench)
                .collect::<BTreeSet<_>>())
        })
        .await?;
        let mut settled = BatchSettled {
            settled: Vec::new(),
            skipped: Vec::new(),
        };
        for workbench in workbenches {
            let (v, name) = (PROTOCOL_VERSION, workbench.clone());
            let front = &self.front;
            let done = match request.publish {
                true => front
                    .to_workbench(&workbench, &PublishDraft { v, workbench: name })
                    .await
                    .map(drop),
                false => front
                    .to_workbench(&workbench, &DiscardDraft { v, workbench: name })
                    .await
                    .map(drop),
            };
            match done {
                Ok(()) => settled.settled.push(workbench),
                Err(error) => settled.skipped.push(SkippedWorkbench { workbench, error }),
            }
        }
        Ok(settled)
    }
}

/// Renders the action for the first target, so that a workflow missing a variable is refused
/// at submission instead of failing every target.
fn check_first_target(
    request: &SubmitBatch,
    targets: &[(String, Option<String>)],
) -> Result<(), ErrorBody> {
    let Some((workbench, file)) = targets.first() else {
        return Ok(());
    };
    templates::render_action(&request.action, workbench, file.as_deref(), 0).map(|_| ())
}
