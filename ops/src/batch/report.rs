//! How a batch is shown: its status and failed targets, the list of batches, and `batch watch`
//! (a progress bar until the batch ends).

use std::process::ExitCode;
use std::time::Duration;

use atelier_messages::batch::{BatchCounts, BatchState, BatchView};
use indicatif::{ProgressBar, ProgressStyle};

use super::status;
use crate::client::Client;
use crate::output::{budget_text, cost_text, print_json};
use crate::shown::{shown, shown_lines};

/// How often `batch watch` looks at the batch.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// Follows the batch until it ends: a progress bar (done/total, rate, ETA) on a terminal.
pub(super) async fn watch(client: &Client, id: &str, json: bool) -> anyhow::Result<ExitCode> {
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

pub(super) fn show(view: &BatchView, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(view);
    }
    let counts = &view.counts;
    println!("batch        {}", shown(&view.batch_id));
    println!("state        {}", view.state);
    println!("action       {}", shown(&view.action.to_string()));
    println!(
        "targets      {} total: {} succeeded{}, {} failed, {} cancelled, {} running, {} queued",
        counts.total,
        counts.succeeded,
        outcomes(counts),
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
    println!(
        "spent        {} tokens, cost {} (by the targets that ended)",
        view.spent.tokens,
        cost_text(view.spent.cost_usd)
    );
    if !view.budget.is_none() {
        println!(
            "budget       {}; remaining {}",
            budget_text(&view.budget),
            budget_text(&view.budget.remaining(&view.spent))
        );
    }
    if let Some(error) = &view.error {
        println!("error        {}", shown_lines(&error.to_string()));
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
            "  #{} {}{} (job {}): {}",
            failure.index,
            shown(&failure.workbench),
            shown(&file),
            shown(job),
            shown(&error)
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

/// What the succeeded targets did (` (3 with changes, 1 answered without changes)`), when their
/// outcomes were recorded.
fn outcomes(counts: &BatchCounts) -> String {
    if counts.changed + counts.answered == 0 {
        return String::new();
    }
    format!(
        " ({} with changes, {} answered without changes)",
        counts.changed, counts.answered
    )
}

pub(super) fn print_list(views: &[BatchView]) {
    println!(
        "{:<34} {:<24} {:>7} {:>9} {:>7}  ACTION",
        "BATCH", "STATE", "TOTAL", "SUCCEEDED", "FAILED"
    );
    for view in views {
        println!(
            "{:<34} {:<24} {:>7} {:>9} {:>7}  {}",
            shown(&view.batch_id),
            view.state,
            view.counts.total,
            view.counts.succeeded,
            view.counts.failed,
            shown(&view.action.to_string())
        );
    }
}
