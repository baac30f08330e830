//! `atelier run` (tool calls and workflow files without a model) and `atelier batch …` (one
//! action over many targets), over job submission and the `atelier.batch.*` verbs. Workflow
//! files live in `workflow_file`, CSV rows in `csv_rows`, showing a batch in `report`.

use atelier_messages::budget::Budget;
use atelier_messages::provider::Priority;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use atelier_coordinator::templates::Vars;
use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::batch::{
    BatchAction, BatchSettled, BatchView, CancelBatch, FailureTolerance, GetBatch, ListBatches,
    RetryBatch, SettleBatch, SubmitBatch, TargetSet, UpdateBatch,
};
use clap::{Args, Subcommand};

use crate::client::{self, Client};
use crate::output::print_json;

mod csv_rows;
mod report;
mod workflow_file;

use csv_rows::read_rows;
use report::{print_list, show, watch};
use workflow_file::{load_workflow, render_rows};

/// `atelier run`: what to run.
#[derive(Args)]
pub struct RunArgs {
    workbench: String,
    /// A tool to call once (e.g. `table_export`); or use --workflow.
    #[arg(required_unless_present = "workflow", conflicts_with = "workflow")]
    tool: Option<String>,
    /// The tool's arguments as a JSON object, sent as written (`{{…}}` in it is literal).
    #[arg(long, default_value = "{}")]
    args: String,
    #[command(flatten)]
    workflow: WorkflowArgs,
    /// A CSV file: the workflow's steps run once per row, its columns as variables.
    #[arg(long, value_name = "CSV", requires = "workflow")]
    rows: Option<PathBuf>,
    /// Follow the job and print its result; exit non-zero unless it succeeds.
    #[arg(long)]
    wait: bool,
    #[arg(long)]
    job_id: Option<String>,
    /// Run every call without pausing for approval.
    #[arg(long)]
    auto_approve: bool,
    /// Keep working on the workbench's draft.
    #[arg(long)]
    continue_draft: bool,
    /// Stop the job with JOB_TIME_LIMIT this many seconds after it starts.
    #[arg(long, value_name = "SECS")]
    time_limit: Option<u64>,
    #[arg(long)]
    json: bool,
}

/// A workflow file and its variables.
#[derive(Args)]
pub struct WorkflowArgs {
    /// A workflow file (TOML: `name`, `[vars]`, `[[steps]]` with `tool`, `args`, `name`).
    #[arg(long, value_name = "FILE")]
    workflow: Option<PathBuf>,
    /// A variable for `{{NAME}}` (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    sets: Vec<String>,
}

