//! A local HTTP server speaking OpenAI Chat Completions (streaming SSE, native tool calls)
//! with scripted replies, keyed by phase, plan item and turn so that a resumed job gets the
//! same answer for the same step (an item's retry, told the previous failure, takes the turns of
//! `"N@retry"` when the script has them). Every request is logged for assertions.
//!
//! A provider's rate limit can be set ([`ScriptedModel::limit_rate`]): requests over it are
//! answered 429 with `Retry-After`, and the server counts them and the most requests it had in
//! flight at once.
//!
//! A scripted call argument equal to [`RECEIPT_CALL_ID`] is replaced by the call id of the last
//! receipt the request showed the model (call ids hold the job id, which a script cannot know).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

mod quota;

/// Stands, in a scripted call's arguments, for the call id of the last receipt shown.
pub const RECEIPT_CALL_ID: &str = "$receipt_call_id";

/// One scripted model turn.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Turn {
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Delay before answering, to leave room for a crash.
    #[serde(default)]
    pub delay_ms: u64,
    /// Delay before each streamed chunk (a word of the content, half a call), so that a client
    /// sees the answer grow.
    #[serde(default)]
    pub chunk_delay_ms: u64,
    /// The usage the answer reports (default: 100 prompt and 20 completion tokens).
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// Tokens an answer reports having used.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ScriptedCall {
    pub name: String,
    pub arguments: Value,
}

/// The whole script.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Script {
    #[serde(default)]
    pub research: Vec<Turn>,
    #[serde(default)]
    pub plan: Vec<Turn>,
    #[serde(default)]
    pub implement: BTreeMap<String, Vec<Turn>>,
    #[serde(default)]
    pub summary: Vec<Turn>,
    /// Answers to requests that summarize older conversation (`summarize_history`).
    #[serde(default)]
    pub compress: Vec<Turn>,
}

/// One logged request.
#[derive(Debug, Clone)]
pub struct LoggedRequest {
    pub phase: String,
    pub item: Option<u32>,
    pub turn: usize,
    pub body: Value,
    /// The `Authorization` header it carried, if any.
    pub authorization: Option<String>,
    /// When the request arrived.
    pub at: std::time::Instant,
}

#[derive(Clone)]
struct Shared {
    script: Arc<Script>,
    log: Arc<Mutex<Vec<LoggedRequest>>>,
    /// While set, every request is answered with this HTTP status (an outage).
    outage: Arc<Mutex<Option<u16>>>,
    quota: quota::Shared,
}

/// A running scripted server.
pub struct ScriptedModel {
    pub base_url: String,
    log: Arc<Mutex<Vec<LoggedRequest>>>,
    outage: Arc<Mutex<Option<u16>>>,
    quota: quota::Shared,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedModel {
    /// Starts the server on a free local port.
    pub async fn start(script: Script) -> anyhow::Result<Self> {
        let log = Arc::new(Mutex::new(Vec::new()));
        let outage = Arc::new(Mutex::new(None));
        let quota = quota::Shared::default();
        let shared = Shared {
            script: Arc::new(script),
            log: Arc::clone(&log),
            outage: Arc::clone(&outage),
            quota: Arc::clone(&quota),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base_url = format!("http://{}/v1", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            base_url,
            log,
            outage,
            quota,
            task,
        })
    }

    /// Accepts at most `requests` in any `window`, as a provider's rate limit does; the others
    /// are answered 429 with `Retry-After: retry_after_secs`.
    pub fn limit_rate(&self, requests: usize, window: Duration, retry_after_secs: u64) {
        quota::limit(&self.quota, requests, window, retry_after_secs);
    }

    /// How many requests the rate limit refused (429).
    pub fn refused(&self) -> usize {
        quota::refused(&self.quota)
    }

    /// The most requests the server had in flight at once.
    pub fn most_in_flight(&self) -> usize {
        quota::most_in_flight(&self.quota)
    }

    /// Answers every request with `status` until [`ScriptedModel::recover`].
    pub fn fail_with(&self, status: u16) {
        if let Ok(mut outage) = self.outage.lock() {
            *outage = Some(status);
        }
    }

    pub fn recover(&self) {
        if let Ok(mut outage) = self.outage.lock() {
            *outage = None;
        }
    }

    /// The model spec that points a job at this server.
    pub fn model_spec(&self) -> String {
        format!("openai-compat:{}#scripted-model", self.base_url)
    }

    /// A `[models.NAME]` profile (openai-compat) for this server, with `extra` TOML lines.
    pub fn profile_toml(&self, name: &str, extra: &str) -> String {
        format!(
            "[models.{name}]\nkind = \"openai-compat\"\nbase_url = \"{}\"\n\
             model = \"scripted-model\"\n{extra}\n",
            self.base_url
        )
    }

    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.log.lock().map(|log| log.clone()).unwrap_or_default()
    }

