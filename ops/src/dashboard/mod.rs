//! The ops dashboard: an HTTP server (axum) with a browser UI, a JSON API twin of every view,
//! a live event stream and `/metrics`. Documented in `docs/dashboard.md`.
//!
//! It is a NATS client like any other: job views come from `atelier.ctl.*`, drafts from
//! `atelier.store.*`, workers from the NATS micro services API (`$SRV.INFO`, `$SRV.STATS`), and
//! everything live from the EVENTS stream, read with an ordered consumer that resumes after the
//! last sequence it saw when NATS comes back.
//!
//! # Layout
//! - [`live`]: job traces, throughput and event metrics built from the events.
//! - [`api`]: the HTTP routes (pages, `/api/...`, `/metrics`).
//! - `plan`: each plan item's contracts as their checklist lines, for the job page.
//! - `files`: a workbench's files (create, list a view marked against the published state,
//!   download); `upload`: adding files from the browser (multipart, spooled to disk);
//!   `preview`: a page of a file as the read-only tools show it (grids, blocks, slides, pages).
//! - `requests`: one coordinator request from a route, its errors as HTTP statuses.
//! - `http`: the connections, with header-read and idle timeouts.
//! - [`auth`]: the bearer token (required beyond loopback) and the login cookie.
//! - [`workers`]: pools and instances from `$SRV.INFO`/`$SRV.STATS`.
//! - [`batches`]: the batch pages' API (list, progress, failures, cancel, retry, publish,
//!   discard) over `atelier.batch.*`.
//! - [`workshop`]: the workbench page's API (conversation, checkpoints, rewind, regenerate,
//!   restore) over `atelier.workshop.*`.
//! - `openai`: the OpenAI-compatible endpoint (`/v1/models`, `/v1/chat/completions`); `/mcp`
//!   is the MCP server of `crate::mcp` over streamable HTTP.

pub mod api;
pub mod auth;
pub mod batches;
mod files;
mod http;
pub mod live;
mod openai;
mod plan;
mod preview;
mod requests;
mod upload;
pub mod workers;
pub mod workshop;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use atelier_messages::feed::EventStream;
use atelier_messages::job::JobEvent;
use atelier_messages::{ErrorBody, subjects};
use atelier_transport::feed::EventFeed;

use crate::dashboard::live::Live;

/// How to run the dashboard.
#[derive(Debug, Clone)]
pub struct DashboardConfig {
    /// Where to listen (default `127.0.0.1:7474`).
    pub addr: SocketAddr,
    /// Bearer token; required when `addr` is not a loopback address.
    pub token: Option<String>,
    /// Listen on any free port when `addr`'s port is taken (for the default address).
    pub any_port_when_taken: bool,
    /// Extra `Host` names to answer to (see [`allowed_hosts`]).
    pub hosts: Vec<String>,
    /// How many MCP sessions `/mcp` holds at once, and how long an idle one.
    pub mcp: crate::mcp::SessionLimits,
}

/// The `Host` values (and `Origin` hosts) the dashboard answers to once it listens on `addr`:
/// that address, `localhost` on loopback, and the configured names. `None` when it listens on
/// every interface and no names are configured (the token, required there, protects it). A
/// page served under any other name — a rebound DNS name pointing at 127.0.0.1 — is refused.
pub fn allowed_hosts(addr: SocketAddr, configured: &[String]) -> Option<Vec<String>> {
    if addr.ip().is_unspecified() && configured.is_empty() {
        return None;
    }
    let port = addr.port();
    let mut hosts: Vec<String> = configured
        .iter()
        .flat_map(|name| [name.clone(), format!("{name}:{port}")])
        .collect();
    hosts.push(addr.to_string());
    if addr.ip().is_loopback() {
        hosts.extend([
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ]);
    }
    Some(hosts)
}

impl DashboardConfig {
    /// Refuses to serve beyond loopback without a token.
    pub fn check(&self) -> anyhow::Result<()> {
        let token_set = self.token.as_deref().is_some_and(|t| !t.trim().is_empty());
        if !self.addr.ip().is_loopback() && !token_set {
            bail!(
                "the dashboard would listen on {}, beyond this machine, without a token: set \
                 `dashboard_token` in atelier.toml (or ATELIER_DASHBOARD_TOKEN), or bind 127.0.0.1",
                self.addr
            );
        }
        Ok(())
    }
}

/// The dashboard's NATS connection health.
#[derive(Default)]
pub struct Connection {
    pub connected: AtomicBool,
    pub reconnects: AtomicU64,
}

/// What every handler shares.
pub struct AppState {
    pub nats: async_nats::Client,
    pub live: Live,
    pub connection: Arc<Connection>,
    pub token: Option<String>,
    /// The `Host` values requests may carry (`None`: any).
    pub hosts: Option<Vec<String>>,
    /// The limits of `/mcp`'s sessions.
    pub mcp: crate::mcp::SessionLimits,
}

