//! An OpenAI-compatible endpoint on the dashboard's address, for chat front-ends and OpenAI SDKs
//! (Open WebUI, LibreChat, `openai` clients): `GET /v1/models` lists the workbenches as models;
//! `POST /v1/chat/completions` with `model` naming a workbench runs the last user message as a
//! job there (the workbench's own model, conversation and draft rules) and answers with the
//! job's summary and draft changes — streamed as `chat.completion.chunk`s with `stream: true`.
//! A refusal is an OpenAI-shaped error carrying Atelier's code (`DRAFT_EXISTS`,
//! `WORKBENCH_BUSY`, …). The dashboard token, when set, is the bearer key.

use std::convert::Infallible;
use std::time::Duration;

use atelier_messages::feed::EventStream;
use atelier_messages::job::{EventKind, GetJob, JobEvent, JobState, JobSubmit, JobView, Phase};
use atelier_messages::store::ListWorkbenches;
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION, now_ms, subjects};
use atelier_transport::feed::EventFeed;
use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::dashboard::requests::Shared;
use crate::follow;

/// An OpenAI-shaped error with Atelier's code.
fn error(body: &ErrorBody) -> Response {
    let status = match body.code {
        ErrorCode::DraftExists | ErrorCode::WorkbenchBusy => StatusCode::CONFLICT,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::ValidationFailed | ErrorCode::ModelNotAllowed => StatusCode::BAD_REQUEST,
        _ => StatusCode::BAD_GATEWAY,
    };
    let shaped = json!({"error": {
        "message": body.message, "type": "atelier_error", "code": body.code.as_str(), "param": null
    }});
    (status, Json(shaped)).into_response()
}

async fn ask<V: atelier_messages::verb::Verb>(
    state: &Shared,
    request: &V,
) -> Result<V::Reply, ErrorBody> {
    atelier_transport::request(
        &state.nats,
        request,
        atelier_transport::Policy::once(Duration::from_secs(30)),
    )
    .await
}

/// `GET /v1/models`: the workbenches.
pub async fn models(State(state): State<Shared>) -> Response {
    match ask(
        &state,
        &ListWorkbenches {
            v: PROTOCOL_VERSION,
        },
    )
    .await
    {
        Ok(workbenches) => {
            let data: Vec<Value> = workbenches
                .iter()
                .map(|wb| json!({"id": wb.name, "object": "model", "created": wb.created_at_ms / 1000, "owned_by": "atelier"}))
                .collect();
            Json(json!({"object": "list", "data": data})).into_response()
        }
        Err(body) => error(&body),
    }
}

/// The part of a chat completion request this endpoint reads.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    stream: bool,
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Value,
}

/// A message's text: a string, or the text parts of a list.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// An OpenAI-shaped refusal of the request itself (`param`: the field at fault).
fn invalid_request(status: StatusCode, param: Option<&str>, message: &str) -> Response {
    let shaped = json!({"error": {
        "message": message, "type": "invalid_request_error",
        "code": ErrorCode::ValidationFailed.as_str(), "param": param
    }});
    (status, Json(shaped)).into_response()
}

/// `POST /v1/chat/completions`. The body must be a chat request (else `400`, or `413` when it
/// is over the server's limit) whose `model` is a workbench name (else `400`, `param: model`).
pub async fn chat_completions(
    State(state): State<Shared>,
    request: Result<Json<ChatRequest>, JsonRejection>,
) -> Response {
    let request = match request {
        Ok(Json(request)) => request,
        Err(rejection) => {
            let message = format!("the body is not a chat completion request: {rejection}");
            let status = match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
                StatusCode::UNSUPPORTED_MEDIA_TYPE => StatusCode::UNSUPPORTED_MEDIA_TYPE,
                _ => StatusCode::BAD_REQUEST,
            };
            return invalid_request(status, None, &message);
        }
    };
    if let Err(body) = crate::mcp::check_workbench_name(&request.model) {
        return invalid_request(StatusCode::BAD_REQUEST, Some("model"), &body.message);
    }
    let Some(message) = request.messages.iter().rev().find(|m| m.role == "user") else {
        return error(&ErrorBody::new(
            ErrorCode::ValidationFailed,
            "the request has no user message",
        ));
    };
    let job_id = crate::client::new_job_id(&request.model);
    let submit = JobSubmit::new(
        job_id.clone(),
        request.model.clone(),
        text_of(&message.content),
    );
    if let Err(body) = crate::client::publish_job(&state.nats, &submit).await {
        return error(&body);
    }
    if request.stream {
        return stream(state, job_id, request.model).await;
    }
    match finished(&state, &job_id).await {
        Ok(view) => Json(completion(&view)).into_response(),
        Err(body) => error(&body),
    }
}

