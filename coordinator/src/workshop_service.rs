//! The Workshop behind NATS: `atelier.workshop.*` verbs (history, check, rewind, regenerate,
//! models, set_model, checkpoints, checkpoint, restore, gc, review, context items), answered through the DraftStore handle;
//! a regenerate's job is started here once it is recorded.

use atelier_messages::review::ReviewDraft;
use atelier_messages::store::Done;
use atelier_messages::workshop::{AddContextItem, ListContextItems, RemoveContextItem};
use atelier_messages::workshop::{
    CheckMessage, CollectGarbage, CreateCheckpoint, GetHistory, ListCheckpoints, ListModels,
    ModelChoice, ModelChoices, Regenerate, Regenerated, RestoreCheckpoint, Rewind, SetModel,
};
use atelier_messages::{ErrorBody, ErrorCode};
use atelier_transport::{Router, Routes};

use crate::orchestrator::Orchestrators;
use crate::review;

/// What the workshop verbs act on.
#[derive(Clone)]
pub(crate) struct Workshop {
    pub client: async_nats::Client,
    pub orchestrators: Orchestrators,
    /// Model spec for messages that name none and workbenches without a default.
    pub defaults: crate::JobDefaults,
}

/// Every workshop verb.
pub(crate) fn routes(workshop: Workshop) -> Routes {
    Router::new(workshop)
        .route(|ws, request: GetHistory| async move {
            ws.orchestrators.store().history(request.workbench).await
        })
        .route(|ws, request: CheckMessage| async move {
            if let Some(model) = &request.model {
                ws.check_model(model)?;
            }
            let store = ws.orchestrators.store();
            store
                .check_message(request.workbench, request.continue_draft)
                .await
                .map(|()| Done {})
        })
        .route(|ws, request: Rewind| async move {
            let store = ws.orchestrators.store();
            let how = crate::workbench::RewindDraft::of(&request);
            store
                .rewind(request.workbench, request.message_id, how)
                .await
        })
        .route(|ws, request: Regenerate| async move { ws.regenerate(request).await })
        .route(|ws, _: ListModels| async move { Ok::<_, ErrorBody>(ws.model_choices()) })
        .route(|ws, request: SetModel| async move {
            ws.check_model(&request.model)?;
            let store = ws.orchestrators.store();
            store.set_model(request.workbench, request.model).await
        })
        .route(|ws, request: ListCheckpoints| async move {
            ws.orchestrators
                .store()
                .checkpoints(request.workbench)
                .await
        })
        .route(|ws, request: CreateCheckpoint| async move {
            let store = ws.orchestrators.store();
            store
                .create_checkpoint(request.workbench, request.note)
                .await
        })
        .route(|ws, request: RestoreCheckpoint| async move {
            let store = ws.orchestrators.store();
            store
                .restore(request.workbench, request.checkpoint_id)
                .await
        })
        .route(
            |ws, _: CollectGarbage| async move { ws.orchestrators.store().collect_garbage().await },
        )
        .route(|ws, request: AddContextItem| async move {
            let store = ws.orchestrators.store();
            store
                .add_context_item(request.workbench, request.item)
                .await
        })
        .route(|ws, request: ListContextItems| async move {
            ws.orchestrators
                .store()
                .context_items(request.workbench)
                .await
        })
        .route(|ws, request: RemoveContextItem| async move {
            let store = ws.orchestrators.store();
            store
                .remove_context_item(request.workbench, request.name)
                .await
                .map(|()| Done {})
        })
        .route(|ws, request: ReviewDraft| async move {
            let store = ws.orchestrators.store();
            review::review(&ws.client, store, request.workbench, request.sample).await
        })
        .into_routes()
}

impl Workshop {
    /// Refuses a model spec the operator's settings do not allow.
    fn check_model(&self, model: &str) -> Result<(), ErrorBody> {
        atelier_agents::spec::check(model, self.orchestrators.provider_settings())
            .map(|_| ())
            .map_err(|error| error.to_body())
    }

    /// The operator's usable profiles and the default model.
    fn model_choices(&self) -> ModelChoices {
        let profiles = self
            .orchestrators
            .provider_settings()
            .usable_profiles()
            .map(|(name, profile)| ModelChoice {
                name: name.to_string(),
                kind: profile.kind.as_str().to_string(),
                model: profile.model.clone(),
            })
            .collect();
        ModelChoices {
            default_model: self.defaults.model.clone(),
            profiles,
        }
    }

    /// Records the regenerate (conversation, draft, queued job) durably, then starts the job.
    async fn regenerate(&self, request: Regenerate) -> Result<Regenerated, ErrorBody> {
        if request.dry_run {
            return self.orchestrators.store().regenerate_preview(request).await;
        }
        let job_id = request.job_id.clone().unwrap_or_else(|| {
            let unique = uuid::Uuid::now_v7().simple().to_string();
            atelier_messages::shard::job_id_for(&unique, &request.workbench)
        });
        atelier_messages::job::validate_job_id(&job_id)?;
        if let Some(model) = &request.model {
            self.check_model(model)?;
        }
        let (record, regenerated) = self
            .orchestrators
            .store()
            .regenerate(request, job_id, self.defaults.clone())
            .await?;
        self.orchestrators.start(record).await.map_err(|error| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!("the regenerate is recorded but its job did not start here ({error}); it starts with the next coordinator start"),
            )
        })?;
        Ok(regenerated)
    }
}
