//! The workbench page's JSON API: the conversation, the checkpoints, the models a message may
//! name, the composer's send, and the rewind, regenerate and restore actions, each one
//! `atelier.workshop.*` verb (a sent message is a job submitted as `atelier submit` does).

use atelier_messages::job::JobSubmit;
use atelier_messages::limits::MAX_MESSAGE_BYTES;
use atelier_messages::verb::Verb;
use atelier_messages::workshop::{
    CheckMessage, GetHistory, ListCheckpoints, ListModels, Regenerate, RestoreCheckpoint, Rewind,
};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::auth::api_error;
use super::requests::{Shared, answer, call, coded};

/// The verb's reply as JSON, or the error response.
async fn read<V: Verb>(state: &Shared, request: V) -> Response {
    match call(state, &request).await {
        Ok(reply) => Json(reply).into_response(),
        Err(response) => response,
    }
}

pub async fn history(State(state): State<Shared>, Path(name): Path<String>) -> Response {
    read(
        &state,
        GetHistory {
            v: PROTOCOL_VERSION,
            workbench: name,
        },
    )
    .await
}

pub async fn models(State(state): State<Shared>) -> Response {
    read(
        &state,
        ListModels {
            v: PROTOCOL_VERSION,
        },
    )
    .await
}

/// A message from the composer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compose {
    message: String,
    /// A model among the allowed ones (default: the workbench's).
    #[serde(default)]
    model: Option<String>,
    /// Keep working on the workbench's draft.
    #[serde(default)]
    continue_draft: bool,
    /// Run destructive calls without asking.
    #[serde(default)]
    auto_approve: bool,
}

/// Sends a message as a job: checked first as `atelier submit` checks it (`DRAFT_EXISTS`,
/// `WORKBENCH_BUSY`, `MODEL_NOT_ALLOWED` come back at once), then submitted; its job id. A body
/// over the server's limit, or a message over a job's, is `413` (`VALIDATION_FAILED`).
pub async fn send(
    State(state): State<Shared>,
    Path(name): Path<String>,
    compose: Result<Json<Compose>, JsonRejection>,
) -> Response {
    let compose = match compose {
        Ok(Json(compose)) if compose.message.len() > MAX_MESSAGE_BYTES => {
            return too_large(&format!(
                "the message has {} bytes, more than a job's {MAX_MESSAGE_BYTES}; put long text \
                 into a file of the workbench and name it in the message",
                compose.message.len()
            ));
        }
        Ok(Json(compose)) => compose,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return too_large(&format!("the body is too large: {rejection}"));
        }
        Err(rejection) => {
            return coded(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "the message must be JSON {{\"message\": TEXT, \"model\": NAME?, \
                     \"continue_draft\": BOOL?, \"auto_approve\": BOOL?}}: {rejection}"
                ),
            ));
        }
    };
    let model = compose.model.filter(|model| !model.is_empty());
    let check = CheckMessage {
        v: PROTOCOL_VERSION,
        workbench: name.clone(),
        continue_draft: compose.continue_draft,
        model: model.clone(),
    };
    if let Err(response) = call(&state, &check).await {
        return response;
    }
    let job_id = crate::client::new_job_id(&name);
    let submit = JobSubmit {
        model,
        continue_draft: compose.continue_draft,
        auto_approve: compose.auto_approve,
        ..JobSubmit::new(job_id.clone(), name, compose.message)
    };
    let submitted = crate::client::publish_job(&state.nats, &submit)
        .await
        .map(|()| serde_json::json!({"job_id": job_id}))
        .map_err(coded);
    answer(submitted)
}

/// `413 Content Too Large` with the code of invalid input.
fn too_large(message: &str) -> Response {
    api_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::ValidationFailed.as_str(),
        message,
    )
}

pub async fn checkpoints(State(state): State<Shared>, Path(name): Path<String>) -> Response {
    read(
        &state,
        ListCheckpoints {
            v: PROTOCOL_VERSION,
            workbench: name,
        },
    )
    .await
}

pub async fn rewind(
    State(state): State<Shared>,
    Path((name, message)): Path<(String, String)>,
) -> Response {
    let request = Rewind {
        v: PROTOCOL_VERSION,
        workbench: name,
        message_id: message,
        chat_only: false,
        discard_draft: false,
    };
    answer(call(&state, &request).await)
}

pub async fn regenerate(State(state): State<Shared>, Path(name): Path<String>) -> Response {
    answer(call(&state, &regenerate_request(name, None)).await)
}

/// Regenerates the answer to one user message (the page has said what goes).
pub async fn regenerate_from(
    State(state): State<Shared>,
    Path((name, message)): Path<(String, String)>,
) -> Response {
    answer(call(&state, &regenerate_request(name, Some(message))).await)
}

fn regenerate_request(workbench: String, from_message_id: Option<String>) -> Regenerate {
    Regenerate {
        v: PROTOCOL_VERSION,
        workbench,
        from_message_id,
        dry_run: false,
        job_id: None,
        model: None,
        auto_approve: false,
    }
}

pub async fn restore(
    State(state): State<Shared>,
    Path((name, checkpoint)): Path<(String, String)>,
) -> Response {
    let request = RestoreCheckpoint {
        v: PROTOCOL_VERSION,
        workbench: name,
        checkpoint_id: checkpoint,
    };
    answer(call(&state, &request).await)
}
