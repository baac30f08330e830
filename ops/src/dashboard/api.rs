//! HTTP routes: the browser UI (one page, hash routes), its JSON twin under `/api/...`, the
//! live stream (`/api/live`, server-sent events) and `/metrics`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use atelier_messages::batch::{BatchCounts, BatchState, ListBatches, TargetState};
use atelier_messages::job::{
    ApproveCall, CancelJob, GetJob, JobState, JobView, ListJobs, ResumeJob,
};
use atelier_messages::review::ReviewDraft;
use atelier_messages::store::{DiscardDraft, PublishDraft};
use atelier_messages::{PROTOCOL_VERSION, now_ms};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use futures::Stream;
use serde::{Deserialize, Serialize};

use crate::dashboard::auth::{self, api_error};
use crate::dashboard::live::{Current, JobTrace};
use crate::dashboard::plan::{ContractLine, contract_lines};
use crate::dashboard::requests::{Shared, answer, call};
use crate::dashboard::{AppState, batches, job_events, openai, workers, workshop};
use crate::metrics::{self, Registry};

const INDEX_HTML: &str = include_str!("assets/index.html");
const LOGIN_HTML: &str = include_str!("assets/login.html");
const APP_JS: &str = include_str!("assets/app.js");
const WORKBENCH_JS: &str = include_str!("assets/workbench.js");
const FILES_JS: &str = include_str!("assets/files.js");
const BATCHES_JS: &str = include_str!("assets/batches.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// Every route, behind the access guard.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/", get(|| async { Html(INDEX_HTML) }))
        .route("/login", get(|| async { Html(LOGIN_HTML) }).post(login))
        .route("/logout", post(logout))
        .route("/assets/app.js", get(|| asset(APP_JS, "text/javascript")))
        .route(
            "/assets/workbench.js",
            get(|| asset(WORKBENCH_JS, "text/javascript")),
        )
        .route(
            "/assets/files.js",
            get(|| asset(FILES_JS, "text/javascript")),
        )
        .route(
            "/assets/batches.js",
            get(|| asset(BATCHES_JS, "text/javascript")),
        )
        .route("/assets/app.css", get(|| asset(APP_CSS, "text/css")))
        .route("/api/status", get(status))
        .route("/api/jobs", get(jobs))
        .route("/api/jobs/{id}", get(job))
        .route("/api/jobs/{id}/events", get(events))
        .route("/api/jobs/{id}/cancel", post(cancel))
        .route("/api/jobs/{id}/approve", post(approve))
        .route("/api/jobs/{id}/reject", post(reject))
        .route("/api/jobs/{id}/resume", post(resume))
        .merge(super::files::routes())
        .route("/api/workbenches/{name}/diff", get(diff))
        .route("/api/workbenches/{name}/publish", post(publish))
        .route("/api/workbenches/{name}/discard", post(discard))
        .route("/api/workbenches/{name}/history", get(workshop::history))
        .route("/api/workbenches/{name}/messages", post(workshop::send))
        .route("/api/models", get(workshop::models))
        .route(
            "/api/workbenches/{name}/checkpoints",
            get(workshop::checkpoints),
        )
        .route(
            "/api/workbenches/{name}/rewind/{message}",
            post(workshop::rewind),
        )
        .route(
            "/api/workbenches/{name}/regenerate",
            post(workshop::regenerate),
        )
        .route(
            "/api/workbenches/{name}/regenerate/{message}",
            post(workshop::regenerate_from),
        )
        .route(
            "/api/workbenches/{name}/restore/{checkpoint}",
            post(workshop::restore),
        )
        .route("/api/batches", get(batches::list))
        .route("/api/batches/{id}", get(batches::batch))
        .route("/api/batches/{id}/cancel", post(batches::cancel))
        .route("/api/batches/{id}/retry", post(batches::retry))
        .route("/api/batches/{id}/publish", post(batches::publish))
        .route("/api/batches/{id}/discard", post(batches::discard))
        .route("/api/workers", get(pools))
        .route("/api/throughput", get(throughput))
        .route("/api/live", get(live))
        .route("/metrics", get(metrics_text))
        .nest_service(
            "/mcp",
            crate::mcp::http_service(state.nats.clone(), state.mcp),
        )
        .route("/v1/models", get(openai::models))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            auth::guard,
        ))
        .with_state(state)
}

async fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