/// `atelier batch …`.
#[derive(Subcommand)]
pub enum BatchCommand {
    /// Start a batch: an action for each target, in parallel across workbenches.
    Submit(Box<SubmitArgs>),
    /// A batch's counts, state and failed targets.
    Status {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Every batch, newest first.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Follow a batch with a progress bar until it ends; non-zero unless it succeeded.
    Watch {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Stop dispatching; running children are cancelled at their next step.
    Cancel {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Run the failed targets again (each as a new child job).
    Retry {
        id: String,
        #[arg(long)]
        wait: bool,
        #[arg(long)]
        json: bool,
    },
    /// Change a running batch's concurrency.
    Update {
        id: String,
        #[arg(long)]
        concurrency: u32,
        #[arg(long)]
        json: bool,
    },
    /// Publish the drafts of the workbenches whose targets succeeded.
    Publish {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Discard the drafts of the workbenches whose targets succeeded.
    Discard {
        id: String,
        #[arg(long)]
        json: bool,
    },
}

/// `atelier batch submit`.
#[derive(Args)]
pub struct SubmitArgs {
    /// Target workbenches: a glob (`client-*`) or a comma-separated list (repeatable).
    #[arg(long, value_name = "GLOB|LIST", required_unless_present = "workbench")]
    workbenches: Vec<String>,
    /// One workbench whose files are the targets (with --each-file).
    #[arg(long, requires = "each_file", conflicts_with = "workbenches")]
    workbench: Option<String>,
    /// The files of --workbench that are targets (`*.docx`, `in/**/*.csv`).
    #[arg(long, value_name = "GLOB", requires = "workbench")]
    each_file: Option<String>,
    /// An agent job per target with this message (`{{workbench}}`, `{{file}}` filled in).
    #[arg(long, required_unless_present_any = ["tool", "workflow"])]
    message: Option<String>,
    /// Model spec for --message.
    #[arg(long, requires = "message")]
    model: Option<String>,
    /// A tool call per target, without a model.
    #[arg(long, conflicts_with = "message")]
    tool: Option<String>,
    /// The tool's arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    args: String,
    #[command(flatten)]
    workflow: WorkflowArgs,
    /// Targets in flight at once.
    #[arg(long)]
    concurrency: Option<u32>,
    /// Failed targets tolerated (`3` or `5%`) before the batch stops and fails.
    #[arg(long, value_name = "N|P%")]
    tolerate_failures: Option<String>,
    #[arg(long)]
    auto_approve: bool,
    /// A target whose workbench has a draft keeps working on it.
    #[arg(long)]
    continue_draft: bool,
    /// Stop each target's job with JOB_TIME_LIMIT this many seconds after it starts.
    #[arg(long, value_name = "SECS")]
    time_limit: Option<u64>,
    /// How soon the targets' model calls go when their profile's limits are saturated
    /// (default low: after people's messages).
    #[arg(long, value_parser = crate::client::parse_priority)]
    priority: Option<Priority>,
    /// What all the targets together may spend: reached, no new target starts and the batch
    /// ends budget_exhausted.
    #[command(flatten)]
    budget: crate::client::BudgetArgs,
    /// Batch id (default: a new UUID v7); re-submitting an id answers the existing batch.
    #[arg(long)]
    batch_id: Option<String>,
    /// Follow the batch with a progress bar until it ends.
    #[arg(long)]
    wait: bool,
    #[arg(long)]
    json: bool,
}

/// `atelier run`.
pub async fn run(client: &Client, args: RunArgs) -> anyhow::Result<ExitCode> {
    let (workflow, vars) = load_workflow(args.tool.as_deref(), &args.args, &args.workflow)?;
    let rows = match &args.rows {
        Some(path) => read_rows(path)?,
        None => vec![Vars::new()],
    };
    // A workflow file is a template; a single tool's --args is sent as written.
    let workflow = match args.workflow.workflow.is_some() {
        true => render_rows(&workflow, &vars, &rows)?,
        false if !args.workflow.sets.is_empty() => bail!(
            "VALIDATION_FAILED: --set fills a workflow file's {{{{variables}}}}; a tool's --args \
             is sent as written, so put the values in it"
        ),
        false => workflow,
    };
    workflow.validate().map_err(client::coded)?;
    // The coordinator's rule, checked here first: a draft does not refuse a run that only reads.
    let continue_draft = args.continue_draft || atelier_agents::catalog::only_reads(&workflow);
    client
        .check_message(&args.workbench, continue_draft, None)
        .await?;
    let message = workflow.describe();
    let job_id = client
        .submit(client::Submission {
            workbench: &args.workbench,
            message: &message,
            model: None,
            job_id: args.job_id,
            auto_approve: args.auto_approve,
            continue_draft,
            approvals: None,
            workflow: Some(workflow),
            time_limit_secs: args.time_limit,
            priority: None,
            budget: Budget::default(),
        })
        .await?;
    if args.wait {
        return client.follow(&job_id, args.json).await;
    }
    if args.json {
        print_json(&serde_json::json!({"job_id": job_id}))?;
    } else {
        println!("{job_id}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs one batch command.
pub async fn batch(client: &Client, command: BatchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BatchCommand::Submit(args) => submit(client, *args).await,
        BatchCommand::Status { id, json } => {
            let view = status(client, &id).await?;
            show(&view, json)?;
            Ok(ExitCode::SUCCESS)
        }
        BatchCommand::List { json } => {
            let views = client
                .call_listing(&ListBatches {
                    v: PROTOCOL_VERSION,
                })
                .await?;
            if json {
                print_json(&views)?;
            } else {
                print_list(&views);
            }
            Ok(ExitCode::SUCCESS)
        }
        BatchCommand::Watch { id, json } => watch(client, &id, json).await,
        BatchCommand::Cancel { id, json } => {
            let request = CancelBatch {
                v: PROTOCOL_VERSION,
                batch_id: id,
            };
            show(&client.call(&request).await?, json)?;
            Ok(ExitCode::SUCCESS)
        }
        BatchCommand::Retry { id, wait, json } => {
            let request = RetryBatch {
                v: PROTOCOL_VERSION,
                batch_id: id.clone(),
            };
            let view = client.call(&request).await?;
            if wait {
                return watch(client, &id, json).await;
            }
            show(&view, json)?;
            Ok(ExitCode::SUCCESS)
        }
        BatchCommand::Update {
            id,
            concurrency,
            json,
        } => {
            let request = UpdateBatch {
                v: PROTOCOL_VERSION,
                batch_id: id,
                concurrency,
            };
            show(&client.call(&request).await?, json)?;
            Ok(ExitCode::SUCCESS)
        }
        BatchCommand::Publish { id, json } => settle(client, id, true, json).await,
        BatchCommand::Discard { id, json } => settle(client, id, false, json).await,
    }
}

async fn status(client: &Client, id: &str) -> anyhow::Result<BatchView> {
    client
        .call(&GetBatch {
            v: PROTOCOL_VERSION,
            batch_id: id.to_string(),
        })
        .await
}

async fn submit(client: &Client, args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let targets = match (&args.workbench, &args.each_file) {
        (Some(workbench), Some(glob)) => TargetSet::EachFile {
            workbench: workbench.clone(),
            glob: glob.clone(),
        },
        _ => workbench_targets(&args.workbenches)?,
    };
    let action = match &args.message {
        Some(message) => BatchAction::Message {
            message: message.clone(),
            model: args.model.clone(),
        },
        None => {
            let (workflow, vars) = load_workflow(args.tool.as_deref(), &args.args, &args.workflow)?;
            BatchAction::Workflow { workflow, vars }
        }
    };
    let tolerate_failures = args
        .tolerate_failures
        .as_deref()
        .map(FailureTolerance::parse)
        .transpose()
        .map_err(client::coded)?;
    let request = SubmitBatch {
        v: PROTOCOL_VERSION,
        batch_id: args
            .batch_id
            .unwrap_or_else(|| uuid::Uuid::now_v7().simple().to_string()),
        targets,
        action,
        concurrency: args.concurrency,
        tolerate_failures,
        auto_approve: args.auto_approve,
        continue_draft: args.continue_draft,
        time_limit_secs: args.time_limit,
        priority: args.priority,
        budget: args.budget.budget(),
    };
    request.validate().map_err(client::coded)?;
    let view = client.call(&request).await?;
    if args.wait {
        if !args.json {
            println!("batch {} ({} targets)", view.batch_id, view.counts.total);
        }
        return watch(client, &view.batch_id, args.json).await;
    }
    if args.json {
        print_json(&serde_json::json!({"batch_id": view.batch_id}))?;
    } else {
        println!("{}", view.batch_id);
    }
    Ok(ExitCode::SUCCESS)
}

/// `--workbenches`: globs (with `*` or `?`) and comma-separated names.
fn workbench_targets(values: &[String]) -> anyhow::Result<TargetSet> {
    let mut names = Vec::new();
    let mut globs = Vec::new();
    for value in values {
        if value.contains(['*', '?']) {
            globs.push(value.clone());
            continue;
        }
        names.extend(
            value
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_string),
        );
    }
    if globs.len() > 1 {
        bail!("VALIDATION_FAILED: pass one glob in --workbenches (and any number of names)");
    }
    Ok(TargetSet::Workbenches {
        names,
        glob: globs.pop(),
    })
}

async fn settle(
    client: &Client,
    id: String,
    publish: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let settled: BatchSettled = client
        .call(&SettleBatch {
            v: PROTOCOL_VERSION,
            batch_id: id,
            publish,
        })
        .await?;
    if json {
        print_json(&settled)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if publish { "published" } else { "discarded" };
    println!("{verb} {} workbench draft(s)", settled.settled.len());
    for skipped in &settled.skipped {
        println!("  skipped {}: {}", skipped.workbench, skipped.error);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workbench_targets_take_one_glob_and_lists() {
        let set =
            workbench_targets(&["a, b".into(), "client-*".into(), "c".into()]).expect("targets");
        assert_eq!(
            set,
            TargetSet::Workbenches {
                names: vec!["a".into(), "b".into(), "c".into()],
                glob: Some("client-*".into())
            }
        );
        assert!(workbench_targets(&["a*".into(), "b*".into()]).is_err());
    }
}
