//! The BatchRunner actor: one per running batch, registered under the batch's name. It keeps
//! at most `concurrency` targets in flight — never two of one workbench — and holds nothing for
//! queued targets but a cursor into the targets tree, so a batch of any size runs in bounded
//! memory.
//!
//! Dispatching a target records it `running` with its child job id (derived from the batch,
//! the target and the attempt) before the job is submitted; a runner adopted after a crash
//! finds the target running, looks the child up by that id and submits it only if it was
//! never recorded, so no child runs twice. Children are reached over NATS like any client's
//! jobs ([`Children`]): their ends arrive as their `finished` events, and a periodic look at
//! the records of the children in flight catches any missed.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use atelier_messages::batch::BatchEventKind;
use atelier_messages::budget::Spent;
use atelier_messages::job::{JobState, JobSubmit};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION, now_ms};
use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, SpawnErr};

use crate::batches::{BatchRecord, Batches, TargetRecord};
use crate::children::{ChildEnd, Children};
use crate::error::CoordinatorError;
use crate::storage::Store;
use crate::templates::{self, ChildAction};

mod ending;

/// How often the children in flight are looked at (in case a `finished` event was missed).
const RECONCILE_EVERY: Duration = Duration::from_secs(2);
/// Most targets one fill looks at beyond the cursor.
const SCAN_LIMIT: usize = 4_096;
/// Least time between two `batch_progress` events.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// How long a workbench busy with another job is left alone before its target is tried again.
const BUSY_BACKOFF: Duration = Duration::from_secs(1);

/// Everything a runner needs.
#[derive(Clone)]
pub struct BatchRunnerConfig {
    pub batch_id: String,
    pub batches: Store<Batches>,
    pub children: Children,
    /// Where batch events are published, and in which format.
    pub jetstream: async_nats::jetstream::Context,
    pub events_format: atelier_messages::Format,
}

/// The runner's state, built in `pre_start`.
pub struct BatchRunnerState {
    config: BatchRunnerConfig,
    record: BatchRecord,
    /// Child job id → (target index, workbench).
    in_flight: HashMap<String, (u64, String)>,
    busy: HashSet<String>,
    /// Workbenches answering a job that is not ours, and until when they are left alone.
    cooling: HashMap<String, Instant>,
    /// Workbenches found answering a job that is not ours: their next target is dispatched
    /// once a look (which writes nothing) finds them idle, so that waiting for one writes
    /// nothing either.
    waited_for: HashSet<String>,
    /// Children dispatched whose submission failed (their shard did not answer), by job id:
    /// submitted again at each reconcile until their shard records them.
    unsubmitted: HashMap<String, TargetRecord>,
    /// No queued target has a lower index.
    cursor: u64,
    last_progress: Instant,
    listener: tokio::task::JoinHandle<()>,
    ticker: tokio::task::JoinHandle<()>,
}

/// The runner's messages.
#[derive(Debug)]
pub enum BatchRunnerMsg {
    /// Dispatch queued targets up to the concurrency.
    Fill,
    /// A job ended (maybe one of ours).
    JobFinished(ChildEnd),
    /// Look at every child in flight.
    Reconcile,
    /// Stop dispatching; cancel what runs.
    Cancel,
    /// The concurrency changed.
    Reload,
}

/// The BatchRunner actor.
pub struct BatchRunner;

