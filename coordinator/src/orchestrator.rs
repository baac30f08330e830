//! The PhaseOrchestrator actor: one per running job, registered under the job's name so that
//! the control plane reaches it by job id. Cancel and approval decisions are its messages.
//!
//! `pre_start` loads the job's RPI checkpoint and starts the run — the RPI driver of the agents
//! crate over a [`JobHost`] — as a task of its own, because one run is a single long
//! computation while the actor must stay free to take `Cancel` and `ApprovalDecided` at any
//! time; it passes them to the run through [`RunSignals`], which the run checks at every step
//! boundary. When the run ends it tells the actor, which stops and frees the name. See
//! docs/adr/0007-orchestrator-actor-and-run-task.md.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use atelier_agents::provider::ModelProvider;
use atelier_agents::rpi::{self, Budgets, JobInput, RpiState};
use atelier_agents::spec::{
    ProviderSettings, gated_provider_from_spec, profile_limits, summarizes_history,
};
use atelier_messages::job::{EventKind, JobOutcome, JobState};
use atelier_messages::provider::Priority;
use atelier_messages::{ErrorBody, ErrorCode};
use ractor::{Actor, ActorProcessingErr, ActorRef, SpawnErr};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::context;
use crate::defaults::{RunClock, Waited};
use crate::draft_store::DraftStoreHandle;
use crate::error::CoordinatorError;
use crate::events::EventSink;
use crate::host::{JobHost, Journaled, RunSignals, write_after_held};
use crate::job_gate::JobGate;
use crate::jobs::{CRASH_LOOP_ADOPTIONS, JobRecord, Jobs, RunStart};
use crate::lifecycle::Transition;
use crate::outcome;
use crate::provider_limits::{Limiters, Place};
use crate::storage::Store;
use crate::workbench::TurnEnd;

/// Everything an orchestrator needs besides its job record.
#[derive(Clone)]
pub struct OrchestratorTemplate {
    pub client: async_nats::Client,
    pub jetstream: async_nats::jetstream::Context,
    /// The deployment's limiters on model profiles.
    pub limiters: Limiters,
    pub jobs: Store<Jobs>,
    pub store: DraftStoreHandle,
    pub provider_settings: ProviderSettings,
    pub budgets: Budgets,
    /// One permit per job allowed to run at once in this process.
    pub slots: Arc<Semaphore>,
    /// The format of the event streams' messages.
    pub events_format: atelier_messages::Format,
}

/// Configuration of one orchestrator.
pub struct OrchestratorConfig {
    pub record: JobRecord,
    pub template: OrchestratorTemplate,
    /// The job's running slot, held until the actor stops.
    pub slot: OwnedSemaphorePermit,
}

/// The actor's state, built in `pre_start`.
pub struct OrchestratorState {
    signals: Arc<RunSignals>,
    run: JoinHandle<()>,
    _slot: OwnedSemaphorePermit,
}

