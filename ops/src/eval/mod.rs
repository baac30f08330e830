//! `atelier eval`: runs a directory of tasks against a running system and scores each run's
//! draft with the task's checks (docs/eval.md).

mod checks;
mod parse;
mod record;
mod report;
mod task;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use atelier_messages::job::{JobState, JobView};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::client::{Client, Submission, WatchOutput};
use checks::CheckResult;
use task::Task;

/// The flags of `atelier eval`.
#[derive(Debug, Clone)]
pub(crate) struct EvalArgs {
    pub(crate) dir: PathBuf,
    pub(crate) model: String,
    pub(crate) runs: u32,
    pub(crate) tasks: Vec<String>,
    pub(crate) timeout: Duration,
    pub(crate) keep: bool,
    pub(crate) json: bool,
    /// Where each run's outcome is appended as it ends, and read back from to skip the runs
    /// it already holds.
    pub(crate) results: Option<PathBuf>,
    /// How many runs go at once.
    pub(crate) parallel: usize,
}

/// One run of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunOutcome {
    pub(crate) run: u32,
    pub(crate) workbench: String,
    pub(crate) job_id: String,
    pub(crate) state: String,
    /// The job's error code when it did not succeed.
    pub(crate) error: Option<String>,
    pub(crate) passed: bool,
    /// The job ended `succeeded` but a check failed: a success the job claimed and did not
    /// earn.
    pub(crate) false_success: bool,
    pub(crate) checks: Vec<CheckResult>,
    pub(crate) model_turns: u64,
    pub(crate) tool_calls: u64,
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
    /// What the run's model calls cost (none: unknown, the profile has no prices).
    pub(crate) cost_usd: Option<atelier_messages::budget::Usd>,
    pub(crate) wall_ms: u64,
}