/// A running dashboard.
pub struct Dashboard {
    addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Dashboard {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn stop(self) {
        for task in self.tasks {
            task.abort();
        }
    }
}

/// Connects to NATS, starts following the EVENTS stream and serves HTTP.
pub async fn start(
    nats_url: &str,
    creds: Option<&std::path::Path>,
    config: DashboardConfig,
) -> anyhow::Result<Dashboard> {
    config.check()?;
    let connection = Arc::new(Connection::default());
    let nats = connect(nats_url, creds, Arc::clone(&connection)).await?;
    let listener = listen(&config).await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(AppState {
        nats,
        live: Live::new(),
        connection,
        token: config.token.filter(|t| !t.trim().is_empty()),
        hosts: allowed_hosts(addr, &config.hosts),
        mcp: config.mcp,
    });
    let feeder = tokio::spawn(feed(Arc::clone(&state)));
    let router = api::router(state);
    let server = tokio::spawn(http::serve(listener, router));
    tracing::info!(url = %format!("http://{addr}"), "dashboard serving");
    Ok(Dashboard {
        addr,
        tasks: vec![feeder, server],
    })
}

async fn listen(config: &DashboardConfig) -> anyhow::Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind(config.addr).await {
        Ok(listener) => Ok(listener),
        Err(error)
            if error.kind() == std::io::ErrorKind::AddrInUse && config.any_port_when_taken =>
        {
            let any = SocketAddr::new(config.addr.ip(), 0);
            tokio::net::TcpListener::bind(any)
                .await
                .with_context(|| format!("the dashboard cannot listen on {any}"))
        }
        Err(error) => {
            Err(error).with_context(|| format!("the dashboard cannot listen on {}", config.addr))
        }
    }
}

/// How long the dashboard waits for NATS at start before serving anyway (it keeps reconnecting
/// in the background; only refused credentials stop it).
const CONNECT_GRACE: Duration = Duration::from_secs(5);

/// A NATS connection that records its own reconnects.
async fn connect(
    url: &str,
    creds: Option<&std::path::Path>,
    connection: Arc<Connection>,
) -> anyhow::Result<async_nats::Client> {
    let seen_disconnect = Arc::new(AtomicBool::new(false));
    let watch = atelier_transport::connect::AuthWatch::new();
    let events = watch.clone();
    let client = crate::nats_connect::connect_options(url, creds, crate::nats_roles::Role::Client)
        .await?
        .name("atelier-dashboard")
        .retry_on_initial_connect()
        .event_callback(move |event| {
            let connection = Arc::clone(&connection);
            let seen_disconnect = Arc::clone(&seen_disconnect);
            let events = events.clone();
            async move {
                events.observe(&event);
                match event {
                    async_nats::Event::Connected => {
                        connection.connected.store(true, Ordering::Relaxed);
                        if seen_disconnect.swap(false, Ordering::Relaxed) {
                            connection.reconnects.fetch_add(1, Ordering::Relaxed);
                            tracing::info!("dashboard reconnected to NATS");
                        }
                    }
                    async_nats::Event::Disconnected => {
                        connection.connected.store(false, Ordering::Relaxed);
                        seen_disconnect.store(true, Ordering::Relaxed);
                        tracing::warn!("dashboard lost NATS; reconnecting");
                    }
                    _ => {}
                }
            }
        })
        .connect(atelier_transport::connect::servers(url)?)
        .await
        .with_context(|| {
            format!(
                "the dashboard cannot connect to NATS at {}",
                crate::nats_roles::redact(url)
            )
        })?;
    if !crate::nats_connect::wait_connected(&client, &watch, url, creds, CONNECT_GRACE).await? {
        tracing::warn!("NATS is not reachable yet; the dashboard serves and keeps reconnecting");
    }
    Ok(client)
}

/// Follows the job events for as long as the dashboard runs, resuming after the last
/// sequence applied whenever reading fails (NATS restarted, no coordinator yet…).
async fn feed(state: Arc<AppState>) {
    state.connection.connected.store(true, Ordering::Relaxed);
    loop {
        if let Err(error) = follow(&state).await {
            tracing::debug!(%error, "event feed interrupted; resuming");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn follow(state: &AppState) -> Result<(), ErrorBody> {
    let after = state.live.last_sequence();
    let mut feed = EventFeed::new(state.nats.clone(), EventStream::Jobs, None, after);
    loop {
        let stored = feed.next().await?;
        match stored.decode::<JobEvent>() {
            Ok(event) => state.live.apply(stored.seq, &event),
            Err(error) => tracing::debug!(%error, "skipping an undecodable event"),
        }
    }
}

/// Every event of one job so far (what `atelier watch --json` prints).
pub async fn job_events(nats: &async_nats::Client, job_id: &str) -> anyhow::Result<Vec<JobEvent>> {
    let mut feed = EventFeed::new(
        nats.clone(),
        EventStream::Jobs,
        Some(subjects::job_events(job_id)),
        0,
    );
    let stored = tokio::time::timeout(Duration::from_secs(10), feed.drain())
        .await
        .context("reading the job's events timed out")?
        .map_err(|error| anyhow::anyhow!("cannot read the job's events: {error}"))?;
    Ok(stored
        .iter()
        .filter_map(|event| event.decode::<JobEvent>().ok())
        .collect())
}
