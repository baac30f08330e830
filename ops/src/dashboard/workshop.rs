//! The workbench page's JSON API: the conversation, the checkpoints, and the rewind,
//! regenerate and restore actions, each one `atelier.workshop.*` verb.

use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::verb::Verb;
use atelier_messages::workshop::{
    GetHistory, ListCheckpoints, Regenerate, RestoreCheckpoint, Rewind,
};
use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};

use super::requests::{Shared, answer, call};

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
