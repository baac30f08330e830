//! `atelier`: run the system (`up`, `coordinator`, `worker`) and talk to it (`wb`, `draft`,
//! `submit`, `watch`, `jobs`, `job`, `demo`; the workshop: `history`, `rewind`, `regenerate`,
//! `checkpoints`, `checkpoint`, `restore`, `gc`, `context`, `chat`). Printing is this binary's job.
//!
//! # Layout
//! - `cli`: the subcommands and flags; `commands`: the client commands; `output`: how they print;
//!   `shown`: others' text with its control characters escaped.
//! - `workshop`, `chat`, `context_items`: the conversation commands, the terminal session and
//!   the context items.
//! - `batch`: `atelier run` (tools and workflow files without a model) and `atelier batch`.
//! - `client`: typed requests to a running system; `follow`: waiting for a job's end by its
//!   record (the CLI, MCP and the OpenAI endpoint); `config`: figment settings.
//! - `system`: starting the coordinator and workers (`up`, `coordinator`, `worker`);
//!   `embedded`: the `nats-server` child; `nats_roles`: its users and permissions;
//!   `nats_connect`: reaching NATS with a process's credentials; `child_env`: what the children
//!   it starts inherit (no secrets).
//! - `dashboard`, `metrics`, `telemetry`: the ops dashboard, `/metrics`, tracing and OTLP.
//! - `demo`: the README's demo job; `eval`: scoring a directory of tasks (`atelier eval`).
//! - `mcp`: `atelier mcp`, the workbenches for MCP clients (the official SDK, `rmcp`);
//!   `read_tool`: a read-only tool run on its pool (MCP's reads, the dashboard's previews).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod autoscale;
mod batch;
mod chat;
mod child_env;
mod cli;
mod client;
mod commands;
mod config;
mod context_items;
mod dashboard;
mod demo;
mod embedded;
mod eval;
mod follow;
mod mcp;
mod metrics;
mod nats_connect;
mod nats_roles;
mod output;
mod read_tool;
mod shown;
mod system;
mod telemetry;
mod workshop;

use std::process::ExitCode;

use anyhow::Context;
use atelier_messages::tool::Pool;
use clap::Parser;

use crate::cli::{Cli, Command};
use crate::client::Client;
use crate::commands::client_command;
use crate::config::{FlagOverrides, Settings};
use crate::nats_roles::Role;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A command that prints and exits ends quietly when its reader goes away (`| head`), as
    // `git` and `grep` do, instead of failing on a closed pipe. The system's own pieces (and
    // the demo, which owns a nats-server child) keep SIGPIPE ignored: sockets report EPIPE.
    if !cli.command.is_server() && !matches!(cli.command, Command::Demo { .. }) {
        sigpipe::reset();
    }
    let runtime = match runtime(default_async_threads(&cli.command)) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", output::shown_lines(&format!("{error:#}")));
            ExitCode::FAILURE
        }
    }
}

/// The process's runtime, with `default_threads` async threads unless `TOKIO_WORKER_THREADS`
/// says otherwise (tokio's own default, a thread per core, when neither does). Tokio reads the
/// variable itself and panics on a value that is not a thread count, so such a value is
/// refused here first, by name.
fn runtime(default_threads: Option<usize>) -> Result<tokio::runtime::Runtime, String> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(value) = std::env::var_os(WORKER_THREADS_VARIABLE) {
        let threads = (value.to_str()).and_then(|value| value.parse::<usize>().ok());
        if threads.is_none_or(|threads| threads == 0) {
            return Err(format!(
                "VALIDATION_FAILED: {WORKER_THREADS_VARIABLE} must be a number of threads of at least 1, not {value:?}; unset it or set it to, e.g., 2"
            ));
        }
    } else if let Some(threads) = default_threads {
        builder.worker_threads(threads);
    }
    builder
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))
}

/// A tool worker runs one async thread: its async side only takes requests and sends replies
/// (every tool's work runs on blocking threads, and a pool scales out by processes), so more
/// threads only add cross-thread wake-ups to each call. Every other command takes tokio's
/// default.
fn default_async_threads(command: &Command) -> Option<usize> {
    matches!(command, Command::Worker { .. }).then_some(1)
}

/// The variable through which tokio takes its number of worker threads.
const WORKER_THREADS_VARIABLE: &str = "TOKIO_WORKER_THREADS";

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let settings = Settings::load(
        cli.config.as_deref(),
        FlagOverrides {
            nats_url: cli.nats.clone(),
            nats_creds: cli.creds.clone(),
            data_dir: cli.data.clone(),
            http_addr: cli.http.clone(),
        },
    )?;
    let server_command = cli.command.is_server();
    let telemetry = telemetry::init(
        if server_command { "info" } else { "warn" },
        settings.otlp_endpoint().as_deref(),
        &trace_service(&cli.command),
    );
    let outcome = match cli.command {
        Command::Up { autoscale } => up(settings, autoscale.as_deref()).await,
        Command::Pool { pool, min, max } => pool_supervisor(&settings, &pool, min, max).await,
        Command::Dashboard => dashboard(&settings).await,
        Command::Coordinator => coordinator(&settings).await,
        Command::Worker { pool, supervised } => worker(&settings, &pool, supervised).await,
        Command::Demo { keep } => demo::run(&settings, keep).await,
        Command::Decode => output::decode_stdin(),
        command => {
            let client = Client {
                nats: system::connect(
                    &settings.client_nats_url()?,
                    settings.nats_creds.as_deref(),
                    Role::Client,
                )
                .await?,
            };
            client_command(&client, command).await
        }
    };
    telemetry.shutdown().await;
    outcome
}

