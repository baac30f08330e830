//! The ToolExecutor actor: serves one pool's tools over NATS.
//!
//! `pre_start` joins the pool's queue group (`atelier.tool.<pool>` / `atelier-tool-<pool>`) and
//! starts a pump task that forwards each request to the actor. The actor hands every call to its
//! own task once a concurrency permit is free; the task decodes the request, runs the tool and
//! replies in the request's format. Shutdown stops the pump, lets calls already received finish,
//! then stops the actor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::{HeaderMap, Message};
use atelier_messages::codec::CONTENT_TYPE_HEADER;
use atelier_messages::tool::{Pool, ToolOutput, ToolRequest};
use atelier_messages::{ErrorBody, Format, Reply, decode, encode_reply, subjects};
use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::WorkerConfig;
use crate::error::WorkerError;
use crate::tools::Toolbox;

/// The most concurrent calls one worker process accepts.
const MAX_CONCURRENCY: usize = 4096;
/// How long shutdown waits for calls in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The actor (stateless; see [`State`]).
pub struct ToolExecutor;

/// What the actor is started with.
pub struct ExecutorConfig {
    pub client: async_nats::Client,
    pub config: WorkerConfig,
}

/// The actor's state, built in `pre_start`.
pub struct State {
    worker_id: Arc<str>,
    client: async_nats::Client,
    toolbox: Arc<Toolbox>,
    permits: Arc<Semaphore>,
    max_concurrency: u32,
    pump: Option<JoinHandle<()>>,
}

/// The actor's messages.
pub enum Msg {
    /// A tool request from the pool's queue group.
    Call(Box<Message>),
    /// Stop taking requests; the reply comes once calls in flight have finished.
    Drain(RpcReplyPort<()>),
    /// Sent by `Drain` behind any requests the pump had already forwarded.
    Finish(RpcReplyPort<()>),
}

impl Actor for ToolExecutor {
    type Msg = Msg;
    type State = State;
    type Arguments = ExecutorConfig;

    async fn pre_start(
        &self,
        myself: ActorRef<Msg>,
        args: ExecutorConfig,
    ) -> Result<State, ActorProcessingErr> {
        let ExecutorConfig { client, config } = args;
        let pool = config.pool.as_str();
        let subscriber = client
            .queue_subscribe(subjects::tool(pool), subjects::tool_queue(pool))
            .await?;
        let max_concurrency = u32::try_from(config.max_concurrency)?;
        tracing::info!(worker = %config.worker_id, pool, max_concurrency, "tool executor serving");
        Ok(State {
            worker_id: config.worker_id.as_str().into(),
            toolbox: Arc::new(Toolbox::new(
                config.pool,
                client.clone(),
                config.blob_dir.clone(),
                &config.cache_dir,
            )),
            client,
            permits: Arc::new(Semaphore::new(config.max_concurrency)),
            max_concurrency,
            pump: Some(tokio::spawn(pump(subscriber, myself))),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Msg>,
        message: Msg,
        state: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            Msg::Call(request) => {
                let permit = state.permits.clone().acquire_owned().await?;
                let call = Call {
                    worker_id: state.worker_id.clone(),
                    client: state.client.clone(),
                    toolbox: state.toolbox.clone(),
                };
                tokio::spawn(call.serve(*request, permit));
            }
            Msg::Drain(reply) => {
                if let Some(pump) = state.pump.take() {
                    pump.abort();
                    let _ = pump.await;
                }
                myself.cast(Msg::Finish(reply))?;
            }
            Msg::Finish(reply) => {
                let all = state.permits.acquire_many(state.max_concurrency);
                if tokio::time::timeout(DRAIN_TIMEOUT, all).await.is_err() {
                    tracing::warn!(worker = %state.worker_id, "calls still running after the drain timeout");
                }
                let _ = state.client.flush().await;
                let _ = reply.send(());
                myself.stop(Some("drained".into()));
            }
        }
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
        tracing::info!(worker = %state.worker_id, "tool executor stopped");
        Ok(())
    }
}

/// Forwards requests from the subscription to the actor until either ends.
async fn pump(mut subscriber: async_nats::Subscriber, actor: ActorRef<Msg>) {
    while let Some(message) = subscriber.next().await {
        if actor.cast(Msg::Call(Box::new(message))).is_err() {
            break;
        }
    }
}

/// What one call's task needs.
struct Call {
    worker_id: Arc<str>,
    client: async_nats::Client,
    toolbox: Arc<Toolbox>,
}

impl Call {
    async fn serve(self, message: Message, _permit: OwnedSemaphorePermit) {
        let format = Format::from_content_type(
            message
                .headers
                .as_ref()
                .and_then(|headers| headers.get(CONTENT_TYPE_HEADER))
                .map(|value| value.as_str()),
        );
        let Some(reply_to) = message.reply.clone() else {
            tracing::warn!(subject = %message.subject, "tool request without a reply subject ignored");
            return;
        };
        let payload = match decode::<ToolRequest>(&message.payload, format) {
            Ok(request) => {
                let span = tracing::info_span!(
                    "tool_call",
                    tool = %request.tool,
                    call_id = %request.call_id,
                    job_id = request.job_id.as_deref().unwrap_or(""),
                    worker = %self.worker_id,
                );
                let result = self.run(request).instrument(span).await;
                encode_reply(&Reply::from_result(result), format)
            }
            Err(error) => {
                tracing::warn!(worker = %self.worker_id, %error, "undecodable tool request");
                encode_reply(&Reply::<ToolOutput>::error(error), format)
            }
        };
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE_HEADER, format.content_type());
        if let Err(error) = self
            .client
            .publish_with_headers(reply_to, headers, payload.into())
            .await
        {
            tracing::warn!(worker = %self.worker_id, %error, "could not publish a tool reply");
        }
    }

    async fn run(&self, request: ToolRequest) -> Result<ToolOutput, ErrorBody> {
        let started = Instant::now();
        let result = self.toolbox.run(&request).await;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match &result {
            Ok(_) => tracing::info!(elapsed_ms, "tool call done"),
            Err(error) => {
                tracing::info!(elapsed_ms, code = %error.code, message = %error.message, "tool call failed")
            }
        }
        Ok(ToolOutput {
            call_id: request.call_id,
            tool: request.tool,
            output: result?,
            worker: self.worker_id.to_string(),
            elapsed_ms,
        })
    }
}

/// A running worker: the ToolExecutor actor and its task.
pub struct WorkerHandle {
    worker_id: String,
    pool: Pool,
    actor: ActorRef<Msg>,
    task: JoinHandle<()>,
}

impl WorkerHandle {
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Stops taking requests, waits for calls in flight (up to a minute), then stops the actor.
    pub async fn shutdown(self) {
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
    let (actor, task) = Actor::spawn(None, ToolExecutor, ExecutorConfig { client, config }).await?;
    Ok(WorkerHandle {
        worker_id,
        pool,
        actor,
        task,
    })
}
