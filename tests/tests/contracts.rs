//! Honest by contract: a plan item says what each target must hold, and the engine checks the
//! written content against it when the item ends. A broken contract is told to the model once
//! (`ITEM_NOT_DONE`, what differs), then the item fails; a contract's source query is run over
//! the workbench's table and compared; a source query that fails does not fail the job; a
//! contract naming a path outside the workbench is `SANDBOX_VIOLATION` before anything runs.
//! Real nats-server, coordinator, workers and DuckDB; the model is a scripted OpenAI-protocol
//! server.

use atelier_messages::ErrorCode;
use atelier_messages::contract::Holds;
use atelier_messages::job::{ItemStatus, JobState, JobView};
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::{Cluster, docx_paragraph_text, export_draft};
use calamine::{Data, DataType, Reader, Xlsx, open_workbook};
use serde_json::{Value, json};

fn script(value: Value) -> anyhow::Result<Script> {
    Ok(serde_json::from_value(value)?)
}

fn error_code(view: &JobView) -> Option<ErrorCode> {
    view.error.as_ref().map(|error| error.code)
}

const REQUEST: &str = "How many different islands do the penguins in penguins.csv come from? Put the figure in islands.txt.";

/// A cluster with penguins.csv in workbench `w`, running `script` on `message`.
async fn run(script: Script, message: &str) -> anyhow::Result<(ScriptedModel, Cluster, JobView)> {
    run_with(script, message, &[]).await
}

/// [`run`] with `flags` on the submit (`--auto-approve`).
async fn run_with(
    script: Script,
    message: &str,
    flags: &[&str],
) -> anyhow::Result<(ScriptedModel, Cluster, JobView)> {
    run_on("palmerpenguins/penguins.csv", script, message, flags).await
}

/// A cluster with the fixture `file` in workbench `w`, running `script` on `message`.
async fn run_on(
    file: &str,
    script: Script,
    message: &str,
    flags: &[&str],
) -> anyhow::Result<(ScriptedModel, Cluster, JobView)> {
    let model = ScriptedModel::start(script).await?;
    let cluster = Cluster::start()?;
    cluster.cli_ok(&["wb", "create", "w"])?;
    let path = atelier_tests::fixtures().join(file);
    cluster.cli_ok(&["wb", "add", "w", &path.to_string_lossy()])?;
    let view = cluster.run_job("w", message, &model.model_spec(), flags)?;
    Ok((model, cluster, view))
}

fn write(path: &str, content: &str) -> Value {
    json!({"tool_calls": [{"name": "write_text_file", "arguments": {"path": path, "content": content}}]})
}

/// The plan: one item writing islands.txt, held to the number of distinct islands.
fn counted_plan() -> Value {
    json!([{"content": "- [ ] 1. Count — count the distinct islands → islands.txt\n  \
        - islands.txt: number from penguins.csv = SELECT count(DISTINCT island) FROM data"}])
}

/// [`REQUEST`] with [`counted_plan`]: the item writes `first` into islands.txt, and `retry`
/// when it is tried again.
async fn counted(first: &str, retry: &str) -> anyhow::Result<(ScriptedModel, Cluster, JobView)> {
    let script = script(json!({
        "research": [{"content": "penguins.csv has an island column."}],
        "plan": counted_plan(),
        "implement": {
            "1": [write("islands.txt", first), {"content": "Wrote islands.txt."}],
            "1@retry": [write("islands.txt", retry), {"content": "Wrote islands.txt."}]
        },
        "summary": [{"content": "Islands counted."}]
    }))?;
    run(script, REQUEST).await
}

/// [`REQUEST`] with `plan`: the item writes 3 into islands.txt, on each attempt.
async fn counted_with_plan(plan: Value) -> anyhow::Result<(ScriptedModel, Cluster, JobView)> {
    counted_with_plan_for(REQUEST, plan).await
}

/// `request` with `plan`: the item writes 3 into islands.txt, on each attempt.
async fn counted_with_plan_for(
    request: &str,
    plan: Value,
) -> anyhow::Result<(ScriptedModel, Cluster, JobView)> {
    let script = script(json!({
        "research": [{"content": "penguins.csv has an island column."}],
        "plan": plan,
        "implement": {
            "1": [write("islands.txt", "3\n"), {"content": "Wrote 3."}],
            "1@retry": [write("islands.txt", "3\n"), {"content": "Wrote 3."}]
        },
        "summary": [{"content": "Three."}]
    }))?;
    run(script, request).await
}

/// [`REQUEST`] with `plan`: the item writes 3 into islands.txt.
async fn writes_three(plan: Value) -> anyhow::Result<(ScriptedModel, Cluster, JobView)> {
    let script = script(json!({
        "research": [{"content": "penguins.csv has an island column."}],
        "plan": plan,
        "implement": {"1": [write("islands.txt", "3\n"), {"content": "Wrote 3."}]},
        "summary": [{"content": "Three."}]
    }))?;
    run(script, REQUEST).await
}

/// The failure of the job's first item, which ended `ITEM_NOT_DONE` after its retry (the job
/// failed).
fn not_done_after_its_retry(view: &JobView) -> String {
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    let item = &view.items[0];
    assert_eq!(
        (item.attempts, item.failure_code),
        (2, Some(ErrorCode::ItemNotDone))
    );
    item.failure.clone().unwrap_or_default()
}

