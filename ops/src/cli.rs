//! The command line: every subcommand and flag of `atelier`.

use atelier_messages::provider::Priority;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "atelier",
    version,
    about = "Durable, resumable LLM agent jobs over workbenches of office and tabular files"
)]
pub(crate) struct Cli {
    /// NATS server URL (default: the one `atelier up` started for this data directory).
    #[arg(long, global = true, env = "ATELIER_NATS_URL")]
    pub(crate) nats: Option<String>,
    /// NATS credentials file (user JWT + nkey seed, e.g. from `nsc generate creds`) for a server
    /// in operator mode; used by every command that connects. Not with a user in the URL.
    #[arg(long, global = true, env = "ATELIER_NATS_CREDS", value_name = "FILE")]
    pub(crate) creds: Option<PathBuf>,
    /// Data directory (sled, blobs, embedded NATS store). Default `.atelier`.
    #[arg(long, global = true)]
    pub(crate) data: Option<PathBuf>,
    /// Configuration file (default `./atelier.toml` when present).
    #[arg(long, global = true, env = "ATELIER_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Dashboard address for `up` and `dashboard` (default 127.0.0.1:7474; beyond loopback it
    /// needs `dashboard_token` / ATELIER_DASHBOARD_TOKEN).
    #[arg(long, global = true)]
    pub(crate) http: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run everything in one process: nats-server (unless --nats), coordinator, one worker per pool.
    Up {
        /// Size pools on their own: POOL=MIN..MAX[,POOL=MIN..MAX] (e.g. tabular=1..4), each
        /// worker a process of its own (config: [autoscale.POOL] min/max).
        #[arg(long, value_name = "POOL=MIN..MAX,...")]
        autoscale: Option<String>,
    },
    /// Run a coordinator (job intake, orchestrators, draft store, control plane).
    Coordinator,
    /// Serve the ops dashboard, its JSON API and /metrics for a running system (--nats, --http).
    Dashboard,
    /// Run a tool worker for one pool; start more processes to scale out.
    Worker {
        #[arg(long, value_parser = ["tabular", "office"])]
        pool: String,
        /// Also drain and exit when standard input closes (set by the autoscaler, so that its
        /// workers never outlive it).
        #[arg(long, hide = true)]
        supervised: bool,
    },
    /// Supervise one pool's worker processes on this host, sized between --min and --max by
    /// its demand (busy slots, calls waiting for a slot).
    Pool {
        #[arg(long, value_parser = ["tabular", "office"])]
        pool: String,
        #[arg(long, default_value_t = 1)]
        min: usize,
        #[arg(long)]
        max: usize,
    },
    /// Worker pools: workers, busy and total slots, calls waiting, autoscaler bounds and decisions.
    Workers {
        #[arg(long)]
        json: bool,
    },
    /// Workbenches.
    #[command(subcommand)]
    Wb(WbCommand),
    /// The draft of a workbench.
    #[command(subcommand)]
    Draft(DraftCommand),
    /// Submit a job: a message for the agent to carry out on a workbench.
    Submit(SubmitArgs),
    #[command(flatten)]
    Workshop(crate::workshop::WorkshopCommand),
    /// Run a tool (or a workflow file) on a workbench without a model, as a journaled job
    /// writing into the draft like an agent's calls.
    Run(crate::batch::RunArgs),
    /// Batches: one action (message, tool or workflow) over many workbenches or files.
    #[command(subcommand)]
    Batch(crate::batch::BatchCommand),
    /// A terminal session on a workbench: type messages, see tool progress and streamed answers;
    /// /publish /discard /rewind ID /regenerate /model SPEC /diff /history /continue /quit.
    Chat { workbench: String },
    /// Context items: the situation text and skills every model call of a workbench carries.
    #[command(subcommand)]
    Context(crate::context_items::ContextCommand),
    /// Stop a job at its next step boundary (USER_CANCELED); the draft stays consistent.
    Cancel {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Approve (or --reject) the call a job is waiting on.
    Approve {
        job: String,
        #[arg(long)]
        reject: bool,
        /// Recorded with the decision; a rejection's reason is told to the model.
        #[arg(long)]
        reason: Option<String>,
        /// The call decided on (refused if the job now waits for another).
        #[arg(long = "call")]
        call_id: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Continue a failed or cancelled job from its journal (journaled steps are not redone).
    Resume {
        job: String,
        /// A larger budget for the whole job (what it spent before included): how a job
        /// stopped with BUDGET_EXCEEDED goes on.
        #[command(flatten)]
        budget: crate::client::BudgetArgs,
        #[arg(long)]
        json: bool,
    },
    /// Follow a job's events (from its start) until it finishes.
    Watch {
        job: String,
        #[arg(long)]
        json: bool,
        /// Stop following after this many seconds (exit status 124; the job goes on).
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
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
    /// Run a directory of tasks (`DIR/NAME/task.toml`, or splits of them:
    /// `DIR/SPLIT/NAME/task.toml`, reported split by split) against the running system and
    /// score each run's draft with the task's checks (docs/eval.md); non-zero unless every run
    /// passes.
    Eval {
        dir: PathBuf,
        /// Model spec for every job (as for `submit --model`).
        #[arg(long)]
        model: String,
        /// Runs per task.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        runs: u32,
        /// Only these tasks (folder names, from any split; repeatable).
        #[arg(long = "task", value_name = "NAME")]
        tasks: Vec<String>,
        /// Seconds a run may take before its job is cancelled and the run fails (EVAL_TIMEOUT).
        #[arg(long, default_value_t = 1800)]
        timeout: u64,
        /// Keep each run's draft (default: discard it once scored).
        #[arg(long)]
        keep: bool,
        /// Append each run's outcome to FILE (JSON lines) as it ends; run again with the same
        /// FILE, only the runs it lacks are run, and the report covers them all.
        #[arg(long, value_name = "FILE")]
        results: Option<PathBuf>,
        /// Runs at once (a model server with several slots, or a provider's limits, decide
        /// what helps).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
        parallel: u16,
        #[arg(long)]
        json: bool,
    },
    /// Serve the workbenches to an MCP client (Claude Desktop and Code, Cursor, VS Code, …) on
    /// stdio: the tools, `list_workbenches`, `draft_diff`, `submit_job`, and the files as
    /// resources; writes land in drafts (docs/mcp.md).
    Mcp {
        /// Serve this workbench only (its tools take no `workbench` argument).
        #[arg(long)]
        workbench: Option<String>,
    },
    /// Print one Atelier message (MessagePack or JSON, on stdin) as JSON: what `nats` shows
    /// of a MessagePack event stream through `--translate 'atelier decode'`.
    Decode,
    /// Run the demo: start everything, run a job on a sample workbench, show the draft diff.
    Demo {
        /// Keep the system running after the demo (Ctrl-C to stop).
        #[arg(long)]
        keep: bool,
    },
}

impl Command {
    /// A long-running piece of the system (it logs at `info` and runs until stopped), as
    /// opposed to a command that prints and exits.
    pub(crate) fn is_server(&self) -> bool {
        matches!(
            self,
            Command::Up { .. }
                | Command::Coordinator
                | Command::Worker { .. }
                | Command::Dashboard
                | Command::Pool { .. }
        )
    }
}

#[derive(Subcommand)]
pub(crate) enum WbCommand {
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
    /// Set which action classes wait for approval in the workbench's jobs (CLASS=MODE).
    Approvals {
        name: String,
        #[arg(required = true, value_name = "CLASS=MODE")]
        approvals: Vec<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum DraftCommand {
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

/// `atelier submit`.
#[derive(Debug, clap::Args)]
pub(crate) struct SubmitArgs {
    pub(crate) workbench: String,
    pub(crate) message: String,
    /// Model spec: openai:MODEL, openai-compat:BASE_URL#MODEL, replay:FILE.
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Follow the job and exit non-zero unless it succeeds.
    #[arg(long)]
    pub(crate) wait: bool,
    /// Job id (default: a new UUID v7); re-submitting an id is a no-op.
    #[arg(long)]
    pub(crate) job_id: Option<String>,
    /// Run every tool call without pausing for approval.
    #[arg(long)]
    pub(crate) auto_approve: bool,
    /// Which action classes wait for approval: CLASS=MODE (additive|destructive = ask|auto),
    /// repeatable; default: the workbench's policy, else destructive calls ask.
    #[arg(long = "approve", value_name = "CLASS=MODE")]
    pub(crate) approvals: Vec<String>,
    /// Keep working on the workbench's draft (without it a draft refuses the message with
    /// DRAFT_EXISTS: publish or discard first).
    #[arg(long)]
    pub(crate) continue_draft: bool,
    /// Stop the job with JOB_TIME_LIMIT this many seconds after it starts (default: the
    /// operator's job_time_limit_secs, 1 h unless set).
    #[arg(long, value_name = "SECS")]
    pub(crate) time_limit: Option<u64>,
    /// How soon the job's model calls go when their profile's limits are saturated (default
    /// normal).
    #[arg(long, value_parser = crate::client::parse_priority)]
    pub(crate) priority: Option<Priority>,
    #[command(flatten)]
    pub(crate) budget: crate::client::BudgetArgs,
    #[arg(long)]
    pub(crate) json: bool,
}
