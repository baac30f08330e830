//! How the CLI prints jobs, listings, stats and draft reviews for people (`--json` prints the values as they are).
//!
//! Every text a server or a client of it chose (workbench names, paths, models, messages,
//! summaries, error texts) is printed through [`shown`] or [`shown_lines`], which write control
//! characters as escapes: a workbench named `\x1b]0;…` cannot retitle, recolour or clear the
//! terminal of whoever lists the jobs.

use atelier_messages::budget::{Budget, Usd};
use atelier_messages::job::{CoordinatorStats, ItemStatus, JobOutcome, JobView};
use atelier_messages::review::{
    ADDED_SHEET_COLUMNS, ADDED_SHEET_ROWS, AddedSheet, Change, Changes, ContentDiff, Review, UnitOp,
};
use atelier_messages::store::{DraftOrigin, Listing, View};

pub use crate::shown::{shown, shown_lines};

/// Pretty JSON on stdout.
/// `atelier decode`: the message on stdin (JSON when it starts like JSON, else MessagePack)
/// printed as one line of JSON.
pub fn decode_stdin() -> anyhow::Result<std::process::ExitCode> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin().read_to_end(&mut bytes)?;
    let json_like = bytes
        .iter()
        .find(|byte| !byte.is_ascii_whitespace())
        .is_some_and(|first| matches!(first, b'{' | b'['));
    let format = match json_like {
        true => atelier_messages::Format::Json,
        false => atelier_messages::Format::MessagePack,
    };
    let value: serde_json::Value =
        atelier_messages::decode(&bytes, format).map_err(crate::client::coded)?;
    println!("{}", serde_json::to_string(&value)?);
    Ok(std::process::ExitCode::SUCCESS)
}

pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub fn print_stats(stats: &CoordinatorStats, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(stats);
    }
    println!("coordinator      {}", shown(&stats.coordinator));
    println!("storage          {} bytes", stats.storage_bytes);
    println!("journal entries  {}", stats.journal_entries);
    for (state, count) in &stats.jobs_by_state {
        println!("jobs {:<12}{count}", shown(state));
    }
    Ok(())
}

/// `atelier workers`: per pool its demand and autoscaler, then its worker processes.
pub fn print_pools(
    pools: &[crate::dashboard::workers::PoolView],
    json: bool,
) -> anyhow::Result<()> {
    if json {
        return print_json(&pools);
    }
    for pool in pools {
        let autoscale = match pool.autoscale.as_ref() {
            None => "fixed".to_string(),
            Some(scaled) if scaled.min == scaled.max => format!("supervised, {}", scaled.min),
            Some(scaled) => format!("autoscaled {}..{}", scaled.min, scaled.max),
        };
        println!(
            "{:<8} workers {:<3} slots {}/{} busy  waiting {:<4} dispatch wait avg {:.3} s  {autoscale}",
            shown(&pool.pool),
            pool.instances.len(),
            pool.in_flight,
            pool.slots,
            pool.pending_calls,
            pool.dispatch_wait.sum_secs / pool.dispatch_wait.count.max(1) as f64,
        );
        if let Some(decision) = pool
            .autoscale
            .as_ref()
            .and_then(|s| s.last_decision.as_ref())
        {
            println!(
                "         last decision: {} {} -> {} ({})",
                decision.direction.as_str(),
                decision.from,
                decision.to,
                shown(&decision.reason)
            );
        }
        for instance in &pool.instances {
            println!(
                "  {:<40} {}/{} busy  waiting {:<4} requests {:<6}{}",
                shown(&instance.worker),
                instance.in_flight,
                instance.max_concurrency,
                instance.pending,
                instance.requests,
                if instance.draining { "  draining" } else { "" }
            );
        }
    }
    Ok(())
}

pub fn print_listing(listing: &Listing) {
    println!("{:<40} {:>6} {:>10}  DIGEST", "PATH", "KIND", "SIZE");
    for file in &listing.files {
        println!(
            "{:<40} {:>6} {:>10}  {}",
            shown(&file.path),
            shown(&file.kind),
            file.size,
            shown(file.digest.get(..12).unwrap_or(&file.digest))
        );
    }
    if let Some(origin) = &listing.draft {
        let shown = match listing.view {
            View::Draft => "these are its files",
            _ => "`--draft` lists it",
        };
        println!("({}; {shown})", draft_note(origin, &listing.workbench));
    }
}

/// `the draft started 26 h ago by message m3 (job J)`, and what to do when it is stale.
pub fn draft_note(origin: &DraftOrigin, workbench: &str) -> String {
    let described = origin.describe(atelier_messages::now_ms());
    let mut note = format!("the draft {}", shown(&described));
    if origin.stale {
        note.push_str(&format!(
            " is old: review it and publish or discard it (`atelier draft diff|publish|discard \
             {}`)",
            shown(workbench)
        ));
    }
    note
}