/// The job once it ended; its error when it did not succeed.
async fn finished(state: &Shared, job_id: &str) -> Result<JobView, ErrorBody> {
    let read = || async move {
        let request = GetJob {
            v: PROTOCOL_VERSION,
            job_id: job_id.to_string(),
        };
        ask(state, &request).await
    };
    match follow::until_ended(read, follow::POLL, None, |_| async {}).await? {
        Some(view) => succeeded(view),
        None => Err(ErrorBody::new(
            ErrorCode::Internal,
            "an unbounded wait ended",
        )),
    }
}

fn succeeded(view: JobView) -> Result<JobView, ErrorBody> {
    if view.state == JobState::Succeeded {
        return Ok(view);
    }
    Err(view.error.unwrap_or_else(|| {
        ErrorBody::new(ErrorCode::Internal, format!("the job ended {}", view.state))
    }))
}

fn completion(view: &JobView) -> Value {
    json!({
        "id": format!("chatcmpl-{}", view.job_id),
        "object": "chat.completion",
        "created": view.created_at_ms / 1000,
        "model": view.workbench,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": view.summary.clone().unwrap_or_default()}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": view.prompt_tokens, "completion_tokens": view.completion_tokens, "total_tokens": view.prompt_tokens + view.completion_tokens},
        "atelier": {"job_id": view.job_id, "state": view.state, "outcome": view.outcome},
    })
}

fn chunk(job_id: &str, model: &str, delta: Value, finish: Option<&str>) -> Event {
    let data = json!({
        "id": format!("chatcmpl-{job_id}"), "object": "chat.completion.chunk", "created": now_ms() / 1000,
        "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    Event::default().data(data.to_string())
}

/// A streamed answer's progress: the job's events, what was sent, whether the summary is on.
struct Follow {
    events: EventFeed,
    state: Shared,
    job_id: String,
    model: String,
    sent: String,
    summarizing: bool,
}

impl Follow {
    /// The next chunks: a piece of the summary as the model writes it, or, once the job ended,
    /// the rest of its answer (the draft changes), the stop and `[DONE]` (or an error event).
    async fn next(mut self) -> Option<(Vec<Event>, Option<Follow>)> {
        loop {
            let next = self.events.next_within(LOOK_AT_THE_RECORD_EVERY).await;
            let Ok(next) = next else {
                // The events cannot be read: the job's record tells how it ended.
                break;
            };
            let Some(stored) = next else {
                // Quiet for a while: the job may have ended with its `finished` event lost (a
                // server crash before it reached the disk, the stream trimmed by its limits).
                if ended(&self.state, &self.job_id).await {
                    break;
                }
                continue;
            };
            let Ok(event) = stored.decode::<JobEvent>() else {
                continue;
            };
            match event.kind {
                EventKind::PhaseStarted { phase } => self.summarizing = phase == Phase::Summary,
                EventKind::AssistantDelta { text } if self.summarizing => {
                    self.sent.push_str(&text);
                    let piece = chunk(&self.job_id, &self.model, json!({"content": text}), None);
                    return Some((vec![piece], Some(self)));
                }
                EventKind::JobFinished { .. } => break,
                _ => {}
            }
        }
        let end = match finished(&self.state, &self.job_id).await {
            Ok(view) => {
                let answer = view.summary.unwrap_or_default();
                let rest = answer.strip_prefix(self.sent.as_str()).unwrap_or(&answer);
                vec![
                    chunk(&self.job_id, &self.model, json!({"content": rest}), None),
                    chunk(&self.job_id, &self.model, json!({}), Some("stop")),
                    Event::default().data("[DONE]"),
                ]
            }
            Err(body) => {
                let shaped = json!({"error": {"message": body.message, "type": "atelier_error", "code": body.code.as_str()}});
                vec![Event::default().data(shaped.to_string())]
            }
        };
        Some((end, None))
    }
}

/// Whether the job's record shows it ended.
async fn ended(state: &Shared, job_id: &str) -> bool {
    let request = GetJob {
        v: PROTOCOL_VERSION,
        job_id: job_id.to_string(),
    };
    ask(state, &request)
        .await
        .is_ok_and(|view| view.state.is_terminal())
}

/// How long a streamed answer waits for the job's next event before it looks at the job's
/// record.
const LOOK_AT_THE_RECORD_EVERY: Duration = Duration::from_secs(5);

/// The answer as `chat.completion.chunk` events while the job runs.
async fn stream(state: Shared, job_id: String, model: String) -> Response {
    let events = EventFeed::new(
        state.nats.clone(),
        EventStream::Jobs,
        Some(subjects::job_events(&job_id)),
        0,
    );
    let first = chunk(
        &job_id,
        &model,
        json!({"role": "assistant", "content": ""}),
        None,
    );
    let follow = Follow {
        events,
        state,
        job_id,
        model,
        sent: String::new(),
        summarizing: false,
    };
    let chunks =
        futures::stream::unfold(Some(follow), |follow| async move { follow?.next().await })
            .flat_map(|events| futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>)));
    let all = futures::stream::once(async { Ok::<_, Infallible>(first) }).chain(chunks);
    Sse::new(all)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response()
}