impl Actor for BatchRunner {
    type Msg = BatchRunnerMsg;
    type State = BatchRunnerState;
    type Arguments = BatchRunnerConfig;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        config: BatchRunnerConfig,
    ) -> Result<Self::State, ActorProcessingErr> {
        let batches = &config.batches;
        let batch_id = config.batch_id.clone();
        let (record, running) = batches
            .read(move |batches| {
                let record = batches.require(&batch_id)?;
                let running = batches.running(&batch_id)?;
                Ok((record, running))
            })
            .await?;
        // Listening starts before adoption, so no end of an adopted child is missed.
        let listener = listen_for_children(&config, &myself).await?;
        let ticker = tick(&myself);
        let mut state = BatchRunnerState {
            config,
            record,
            in_flight: HashMap::new(),
            busy: HashSet::new(),
            cooling: HashMap::new(),
            waited_for: HashSet::new(),
            unsubmitted: HashMap::new(),
            cursor: 0,
            // An adopted batch tells its progress at its first target's end here (a new one
            // has just said it started).
            last_progress: Instant::now()
                .checked_sub(PROGRESS_EVERY)
                .unwrap_or_else(Instant::now),
            listener,
            ticker,
        };
        if state.record.counts.done() == 0 && running.is_empty() {
            state.emit(BatchEventKind::BatchStarted).await;
        }
        for target in running {
            if let Err(error) = state.adopt(target).await {
                state.listener.abort();
                state.ticker.abort();
                return Err(error.into());
            }
        }
        myself.cast(BatchRunnerMsg::Fill)?;
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A failed step (storage, the store) is logged and left to the next reconcile: the
        // runner must outlive it, or its batch would stay `running` until the next start.
        match state.step(message).await {
            Ok(true) => myself.stop(None),
            Ok(false) => {}
            Err(error) => {
                tracing::error!(batch_id = %state.batch_id(), %error, "batch step failed; retrying at the next reconcile");
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.listener.abort();
        state.ticker.abort();
        // A retry that came while this runner was stopping found its name taken: start again
        // once the name is free if the batch runs again.
        let config = state.config.clone();
        tokio::spawn(async move { restart_if_running(config).await });
        Ok(())
    }
}

/// Forwards the ends of this batch's children to the runner.
async fn listen_for_children(
    config: &BatchRunnerConfig,
    myself: &ActorRef<BatchRunnerMsg>,
) -> Result<tokio::task::JoinHandle<()>, ErrorBody> {
    let ends = config.children.ends().await?;
    let myself = myself.clone();
    let prefix = format!("{}-t", config.batch_id);
    Ok(tokio::spawn(async move {
        let mut ours = std::pin::pin!(
            ends.filter(|end| { std::future::ready(end.job_id.starts_with(&prefix)) })
        );
        while let Some(end) = ours.next().await {
            if myself.cast(BatchRunnerMsg::JobFinished(end)).is_err() {
                return;
            }
        }
    }))
}

/// Asks the runner to reconcile every [`RECONCILE_EVERY`] until it stops.
fn tick(myself: &ActorRef<BatchRunnerMsg>) -> tokio::task::JoinHandle<()> {
    let myself = myself.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(RECONCILE_EVERY).await;
            if myself.cast(BatchRunnerMsg::Reconcile).is_err() {
                return;
            }
        }
    })
}

impl BatchRunnerState {
    fn batch_id(&self) -> &str {
        &self.config.batch_id
    }

    /// Handles one message; true when the batch ended.
    async fn step(&mut self, message: BatchRunnerMsg) -> Result<bool, ErrorBody> {
        match message {
            BatchRunnerMsg::Fill => self.fill().await?,
            BatchRunnerMsg::JobFinished(end) => {
                if self.in_flight.contains_key(&end.job_id) {
                    self.end_target_and_go_on(end).await?;
                    self.fill().await?;
                }
            }
            BatchRunnerMsg::Reconcile => {
                self.submit_again().await?;
                self.settle_all().await?;
                self.reload().await?;
                self.fill().await?;
            }
            BatchRunnerMsg::Cancel => {
                self.reload().await?;
                self.cancel_children().await;
                self.fill().await?;
            }
            BatchRunnerMsg::Reload => {
                self.reload().await?;
                self.fill().await?;
            }
        }
        self.finish_if_done().await
    }

    /// Takes a target found running after a restart: follows its child, or submits it if it
    /// was never recorded (the crash came between dispatch and submission).
    async fn adopt(&mut self, target: TargetRecord) -> Result<(), ErrorBody> {
        let Some(job_id) = target.job_id.clone() else {
            return Ok(());
        };
        self.in_flight
            .insert(job_id.clone(), (target.index, target.workbench.clone()));
        self.busy.insert(target.workbench.clone());
        let Some(child) = self.config.children.get(&job_id, &target.workbench).await? else {
            tracing::info!(batch_id = %self.batch_id(), %job_id, "submitting a child that was dispatched but never recorded");
            return self.submit(&target, &job_id).await;
        };
        // It may have ended just before the crash.
        match ChildEnd::of(child) {
            Some(end) => self.end_target(end).await,
            None => Ok(()),
        }
    }

    async fn reload(&mut self) -> Result<(), ErrorBody> {
        let batches = &self.config.batches;
        let batch_id = self.batch_id().to_string();
        self.record = batches
            .read(move |batches| batches.require(&batch_id))
            .await?;
        Ok(())
    }

