//! Access: when a token is configured, every page, `/api/...` and `/metrics` needs it, as
//! `Authorization: Bearer TOKEN` or as the `HttpOnly` cookie the login page sets. Every POST to
//! the API also needs either the bearer header or `X-Atelier-Csrf: 1` (which the UI sends and a
//! cross-site form cannot), so another site cannot make a browser publish a draft. Every request
//! must name the dashboard's own address as its authority — `Host` in HTTP/1.1, `:authority` in
//! HTTP/2, both when both are sent — and in `Origin` when it has one, so a page whose DNS name was
//! rebound to this machine cannot use the dashboard either. The token is never written into a
//! page or a log.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
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

/// The host part (`host[:port]`) of an `Origin` header value.
fn origin_host(origin: &str) -> &str {
    origin.split_once("://").map_or(origin, |(_, rest)| rest)
}

/// True when the request's authority names one of `allowed`, and its `Origin` too when present.
/// The authority is `Host` in HTTP/1.1 and `:authority` in HTTP/2 (hyper puts that one in the
/// URI, as it does an absolute-form HTTP/1.1 target): at least one must be there, and each one
/// there must be allowed.
fn addressed_to_us(uri: &Uri, headers: &HeaderMap, allowed: &[String]) -> bool {
    let named = |value: &str| allowed.iter().any(|host| host.eq_ignore_ascii_case(value));
    let from_uri = uri.authority().map(|authority| authority.as_str());
    let host = match headers.get(header::HOST) {
        None => None,
        Some(value) => match value.to_str() {
            Ok(host) => Some(host),
            Err(_) => return false,
        },
    };
    let host_ok = (from_uri.is_some() || host.is_some())
        && from_uri.is_none_or(named)
        && host.is_none_or(named);
    let origin_ok = match headers.get(header::ORIGIN) {
        None => true,
        Some(origin) => origin
            .to_str()
            .is_ok_and(|origin| named(origin_host(origin))),
    };
    host_ok && origin_ok
}

/// The middleware in front of every route.
pub async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let headers = request.headers();
    if let Some(allowed) = &state.hosts
        && !addressed_to_us(request.uri(), headers, allowed)
    {
        return api_error(
            StatusCode::FORBIDDEN,
            "HOST_NOT_ALLOWED",
            "this dashboard answers only to its own address; open it by the address `atelier` \
             printed, or add the name to `dashboard_hosts` in atelier.toml",
        );
    }
    let by_bearer = state
        .token
        .as_deref()
        .is_some_and(|token| bearer(headers).is_some_and(|given| same_secret(given, token)));
    if let Some(token) = state.token.as_deref()
        && !is_public(&path)
        && !by_bearer
        && !cookie(headers).is_some_and(|given| same_secret(given, token))
    {
        let machine = ["/api/", "/mcp", "/v1/"]
            .iter()
            .any(|prefix| path.starts_with(prefix));
        return if machine || path == "/metrics" {
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
    fn only_our_own_address_may_be_named() {
        let allowed = crate::dashboard::allowed_hosts(
            "127.0.0.1:7474".parse().unwrap_or_else(|e| panic!("{e}")),
            &[],
        )
        .unwrap_or_default();
        let headers = |host: Option<&str>, origin: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(host) = host {
                headers.insert(
                    header::HOST,
                    host.parse().unwrap_or_else(|e| panic!("{e:?}")),
                );
            }
            if let Some(origin) = origin {
                headers.insert(
                    header::ORIGIN,
                    origin.parse().unwrap_or_else(|e| panic!("{e:?}")),
                );
            }
            headers
        };
        let path = Uri::from_static("/api/status");
        let ours = |uri: &Uri, host: Option<&str>, origin: Option<&str>| {
            addressed_to_us(uri, &headers(host, origin), &allowed)
        };
        assert!(ours(&path, Some("127.0.0.1:7474"), None));
        assert!(ours(
            &path,
            Some("localhost:7474"),
            Some("http://localhost:7474")
        ));
        assert!(!ours(&path, Some("evil:7474"), None));
        assert!(!ours(
            &path,
            Some("127.0.0.1:7474"),
            Some("http://evil:7474")
        ));
        assert!(!ours(&path, None, None));
        // HTTP/2: the authority is in the URI (`:authority`), often without `Host`.
        let h2 = Uri::from_static("http://127.0.0.1:7474/api/status");
        assert!(ours(&h2, None, None));
        assert!(ours(&h2, Some("127.0.0.1:7474"), None));
        let rebound = Uri::from_static("http://evil:7474/api/status");
        assert!(!ours(&rebound, None, None));
        // Either one naming another host is refused.
        assert!(!ours(&rebound, Some("127.0.0.1:7474"), None));
        assert!(!ours(&h2, Some("evil:7474"), None));
        let everywhere: std::net::SocketAddr =
            "0.0.0.0:7474".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(crate::dashboard::allowed_hosts(everywhere, &[]), None);
    }

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
