//! The PhaseOrchestrator actor: one per running job. It drives RPI through the agents crate,
//! sends tool calls to worker pools and reads files from the DraftStore over NATS, journals
//! every model answer and tool result in sled before moving on, and honours cancel requests
//! and approvals at step boundaries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use atelier_agents::catalog::ToolSpec;
use atelier_agents::provider::ModelProvider;
use atelier_agents::rpi::{self, AgentHost, Budgets, JobInput, RpiState};
use atelier_agents::spec::{ProviderSettings, provider_from_spec};
use atelier_messages::job::{EventKind, JobState, PendingApproval};
use atelier_messages::store::{ListFiles, Listing, ManifestEntry, View};
use atelier_messages::tool::{ToolOutput, ToolRequest};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION, now_ms, subjects};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use tracing::Instrument;

use crate::calls::{self, CallPolicy};
use crate::events::EventSink;
use crate::failpoint;
use crate::jobs::{JobRecord, Jobs};
use crate::registry::{JobControl, Registry};
use crate::service::blocking;

/// How often a job awaiting approval re-reads its journal (a decision also wakes it at once).
const APPROVAL_POLL: Duration = Duration::from_secs(1);

/// Configuration of one orchestrator.
#[derive(Clone)]
pub struct OrchestratorConfig {
    pub record: JobRecord,
    pub client: async_nats::Client,
    pub jetstream: async_nats::jetstream::Context,
    pub jobs: Jobs,
    pub provider_settings: ProviderSettings,
    pub budgets: Budgets,
    pub registry: Registry,
    pub control: Arc<JobControl>,
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
        Ok(OrchestratorState { config, rpi })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.config.registry.release(&state.config.record.job_id);
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
        Err(error) if error.code == ErrorCode::UserCanceled => (JobState::Cancelled, Some(error)),
        Err(error) => (JobState::Failed, Some(error)),
    };
    // The end is announced before it is recorded: a crash in between re-runs the (fully
    // journaled) job and announces again, and the EVENTS stream de-duplicates the announcement.
    // Recording first could leave a finished job whose watchers never hear of it.
    events.emit(EventKind::JobFinished {
        state: final_state,
        error: error.clone(),
    });
    drop(events);
    let _ = publisher.await;
    if let Err(store_error) =
        set_state(&config.jobs, &record.job_id, final_state, error.clone()).await
    {
        tracing::error!(%store_error, "could not record the job's end");
    }
    tracing::info!(state = %final_state, code = ?error.as_ref().map(|e| e.code), "job finished");
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
    blocking(move || jobs.set_state(&job_id, state, error).map(|_| ())).await
}

fn user_canceled() -> ErrorBody {
    ErrorBody::new(
        ErrorCode::UserCanceled,
        "the job was cancelled (`atelier cancel`)",
    )
}

/// The orchestrator's view of the world: NATS for tools and files, sled for the journal.
struct NatsHost {
    config: OrchestratorConfig,
    events: EventSink,
}

impl NatsHost {
    fn job_id(&self) -> &str {
        &self.config.record.job_id
    }

    async fn send_tool(
        &self,
        call_id: &str,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<ToolOutput, ErrorBody> {
        let request = ToolRequest {
            v: PROTOCOL_VERSION,
            call_id: call_id.to_string(),
            job_id: Some(self.job_id().to_string()),
            workbench: self.config.record.workbench.clone(),
            tool: tool.name.to_string(),
            args,
            files: self.files().await?,
        };
        calls::call(
            &self.config.client,
            &subjects::tool(tool.pool().as_str()),
            &request,
            CallPolicy::TOOLS,
        )
        .await
    }

    async fn journaled_decision(&self, key: &str) -> Result<Option<bool>, ErrorBody> {
        Ok(self.recall(key).await?.and_then(|value| value.as_bool()))
    }
}

#[async_trait::async_trait]
impl AgentHost for NatsHost {
    async fn call_tool(
        &self,
        call_id: &str,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<Value, ErrorBody> {
        let span = tracing::info_span!("tool_call", tool = tool.name.as_str(), call_id, pool = %tool.pool());
        async {
            let started = Instant::now();
            let result = self.send_tool(call_id, tool, args).await;
            failpoint::hit("before_tool_result");
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
        let listing: Listing = calls::call(
            &self.config.client,
            subjects::store::LS,
            &request,
            CallPolicy::STORE,
        )
        .await?;
        Ok(listing.files)
    }

    async fn save(&self, state: &RpiState) -> Result<(), ErrorBody> {
        let jobs = self.config.jobs.clone();
        let job_id = self.job_id().to_string();
        let state = state.clone();
        blocking(move || jobs.save_rpi(&job_id, &state)).await?;
        failpoint::hit("after_checkpoint");
        Ok(())
    }

    async fn recall(&self, key: &str) -> Result<Option<Value>, ErrorBody> {
        let jobs = self.config.jobs.clone();
        let job_id = self.job_id().to_string();
        let key = key.to_string();
        blocking(move || jobs.recall(&job_id, &key)).await
    }

    async fn record(&self, key: &str, value: &Value) -> Result<(), ErrorBody> {
        let jobs = self.config.jobs.clone();
        let job_id = self.job_id().to_string();
        let owned_key = key.to_string();
        let value = value.clone();
        blocking(move || jobs.record(&job_id, &owned_key, &value)).await?;
        if key.starts_with("model/") {
            failpoint::hit("after_model_turn");
        } else if key.starts_with("tool/") {
            failpoint::hit("after_tool_result");
        }
        Ok(())
    }

    async fn checkpoint(&self) -> Result<(), ErrorBody> {
        if self.config.control.is_cancelled() {
            return Err(user_canceled());
        }
        Ok(())
    }

    async fn approval(
        &self,
        call_id: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<bool, ErrorBody> {
        if self.config.record.auto_approve {
            return Ok(true);
        }
        let key = format!("approval/{call_id}");
        if let Some(decision) = self.journaled_decision(&key).await? {
            return Ok(decision);
        }
        let pending = PendingApproval {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            arguments: arguments.to_string(),
            requested_at_ms: now_ms(),
        };
        let jobs = self.config.jobs.clone();
        let job_id = self.job_id().to_string();
        let awaiting = pending.clone();
        blocking(move || {
            jobs.update(&job_id, |record| {
                record.state = JobState::AwaitingApproval;
                record.pending_approval = Some(awaiting.clone());
                Ok(())
            })
            .map(|_| ())
        })
        .await?;
        tracing::info!(call_id, tool, "waiting for approval");
        self.events.emit(EventKind::ApprovalRequested {
            call_id: pending.call_id,
            tool: pending.tool,
            arguments: pending.arguments,
        });
        loop {
            self.checkpoint().await?;
            if let Some(decision) = self.journaled_decision(&key).await? {
                set_state(&self.config.jobs, self.job_id(), JobState::Running, None).await?;
                self.events.emit(EventKind::ApprovalResolved {
                    call_id: call_id.to_string(),
                    approved: decision,
                });
                return Ok(decision);
            }
            let _ =
                tokio::time::timeout(APPROVAL_POLL, self.config.control.decided.notified()).await;
        }
    }

    fn emit(&self, kind: EventKind) {
        self.events.emit(kind);
    }
}

/// Starts an orchestrator for `config.record` (it runs the job and stops by itself).
pub async fn spawn(config: OrchestratorConfig) -> Result<(), crate::CoordinatorError> {
    Actor::spawn(None, PhaseOrchestrator, config)
        .await
        .map(|_| ())
        .map_err(|error| crate::CoordinatorError::Actor(error.to_string()))
}