    /// True while new targets may be dispatched.
    fn dispatching(&self) -> bool {
        self.record.dispatches()
    }

    /// How many more targets may run now.
    fn room(&self) -> usize {
        match self.dispatching() {
            true => (self.record.concurrency as usize).saturating_sub(self.in_flight.len()),
            false => 0,
        }
    }

    /// Dispatches queued targets while there is room.
    async fn fill(&mut self) -> Result<(), ErrorBody> {
        while self.room() > 0 {
            let picked = self.queued(self.room()).await?;
            if picked.is_empty() {
                return Ok(());
            }
            for target in picked {
                self.dispatch(target).await?;
            }
        }
        Ok(())
    }

    /// At most `want` queued targets whose workbenches are neither busy with one of ours nor
    /// left alone for now, from the cursor on (which moves to the lowest still queued).
    async fn queued(&mut self, want: usize) -> Result<Vec<TargetRecord>, ErrorBody> {
        let now = Instant::now();
        self.cooling.retain(|_, until| *until > now);
        let batches = &self.config.batches;
        let batch_id = self.batch_id().to_string();
        let mut busy = self.busy.clone();
        busy.extend(self.cooling.keys().cloned());
        let from = self.cursor;
        let (picked, cursor) = batches
            .read(move |batches| batches.next_queued(&batch_id, from, &busy, want, SCAN_LIMIT))
            .await?;
        self.cursor = cursor;
        Ok(picked)
    }

    /// Records the target running with its child's id, then submits the child; a target whose
    /// workbench was found answering another job waits while a look finds it still does.
    async fn dispatch(&mut self, target: TargetRecord) -> Result<(), ErrorBody> {
        if self.waited_for.contains(&target.workbench) {
            let checked = self.config.children.check(&target.workbench).await;
            if matches!(&checked, Err(error) if error.code == ErrorCode::WorkbenchBusy) {
                self.cool(&target.workbench);
                return Ok(());
            }
            self.waited_for.remove(&target.workbench);
        }
        let batches = &self.config.batches;
        let batch_id = self.batch_id().to_string();
        let index = target.index;
        let (record, target) = batches
            .commit(move |batches| batches.dispatch(&batch_id, index))
            .await?;
        self.record = record;
        self.follow(target).await
    }

    /// Follows a target just recorded running: its child is in flight, then submitted.
    async fn follow(&mut self, target: TargetRecord) -> Result<(), ErrorBody> {
        let Some(job_id) = target.job_id.clone() else {
            return Ok(());
        };
        self.in_flight
            .insert(job_id.clone(), (target.index, target.workbench.clone()));
        self.busy.insert(target.workbench.clone());
        self.submit(&target, &job_id).await
    }

    /// Submits the child job of a running target; a child that cannot be built or is invalid
    /// ends its target at once (one its shard refuses ends it with its `finished` event). One
    /// whose workbench answers a job that is not ours is not recorded: its target goes back to
    /// the queue and waits for the workbench rather than failing with `WORKBENCH_BUSY`. One
    /// whose shard did not record it (no owner now, being handed over) is submitted again at
    /// the next reconcile while the runner goes on with the others.
    async fn submit(&mut self, target: &TargetRecord, job_id: &str) -> Result<(), ErrorBody> {
        let child = self.child(target, job_id).and_then(|submit| {
            submit.validate()?;
            Ok(submit)
        });
        let submit = match child {
            Ok(submit) => submit,
            Err(error) => {
                let end = ChildEnd {
                    job_id: job_id.to_string(),
                    state: JobState::Failed,
                    error: Some(error),
                    outcome: None,
                    spent: Spent::NOTHING,
                };
                return self.end_target(end).await;
            }
        };
        match self.config.children.submit(submit).await {
            Ok(()) => Ok(()),
            Err(error) if error.code == ErrorCode::WorkbenchBusy => {
                self.wait_for_workbench(target, job_id).await
            }
            Err(error) => {
                tracing::warn!(batch_id = %self.batch_id(), %job_id, %error, "child not recorded yet; submitting it again at the next reconcile");
                self.unsubmitted.insert(job_id.to_string(), target.clone());
                Ok(())
            }
        }
    }

    /// Leaves a workbench answering another job alone for [`BUSY_BACKOFF`].
    fn cool(&mut self, workbench: &str) {
        self.cooling
            .insert(workbench.to_string(), Instant::now() + BUSY_BACKOFF);
    }

