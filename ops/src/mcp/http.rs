//! `/mcp` over streamable HTTP: rmcp's service (one [`AtelierMcp`] per session, kept in rmcp's
//! in-memory session manager) behind a front that bounds what clients may hold and answers bad
//! requests with the status RFC 9110 gives them:
//!
//! - at most [`SessionLimits::max_sessions`] sessions at once: an `initialize` beyond is refused
//!   with `503`, `Retry-After` and a JSON-RPC error whose `data.code` is `TOO_MANY_SESSIONS`
//!   (a client frees its slot with `DELETE /mcp`, an idle one is closed after
//!   [`SessionLimits::idle`] and leaves the map);
//! - at most [`MAX_CALLS_PER_SESSION`] requests of one session running at once: more are refused
//!   with `429` and `data.code` `TOO_MANY_REQUESTS`; an answer already sent is kept
//!   [`RESUME_CACHE`] for a client that reconnects to resume it, then dropped;
//! - a body over [`MAX_BODY_BYTES`] is `413`, a body that is not JSON `400` with the JSON-RPC
//!   parse error (-32700), JSON that is no JSON-RPC message `400` with invalid request (-32600).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any};
use futures::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ErrorCode as RpcCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use super::AtelierMcp;

/// Sessions one dashboard holds at once by default (`mcp_max_sessions`).
pub const DEFAULT_MAX_SESSIONS: usize = 1000;
/// How long a session may stay idle by default before it is closed (`mcp_session_idle_secs`).
pub const DEFAULT_SESSION_IDLE_SECS: u64 = 300;
/// Requests one session may have running at once.
pub const MAX_CALLS_PER_SESSION: usize = 32;
/// The largest request body (rmcp's own limit).
pub const MAX_BODY_BYTES: usize = 4 << 20;
/// How long an answer already sent stays for a client that reconnects to resume its stream.
pub const RESUME_CACHE: Duration = Duration::from_secs(10);
/// What `Retry-After` says to a client refused for want of room (seconds).
const RETRY_AFTER_SECS: u64 = 5;
/// The JSON-RPC code of a refusal for want of room (implementation-defined server error).
const OVERLOADED: i32 = -32000;
/// The session header (`Mcp-Session-Id`).
const SESSION_HEADER: &str = "mcp-session-id";

/// How many MCP sessions a dashboard holds, and for how long an idle one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions open at once; an `initialize` beyond is refused (`503`).
    pub max_sessions: usize,
    /// A session through which nothing passed for this long is closed and forgotten.
    pub idle: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_sessions: DEFAULT_MAX_SESSIONS,
            idle: Duration::from_secs(DEFAULT_SESSION_IDLE_SECS),
        }
    }
}

/// The MCP server for the dashboard's `/mcp`, behind its limits.
pub fn http_service(nats: async_nats::Client, limits: SessionLimits) -> MethodRouter {
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(limits.idle);
    manager.session_config.completed_cache_ttl = RESUME_CACHE;
    let sessions = Arc::new(manager);
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_max_request_body_bytes(MAX_BODY_BYTES);
    let service = StreamableHttpService::new(
        move || Ok(AtelierMcp::new(nats.clone(), None)),
        Arc::clone(&sessions),
        config,
    );
    let front = Arc::new(Front {
        service,
        sessions,
        limits,
        admitting: AtomicUsize::new(0),
        gate: tokio::sync::Mutex::new(()),
        running: Running::new(MAX_CALLS_PER_SESSION),
    });
    any(handle).with_state(front)
}

/// rmcp's service and what the front counts.
struct Front {
    service: StreamableHttpService<AtelierMcp, LocalSessionManager>,
    /// The sessions rmcp holds (the same manager as the service's).
    sessions: Arc<LocalSessionManager>,
    limits: SessionLimits,
    /// `initialize` requests let in whose session may not be in the map yet.
    admitting: AtomicUsize,
    /// One admission decided at a time, so two cannot both take the last slot.
    gate: tokio::sync::Mutex<()>,
    /// Requests running per session.
    running: Arc<Running>,
}

/// A slot for a session being created, given back once its `initialize` is answered.
struct Admission(Arc<Front>);

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.admitting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The requests running in each session (a session with none has no entry).
struct Running {
    max: usize,
    per_session: Mutex<HashMap<String, usize>>,
}

impl Running {
    fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            per_session: Mutex::new(HashMap::new()),
        })
    }

    /// One more running request for `session`, if it has room.
    fn enter(self: &Arc<Self>, session: &str) -> Option<Call> {
        let mut per_session = self
            .per_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let running = per_session.entry(session.to_string()).or_insert(0);
        if *running >= self.max {
            return None;
        }
        *running += 1;
        Some(Call {
            running: Arc::clone(self),
            session: session.to_string(),
        })
    }

    #[cfg(test)]
    fn count(&self, session: &str) -> usize {
        let per_session = self
            .per_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        per_session.get(session).copied().unwrap_or(0)
    }
}

/// A running request of a session, ended when its answer's stream is dropped.
struct Call {
    running: Arc<Running>,
    session: String,
}

impl Drop for Call {
    fn drop(&mut self) {
        let mut per_session = self
            .running
            .per_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = per_session.get_mut(&self.session) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                per_session.remove(&self.session);
            }
        }
    }
}

impl Front {
    /// The sessions rmcp holds now.
    async fn live(&self) -> usize {
        self.sessions.sessions.read().await.len()
    }

