//! Asking the coordinator from a route: one verb request with the dashboard's timeout, a
//! coordinator error as an HTTP status, and the `{"ok": …}` shape of an action's answer. The
//! routes of `api`, `batches` and `workshop` all go through here.

use std::sync::Arc;
use std::time::Duration;

use atelier_messages::store::View;
use atelier_messages::verb::Verb;
use atelier_messages::{ErrorBody, ErrorCode};
use atelier_transport::Policy;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::dashboard::AppState;
use crate::dashboard::auth::api_error;

/// How long a request to the coordinator may take.
const NATS_TIMEOUT: Duration = Duration::from_secs(15);

/// The state every route shares.
pub(super) type Shared = Arc<AppState>;

/// A coordinator error as HTTP: the stable code decides the status.
pub(super) fn coded(error: ErrorBody) -> Response {
    let status = match error.code {
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::ValidationFailed
        | ErrorCode::ModelNotAllowed
        | ErrorCode::ProviderNotConfigured
        | ErrorCode::SandboxViolation
        | ErrorCode::UnsupportedVersion => StatusCode::BAD_REQUEST,
        ErrorCode::NoDraft
        | ErrorCode::DraftExists
        | ErrorCode::WorkbenchBusy
        | ErrorCode::RevisionPruned => StatusCode::CONFLICT,
        ErrorCode::ToolWorkerUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::ToolTimeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::FileTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::FileTooComplex | ErrorCode::FileReadFailed | ErrorCode::ResultTooLarge => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    api_error(status, error.code.as_str(), &error.message)
}

/// One request to the coordinator; its error already as the HTTP response.
pub(super) async fn call<V: Verb>(state: &AppState, request: &V) -> Result<V::Reply, Response> {
    atelier_transport::request(&state.nats, request, Policy::once(NATS_TIMEOUT))
        .await
        .map_err(coded)
}

/// The view a query's `view` names (`published` when none does).
pub(super) fn view_named(name: Option<&str>) -> Result<View, ErrorBody> {
    match name {
        None | Some("published") => Ok(View::Published),
        Some("draft") => Ok(View::Draft),
        Some("current") => Ok(View::Current),
        Some(other) => Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!("view `{other}` is none of published, draft, current"),
        )),
    }
}

/// An action's reply as `{"ok": reply}`, or the error response.
pub(super) fn answer<T: Serialize>(result: Result<T, Response>) -> Response {
    match result {
        Ok(value) => Json(serde_json::json!({"ok": value})).into_response(),
        Err(response) => response,
    }
}
