//! The batch pages' JSON API: the list, one batch with its failed targets, and the cancel,
//! retry, publish and discard actions, each one `atelier.batch.*` verb.

use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::batch::{
    CancelBatch, GetBatch, ListBatches, ListTargets, RetryBatch, SettleBatch, TargetState,
};
use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};

use super::requests::{Shared, answer, call};

pub async fn list(State(state): State<Shared>) -> Response {
    match call(
        &state,
        &ListBatches {
            v: PROTOCOL_VERSION,
        },
    )
    .await
    {
        Ok(views) => Json(views).into_response(),
        Err(response) => response,
    }
}

/// The batch's view and its failed targets (the first page).
pub async fn batch(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    let view = GetBatch {
        v: PROTOCOL_VERSION,
        batch_id: id.clone(),
    };
    let failed = ListTargets {
        v: PROTOCOL_VERSION,
        batch_id: id,
        state: Some(TargetState::Failed),
        from: 0,
        limit: None,
    };
    match (call(&state, &view).await, call(&state, &failed).await) {
        (Ok(view), Ok(failed)) => {
            Json(serde_json::json!({"batch": view, "failed": failed})).into_response()
        }
        (Err(response), _) | (_, Err(response)) => response,
    }
}

pub async fn cancel(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    let request = CancelBatch {
        v: PROTOCOL_VERSION,
        batch_id: id,
    };
    answer(call(&state, &request).await)
}

pub async fn retry(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    let request = RetryBatch {
        v: PROTOCOL_VERSION,
        batch_id: id,
    };
    answer(call(&state, &request).await)
}

pub async fn publish(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    settle(state, id, true).await
}

pub async fn discard(State(state): State<Shared>, Path(id): Path<String>) -> Response {
    settle(state, id, false).await
}

async fn settle(state: Shared, batch_id: String, publish: bool) -> Response {
    let request = SettleBatch {
        v: PROTOCOL_VERSION,
        batch_id,
        publish,
    };
    answer(call(&state, &request).await)
}
