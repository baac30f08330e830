//! `atelier run` (tool calls and workflow files without a model) and `atelier batch …` (one
//! action over many targets), over job submission and the `atelier.batch.*` verbs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use atelier_coordinator::templates::{self, Vars};
use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::batch::{
    BatchAction, BatchSettled, BatchState, BatchView, CancelBatch, FailureTolerance, GetBatch,
    ListBatches, RetryBatch, SettleBatch, SubmitBatch, TargetSet, UpdateBatch,
};
use atelier_messages::workflow::{Workflow, WorkflowStep};
use clap::{Args, Subcommand};
use figment::Figment;
use figment::providers::{Format as _, Toml};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;

use crate::client::{self, Client};
use crate::output::print_json;

/// How often `batch watch` looks at the batch.
const WATCH_EVERY: Duration = Duration::from_millis(500);

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
    /// Batch id (default: a new UUID v7); re-submitting an id answers the existing batch.
    #[arg(long)]
    batch_id: Option<String>,
    /// Follow the batch with a progress bar until it ends.
    #[arg(long)]
    wait: bool,
    #[arg(long)]
    json: bool,
}

/// A workflow file.
#[derive(Deserialize)]
struct WorkflowFile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    vars: BTreeMap<String, String>,
    steps: Vec<WorkflowStep>,
}

/// The workflow of a file (or one tool call) and its variables (file defaults, then --set).
fn load_workflow(
    tool: Option<&str>,
    args: &str,
    workflow: &WorkflowArgs,
) -> anyhow::Result<(Workflow, Vars)> {
    let mut vars = Vars::new();
    let workflow_value = match (&workflow.workflow, tool) {
        (Some(path), _) => {
            let file: WorkflowFile = Figment::from(Toml::file_exact(path))
                .extract()
                .with_context(|| {
                    format!(
                        "VALIDATION_FAILED: cannot read the workflow {}",
                        path.display()
                    )
                })?;
            vars.extend(file.vars);
            Workflow {
                name: file.name,
                steps: file.steps,
            }
        }
        (None, Some(tool)) => Workflow::single(
            tool,
            serde_json::from_str(args)
                .with_context(|| format!("VALIDATION_FAILED: --args is not JSON: {args}"))?,
        ),
        (None, None) => bail!("VALIDATION_FAILED: name a tool or pass --workflow FILE"),
    };
    for set in &workflow.sets {
        let Some((name, value)) = set.split_once('=') else {
            bail!("VALIDATION_FAILED: --set {set:?} must be NAME=VALUE");
        };
        vars.insert(name.trim().to_string(), value.to_string());
    }
    Ok((workflow_value, vars))
}

/// The workflow's steps rendered once per row (each row's values over `vars`), in row order.
fn render_rows(workflow: &Workflow, vars: &Vars, rows: &[Vars]) -> anyhow::Result<Workflow> {
    let mut steps = Vec::new();
    for row in rows {
        let mut row_vars = vars.clone();
        row_vars.extend(row.clone());
        let rendered = templates::render_workflow(workflow, &row_vars).map_err(client::coded)?;
        steps.extend(rendered.steps);
    }
    Ok(Workflow {
        name: workflow.name.clone(),
        steps,
    })
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

/// The rows of a CSV file with a header, as variables by column name.
fn read_rows(path: &Path) -> anyhow::Result<Vec<Vars>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("FILE_READ_FAILED: cannot read {}", path.display()))?;
    // Spreadsheet programs often start a UTF-8 CSV with a byte order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut records = parse_csv(text).into_iter();
    let Some(header) = records.next() else {
        bail!("VALIDATION_FAILED: {} has no header row", path.display());
    };
    let mut rows = Vec::new();
    for (number, record) in records.enumerate() {
        if record.len() != header.len() {
            bail!(
                "VALIDATION_FAILED: row {} of {} has {} fields; the header has {}",
                number + 2,
                path.display(),
                record.len(),
                header.len()
            );
        }
        rows.push(header.iter().cloned().zip(record).collect());
    }
    if rows.is_empty() {
        bail!("VALIDATION_FAILED: {} has no rows", path.display());
    }
    Ok(rows)
}

