//! Access: when a token is configured, every page, `/api/...` and `/metrics` needs it, as
//! `Authorization: Bearer TOKEN` or as the `HttpOnly` cookie the login page sets. Every POST to
//! the API also needs either the bearer header or `X-Atelier-Csrf: 1` (which the UI sends and a
//! cross-site form cannot), so another site cannot make a browser publish a draft. The token is
//! never written into a page or a log.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::dashboard::AppState;

/// The login cookie's name.
pub const COOKIE: &str = "atelier_dashboard";
/// The header the UI sends with every POST.
pub const CSRF_HEADER: &str = "x-atelier-csrf";

/// Paths served without a token.
fn is_public(path: &str) -> bool {
    path == "/login" || path.starts_with("/assets/")
}

/// Compares without an early exit on the first differing byte.
pub fn same_secret(given: &str, expected: &str) -> bool {
    let (given, expected) = (given.as_bytes(), expected.as_bytes());
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The middleware in front of every route.
pub async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let headers = request.headers();
    let by_bearer = state
        .token
        .as_deref()
        .is_some_and(|token| bearer(headers).is_some_and(|given| same_secret(given, token)));
    if let Some(token) = state.token.as_deref()
        && !is_public(&path)
        && !by_bearer
        && !cookie(headers).is_some_and(|given| same_secret(given, token))
    {
        return if path.starts_with("/api/") || path == "/metrics" {
            api_error(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                "a bearer token is required",
            )
        } else {
            Redirect::to("/login").into_response()
        };
    }
    if request.method() == Method::POST
        && path.starts_with("/api/")
        && !by_bearer
        && headers.get(CSRF_HEADER).is_none()
    {
        return api_error(
            StatusCode::FORBIDDEN,
            "CSRF",
            "POST needs `Authorization: Bearer TOKEN` or the header `X-Atelier-Csrf: 1`",
        );
    }
    next.run(request).await
}

/// A JSON error in the shape of the NATS error body.
pub fn api_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(serde_json::json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

/// The `Set-Cookie` value after a good login.
pub fn login_cookie(token: &str) -> String {
    format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/")
}

/// The `Set-Cookie` value that logs out.
pub fn logout_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_secrets_exactly() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abd", "abc"));
        assert!(!same_secret("ab", "abc"));
    }

    #[test]
    fn reads_the_cookie_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            axum::http::HeaderValue::from_static("a=1; atelier_dashboard=s3cret; b=2"),
        );
        assert_eq!(cookie(&headers), Some("s3cret"));
    }
}
