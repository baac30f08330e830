//! `atelier eval` over the shipped tasks of both splits (`eval/tasks/dev`, `eval/tasks/holdout`):
//! each task's scripted oracle passes every check; a wrong answer and a failed job score 0% and
//! make the command fail; the parent folder runs both splits and reports them apart. The oracle
//! tests print their results as the markdown tables of docs/benchmarks.md ("Eval";
//! `-- --nocapture`).
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};

use atelier_tests::Cluster;
use atelier_tests::scripted::{Script, ScriptedModel};
use serde_json::{Value, json};

/// One cluster at a time: each test starts its own, and the machine running them may be small.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `eval/tasks`, the parent of the splits.
fn tasks_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../eval/tasks")
}

/// `eval/tasks/dev`: the tasks the engine is developed against.
fn dev() -> PathBuf {
    tasks_root().join("dev")
}

/// The task names of the split folder `split`, sorted.
fn task_names(split: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(split)? {
        let path = entry?.path();
        if path.join("task.toml").is_file() {
            names.extend(path.file_name().and_then(|n| n.to_str()).map(String::from));
        }
    }
    names.sort();
    Ok(names)
}

fn oracle(split: &Path, task: &str) -> anyhow::Result<Script> {
    let text = std::fs::read_to_string(split.join(task).join("oracle.json"))?;
    Ok(serde_json::from_str(&text)?)
}

/// `atelier eval DIR --task TASK --model MODEL --json`: exit success and the report.
fn eval(cluster: &Cluster, dir: &Path, task: &str, model: &str) -> anyhow::Result<(bool, Value)> {
    let output = cluster.cli(&[
        "eval",
        dir.to_str().unwrap_or_default(),
        "--task",
        task,
        "--model",
        model,
        "--json",
    ])?;
    Ok((output.success, output.json()?))
}

fn table_row(task: &Value) -> String {
    format!(
        "| {} | {}/{} | {} | {} | {} | {:.1} s |",
        task["task"].as_str().unwrap_or_default(),
        task["passed"],
        task["runs"],
        task["model_turns"],
        task["tool_calls"],
        task["tokens"],
        task["wall_ms"].as_f64().unwrap_or_default() / 1000.0
    )
}

/// The tool results the model was shown that report an error (`{"error": …}`), once each.
fn failed_calls(model: &ScriptedModel) -> Vec<String> {
    let mut errors: Vec<String> = Vec::new();
    for request in model.requests() {
        let messages = request.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for message in messages.iter().filter(|m| m["role"] == "tool") {
            let content = message["content"].as_str().unwrap_or_default();
            let failed = serde_json::from_str::<Value>(content)
                .is_ok_and(|result| result.get("error").is_some());
            if failed && !errors.iter().any(|e| e == content) {
                errors.push(content.to_string());
            }
        }
    }
    errors
}

/// Runs every task of `split` with its oracle, one `atelier eval SPLIT --task NAME` each, and
/// requires 100% of each, every call of the oracle succeeding (it does the task with the
/// tools, not only writes the expected answer); prints the markdown table.
async fn every_oracle_passes(split: &str, at_least: usize) -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start()?;
    let dir = tasks_root().join(split);
    let names = task_names(&dir)?;
    assert!(names.len() >= at_least, "{names:?}");
    let mut failures = Vec::new();
    let mut table = vec![
        "| task | pass | model turns | tool calls | tokens | wall |".to_string(),
        "|---|---|---|---|---|---|".to_string(),
    ];
    for task in &names {
        let model = ScriptedModel::start(oracle(&dir, task)?).await?;
        let (success, report) = eval(&cluster, &dir, task, &model.model_spec())?;
        let scored = &report["tasks"][0];
        if !success || scored["pass_rate"] != json!(1.0) {
            failures.push(format!("{task}: {:#}", scored["results"]));
        }
        failures.extend(
            failed_calls(&model)
                .into_iter()
                .map(|error| format!("{task}: an oracle call failed: {error}")),
        );
        assert_eq!(scored["task"], json!(task));
        assert_eq!(scored["split"], json!(split));
        assert_eq!(report["overall"]["runs"], json!(1));
        table.push(table_row(scored));
    }
    println!("{}", table.join("\n"));
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        cluster.logs()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_oracle_of_the_dev_split_passes() -> anyhow::Result<()> {
    every_oracle_passes("dev", 15).await
}

