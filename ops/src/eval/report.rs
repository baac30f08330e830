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
    /// Runs whose job ended `succeeded` while a check failed.
    pub(crate) false_successes: u32,
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
    /// Runs whose job ended `succeeded` while a check failed, over every task.
    pub(crate) false_successes: u32,
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
        let false_successes =
            u32::try_from(results.iter().filter(|r| r.false_success).count()).unwrap_or(0);
        let sum = |f: fn(&RunOutcome) -> u64| results.iter().map(f).sum::<u64>();
        let prompt_tokens = sum(|r| r.prompt_tokens);
        let completion_tokens = sum(|r| r.completion_tokens);
        Self {
            task: task.to_string(),
            runs,
            passed,
            pass_rate: rate(passed, runs),
            false_successes,
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
            false_successes: tasks.iter().map(|t| t.false_successes).sum(),
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
    print!("{}", table(tasks, overall));
}

/// The table: a row per task and the overall row. `FALSE` counts the runs whose job ended
/// `succeeded` while a check failed.
fn table(tasks: &[TaskReport], overall: &Overall) -> String {
    let row = |name: &str, pass: String, false_ok: u32, turns, tools, tokens, wall| {
        format!("{name:<28} {pass:>9} {false_ok:>6} {turns:>6} {tools:>6} {tokens:>9} {wall:>9}\n")
    };
    let mut out = format!(
        "{:<28} {:>9} {:>6} {:>6} {:>6} {:>9} {:>9}\n",
        "TASK", "PASS", "FALSE", "TURNS", "TOOLS", "TOKENS", "WALL"
    );
    for task in tasks {
        out.push_str(&row(
            &task.task,
            pass_cell(task.passed, task.runs),
            task.false_successes,
            task.model_turns,
            task.tool_calls,
            task.tokens,
            seconds(task.wall_ms),
        ));
    }
    let name = format!(
        "overall ({} task{})",
        overall.tasks,
        if overall.tasks == 1 { "" } else { "s" }
    );
    out.push_str(&row(
        &name,
        pass_cell(overall.passed, overall.runs),
        overall.false_successes,
        overall.model_turns,
        overall.tool_calls,
        overall.tokens,
        seconds(overall.wall_ms),
    ));
    if overall.false_successes > 0 {
        out.push_str(&format!(
            "{} false success{}: the job ended succeeded but its checks failed\n",
            overall.false_successes,
            if overall.false_successes == 1 {
                ""
            } else {
                "es"
            }
        ));
    }
    out
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
            let false_success = if run.false_success {
                " (false success: the job succeeded)"
            } else {
                ""
            };
            for check in run.checks.iter().filter(|c| !c.passed) {
                println!(
                    "  ✗ {head}{false_success}: {} {}: {}",
                    check.kind, check.path, check.detail
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(run: u32, state: &str, passed: bool, false_success: bool) -> RunOutcome {
        RunOutcome {
            run,
            workbench: format!("eval-t-{run}"),
            job_id: format!("j{run}"),
            state: state.into(),
            error: (state != "succeeded").then(|| "ITEMS_FAILED".to_string()),
            passed,
            false_success,
            checks: Vec::new(),
            model_turns: 1,
            tool_calls: 1,
            prompt_tokens: 10,
            completion_tokens: 2,
            wall_ms: 1_000,
        }
    }

    #[test]
    fn false_successes_are_counted_per_task_and_overall() {
        let a = TaskReport::new(
            "a",
            vec![
                outcome(1, "succeeded", true, false),
                outcome(2, "succeeded", false, true),
                outcome(3, "failed", false, false),
            ],
        );
        let b = TaskReport::new("b", vec![outcome(1, "succeeded", false, true)]);
        assert_eq!((a.passed, a.false_successes), (1, 1));
        assert_eq!(b.false_successes, 1);
        let tasks = [a, b];
        let overall = Overall::new(&tasks);
        assert_eq!(
            (overall.runs, overall.passed, overall.false_successes),
            (4, 1, 2)
        );
        let json = serde_json::to_value(JsonReport {
            model: "m",
            tasks: &tasks,
            overall: &overall,
        })
        .unwrap_or_default();
        assert_eq!(json["tasks"][0]["false_successes"], 1);
        assert_eq!(json["tasks"][0]["results"][1]["false_success"], true);
        assert_eq!(json["overall"]["false_successes"], 2);
        let text = table(&tasks, &overall);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("FALSE"), "{text}");
        let column = |line: &str| line.split_whitespace().nth(3).map(str::to_string);
        assert_eq!(column(lines[1]).as_deref(), Some("1"), "{text}");
        assert!(lines[3].starts_with("overall (2 tasks)"), "{text}");
        assert!(
            text.contains("2 false successes: the job ended succeeded but its checks failed"),
            "{text}"
        );
    }
}
