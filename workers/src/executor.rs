//! The ToolExecutor actor: serves one pool's tools over NATS.
//!
//! `pre_start` registers the pool as a NATS micro service
//! ([`service_name`](atelier_messages::worker::service_name), e.g. `atelier-tabular`) whose one
//! endpoint is `atelier.tool.<pool>` in the queue group `atelier-tool-<pool>`, so
//! `$SRV.PING/INFO/STATS` (and `nats micro ls|info|stats`) list every worker with its requests,
//! errors and latency; the endpoint's stats `data` adds calls in flight and tool errors (see
//! [`WorkerStatsData`]). It starts a pump task that starts a task for each request (the actor
//! is not on a call's path: one hand-off fewer per call); the call's task sends progress to a
//! caller that asked for it, waits for a concurrency permit, decodes the request, runs the tool
//! (in a `tool_call` span whose parent is the W3C trace context of the request's headers, so it
//! joins the job's trace) and replies in the request's format, with the draft changes the tool
//! staged for the caller to apply. The actor owns the service's lifecycle: its one message, `Drain`, stops the pump, lets
//! calls already received finish (their tasks are tracked), then stops the actor.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::service::{Request, Service, ServiceExt, endpoint::Endpoint};
use atelier_messages::tool::{Pool, ToolOutput, ToolRequest};
use atelier_messages::worker::{TOOL_ENDPOINT, WaitHistogram, WorkerStatsData, service_name};
use atelier_messages::{ErrorBody, ErrorCode, Format, Reply, decode, encode_reply};
use atelier_transport::headers::{format_of, has_progress_mark, join_trace, with_format};
use atelier_transport::{failpoint, keep_alive};
use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::WorkerConfig;
use crate::error::WorkerError;
use crate::files::{FileAccess, ToolCall};
use crate::review;
use crate::tools::Toolbox;

/// The most concurrent calls one worker process accepts.
const MAX_CONCURRENCY: usize = 4096;
/// Bytes of a reply's max payload kept for headers and protocol framing.
const REPLY_OVERHEAD: usize = 1024;
/// How long shutdown waits for calls in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Counters shared by the calls and the stats handler.
#[derive(Default)]
struct Counters {
    tool_errors: AtomicU64,
    last_error_code: std::sync::Mutex<Option<String>>,
    /// Calls received and waiting for a slot.
    pending: AtomicU64,
    draining: AtomicBool,
    dispatch_wait: std::sync::Mutex<WaitHistogram>,
}

impl Counters {
    fn record_start(&self, waited: Duration) {
        self.pending.fetch_sub(1, Ordering::Relaxed);
        if let Ok(mut histogram) = self.dispatch_wait.lock() {
            histogram.observe(waited.as_secs_f64());
        }
    }

    fn record_error(&self, error: &ErrorBody) {
        self.tool_errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_error_code.lock() {
            *last = Some(error.code.as_str().to_string());
        }
    }
}

/// The actor (stateless; see [`State`]).
pub struct ToolExecutor;

/// What the actor is started with.
pub struct ExecutorConfig {
    pub client: async_nats::Client,
    pub config: WorkerConfig,
    pub(crate) files: Arc<FileAccess>,
}

/// The actor's state, built in `pre_start`.
pub struct State {
    worker_id: Arc<str>,
    client: async_nats::Client,
    counters: Arc<Counters>,
    service: Option<Service>,
    pump: Option<JoinHandle<()>>,
    /// Tells the pump to stop taking calls and start those already received.
    stop_pump: Option<tokio::sync::oneshot::Sender<()>>,
    /// Every call's task, started by the pump.
    calls: TaskTracker,
}

/// The actor's messages.
pub enum Msg {
    /// Stop taking requests; the reply comes once calls in flight have finished.
    Drain(RpcReplyPort<()>),
}

impl Actor for ToolExecutor {
    type Msg = Msg;
    type State = State;
    type Arguments = ExecutorConfig;