    /// The tool results (message contents, in order) the model was shown in its first request
    /// for (phase, item, turn).
    pub fn tool_results(&self, phase: &str, item: Option<u32>, turn: usize) -> Vec<String> {
        let Some(request) = self
            .requests()
            .into_iter()
            .find(|r| r.phase == phase && r.item == item && r.turn == turn)
        else {
            return Vec::new();
        };
        request.body["messages"]
            .as_array()
            .map(|messages| {
                messages
                    .iter()
                    .filter(|m| m["role"] == "tool")
                    .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many requests asked for (phase, item, turn).
    pub fn count(&self, phase: &str, item: Option<u32>, turn: usize) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.phase == phase && r.item == item && r.turn == turn)
            .count()
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads (phase, item) from the system prompt the RPI driver writes.
fn phase_of(body: &Value) -> (String, Option<u32>) {
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    // The heading of the request that summarizes older conversation (agents' `compress`).
    if system.starts_with("## Conversation summary") {
        return ("compress".into(), None);
    }
    if system.contains("Research phase") {
        return ("research".into(), None);
    }
    if system.contains("Plan phase") {
        return ("plan".into(), None);
    }
    if let Some(rest) = system.split("working on plan item ").nth(1) {
        let item = rest.split_whitespace().next().and_then(|n| n.parse().ok());
        return ("implement".into(), item);
    }
    ("summary".into(), None)
}

async fn complete(
    State(shared): State<Shared>,
    headers: axum::http::HeaderMap,
    body: axum::Json<Value>,
) -> axum::response::Response {
    let body = body.0;
    let (phase, item) = phase_of(&body);
    let turn = body["messages"]
        .as_array()
        .map(|messages| messages.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0);
    if let Ok(mut log) = shared.log.lock() {
        log.push(LoggedRequest {
            phase: phase.clone(),
            item,
            turn,
            body: body.clone(),
            authorization: headers
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .map(str::to_string),
            at: std::time::Instant::now(),
        });
    }
    let outage = shared.outage.lock().ok().and_then(|outage| *outage);
    if let Some(status) = outage {
        let status = axum::http::StatusCode::from_u16(status)
            .unwrap_or(axum::http::StatusCode::SERVICE_UNAVAILABLE);
        let body = json!({"error": {"message": "scripted outage"}});
        return (status, axum::Json(body)).into_response();
    }
    let _in_flight = match quota::admit(&shared.quota) {
        Ok(in_flight) => in_flight,
        Err(retry_after) => {
            let body = json!({"error": {"message": "Rate limit reached for requests", "type": "requests"}});
            return (
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, retry_after.to_string())],
                axum::Json(body),
            )
                .into_response();
        }
    };
    let turns = match phase.as_str() {
        "research" => shared.script.research.clone(),
        "plan" => shared.script.plan.clone(),
        "implement" => implement_turns(&shared.script, item.unwrap_or(0), &body),
        "compress" => shared.script.compress.clone(),
        _ => shared.script.summary.clone(),
    };
    let answer = turns.get(turn).cloned().unwrap_or_else(|| Turn {
        content: "Done.".into(),
        ..Turn::default()
    });
    let answer = with_receipt_call_id(answer, &body);
    if answer.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(answer.delay_ms)).await;
    }
    let events = sse_events(&answer, &format!("{phase}-{}-{turn}", item.unwrap_or(0)));
    let body = if answer.chunk_delay_ms == 0 {
        axum::body::Body::from(events.concat())
    } else {
        let delay = Duration::from_millis(answer.chunk_delay_ms);
        axum::body::Body::from_stream(futures::stream::iter(events).then(move |event| async move {
            tokio::time::sleep(delay).await;
            Ok::<_, std::convert::Infallible>(event)
        }))
    };
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

