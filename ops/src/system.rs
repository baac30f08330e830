//! Starting the server-side pieces: coordinator, workers, or all of them (`up`).

use crate::nats_roles::{Role, redact, write_private};
use std::path::{Path, PathBuf};

use anyhow::Context;
use atelier_agents::spec::ProviderSettings;
use atelier_coordinator::{
    CoordinatorConfig, CoordinatorHandle, JobDefaults, TimeLimits, start_coordinator,
};
use atelier_messages::tool::Pool;
use atelier_transport::connect::AuthWatch;
use atelier_workers::{WorkerConfig, WorkerHandle, start_worker};

use crate::autoscale::PoolBounds;
use crate::config::Settings;
use crate::nats_connect::{CREDS_SOURCES, connect_options, wait_connected};

/// A stable id for a process's piece: `<role>-<host>-<pid>`.
pub fn instance_id(role: &str) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    format!("{role}-{host}-{}", std::process::id())
}

/// How long to keep trying to reach NATS at start.
const CONNECT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Connects, retrying while the server comes up, and returns only once connected: until the
/// server's INFO arrives the client does not know its `max_payload` and would refuse any
/// message over 1 MiB. A server that refuses the credentials fails at once.
pub async fn connect(
    url: &str,
    creds: Option<&Path>,
    role: Role,
) -> anyhow::Result<async_nats::Client> {
    let watch = AuthWatch::new();
    let events = watch.clone();
    let client = connect_options(url, creds, role)
        .await?
        .name("atelier")
        .retry_on_initial_connect()
        .event_callback(move |event| {
            let events = events.clone();
            async move { events.observe(&event) }
        })
        .connect(atelier_transport::connect::servers(url)?)
        .await
        .with_context(|| format!("cannot connect to NATS at {}", redact(url)))?;
    if !wait_connected(&client, &watch, url, creds, CONNECT_PATIENCE).await? {
        anyhow::bail!(
            "cannot reach NATS at {} within {} s: is `atelier up` (or nats-server) running?",
            redact(url),
            CONNECT_PATIENCE.as_secs()
        );
    }
    Ok(client)
}

pub async fn coordinator(
    client: async_nats::Client,
    settings: &Settings,
) -> anyhow::Result<CoordinatorHandle> {
    let data_dir = absolute(&settings.data_dir)?;
    let config = CoordinatorConfig {
        data_dir,
        coordinator_id: instance_id("coordinator"),
        defaults: JobDefaults {
            model: settings.default_model.clone(),
            time_limits: TimeLimits {
                default_secs: settings.job_time_limit_secs,
                max_secs: settings.max_job_time_limit_secs,
            },
            spending: settings.spending()?,
        },
        provider_settings: ProviderSettings {
            openai_api_key: settings.openai_api_key.clone(),
            openai_base_url: settings.openai_base_url.clone(),
            anthropic_api_key: settings.anthropic_api_key.clone(),
            anthropic_base_url: settings.anthropic_base_url.clone(),
            allow_adhoc_urls: settings.allow_adhoc_model_urls,
            replay_dir: Some(absolute(&settings.replay_dir())?),
            profiles: settings.models.clone(),
            ..ProviderSettings::default()
        },
        budgets: settings.budgets(),
        journal_retention: std::time::Duration::from_secs(settings.journal_retention_secs),
        max_running_jobs: settings.max_running_jobs,
        checkpoints_kept: settings.checkpoints_kept,
        stale_draft_after: std::time::Duration::from_secs(settings.stale_draft_secs),
        events_format: settings.events_format.format(),
        replication: settings.replication()?,
    };
    start_coordinator(client, config)
        .await
        .context("cannot start the coordinator")
}

pub async fn worker(
    client: async_nats::Client,
    settings: &Settings,
    pool: Pool,
) -> anyhow::Result<WorkerHandle> {
    let data_dir = absolute(&settings.data_dir)?;
    let blob_dir = data_dir.join("blobs");
    let config = WorkerConfig {
        pool,
        worker_id: instance_id(pool.as_str()),
        blob_dir: blob_dir.exists().then_some(blob_dir),
        cache_dir: data_dir.join("cache"),
        max_concurrency: settings.worker_concurrency.max(1),
        blob_cache_bytes: settings.blob_cache_bytes,
        table_cache_bytes: settings.table_cache_bytes,
        office_timeout: std::time::Duration::from_millis(settings.office_tool_timeout_ms.max(1)),
    };
    start_worker(client, config)
        .await
        .with_context(|| format!("cannot start the {pool} worker"))
}

/// How the autoscaler starts worker processes: this executable, on `url`, with this data
/// directory (shared with a coordinator on this host, if any).
pub fn launcher(settings: &Settings, url: String) -> anyhow::Result<crate::autoscale::Launcher> {
    Ok(crate::autoscale::Launcher {
        exe: std::env::current_exe().context("cannot locate the atelier executable")?,
        nats_url: url,
        creds: settings.nats_creds.clone(),
        data_dir: absolute(&settings.data_dir)?,
        pin_cpus: settings.autoscale_pin_cpus,
        log_filter: None,
    })
}

pub fn absolute(path: &Path) -> anyhow::Result<std::path::PathBuf> {
    std::fs::create_dir_all(path).with_context(|| format!("cannot create {}", path.display()))?;
    std::fs::canonicalize(path).with_context(|| format!("cannot resolve {}", path.display()))
}

