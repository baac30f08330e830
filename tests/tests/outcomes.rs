//! Honest outcomes: a job succeeds only when its work was done. Empty research is nudged, a
//! plan must be a checklist, an item needs a successful tool call or a stated reason, a job
//! with a failed item does not succeed, and the summary lists the draft's real changes. A
//! request that asks for a file cannot end with no change; an item that names its targets is
//! done only when it wrote them; an item's final answer may append plan items.
//! Real nats-server, coordinator and workers; the model is a scripted OpenAI-protocol server.

use anyhow::Context;
use atelier_messages::ErrorCode;
use atelier_messages::job::{ItemStatus, JobOutcome, JobState, JobView};
use atelier_tests::Cluster;
use atelier_tests::scripted::{RECEIPT_CALL_ID, Script, ScriptedModel};
use serde_json::{Value, json};

fn script(value: Value) -> anyhow::Result<Script> {
    Ok(serde_json::from_value(value)?)
}

/// Every message text of the requests `model` received in `phase`, joined.
fn prompts_of(model: &ScriptedModel, phase: &str) -> String {
    model
        .requests()
        .iter()
        .filter(|request| request.phase == phase)
        .map(|request| request.body["messages"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn error_code(view: &JobView) -> Option<ErrorCode> {
    view.error.as_ref().map(|error| error.code)
}

async fn run(script: Script, message: &str) -> anyhow::Result<(ScriptedModel, Cluster, JobView)> {
    let model = ScriptedModel::start(script).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("w", "plan.csv")?;
    let view = cluster.run_job("w", message, &model.model_spec(), &[])?;
    Ok((model, cluster, view))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_claims_an_item_done_without_a_tool_call_never_yields_a_succeeded_job()
-> anyhow::Result<()> {
    // As a small model did: its one call fails (no such file), then it says the item is done.
    let (model, cluster, view) = run(
        script(json!({
            "research": [{"content": "plan.csv has five milestones."}],
            "plan": [{"content": "- [ ] 1. Count — write the row count of penguins.csv to count.txt"}],
            "implement": {"1": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "penguins.csv"}}]},
                {"content": "Item 1 complete."},
                {"content": "Item 1 complete."}
            ]},
            "summary": [{"content": "The number of rows in penguins.csv is 15241."}]
        }))?,
        "Write the number of rows in penguins.csv into count.txt",
    )
    .await?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(error_code(&view), Some(ErrorCode::ItemsFailed));
    let item = &view.items[0];
    assert_eq!(item.status, ItemStatus::Failed);
    assert_eq!(item.failure_code, Some(ErrorCode::ItemNotDone));
    assert_eq!(item.attempts, 2, "the item is retried once");
    assert!(
        view.plan_md
            .as_deref()
            .unwrap_or_default()
            .contains("- [!] 1. Count"),
        "{:?}",
        view.plan_md
    );
    // The model was told that nothing was done, in each attempt.
    let implement = prompts_of(&model, "implement");
    assert!(
        implement.contains("You made no successful tool call"),
        "{implement}"
    );
    // The summary the user reads states the real draft: nothing changed.
    let summary = view.summary.unwrap_or_default();
    assert!(summary.contains("Draft changes: none"), "{summary}");
    assert!(
        cluster
            .cli(&["wb", "ls", "w", "--draft"])?
            .failed_with("NO_DRAFT")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_that_is_not_a_checklist_is_told_the_format_then_fails_plan_invalid()
-> anyhow::Result<()> {
    let garbled = "41 N. Count the number of rows in penguins.csv";
    let (model, _cluster, view) = run(
        script(json!({
            "research": [{"content": "plan.csv has five milestones."}],
            "plan": [{"content": garbled}, {"content": garbled}, {"content": garbled}],
            "summary": [{"content": "Done."}]
        }))?,
        "Count the rows",
    )
    .await?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(error_code(&view), Some(ErrorCode::PlanInvalid));
    assert!(view.items.is_empty());
    let plan = prompts_of(&model, "plan");
    assert!(plan.contains("Your answer is not a checklist"), "{plan}");
    let plan_requests = model
        .requests()
        .iter()
        .filter(|request| request.phase == "plan")
        .count();
    assert_eq!(
        plan_requests, 3,
        "the first answer and two after being told"
    );
    // The failed phase's turns count: one research turn and three plan turns, each reply
    // 100 prompt and 20 completion tokens.
    assert_eq!(view.model_turns, 4);
    assert_eq!((view.prompt_tokens, view.completion_tokens), (400, 80));
    Ok(())
}

/// A text-mode cluster on `script`, with the launch plan as `plan.csv` in workbench `w`.
async fn text_mode(script: Script) -> anyhow::Result<(ScriptedModel, Cluster)> {
    let model = ScriptedModel::start(script).await?;
    let mut cluster = Cluster::start()?;
    cluster.restart_coordinator_with_config(
        &model.profile_toml("small", "tool_mode = \"text\""),
        &[],
    )?;
    cluster.workbench_with_launch_plan("w", "plan.csv")?;
    Ok((model, cluster))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_failing_in_a_turn_counts_every_reply_and_a_resumed_run_adds_to_them()
-> anyhow::Result<()> {
    // The plan's first turn: an unknown tool, corrected three times, then TOOL_CALL_INVALID
    // after four replies (each 100 prompt and 20 completion tokens).
    let unknown =
        json!({"content": "{\"tool\": \"plan_csv\", \"parameters\": {\"path\": \"plan.csv\"}}"});
    let read =
        json!({"content": "{\"tool\": \"read_file\", \"parameters\": {\"path\": \"plan.csv\"}}"});
    let (model, cluster) = text_mode(script(json!({
        "research": [read, {"content": "plan.csv has five milestones."}],
        "plan": [unknown.clone(), unknown.clone(), unknown.clone(), unknown]
    }))?)
    .await?;
    let view = cluster.run_job("w", "Count the rows", "small", &[])?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(error_code(&view), Some(ErrorCode::ToolCallInvalid));
    assert_eq!(model.requests().len(), 6);
    assert_eq!(
        view.model_turns, 3,
        "two research turns, and the failed plan turn"
    );
    assert_eq!((view.prompt_tokens, view.completion_tokens), (600, 120));
    assert_eq!(view.tool_calls, 1);

    // The resumed run walks the journal from the end of research: the failed turn's four
    // replies count once, and the turn asked again adds its own four.
    cluster.cli_ok(&["resume", &view.job_id])?;
    let resumed = cluster.wait_finished(&view.job_id, std::time::Duration::from_secs(120))?;
    assert_eq!(error_code(&resumed), Some(ErrorCode::ToolCallInvalid));
    assert_eq!(model.requests().len(), 10);
    assert_eq!(resumed.model_turns, 4);
    assert_eq!(
        (resumed.prompt_tokens, resumed.completion_tokens),
        (1000, 200)
    );
    assert_eq!(resumed.tool_calls, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn unusable_replies_end_research_without_notes_and_fail_only_their_item() -> anyhow::Result<()>
{
    // Research must call a tool and gets prose four times; the item's calls name no tool.
    let prose = json!({"content": "I will look at the file and count its rows."});
    let unknown = json!({"content": "{\"tool\": \"count_rows\", \"parameters\": {}}"});
    let (model, cluster) = text_mode(script(json!({
        "research": [prose.clone(), prose.clone(), prose.clone(), prose],
        "plan": [{"content": "1. Count — write the row count of plan.csv to count.txt"}],
        "implement": {"1": [unknown.clone(), unknown.clone(), unknown.clone(), unknown]},
        "summary": [{"content": "Wrote count.txt."}]
    }))?)
    .await?;
    let view = cluster.run_job("w", "Count the rows into count.txt", "small", &[])?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(error_code(&view), Some(ErrorCode::ItemsFailed));
    // The plan (a numbered list, as small models write it) saw that research stopped.
    let plan = prompts_of(&model, "plan");
    assert!(plan.contains("Research stopped"), "{plan}");
    let item = &view.items[0];
    assert_eq!(item.label, "Count");
    assert_eq!(item.status, ItemStatus::Failed);
    assert_eq!(item.failure_code, Some(ErrorCode::ToolCallInvalid));
    assert_eq!(item.attempts, 2);
    // research 4 replies, plan 1, two attempts of 4, summary 1: 14 replies in 5 turns.
    assert_eq!(model.requests().len(), 14);
    assert_eq!(view.model_turns, 5);
    assert_eq!((view.prompt_tokens, view.completion_tokens), (1400, 280));
    let summary = view.summary.unwrap_or_default();
    assert!(summary.contains("Draft changes: none"), "{summary}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_research_is_nudged_a_corrected_plan_runs_and_the_summary_lists_the_real_changes()
-> anyhow::Result<()> {
    let (model, _cluster, view) = run(
        script(json!({
            "research": [{"content": "\n\n"}, {"content": "plan.csv has five milestones."}],
            "plan": [
                {"content": "Steps: count, then write"},
                {"content": "- [ ] 1. Notes — write notes.md"}
            ],
            "implement": {"1": [
                {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.md", "content": "five\n"}}]},
                {"content": "Written."}
            ]},
            "summary": [{"content": "I wrote the notes."}]
        }))?,
        "Write notes",
    )
    .await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    let research = prompts_of(&model, "research");
    // Told at once by the provider (an empty reply where a call was required) or by the
    // research phase: the empty answer is never taken as findings.
    assert!(research.contains("was empty"), "{research}");
    assert!(
        view.items.len() == 1,
        "the job went on with the corrected answers"
    );
    assert_eq!(view.items.len(), 1);
    assert_eq!(view.items[0].status, ItemStatus::Done);
    let summary = view.summary.unwrap_or_default();
    assert!(summary.starts_with("I wrote the notes."), "{summary}");
    assert!(summary.contains("- added: notes.md"), "{summary}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stated_reason_that_nothing_needs_to_change_is_recorded_and_the_job_succeeds()
-> anyhow::Result<()> {
    // A question: its item may end with a stated reason and no change.
    let (_model, cluster, view) = run(
        script(json!({
            "research": [{"content": "plan.csv is sorted by date."}],
            "plan": [{"content": "- [ ] 1. Check — check that plan.csv is sorted by date"}],
            "implement": {"1": [{"content": "NO_CHANGE_NEEDED: plan.csv is already sorted by date"}]},
            "summary": [{"content": "Nothing to do."}]
        }))?,
        "Is plan.csv sorted by date?",
    )
    .await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(
        view.items[0].no_change.as_deref(),
        Some("plan.csv is already sorted by date")
    );
    assert!(view.plan_md.as_deref().unwrap_or_default().contains(
        "- [x] 1. Check — check that plan.csv is sorted by date [No change: plan.csv is already sorted by date]"
    ));
    assert!(
        cluster
            .cli(&["wb", "ls", "w", "--draft"])?
            .failed_with("NO_DRAFT")
    );

    // A question needs no plan items when the model says so.
    let model = ScriptedModel::start(script(json!({
        "research": [{"content": "There are five milestones."}],
        "plan": [{"content": "NO_CHANGE_NEEDED: the research answers the question"}],
        "summary": [{"content": "There are five milestones."}]
    }))?)
    .await?;
    let question = cluster.run_job("w", "How many milestones?", &model.model_spec(), &[])?;
    assert_eq!(question.state, JobState::Succeeded, "{question:?}");
    assert!(question.items.is_empty());
    Ok(())
}

/// A penguins table like the one a new user tried: 344 rows of species, island and measures.
fn penguins_csv() -> String {
    let species = ["Adelie", "Chinstrap", "Gentoo"];
    let islands = ["Torgersen", "Dream", "Biscoe"];
    let mut csv = String::from("species,island,bill_length_mm,body_mass_g\n");
    for row in 0..344 {
        csv.push_str(&format!(
            "{},{},{:.1},{}\n",
            species[row % 3],
            islands[(row / 3) % 3],
            32.0 + (row % 27) as f64 * 0.5,
            2700 + (row % 40) * 90
        ));
    }
    csv
}

/// Workbench `w` holding penguins.csv.
fn penguins_workbench(cluster: &Cluster) -> anyhow::Result<()> {
    cluster.cli_ok(&["wb", "create", "w"])?;
    let csv = cluster.dir.path().join("penguins.csv");
    std::fs::write(&csv, penguins_csv())?;
    cluster.cli_ok(&["wb", "add", "w", &csv.to_string_lossy()])?;
    Ok(())
}

/// The model's every answer is seed-format JSON in plain text: no native tool calls at all.
fn seed_json_script() -> anyhow::Result<Script> {
    let call = |tool: &str, parameters: Value| json!({"content": json!({"tool": tool, "parameters": parameters, "terminate": false}).to_string()});
    let answer = |text: &str| json!({"content": json!({"tool": null, "answer": text, "terminate": true}).to_string()});
    script(json!({
        "research": [
            call("table_describe", json!({"path": "penguins.csv"})),
            answer("penguins.csv has columns species, island, bill_length_mm, body_mass_g.")
        ],
        "plan": [answer("- [ ] 1. Count — count the rows of penguins.csv and write the number to count.txt")],
        "implement": {"1": [
            call("table_query", json!({"path": "penguins.csv", "query": "SELECT COUNT(*) AS n FROM data"})),
            call("write_text_file", json!({"path": "count.txt", "content": "344\n"})),
            answer("count.txt holds 344.")
        ]},
        "summary": [{"content": "penguins.csv has 344 rows; count.txt holds the number."}]
    }))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_penguins_job_runs_on_a_model_that_answers_only_with_seed_json_in_text()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(seed_json_script()?).await?;
    let mut cluster = Cluster::start()?;
    cluster.restart_coordinator_with_config(
        &model.profile_toml("small", "tool_mode = \"text\""),
        &[],
    )?;
    penguins_workbench(&cluster)?;

    let view = cluster.run_job(
        "w",
        "Write the number of rows in penguins.csv into a text file count.txt",
        "small",
        &[],
    )?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(view.tool_calls, 3, "describe, query, write");
    let written = cluster.cli_ok(&["wb", "cat", "w", "count.txt", "--draft"])?;
    assert_eq!(written.stdout, "344\n");
    // Text mode: no request offered native tools, the catalog was in the prompt, and the
    // query's real answer reached the model as text.
    let requests = model.requests();
    assert!(
        requests
            .iter()
            .all(|request| request.body.get("tools").is_none())
    );
    let implement = prompts_of(&model, "implement");
    assert!(
        implement.contains("Tool result for table_query"),
        "{implement}"
    );
    assert!(implement.contains("344"), "{implement}");
    let summary = view.summary.unwrap_or_default();
    assert!(summary.contains("- added: count.txt"), "{summary}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ad_hoc_local_model_writing_its_calls_as_text_works_without_a_profile()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(seed_json_script()?).await?;
    let cluster = Cluster::start()?;
    penguins_workbench(&cluster)?;
    // `openai-compat:URL#MODEL` alone: auto mode offers native tools and reads text calls.
    let view = cluster.run_job(
        "w",
        "Write the number of rows in penguins.csv into a text file count.txt",
        &model.model_spec(),
        &[],
    )?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    let written = cluster.cli_ok(&["wb", "cat", "w", "count.txt", "--draft"])?;
    assert_eq!(written.stdout, "344\n");
    assert!(
        model
            .requests()
            .iter()
            .any(|request| request.body.get("tools").is_some()),
        "auto mode offers the tools natively too"
    );
    // The mode in the spec: text mode offers none natively.
    let text = ScriptedModel::start(seed_json_script()?).await?;
    let spec = text
        .model_spec()
        .replacen("openai-compat:", "openai-compat+text:", 1);
    cluster.cli_ok(&["draft", "discard", "w"])?;
    let view = cluster.run_job(
        "w",
        "Write the number of rows in penguins.csv into a text file count.txt",
        &spec,
        &[],
    )?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert!(
        text.requests()
            .iter()
            .all(|request| request.body.get("tools").is_none())
    );
    Ok(())
}

/// Notes with long, partly multi-byte text cells: 60 rows of about 450 characters each.
fn long_notes_csv() -> String {
    let mut csv = String::from("id,note\n");
    for row in 0..60 {
        let words = "café naïve — déjà vu über straße ".repeat(12);
        csv.push_str(&format!("{row},NOTE-{row:03} {words}END-{row:03}\n"));
    }
    csv
}

/// The `query_elapsed_ms` a `table_query` result's text states.
fn elapsed_in(text: Option<&str>) -> u64 {
    text.and_then(|text| text.split("\"query_elapsed_ms\":").nth(1))
        .map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_default()
}

/// The tool results (contents of `tool` messages) of the research request at `turn`.
fn research_results(model: &ScriptedModel, turn: usize) -> Vec<Value> {
    model
        .tool_results("research", None, turn)
        .iter()
        .map(|content| serde_json::from_str(content).unwrap_or(Value::Null))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_result_is_shown_as_a_receipt_and_recall_tool_result_reads_it_back()
-> anyhow::Result<()> {
    let query = json!({"path": "notes.csv", "query": "SELECT * FROM data ORDER BY id"});
    let model = ScriptedModel::start(script(json!({
        "research": [
            {"tool_calls": [{"name": "table_query", "arguments": query}]},
            {"tool_calls": [{"name": "recall_tool_result", "arguments": {"call_id": RECEIPT_CALL_ID, "offset": 16_000, "length": 3_000}}]},
            {"tool_calls": [{"name": "recall_tool_result", "arguments": {"call_id": "another-job.research.0.1.0.0"}}]},
            {"content": "notes.csv holds 60 long notes."}
        ],
        "plan": [{"content": "NO_CHANGE_NEEDED: the research answers the question"}],
        "summary": [{"content": "notes.csv holds 60 long notes."}]
    }))?)
    .await?;
    let cluster = Cluster::start()?;
    cluster.cli_ok(&["wb", "create", "w"])?;
    let csv = cluster.dir.path().join("notes.csv");
    std::fs::write(&csv, long_notes_csv())?;
    cluster.cli_ok(&["wb", "add", "w", &csv.to_string_lossy()])?;
    let view = cluster.run_job("w", "What do the notes say?", &model.model_spec(), &[])?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(
        view.tool_calls, 3,
        "query, recall, recall of an unknown call"
    );

    // The model was shown a receipt, not the result.
    let shown = research_results(&model, 1);
    let receipt = &shown[0]["receipt"];

    // The full result, as the tabular pool answers the same query (with the job's timing).
    let client = async_nats::connect(&cluster.nats.url).await?;
    let listing = cluster.current_listing("w")?;
    let mut output =
        atelier_tests::call_tool(&client, &listing, "direct", "table_query", query, "tabular")
            .await?
            .map_err(|error| anyhow::anyhow!("{error:?}"))?
            .output;
    output["query_elapsed_ms"] = json!(elapsed_in(receipt["preview"].as_str()));
    let full = output.to_string();
    let total = full.chars().count();
    assert!(total > 19_000, "{total}");

    assert!(
        receipt["call_id"]
            .as_str()
            .is_some_and(|id| id.ends_with(".research.0.1.0.0"))
    );
    assert_eq!(receipt["tool"], "table_query");
    assert_eq!(receipt["chars"], total);
    let preview: String = full.chars().take(2_000).collect();
    assert_eq!(receipt["preview"], preview.as_str());
    let body = model
        .requests()
        .iter()
        .find(|request| request.phase == "research" && request.turn == 1)
        .map(|request| request.body.to_string())
        .unwrap_or_default();
    assert!(body.contains("recall_tool_result with call_id"), "{body}");
    assert!(
        !body.contains("NOTE-059"),
        "the last rows are not in the prompt"
    );

    // The recalled slice is exactly that part of the full result.
    let recalled = &research_results(&model, 2)[1];
    let expected: String = full.chars().skip(16_000).take(3_000).collect();
    assert_eq!(recalled["text"], expected.as_str());
    assert_eq!(recalled["offset"], 16_000);
    assert_eq!(recalled["length"], 3_000);
    assert_eq!(recalled["total_chars"], total);
    assert_eq!(recalled["next_offset"], 19_000);
    assert_eq!(recalled["call_id"], receipt["call_id"]);

    // Another job's call id is not found, and the model is told so.
    let unknown = &research_results(&model, 3)[2];
    assert_eq!(unknown["error"]["code"], "NOT_FOUND", "{unknown}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_no_change_reason_after_a_successful_write_is_not_recorded() -> anyhow::Result<()> {
    let (_model, _cluster, view) = run(
        script(json!({
            "research": [{"content": "plan.csv has five milestones."}],
            "plan": [{"content": "- [ ] 1. Notes — write notes.md"}],
            "implement": {"1": [
                {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.md", "content": "five\n"}}]},
                {"content": "NO_CHANGE_NEEDED: the notes were already there"}
            ]},
            "summary": [{"content": "Notes written."}]
        }))?,
        "Write notes",
    )
    .await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(view.items[0].status, ItemStatus::Done);
    assert_eq!(
        view.items[0].no_change, None,
        "the item did change the draft"
    );
    Ok(())
}

/// Submits with `--wait --json` and returns the command's output with the job's final view.
fn submit_wait(
    cluster: &Cluster,
    workbench: &str,
    message: &str,
    model: &str,
) -> anyhow::Result<(atelier_tests::CliOutput, JobView)> {
    let out = cluster.cli(&[
        "submit", workbench, message, "--model", model, "--wait", "--json",
    ])?;
    let view = out.json()?;
    Ok((out, view))
}

/// `atelier job`'s outcome line, `atelier watch`'s last line, the `finished` event of `watch
/// --json` and the jobs listing all tell `outcome`.
fn assert_outcome_told(
    cluster: &Cluster,
    job_id: &str,
    outcome: &JobOutcome,
) -> anyhow::Result<()> {
    let text = match outcome {
        JobOutcome::Answered => "answered without changes".to_string(),
        JobOutcome::Changed { files } => format!("changed 1 file: {}", files.join(", ")),
    };
    let shown = cluster.cli_ok(&["job", job_id])?.stdout;
    assert!(
        shown
            .lines()
            .any(|line| line == format!("outcome    {text}")),
        "{shown}"
    );
    let watched = cluster.cli_ok(&["watch", job_id])?.stdout;
    assert_eq!(
        watched.lines().last(),
        Some(format!("job {job_id}: succeeded — {text}").as_str()),
        "{watched}"
    );
    let events = cluster.cli_ok(&["watch", job_id, "--json"])?.stdout;
    let finished: Vec<Value> = events
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["kind"]["type"] == "job_finished")
        .collect();
    assert_eq!(finished.len(), 1, "{events}");
    assert_eq!(
        finished[0]["kind"]["outcome"],
        serde_json::to_value(outcome)?
    );
    let listed = cluster.cli_ok(&["jobs"])?.stdout;
    let brief = match outcome {
        JobOutcome::Answered => "answered",
        JobOutcome::Changed { .. } => "changed 1 file",
    };
    assert!(
        listed
            .lines()
            .any(|line| line.starts_with(job_id) && line.ends_with(brief)),
        "{listed}"
    );
    Ok(())
}

/// The files of the workbench's draft (`wb ls --draft --json`), or none without a draft.
fn draft_files(cluster: &Cluster, workbench: &str) -> anyhow::Result<String> {
    Ok(cluster.cli(&["wb", "ls", workbench, "--draft"])?.stdout)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_that_says_no_change_for_a_file_request_is_refused_and_never_succeeds()
-> anyhow::Result<()> {
    // As the small model answered: the escape the plan prompt used to offer, word for word.
    let escape =
        json!({"content": "NO_CHANGE_NEEDED: The request is a question the research answers."});
    let request = "Write the number of rows in plan.csv into count.txt";
    let model = ScriptedModel::start(script(json!({
        "research": [{"content": "plan.csv has five milestones."}],
        "plan": [escape.clone(), escape],
        "summary": [{"content": "plan.csv has 5 rows."}]
    }))?)
    .await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("w", "plan.csv")?;
    let (out, view) = submit_wait(&cluster, "w", request, &model.model_spec())?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert!(
        !out.success,
        "submit --wait exits non-zero for a failed job"
    );
    assert_eq!(error_code(&view), Some(ErrorCode::PlanInvalid));
    assert_eq!(view.outcome, None, "only a succeeded job has an outcome");
    let message = view.error.map(|error| error.message).unwrap_or_default();
    assert!(message.contains("count.txt"), "{message}");
    assert!(view.items.is_empty());
    // Asked once more, told why; the plan prompt offered no way out for this request.
    let plan = prompts_of(&model, "plan");
    assert!(plan.contains("That answer was refused"), "{plan}");
    assert_eq!(model.count("plan", None, 1), 1);
    assert_eq!(model.count("plan", None, 2), 0, "asked only once more");
    let first = model
        .requests()
        .into_iter()
        .find(|request| request.phase == "plan")
        .map(|request| request.body["messages"][0]["content"].to_string())
        .unwrap_or_default();
    assert!(!first.contains("NO_CHANGE_NEEDED"), "{first}");
    assert!(
        first.contains("→ file"),
        "the plan is asked for targets: {first}"
    );
    assert!(
        cluster
            .cli(&["wb", "ls", "w", "--draft"])?
            .failed_with("NO_DRAFT")
    );

    // Told why, a model that then plans the write gets its job done.
    let model = ScriptedModel::start(script(json!({
        "research": [{"content": "plan.csv has five milestones."}],
        "plan": [
            {"content": "NO_CHANGE_NEEDED: there are 5 rows"},
            {"content": "- [ ] 1. Count — write the row count → count.txt"}
        ],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "count.txt", "content": "5\n"}}]},
            {"content": "Wrote count.txt."}
        ]},
        "summary": [{"content": "count.txt holds 5."}]
    }))?)
    .await?;
    let (out, view) = submit_wait(&cluster, "w", request, &model.model_spec())?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert!(out.success);
    assert_eq!(view.items[0].targets, ["count.txt"]);
    assert_eq!(view.items[0].changed, ["count.txt"]);
    // The outcome is the store's: exactly the file written, in the view, its text and its event.
    let wrote = JobOutcome::Changed {
        files: vec!["count.txt".into()],
    };
    assert_eq!(view.outcome.as_ref(), Some(&wrote), "{}", out.stdout);
    assert_outcome_told(&cluster, &view.job_id, &wrote)?;

    // A question answered with a reason still succeeds, with its answer.
    let model = ScriptedModel::start(script(json!({
        "research": [{"content": "plan.csv has five milestones."}],
        "plan": [{"content": "NO_CHANGE_NEEDED: plan.csv has 5 rows"}],
        "summary": [{"content": "plan.csv has 5 rows."}]
    }))?)
    .await?;
    cluster.workbench_with_launch_plan("q", "plan.csv")?;
    let (out, view) = submit_wait(
        &cluster,
        "q",
        "How many rows does plan.csv have?",
        &model.model_spec(),
    )?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert!(out.success);
    assert!(view.items.is_empty());
    assert_eq!(view.outcome, Some(JobOutcome::Answered));
    assert_outcome_told(&cluster, &view.job_id, &JobOutcome::Answered)?;
    assert!(
        view.summary
            .unwrap_or_default()
            .starts_with("plan.csv has 5 rows.")
    );
    let plan = prompts_of(&model, "plan");
    assert!(
        plan.contains("NO_CHANGE_NEEDED"),
        "a question is offered the way out: {plan}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn items_that_only_read_for_a_file_request_do_not_make_a_succeeded_job() -> anyhow::Result<()>
{
    // Every item "done" after a read, nothing written: the request's file was never made.
    let (_model, _cluster, view) = run(
        script(json!({
            "research": [{"content": "plan.csv has five milestones."}],
            "plan": [{"content": "- [ ] 1. Count — count the rows of plan.csv"}],
            "implement": {"1": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "plan.csv"}}]},
                {"content": "There are 5 rows."}
            ]},
            "summary": [{"content": "count.txt holds 5."}]
        }))?,
        "Write the number of rows in plan.csv into count.txt",
    )
    .await?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    // The one-item plan took the file the request names as its target, so the item itself is
    // held to writing it: not done, and the job fails naming it.
    let item = &view.items[0];
    assert_eq!(item.targets, ["count.txt"]);
    assert_eq!(item.status, ItemStatus::Failed);
    assert_eq!(item.failure_code, Some(ErrorCode::ItemNotDone));
    assert!(item.changed.is_empty());
    assert_eq!(error_code(&view), Some(ErrorCode::ItemsFailed));
    let message = view
        .error
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(message.contains("did not write count.txt"), "{message}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_item_naming_count_txt_that_wrote_only_notes_txt_is_not_done() -> anyhow::Result<()> {
    // The retry writes notes.txt again, an overwrite: approved in advance.
    let model = ScriptedModel::start(script(json!({
            "research": [{"content": "plan.csv has five milestones."}],
            "plan": [{"content": "- [ ] 1. Count — write the row count → count.txt"}],
            "implement": {"1": [
                {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.txt", "content": "5 rows\n"}}]},
                {"content": "Wrote the count."}
            ]},
            "summary": [{"content": "count.txt holds 5."}]
    }))?)
    .await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("w", "plan.csv")?;
    let view = cluster.run_job(
        "w",
        "Write the number of rows in plan.csv into count.txt",
        &model.model_spec(),
        &["--auto-approve"],
    )?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(error_code(&view), Some(ErrorCode::ItemsFailed));
    let item = &view.items[0];
    assert_eq!(item.status, ItemStatus::Failed);
    assert_eq!(item.failure_code, Some(ErrorCode::ItemNotDone));
    assert_eq!(
        item.attempts, 2,
        "the retry is told which target was not written"
    );
    let reason = item.failure.clone().unwrap_or_default();
    assert!(reason.contains("did not write count.txt"), "{reason}");
    assert_eq!(item.changed, ["notes.txt"]);
    let listing = draft_files(&cluster, "w")?;
    assert!(!listing.contains("count.txt"), "{listing}");

    // An item that wrote its target and more is done; the summary names the unnamed file.
    let model = ScriptedModel::start(script(json!({
        "research": [{"content": "plan.csv has five milestones."}],
        "plan": [{"content": "- [ ] 1. Count — write the row count → count.txt"}],
        "implement": {"1": [
            {"tool_calls": [
                {"name": "write_text_file", "arguments": {"path": "count.txt", "content": "5\n"}},
                {"name": "write_text_file", "arguments": {"path": "notes.txt", "content": "5 rows\n"}}
            ]},
            {"content": "Wrote count.txt."}
        ]},
        "summary": [{"content": "count.txt holds 5."}]
    }))?)
    .await?;
    cluster.workbench_with_launch_plan("w2", "plan.csv")?;
    let view = cluster.run_job(
        "w2",
        "Write the number of rows in plan.csv into count.txt",
        &model.model_spec(),
        &[],
    )?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(view.items[0].changed, ["count.txt", "notes.txt"]);
    let summary = view.summary.unwrap_or_default();
    assert!(
        summary.contains("Item 1 (Count) also changed files it did not name: notes.txt."),
        "{summary}"
    );
    assert!(
        view.plan_md
            .unwrap_or_default()
            .contains("→ count.txt [Also changed: notes.txt]")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_naming_a_target_outside_the_workbench_is_refused_before_anything_runs()
-> anyhow::Result<()> {
    let (model, cluster, view) = run(
        script(json!({
            "research": [{"content": "plan.csv has five milestones."}],
            "plan": [{"content": "- [ ] 1. Notes — write notes → notes.txt\n- [ ] 2. Escape — write it → ../outside.txt"}],
            "implement": {"1": [
                {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.txt", "content": "x\n"}}]},
                {"content": "Done."}
            ]}
        }))?,
        "Write notes.txt",
    )
    .await?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(error_code(&view), Some(ErrorCode::SandboxViolation));
    assert_eq!(model.count("implement", Some(1), 0), 0, "nothing ran");
    assert!(
        cluster
            .cli(&["wb", "ls", "w", "--draft"])?
            .failed_with("NO_DRAFT")
    );
    Ok(())
}

/// One item that writes count.txt and appends two items; the plan may grow to two.
fn amendment_script() -> anyhow::Result<Script> {
    script(json!({
        "research": [{"content": "plan.csv has five milestones."}],
        "plan": [{"content": "- [ ] 1. Count — write the row count → count.txt"}],
        "implement": {
            "1": [
                {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "count.txt", "content": "5\n"}}]},
                {"content": "Wrote count.txt.\n- [ ] 2. Notes — note how it was counted → notes.md\n- [ ] 3. More — beyond the cap → more.md"}
            ],
            "2": [
                {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.md", "content": "counted rows\n"}}]},
                {"content": "Wrote notes.md."}
            ]
        },
        "summary": [{"content": "count.txt and notes.md are written."}]
    }))
}

const COUNT_REQUEST: &str = "Write the number of rows in plan.csv into count.txt";

#[tokio::test(flavor = "multi_thread")]
async fn an_amendment_appended_by_an_item_runs_in_order() -> anyhow::Result<()> {
    let (model, _cluster, view) = run(amendment_script()?, COUNT_REQUEST).await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    // One original item: the plan may grow to two; the third line is dropped.
    assert_eq!(view.items.len(), 2, "{:?}", view.items);
    let amended = &view.items[1];
    assert_eq!((amended.index, amended.label.as_str()), (2, "Notes"));
    assert!(amended.amended);
    assert_eq!(amended.status, ItemStatus::Done);
    assert_eq!(amended.changed, ["notes.md"]);
    let plan_md = view.plan_md.unwrap_or_default();
    assert!(
        plan_md.starts_with("<!-- original_count: 1 -->"),
        "{plan_md}"
    );
    assert!(
        plan_md.contains("- [x] 2. Notes — note how it was counted → notes.md"),
        "{plan_md}"
    );
    // It ran after item 1, as plan item 2 of 2.
    assert_eq!(model.count("implement", Some(2), 0), 1);
    let summary = view.summary.unwrap_or_default();
    assert!(summary.contains("- added: notes.md"), "{summary}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_job_neither_repeats_nor_loses_an_amendment() -> anyhow::Result<()> {
    // Killed right after item 1's final answer is journaled (the fourth model turn), and right
    // after the state with item 1 done and its amendment is saved (the third save).
    for point in ["after_model_turn@4", "after_checkpoint@3"] {
        let model = ScriptedModel::start(amendment_script()?).await?;
        let mut cluster = Cluster::start()?;
        cluster.workbench_with_launch_plan("w", "plan.csv")?;
        cluster.kill_coordinator();
        cluster.start_coordinator_with_env(&[("ATELIER_FAILPOINTS", point)])?;
        let job_id = cluster.submit("w", COUNT_REQUEST, &model.model_spec())?;
        let coordinator = cluster.coordinator.as_mut().context("no coordinator")?;
        anyhow::ensure!(
            coordinator.wait_exit(std::time::Duration::from_secs(120)),
            "failpoint {point} was never reached\n{}",
            cluster.logs()
        );
        cluster.start_coordinator()?;
        let view = cluster.wait_finished(&job_id, std::time::Duration::from_secs(120))?;
        assert_eq!(view.state, JobState::Succeeded, "{point}: {view:?}");
        let labels: Vec<_> = view.items.iter().map(|item| item.label.as_str()).collect();
        assert_eq!(labels, ["Count", "Notes"], "{point}");
        // The files at the job's start were journaled before the kill: both writes count.
        let files = vec!["count.txt".to_string(), "notes.md".to_string()];
        assert_eq!(view.outcome, Some(JobOutcome::Changed { files }), "{point}");
        assert!(
            view.items
                .iter()
                .all(|item| item.status == ItemStatus::Done)
        );
        assert_eq!(
            model.count("implement", Some(1), 1),
            1,
            "{point}: item 1 answered once"
        );
        assert_eq!(
            model.count("implement", Some(2), 0),
            1,
            "{point}: the amendment ran once"
        );
    }
    Ok(())
}

/// A compact text-mode profile (a small model's settings) with keenbench's `simple.docx` in
/// workbench `w`.
async fn compact_with_document(script: Script) -> anyhow::Result<(ScriptedModel, Cluster)> {
    let model = ScriptedModel::start(script).await?;
    let mut cluster = Cluster::start()?;
    cluster.restart_coordinator_with_config(
        &model.profile_toml("small", "tool_mode = \"text\"\nprompt = \"compact\""),
        &[],
    )?;
    cluster.cli_ok(&["wb", "create", "w"])?;
    let document = atelier_tests::fixtures().join("keenbench/office/simple.docx");
    cluster.cli_ok(&["wb", "add", "w", &document.to_string_lossy()])?;
    Ok((model, cluster))
}

/// A text-mode call of `tool` with `parameters`, as a small model writes it.
fn text_call(tool: &str, parameters: Value) -> Value {
    json!({"content": json!({"tool": tool, "parameters": parameters, "terminate": false}).to_string()})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_small_models_job_that_never_wrote_a_quoted_text_does_not_succeed() -> anyhow::Result<()>
{
    const REQUEST: &str = "Append to simple.docx a paragraph \"Conclusion\" followed by the \
                           paragraph \"Revenue grew by 15% and three major releases shipped.\"";
    let read = text_call("read_file", json!({"path": "simple.docx"}));
    let append = |texts: &[&str]| {
        let operations: Vec<Value> = texts
            .iter()
            .map(|text| json!({"op": "append_paragraph", "text": text}))
            .collect();
        text_call(
            "docx_operations",
            json!({"path": "simple.docx", "operations": operations}),
        )
    };
    let sentence = "Revenue grew by 15% and three major releases shipped.";
    // As the 0.5B model did: one item, the sentence appended, never "Conclusion".
    let (_model, cluster) = compact_with_document(script(json!({
        "research": [read.clone(), {"content": "simple.docx is a quarterly review."}],
        "plan": [{"content": "- [ ] 1. Append — append the conclusion to the report → simple.docx"}],
        "implement": {"1": [read.clone(), append(&[sentence]), {"content": "Done."}]},
        "summary": [{"content": "Appended the conclusion."}]
    }))?)
    .await?;
    let view = cluster.run_job("w", REQUEST, "small", &[])?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(error_code(&view), Some(ErrorCode::ItemNotDone));
    let message = view.error.as_ref().map(|error| error.message.clone());
    assert!(
        message.as_deref().is_some_and(
            |message| message.contains("\"Conclusion\"") && !message.contains("Revenue grew")
        ),
        "{message:?}"
    );

    // Both texts appended: the job succeeds with the document changed.
    let (_both, cluster) = compact_with_document(script(json!({
        "research": [read.clone(), {"content": "simple.docx is a quarterly review."}],
        "plan": [{"content": "- [ ] 1. Append — append the conclusion to the report → simple.docx"}],
        "implement": {"1": [read, append(&["Conclusion", sentence]), {"content": "Done."}]},
        "summary": [{"content": "Appended the conclusion."}]
    }))?)
    .await?;
    let view = cluster.run_job("w", REQUEST, "small", &[])?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(
        view.outcome,
        Some(JobOutcome::Changed {
            files: vec!["simple.docx".into()]
        })
    );
    Ok(())
}