pub fn print_jobs(jobs: &[JobView]) {
    println!(
        "{:<34} {:<18} {:<16} {:<10} {:>7} {:>9} {:>9}  RESULT",
        "JOB", "STATE", "WORKBENCH", "PHASE", "ITEMS", "TOKENS", "COST"
    );
    for job in jobs {
        println!(
            "{:<34} {:<18} {:<16} {:<10} {:>3}/{:<3} {:>9} {:>9}  {}",
            shown(&job.job_id),
            job.state.as_str(),
            shown(&job.workbench),
            job.phase.as_str(),
            job.items_done(),
            job.items.len(),
            job.prompt_tokens + job.completion_tokens,
            cost_text(job.cost_usd),
            result_column(job)
        );
    }
}

/// An amount spent, or `unknown` where the model profile has no prices (never `$0`).
pub fn cost_text(cost: Option<Usd>) -> String {
    cost.map_or_else(|| "unknown".to_string(), |cost| cost.to_string())
}

/// A budget's limits (`3000 tokens, $0.50`), or `none`.
pub fn budget_text(budget: &Budget) -> String {
    let limits: Vec<String> = [
        budget.tokens.map(|tokens| format!("{tokens} tokens")),
        budget.usd.map(|usd| usd.to_string()),
    ]
    .into_iter()
    .flatten()
    .collect();
    match limits.is_empty() {
        true => "none".to_string(),
        false => limits.join(", "),
    }
}

/// The listing's last column: the error code of a job that did not succeed, what a succeeded
/// one did (`changed 2 files`, `answered`), or nothing.
fn result_column(job: &JobView) -> String {
    if let Some(error) = &job.error {
        return error.code.as_str().to_string();
    }
    match job.outcome.as_ref().map(JobOutcome::files) {
        None => String::new(),
        Some([]) => "answered".to_string(),
        Some([_]) => "changed 1 file".to_string(),
        Some(files) => format!("changed {} files", files.len()),
    }
}

/// A job as `atelier job` prints it: its state, each plan item with the contract line of each
/// of its targets under it, its error, outcome and summary.
pub fn print_job(job: &JobView) {
    println!("job        {}", shown(&job.job_id));
    println!("state      {}", job.state);
    println!("workbench  {}", shown(&job.workbench));
    println!("model      {}", shown(&job.model));
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
        println!("  [{mark}] {}. {}", item.index, shown(&item.label));
        // What each target must hold, as the plan's checklist line under its item.
        for contract in &item.contracts {
            println!(
                "        - {}",
                shown(&atelier_agents::contract::render(contract))
            );
        }
    }
    println!(
        "turns      {} model, {} tool calls",
        job.model_turns, job.tool_calls
    );
    println!(
        "spent      {} tokens ({} prompt, {} reply), cost {}{}",
        job.prompt_tokens + job.completion_tokens,
        job.prompt_tokens,
        job.completion_tokens,
        cost_text(job.cost_usd),
        match job.cost_usd {
            Some(_) => String::new(),
            None => " (the model profile has no prices)".to_string(),
        }
    );
    if !job.budget.is_none() {
        println!("budget     {}", budget_text(&job.budget));
    }
    if job.time_limit_secs > 0 {
        println!(
            "limit      {} s of wall-clock time a run",
            job.time_limit_secs
        );
    }
    if let Some(pending) = &job.pending_approval {
        println!(
            "awaiting   approval of {} {} (call {}); `atelier approve {}` or `--reject`",
            shown(&pending.tool),
            shown(&pending.arguments.to_string()),
            shown(&pending.call_id),
            shown(&job.job_id)
        );
    }
    if let Some(error) = &job.error {
        println!("error      {}", shown(&error.to_string()));
    }
    if let Some(outcome) = &job.outcome {
        println!("outcome    {}", shown(&outcome.to_string()));
    }
    if let Some(summary) = &job.summary {
        println!("\n{}", shown_lines(summary));
    }
}

/// A draft's review: one block per changed file with what changed inside it.
pub fn print_review(review: &Review) {
    if !review.has_draft {
        println!("{} has no draft", shown(&review.workbench));
        return;
    }
    if review.files.is_empty() {
        println!("the draft of {} changes nothing", shown(&review.workbench));
    }
    for file in &review.files {
        let mark = match file.change {
            Change::Added => 'A',
            Change::Modified => 'M',
            Change::Deleted => 'D',
        };
        println!("{mark} {}", shown(&file.path));
        print_content(&file.content);
    }
}

fn print_units<T>(name: &str, changes: &Changes<T>, show: impl Fn(&T) -> String) {
    println!(
        "  {name}: +{} -{} ~{}",
        changes.added, changes.removed, changes.changed
    );
    for unit in &changes.sample {
        let (mark, text) = match unit.op {
            UnitOp::Added => ('+', unit.new.as_ref().map(&show).unwrap_or_default()),
            UnitOp::Removed => ('-', unit.old.as_ref().map(&show).unwrap_or_default()),
            UnitOp::Changed => {
                let old = unit.old.as_ref().map(&show).unwrap_or_default();
                let new = unit.new.as_ref().map(&show).unwrap_or_default();
                ('~', format!("{old} → {new}"))
            }
        };
        println!(
            "    {mark} {} {}: {}",
            name.trim_end_matches('s'),
            unit.position,
            shown(&text)
        );
    }
    if changes.truncated {
        println!("    … (more changes than shown)");
    }
}