    /// Puts back in the queue a target whose workbench answers another job, and leaves that
    /// workbench alone for [`BUSY_BACKOFF`]; from then on it is looked at (a read) before its
    /// target is dispatched again.
    async fn wait_for_workbench(
        &mut self,
        target: &TargetRecord,
        job_id: &str,
    ) -> Result<(), ErrorBody> {
        self.in_flight.remove(job_id);
        self.busy.remove(&target.workbench);
        self.waited_for.insert(target.workbench.clone());
        self.cool(&target.workbench);
        self.cursor = self.cursor.min(target.index);
        let batches = &self.config.batches;
        let batch_id = self.batch_id().to_string();
        let (index, job_id) = (target.index, job_id.to_string());
        let (record, _) = batches
            .stage(move |batches| batches.undispatch(&batch_id, index, &job_id))
            .await?;
        self.record = record;
        Ok(())
    }

    /// Submits again the children whose shard did not answer (a repeat of one that was
    /// recorded after all changes nothing).
    async fn submit_again(&mut self) -> Result<(), ErrorBody> {
        for (job_id, target) in std::mem::take(&mut self.unsubmitted) {
            self.submit(&target, &job_id).await?;
        }
        Ok(())
    }

    /// The child job of a target.
    fn child(&self, target: &TargetRecord, job_id: &str) -> Result<JobSubmit, ErrorBody> {
        let record = &self.record;
        let ChildAction {
            message,
            model,
            workflow,
        } = templates::render_action(
            &record.action,
            &target.workbench,
            target.file.as_deref(),
            target.index,
        )?;
        Ok(JobSubmit {
            v: PROTOCOL_VERSION,
            job_id: job_id.to_string(),
            workbench: target.workbench.clone(),
            message,
            model,
            submitted_at_ms: now_ms(),
            auto_approve: record.auto_approve,
            continue_draft: target.continue_draft,
            approvals: None,
            workflow,
            batch_id: Some(record.batch_id.clone()),
            time_limit_secs: record.time_limit_secs,
            priority: record.priority,
            // Each target may spend what is left of the batch's budget when it starts.
            budget: record.budget.remaining(&record.spent),
        })
    }
}

/// The registry name of a batch's runner.
fn actor_name(batch_id: &str) -> String {
    format!("atelier-batch-{batch_id}")
}

/// How long a stopped runner's name may take to be freed.
const HANDOVER: Duration = Duration::from_secs(5);

/// Starts a runner for the batch once its stopped runner's name is free, if the batch runs.
async fn restart_if_running(config: BatchRunnerConfig) {
    let name = actor_name(&config.batch_id);
    let started = Instant::now();
    while ractor::registry::where_is(name.clone()).is_some() && started.elapsed() < HANDOVER {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let batches = &config.batches;
    let batch_id = config.batch_id.clone();
    let running = batches
        .read(move |batches| batches.get(&batch_id))
        .await
        .ok()
        .flatten()
        .is_some_and(|record| !record.state.is_terminal());
    if running && let Err(error) = start(config).await {
        tracing::error!(%error, "could not restart a batch runner");
    }
}

/// Starts the batch's runner, or tells the one running here to look at its batch again.
pub async fn start(config: BatchRunnerConfig) -> Result<(), CoordinatorError> {
    let name = actor_name(&config.batch_id);
    if tell(&config.batch_id, BatchRunnerMsg::Reload) {
        return Ok(());
    }
    match Actor::spawn(Some(name), BatchRunner, config).await {
        Ok(_) | Err(SpawnErr::ActorAlreadyRegistered(_)) => Ok(()),
        Err(error) => Err(CoordinatorError::Actor(error.to_string())),
    }
}

/// Stops the batch's runner at once, wherever it is (its shard is handed over: the next owner
/// adopts the batch); false when none runs here. A kill, so that `post_stop` does not start it
/// again here; its listener and ticker end at their next message to it.
pub fn kill(batch_id: &str) -> bool {
    let Some(cell) = ractor::registry::where_is(actor_name(batch_id)) else {
        return false;
    };
    cell.kill();
    true
}

/// Tells the batch's runner; false when none runs here.
pub fn tell(batch_id: &str, message: BatchRunnerMsg) -> bool {
    let Some(cell) = ractor::registry::where_is(actor_name(batch_id)) else {
        return false;
    };
    ActorRef::<BatchRunnerMsg>::from(cell).cast(message).is_ok()
}
