//! The eval report: per task, per split and overall, as a table or JSON.

use serde::Serialize;

use atelier_messages::budget::Usd;

use super::RunOutcome;
use crate::output::{cost_text, print_json};

/// One task over its runs (counts are totals over the runs).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TaskReport {
    pub(crate) task: String,
    /// The name of the folder holding the task (`dev`, `holdout`).
    pub(crate) split: String,
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
    /// What the runs cost at the model profile's prices (none: unknown, the profile has none).
    pub(crate) cost_usd: Option<Usd>,
    pub(crate) wall_ms: u64,
    pub(crate) results: Vec<RunOutcome>,
}

/// The tasks of one split together.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SplitReport {
    pub(crate) split: String,
    #[serde(flatten)]
    pub(crate) totals: Overall,
}

/// Every task together (or a split's tasks, in [`SplitReport`]).
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
    pub(crate) cost_usd: Option<Usd>,
    pub(crate) wall_ms: u64,
}

/// The sum of costs; unknown when any is.
fn total_cost(costs: impl IntoIterator<Item = Option<Usd>>) -> Option<Usd> {
    costs
        .into_iter()
        .try_fold(Usd::ZERO, |sum, cost| Some(sum.saturating_add(cost?)))
}

fn rate(passed: u32, runs: u32) -> f64 {
    if runs == 0 {
        0.0
    } else {
        f64::from(passed) / f64::from(runs)
    }
}

impl TaskReport {
    pub(crate) fn new(split: &str, task: &str, results: Vec<RunOutcome>) -> Self {
        let runs = u32::try_from(results.len()).unwrap_or(u32::MAX);
        let passed = u32::try_from(results.iter().filter(|r| r.passed).count()).unwrap_or(0);
        let false_successes =
            u32::try_from(results.iter().filter(|r| r.false_success).count()).unwrap_or(0);
        let sum = |f: fn(&RunOutcome) -> u64| results.iter().map(f).sum::<u64>();
        let prompt_tokens = sum(|r| r.prompt_tokens);
        let completion_tokens = sum(|r| r.completion_tokens);
        Self {
            task: task.to_string(),
            split: split.to_string(),
            runs,
            passed,
            pass_rate: rate(passed, runs),
            false_successes,
            model_turns: sum(|r| r.model_turns),
            tool_calls: sum(|r| r.tool_calls),
            prompt_tokens,
            completion_tokens,
            tokens: prompt_tokens + completion_tokens,
            cost_usd: total_cost(results.iter().map(|r| r.cost_usd)),
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
            cost_usd: total_cost(tasks.iter().map(|t| t.cost_usd)),
            wall_ms: tasks.iter().map(|t| t.wall_ms).sum(),
        }
    }
}

/// Each split's totals, in the order of the tasks (which come split by split).
fn splits(tasks: &[TaskReport]) -> Vec<SplitReport> {
    let mut splits: Vec<SplitReport> = Vec::new();
    let mut start = 0;
    while start < tasks.len() {
        let split = &tasks[start].split;
        let end = tasks[start..]
            .iter()
            .position(|t| &t.split != split)
            .map_or(tasks.len(), |n| start + n);
        splits.push(SplitReport {
            split: split.clone(),
            totals: Overall::new(&tasks[start..end]),
        });
        start = end;
    }
    splits
}

#[derive(Serialize)]
struct JsonReport<'a> {
    model: &'a str,
    tasks: &'a [TaskReport],
    splits: Vec<SplitReport>,
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
            splits: splits(tasks),
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