fn print_content(content: &ContentDiff) {
    match content {
        ContentDiff::Text {
            unified,
            lines_added,
            lines_removed,
            truncated,
        } => {
            println!("  lines: +{lines_added} -{lines_removed}");
            for line in unified.lines() {
                println!("    {}", shown(line));
            }
            if *truncated {
                println!("    … (diff cut)");
            }
        }
        ContentDiff::Table {
            columns_added,
            columns_removed,
            rows,
        } => {
            if !columns_added.is_empty() || !columns_removed.is_empty() {
                println!(
                    "  columns: +{} -{}",
                    shown(&format!("{columns_added:?}")),
                    shown(&format!("{columns_removed:?}"))
                );
            }
            print_units("rows", rows, |row| row.join(","));
        }
        ContentDiff::Workbook {
            sheets_added,
            sheets_removed,
            sheets,
            added_sheets,
        } => {
            if !sheets_added.is_empty() || !sheets_removed.is_empty() {
                println!(
                    "  sheets: +{} -{}",
                    shown(&format!("{sheets_added:?}")),
                    shown(&format!("{sheets_removed:?}"))
                );
            }
            for sheet in sheets {
                println!(
                    "  sheet {}: {} cell(s) changed",
                    shown(&sheet.sheet),
                    sheet.cells_changed
                );
                for cell in &sheet.sample {
                    println!(
                        "    {}: {} → {}",
                        shown(&cell.cell),
                        shown(&cell.old.to_string()),
                        shown(&cell.new.to_string())
                    );
                }
                if sheet.truncated {
                    println!("    … (more cells than shown)");
                }
            }
            for sheet in added_sheets {
                for line in added_sheet_lines(sheet) {
                    println!("{line}");
                }
            }
        }
        ContentDiff::Document { paragraphs } => {
            print_units("paragraphs", paragraphs, String::clone)
        }
        ContentDiff::Slides { slides } => print_units("slides", slides, |texts| texts.join(" / ")),
        ContentDiff::Binary { old_size, new_size } => {
            println!("  binary: {old_size} → {new_size} bytes")
        }
        ContentDiff::Unavailable { reason } => {
            println!("  (content not compared: {})", shown(reason))
        }
    }
}

/// A cell as a reviewer reads it: text as it is, numbers and booleans as JSON, empty as nothing.
fn cell_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// What an added sheet holds: a line per shown row, named by its first cell (`B3: Total |
/// 3500`), then the formulas among the shown cells (`B5 =SUM(B3:B4)`).
fn added_sheet_lines(sheet: &AddedSheet) -> Vec<String> {
    let Some(range) = &sheet.range else {
        return vec![format!("  + sheet {}: empty", shown(&sheet.sheet))];
    };
    let mut lines = vec![format!(
        "  + sheet {}: {} ({} rows × {} columns)",
        shown(&sheet.sheet),
        shown(range),
        sheet.rows,
        sheet.columns
    )];
    let corner = range.split(':').next().unwrap_or_default();
    let (letters, first_row) =
        corner.split_at(corner.find(|c: char| c.is_ascii_digit()).unwrap_or(0));
    let first_row: u64 = first_row.parse().unwrap_or(1);
    for (offset, row) in sheet.cells.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(cell_text).collect();
        lines.push(format!(
            "    {}{}: {}",
            shown(letters),
            first_row + offset as u64,
            shown(&cells.join(" | "))
        ));
    }
    for (cell, formula) in &sheet.formulas {
        lines.push(format!("    {} {}", shown(cell), shown(formula)));
    }
    if sheet.truncated {
        lines.push(format!(
            "    … (more cells than shown: at most {ADDED_SHEET_ROWS} rows × {ADDED_SHEET_COLUMNS} columns)"
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_added_sheet_prints_its_rows_escaped_with_its_formulas_and_the_cut() {
        let sheet = AddedSheet {
            sheet: "Sum\u{1b}[31mmary".into(),
            range: Some("B3:C4".into()),
            rows: 70,
            columns: 2,
            cells: vec![
                vec![json!("Total"), json!(3500)],
                vec![json!("red\u{1b}[31m"), serde_json::Value::Null],
            ],
            formulas: [("C4".to_string(), "=C3*2".to_string())].into(),
            truncated: true,
        };
        let lines = added_sheet_lines(&sheet);
        assert_eq!(
            lines,
            [
                "  + sheet Sum\\x1b[31mmary: B3:C4 (70 rows × 2 columns)",
                "    B3: Total | 3500",
                "    B4: red\\x1b[31m | ",
                "    C4 =C3*2",
                "    … (more cells than shown: at most 50 rows × 20 columns)",
            ]
        );
    }
}
