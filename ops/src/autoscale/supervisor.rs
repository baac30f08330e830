//! The PoolSupervisor actor: one per autoscaled pool. Every tick it reads the pool's demand
//! (`$SRV.STATS`), asks its [`Scaler`] for a decision, starts or retires a worker process, and
//! reports the decision (log, `atelier.pool.<pool>.scaled`, the `atelier-autoscaler` service's
//! stats). Other code holds an [`Autoscaler`]: its `stop` retires every worker and waits for them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use async_nats::service::ServiceExt;
use atelier_messages::now_ms;
use atelier_messages::tool::Pool;
use atelier_messages::worker::{
    AUTOSCALER_SERVICE, AutoscalePool, AutoscaleStats, ScaleDecision, ScaleDirection, scale_subject,
};
use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::task::JoinHandle;

use super::{Decision, Demand, PoolBounds, Scaler, Tuning};
use crate::dashboard::workers;

/// The file in a data directory that holds the workers' NATS URL.
pub const WORKER_URL_FILE: &str = "nats-worker.url";

/// How worker processes are started.
#[derive(Debug, Clone)]
pub struct Launcher {
    /// The `atelier` executable.
    pub exe: PathBuf,
    /// The workers' NATS URL (the worker role's on the embedded server): given to each worker
    /// through `<data>/nats-worker.url`, readable by its owner only, never on a command line.
    pub nats_url: String,
    pub creds: Option<PathBuf>,
    pub data_dir: PathBuf,
    /// Start the n-th worker under `taskset -c <n mod cores>` (one core per worker).
    pub pin_cpus: bool,
    /// The workers' log filter when `ATELIER_LOG` does not set one (e.g. `warn` under a
    /// command that prints for a person); `None`: a worker's own default.
    pub log_filter: Option<&'static str>,
}

impl Launcher {
    /// Writes the workers' URL where the workers it starts read it (`--data`), readable by its
    /// owner only.
    pub fn record_url(&self) -> anyhow::Result<()> {
        crate::nats_roles::write_private(&self.data_dir.join(WORKER_URL_FILE), &self.nats_url)
    }

    fn spawn(&self, pool: Pool, slot: usize) -> anyhow::Result<tokio::process::Child> {
        let mut command = if self.pin_cpus {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let mut taskset = tokio::process::Command::new("taskset");
            taskset
                .arg("-c")
                .arg((slot % cores).to_string())
                .arg(&self.exe);
            taskset
        } else {
            tokio::process::Command::new(&self.exe)
        };
        command
            .args(["worker", "--supervised", "--pool", pool.as_str()])
            .arg("--data")
            .arg(&self.data_dir)
            // The worker retires when this pipe closes, so it never outlives the autoscaler.
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        // The worker reads its URL from the data directory ([`Launcher::record_url`]).
        command.env_remove("ATELIER_NATS_URL");
        crate::child_env::without_secrets(command.as_std_mut());
        if let Some(creds) = &self.creds {
            command.arg("--creds").arg(creds);
        }
        if let Some(filter) = self
            .log_filter
            .filter(|_| std::env::var_os("ATELIER_LOG").is_none())
        {
            command.env("ATELIER_LOG", filter);
        }
        command
            .spawn()
            .with_context(|| format!("cannot start a {pool} worker ({})", self.exe.display()))
    }
}

/// A worker process the supervisor started.
struct Worker {
    process: tokio::process::Child,
    slot: usize,
    retiring: bool,
}

impl Worker {
    /// Asks the worker to drain and exit.
    fn retire(&mut self) {
        self.retiring = true;
        if let Some(pid) = self.process.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }
}

/// How long a retiring worker may take before it is killed at shutdown.
const RETIRE_TIMEOUT: Duration = Duration::from_secs(90);

/// What a PoolSupervisor is started with.
pub struct SupervisorConfig {
    pub nats: async_nats::Client,
    pub pool: Pool,
    pub bounds: PoolBounds,
    pub tuning: Tuning,
    pub launcher: Launcher,
    /// The autoscaler service's stats, one line per pool.
    pub stats: Arc<Mutex<AutoscaleStats>>,
}