/// The failure of the job's first item, which ended `ITEM_NOT_DONE` without a retry: its
/// contract cannot be checked (the job failed).
fn not_done_at_once(view: &JobView) -> String {
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    let item = &view.items[0];
    assert_eq!(
        (item.attempts, item.failure_code),
        (1, Some(ErrorCode::ItemNotDone))
    );
    item.failure.clone().unwrap_or_default()
}

fn draft_text(cluster: &Cluster, path: &str) -> anyhow::Result<String> {
    Ok(cluster.cli_ok(&["wb", "cat", "w", path, "--draft"])?.stdout)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_values_where_their_count_was_promised_are_told_once_then_corrected()
-> anyhow::Result<()> {
    // As a small model did on an unseen task: the distinct values written where their number
    // was asked for. The retry, told what differs, writes the number.
    let (model, cluster, view) = counted("Biscoe\nDream\nTorgersen\n", "3\n").await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(draft_text(&cluster, "islands.txt")?, "3\n");
    let item = &view.items[0];
    assert_eq!(item.attempts, 2);
    assert_eq!(item.contracts.len(), 1);
    assert_eq!(item.contracts[0].holds, Holds::Number);
    // The retry was told what differs: the file holds a list where one number was promised.
    let retry = model
        .requests()
        .into_iter()
        .filter(|request| request.phase == "implement")
        .map(|request| request.body["messages"][0]["content"].to_string())
        .find(|system| system.contains("The previous attempt failed"))
        .unwrap_or_default();
    assert!(
        retry.contains("breaks the plan's contract")
            && retry.contains("islands.txt: it should hold one number alone"),
        "{retry}"
    );
    // The contract is shown in the plan the job view carries.
    let plan_md = view.plan_md.unwrap_or_default();
    assert!(
        plan_md.contains(
            "  - islands.txt: number from penguins.csv = SELECT count(DISTINCT island) FROM data"
        ),
        "{plan_md}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_number_against_its_source_never_ends_succeeded() -> anyhow::Result<()> {
    // A number, but not the source's: told once with the source's value, wrong again, failed.
    let (_model, cluster, view) = counted("4\n", "5\n").await?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(error_code(&view), Some(ErrorCode::ItemsFailed));
    let item = &view.items[0];
    assert_eq!(item.status, ItemStatus::Failed);
    assert_eq!(item.failure_code, Some(ErrorCode::ItemNotDone));
    assert_eq!(item.attempts, 2, "told once, then failed");
    let failure = item.failure.clone().unwrap_or_default();
    assert!(
        failure.contains("it holds 5, and its source query gives 3"),
        "{failure}"
    );
    assert_eq!(draft_text(&cluster, "islands.txt")?, "5\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_later_item_that_rewrites_an_earlier_items_target_is_held_to_its_contract()
-> anyhow::Result<()> {
    // Item 1 writes the checked number; item 2, held only to `text`, writes prose over it. Were
    // each item checked against its own contracts alone, the job would end `succeeded` with no
    // number in islands.txt.
    let prose = "The penguins come from Biscoe, Dream and Torgersen.\n";
    let script = script(json!({
        "research": [{"content": "penguins.csv has an island column."}],
        "plan": [{"content": "- [ ] 1. Count — count the distinct islands → islands.txt\n  \
            - islands.txt: number from penguins.csv = SELECT count(DISTINCT island) FROM data\n\
            - [ ] 2. Explain — say where they come from → islands.txt\n  \
            - islands.txt: text"}],
        "implement": {
            "1": [write("islands.txt", "3\n"), {"content": "Wrote 3."}],
            "2": [write("islands.txt", prose), {"content": "Wrote the islands."}],
            "2@retry": [write("islands.txt", prose), {"content": "Wrote the islands."}]
        },
        "summary": [{"content": "Islands."}]
    }))?;
    let (_model, cluster, view) = run(script, REQUEST).await?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(error_code(&view), Some(ErrorCode::ItemsFailed));
    assert_eq!(view.items[0].status, ItemStatus::Done);
    let item = &view.items[1];
    assert_eq!(item.status, ItemStatus::Failed);
    assert_eq!(item.failure_code, Some(ErrorCode::ItemNotDone));
    assert_eq!(item.attempts, 2, "told once, then failed");
    let failure = item.failure.clone().unwrap_or_default();
    assert!(
        failure.contains(
            "islands.txt (as item 1 declared it, and this item rewrote it): it should hold one \
             number alone"
        ),
        "{failure}"
    );
    assert_eq!(draft_text(&cluster, "islands.txt")?, prose);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_list_and_a_table_are_checked_against_their_sources() -> anyhow::Result<()> {
    let plan = "- [ ] 1. List — the islands and their penguins → islands.txt, counts.csv\n  \
        - islands.txt: list of 3 from penguins.csv = SELECT DISTINCT island FROM data ORDER BY island\n  \
        - counts.csv: table (island, penguins) from penguins.csv = SELECT island, count(*) FROM data GROUP BY island";
    let (_model, cluster, view) = run(
        script(json!({
            "research": [{"content": "penguins.csv has an island column."}],
            "plan": [{"content": plan}],
            "implement": {"1": [
                write("islands.txt", "Biscoe\nDream\nTorgersen\n"),
                write("counts.csv", "island,penguins\nTorgersen,52\nBiscoe,168\nDream,124\n"),
                {"content": "Wrote both."}
            ]},
            "summary": [{"content": "Listed."}]
        }))?,
        "List the islands of penguins.csv in islands.txt, and their penguin counts in counts.csv.",
    )
    .await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(view.items[0].attempts, 1);
    assert_eq!(
        draft_text(&cluster, "counts.csv")?,
        "island,penguins\nTorgersen,52\nBiscoe,168\nDream,124\n"
    );
    Ok(())
}

/// The system prompt of the first implement request, as JSON text.
fn first_item_prompt(model: &ScriptedModel) -> String {
    model
        .requests()
        .into_iter()
        .find(|request| request.phase == "implement")
        .map(|request| request.body["messages"][0]["content"].to_string())
        .unwrap_or_default()
}

/// The plan request's last message to the model at plan turn `turn`.
fn told_at_plan_turn(model: &ScriptedModel, turn: usize) -> String {
    model
        .requests()
        .into_iter()
        .filter(|request| request.phase == "plan")
        .nth(turn)
        .and_then(|request| request.body["messages"].as_array()?.last().cloned())
        .map(|message| message["content"].to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_source_query_is_told_to_the_model_before_anything_runs() -> anyhow::Result<()> {
    // The source names a column penguins.csv lacks: the engine runs it when the plan is given
    // and tells the model the query's error; the corrected plan's source is the one checked.
    let wrong = "- [ ] 1. Count — the islands → islands.txt\n  \
        - islands.txt: number from penguins.csv = SELECT count(DISTINCT archipelago) FROM data";
    let (model, cluster, view) =
        writes_three(json!([{"content": wrong}, counted_plan()[0].clone()])).await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    let told = told_at_plan_turn(&model, 1);
    assert!(
        told.contains(
            "islands.txt: its source query `SELECT count(DISTINCT archipelago) FROM data` fails"
        ) && told.contains("archipelago"),
        "{told}"
    );
    let json: Value = cluster.cli_ok(&["job", &view.job_id, "--json"])?.json()?;
    assert_eq!(
        json["items"][0]["contracts"][0]["source"]["query"],
        "SELECT count(DISTINCT island) FROM data"
    );
    assert_eq!(draft_text(&cluster, "islands.txt")?, "3\n");
    // The item's prompt tells what the corrected source gives.
    let system = first_item_prompt(&model);
    assert!(
        system.contains("the targets must hold:\\n- islands.txt: the number 3"),
        "{system}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_still_failing_when_the_item_ends_leaves_it_unchecked_and_not_done()
-> anyhow::Result<()> {
    // Told at the plan, the model kept the failing query: the engine cannot vouch for the
    // number, so the item is not done, never `succeeded`; no retry under the same contract
    // could mend that.
    let wrong = json!({"content": "- [ ] 1. Count — the islands → islands.txt\n  \
        - islands.txt: number from penguins.csv = SELECT count(DISTINCT archipelago) FROM data"});
    let (model, _cluster, view) = counted_with_plan(json!([wrong.clone(), wrong])).await?;
    assert_eq!(
        model.count("plan", None, 2),
        0,
        "told once at the plan, not twice"
    );
    let failure = not_done_at_once(&view);
    assert!(
        failure.contains("count(DISTINCT archipelago) FROM data` fails")
            && failure.contains("so what it holds cannot be checked"),
        "{failure}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_numbers_source_giving_every_row_checks_nothing_and_is_not_done() -> anyhow::Result<()> {
    // The first of 344 rows is no number to hold a count to: neither told nor compared.
    let rows = json!({"content": "- [ ] 1. Count — the islands → islands.txt\n  \
        - islands.txt: number from penguins.csv = SELECT island FROM data"});
    let (model, _cluster, view) = counted_with_plan(json!([rows.clone(), rows])).await?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    let failure = view.items[0].failure.clone().unwrap_or_default();
    assert!(
        failure.contains("gives 344 rows and 1 column; a number's source gives one value"),
        "{failure}"
    );
    let system = first_item_prompt(&model);
    assert!(!system.contains("the targets must hold"), "{system}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn uncheckable_contracts_are_told_with_what_is_wrong() -> anyhow::Result<()> {
    // As a small model wrote them on unseen tasks: cells named on a text file, a count on a
    // number, a number from the data without its query, a source that gives every row.
    let wrong = "- [ ] 1. Count — the islands → islands.txt, names.txt, total.txt, mass.txt\n  \
        - islands.txt: number at data\n  \
        - names.txt: number of 10 from penguins.csv = SELECT count(*) FROM data\n  \
        - total.txt: number\n  \
        - mass.txt: number from penguins.csv = SELECT body_mass_g FROM data";
    let (model, _cluster, view) =
        writes_three(json!([{"content": wrong}, counted_plan()[0].clone()])).await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    let told = told_at_plan_turn(&model, 1);
    for expected in [
        "item 1, islands.txt: `at data` names what an edit touches",
        "item 1, names.txt: `of N` counts a list's values",
        "item 1, total.txt: a number computed from the workbench's data names the query",
        "item 1, mass.txt: its source query `SELECT body_mass_g FROM data` gives 344 rows and 1 column",
    ] {
        assert!(told.contains(expected), "{expected}: {told}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_moved_away_is_absent_from_the_draft() -> anyhow::Result<()> {
    let plan = "- [ ] 1. Move — penguins.csv into archive/ → archive/penguins.csv, penguins.csv\n  \
        - penguins.csv: absent";
    let rename = json!({"tool_calls": [{"name": "rename_file", "arguments": {
        "path": "penguins.csv", "new_path": "archive/penguins.csv"}}]});
    let moved = |implement: Value| {
        script(json!({
            "research": [{"content": "penguins.csv is the only file."}],
            "plan": [{"content": plan}],
            "implement": implement,
            "summary": [{"content": "Moved."}]
        }))
    };
    let request = "Move penguins.csv into an archive folder.";
    let approve = ["--auto-approve"];
    let (_model, cluster, done) = run_with(
        moved(json!({"1": [rename, {"content": "Moved it."}]}))?,
        request,
        &approve,
    )
    .await?;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    let listed = cluster.cli_ok(&["wb", "ls", "w", "--draft"])?.stdout;
    assert!(
        listed.contains("archive/penguins.csv") && !listed.contains("\npenguins.csv"),
        "{listed}"
    );
    // A copy leaves the file where it was: the item is not done.
    let copy = write("archive/penguins.csv", "species,island\n");
    let (_model, _cluster, copied) = run_with(
        moved(json!({"1": [copy.clone(), {"content": "Moved it."}],
                     "1@retry": [copy, {"content": "Moved it."}]}))?,
        request,
        &approve,
    )
    .await?;
    assert_eq!(copied.state, JobState::Failed, "{copied:?}");
    assert_eq!(copied.items[0].failure_code, Some(ErrorCode::ItemNotDone));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_contract_outside_the_workbench_is_refused_before_anything_runs() -> anyhow::Result<()> {
    let plan = "- [ ] 1. Count — the islands → islands.txt\n  \
        - islands.txt: number from ../../etc/passwd = SELECT count(*) FROM data";
    let (model, _cluster, view) = writes_three(json!([{"content": plan}])).await?;
    assert_eq!(view.state, JobState::Failed, "{view:?}");
    assert_eq!(error_code(&view), Some(ErrorCode::SandboxViolation));
    assert_eq!(model.count("implement", Some(1), 0), 0, "no item ran");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_job_view_shows_each_items_contracts() -> anyhow::Result<()> {
    // `atelier job` prints the contract line under its item; `--json` carries the contract.
    let (_model, cluster, view) = writes_three(counted_plan()).await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    let text = cluster.cli_ok(&["job", &view.job_id])?.stdout;
    assert!(
        text.contains(
            "  [x] 1. Count\n        - islands.txt: number from penguins.csv = \
             SELECT count(DISTINCT island) FROM data\n"
        ),
        "{text}"
    );
    let json: Value = cluster.cli_ok(&["job", &view.job_id, "--json"])?.json()?;
    assert_eq!(
        json["items"][0]["contracts"],
        json!([{"path": "islands.txt", "holds": "number", "source": {
            "path": "penguins.csv", "query": "SELECT count(DISTINCT island) FROM data"}}])
    );
    Ok(())
}

/// Sets `cells` (`[(sheet, cell, value)]`) of multi-sheet.xlsx in one call.
fn set_cells(cells: &[(&str, &str, i64)]) -> Value {
    let operations: Vec<Value> = cells
        .iter()
        .map(|(sheet, cell, value)| {
            json!({"op": "set_cells", "sheet": sheet, "cells": [{"cell": cell, "value": value}]})
        })
        .collect();
    json!({"tool_calls": [{"name": "xlsx_operations", "arguments": {
        "path": "multi-sheet.xlsx", "operations": operations}}]})
}

/// A cluster whose workbench `w` holds KeenBench's multi-sheet.xlsx (Revenue, Expenses,
/// Summary), running `script` on an edit request.
async fn run_on_workbook(script: Script) -> anyhow::Result<JobView> {
    let model = ScriptedModel::start(script).await?;
    let cluster = Cluster::start()?;
    cluster.cli_ok(&["wb", "create", "w"])?;
    let workbook = atelier_tests::fixtures().join("keenbench/office/multi-sheet.xlsx");
    cluster.cli_ok(&["wb", "add", "w", &workbook.to_string_lossy()])?;
    cluster.run_job(
        "w",
        "Set February's revenue in multi-sheet.xlsx to 13500.",
        &model.model_spec(),
        &["--auto-approve"],
    )
}

fn edit_plan() -> Value {
    json!([{"content": "- [ ] 1. Fix — February's revenue → multi-sheet.xlsx\n  \
        - multi-sheet.xlsx: edit at Revenue!B3"}])
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edit_changes_the_cells_it_names_and_nothing_else() -> anyhow::Result<()> {
    let done = run_on_workbook(script(json!({
        "research": [{"content": "Revenue!B3 holds February: 13200."}],
        "plan": edit_plan(),
        "implement": {"1": [set_cells(&[("Revenue", "B3", 13500)]), {"content": "Set B3."}]},
        "summary": [{"content": "Set."}]
    }))?)
    .await?;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    assert_eq!(done.items[0].attempts, 1);
    // A cell more than the contract names, in both attempts: told once, then failed.
    let beyond = run_on_workbook(script(json!({
        "research": [{"content": "Revenue!B3 holds February: 13200."}],
        "plan": edit_plan(),
        "implement": {"1": [
            set_cells(&[("Revenue", "B3", 13500), ("Summary", "B2", 81900)]),
            {"content": "Set B3 and the total."}
        ]},
        "summary": [{"content": "Set."}]
    }))?)
    .await?;
    let failure = not_done_after_its_retry(&beyond);
    assert!(
        failure.contains("it also changed Summary!B2, which the contract does not name"),
        "{failure}"
    );
    Ok(())
}

fn slide_operations(operation: Value) -> Value {
    json!({"tool_calls": [{"name": "pptx_operations",
        "arguments": {"path": "slides.pptx", "operations": [operation]}}]})
}

/// A job on slides.pptx whose one item promises to retitle the second slide (`slide 1`, as
/// read_file numbers it) and makes `operation` in each attempt.
async fn retitle_second_slide(operation: Value) -> anyhow::Result<JobView> {
    let (_model, view) = retitle_second_slide_under("edit at slide 1", operation).await?;
    Ok(view)
}

/// The second slide retitled by `operation` under the plan's contract `holds` for the deck
/// (the same plan given again when the first is told something).
async fn retitle_second_slide_under(
    holds: &str,
    operation: Value,
) -> anyhow::Result<(ScriptedModel, JobView)> {
    let plan = json!({"content": format!("- [ ] 1. Retitle — the second slide → slides.pptx\n  \
        - slides.pptx: {holds}")});
    let script = script(json!({
        "research": [{"content": "slides.pptx has three slides; the second is Key Highlights."}],
        "plan": [plan.clone(), plan],
        "implement": {"1": [slide_operations(operation), {"content": "Retitled it."}]},
        "summary": [{"content": "Retitled."}]
    }))?;
    let request = "Retitle the second slide of slides.pptx to \"Highlights 2026\".";
    let (model, _cluster, view) =
        run_on("keenbench/office/slides.pptx", script, request, &[]).await?;
    Ok((model, view))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_to_a_deck_the_workbench_has_is_vouched_for_only_as_an_edit_of_named_slides()
-> anyhow::Result<()> {
    // As a small model planned an unseen task: the deck it was asked to change declared `text`
    // (or an `edit` naming no slide), which holds it only to being changed. Told at the plan;
    // planned the same again, the right write is still not vouched for: not done, at once.
    let retitle = json!({"op": "set_slide_text", "index": 1, "title": "Highlights 2026"});
    for holds in ["text", "edit"] {
        let (model, view) = retitle_second_slide_under(holds, retitle.clone()).await?;
        let told = told_at_plan_turn(&model, 1);
        assert!(
            told.contains(
                "slides.pptx is in the workbench: a change to it is an `edit` at the parts it \
                 touches"
            ),
            "{holds}: {told}"
        );
        let failure = not_done_at_once(&view);
        assert!(
            failure.contains("slides.pptx: slides.pptx is in the workbench")
                && failure.contains("so what it holds cannot be checked"),
            "{holds}: {failure}"
        );
        assert_eq!(error_code(&view), Some(ErrorCode::ItemsFailed));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edit_on_a_deck_changes_the_slides_it_names_and_nothing_else() -> anyhow::Result<()> {
    let done = retitle_second_slide(
        json!({"op": "set_slide_text", "index": 1, "title": "Highlights 2026"}),
    )
    .await?;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    assert_eq!(done.items[0].attempts, 1);
    // A slide inserted before the second instead: the slides after it moved, so the deck
    // changed beyond what the contract names — told once, then not done.
    let inserted =
        retitle_second_slide(json!({"op": "add_slide", "position": 1, "title": "Highlights 2026"}))
            .await?;
    let failure = not_done_after_its_retry(&inserted);
    assert!(
        failure.contains("slides.pptx: it also changed slide 2")
            && failure.contains("which the contract does not name"),
        "{failure}"
    );
    assert_eq!(error_code(&inserted), Some(ErrorCode::ItemsFailed));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_figure_under_a_text_contract_is_never_vouched_for() -> anyhow::Result<()> {
    // As a small model planned an unseen task: the figure declared `text`, so no source is
    // compared, and a wrong figure written. The engine cannot check it: not done, at once. The
    // same when the request shows the figure written: a request that gives the form of its
    // answer ("like 3") shows a figure that is not the answer, which a model may copy.
    let text = json!({"content": "- [ ] 1. Count — the islands → islands.txt\n  \
        - islands.txt: text"});
    let with_an_example = "How many different islands do the penguins in penguins.csv come \
                           from? Put the figure in islands.txt, like 3.";
    for request in [REQUEST, with_an_example] {
        let (_model, cluster, view) = counted_with_plan_for(request, json!([text])).await?;
        let failure = not_done_at_once(&view);
        assert!(
            failure.contains("islands.txt: it holds \"3\" under a `text` contract")
                && failure.contains("so what it holds cannot be checked"),
            "{request}: {failure}"
        );
        assert_eq!(error_code(&view), Some(ErrorCode::ItemsFailed));
        assert_eq!(
            draft_text(&cluster, "islands.txt")?,
            "3\n",
            "the draft keeps it"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_number_taken_from_prose_is_checked_against_the_texts_figures() -> anyhow::Result<()> {
    // A workbench with a text file only: a sourceless number is told the text's figures as its
    // source; one category's amount written where the sum was promised is told once, then the
    // retry writes the sum the source gives.
    let sourceless = json!({"content": "- [ ] 1. Add — the monthly amounts → total.txt\n  \
        - total.txt: number"});
    let sourced = json!({"content": "- [ ] 1. Add — the monthly amounts → total.txt\n  \
        - total.txt: number from budget_notes.txt = SELECT sum(value) FROM figures"});
    let script = script(json!({
        "research": [{"content": "budget_notes.txt gives four amounts in EUR."}],
        "plan": [sourceless, sourced],
        "implement": {
            "1": [write("total.txt", "500\n"), {"content": "Wrote it."}],
            "1@retry": [write("total.txt", "3500\n"), {"content": "Wrote it."}]
        },
        "summary": [{"content": "The budget adds up to 3500 EUR."}]
    }))?;
    let request = "What does my budget come to per month? Save the sum of budget_notes.txt's \
                   amounts in total.txt.";
    let (model, cluster, view) =
        run_on("keenbench/synthetic/budget_notes.txt", script, request, &[]).await?;

    let told = told_at_plan_turn(&model, 1);
    assert!(
        told.contains(
            "total.txt: a number computed from the workbench's data names the query it comes \
             from: end the line with `from FILE = SELECT … FROM figures`, FILE one of \
             budget_notes.txt"
        ),
        "{told}: {view:?}"
    );
    assert!(
        first_item_prompt(&model).contains("total.txt: the number 3500"),
        "the item is told what its source gives"
    );
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(view.items[0].attempts, 2, "500 was not done: {view:?}");
    assert_eq!(draft_text(&cluster, "total.txt")?, "3500\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_in_a_workbook_is_checked_against_its_source() -> anyhow::Result<()> {
    // As the small model did: the whole file exported where a count per island was promised.
    // The workbook's sheets are read back like a text file's lines: not done, told once; the
    // retry exports the source's rows.
    let plan = json!([{"content": "- [ ] 1. Count — penguins per island → summary.xlsx\n  \
        - summary.xlsx: table (island, n) from penguins.csv = SELECT island, count(*) AS n FROM data GROUP BY island"}]);
    let export = |query: Option<&str>| {
        let mut arguments = json!({"path": "penguins.csv", "target_path": "summary.xlsx",
            "sheet": "Summary", "mode": "replace_sheet"});
        if let Some(query) = query {
            arguments["query"] = json!(query);
        }
        json!({"tool_calls": [{"name": "table_update_from_export", "arguments": arguments}]})
    };
    let script = script(json!({
        "research": [{"content": "penguins.csv has an island column."}],
        "plan": plan,
        "implement": {
            "1": [export(None), {"content": "Exported."}],
            "1@retry": [export(Some("SELECT island, count(*) AS n FROM data GROUP BY island ORDER BY island")),
                        {"content": "Exported."}]
        },
        "summary": [{"content": "Counted."}]
    }))?;
    let (model, cluster, view) = run(
        script,
        "Count the penguins of each island into summary.xlsx.",
    )
    .await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(view.items[0].attempts, 2, "{view:?}");
    let retry = model
        .requests()
        .into_iter()
        .filter(|request| request.phase == "implement")
        .map(|request| request.body["messages"].to_string())
        .find(|messages| messages.contains("breaks the plan's contract"))
        .unwrap_or_default();
    assert!(
        retry.contains(
            "summary.xlsx: no sheet holds it (sheet Summary: its header should be island, n"
        ),
        "{retry}"
    );
    let export = cluster.dir.path().join("export");
    cluster.cli_ok(&[
        "wb",
        "export",
        "w",
        export.to_str().unwrap_or_default(),
        "--draft",
    ])?;
    let mut workbook: Xlsx<_> = open_workbook(export.join("summary.xlsx"))?;
    let rows: Vec<Vec<Data>> = workbook
        .worksheet_range("Summary")?
        .rows()
        .map(<[Data]>::to_vec)
        .collect();
    let counts: Vec<(String, Option<f64>)> = rows
        .iter()
        .skip(1)
        .map(|row| (row[0].to_string(), row[1].as_f64()))
        .collect();
    assert_eq!(
        counts,
        vec![
            ("Biscoe".to_string(), Some(168.0)),
            ("Dream".to_string(), Some(124.0)),
            ("Torgersen".to_string(), Some(52.0))
        ]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workbooks_sheet_is_a_source_like_a_csv() -> anyhow::Result<()> {
    // The sum of a sheet's column, from a workbook with three sheets: its source names the
    // sheet as a table; a wrong sum is told once, the retry writes the source's.
    let plan = json!([{"content": "- [ ] 1. Add — the Revenue sheet's amounts → total.txt\n  \
        - total.txt: number from multi-sheet.xlsx = SELECT sum(Amount) FROM \"Revenue\""}]);
    let script = script(json!({
        "research": [{"content": "multi-sheet.xlsx has a Revenue sheet of six months."}],
        "plan": plan,
        "implement": {
            "1": [write("total.txt", "12500\n"), {"content": "Wrote it."}],
            "1@retry": [write("total.txt", "81600\n"), {"content": "Wrote it."}]
        },
        "summary": [{"content": "81600."}]
    }))?;
    let request = "Add up the Revenue sheet of multi-sheet.xlsx into total.txt.";
    let (model, cluster, view) =
        run_on("keenbench/office/multi-sheet.xlsx", script, request, &[]).await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(view.items[0].attempts, 2, "12500 was not done: {view:?}");
    assert!(first_item_prompt(&model).contains("total.txt: the number 81600"));
    assert_eq!(draft_text(&cluster, "total.txt")?, "81600\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_declared_as_text_is_told_at_the_plan_and_not_done() -> anyhow::Result<()> {
    // A .csv is a table: declared `text`, its rows would go unchecked (the small model copied
    // all 344 rows where three were asked for).
    let text = json!({"content": "- [ ] 1. Count — the islands → islands.csv\n  \
        - islands.csv: text"});
    let script = script(json!({
        "research": [{"content": "penguins.csv has an island column."}],
        "plan": [text.clone(), text],
        "implement": {"1": [write("islands.csv", "island\nBiscoe\n"), {"content": "Done."}]},
        "summary": [{"content": "Done."}]
    }))?;
    let request = "Put the islands of penguins.csv in islands.csv, one row each.";
    let (model, _cluster, view) = run(script, request).await?;
    let told = told_at_plan_turn(&model, 1);
    assert!(
        told.contains("islands.csv is a delimited table, not text: declare it a `table`"),
        "{told}"
    );
    let failure = not_done_at_once(&view);
    assert!(
        failure.contains("is a delimited table, not text"),
        "{failure}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_querys_error_written_as_the_answer_is_refused() -> anyhow::Result<()> {
    // The query fails; the model writes its error into the target. Refused (told why), it
    // corrects the query and writes the figure.
    let query = |sql: &str| json!({"tool_calls": [{"name": "table_query", "arguments": {"path": "penguins.csv", "query": sql}}]});
    let script = script(json!({
        "research": [{"content": "penguins.csv has an island column."}],
        "plan": counted_plan(),
        "implement": {"1": [
            query("SELECT count(DISTINCT archipelago) FROM data"),
            write("islands.txt", "Binder Error: Referenced column \"archipelago\" not found in FROM clause!"),
            query("SELECT count(DISTINCT island) FROM data"),
            write("islands.txt", "3\n"),
            {"content": "Wrote 3."}
        ]},
        "summary": [{"content": "Three."}]
    }))?;
    let (model, cluster, view) = run(script, REQUEST).await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(draft_text(&cluster, "islands.txt")?, "3\n");
    let told = model
        .requests()
        .into_iter()
        .filter(|request| request.phase == "implement")
        .filter_map(|request| request.body["messages"].as_array()?.last().cloned())
        .map(|message| message["content"].to_string())
        .find(|content| content.contains("repeats the error of an earlier call"));
    assert!(told.is_some(), "the refused write was told");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_left_beside_its_original_is_told_once() -> anyhow::Result<()> {
    // A move written as a copy (the small model's way: it reads the file and writes its text
    // to the new path, without declaring the original `absent`): told that the original is
    // still there, the retry deletes it.
    let plan = json!([{"content": "- [ ] 1. Move — penguins.csv to archive/penguins.csv → archive/penguins.csv"}]);
    let penguins =
        std::fs::read_to_string(atelier_tests::fixtures().join("palmerpenguins/penguins.csv"))?;
    // The text read back and written again: one more blank line, so not the same bytes.
    let copy_text = format!("{penguins}\n");
    let copy = write("archive/penguins.csv", &copy_text);
    let delete =
        json!({"tool_calls": [{"name": "delete_file", "arguments": {"path": "penguins.csv"}}]});
    let script_of = |retry: Value| {
        script(json!({
            "research": [{"content": "penguins.csv is the only file."}],
            "plan": plan,
            "implement": {"1": [copy, {"content": "Moved it."}], "1@retry": retry},
            "summary": [{"content": "Done."}]
        }))
    };
    let approve = ["--auto-approve"];
    let (model, cluster, moved) = run_with(
        script_of(json!([delete, {"content": "Deleted the original."}]))?,
        "Move penguins.csv to archive/penguins.csv.",
        &approve,
    )
    .await?;
    assert_eq!(moved.state, JobState::Succeeded, "{moved:?}");
    assert_eq!(moved.items[0].attempts, 2);
    let retry = model
        .requests()
        .into_iter()
        .map(|request| request.body["messages"][0]["content"].to_string())
        .find(|system| system.contains("The previous attempt failed"))
        .unwrap_or_default();
    assert!(
        retry.contains(
            "archive/penguins.csv holds what penguins.csv holds, and the draft still has \
             penguins.csv"
        ),
        "{retry}"
    );
    let listed = cluster.cli_ok(&["wb", "ls", "w", "--draft"])?.stdout;
    assert!(!listed.contains("\npenguins.csv"), "{listed}");
    // A copy asked for: the same note, answered as before, and the item is done.
    let (_model, cluster, copied) = run_with(
        script_of(json!([{"content": "NO_CHANGE_NEEDED: the task asks for a copy; both stay."}]))?,
        "Copy penguins.csv to archive/penguins.csv.",
        &approve,
    )
    .await?;
    assert_eq!(copied.state, JobState::Succeeded, "{copied:?}");
    assert_eq!(draft_text(&cluster, "archive/penguins.csv")?, copy_text);
    // Told, the retry writes the copy again and answers as before (the small model's way):
    // neither a move nor a copy it stands by, so the item is not done.
    let again = json!([write("archive/penguins.csv", &copy_text), {"content": "Moved it."}]);
    let (_model, _cluster, kept) = run_with(
        script_of(again)?,
        "Move penguins.csv to archive/penguins.csv.",
        &approve,
    )
    .await?;
    let failure = not_done_after_its_retry(&kept);
    assert!(
        failure.contains("the retry neither removed penguins.csv"),
        "{failure}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_after_every_query_failed_is_told_then_not_done() -> anyhow::Result<()> {
    // As the small model did on unseen tasks: its queries failed, and it wrote a figure from
    // nowhere (the request's example, a guess) under a plan that promised nothing checkable.
    let query = |sql: &str| json!({"tool_calls": [{"name": "table_query", "arguments": {"path": "penguins.csv", "query": sql}}]});
    let wrong = "SELECT count(DISTINCT archipelago) FROM data";
    let plan = json!([{"content": "- [ ] 1. Count — the islands → islands.txt"}]);
    let guessed = |retry: Value| {
        script(json!({
            "research": [{"content": "penguins.csv has an island column."}],
            "plan": plan,
            "implement": {
                "1": [query(wrong), write("islands.txt", "2\n"), {"content": "Wrote 2."}],
                "1@retry": retry
            },
            "summary": [{"content": "Done."}]
        }))
    };
    let guessing_again =
        json!([query(wrong), write("islands.txt", "4\n"), {"content": "Wrote 4."}]);
    let (_model, _cluster, failed) = run(guessed(guessing_again)?, REQUEST).await?;
    let failure = not_done_after_its_retry(&failed);
    assert!(
        failure.contains("every query of the workbench's data the item ran failed (1 of them)"),
        "{failure}"
    );
    // Told, the retry corrects its query and writes what it gives.
    let corrected = json!([
        query("SELECT count(DISTINCT island) FROM data"),
        write("islands.txt", "3\n"),
        {"content": "Wrote 3."}
    ]);
    let (_model, cluster, done) = run(guessed(corrected)?, REQUEST).await?;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    assert_eq!(done.items[0].attempts, 2);
    assert_eq!(draft_text(&cluster, "islands.txt")?, "3\n");
    Ok(())
}

const FILL: &str = "Fill invoice_template.docx: company Acme Ltd, date 2026-03-01, total 1,249.50 EUR \
                    (replace the {{company}}, {{date}} and {{total}} placeholders).";

/// [`FILL`] on the KeenBench invoice template: planned first as an `edit` naming no part, then
/// at the paragraphs of `parts`; the item replaces the placeholders with `company` and the
/// request's date and total, on each attempt.
async fn fill_invoice(
    parts: &str,
    company: &str,
) -> anyhow::Result<(ScriptedModel, Cluster, JobView)> {
    let plan = |contract: &str| {
        json!({"content": format!(
            "- [ ] 1. Fill — replace the placeholders → invoice_template.docx\n  \
             - invoice_template.docx: {contract}"
        )})
    };
    let replace = |search: &str, replace: &str| json!({"op": "replace_text", "search": search, "replace": replace});
    let fill = json!({"tool_calls": [{"name": "docx_operations", "arguments": {
        "path": "invoice_template.docx",
        "operations": [
            replace("{{company}}", company),
            replace("{{date}}", "2026-03-01"),
            replace("{{total}}", "1,249.50 EUR"),
        ]
    }}]});
    let script = script(json!({
        "research": [{"content": "The invoice has three placeholders."}],
        "plan": [plan("edit"), plan(&format!("edit at {parts}"))],
        "implement": {
            "1": [fill.clone(), {"content": "Filled."}],
            "1@retry": [fill, {"content": "Filled."}]
        },
        "summary": [{"content": "Filled."}]
    }))?;
    run_on(
        "keenbench/synthetic/invoice_template.docx",
        script,
        FILL,
        &[],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filled_template_is_told_where_its_placeholders_are_and_held_to_the_requests_values()
-> anyhow::Result<()> {
    // The edit planned without its parts is told which paragraphs hold the placeholders the
    // request names; planned at those, the fill with the request's values is done.
    let parts = "paragraph 1, paragraph 2, paragraph 5";
    let (model, cluster, view) = fill_invoice(parts, "Acme Ltd").await?;
    let told = told_at_plan_turn(&model, 1);
    assert!(
        told.contains(&format!("the text the request quotes is in {parts}")),
        "{told}"
    );
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    let body = docx_paragraph_text(&export_draft(&cluster, "w")?.join("invoice_template.docx"))?;
    for filled in [
        "Company: Acme Ltd",
        "Date: 2026-03-01",
        "Total: 1,249.50 EUR",
    ] {
        assert!(body.contains(filled), "{filled}: {body}");
    }
    // A company the request does not give, in the right paragraph: not what it asks for.
    let (_model, _cluster, guessed) = fill_invoice(parts, "Globex Corporation").await?;
    let failure = not_done_after_its_retry(&guessed);
    assert!(
        failure
            .contains("paragraph 1 now holds words that are in neither the request nor the file")
            && failure.contains("globex"),
        "{failure}"
    );
    assert_eq!(error_code(&guessed), Some(ErrorCode::ItemsFailed));
    Ok(())
}