/// An item's turns: those of `"N@retry"` for an attempt after a failed one (its system prompt
/// tells the previous failure) when the script has them, else those of `"N"`.
fn implement_turns(script: &Script, item: u32, body: &Value) -> Vec<Turn> {
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    let retry = system.contains("The previous attempt failed");
    let retry_turns = retry
        .then(|| script.implement.get(&format!("{item}@retry")))
        .flatten();
    retry_turns
        .or_else(|| script.implement.get(&item.to_string()))
        .cloned()
        .unwrap_or_default()
}

/// The call id of the last receipt among the request's tool results.
fn last_receipt_call_id(body: &Value) -> Option<String> {
    body["messages"]
        .as_array()?
        .iter()
        .rev()
        .filter(|message| message["role"] == "tool")
        .filter_map(|message| serde_json::from_str::<Value>(message["content"].as_str()?).ok())
        .find_map(|result| result["receipt"]["call_id"].as_str().map(str::to_string))
}

/// `turn` with every [`RECEIPT_CALL_ID`] argument replaced by the last receipt's call id.
fn with_receipt_call_id(mut turn: Turn, body: &Value) -> Turn {
    let Some(call_id) = last_receipt_call_id(body) else {
        return turn;
    };
    let arguments = turn
        .tool_calls
        .iter_mut()
        .filter_map(|call| call.arguments.as_object_mut());
    for value in arguments.flat_map(|object| object.values_mut()) {
        if value == RECEIPT_CALL_ID {
            *value = Value::String(call_id.clone());
        }
    }
    turn
}

/// The turn as Chat Completions stream events (`data: …` blocks), `[DONE]` last.
fn sse_events(turn: &Turn, id: &str) -> Vec<String> {
    let mut events = Vec::new();
    for word in turn.content.split_inclusive(' ') {
        events.push(json!({"choices": [{"index": 0, "delta": {"content": word}}]}));
    }
    for (index, call) in turn.tool_calls.iter().enumerate() {
        let arguments = call.arguments.to_string();
        let (head, tail) = arguments.split_at(arguments.len() / 2);
        events.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": index, "id": format!("call-{id}-{index}"), "type": "function",
            "function": {"name": call.name, "arguments": head}}]}}]}));
        events.push(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
            "index": index, "function": {"arguments": tail}}]}}]}));
    }
    let finish = if turn.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    events.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}));
    let usage = turn.usage.unwrap_or(Usage {
        prompt_tokens: 100,
        completion_tokens: 20,
    });
    events.push(json!({"choices": [], "usage": {
        "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}}));
    let mut out: Vec<String> = events
        .into_iter()
        .map(|event| format!("data: {event}\n\n"))
        .collect();
    out.push("data: [DONE]\n\n".to_string());
    out
}

/// The aggregate the launch-plan job exports.
pub const LAUNCH_PLAN_QUERY: &str =
    "SELECT Department, COUNT(*) AS milestones FROM data GROUP BY Department ORDER BY Department";

/// A job over `launch_plan.csv`: research maps it, the plan has one item that exports
/// [`LAUNCH_PLAN_QUERY`] to `summary.xlsx` (sheet `Summary`); the plan turn answers after
/// `plan_delay_ms`.
pub fn launch_plan_export_script(plan_delay_ms: u64) -> Script {
    serde_json::from_value(json!({
        "research": [
            {"content": "Mapping the table.", "tool_calls": [{"name": "table_get_map", "arguments": {"path": "launch_plan.csv"}}]},
            {"content": "The launch plan has milestones by department."}
        ],
        "plan": [
            {"content": "- [ ] 1. Aggregate — export milestone counts by department to summary.xlsx", "delay_ms": plan_delay_ms}
        ],
        "implement": {
            "1": [
                {"tool_calls": [{"name": "table_export", "arguments": {
                    "path": "launch_plan.csv", "query": LAUNCH_PLAN_QUERY, "target_path": "summary.xlsx", "format": "xlsx", "sheet": "Summary"}}]},
                {"content": "Exported summary.xlsx."}
            ]
        },
        "summary": [{"content": "summary.xlsx holds milestone counts per department."}]
    }))
    .unwrap_or_default()
}