/// The table: a row per task and the overall row; with more than one split, each split's
/// tasks under its name and followed by its totals. `FALSE` counts the runs whose job ended
/// `succeeded` while a check failed.
fn table(tasks: &[TaskReport], overall: &Overall) -> String {
    let mut out = format!(
        "{:<32} {:>9} {:>6} {:>6} {:>6} {:>9} {:>9} {:>9}\n",
        "TASK", "PASS", "FALSE", "TURNS", "TOOLS", "TOKENS", "COST", "WALL"
    );
    let splits = splits(tasks);
    let grouped = splits.len() > 1;
    for split in &splits {
        if grouped {
            out.push_str(&format!("[{}]\n", split.split));
        }
        for task in tasks.iter().filter(|t| t.split == split.split) {
            out.push_str(&row(
                &task.task,
                task.passed,
                task.runs,
                task.false_successes,
                [task.model_turns, task.tool_calls, task.tokens],
                task.cost_usd,
                task.wall_ms,
            ));
        }
        if grouped {
            out.push_str(&totals_row(&split.split, &split.totals));
        }
    }
    out.push_str(&totals_row("overall", overall));
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

/// `NAME (N tasks)` and the totals.
fn totals_row(name: &str, totals: &Overall) -> String {
    let name = format!(
        "{name} ({} task{})",
        totals.tasks,
        if totals.tasks == 1 { "" } else { "s" }
    );
    row(
        &name,
        totals.passed,
        totals.runs,
        totals.false_successes,
        [totals.model_turns, totals.tool_calls, totals.tokens],
        totals.cost_usd,
        totals.wall_ms,
    )
}

/// One row: name, passed/runs and rate, false successes, [turns, tools, tokens], cost, wall
/// time.
fn row(
    name: &str,
    passed: u32,
    runs: u32,
    false_ok: u32,
    counts: [u64; 3],
    cost: Option<Usd>,
    wall_ms: u64,
) -> String {
    let [turns, tools, tokens] = counts;
    format!(
        "{name:<32} {:>9} {false_ok:>6} {turns:>6} {tools:>6} {tokens:>9} {:>9} {:>9}\n",
        pass_cell(passed, runs),
        cost_text(cost),
        seconds(wall_ms)
    )
}

fn pass_cell(passed: u32, runs: u32) -> String {
    format!("{passed}/{runs} {:>3.0}%", rate(passed, runs) * 100.0)
}

fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// Why each failed run failed: the job's error code, or the checks that did not hold (the task
/// named `split/task` when the report has more than one split).
fn print_failures(tasks: &[TaskReport]) {
    let grouped = tasks.windows(2).any(|pair| pair[0].split != pair[1].split);
    for task in tasks {
        let name = if grouped {
            format!("{}/{}", task.split, task.task)
        } else {
            task.task.clone()
        };
        for run in task.results.iter().filter(|r| !r.passed) {
            let head = format!("{name} run {} ({})", run.run, run.workbench);
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
                let path = if check.path.is_empty() {
                    String::new()
                } else {
                    format!(" {}", check.path)
                };
                println!(
                    "  ✗ {head}{false_success}: {}{path}: {}",
                    check.kind, check.detail
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
            cost_usd: Some(Usd::from_micros(1_500)),
            wall_ms: 1_000,
        }
    }

    #[test]
    fn costs_add_up_and_one_unknown_cost_makes_the_sum_unknown() {
        let priced = TaskReport::new(
            "dev",
            "a",
            vec![
                outcome(1, "succeeded", true, false),
                outcome(2, "succeeded", true, false),
            ],
        );
        assert_eq!(priced.cost_usd, Some(Usd::from_micros(3_000)));
        let mut unpriced = outcome(1, "succeeded", true, false);
        unpriced.cost_usd = None;
        let unknown = TaskReport::new("dev", "b", vec![unpriced]);
        assert_eq!(unknown.cost_usd, None);
        let tasks = [priced, unknown];
        let overall = Overall::new(&tasks);
        assert_eq!(overall.cost_usd, None);
        let text = table(&tasks, &overall);
        let cost = |line: &str| line.split_whitespace().nth(7).map(str::to_string);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(cost(lines[1]).as_deref(), Some("$0.0030"), "{text}");
        assert_eq!(cost(lines[2]).as_deref(), Some("unknown"), "{text}");
    }

    #[test]
    fn false_successes_are_counted_per_task_and_overall() {
        let a = TaskReport::new(
            "tasks",
            "a",
            vec![
                outcome(1, "succeeded", true, false),
                outcome(2, "succeeded", false, true),
                outcome(3, "failed", false, false),
            ],
        );
        let b = TaskReport::new("tasks", "b", vec![outcome(1, "succeeded", false, true)]);
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
            splits: splits(&tasks),
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

    #[test]
    fn tasks_of_several_splits_are_grouped_with_their_totals() {
        let tasks = [
            TaskReport::new("dev", "a", vec![outcome(1, "succeeded", true, false)]),
            TaskReport::new("dev", "b", vec![outcome(1, "succeeded", true, false)]),
            TaskReport::new("holdout", "c", vec![outcome(1, "succeeded", false, true)]),
        ];
        let overall = Overall::new(&tasks);
        let by_split = splits(&tasks);
        let names: Vec<&str> = by_split.iter().map(|s| s.split.as_str()).collect();
        assert_eq!(names, ["dev", "holdout"]);
        assert_eq!(
            (by_split[0].totals.tasks, by_split[0].totals.passed),
            (2, 2)
        );
        assert_eq!(by_split[1].totals.pass_rate, 0.0);
        let json = serde_json::to_value(JsonReport {
            model: "m",
            tasks: &tasks,
            splits: by_split,
            overall: &overall,
        })
        .unwrap_or_default();
        assert_eq!(json["tasks"][2]["split"], "holdout");
        assert_eq!(json["splits"][0]["split"], "dev");
        assert_eq!(json["splits"][0]["pass_rate"], 1.0);
        assert_eq!(json["splits"][1]["false_successes"], 1);
        assert_eq!(json["overall"]["tasks"], 3);
        let text = table(&tasks, &overall);
        let firsts: Vec<String> = text
            .lines()
            .map(|line| {
                line.split("  ")
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            })
            .collect();
        assert_eq!(
            firsts,
            [
                "TASK",
                "[dev]",
                "a",
                "b",
                "dev (2 tasks)",
                "[holdout]",
                "c",
                "holdout (1 task)",
                "overall (3 tasks)",
                "1 false success: the job ended succeeded but its checks failed",
            ],
            "{text}"
        );
        // One split: no headings and no split totals, as before splits existed.
        let one = table(&tasks[..2], &Overall::new(&tasks[..2]));
        assert_eq!(one.lines().count(), 4, "{one}");
        assert!(!one.contains("[dev]"), "{one}");
    }
}