/// The `service.name` of this process in traces.
fn trace_service(command: &Command) -> String {
    match command {
        Command::Up { .. } | Command::Demo { .. } => "atelier".to_string(),
        Command::Pool { pool, .. } => format!("atelier-pool-{pool}"),
        Command::Coordinator => "atelier-coordinator".to_string(),
        Command::Worker { pool, .. } => format!("atelier-worker-{pool}"),
        Command::Dashboard => "atelier-dashboard".to_string(),
        _ => "atelier-cli".to_string(),
    }
}

async fn dashboard(settings: &Settings) -> anyhow::Result<ExitCode> {
    let url = settings.client_nats_url()?;
    let dashboard =
        dashboard::start(&url, settings.nats_creds.as_deref(), settings.dashboard()?).await?;
    println!(
        "dashboard at {} (NATS {}); Ctrl-C to stop",
        dashboard.url(),
        nats_roles::redact(&url)
    );
    system::shutdown_signal().await;
    dashboard.stop();
    Ok(ExitCode::SUCCESS)
}

async fn up(mut settings: Settings, autoscale: Option<&str>) -> anyhow::Result<ExitCode> {
    if let Some(spec) = autoscale {
        settings.autoscale = autoscale::parse_spec(spec)?
            .into_iter()
            .map(|(pool, bounds)| (pool.to_string(), bounds))
            .collect();
    }
    let settings = &settings;
    let system = system::System::start(settings, false).await?;
    println!(
        "atelier is up; NATS at {} (credentials in {})",
        system.display_url(),
        settings.url_file().display()
    );
    println!("dashboard at {}", system.dashboard_url());
    println!(
        "data in {}; press Ctrl-C to stop",
        settings.data_dir.display()
    );
    system::shutdown_signal().await;
    system.stop().await;
    println!("stopped");
    Ok(ExitCode::SUCCESS)
}

async fn pool_supervisor(
    settings: &Settings,
    pool: &str,
    min: usize,
    max: usize,
) -> anyhow::Result<ExitCode> {
    let pool = Pool::parse(pool).context("--pool must be tabular or office")?;
    let bounds = autoscale::PoolBounds { min, max };
    autoscale::check_bounds(pool, bounds)?;
    let url = settings.worker_nats_url()?;
    let nats = system::connect(&url, settings.nats_creds.as_deref(), Role::Worker).await?;
    let launcher = system::launcher(settings, url)?;
    let pools = std::collections::BTreeMap::from([(pool, bounds)]);
    let scaler = autoscale::start(nats, pools, settings.autoscale_tuning(), launcher).await?;
    tracing::info!(%pool, min, max, "pool supervisor ready");
    system::shutdown_signal().await;
    scaler.stop().await;
    Ok(ExitCode::SUCCESS)
}

async fn coordinator(settings: &Settings) -> anyhow::Result<ExitCode> {
    let url = settings
        .nats_url
        .clone()
        .context("`atelier coordinator` needs --nats URL (or ATELIER_NATS_URL)")?;
    let nats = system::connect(&url, settings.nats_creds.as_deref(), Role::Coordinator).await?;
    // With a replicated store, starting includes waiting as a standby for the store's lease.
    let handle = tokio::select! {
        handle = system::coordinator(nats, settings) => handle?,
        () = system::shutdown_signal() => return Ok(ExitCode::SUCCESS),
    };
    let lost = tokio::select! {
        () = system::shutdown_signal() => false,
        () = handle.lost() => true,
    };
    handle.shutdown().await;
    if lost {
        // Another coordinator serves the store now; a supervisor restarts this one as a standby.
        eprintln!("error: this coordinator lost its store's lease; another one serves it now");
        return Ok(ExitCode::from(75));
    }
    Ok(ExitCode::SUCCESS)
}

async fn worker(settings: &Settings, pool: &str, supervised: bool) -> anyhow::Result<ExitCode> {
    let url = settings.worker_nats_url()?;
    let pool = Pool::parse(pool).context("--pool must be tabular or office")?;
    let nats = system::connect(&url, settings.nats_creds.as_deref(), Role::Worker).await?;
    let handle = system::worker(nats, settings, pool).await?;
    tracing::info!(worker = handle.worker_id(), "worker ready");
    tokio::select! {
        () = system::shutdown_signal() => {}
        () = system::stdin_closed(), if supervised => {
            tracing::info!("the supervisor is gone; retiring");
        }
    }
    handle.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
