//! The eval report: per task and overall, as a table or JSON.

use serde::Serialize;

use super::RunOutcome;
use crate::output::print_json;

/// One task over its runs (counts are totals over the runs).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TaskReport {
    pub(crate) task: String,
    pub(crate) runs: u32,
    pub(crate) passed: u32,
    /// passed / runs, 0.0–1.0.
    pub(crate) pass_rate: f64,
    pub(crate) model_turns: u64,
    pub(crate) tool_calls: u64,
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
    /// prompt + completion.
    pub(crate) tokens: u64,
    pub(crate) wall_ms: u64,
    pub(crate) results: Vec<RunOutcome>,
}

/// Every task together.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Overall {
    pub(crate) tasks: usize,
    pub(crate) runs: u32,
    pub(crate) passed: u32,
    pub(crate) pass_rate: f64,
    pub(crate) model_turns: u64,
    pub(crate) tool_calls: u64,
    pub(crate) tokens: u64,
    pub(crate) wall_ms: u64,
}

fn rate(passed: u32, runs: u32) -> f64 {
    if runs == 0 {
        0.0
    } else {
        f64::from(passed) / f64::from(runs)
    }
}

impl TaskReport {
    pub(crate) fn new(task: &str, results: Vec<RunOutcome>) -> Self {
        let runs = u32::try_from(results.len()).unwrap_or(u32::MAX);
        let passed = u32::try_from(results.iter().filter(|r| r.passed).count()).unwrap_or(0);
        let sum = |f: fn(&RunOutcome) -> u64| results.iter().map(f).sum::<u64>();
        let prompt_tokens = sum(|r| r.prompt_tokens);
        let completion_tokens = sum(|r| r.completion_tokens);
        Self {
            task: task.to_string(),
            runs,
            passed,
            pass_rate: rate(passed, runs),
            model_turns: sum(|r| r.model_turns),
            tool_calls: sum(|r| r.tool_calls),
            prompt_tokens,
            completion_tokens,
            tokens: prompt_tokens + completion_tokens,
            wall_ms: sum(|r| r.wall_ms),
            results,
        }
    }
}

impl Overall {
    pub(crate) fn new(tasks: &[TaskReport]) -> Self {
        let runs = tasks.iter().map(|t| t.runs).sum();
        let passed = tasks.iter().map(|t| t.passed).sum();
        Self {
            tasks: tasks.len(),
            runs,
            passed,
            pass_rate: rate(passed, runs),
            model_turns: tasks.iter().map(|t| t.model_turns).sum(),
            tool_calls: tasks.iter().map(|t| t.tool_calls).sum(),
            tokens: tasks.iter().map(|t| t.tokens).sum(),
            wall_ms: tasks.iter().map(|t| t.wall_ms).sum(),
        }
    }
}

#[derive(Serialize)]
struct JsonReport<'a> {
    model: &'a str,
    tasks: &'a [TaskReport],
    overall: &'a Overall,
}

pub(crate) fn print(
    model: &str,
    tasks: &[TaskReport],
    overall: &Overall,
    json: bool,
) -> anyhow::Result<()> {
    if json {
        return print_json(&JsonReport {
            model,
            tasks,
            overall,
        });
    }
    print_table(tasks, overall);
    print_failures(tasks);
    Ok(())
}

fn print_table(tasks: &[TaskReport], overall: &Overall) {
    println!(
        "{:<28} {:>9} {:>6} {:>6} {:>9} {:>9}",
        "TASK", "PASS", "TURNS", "TOOLS", "TOKENS", "WALL"
    );
    for task in tasks {
        println!(
            "{:<28} {:>9} {:>6} {:>6} {:>9} {:>9}",
            task.task,
            pass_cell(task.passed, task.runs),
            task.model_turns,
            task.tool_calls,
            task.tokens,
            seconds(task.wall_ms)
        );
    }
    println!(
        "{:<28} {:>9} {:>6} {:>6} {:>9} {:>9}",
        format!(
            "overall ({} task{})",
            overall.tasks,
            if overall.tasks == 1 { "" } else { "s" }
        ),
        pass_cell(overall.passed, overall.runs),
        overall.model_turns,
        overall.tool_calls,
        overall.tokens,
        seconds(overall.wall_ms)
    );
}

fn pass_cell(passed: u32, runs: u32) -> String {
    format!("{passed}/{runs} {:>3.0}%", rate(passed, runs) * 100.0)
}

fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// Why each failed run failed: the job's error code, or the checks that did not hold.
fn print_failures(tasks: &[TaskReport]) {
    for task in tasks {
        for run in task.results.iter().filter(|r| !r.passed) {
            let head = format!("{} run {} ({})", task.task, run.run, run.workbench);
            if let Some(code) = &run.error {
                println!("  ✗ {head}: job {} {}: {code}", run.job_id, run.state);
                continue;
            }
            for check in run.checks.iter().filter(|c| !c.passed) {
                println!(
                    "  ✗ {head}: {} {}: {}",
                    check.kind, check.path, check.detail
                );
            }
        }
    }
}
