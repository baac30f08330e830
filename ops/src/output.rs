//! How the CLI prints jobs, listings and stats for people (`--json` prints the values as they are).

use atelier_messages::job::{CoordinatorStats, ItemStatus, JobView};
use atelier_messages::store::Listing;

/// Pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub fn print_stats(stats: &CoordinatorStats, json: bool) -> anyhow::Result<()> {
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

pub fn print_listing(listing: &Listing) {
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

pub fn print_jobs(jobs: &[JobView]) {
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

pub fn print_job(job: &JobView) {
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
            ItemStatus::Pending => ' ',
            ItemStatus::Done => 'x',
            ItemStatus::Failed => '!',
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