/// Waits until standard input reaches its end (the process that holds its other end is gone).
pub async fn stdin_closed() {
    use tokio::io::AsyncReadExt;
    let mut stdin = tokio::io::stdin();
    let mut buffer = [0u8; 64];
    while let Ok(read) = stdin.read(&mut buffer).await {
        if read == 0 {
            break;
        }
    }
}

/// How long `up` waits for each pool's first worker process to serve.
const POOL_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until every pool has a worker answering `$SRV.PING`, so the first tool call finds one.
async fn wait_for_pools(nats: &async_nats::Client) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + POOL_PATIENCE;
    for pool in Pool::ALL {
        let subject = format!("$SRV.PING.{}", atelier_messages::worker::service_name(pool));
        loop {
            let answer = tokio::time::timeout(
                std::time::Duration::from_millis(500),
                nats.request(subject.clone(), "".into()),
            )
            .await;
            if matches!(answer, Ok(Ok(_))) {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!(
                    "no {pool} worker process answered within {} s; see the log above for why it \
                     did not start",
                    POOL_PATIENCE.as_secs()
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Waits for Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// Everything `up` runs in one process.
pub struct System {
    nats: Option<crate::embedded::EmbeddedNats>,
    url: String,
    url_files: Vec<std::path::PathBuf>,
    /// The credentials file for a configured server (never for the embedded one).
    creds: Option<PathBuf>,
    coordinator: CoordinatorHandle,
    /// Supervises every pool's worker processes (sizing the autoscaled ones by demand).
    autoscaler: crate::autoscale::Autoscaler,
    dashboard: crate::dashboard::Dashboard,
}

impl System {
    /// Starts nats-server (unless a URL is configured), the coordinator and one worker per pool
    /// (`quiet`: the workers log only warnings, under a command that prints for a person).
    pub async fn start(settings: &Settings, quiet: bool) -> anyhow::Result<System> {
        if let (None, Some(creds)) = (&settings.nats_url, &settings.nats_creds) {
            anyhow::bail!(
                "a NATS credentials file ({}) is for a server of your own given with --nats URL; \
                 the server `atelier up` starts has its own users: drop the credentials file \
                 ({CREDS_SOURCES}) or add --nats",
                creds.display()
            );
        }
        let data_dir = absolute(&settings.data_dir)?;
        let nats = match &settings.nats_url {
            Some(_) => None,
            None => Some(
                crate::embedded::EmbeddedNats::start(
                    &settings.nats_server_bin,
                    &data_dir,
                    settings.nats_port,
                )
                .await?,
            ),
        };
        // Each piece connects as its role on the embedded server; a configured server is the
        // operator's to secure (docs/operations.md), and every piece uses its URL.
        let url_of = |role: Role| match (&nats, &settings.nats_url) {
            (Some(server), _) => server.url(role),
            (None, Some(url)) => url.clone(),
            (None, None) => String::new(),
        };
        let creds = settings.nats_creds.clone().filter(|_| nats.is_none());
        let coordinator = coordinator(
            connect(
                &url_of(Role::Coordinator),
                creds.as_deref(),
                Role::Coordinator,
            )
            .await?,
            settings,
        )
        .await?;
        // Every pool's workers are processes of their own (fixed at one, or autoscaled), so a
        // worker that dies on a file costs a retry, not the coordinator and the dashboard.
        let mut pools = settings.autoscale_pools()?;
        for pool in Pool::ALL {
            pools.entry(pool).or_insert(PoolBounds { min: 1, max: 1 });
        }
        // The supervisor is of the workers' kind: it asks their numbers and reports decisions
        // in their account.
        let supervisor_client =
            connect(&url_of(Role::Worker), creds.as_deref(), Role::Worker).await?;
        let autoscaler = crate::autoscale::start(
            supervisor_client.clone(),
            pools,
            settings.autoscale_tuning(),
            crate::autoscale::Launcher {
                log_filter: quiet.then_some("warn"),
                ..launcher(settings, url_of(Role::Worker))?
            },
        )
        .await?;
        wait_for_pools(&supervisor_client).await?;
        let url = url_of(Role::Client);
        let dashboard =
            crate::dashboard::start(&url, creds.as_deref(), settings.dashboard()?).await?;
        let mut url_files = Vec::new();
        if nats.is_some() {
            for (path, role) in [
                (settings.url_file(), Role::Client),
                (settings.worker_url_file(), Role::Worker),
            ] {
                write_private(&path, &url_of(role))?;
                url_files.push(path);
            }
        }
        Ok(System {
            nats,
            url,
            url_files,
            creds,
            coordinator,
            autoscaler,
            dashboard,
        })
    }

    /// The clients' NATS URL, with the client role's credentials on the embedded server.
    pub fn client_url(&self) -> &str {
        &self.url
    }

    /// The credentials file clients use with [`System::client_url`] (a configured server's).
    pub fn client_creds(&self) -> Option<&Path> {
        self.creds.as_deref()
    }

    /// The clients' NATS URL without credentials, for printing.
    pub fn display_url(&self) -> String {
        redact(&self.url)
    }

    /// The dashboard's URL (`http://127.0.0.1:7474` unless configured or taken).
    pub fn dashboard_url(&self) -> String {
        self.dashboard.url()
    }

    /// Stops every piece, then the child server; removes the recorded URL.
    pub async fn stop(self) {
        self.dashboard.stop();
        self.autoscaler.stop().await;
        self.coordinator.shutdown().await;
        for path in self.url_files {
            let _ = std::fs::remove_file(path);
        }
        if let Some(nats) = self.nats {
            nats.stop().await;
        }
    }
}
