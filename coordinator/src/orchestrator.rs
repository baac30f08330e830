//! The PhaseOrchestrator actor: one per running job. It drives RPI through the agents crate,
//! sending tool calls to worker pools and reads/writes to the DraftStore over NATS, and
//! checkpoints the RPI state in sled after every step.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use atelier_agents::catalog::ToolSpec;
use atelier_agents::provider::{ModelProvider, ProviderSettings, provider_from_spec};
use atelier_agents::rpi::{self, AgentHost, Budgets, JobInput, RpiState};
use atelier_messages::job::{EventKind, JobState};
use atelier_messages::store::{ListFiles, Listing, ManifestEntry, View};
use atelier_messages::tool::{ToolOutput, ToolRequest};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION, subjects};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use tracing::Instrument;

use crate::events::EventSink;
use crate::jobs::{JobRecord, Jobs};
use crate::rpc;
use crate::service::blocking;

/// How long a tool call may take before `TOOL_TIMEOUT`.
pub const TOOL_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a store request may take.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(30);

/// Configuration of one orchestrator.
#[derive(Clone)]
pub struct OrchestratorConfig {
    pub record: JobRecord,
    pub client: async_nats::Client,
    pub jetstream: async_nats::jetstream::Context,
    pub jobs: Jobs,
    pub provider_settings: ProviderSettings,
    pub budgets: Budgets,
    pub running: Arc<AtomicU64>,
}

/// The actor's state, built in `pre_start`.
pub struct OrchestratorState {
    config: OrchestratorConfig,
    rpi: RpiState,
}

/// The actor's messages.
pub enum OrchestratorMsg {
    /// Run (or continue) the job to its end, then stop.
    Run,
}

/// The PhaseOrchestrator actor.
pub struct PhaseOrchestrator;

impl Actor for PhaseOrchestrator {
    type Msg = OrchestratorMsg;
    type State = OrchestratorState;
    type Arguments = OrchestratorConfig;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        config: OrchestratorConfig,
    ) -> Result<Self::State, ActorProcessingErr> {
        let jobs = config.jobs.clone();
        let job_id = config.record.job_id.clone();
        let rpi = blocking(move || jobs.load_rpi(&job_id))
            .await?
            .unwrap_or_default();
        myself.send_message(OrchestratorMsg::Run)?;
        config.running.fetch_add(1, Ordering::Relaxed);
        Ok(OrchestratorState { config, rpi })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.config.running.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            OrchestratorMsg::Run => {
                let span = tracing::info_span!("job", job_id = %state.config.record.job_id, workbench = %state.config.record.workbench);
                run_job(state).instrument(span).await;
                myself.stop(None);
            }
        }
        Ok(())
    }
}

async fn run_job(state: &mut OrchestratorState) {
    let config = state.config.clone();
    let record = &config.record;
    let (events, publisher) = EventSink::start(config.jetstream.clone(), &record.job_id);
    if record.state == JobState::Queued {
        events.emit(EventKind::JobAccepted);
    }
    let outcome = match set_state(&config.jobs, &record.job_id, JobState::Running, None).await {
        Ok(()) => drive(&config, &events, &mut state.rpi).await,
        Err(error) => Err(error),
    };
    let (final_state, error) = match outcome {
        Ok(()) => (JobState::Succeeded, None),
        Err(error) => (JobState::Failed, Some(error)),
    };
    if let Err(store_error) =
        set_state(&config.jobs, &record.job_id, final_state, error.clone()).await
    {
        tracing::error!(%store_error, "could not record the job's end");
    }
    tracing::info!(state = %final_state, code = ?error.as_ref().map(|e| e.code), "job finished");
    events.emit(EventKind::JobFinished {
        state: final_state,
        error,
    });
    drop(events);
    let _ = publisher.await;
}