/// The actor's messages.
#[derive(Debug)]
pub enum OrchestratorMsg {
    /// Stop the job at its next step boundary (`USER_CANCELED`).
    Cancel,
    /// A decision on the pending destructive call was journaled.
    ApprovalDecided,
    /// The run is over.
    RunEnded,
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
        let signals = Arc::new(RunSignals::default());
        if config.record.cancel_requested {
            signals.cancel();
        }
        let span = tracing::info_span!("job", job_id = %config.record.job_id, workbench = %config.record.workbench);
        let run_signals = Arc::clone(&signals);
        let OrchestratorConfig {
            record,
            template,
            slot,
        } = config;
        let run = tokio::spawn(
            async move {
                run_job(record, template, run_signals).await;
                let _ = myself.cast(OrchestratorMsg::RunEnded);
            }
            .instrument(span),
        );
        Ok(OrchestratorState {
            signals,
            run,
            _slot: slot,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            OrchestratorMsg::Cancel => state.signals.cancel(),
            OrchestratorMsg::ApprovalDecided => state.signals.approval_decided(),
            OrchestratorMsg::RunEnded => myself.stop(None),
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stopped from outside (shutdown): the run stops with it and resumes at the next start.
        state.run.abort();
        Ok(())
    }
}

async fn run_job(record: JobRecord, template: OrchestratorTemplate, signals: Arc<RunSignals>) {
    // The record this orchestrator was started with may be stale: a job cancelled between its
    // intake and this start stays cancelled, and nothing is announced for it.
    let started = match start(&template.jobs, &record.job_id).await {
        Ok(started) => started,
        Err(refused) => {
            tracing::warn!(code = %refused.code, reason = %refused.message, "job not started");
            return;
        }
    };
    let mut rpi = started.rpi;
    let clock = RunClock {
        limit_secs: started.record.time_limit_secs,
        started_at_ms: started.record.started_at_ms,
    };
    let (events, publisher) = EventSink::start(
        template.jetstream.clone(),
        &record.job_id,
        template.events_format,
    );
    if record.state == JobState::Queued {
        events.emit(EventKind::JobAccepted);
    }
    let host = JobHost {
        record: record.clone(),
        client: template.client.clone(),
        jobs: template.jobs.clone(),
        store: template.store.clone(),
        events: events.clone(),
        signals,
        tool_crash_attempts: template.budgets.tool_crash_attempts,
        journaled: Journaled::new(started.journaled),
        deferred: Mutex::default(),
    };
    // Time spent waiting for a model profile's limits does not count against the time limit.
    let waited = Waited::default();
    let ended = if started.crash_looping {
        Err(crash_loop(&record.job_id))
    } else {
        clock
            .within(&waited, drive(&template, &host, &mut rpi, &waited))
            .await
    };
    let (final_state, error, outcome) = match ended {
        Ok(outcome) => (JobState::Succeeded, None, Some(outcome)),
        Err(error) if error.code == ErrorCode::UserCanceled => {
            (JobState::Cancelled, Some(error), None)
        }
        Err(error) => (JobState::Failed, Some(error), None),
    };
    // The answer joins the conversation and frees the workbench before the end is announced,
    // so whoever hears of the end finds both; a repeat after a crash changes nothing.
    let turn = TurnEnd {
        job_id: record.job_id.clone(),
        state: final_state,
        answer: rpi.summary.clone(),
        error: error.clone(),
        model: record.model.clone(),
    };
    if let Err(store_error) = template
        .store
        .finish_turn(record.workbench.clone(), turn)
        .await
    {
        tracing::error!(%store_error, "could not record the job's answer in the conversation");
    }
    // The end is announced before it is recorded: a crash in between re-runs the (fully
    // journaled) job and announces again, and the EVENTS stream de-duplicates the announcement.
    // Recording first could leave a finished job whose watchers never hear of it.
    events.emit(EventKind::JobFinished {
        state: final_state,
        error: error.clone(),
        run: record.run,
        outcome: outcome.clone(),
        spent: Some(record.spent(rpi.prompt_tokens, rpi.completion_tokens)),
    });
    let deferred = host.take_deferred();
    drop(host);
    drop(events);
    let _ = publisher.await;
    let finish = Transition::Finish {
        state: final_state,
        error: error.clone(),
        outcome,
    };
    let recorded = write_after_held(&template.jobs, &record.job_id, deferred, |jobs, job_id| {
        jobs.transition(job_id, finish).map(|_| ())
    });
    if let Err(store_error) = recorded.await {
        tracing::error!(%store_error, "could not record the job's end");
    }
    tracing::info!(state = %final_state, code = ?error.as_ref().map(|e| e.code), "job finished");
}

/// The error that sets a job aside when start-ups keep dying while running it.
fn crash_loop(job_id: &str) -> ErrorBody {
    tracing::error!(
        job_id,
        "the coordinator kept stopping while running this job; setting it aside"
    );
    ErrorBody::new(
        ErrorCode::CrashLoop,
        format!(
            "the coordinator stopped {CRASH_LOOP_ADOPTIONS} starts in a row while running this job, \
             with no step journaled in between, so it was set aside (its journal is kept); see \
             the coordinator's log, then `atelier resume` to try it again"
        ),
    )
}

/// Runs the job and, when it succeeds, tells what it changed: its files when it first started
/// (journaled before anything runs) against its files now.
async fn drive(
    template: &OrchestratorTemplate,
    host: &JobHost,
    rpi_state: &mut RpiState,
    waited: &Waited,
) -> Result<JobOutcome, ErrorBody> {
    let started_with = outcome::files_at_start(host).await?;
    run(template, host, rpi_state, waited).await?;
    outcome::since(host, &started_with).await
}

/// Runs the job's workflow, or its agent through Research, Plan, Implement and Summary.
async fn run(
    template: &OrchestratorTemplate,
    host: &JobHost,
    rpi_state: &mut RpiState,
    waited: &Waited,
) -> Result<(), ErrorBody> {
    let record = &host.record;
    if let Some(workflow) = &record.workflow {
        return rpi::run_workflow(&record.job_id, &workflow.steps, rpi_state, host)
            .await
            .map_err(|error| error.to_body());
    }
    if record.model.is_empty() {
        return Err(ErrorBody::new(
            ErrorCode::ProviderNotConfigured,
            "the job names no model and the coordinator has no default; pass `--model openai:MODEL` \
             or set `default_model` in atelier.toml (ATELIER_DEFAULT_MODEL)",
        ));
    }
    let settings = &template.provider_settings;
    let gate = profile_limits(&record.model, settings).map(|(profile, limits)| {
        JobGate::gate(
            template.limiters.profile(&profile, limits),
            place(record),
            host.events.clone(),
            waited.clone(),
        )
    });
    let provider: Arc<dyn ModelProvider> =
        gated_provider_from_spec(&record.model, settings, gate).map_err(|error| error.to_body())?;
    let summarizer =
        summarizes_history(&record.model, &template.provider_settings).then_some(provider.as_ref());
    let (context, summarizing) =
        context::build(&template.client, &template.store, record, summarizer).await?;
    rpi_state.count_tokens(summarizing);
    let input = JobInput {
        job_id: record.job_id.clone(),
        workbench: record.workbench.clone(),
        message: record.message.clone(),
        context,
    };
    let budgets = Budgets {
        spend: record.budget,
        prices: record.prices,
        ..template.budgets
    };
    rpi::run(&input, rpi_state, provider.as_ref(), host, budgets)
        .await
        .map_err(|error| error.to_body())
}

/// Where the job's model calls stand when their profile's limits are saturated: its own
/// priority, else a batch's children after a person's messages; sharing fairly by batch, else
/// by workbench.
fn place(record: &JobRecord) -> Place {
    let priority = record.priority.unwrap_or(match record.batch_id {
        Some(_) => Priority::Low,
        None => Priority::Normal,
    });
    Place {
        priority,
        group: record
            .batch_id
            .clone()
            .unwrap_or_else(|| record.workbench.clone()),
    }
}

/// Starts the job's run ([`Jobs::start_run`]), staged: a start lost in a crash leaves the job
/// unfinished, so it is run again.
async fn start(jobs: &Store<Jobs>, job_id: &str) -> Result<RunStart, ErrorBody> {
    let job_id = job_id.to_string();
    jobs.stage(move |jobs| jobs.start_run(&job_id)).await
}

async fn transition(
    jobs: &Store<Jobs>,
    job_id: &str,
    transition: Transition,
) -> Result<(), ErrorBody> {
    let job_id = job_id.to_string();
    jobs.commit(move |jobs| jobs.transition(&job_id, transition).map(|_| ()))
        .await
}

/// The registry name of a job's orchestrator.
fn actor_name(job_id: &str) -> String {
    format!("{NAME_PREFIX}{job_id}")
}

const NAME_PREFIX: &str = "atelier-job-";

/// How long a resumed job waits for its previous run's orchestrator to let go of the name.
const HANDOVER: Duration = Duration::from_secs(30);

/// Starts orchestrators and reaches them by job id.
#[derive(Clone)]
pub struct Orchestrators {
    template: OrchestratorTemplate,
}

impl Orchestrators {
    pub fn new(template: OrchestratorTemplate) -> Self {
        Self { template }
    }