/// Splits CSV text (RFC 4180: quoted fields, doubled quotes, CRLF) into records, skipping
/// empty lines.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                if record.iter().any(|field| !field.is_empty()) || record.len() > 1 {
                    records.push(std::mem::take(&mut record));
                }
                record.clear();
            }
            (false, c) => field.push(c),
        }
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    records
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
                .call(&ListBatches {
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

/// Follows the batch until it ends: a progress bar (done/total, rate, ETA) on a terminal.
async fn watch(client: &Client, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut view = status(client, id).await?;
    let bar = if json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(view.counts.total)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "[{elapsed_precise}] {bar:30} {pos}/{len} {per_sec} ETA {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    while !view.state.is_terminal() {
        update_bar(&bar, &view);
        tokio::time::sleep(WATCH_EVERY).await;
        view = status(client, id).await?;
    }
    update_bar(&bar, &view);
    bar.finish();
    show(&view, json)?;
    Ok(if view.state == BatchState::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn update_bar(bar: &ProgressBar, view: &BatchView) {
    bar.set_length(view.counts.total);
    bar.set_position(view.counts.done());
    bar.set_message(format!(
        "{} ok, {} failed, {} running",
        view.counts.succeeded, view.counts.failed, view.counts.running
    ));
}

fn show(view: &BatchView, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(view);
    }
    let counts = &view.counts;
    println!("batch        {}", view.batch_id);
    println!("state        {}", view.state);
    println!("action       {}", view.action);
    println!(
        "targets      {} total: {} succeeded, {} failed, {} cancelled, {} running, {} queued",
        counts.total,
        counts.succeeded,
        counts.failed,
        counts.cancelled,
        counts.running,
        counts.queued
    );
    let tolerance = view
        .tolerate_failures
        .map_or("any".to_string(), |tolerance| tolerance.to_string());
    println!(
        "concurrency  {}; failures tolerated: {tolerance}",
        view.concurrency
    );
    if let Some(error) = &view.error {
        println!("error        {error}");
    }
    if !view.failures.is_empty() {
        println!("failed targets:");
    }
    for failure in &view.failures {
        let file = failure
            .file
            .as_deref()
            .map(|file| format!(" {file}"))
            .unwrap_or_default();
        let job = failure.job_id.as_deref().unwrap_or("-");
        let error = failure
            .error
            .as_ref()
            .map_or(String::new(), ToString::to_string);
        println!(
            "  #{} {}{file} (job {job}): {error}",
            failure.index, failure.workbench
        );
    }
    if counts.failed as usize > view.failures.len() {
        println!(
            "  … {} more (`atelier batch status {} --json`)",
            counts.failed as usize - view.failures.len(),
            view.batch_id
        );
    }
    Ok(())
}

fn print_list(views: &[BatchView]) {
    println!(
        "{:<34} {:<24} {:>7} {:>9} {:>7}  ACTION",
        "BATCH", "STATE", "TOTAL", "SUCCEEDED", "FAILED"
    );
    for view in views {
        println!(
            "{:<34} {:<24} {:>7} {:>9} {:>7}  {}",
            view.batch_id,
            view.state,
            view.counts.total,
            view.counts.succeeded,
            view.counts.failed,
            view.action
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_keep_quoted_commas_quotes_and_newlines() {
        let text = "name,total\r\n\"ACME, Inc.\",\"12\"\n\"say \"\"hi\"\"\",\"a\nb\"\n\n";
        let records = parse_csv(text);
        assert_eq!(
            records,
            vec![
                vec!["name".to_string(), "total".to_string()],
                vec!["ACME, Inc.".to_string(), "12".to_string()],
                vec!["say \"hi\"".to_string(), "a\nb".to_string()],
            ]
        );
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_column() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("rows.csv");
        std::fs::write(&path, "\u{feff}customer,total\nACME,1\n")?;
        let rows = read_rows(&path)?;
        assert_eq!(rows[0].get("customer").map(String::as_str), Some("ACME"));
        assert!(read_rows(&dir.path().join("missing.csv")).is_err());
        Ok(())
    }

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