/// Runs every task `args.runs` times (`args.parallel` runs at once, none the results file
/// already holds), prints the report; fails unless every run passed.
pub(crate) async fn run(client: &Client, args: EvalArgs) -> anyhow::Result<ExitCode> {
    let tasks = task::load_tasks(&args.dir, &args.tasks)?;
    let mut results = match &args.results {
        Some(path) => record::Results::open(path, &args.model)?,
        None => record::Results::none(),
    };
    if let (Some(path), true) = (&args.results, results.len() > 0) {
        eprintln!(
            "{} runs already in {}: running the others",
            results.len(),
            path.display()
        );
    }
    let mut outcomes = HashMap::new();
    let mut wanted = Vec::new();
    for (index, task) in tasks.iter().enumerate() {
        for run in 1..=args.runs {
            match results.recorded(task, run) {
                Some(outcome) => drop(outcomes.insert((index, run), outcome)),
                None => wanted.push((index, run)),
            }
        }
    }
    let bar = progress_bar(tasks.len() as u64 * u64::from(args.runs));
    bar.inc(outcomes.len() as u64);
    let mut running = futures::stream::iter(wanted)
        .map(|(index, run)| {
            let (args, task) = (&args, &tasks[index]);
            async move { (index, run, run_once(client, args, task, run).await) }
        })
        .buffer_unordered(args.parallel.max(1));
    while let Some((index, run, outcome)) = running.next().await {
        let outcome = outcome.inspect_err(|_| bar.abandon())?;
        results.append(&args.model, &tasks[index], &outcome)?;
        bar.set_message(format!("{} run {run}", tasks[index].name));
        bar.inc(1);
        outcomes.insert((index, run), outcome);
    }
    bar.finish_and_clear();
    let reports: Vec<_> = tasks
        .iter()
        .enumerate()
        .map(|(index, task)| {
            let runs = (1..=args.runs)
                .filter_map(|run| outcomes.remove(&(index, run)))
                .collect();
            report::TaskReport::new(&task.split, &task.name, runs)
        })
        .collect();
    let overall = report::Overall::new(&reports);
    report::print(&args.model, &reports, &overall, args.json)?;
    Ok(if overall.passed == overall.runs {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:24} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A fresh workbench with the task's inputs, the job, its checks.
async fn run_once(
    client: &Client,
    args: &EvalArgs,
    task: &Task,
    run: u32,
) -> anyhow::Result<RunOutcome> {
    let workbench = workbench_name(&task.name, run);
    client.create(&workbench).await?;
    for (file, as_path) in &task.inputs {
        client
            .add(&workbench, std::slice::from_ref(file), Some(as_path))
            .await?;
    }
    let started = Instant::now();
    let job_id = client
        .submit(Submission {
            workbench: &workbench,
            message: &task.spec.message,
            model: Some(args.model.clone()),
            job_id: None,
            auto_approve: true,
            continue_draft: false,
            approvals: None,
            workflow: None,
            time_limit_secs: None,
            priority: None,
            budget: atelier_messages::budget::Budget::default(),
        })
        .await?;
    let (view, timed_out) = wait_for_end(client, &job_id, args.timeout).await?;
    let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut outcome = score(client, &workbench, task, run, &view, wall_ms).await;
    if timed_out {
        outcome.passed = false;
        outcome.checks.clear();
        outcome.error = Some("EVAL_TIMEOUT".to_string());
    }
    if !args.keep && view.state.is_terminal() {
        // A job that changed nothing left no draft to discard: that refusal is fine.
        let _ = client.discard(&workbench).await;
    }
    Ok(outcome)
}

/// The job's final view, and whether it ran past `timeout` (then it is cancelled, and its view
/// is taken once the cancellation is recorded or after a few seconds).
async fn wait_for_end(
    client: &Client,
    job_id: &str,
    timeout: Duration,
) -> anyhow::Result<(JobView, bool)> {
    match tokio::time::timeout(timeout, client.watch(job_id, WatchOutput::Quiet)).await {
        Ok(state) => {
            state?;
            Ok((client.finished_job(job_id).await?, false))
        }
        Err(_) => {
            let _ = client.cancel(job_id).await;
            Ok((client.finished_job(job_id).await?, true))
        }
    }
}

async fn score(
    client: &Client,
    workbench: &str,
    task: &Task,
    run: u32,
    view: &JobView,
    wall_ms: u64,
) -> RunOutcome {
    let mut outcome = RunOutcome {
        run,
        workbench: workbench.to_string(),
        job_id: view.job_id.clone(),
        state: view.state.to_string(),
        error: None,
        passed: false,
        false_success: false,
        checks: Vec::new(),
        model_turns: view.model_turns,
        tool_calls: view.tool_calls,
        prompt_tokens: view.prompt_tokens,
        completion_tokens: view.completion_tokens,
        cost_usd: view.cost_usd,
        wall_ms,
    };
    if view.state != JobState::Succeeded {
        outcome.error = Some(match &view.error {
            Some(error) => error.code.to_string(),
            None => view.state.to_string(),
        });
        return outcome;
    }
    for check in &task.spec.checks {
        outcome
            .checks
            .push(checks::evaluate(client, workbench, check).await);
    }
    outcome.passed = outcome.checks.iter().all(|c| c.passed);
    outcome.false_success = !outcome.passed;
    outcome
}

/// `eval-<task>-<run>-<6 hex>`, within the 64 characters a workbench name may have.
fn workbench_name(task: &str, run: u32) -> String {
    let suffix: u32 = rand::rng().random_range(0..0x100_0000);
    let tail = format!("-{run}-{suffix:06x}");
    let room = 64 - "eval-".len() - tail.len();
    let task: String = task
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(room)
        .collect();
    format!("eval-{task}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workbench_names_are_valid_and_distinct() {
        let long = "x".repeat(100);
        let name = workbench_name(&long, 12);
        assert!(name.len() <= 64, "{name}");
        assert!(name.starts_with("eval-xxx"));
        let spaced = workbench_name("a b/c", 1);
        assert!(spaced.starts_with("eval-a-b-c-1-"), "{spaced}");
        assert_ne!(workbench_name("t", 1), workbench_name("t", 1));
    }
}