// ---- access ---------------------------------------------------------------------------------

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(state): State<Shared>, Form(form): Form<LoginForm>) -> Response {
    match state.token.as_deref() {
        Some(token) if auth::same_secret(form.token.trim(), token) => (
            [(header::SET_COOKIE, auth::login_cookie(token))],
            Redirect::to("/"),
        )
            .into_response(),
        Some(_) => Redirect::to("/login#wrong").into_response(),
        None => Redirect::to("/").into_response(),
    }
}

async fn logout() -> Response {
    (
        [(header::SET_COOKIE, auth::logout_cookie())],
        Redirect::to("/login"),
    )
        .into_response()
}

// ---- status, jobs ---------------------------------------------------------------------------

#[derive(Serialize)]
struct Status {
    nats_connected: bool,
    nats_reconnects: u64,
    events_sequence: u64,
    live_clients: usize,
    auth: bool,
    version: &'static str,
    /// The largest upload `POST /api/workbenches/{name}/files` takes, in bytes.
    max_upload_bytes: u64,
}

async fn status(State(state): State<Shared>) -> Json<Status> {
    Json(Status {
        nats_connected: state.connection.connected.load(Ordering::Relaxed),
        nats_reconnects: state.connection.reconnects.load(Ordering::Relaxed),
        events_sequence: state.live.last_sequence(),
        live_clients: state.live.live_clients(),
        auth: state.token.is_some(),
        version: env!("CARGO_PKG_VERSION"),
        max_upload_bytes: super::upload::MAX_UPLOAD_BYTES,
    })
}

#[derive(Deserialize)]
struct JobsQuery {
    state: Option<String>,
    workbench: Option<String>,
    /// Part of a job id.
    q: Option<String>,
}

/// A row of the job list: the coordinator's view plus what the dashboard derives.
#[derive(Serialize)]
struct JobRow {
    #[serde(flatten)]
    job: JobView,
    items_done: usize,
    items_failed: usize,
    items_total: usize,
    age_ms: u64,
    duration_ms: u64,
    tokens: u64,
    current: Option<Current>,
}

fn row(job: JobView, current: Option<Current>, now: u64) -> JobRow {
    let end = if job.state.is_terminal() {
        job.updated_at_ms
    } else {
        now
    };
    JobRow {
        items_done: job.items_done(),
        items_failed: job.items_failed(),
        items_total: job.items.len(),
        age_ms: now.saturating_sub(job.created_at_ms),
        duration_ms: end.saturating_sub(job.created_at_ms),
        tokens: job.prompt_tokens + job.completion_tokens,
        current: current.filter(|_| !job.state.is_terminal()),
        job,
    }
}

async fn list_jobs(
    state: &AppState,
    job_state: Option<JobState>,
    workbench: Option<String>,
) -> Result<Vec<JobView>, Response> {
    // The newest page: the dashboard lists recent jobs.
    let request = ListJobs {
        v: PROTOCOL_VERSION,
        state: job_state,
        workbench,
        offset: 0,
        limit: None,
    };
    call(state, &request).await
}

async fn jobs(State(state): State<Shared>, Query(query): Query<JobsQuery>) -> Response {
    let job_state = match query.state.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(name) => match JobState::ALL.into_iter().find(|s| s.as_str() == name) {
            Some(job_state) => Some(job_state),
            None => {
                return api_error(
                    StatusCode::BAD_REQUEST,
                    "VALIDATION_FAILED",
                    &format!("unknown state `{name}`"),
                );
            }
        },
    };
    let workbench = query.workbench.filter(|w| !w.is_empty());
    let mut list = match list_jobs(&state, job_state, workbench).await {
        Ok(list) => list,
        Err(response) => return response,
    };
    if let Some(needle) = query.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
        list.retain(|job| job.job_id.contains(needle));
    }
    list.sort_by_key(|job| std::cmp::Reverse(job.created_at_ms));
    let mut current = state.live.current();
    let now = now_ms();
    let rows: Vec<JobRow> = list
        .into_iter()
        .map(|job| {
            let live = current.remove(&job.job_id);
            row(job, live, now)
        })
        .collect();
    Json(rows).into_response()
}

/// `/api/jobs/{id}`: the coordinator's view, the trace built from the events and each plan
/// item's contracts as their checklist lines.
#[derive(Serialize)]
struct JobPage {
    job: JobView,
    trace: JobTrace,
    contracts: Vec<ContractLine>,
}

