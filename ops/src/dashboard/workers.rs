//! Worker pools as the NATS micro services API tells them: each worker process registers its
//! pool as the service `atelier-<pool>`; `$SRV.INFO.<name>` and `$SRV.STATS.<name>` are asked
//! once and every instance's answer gathered for a short window. A pool's demand — busy and
//! total slots, calls waiting for a slot, dispatch waits — is the sum over its instances; an
//! autoscaler (`atelier-autoscaler`) adds its bounds and decisions.

use std::collections::BTreeMap;
use std::time::Duration;

use atelier_messages::tool::Pool;
use atelier_messages::worker::{
    AUTOSCALER_SERVICE, AutoscalePool, AutoscaleStats, WaitHistogram, WorkerStatsData, service_name,
};
use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;

/// How long answers are gathered.
const GATHER_WINDOW: Duration = Duration::from_millis(400);

/// One worker process.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Instance {
    /// The service instance id (`nats micro info` shows it).
    pub id: String,
    pub worker: String,
    pub version: String,
    pub started: String,
    pub subject: String,
    pub queue_group: String,
    pub requests: u64,
    /// Service-level errors plus tool errors answered in the reply envelope.
    pub errors: u64,
    pub average_latency_ms: f64,
    pub in_flight: u64,
    pub max_concurrency: u64,
    /// Calls received and waiting for a slot.
    pub pending: u64,
    /// Retiring: takes no new calls.
    pub draining: bool,
    pub last_error: Option<String>,
    /// The worker process's async threads (0: a worker too old to say).
    pub async_threads: u64,
    #[serde(skip)]
    pub dispatch_wait: WaitHistogram,
}

/// A pool and its instances.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PoolView {
    pub pool: String,
    pub service: String,
    pub instances: Vec<Instance>,
    pub requests: u64,
    pub errors: u64,
    pub in_flight: u64,
    /// Request-weighted over the instances.
    pub average_latency_ms: f64,
    /// Tool slots (sum of the instances' concurrency).
    pub slots: u64,
    /// Calls waiting for a free slot on some instance.
    pub pending_calls: u64,
    /// Dispatch-to-start waits of every instance.
    pub dispatch_wait: WaitHistogram,
    /// The autoscaler supervising this pool, if one answers.
    pub autoscale: Option<AutoscalePool>,
}

/// Every pool (with no instances when none answers).
pub async fn pools(nats: &async_nats::Client) -> Vec<PoolView> {
    let views = futures::future::join_all(Pool::ALL.map(|pool| pool_view(nats, pool)));
    let (mut views, autoscalers) = tokio::join!(views, autoscalers(nats));
    for view in &mut views {
        view.autoscale = autoscalers
            .iter()
            .find(|scaled| scaled.pool == view.pool)
            .cloned();
    }
    views
}

/// The pools every answering autoscaler supervises.
async fn autoscalers(nats: &async_nats::Client) -> Vec<AutoscalePool> {
    let answers = gather(nats, format!("$SRV.STATS.{AUTOSCALER_SERVICE}")).await;
    answers
        .iter()
        .filter_map(|stats| {
            serde_json::from_value::<AutoscaleStats>(stats["endpoints"][0]["data"].clone()).ok()
        })
        .flat_map(|stats| stats.pools)
        .collect()
}

/// One pool's view (the autoscaler left out).
pub async fn pool(nats: &async_nats::Client, pool: Pool) -> PoolView {
    pool_view(nats, pool).await
}

async fn pool_view(nats: &async_nats::Client, pool: Pool) -> PoolView {
    let name = service_name(pool);
    let (infos, stats) = tokio::join!(
        gather(nats, format!("$SRV.INFO.{name}")),
        gather(nats, format!("$SRV.STATS.{name}")),
    );
    let mut instances: BTreeMap<String, Instance> = BTreeMap::new();
    for info in infos {
        let id = text(&info["id"]);
        let instance = instances.entry(id.clone()).or_default();
        instance.id = id;
        instance.version = text(&info["version"]);
        instance.worker = text(&info["metadata"]["worker"]);
    }
    for stats in stats {
        let id = text(&stats["id"]);
        let instance = instances.entry(id.clone()).or_default();
        instance.id = id;
        instance.started = text(&stats["started"]);
        apply_endpoint_stats(instance, &stats["endpoints"][0]);
    }
    summarize(pool, name, instances.into_values().collect())
}

fn apply_endpoint_stats(instance: &mut Instance, endpoint: &Value) {
    let data: WorkerStatsData =
        serde_json::from_value(endpoint["data"].clone()).unwrap_or_default();
    instance.subject = text(&endpoint["subject"]);
    instance.queue_group = text(&endpoint["queue_group"]);
    instance.requests = endpoint["num_requests"].as_u64().unwrap_or(0);
    instance.errors = endpoint["num_errors"].as_u64().unwrap_or(0) + data.tool_errors;
    instance.average_latency_ms =
        endpoint["average_processing_time"].as_f64().unwrap_or(0.0) / 1_000_000.0;
    instance.in_flight = data.in_flight;
    instance.max_concurrency = data.max_concurrency;
    instance.pending = data.pending;
    instance.draining = data.draining;
    instance.dispatch_wait = data.dispatch_wait.clone();
    instance.async_threads = data.async_threads;
    instance.last_error = data
        .last_error_code
        .or_else(|| Some(text(&endpoint["last_error"])).filter(|e| !e.is_empty()));
    if instance.worker.is_empty() {
        instance.worker = data.worker;
    }
}

fn summarize(pool: Pool, service: String, instances: Vec<Instance>) -> PoolView {
    let requests: u64 = instances.iter().map(|i| i.requests).sum();
    let weighted: f64 = instances
        .iter()
        .map(|i| i.average_latency_ms * i.requests as f64)
        .sum();
    let mut dispatch_wait = WaitHistogram::default();
    for instance in &instances {
        dispatch_wait.merge(&instance.dispatch_wait);
    }
    PoolView {
        pool: pool.to_string(),
        service,
        requests,
        errors: instances.iter().map(|i| i.errors).sum(),
        in_flight: instances.iter().map(|i| i.in_flight).sum(),
        slots: instances.iter().map(|i| i.max_concurrency).sum(),
        pending_calls: instances.iter().map(|i| i.pending).sum(),
        dispatch_wait,
        autoscale: None,
        average_latency_ms: if requests == 0 {
            0.0
        } else {
            weighted / requests as f64
        },
        instances,
    }
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

/// Publishes an empty request to `subject` and collects every JSON answer within the window.
async fn gather(nats: &async_nats::Client, subject: String) -> Vec<Value> {
    let inbox = nats.new_inbox();
    let Ok(mut answers) = nats.subscribe(inbox.clone()).await else {
        return Vec::new();
    };
    if nats
        .publish_with_reply(subject, inbox, bytes::Bytes::new())
        .await
        .is_err()
    {
        return Vec::new();
    }
    let mut values = Vec::new();
    let deadline = tokio::time::Instant::now() + GATHER_WINDOW;
    while let Ok(Some(message)) = tokio::time::timeout_at(deadline, answers.next()).await {
        if let Ok(value) = serde_json::from_slice::<Value>(&message.payload) {
            values.push(value);
        }
    }
    values
}