async fn drive(
    config: &OrchestratorConfig,
    events: &EventSink,
    rpi_state: &mut RpiState,
) -> Result<(), ErrorBody> {
    if config.record.model.is_empty() {
        return Err(ErrorBody::new(
            ErrorCode::ProviderNotConfigured,
            "the job names no model and the coordinator has no default; pass `--model openai:MODEL` \
             or set `default_model` in atelier.toml (ATELIER_DEFAULT_MODEL)",
        ));
    }
    let provider: Arc<dyn ModelProvider> =
        provider_from_spec(&config.record.model, &config.provider_settings)
            .map_err(|error| error.to_body())?;
    let host = NatsHost {
        config: config.clone(),
        events: events.clone(),
    };
    let input = JobInput {
        job_id: config.record.job_id.clone(),
        workbench: config.record.workbench.clone(),
        message: config.record.message.clone(),
    };
    rpi::run(&input, rpi_state, provider.as_ref(), &host, config.budgets)
        .await
        .map_err(|error| error.to_body())
}

async fn set_state(
    jobs: &Jobs,
    job_id: &str,
    state: JobState,
    error: Option<ErrorBody>,
) -> Result<(), ErrorBody> {
    let jobs = jobs.clone();
    let job_id = job_id.to_string();
    blocking(move || jobs.set_state(&job_id, state, error)).await
}

/// The orchestrator's view of the world: NATS for tools and files, sled for checkpoints.
struct NatsHost {
    config: OrchestratorConfig,
    events: EventSink,
}

#[async_trait::async_trait]
impl AgentHost for NatsHost {
    async fn call_tool(
        &self,
        call_id: &str,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<Value, ErrorBody> {
        let span = tracing::info_span!("tool_call", tool = tool.name, call_id, pool = %tool.pool);
        async {
            let started = Instant::now();
            let result = self.send_tool(call_id, tool, args).await;
            let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let (ok, error, worker) = match &result {
                Ok(output) => (true, None, Some(output.worker.clone())),
                Err(error) => (false, Some(error.clone()), None),
            };
            tracing::info!(ok, elapsed_ms, "tool call complete");
            self.events.emit(EventKind::ToolComplete {
                call_id: call_id.to_string(),
                tool: tool.name.to_string(),
                ok,
                error,
                elapsed_ms,
                worker,
            });
            result.map(|output| output.output)
        }
        .instrument(span)
        .await
    }

    async fn files(&self) -> Result<Vec<ManifestEntry>, ErrorBody> {
        let request = ListFiles {
            v: PROTOCOL_VERSION,
            workbench: self.config.record.workbench.clone(),
            view: View::Current,
        };
        let listing: Listing = rpc::request(
            &self.config.client,
            subjects::store::LS.to_string(),
            &request,
            STORE_TIMEOUT,
        )
        .await?;
        Ok(listing.files)
    }

    async fn save(&self, state: &RpiState) -> Result<(), ErrorBody> {
        let jobs = self.config.jobs.clone();
        let job_id = self.config.record.job_id.clone();
        let state = state.clone();
        blocking(move || jobs.save_rpi(&job_id, &state)).await
    }

    fn emit(&self, kind: EventKind) {
        self.events.emit(kind);
    }
}

impl NatsHost {
    async fn send_tool(
        &self,
        call_id: &str,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<ToolOutput, ErrorBody> {
        let request = ToolRequest {
            v: PROTOCOL_VERSION,
            call_id: call_id.to_string(),
            job_id: Some(self.config.record.job_id.clone()),
            workbench: self.config.record.workbench.clone(),
            tool: tool.name.to_string(),
            args,
            files: self.files().await?,
        };
        rpc::request(
            &self.config.client,
            subjects::tool(tool.pool.as_str()),
            &request,
            TOOL_CALL_TIMEOUT,
        )
        .await
    }
}

/// Starts an orchestrator for `config.record` (it runs the job and stops by itself).
pub async fn spawn(config: OrchestratorConfig) -> Result<(), crate::CoordinatorError> {
    Actor::spawn(None, PhaseOrchestrator, config)
        .await
        .map(|_| ())
        .map_err(|error| crate::CoordinatorError::Actor(error.to_string()))
}
