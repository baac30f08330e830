//! The client commands: workbenches, drafts and jobs over NATS, printed for people or as JSON.

use std::process::ExitCode;

use atelier_messages::job::{CoordinatorStats, JobState, JobView};
use atelier_messages::store::Listing;

use crate::cli::{Command, DraftCommand, WbCommand};
use crate::client::{self, Client, Decision, WatchOutput};

pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub(crate) async fn client_command(client: &Client, command: Command) -> anyhow::Result<ExitCode> {
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
            approvals,
            json,
        } => {
            let approvals = client::parse_approvals(&approvals)?;
            let job_id = client
                .submit(&workbench, &message, model, job_id, auto_approve, approvals)
                .await?;
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
            let state = client
                .watch(
                    &job_id,
                    if json {
                        WatchOutput::Quiet
                    } else {
                        WatchOutput::Human
                    },
                )
                .await?;
            let view = client.finished_job(&job_id).await?;
            if json {
                print_json(&view)?;
            } else {
                print_job(&view);
            }
            return Ok(exit_for(state));
        }
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

fn print_stats(stats: &CoordinatorStats, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(stats);
    }
    println!("coordinator      {}", stats.coordinator);
    println!("storage          {} bytes", stats.storage_bytes);
    println!("journal entries  {}", stats.journal_entries);
    for (state, count) in &stats.jobs_by_state {
        println!("jobs {state:<12}{count}");
    }
    Ok(())
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
                info.name, policy.additive, policy.destructive
            );
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
            let diff = client.diff(&name).await?;
            if json {
                return print_json(&diff);
            }
            crate::demo::print_diff(&diff);
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

fn print_listing(listing: &Listing) {
    println!("{:<40} {:>6} {:>10}  DIGEST", "PATH", "KIND", "SIZE");
    for file in &listing.files {
        println!(
            "{:<40} {:>6} {:>10}  {}",
            file.path,
            file.kind,
            file.size,
            &file.digest[..12.min(file.digest.len())]
        );
    }
}

fn print_jobs(jobs: &[JobView]) {
    println!(
        "{:<34} {:<18} {:<16} {:<10} {:>7}  ERROR",
        "JOB", "STATE", "WORKBENCH", "PHASE", "ITEMS"
    );
    for job in jobs {
        println!(
            "{:<34} {:<18} {:<16} {:<10} {:>3}/{:<3}  {}",
            job.job_id,
            job.state.as_str(),
            job.workbench,
            job.phase.as_str(),
            job.items_done(),
            job.items.len(),
            job.error.as_ref().map(|e| e.code.as_str()).unwrap_or("")
        );
    }
}

fn print_job(job: &JobView) {
    println!("job        {}", job.job_id);
    println!("state      {}", job.state);
    println!("workbench  {}", job.workbench);
    println!("model      {}", job.model);
    println!("phase      {}", job.phase);
    println!(
        "items      {} done, {} failed, {} total",
        job.items_done(),
        job.items_failed(),
        job.items.len()
    );
    for item in &job.items {
        let mark = match item.status {
            atelier_messages::job::ItemStatus::Pending => ' ',
            atelier_messages::job::ItemStatus::Done => 'x',
            atelier_messages::job::ItemStatus::Failed => '!',
        };
        println!("  [{mark}] {}. {}", item.index, item.label);
    }
    println!(
        "turns      {} model, {} tool calls",
        job.model_turns, job.tool_calls
    );
    if let Some(pending) = &job.pending_approval {
        println!(
            "awaiting   approval of {} {} (call {}); `atelier approve {}` or `--reject`",
            pending.tool, pending.arguments, pending.call_id, job.job_id
        );
    }
    if let Some(error) = &job.error {
        println!("error      {error}");
    }
    if let Some(summary) = &job.summary {
        println!("\n{summary}");
    }
}