#[tokio::test(flavor = "multi_thread")]
async fn every_oracle_of_the_holdout_split_passes() -> anyhow::Result<()> {
    every_oracle_passes("holdout", 15).await
}

/// `atelier eval eval/tasks` runs the tasks of both splits and reports each split apart: here
/// the launch-count oracle on a dev task (it passes) and on a holdout question (it writes a file
/// the question did not ask for: a false success).
#[tokio::test(flavor = "multi_thread")]
async fn the_parent_folder_runs_both_splits_and_reports_them_apart() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start()?;
    let model = ScriptedModel::start(oracle(&dev(), "launch-count")?).await?;
    let root = tasks_root();
    let spec = model.model_spec();
    let args = |json: bool| {
        let mut args = vec![
            "eval",
            root.to_str().unwrap_or_default(),
            "--task",
            "penguins-how-many",
            "--task",
            "launch-count",
            "--model",
            &spec,
        ];
        if json {
            args.push("--json");
        }
        args.iter().map(|a| a.to_string()).collect::<Vec<String>>()
    };
    let json_args = args(true);
    let output = cluster.cli(&json_args.iter().map(String::as_str).collect::<Vec<_>>())?;
    assert!(!output.success, "one run failed: {}", output.stdout);
    let report: Value = output.json()?;
    let tasks: Vec<(&str, &str, u64)> = report["tasks"]
        .as_array()
        .map(|tasks| {
            tasks
                .iter()
                .map(|t| {
                    (
                        t["split"].as_str().unwrap_or_default(),
                        t["task"].as_str().unwrap_or_default(),
                        t["passed"].as_u64().unwrap_or(99),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        tasks,
        [
            ("dev", "launch-count", 1),
            ("holdout", "penguins-how-many", 0)
        ],
        "{report:#}"
    );
    let splits = &report["splits"];
    assert_eq!(splits[0]["split"], "dev", "{report:#}");
    assert_eq!(splits[0]["pass_rate"], json!(1.0));
    assert_eq!(splits[1]["split"], "holdout");
    assert_eq!(splits[1]["pass_rate"], json!(0.0));
    assert_eq!(splits[1]["false_successes"], 1);
    assert_eq!(report["overall"]["tasks"], 2);
    assert_eq!(report["overall"]["passed"], 1);
    let checks = &report["tasks"][1]["results"][0]["checks"];
    assert_eq!(checks[0]["kind"], "draft_unchanged", "{report:#}");
    assert_eq!(checks[0]["passed"], false);
    assert!(
        checks[0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("added count.txt")),
        "{report:#}"
    );

    // In the holdout workbench the oracle's query of launch_plan.csv fails: what
    // `failed_calls` reports for an oracle that does not do its task with the tools.
    assert!(
        failed_calls(&model)
            .iter()
            .any(|error| error.contains("launch_plan.csv")),
        "{:?}",
        failed_calls(&model)
    );

    let table_args = args(false);
    let table = cluster.cli(&table_args.iter().map(String::as_str).collect::<Vec<_>>())?;
    let starts: Vec<&str> = table
        .stdout
        .lines()
        .map(|line| line.split("  ").next().unwrap_or_default().trim())
        .collect();
    assert_eq!(
        starts[..8],
        [
            "TASK",
            "[dev]",
            "launch-count",
            "dev (1 task)",
            "[holdout]",
            "penguins-how-many",
            "holdout (1 task)",
            "overall (2 tasks)"
        ],
        "{}",
        table.stdout
    );
    assert!(
        table.stdout.contains("✗ holdout/penguins-how-many run 1"),
        "{}",
        table.stdout
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_answer_and_a_failed_job_score_zero() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start()?;
    let wrong: Script = serde_json::from_value(json!({
        "research": [{"content": "There are six rows."}],
        "plan": [{"content": "- [ ] 1. Count — write the row count to count.txt"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "count.txt", "content": "6\n"}}]},
            {"content": "Written."}
        ]},
        "summary": [{"content": "count.txt holds 6."}]
    }))?;
    let model = ScriptedModel::start(wrong).await?;
    let (success, report) = eval(&cluster, &dev(), "launch-count", &model.model_spec())?;
    assert!(!success, "a failed run makes eval fail: {report:#}");
    let task = &report["tasks"][0];
    assert_eq!(task["task"], "launch-count");
    assert_eq!(task["runs"], 1);
    assert_eq!(task["passed"], 0);
    assert_eq!(task["pass_rate"], json!(0.0));
    // The job succeeded with a wrong count: a false success, per task and overall.
    assert_eq!(task["false_successes"], 1);
    assert_eq!(task["results"][0]["false_success"], true);
    assert_eq!(report["overall"]["false_successes"], 1);
    // research, plan, two implement turns, summary; the scripted server reports 100 + 20 tokens.
    assert_eq!(task["model_turns"], 5);
    assert_eq!(task["tool_calls"], 1);
    assert_eq!(task["prompt_tokens"], 500);
    assert_eq!(task["completion_tokens"], 100);
    assert_eq!(task["tokens"], 600);
    let run = &task["results"][0];
    assert_eq!(run["state"], "succeeded");
    assert_eq!(run["error"], Value::Null);
    assert!(
        run["workbench"]
            .as_str()
            .is_some_and(|w| w.starts_with("eval-launch-count-1-")),
        "{run:#}"
    );
    let checks = run["checks"].as_array().cloned().unwrap_or_default();
    assert_eq!(checks.len(), 2, "{run:#}");
    assert_eq!(checks[0]["kind"], "file_lines");
    assert_eq!(checks[0]["passed"], false);
    assert!(
        checks[0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("\"6\"")),
        "{run:#}"
    );
    assert_eq!(checks[1]["kind"], "file_unchanged");
    assert_eq!(checks[1]["passed"], true);
    assert_eq!(report["overall"]["pass_rate"], json!(0.0));

    // A model nobody answers: the job fails, the run counts as failed with the job's code.
    let dead = "openai-compat:http://127.0.0.1:9/v1#nobody";
    let (success, report) = eval(&cluster, &dev(), "launch-count", dead)?;
    assert!(!success);
    let run = &report["tasks"][0]["results"][0];
    assert_eq!(run["state"], "failed", "{report:#}");
    assert!(
        run["error"].as_str().is_some_and(|code| !code.is_empty()),
        "{run:#}"
    );
    assert_eq!(run["checks"], json!([]));
    assert_eq!(report["tasks"][0]["pass_rate"], json!(0.0));
    // A failed job is an honest failure, not a false success.
    assert_eq!(run["false_success"], false);
    assert_eq!(report["overall"]["false_successes"], 0);
    Ok(())
}