    async fn pre_start(
        &self,
        _myself: ActorRef<Msg>,
        args: ExecutorConfig,
    ) -> Result<State, ActorProcessingErr> {
        let ExecutorConfig {
            client,
            config,
            files,
        } = args;
        let pool = config.pool.as_str();
        let max_concurrency = u32::try_from(config.max_concurrency)?;
        let permits = Arc::new(Semaphore::new(config.max_concurrency));
        let counters = Arc::new(Counters::default());
        let (service, endpoint) = register_service(
            &client,
            &config,
            Arc::clone(&permits),
            Arc::clone(&counters),
        )
        .await?;
        tracing::info!(worker = %config.worker_id, pool, max_concurrency, "tool executor serving");
        let worker_id: Arc<str> = config.worker_id.as_str().into();
        let context = Arc::new(Call {
            worker_id: worker_id.clone(),
            client: client.clone(),
            toolbox: Arc::new(Toolbox::new(
                config.pool,
                files.clone(),
                &config.cache_dir,
                config.table_cache_bytes,
                config.office_timeout,
            )),
            files,
            counters: counters.clone(),
            permits,
        });
        let calls = TaskTracker::new();
        let (stop_pump, stopped) = tokio::sync::oneshot::channel();
        Ok(State {
            worker_id,
            client,
            counters,
            service: Some(service),
            pump: Some(tokio::spawn(pump(
                endpoint,
                context,
                calls.clone(),
                stopped,
            ))),
            stop_pump: Some(stop_pump),
            calls,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Msg>,
        message: Msg,
        state: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        let Msg::Drain(reply) = message;
        state.counters.draining.store(true, Ordering::Relaxed);
        tracing::info!(worker = %state.worker_id, "draining: no new calls; finishing those received");
        if let Some(stop) = state.stop_pump.take() {
            let _ = stop.send(());
        }
        // The pump starts what it had received before it ends.
        if let Some(pump) = state.pump.take() {
            let _ = pump.await;
        }
        stop_service(state).await;
        state.calls.close();
        if tokio::time::timeout(DRAIN_TIMEOUT, state.calls.wait())
            .await
            .is_err()
        {
            tracing::warn!(worker = %state.worker_id, "calls still running after the drain timeout");
        }
        let _ = state.client.flush().await;
        let _ = reply.send(());
        myself.stop(Some("drained".into()));
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Msg>,
        state: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(pump) = state.pump.take() {
            pump.abort();
        }
        stop_service(state).await;
        tracing::info!(worker = %state.worker_id, "tool executor stopped");
        Ok(())
    }
}

/// Registers the pool's micro service and its one endpoint (the pool's subject and queue group).
async fn register_service(
    client: &async_nats::Client,
    config: &WorkerConfig,
    permits: Arc<Semaphore>,
    counters: Arc<Counters>,
) -> Result<(Service, Endpoint), ActorProcessingErr> {
    let pool = config.pool.as_str();
    let metadata = HashMap::from([
        ("worker".to_string(), config.worker_id.clone()),
        ("pool".to_string(), pool.to_string()),
        (
            "max_concurrency".to_string(),
            config.max_concurrency.to_string(),
        ),
    ]);
    let max = config.max_concurrency;
    let data = WorkerStatsData {
        worker: config.worker_id.clone(),
        pool: pool.to_string(),
        max_concurrency: u64::try_from(max).unwrap_or(u64::MAX),
        async_threads: u64::try_from(tokio::runtime::Handle::current().metrics().num_workers())
            .unwrap_or(u64::MAX),
        ..WorkerStatsData::default()
    };
    let service = client
        .service_builder()
        .description(format!("Atelier {pool} tool worker pool"))
        .metadata(metadata)
        .queue_group(atelier_messages::subjects::tool_queue(pool))
        .stats_handler(move |_endpoint, _stats| {
            let in_flight = max.saturating_sub(permits.available_permits());
            serde_json::to_value(WorkerStatsData {
                in_flight: u64::try_from(in_flight).unwrap_or(u64::MAX),
                tool_errors: counters.tool_errors.load(Ordering::Relaxed),
                last_error_code: counters
                    .last_error_code
                    .lock()
                    .ok()
                    .and_then(|last| last.clone()),
                pending: counters.pending.load(Ordering::Relaxed),
                draining: counters.draining.load(Ordering::Relaxed),
                dispatch_wait: counters
                    .dispatch_wait
                    .lock()
                    .map(|histogram| histogram.clone())
                    .unwrap_or_default(),
                ..data.clone()
            })
            .unwrap_or_default()
        })
        .start(service_name(config.pool), env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|error| format!("cannot register the {pool} service: {error}"))?;
    let endpoint = service
        .endpoint_builder()
        .name(TOOL_ENDPOINT)
        .queue_group(atelier_messages::subjects::tool_queue(pool))
        .add(config.pool.subject())
        .await
        .map_err(|error| format!("cannot add the {pool} endpoint: {error}"))?;
    Ok((service, endpoint))
}

/// Leaves the service (its `$SRV` verbs stop answering for this worker).
async fn stop_service(state: &mut State) {
    if let Some(service) = state.service.take()
        && let Err(error) = service.stop().await
    {
        tracing::warn!(worker = %state.worker_id, %error, "could not stop the service");
    }
}

/// How long a stopping pump waits for calls already on their way to it.
const PUMP_DRAIN_QUIET: Duration = Duration::from_millis(500);

/// Starts a task for each request from the endpoint until it ends, or until `stop`: then it
/// leaves the queue group and starts the requests already received (the server routes no new
/// ones here once the unsubscribe has reached it).
async fn pump(
    mut endpoint: Endpoint,
    context: Arc<Call>,
    calls: TaskTracker,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            request = endpoint.next() => {
                let Some(request) = request else { return };
                calls.spawn(Arc::clone(&context).serve(request));
            }
            _ = &mut stop => break,
        }
    }
    if let Err(error) = endpoint.stop().await {
        tracing::warn!(%error, "could not leave the queue group");
    }
    while let Ok(Some(request)) = tokio::time::timeout(PUMP_DRAIN_QUIET, endpoint.next()).await {
        calls.spawn(Arc::clone(&context).serve(request));
    }
}