    pub fn jobs(&self) -> &Store<Jobs> {
        &self.template.jobs
    }

    pub fn store(&self) -> &DraftStoreHandle {
        &self.template.store
    }

    /// The operator's model settings, to check specs against.
    pub fn provider_settings(&self) -> &ProviderSettings {
        &self.template.provider_settings
    }

    pub fn client(&self) -> &async_nats::Client {
        &self.template.client
    }

    pub fn jetstream(&self) -> &async_nats::jetstream::Context {
        &self.template.jetstream
    }

    /// The format of the event streams' messages.
    pub fn events_format(&self) -> atelier_messages::Format {
        self.template.events_format
    }

    /// Starts the job unless it is finished or already runs in this process.
    pub async fn start(&self, record: JobRecord) -> Result<(), CoordinatorError> {
        self.spawn(record).await.map(|_| ())
    }

    /// Starts a resumed job, waiting for the orchestrator of its previous run (which recorded
    /// the end and is stopping) to free the job's name.
    pub async fn start_resumed(&self, record: JobRecord) -> Result<(), CoordinatorError> {
        let started = tokio::time::Instant::now();
        while !self.spawn(record.clone()).await? {
            if started.elapsed() > HANDOVER {
                return Err(CoordinatorError::Actor(format!(
                    "job `{}` is queued but its previous run has not ended here yet; it starts \
                     when the coordinator next starts",
                    record.job_id
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Spawns the job's orchestrator; false when one already holds the job's name.
    async fn spawn(&self, record: JobRecord) -> Result<bool, CoordinatorError> {
        if record.state.is_terminal() {
            return Ok(true);
        }
        if ractor::registry::where_is(actor_name(&record.job_id)).is_some() {
            return Ok(false);
        }
        // Waits while the coordinator runs as many jobs as it may.
        let slot = Arc::clone(&self.template.slots)
            .acquire_owned()
            .await
            .map_err(|error| CoordinatorError::Actor(error.to_string()))?;
        let name = actor_name(&record.job_id);
        let config = OrchestratorConfig {
            record,
            template: self.template.clone(),
            slot,
        };
        match Actor::spawn(Some(name), PhaseOrchestrator, config).await {
            Ok(_) => Ok(true),
            Err(SpawnErr::ActorAlreadyRegistered(_)) => Ok(false),
            Err(error) => Err(CoordinatorError::Actor(error.to_string())),
        }
    }

    /// Marks the job cancelled; a running job stops at its next step boundary, one that runs
    /// nowhere here ends at once (and frees its workbench).
    pub async fn cancel(&self, job_id: &str) -> Result<(), ErrorBody> {
        transition(&self.template.jobs, job_id, Transition::RequestCancel).await?;
        if self.tell(job_id, OrchestratorMsg::Cancel) {
            return Ok(());
        }
        transition(&self.template.jobs, job_id, Transition::CancelUnstarted).await?;
        let id = job_id.to_string();
        let Some(record) = self.template.jobs.read(move |jobs| jobs.get(&id)).await? else {
            return Ok(());
        };
        let end = TurnEnd {
            job_id: record.job_id.clone(),
            state: record.state,
            answer: None,
            error: record.error.clone(),
            model: record.model.clone(),
        };
        self.template
            .store
            .finish_turn(record.workbench.clone(), end)
            .await?;
        // No run announces this end: watchers (and batches) hear of it here.
        crate::events::announce(
            self.jetstream(),
            job_id,
            self.events_format(),
            record.end_event(),
        )
        .await;
        Ok(())
    }

    /// Sends `message` to the job's orchestrator; false when the job does not run here.
    pub fn tell(&self, job_id: &str, message: OrchestratorMsg) -> bool {
        let Some(cell) = ractor::registry::where_is(actor_name(job_id)) else {
            return false;
        };
        ActorRef::<OrchestratorMsg>::from(cell)
            .cast(message)
            .is_ok()
    }

    /// Jobs running in this process.
    pub fn running(&self) -> u64 {
        running_in_process()
    }
}

/// Stops the job's orchestrator and aborts its run wherever it is (its shard is handed over:
/// the next owner resumes the job from its journal); false when it does not run here. A stop,
/// not a kill: a killed actor skips `post_stop`, which is what aborts the run.
pub fn stop_here(job_id: &str) -> bool {
    let Some(cell) = ractor::registry::where_is(actor_name(job_id)) else {
        return false;
    };
    cell.stop(Some("its shard is handed over".into()));
    true
}

/// Whether the job's orchestrator is still registered here.
pub fn runs_here(job_id: &str) -> bool {
    ractor::registry::where_is(actor_name(job_id)).is_some()
}

/// Jobs running in this process, whatever their shard.
pub fn running_in_process() -> u64 {
    ractor::registry::registered()
        .iter()
        .filter(|name| name.starts_with(NAME_PREFIX))
        .count() as u64
}
