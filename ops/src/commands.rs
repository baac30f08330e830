//! The client commands: workbenches, drafts and jobs over NATS, printed for people or as JSON.

use std::process::ExitCode;
use std::time::Duration;

use atelier_messages::job::{JobState, JobView};
use atelier_messages::store::FileBytes;

use crate::cli::{Command, DraftCommand, SubmitArgs, WbCommand};
use crate::client::{self, Client, Decision, WatchOutput};
use crate::output::{
    print_job, print_jobs, print_json, print_listing, print_pools, print_review, print_stats, shown,
};
use crate::{batch, chat, context_items, eval, workshop};

pub(crate) async fn client_command(client: &Client, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Wb(command) => wb_command(client, command).await?,
        Command::Workers { json } => {
            let pools = crate::dashboard::workers::pools(&client.nats).await;
            print_pools(&pools, json)?;
        }
        Command::Draft(command) => draft_command(client, command).await?,
        Command::Submit(args) => return submit(client, args).await,
        Command::Workshop(command) => return workshop::run(client, command).await,
        Command::Run(args) => return batch::run(client, args).await,
        Command::Batch(command) => return batch::batch(client, command).await,
        Command::Eval {
            dir,
            model,
            runs,
            tasks,
            timeout,
            keep,
            results,
            parallel,
            json,
        } => {
            let args = eval::EvalArgs {
                dir,
                model,
                runs,
                tasks,
                timeout: std::time::Duration::from_secs(timeout),
                keep,
                json,
                results,
                parallel: usize::from(parallel),
            };
            return eval::run(client, args).await;
        }
        Command::Context(command) => context_items::run(client, command).await?,
        Command::Chat { workbench } => return chat::run(client, &workbench).await,
        Command::Watch { job, json, timeout } => return watch(client, &job, json, timeout).await,
        Command::Cancel { job, json } => show_job(&client.cancel(&job).await?, json)?,
        Command::Approve {
            job,
            reject,
            reason,
            call_id,
            json,
        } => {
            let decision = Decision {
                reject,
                reason,
                call_id,
            };
            show_job(&client.approve(&job, decision).await?, json)?
        }
        Command::Resume { job, budget, json } => {
            show_job(&client.resume(&job, budget.budget()).await?, json)?
        }
        Command::Jobs {
            stats: true, json, ..
        } => print_stats(&client.stats().await?, json)?,
        Command::Jobs {
            state,
            workbench,
            json,
            ..
        } => list_jobs(client, state, workbench, json).await?,
        Command::Job { id, json } => show_job(&client.job(&id).await?, json)?,
        Command::Mcp { workbench } => {
            return crate::mcp::serve_stdio(client.nats.clone(), workbench).await;
        }
        Command::Up { .. }
        | Command::Coordinator
        | Command::Dashboard
        | Command::Worker { .. }
        | Command::Pool { .. }
        | Command::Demo { .. }
        | Command::Decode => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// `atelier submit`: the job's id, or with `--wait` its run followed to the end.
async fn submit(client: &Client, args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let approvals = client::parse_approvals(&args.approvals)?;
    client
        .check_message(&args.workbench, args.continue_draft, args.model.as_deref())
        .await?;
    let submit = client::Submission {
        workbench: &args.workbench,
        message: &args.message,
        model: args.model,
        job_id: args.job_id,
        auto_approve: args.auto_approve,
        continue_draft: args.continue_draft,
        approvals,
        workflow: None,
        time_limit_secs: args.time_limit,
        priority: args.priority,
        budget: args.budget.budget(),
    };
    let job_id = client.submit(submit).await?;
    if !args.wait {
        if args.json {
            print_json(&serde_json::json!({"job_id": job_id}))?;
        } else {
            println!("{}", shown(&job_id));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.json {
        println!("submitted job {}", shown(&job_id));
    }
    client.follow(&job_id, args.json).await
}

/// `atelier watch`: the job's events until its run ends, or until `timeout` seconds.
async fn watch(
    client: &Client,
    job: &str,
    json: bool,
    timeout: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let output = if json {
        WatchOutput::Json
    } else {
        WatchOutput::Human
    };
    let watching = client.watch(job, output);
    let Some(secs) = timeout else {
        return Ok(exit_for(watching.await?));
    };
    match tokio::time::timeout(Duration::from_secs(secs), watching).await {
        Ok(state) => Ok(exit_for(state?)),
        Err(_) => {
            eprintln!(
                "error: job {job} had not finished after {secs} s; it goes on (`atelier job {job}` shows it, `atelier watch {job}` follows it again)"
            );
            Ok(ExitCode::from(WATCH_TIMED_OUT))
        }
    }
}

/// `atelier jobs`: the jobs, optionally of one state or workbench.
async fn list_jobs(
    client: &Client,
    state: Option<String>,
    workbench: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let state = state.and_then(|name| JobState::ALL.into_iter().find(|s| s.as_str() == name));
    let jobs = client.jobs(state, workbench).await?;
    if json {
        print_json(&jobs)
    } else {
        print_jobs(&jobs);
        Ok(())
    }
}

fn show_job(view: &JobView, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(view);
    }
    print_job(view);
    Ok(())
}

/// The exit status of a `watch` that stopped at its `--timeout` (as `timeout(1)`'s).
const WATCH_TIMED_OUT: u8 = 124;

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
            println!("created workbench {}", shown(&info.name));
        }
        WbCommand::Approvals {
            name,
            approvals,
            json,
        } => {
            let policy = client::parse_approvals(&approvals)?.unwrap_or_default();
            let info = client.set_approvals(&name, policy).await?;
            if json {
                return print_json(&info);
            }
            println!(
                "{}: additive calls {:?}, destructive calls {:?}",
                shown(&info.name),
                policy.additive,
                policy.destructive
            );
        }
        WbCommand::List { json } => {
            let list = client.workbenches().await?;
            if json {
                return print_json(&list);
            }
            println!(
                "{:<24} {:>6} {:>12} {:>12}",
                "WORKBENCH", "FILES", "DRAFT", "CHECKPOINTS"
            );
            let now = atelier_messages::now_ms();
            for wb in list {
                let draft = match (&wb.draft, wb.has_draft) {
                    (Some(origin), _) => format!(
                        "{}{}",
                        atelier_messages::describe_age(now.saturating_sub(origin.started_at_ms)),
                        if origin.stale { " old" } else { "" }
                    ),
                    (None, true) => "yes".to_string(),
                    (None, false) => "-".to_string(),
                };
                println!(
                    "{:<24} {:>6} {:>12} {:>12}",
                    shown(&wb.name),
                    wb.file_count,
                    draft,
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
            println!(
                "{} now has {} published file(s)",
                shown(&name),
                listing.files.len()
            );
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
            write_to_stdout(client, &name, &file).await?;
        }
        WbCommand::SetModel { name, spec } => {
            let set = client.set_model(&name, &spec).await?;
            println!(
                "{} now uses {} (message {})",
                shown(&name),
                shown(&set.model),
                shown(&set.event_id)
            );
        }
        WbCommand::Export { name, dir, draft } => {
            let written = client.export(&name, &dir, draft).await?;
            println!("wrote {} file(s) under {}", written.len(), dir.display());
        }
    }
    Ok(())
}

/// Writes a file's content to stdout (a large one through a temporary file, never whole in memory).
async fn write_to_stdout(client: &Client, workbench: &str, file: &FileBytes) -> anyhow::Result<()> {
    use std::io::Write;
    if file.blob.is_none() {
        std::io::stdout().write_all(&file.content)?;
        return Ok(());
    }
    let temp = tempfile::tempdir()?;
    let local = temp.path().join("content");
    client.save(workbench, file, &local).await?;
    std::io::copy(
        &mut std::fs::File::open(&local)?,
        &mut std::io::stdout().lock(),
    )?;
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
                shown(&name),
                shown(&published.checkpoint_id)
            );
        }
        DraftCommand::Discard { name } => {
            client.discard(&name).await?;
            println!("discarded the draft of {}", shown(&name));
        }
    }
    Ok(())
}