/// What every call's task shares.
struct Call {
    worker_id: Arc<str>,
    client: async_nats::Client,
    toolbox: Arc<Toolbox>,
    files: Arc<FileAccess>,
    counters: Arc<Counters>,
    permits: Arc<Semaphore>,
}

impl Call {
    /// Answers one request once a concurrency permit is free; a caller that asked for progress
    /// gets it from the moment the request arrives, waiting for a permit included, so a busy
    /// worker's queued calls are not mistaken for lost ones.
    async fn serve(self: Arc<Self>, request: Request) {
        let message = &request.message;
        let headers = message.headers.as_ref();
        let format = format_of(headers);
        let Some(reply) = message.reply.clone() else {
            tracing::warn!(subject = %message.subject, "tool request without a reply subject ignored");
            return;
        };
        // Only callers that ask for progress (the coordinator does) get it: a plain
        // request/reply client takes the first message as the answer.
        let progress = match has_progress_mark(headers) {
            true => Some(keep_alive(self.client.clone(), reply).await),
            false => None,
        };
        let arrived = Instant::now();
        self.counters.pending.fetch_add(1, Ordering::Relaxed);
        let permit = Arc::clone(&self.permits).acquire_owned().await;
        self.counters.record_start(arrived.elapsed());
        let Ok(_permit) = permit else {
            return;
        };
        let mut writes = false;
        let payload = match decode::<ToolRequest>(&message.payload, format) {
            Ok(tool_request) => {
                let span = tracing::info_span!(
                    "tool_call",
                    tool = %tool_request.tool,
                    call_id = %tool_request.call_id,
                    job_id = tool_request.job_id.as_deref().unwrap_or(""),
                    worker = %self.worker_id,
                    otel.kind = "server",
                );
                join_trace(&span, headers);
                let result = self.run(tool_request).instrument(span).await;
                writes = matches!(&result, Ok(output) if output.changes.is_some());
                encode_reply(&Reply::from_result(result), format)
            }
            Err(error) => {
                tracing::warn!(worker = %self.worker_id, %error, "undecodable tool request");
                self.counters.record_error(&error);
                encode_reply(&Reply::<ToolOutput>::error(error), format)
            }
        };
        let payload = self.within_max_payload(payload, format);
        if writes {
            // A write computed and not yet answered: the crash tests' kill point.
            failpoint::hit("worker_before_reply");
        }
        if let Some(progress) = progress {
            progress.abort();
        }
        if let Err(error) = request
            .respond_with_headers(Ok(payload.into()), with_format(format))
            .await
        {
            tracing::warn!(worker = %self.worker_id, %error, "could not publish a tool reply");
        }
    }

