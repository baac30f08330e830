//! `atelier`: run the system (`up`, `coordinator`, `worker`) and talk to it (`wb`, `draft`,
//! `submit`, `watch`, `jobs`, `job`, `demo`; the workshop: `history`, `rewind`, `regenerate`,
//! `checkpoints`, `checkpoint`, `restore`, `gc`, `context`, `chat`). Printing is this binary's job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod chat;
mod client;
mod config;
mod context_items;
mod dashboard;
mod demo;
mod embedded;
mod metrics;
mod output;
mod system;
mod telemetry;
mod workshop;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use atelier_messages::job::{JobState, JobView};
use atelier_messages::tool::Pool;
use clap::{Parser, Subcommand};

use crate::client::{Client, WatchOutput};
use crate::config::{FlagOverrides, Settings};
use crate::output::{print_job, print_jobs, print_json, print_listing, print_review, print_stats};

#[derive(Parser)]
#[command(
    name = "atelier",
    version,
    about = "Durable, resumable LLM agent jobs over workbenches of office and tabular files"
)]
struct Cli {
    /// NATS server URL (default: the one `atelier up` started for this data directory).
    #[arg(long, global = true, env = "ATELIER_NATS_URL")]
    nats: Option<String>,
    /// Data directory (sled, blobs, embedded NATS store). Default `.atelier`.
    #[arg(long, global = true)]
    data: Option<PathBuf>,
    /// Configuration file (default `./atelier.toml` when present).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Dashboard address for `up` and `dashboard` (default 127.0.0.1:7474; beyond loopback it
    /// needs `dashboard_token` / ATELIER_DASHBOARD_TOKEN).
    #[arg(long, global = true)]
    http: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run everything in one process: nats-server (unless --nats), coordinator, one worker per pool.
    Up,
    /// Run a coordinator (job intake, orchestrators, draft store, control plane).
    Coordinator,
    /// Serve the ops dashboard, its JSON API and /metrics for a running system (--nats, --http).
    Dashboard,
    /// Run a tool worker for one pool; start more processes to scale out.
    Worker {
        #[arg(long, value_parser = ["tabular", "office"])]
        pool: String,
    },
    /// Workbenches.
    #[command(subcommand)]
    Wb(WbCommand),
    /// The draft of a workbench.
    #[command(subcommand)]
    Draft(DraftCommand),
    /// Submit a job: a message for the agent to carry out on a workbench.
    Submit {
        workbench: String,
        message: String,
        /// Model spec: openai:MODEL, openai-compat:BASE_URL#MODEL, replay:FILE.
        #[arg(long)]
        model: Option<String>,
        /// Follow the job and exit non-zero unless it succeeds.
        #[arg(long)]
        wait: bool,
        /// Job id (default: a new UUID v7); re-submitting an id is a no-op.
        #[arg(long)]
        job_id: Option<String>,
        /// Run destructive tool calls (delete, rename) without pausing for approval.
        #[arg(long)]
        auto_approve: bool,
        /// Keep working on the workbench's draft (without it a draft refuses the message with
        /// DRAFT_EXISTS: publish or discard first).
        #[arg(long)]
        continue_draft: bool,
        #[arg(long)]
        json: bool,
    },
    #[command(flatten)]
    Workshop(workshop::WorkshopCommand),
    /// A terminal session on a workbench: type messages, see tool progress and streamed answers;
    /// /publish /discard /rewind ID /regenerate /model SPEC /diff /history /continue /quit.
    Chat { workbench: String },
    /// Context items: the situation text and skills every model call of a workbench carries.
    #[command(subcommand)]
    Context(context_items::ContextCommand),
    /// Stop a job at its next step boundary (USER_CANCELED); the draft stays consistent.
    Cancel {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Approve (or --reject) the destructive call a job is waiting on.
    Approve {
        job: String,
        #[arg(long)]
        reject: bool,
        #[arg(long)]
        json: bool,
    },
    /// Continue a failed or cancelled job from its journal (journaled steps are not redone).
    Resume {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Follow a job's events (from its start) until it finishes.
    Watch {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// List jobs.
    Jobs {
        #[arg(long, value_parser = ["queued", "running", "awaiting_approval", "succeeded", "failed", "cancelled"])]
        state: Option<String>,
        #[arg(long)]
        workbench: Option<String>,
        /// Storage size and job counts instead of the list.
        #[arg(long)]
        stats: bool,
        #[arg(long)]
        json: bool,
    },
    /// Show one job.
    Job {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Run the demo: start everything, run a job on a sample workbench, show the draft diff.
    Demo {
        /// Keep the system running after the demo (Ctrl-C to stop).
        #[arg(long)]
        keep: bool,
    },
}

#[derive(Subcommand)]
enum WbCommand {
    /// Create a workbench.
    Create { name: String },
    /// List workbenches.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Add files to a workbench's published state.
    Add {
        name: String,
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Path inside the workbench (one file only).
        #[arg(long = "as")]
        as_path: Option<String>,
    },
    /// List files.
    Ls {
        name: String,
        #[arg(long)]
        draft: bool,
        #[arg(long)]
        json: bool,
    },
    /// Print a file's content.
    Cat {
        name: String,
        path: String,
        #[arg(long)]
        draft: bool,
    },
    /// Set the workbench's default model (recorded in its conversation).
    SetModel { name: String, spec: String },
    /// Write a workbench's files into a folder.
    Export {
        name: String,
        dir: PathBuf,
        #[arg(long)]
        draft: bool,
    },
}

#[derive(Subcommand)]
enum DraftCommand {
    /// What the draft changes: per file a unified diff (text), rows (CSV), cells (xlsx),
    /// paragraphs (docx) or slide text (pptx), with counts and a bounded sample.
    Diff {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Make the draft the published state (the previous one becomes a checkpoint).
    Publish { name: String },
    /// Throw the draft away.
    Discard { name: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let settings = Settings::load(
        cli.config.as_deref(),
        FlagOverrides {
            nats_url: cli.nats.clone(),
            data_dir: cli.data.clone(),
            http_addr: cli.http.clone(),
        },
    )?;
    let server_command = matches!(
        cli.command,
        Command::Up | Command::Coordinator | Command::Worker { .. } | Command::Dashboard
    );
    let telemetry = telemetry::init(
        if server_command { "info" } else { "warn" },
        settings.otlp_endpoint().as_deref(),
        &trace_service(&cli.command),
    );
    let outcome = match cli.command {
        Command::Up => up(&settings).await,
        Command::Dashboard => dashboard(&settings).await,
        Command::Coordinator => coordinator(&settings).await,
        Command::Worker { pool } => worker(&settings, &pool).await,
        Command::Demo { keep } => demo::run(&settings, keep).await,
        command => {
            let client = Client {
                nats: system::connect(&settings.client_nats_url()?).await?,
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
        Command::Up | Command::Demo { .. } => "atelier".to_string(),
        Command::Coordinator => "atelier-coordinator".to_string(),
        Command::Worker { pool } => format!("atelier-worker-{pool}"),
        Command::Dashboard => "atelier-dashboard".to_string(),
        _ => "atelier-cli".to_string(),
    }
}

async fn dashboard(settings: &Settings) -> anyhow::Result<ExitCode> {
    let url = settings.client_nats_url()?;
    let dashboard = dashboard::start(&url, settings.dashboard()?).await?;
    println!(
        "dashboard at {} (NATS {url}); Ctrl-C to stop",
        dashboard.url()
    );
    system::shutdown_signal().await;
    dashboard.stop();
    Ok(ExitCode::SUCCESS)
}

async fn up(settings: &Settings) -> anyhow::Result<ExitCode> {
    let system = system::System::start(settings).await?;
    println!("atelier is up; NATS at {}", system.url());
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

async fn coordinator(settings: &Settings) -> anyhow::Result<ExitCode> {
    let url = settings
        .nats_url
        .clone()
        .context("`atelier coordinator` needs --nats URL (or ATELIER_NATS_URL)")?;
    let handle = system::coordinator(system::connect(&url).await?, settings).await?;
    system::shutdown_signal().await;
    handle.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn worker(settings: &Settings, pool: &str) -> anyhow::Result<ExitCode> {
    let url = settings
        .nats_url
        .clone()
        .context("`atelier worker` needs --nats URL (or ATELIER_NATS_URL)")?;
    let pool = Pool::parse(pool).context("--pool must be tabular or office")?;
    let handle = system::worker(system::connect(&url).await?, settings, pool).await?;
    tracing::info!(worker = handle.worker_id(), "worker ready");
    system::shutdown_signal().await;
    handle.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn client_command(client: &Client, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Wb(command) => wb_command(client, command).await?,
        Command::Draft(command) => draft_command(client, command).await?,
        Command::Submit {
            workbench,
            message,
            model,
            wait,
            job_id,
            auto_approve,
            continue_draft,
            json,
        } => {
            client.check_message(&workbench, continue_draft).await?;
            let submit = client::Submission {
                workbench: &workbench,
                message: &message,
                model,
                job_id,
                auto_approve,
                continue_draft,
            };
            let job_id = client.submit(submit).await?;
            if !wait {
                if json {
                    print_json(&serde_json::json!({"job_id": job_id}))?;
                } else {
                    println!("{job_id}");
                }
                return Ok(ExitCode::SUCCESS);
            }
            if !json {
                println!("submitted job {job_id}");
            }
            return client.follow(&job_id, json).await;
        }
        Command::Workshop(command) => return workshop::run(client, command).await,
        Command::Context(command) => context_items::run(client, command).await?,
        Command::Chat { workbench } => return chat::run(client, &workbench).await,
        Command::Watch { job, json } => {
            let state = client
                .watch(
                    &job,
                    if json {
                        WatchOutput::Json
                    } else {
                        WatchOutput::Human
                    },
                )
                .await?;
            return Ok(exit_for(state));
        }
        Command::Cancel { job, json } => show_job(&client.cancel(&job).await?, json)?,
        Command::Approve { job, reject, json } => {
            show_job(&client.approve(&job, reject, None).await?, json)?
        }
        Command::Resume { job, json } => show_job(&client.resume(&job).await?, json)?,
        Command::Jobs {
            stats: true, json, ..
        } => print_stats(&client.stats().await?, json)?,
        Command::Jobs {
            state,
            workbench,
            json,
            ..
        } => {
            let state =
                state.and_then(|name| JobState::ALL.into_iter().find(|s| s.as_str() == name));
            let jobs = client.jobs(state, workbench).await?;
            if json {
                print_json(&jobs)?;
            } else {
                print_jobs(&jobs);
            }
        }
        Command::Job { id, json } => show_job(&client.job(&id).await?, json)?,
        Command::Up
        | Command::Coordinator
        | Command::Dashboard
        | Command::Worker { .. }
        | Command::Demo { .. } => {}
    }
    Ok(ExitCode::SUCCESS)
}

fn show_job(view: &JobView, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(view);
    }
    print_job(view);
    Ok(())
}

fn exit_for(state: JobState) -> ExitCode {
    if state == JobState::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn wb_command(client: &Client, command: WbCommand) -> anyhow::Result<()> {
    match command {
        WbCommand::Create { name } => {
            let info = client.create(&name).await?;
            println!("created workbench {}", info.name);
        }
        WbCommand::List { json } => {
            let list = client.workbenches().await?;
            if json {
                return print_json(&list);
            }
            println!(
                "{:<24} {:>6} {:>6} {:>12}",
                "WORKBENCH", "FILES", "DRAFT", "CHECKPOINTS"
            );
            for wb in list {
                println!(
                    "{:<24} {:>6} {:>6} {:>12}",
                    wb.name,
                    wb.file_count,
                    if wb.has_draft { "yes" } else { "-" },
                    wb.checkpoints
                );
            }
        }
        WbCommand::Add {
            name,
            files,
            as_path,
        } => {
            let listing = client.add(&name, &files, as_path.as_deref()).await?;
            println!("{} now has {} published file(s)", name, listing.files.len());
        }
        WbCommand::Ls { name, draft, json } => {
            let listing = client.ls(&name, draft).await?;
            if json {
                return print_json(&listing);
            }
            print_listing(&listing);
        }
        WbCommand::Cat { name, path, draft } => {
            let file = client.cat(&name, &path, draft).await?;
            use std::io::Write;
            std::io::stdout().write_all(&file.content)?;
        }
        WbCommand::SetModel { name, spec } => {
            let set = client.set_model(&name, &spec).await?;
            println!("{name} now uses {} (message {})", set.model, set.event_id);
        }
        WbCommand::Export { name, dir, draft } => {
            let written = client.export(&name, &dir, draft).await?;
            println!("wrote {} file(s) under {}", written.len(), dir.display());
        }
    }
    Ok(())
}

async fn draft_command(client: &Client, command: DraftCommand) -> anyhow::Result<()> {
    match command {
        DraftCommand::Diff { name, json } => {
            let review = client.review(&name).await?;
            if json {
                return print_json(&review);
            }
            print_review(&review);
        }
        DraftCommand::Publish { name } => {
            let published = client.publish(&name).await?;
            println!(
                "published {} file(s) in {}; the previous state is checkpoint {}",
                published.files.len(),
                name,
                published.checkpoint_id
            );
        }
        DraftCommand::Discard { name } => {
            client.discard(&name).await?;
            println!("discarded the draft of {name}");
        }
    }
    Ok(())
}