    /// A slot for one more session, if there is room.
    async fn admit(self: &Arc<Self>) -> Option<Admission> {
        let _one_at_a_time = self.gate.lock().await;
        let taken = self.live().await + self.admitting.load(Ordering::SeqCst);
        if taken >= self.limits.max_sessions {
            return None;
        }
        self.admitting.fetch_add(1, Ordering::SeqCst);
        Some(Admission(Arc::clone(self)))
    }

    async fn forward(&self, request: Request) -> Response {
        self.service.handle(request).await.map(Body::new)
    }
}

async fn handle(State(front): State<Arc<Front>>, request: Request) -> Response {
    if request.method() != Method::POST || !json_content(request.headers()) {
        // GET (the stream), DELETE (closing), and a POST rmcp answers 406/415 itself.
        return front.forward(request).await;
    }
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES) {
        return too_large();
    }
    let bytes = match read_body(body).await {
        Ok(bytes) => bytes,
        Err(response) => return response,
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(message) => message,
        Err(error) => {
            let message = format!("Parse error: the body is not JSON ({error})");
            return rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                RpcCode::PARSE_ERROR.0,
                &message,
                None,
            );
        }
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    if let Err(error) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        let message = format!("Invalid Request: not a JSON-RPC 2.0 message of MCP ({error})");
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            RpcCode::INVALID_REQUEST.0,
            &message,
            None,
        );
    }
    let session = parts
        .headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    let is_request = message.get("method").is_some() && message.get("id").is_some();
    let mut admission = None;
    let mut call = None;
    match session {
        None if message.get("method") == Some(&json!("initialize")) => match front.admit().await {
            Some(admitted) => admission = Some(admitted),
            None => return too_many_sessions(id, front.limits.max_sessions),
        },
        Some(session) if is_request => match front.running.enter(&session) {
            Some(entered) => call = Some(entered),
            None => return too_many_calls(id),
        },
        _ => {}
    }
    let response = front
        .forward(Request::from_parts(parts, Body::from(bytes)))
        .await;
    // The session, if one was made, is in the map now: its slot counts there.
    drop(admission);
    match call {
        None => response,
        Some(call) => response.map(|body| {
            Body::from_stream(Guarded {
                inner: body.into_data_stream(),
                _call: call,
            })
        }),
    }
}

/// Whether the request says its body is JSON.
fn json_content(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The whole body, at most [`MAX_BODY_BYTES`].
async fn read_body(body: Body) -> Result<Bytes, Response> {
    let mut stream = body.into_data_stream();
    let mut collected = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| {
            let message = format!("the request body could not be read: {error}");
            rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                RpcCode::INVALID_REQUEST.0,
                &message,
                None,
            )
        })?;
        if collected.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(too_large());
        }
        collected.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(collected))
}

/// An answer's stream that holds its request's place until it is dropped.
struct Guarded<S> {
    inner: S,
    _call: Call,
}

impl<S: Stream + Unpin> Stream for Guarded<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        Pin::new(&mut self.inner).poll_next(cx)
    }
}

/// A JSON-RPC error answer with an HTTP status; `atelier_code` goes in `data.code`.
fn rpc_error(
    status: StatusCode,
    id: Value,
    code: i32,
    message: &str,
    atelier_code: Option<(&str, Value)>,
) -> Response {
    let mut error = json!({"code": code, "message": message});
    if let Some((atelier_code, mut data)) = atelier_code {
        data["code"] = json!(atelier_code);
        error["data"] = data;
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
    (status, axum::Json(body)).into_response()
}

fn too_large() -> Response {
    let message = format!("Invalid Request: the body is over {MAX_BODY_BYTES} bytes");
    rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        Value::Null,
        RpcCode::INVALID_REQUEST.0,
        &message,
        None,
    )
}

fn retry_later(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    response
}

fn too_many_sessions(id: Value, max_sessions: usize) -> Response {
    let message = format!(
        "TOO_MANY_SESSIONS: this server holds its most MCP sessions at once ({max_sessions}); \
         retry later, or close a session you no longer use (DELETE /mcp with its Mcp-Session-Id)"
    );
    let data = json!({"max_sessions": max_sessions});
    retry_later(rpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        OVERLOADED,
        &message,
        Some(("TOO_MANY_SESSIONS", data)),
    ))
}

fn too_many_calls(id: Value) -> Response {
    let message = format!(
        "TOO_MANY_REQUESTS: this session has {MAX_CALLS_PER_SESSION} requests running; wait for \
         one to end"
    );
    let data = json!({"max_requests": MAX_CALLS_PER_SESSION});
    retry_later(rpc_error(
        StatusCode::TOO_MANY_REQUESTS,
        id,
        OVERLOADED,
        &message,
        Some(("TOO_MANY_REQUESTS", data)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_runs_at_most_its_share_of_requests_and_a_finished_one_frees_its_place() {
        let running = Running::new(2);
        let first = running.enter("s1");
        let second = running.enter("s1");
        assert!(first.is_some() && second.is_some());
        assert!(running.enter("s1").is_none(), "a third is refused");
        assert!(
            running.enter("s2").is_some(),
            "another session has its own share"
        );
        drop(first);
        assert_eq!(running.count("s1"), 1);
        let third = running.enter("s1");
        assert!(third.is_some());
        drop((second, third));
        assert_eq!(running.count("s1"), 0);
        let per_session = running
            .per_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        assert!(per_session.is_empty(), "no entry is left behind");
    }

    #[test]
    fn refusals_are_json_rpc_errors_with_their_status() {
        let response = too_many_sessions(json!(7), 3);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.headers().get(header::RETRY_AFTER),
            Some(&HeaderValue::from(RETRY_AFTER_SECS))
        );
        assert_eq!(
            too_many_calls(json!(1)).status(),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(too_large().status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
}