/// A script whose single plan item makes `calls`.
fn one_item(calls: Value) -> anyhow::Result<Script> {
    Ok(serde_json::from_value(json!({
        "research": [{"content": "Looked."}],
        "plan": [{"content": "- [ ] 1. Do — the task"}],
        "implement": {"1": [{"tool_calls": calls}, {"content": "Done."}]},
        "summary": [{"content": "Done."}]
    }))?)
}

/// Which checks of the single run passed, as (kind, passed) in task order.
fn check_outcomes(report: &Value) -> Vec<(String, bool)> {
    report["tasks"][0]["results"][0]["checks"]
        .as_array()
        .map(|checks| {
            checks
                .iter()
                .map(|c| {
                    (
                        c["kind"].as_str().unwrap_or_default().to_string(),
                        c["passed"].as_bool().unwrap_or(true),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The remarks of penguins-raw.csv but "Adult not sampled.", in reverse order.
const NINE_REMARKS: &str = "Sexing primers did not amplify. Not enough blood for isotopes.\n\
                            Sexing primers did not amplify.\n\
                            Not enough blood for isotopes.\n\
                            No delta15N data received from lab.\n\
                            No blood sample obtained.\n\
                            No blood sample obtained for sexing.\n\
                            Nest never observed with full clutch. Not enough blood for isotopes.\n\
                            Nest never observed with full clutch.\n\
                            Adult not sampled. Nest never observed with full clutch.\n";

#[tokio::test(flavor = "multi_thread")]
async fn wrong_drafts_fail_the_checks_they_break() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start()?;
    let cases = [
        // The wrong file deleted: the one to delete is still there, the one to keep is gone.
        (
            "remove-unknown",
            json!([{"name": "delete_file", "arguments": {"path": "launch_plan.csv"}}]),
            vec![("file_absent", false), ("file_unchanged", false)],
        ),
        // The planned milestones and one more exported (a filter too wide; the whole file
        // exported would be a copy of it, which the engine tells the item before the draft
        // is scored).
        (
            "launch-planned",
            json!([{"name": "table_export", "arguments": {"path": "launch_plan.csv", "target_path": "planned.csv", "format": "csv",
                "query": "SELECT * FROM data WHERE Status = 'Planned' OR Owner = 'Ethan Park'"}}]),
            vec![
                ("csv_rows", false),
                ("file_contains", true),
                ("file_contains", true),
                ("file_contains", true),
                ("file_unchanged", true),
            ],
        ),
        // Ordered by count: Ops 1, Sales/Growth 1, Engineering 3 (only B3 and the end still match).
        (
            "launch-by-department",
            json!([{"name": "table_export", "arguments": {"path": "launch_plan.csv", "target_path": "summary.xlsx", "format": "xlsx", "sheet": "Summary",
                "query": "SELECT Department, COUNT(*) AS milestones FROM data GROUP BY Department ORDER BY milestones, Department"}}]),
            vec![
                ("xlsx_cell", true),
                ("xlsx_cell", true),
                ("xlsx_cell", false),
                ("xlsx_cell", false),
                ("xlsx_cell", false),
                ("xlsx_cell", true),
                ("xlsx_cell", false),
                ("xlsx_cell", false),
                ("xlsx_cell", true),
            ],
        ),
        // One placeholder left, one filled wrongly.
        (
            "invoice-fill",
            json!([{"name": "docx_operations", "arguments": {"path": "invoice_template.docx", "operations": [
                {"op": "replace_text", "search": "{{company}}", "replace": "Acme Ltd"},
                {"op": "replace_text", "search": "{{total}}", "replace": "1249.5"}]}}]),
            vec![
                ("docx_paragraph", true),
                ("docx_paragraph", false),
                ("docx_paragraph", false),
                ("docx_paragraph", true),
            ],
        ),
        // Holdout: a question answered with a file.
        (
            "penguins-how-many",
            json!([{"name": "write_text_file", "arguments": {"path": "answer.txt", "content": "344\n"}}]),
            vec![("draft_unchanged", false), ("file_unchanged", true)],
        ),
        // "More than 10%" instead of "10% or more": the 33 counties at exactly 0.1 left out.
        (
            "unemployment-over-10",
            json!([{"name": "write_text_file", "arguments": {"path": "counties_10pct.txt", "content": "1068\n"}}]),
            vec![("file_lines", false), ("file_unchanged", true)],
        ),
        // Nine of the ten remarks (in any order, all ten are needed).
        (
            "raw-remarks-list",
            json!([{"name": "write_text_file", "arguments": {"path": "remarks.txt", "content": NINE_REMARKS}}]),
            vec![("file_lines", false), ("file_unchanged", true)],
        ),
        // Ordered by size, not by name: only the first row (Adelie) is where it belongs.
        (
            "penguins-species-table",
            json!([{"name": "table_export", "arguments": {"path": "penguins.csv", "target_path": "species_stats.csv", "format": "csv",
                "query": "SELECT species, COUNT(*) AS birds, ROUND(AVG(flipper_length_mm), 1) AS mean_flipper_mm FROM data GROUP BY species ORDER BY birds DESC"}}]),
            vec![
                ("csv_rows", true),
                ("csv_cell", true),
                ("csv_cell", true),
                ("csv_cell", true),
                ("csv_cell", false),
                ("csv_cell", false),
                ("csv_cell", false),
                ("csv_cell", false),
                ("csv_cell", false),
                ("csv_cell", false),
                ("file_unchanged", true),
            ],
        ),
        // The phrase added as a new paragraph instead of replacing the old one.
        (
            "overview-stage-replace",
            json!([{"name": "docx_operations", "arguments": {"path": "keenbench_company_overview.docx", "operations": [
                {"op": "append_paragraph", "text": "- Stage: seed-funded startup"}]}}]),
            vec![
                ("docx_paragraph", false),
                ("docx_no_paragraph", false),
                ("docx_paragraph", true),
            ],
        ),
        // The fourth slide retitled instead of the third.
        (
            "deck-title-de",
            json!([{"name": "pptx_operations", "arguments": {"path": "keenbench_pitch_deck.pptx", "operations": [
                {"op": "set_slide_text", "index": 3, "title": "Lösung"}]}}]),
            vec![
                ("pptx_title", false),
                ("pptx_title", true),
                ("pptx_title", true),
                ("pptx_title", false),
            ],
        ),
    ];
    // Task names are unique across the splits: the parent folder finds each.
    let root = tasks_root();
    for (task, calls, expected) in cases {
        let model = ScriptedModel::start(one_item(calls)?).await?;
        let (success, report) = eval(&cluster, &root, task, &model.model_spec())?;
        assert!(!success, "{task}: {report:#}");
        let expected: Vec<(String, bool)> = expected
            .into_iter()
            .map(|(kind, passed)| (kind.to_string(), passed))
            .collect();
        assert_eq!(check_outcomes(&report), expected, "{task}: {report:#}");
        assert_eq!(report["tasks"][0]["pass_rate"], json!(0.0), "{task}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_repeat_on_fresh_workbenches_and_keep_leaves_the_drafts() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start()?;
    let model = ScriptedModel::start(oracle(&dev(), "launch-count")?).await?;
    let dir = dev();
    let dir = dir.to_str().unwrap_or_default();
    let spec = model.model_spec();
    let table = cluster.cli_ok(&[
        "eval",
        dir,
        "--task",
        "launch-count",
        "--model",
        &spec,
        "--runs",
        "2",
    ])?;
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.starts_with("launch-count") && l.contains("2/2 100%")),
        "{}",
        table.stdout
    );
    assert!(
        table.stdout.contains("overall (1 task)"),
        "{}",
        table.stdout
    );
    let kept = cluster.cli_ok(&[
        "eval",
        dir,
        "--task",
        "launch-count",
        "--model",
        &spec,
        "--keep",
        "--json",
    ])?;
    let report: Value = kept.json()?;
    let kept_workbench = report["tasks"][0]["results"][0]["workbench"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let list: Value = cluster.cli_ok(&["wb", "list", "--json"])?.json()?;
    let evals: Vec<&Value> = list
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|w| {
                    w["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("eval-launch-count-"))
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(evals.len(), 3, "a fresh workbench per run: {list:#}");
    for workbench in evals {
        let kept = workbench["name"] == json!(kept_workbench);
        assert_eq!(workbench["has_draft"], json!(kept), "{workbench:#}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_past_the_timeout_is_cancelled_and_fails() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start()?;
    let slow: Script = serde_json::from_value(json!({
        "research": [{"content": "Thinking slowly.", "delay_ms": 4000}]
    }))?;
    let model = ScriptedModel::start(slow).await?;
    let dir = dev();
    let output = cluster.cli(&[
        "eval",
        dir.to_str().unwrap_or_default(),
        "--task",
        "launch-count",
        "--model",
        &model.model_spec(),
        "--timeout",
        "1",
        "--json",
    ])?;
    assert!(!output.success);
    let report: Value = output.json()?;
    let run = &report["tasks"][0]["results"][0];
    assert_eq!(run["error"], "EVAL_TIMEOUT", "{report:#}");
    assert_eq!(run["passed"], false);
    assert_eq!(run["checks"], json!([]));
    let job: Value = cluster
        .cli_ok(&["job", run["job_id"].as_str().unwrap_or_default(), "--json"])?
        .json()?;
    assert_ne!(job["state"], "succeeded", "{job:#}");
    Ok(())
}

/// The lines of an eval's results file.
fn result_lines(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .map(|line| Ok(serde_json::from_str(line)?))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_go_in_parallel_and_a_results_file_resumes_an_eval_without_repeating_a_run()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::start()?;
    let model = ScriptedModel::start(oracle(&dev(), "launch-count")?).await?;
    let dir = dev();
    let dir = dir.to_str().unwrap_or_default();
    let spec = model.model_spec();
    let scratch = tempfile::tempdir()?;
    let results = scratch.path().join("results.jsonl");
    let results_arg = results.to_str().unwrap_or_default();
    let eval_runs = |runs: &str, parallel: &str, spec: &str| {
        cluster.cli(&[
            "eval",
            dir,
            "--task",
            "launch-count",
            "--model",
            spec,
            "--runs",
            runs,
            "--parallel",
            parallel,
            "--results",
            results_arg,
            "--json",
        ])
    };

    // Two runs at once: their jobs overlap, and each is in the file as it ended.
    let first = eval_runs("2", "2", &spec)?;
    assert!(first.success, "{}", first.stderr);
    let report: Value = first.json()?;
    assert_eq!(report["overall"]["passed"], 2, "{report:#}");
    let lines = result_lines(&results)?;
    assert_eq!(lines.len(), 2);
    let views = lines
        .iter()
        .map(|line| {
            let job = line["job_id"].as_str().unwrap_or_default();
            cluster.cli_ok(&["job", job, "--json"])?.json::<Value>()
        })
        .collect::<anyhow::Result<Vec<Value>>>()?;
    let (a, b) = (&views[0], &views[1]);
    assert!(
        a["created_at_ms"].as_u64() < b["updated_at_ms"].as_u64()
            && b["created_at_ms"].as_u64() < a["updated_at_ms"].as_u64(),
        "the two runs overlap: {a:#} {b:#}"
    );
    let requests_for_two = model.requests().len();

    // Three runs with the same file: only the third runs; the report holds all three.
    let second = eval_runs("3", "1", &spec)?;
    assert!(second.success, "{}", second.stderr);
    assert!(
        second.stderr.contains("2 runs already in"),
        "{}",
        second.stderr
    );
    let report: Value = second.json()?;
    let runs: Vec<u64> = report["tasks"][0]["results"]
        .as_array()
        .map(|r| r.iter().filter_map(|run| run["run"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(runs, vec![1, 2, 3]);
    assert_eq!(report["overall"]["passed"], 3, "{report:#}");
    assert_eq!(result_lines(&results)?.len(), 3);
    assert_eq!(
        model.requests().len(),
        requests_for_two + requests_for_two / 2,
        "one run's requests, not three"
    );

    // The file is for one model: another is refused before anything runs.
    let other = eval_runs("3", "1", "openai-compat:other")?;
    assert!(!other.success);
    assert!(
        other.stderr.contains("holds runs of model"),
        "{}",
        other.stderr
    );
    assert_eq!(result_lines(&results)?.len(), 3);
    Ok(())
}