async fn job(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    let request = GetJob {
        v: PROTOCOL_VERSION,
        job_id: id.clone(),
    };
    let view: JobView = match call(&state, &request).await {
        Ok(view) => view,
        Err(response) => return response,
    };
    let trace = match state.live.trace(&id) {
        Some(trace) => trace,
        None => match job_events(&state.nats, &id).await {
            Ok(events) => JobTrace::from_events(&id, &events),
            Err(error) => {
                tracing::debug!(error = %format!("{error:#}"), "no events for the job page");
                JobTrace::new(&id)
            }
        },
    };
    let contracts = contract_lines(&view);
    Json(JobPage {
        job: view,
        trace,
        contracts,
    })
    .into_response()
}

async fn events(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    match job_events(&state.nats, &id).await {
        Ok(events) => Json(events).into_response(),
        Err(error) => api_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "INTERNAL",
            &format!("{error:#}"),
        ),
    }
}

// ---- actions --------------------------------------------------------------------------------

async fn cancel(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    let request = CancelJob {
        v: PROTOCOL_VERSION,
        job_id: id,
    };
    answer(call(&state, &request).await)
}

#[derive(Deserialize, Default)]
struct Reason {
    #[serde(default)]
    reason: Option<String>,
    /// The call the page showed; a decision for a call no longer pending is refused.
    #[serde(default)]
    call_id: Option<String>,
}

async fn approve(
    State(state): State<Shared>,
    Path(id): Path<String>,
    body: Option<Json<Reason>>,
) -> Response {
    decide(&state, id, false, body).await
}

async fn reject(
    State(state): State<Shared>,
    Path(id): Path<String>,
    body: Option<Json<Reason>>,
) -> Response {
    decide(&state, id, true, body).await
}

async fn decide(
    state: &AppState,
    id: String,
    reject: bool,
    body: Option<Json<Reason>>,
) -> Response {
    let (reason, call_id) = body
        .map(|Json(body)| (body.reason, body.call_id))
        .unwrap_or_default();
    let request = ApproveCall {
        v: PROTOCOL_VERSION,
        job_id: id,
        reject,
        reason,
        call_id,
    };
    answer(call(state, &request).await)
}

async fn resume(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    let request = ResumeJob {
        v: PROTOCOL_VERSION,
        job_id: id,
        budget: atelier_messages::budget::Budget::default(),
    };
    answer(call(&state, &request).await)
}

// ---- workbenches ----------------------------------------------------------------------------

async fn diff(State(state): State<Shared>, Path(name): Path<String>) -> Response {
    match call(
        &state,
        &ReviewDraft {
            v: PROTOCOL_VERSION,
            workbench: name,
            sample: None,
        },
    )
    .await
    {
        Ok(diff) => Json(diff).into_response(),
        Err(response) => response,
    }
}

async fn publish(State(state): State<Shared>, Path(name): Path<String>) -> Response {
    answer(
        call(
            &state,
            &PublishDraft {
                v: PROTOCOL_VERSION,
                workbench: name,
            },
        )
        .await,
    )
}

async fn discard(State(state): State<Shared>, Path(name): Path<String>) -> Response {
    answer(
        call(
            &state,
            &DiscardDraft {
                v: PROTOCOL_VERSION,
                workbench: name,
            },
        )
        .await,
    )
}

// ---- workers, throughput, live --------------------------------------------------------------

async fn pools(State(state): State<Shared>) -> Response {
    Json(workers::pools(&state.nats).await).into_response()
}

async fn throughput(State(state): State<Shared>) -> Response {
    Json(state.live.throughput(now_ms())).into_response()
}

/// Server-sent events: `hello` once, then `job` with every job event as JSON.
async fn live(State(state): State<Shared>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let receiver = state.live.subscribe();
    let hello = Event::default()
        .event("hello")
        .data(state.live.last_sequence().to_string());
    let updates = futures::stream::unfold(receiver, |mut receiver| async move {
        use tokio::sync::broadcast::error::RecvError;
        let event = match receiver.recv().await {
            Ok(json) => Event::default().event("job").data(&*json),
            Err(RecvError::Lagged(_)) => Event::default().event("lagged").data("{}"),
            Err(RecvError::Closed) => return None,
        };
        Some((Ok(event), receiver))
    });
    let stream = futures::StreamExt::chain(futures::stream::once(async { Ok(hello) }), updates);
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
}

// ---- metrics --------------------------------------------------------------------------------