/// The actor's state, built in `pre_start`.
pub struct State {
    nats: async_nats::Client,
    pool: Pool,
    interval: Duration,
    scaler: Scaler,
    launcher: Launcher,
    workers: Vec<Worker>,
    stats: Arc<Mutex<AutoscaleStats>>,
}

/// The actor's messages.
pub enum Msg {
    /// Read the demand and decide (each tick schedules the next).
    Tick,
    /// Retire every worker, wait for them, then stop.
    Retire(RpcReplyPort<()>),
}

/// The PoolSupervisor actor.
pub struct PoolSupervisor;

impl Actor for PoolSupervisor {
    type Msg = Msg;
    type State = State;
    type Arguments = SupervisorConfig;

    async fn pre_start(
        &self,
        myself: ActorRef<Msg>,
        config: SupervisorConfig,
    ) -> Result<State, ActorProcessingErr> {
        myself.cast(Msg::Tick)?;
        Ok(State {
            nats: config.nats,
            pool: config.pool,
            interval: config.tuning.interval,
            scaler: Scaler::new(config.bounds, config.tuning),
            launcher: config.launcher,
            workers: Vec::new(),
            stats: config.stats,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Msg>,
        message: Msg,
        state: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            Msg::Tick => {
                state.tick().await;
                myself.send_after(state.interval, || Msg::Tick);
            }
            Msg::Retire(reply) => {
                state.retire_all().await;
                let _ = reply.send(());
                myself.stop(Some("retired".into()));
            }
        }
        Ok(())
    }
}

impl State {
    async fn tick(&mut self) {
        self.reap();
        let view = workers::pool(&self.nats, self.pool).await;
        let demand = Demand::of(&view);
        let running = self.running();
        if let Some(decision) = self.scaler.decide(Instant::now(), demand, running) {
            self.apply(decision, demand, running).await;
        }
        self.record(None);
    }

    fn running(&self) -> usize {
        self.workers.iter().filter(|w| !w.retiring).count()
    }

    /// Forgets workers that exited (retired ones, or crashed ones the next tick replaces).
    fn reap(&mut self) {
        let pool = self.pool;
        self.workers
            .retain_mut(|worker| match worker.process.try_wait() {
                Ok(Some(status)) => {
                    if !worker.retiring {
                        tracing::warn!(%pool, slot = worker.slot, %status, "a worker exited on its own");
                    }
                    false
                }
                _ => true,
            });
    }

    async fn apply(&mut self, decision: Decision, demand: Demand, running: usize) {
        let to = match decision.direction {
            ScaleDirection::Up => match self.launch() {
                Ok(()) => running + 1,
                Err(error) => {
                    tracing::error!(pool = %self.pool, %error, "could not start a worker");
                    return;
                }
            },
            ScaleDirection::Down => {
                let newest = self.workers.iter_mut().rev().find(|w| !w.retiring);
                let Some(worker) = newest else { return };
                worker.retire();
                running - 1
            }
        };
        let event = ScaleDecision {
            pool: self.pool.to_string(),
            direction: decision.direction,
            from: running as u64,
            to: to as u64,
            reason: decision.reason,
            busy_slots: demand.busy,
            slots: demand.slots,
            pending_calls: demand.pending,
            at_ms: now_ms(),
        };
        tracing::info!(
            pool = %self.pool,
            direction = event.direction.as_str(),
            from = event.from,
            to = event.to,
            reason = %event.reason,
            "pool scaled"
        );
        if let Ok(payload) = serde_json::to_vec(&event) {
            let _ = self
                .nats
                .publish(scale_subject(self.pool), payload.into())
                .await;
        }
        self.record(Some(event));
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let slot = (0..)
            .find(|slot| self.workers.iter().all(|w| w.slot != *slot))
            .unwrap_or(0);
        let process = self.launcher.spawn(self.pool, slot)?;
        self.workers.push(Worker {
            process,
            slot,
            retiring: false,
        });
        Ok(())
    }