    /// A reply the server would refuse becomes a `RESULT_TOO_LARGE` error the caller gets at
    /// once, instead of no reply at all.
    fn within_max_payload(&self, payload: Vec<u8>, format: Format) -> Vec<u8> {
        let max_payload = self.client.server_info().max_payload;
        // Headers and protocol overhead take a little of the limit.
        let room = max_payload.saturating_sub(REPLY_OVERHEAD);
        if max_payload == 0 || payload.len() <= room {
            return payload;
        }
        let error = ErrorBody::new(
            ErrorCode::ResultTooLarge,
            format!(
                "the tool's result is {} bytes, over the NATS server's max_payload of {max_payload} bytes; \
                 ask for less (a row window, a cell range, fewer lines) or raise max_payload",
                payload.len()
            ),
        );
        tracing::warn!(worker = %self.worker_id, bytes = payload.len(), max_payload, "tool result too large for one message");
        self.counters.record_error(&error);
        encode_reply(&Reply::<ToolOutput>::error(error), format)
    }

    async fn run(&self, request: ToolRequest) -> Result<ToolOutput, ErrorBody> {
        let started = Instant::now();
        let call = ToolCall::new(request);
        let result = self.toolbox.run(&call).await;
        let (request, staged) = call.finish();
        let changes = (!staged.is_empty()).then_some(staged);
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match &result {
            Ok(_) => tracing::info!(elapsed_ms, "tool call done"),
            Err(error) => {
                self.counters.record_error(error);
                tracing::info!(elapsed_ms, code = %error.code, message = %error.message, "tool call failed")
            }
        }
        let output = result?;
        let changes = match changes {
            Some(changes) => Some(
                self.files
                    .stage_large_files(&request.workbench, changes)
                    .await?,
            ),
            None => None,
        };
        Ok(ToolOutput {
            call_id: request.call_id,
            tool: request.tool,
            output,
            worker: self.worker_id.to_string(),
            elapsed_ms,
            changes,
        })
    }
}

/// A running worker: the ToolExecutor actor and its task.
pub struct WorkerHandle {
    worker_id: String,
    pool: Pool,
    actor: ActorRef<Msg>,
    task: JoinHandle<()>,
    /// The office pool's content review service.
    review: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Stops taking requests, waits for calls in flight (up to a minute), then stops the actor.
    pub async fn shutdown(self) {
        if let Some(review) = &self.review {
            review.abort();
        }
        let drained = ractor::call!(self.actor, Msg::Drain);
        if let Err(error) = drained {
            tracing::warn!(worker = %self.worker_id, pool = %self.pool, %error, "drain failed; stopping");
            self.actor.stop(Some("shutdown".into()));
        }
        let _ = self.task.await;
    }
}

/// Starts the ToolExecutor actor for `config`.
pub(crate) async fn start(
    client: async_nats::Client,
    config: WorkerConfig,
) -> Result<WorkerHandle, WorkerError> {
    if !(1..=MAX_CONCURRENCY).contains(&config.max_concurrency) {
        return Err(WorkerError::InvalidConfig(format!(
            "max_concurrency must be between 1 and {MAX_CONCURRENCY}, got {}",
            config.max_concurrency
        )));
    }
    std::fs::create_dir_all(&config.cache_dir).map_err(|source| WorkerError::CacheDir {
        path: config.cache_dir.clone(),
        source,
    })?;
    let worker_id = config.worker_id.clone();
    let pool = config.pool;
    let files = Arc::new(FileAccess::new(
        client.clone(),
        config.blob_dir.clone(),
        &config.cache_dir,
        config.blob_cache_bytes,
    ));
    let review = match pool {
        Pool::Office => Some(review::serve(client.clone(), files.clone()).await?),
        Pool::Tabular => None,
    };
    let executor = ExecutorConfig {
        client,
        config,
        files,
    };
    let (actor, task) = Actor::spawn(None, ToolExecutor, executor).await?;
    Ok(WorkerHandle {
        worker_id,
        pool,
        actor,
        task,
        review,
    })
}