async fn metrics_text(State(state): State<Shared>) -> Response {
    let mut registry = state.live.metrics();
    registry.merge(scrape_time_metrics(&state).await);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        registry.render(),
    )
        .into_response()
}

/// Batches by state and their targets by state (nothing when no coordinator answers).
async fn add_batch_metrics(state: &AppState, registry: &mut Registry) {
    let request = ListBatches {
        v: PROTOCOL_VERSION,
    };
    let Ok(batches) = call(state, &request).await else {
        return;
    };
    let mut by_state: BTreeMap<&str, u64> = BatchState::ALL
        .iter()
        .map(|batch_state| (batch_state.as_str(), 0))
        .collect();
    let mut targets = BatchCounts::default();
    for batch in &batches {
        *by_state.entry(batch.state.as_str()).or_default() += 1;
        targets.add(&batch.counts);
    }
    for (name, count) in by_state {
        registry.set(metrics::BATCHES, vec![("state", name.into())], count as f64);
    }
    for target_state in TargetState::ALL {
        let count = targets.of(target_state);
        registry.set(
            metrics::BATCH_TARGETS,
            vec![("state", target_state.as_str().into())],
            count as f64,
        );
    }
}

/// A pool's demand and its autoscaler's decisions.
fn pool_demand_metrics(registry: &mut Registry, pool: &workers::PoolView, labels: metrics::Labels) {
    let gauges = [
        (metrics::POOL_WORKERS, pool.instances.len() as u64),
        (metrics::POOL_BUSY_SLOTS, pool.in_flight),
        (metrics::POOL_SLOTS, pool.slots),
        (metrics::POOL_PENDING_CALLS, pool.pending_calls),
    ];
    for (name, value) in gauges {
        registry.set(name, labels.clone(), value as f64);
    }
    registry.set_histogram(
        metrics::POOL_DISPATCH_WAIT,
        labels.clone(),
        metrics::Histogram::from_waits(&pool.dispatch_wait),
    );
    if let Some(autoscale) = &pool.autoscale {
        for (direction, count) in [("up", autoscale.scale_ups), ("down", autoscale.scale_downs)] {
            let mut labels = labels.clone();
            labels.push(("direction", direction.into()));
            registry.set(metrics::POOL_SCALE_DECISIONS, labels, count as f64);
        }
    }
}

/// Gauges read at scrape time: jobs by state and tokens (coordinator), workers (`$SRV`), NATS.
async fn scrape_time_metrics(state: &AppState) -> Registry {
    let mut registry = Registry::default();
    let (jobs, pools) = tokio::join!(list_jobs(state, None, None), workers::pools(&state.nats));
    if let Ok(jobs) = jobs {
        let mut by_state: BTreeMap<&str, u64> =
            JobState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        for job in &jobs {
            *by_state.entry(job.state.as_str()).or_default() += 1;
            for (kind, tokens) in [
                ("prompt", job.prompt_tokens),
                ("completion", job.completion_tokens),
            ] {
                registry.add(
                    metrics::MODEL_TOKENS,
                    vec![("model", job.model.clone()), ("kind", kind.into())],
                    tokens as f64,
                );
            }
            if let Some(cost) = job.cost_usd {
                registry.add(
                    metrics::MODEL_COST,
                    vec![("model", job.model.clone())],
                    cost.dollars(),
                );
            }
        }
        for (name, count) in by_state {
            registry.set(metrics::JOBS, vec![("state", name.into())], count as f64);
        }
    }
    for pool in pools {
        let labels = vec![("pool", pool.pool.clone())];
        registry.set(
            metrics::WORKERS,
            labels.clone(),
            pool.instances.len() as f64,
        );
        registry.set(
            metrics::WORKER_IN_FLIGHT,
            labels.clone(),
            pool.in_flight as f64,
        );
        pool_demand_metrics(&mut registry, &pool, labels);
    }
    add_batch_metrics(state, &mut registry).await;
    let connection = &state.connection;
    registry.set(
        metrics::NATS_RECONNECTS,
        Vec::new(),
        connection.reconnects.load(Ordering::Relaxed) as f64,
    );
    registry.set(
        metrics::NATS_CONNECTED,
        Vec::new(),
        f64::from(u8::from(connection.connected.load(Ordering::Relaxed))),
    );
    registry.set(
        metrics::LIVE_CLIENTS,
        Vec::new(),
        state.live.live_clients() as f64,
    );
    registry
}