    /// Updates this pool's line of the service stats.
    fn record(&self, decision: Option<ScaleDecision>) {
        let Ok(mut stats) = self.stats.lock() else {
            return;
        };
        let name = self.pool.to_string();
        let Some(line) = stats.pools.iter_mut().find(|line| line.pool == name) else {
            return;
        };
        line.workers = self.workers.len() as u64;
        if let Some(decision) = decision {
            match decision.direction {
                ScaleDirection::Up => line.scale_ups += 1,
                ScaleDirection::Down => line.scale_downs += 1,
            }
            line.last_decision = Some(decision);
        }
    }

    /// SIGTERM to every worker, then waits for each to drain (killing one that overstays).
    async fn retire_all(&mut self) {
        for worker in &mut self.workers {
            if !worker.retiring {
                worker.retire();
            }
        }
        for worker in &mut self.workers {
            if tokio::time::timeout(RETIRE_TIMEOUT, worker.process.wait())
                .await
                .is_err()
            {
                let _ = worker.process.kill().await;
            }
        }
        self.workers.clear();
    }
}

/// A running autoscaler: one PoolSupervisor per pool and the `atelier-autoscaler` service.
pub struct Autoscaler {
    supervisors: Vec<(ActorRef<Msg>, JoinHandle<()>)>,
    service: Option<async_nats::service::Service>,
}

impl Autoscaler {
    /// Retires every worker it started, waits for them, and stops.
    pub async fn stop(mut self) {
        for (supervisor, join) in self.supervisors.drain(..) {
            if ractor::call!(supervisor, Msg::Retire).is_err() {
                supervisor.stop(None);
            }
            let _ = join.await;
        }
        if let Some(service) = self.service.take() {
            let _ = service.stop().await;
        }
    }
}

/// Starts supervising `pools` (each at its minimum at once).
pub async fn start(
    nats: async_nats::Client,
    pools: BTreeMap<Pool, PoolBounds>,
    tuning: Tuning,
    launcher: Launcher,
) -> anyhow::Result<Autoscaler> {
    let stats = Arc::new(Mutex::new(AutoscaleStats {
        pools: pools
            .iter()
            .map(|(pool, bounds)| AutoscalePool {
                pool: pool.to_string(),
                min: bounds.min as u64,
                max: bounds.max as u64,
                ..AutoscalePool::default()
            })
            .collect(),
    }));
    launcher.record_url()?;
    let service = register(&nats, Arc::clone(&stats)).await?;
    let mut supervisors = Vec::new();
    for (pool, bounds) in pools {
        let config = SupervisorConfig {
            nats: nats.clone(),
            pool,
            bounds,
            tuning,
            launcher: launcher.clone(),
            stats: Arc::clone(&stats),
        };
        let (actor, join) = Actor::spawn(None, PoolSupervisor, config)
            .await
            .map_err(|error| anyhow::anyhow!("cannot start the {pool} supervisor: {error}"))?;
        supervisors.push((actor, join));
    }
    Ok(Autoscaler {
        supervisors,
        service: Some(service),
    })
}

/// Registers the `atelier-autoscaler` micro service whose stats carry the decisions.
async fn register(
    nats: &async_nats::Client,
    stats: Arc<Mutex<AutoscaleStats>>,
) -> anyhow::Result<async_nats::service::Service> {
    let for_handler = Arc::clone(&stats);
    let service = nats
        .service_builder()
        .description("Atelier pool autoscaler")
        .stats_handler(move |_, _| {
            let stats = for_handler.lock().map(|s| s.clone()).unwrap_or_default();
            serde_json::to_value(stats).unwrap_or_default()
        })
        .start(AUTOSCALER_SERVICE, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|error| anyhow::anyhow!("cannot register the autoscaler service: {error}"))?;
    // An inbox subject: every role may subscribe to its inboxes.
    let subject = nats.new_inbox();
    let mut endpoint = service
        .endpoint_builder()
        .name("status")
        .add(subject)
        .await
        .map_err(|error| anyhow::anyhow!("cannot add the autoscaler endpoint: {error}"))?;
    tokio::spawn(async move {
        while let Some(request) = endpoint.next().await {
            let body = stats.lock().map(|s| s.clone()).unwrap_or_default();
            let payload = serde_json::to_vec(&body).unwrap_or_default();
            let _ = request.respond(Ok(payload.into())).await;
        }
    });
    Ok(service)
}
