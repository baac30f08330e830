//! The Workshop end to end: the conversation in every job's context, one job at a time and
//! `DRAFT_EXISTS`, rewind and regenerate, checkpoints and restore, all across coordinator
//! SIGKILLs (real nats-server, coordinator and workers; a scripted model).

use std::time::Duration;

use anyhow::Context;
use atelier_messages::job::{JobState, JobSubmit, JobView};
use atelier_messages::review::{Change, ContentDiff, Review};
use atelier_messages::store::Listing;
use atelier_messages::workshop::{
    CheckpointInfo, CheckpointReason, ConversationMessage, Role, WorkshopEvent, WorkshopEventKind,
};
use atelier_messages::{ErrorCode, PROTOCOL_VERSION, subjects};
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::{Cluster, Stored, stored_messages, wait_until};
use serde_json::json;
use sha2::Digest;

const NOTES: &str = "# Notes\nEngineering leads.\n";

/// Research, a one-item plan that writes notes.md, and a summary; `delay_ms` slows research.
fn notes_script(delay_ms: u64) -> Script {
    serde_json::from_value(json!({
        "research": [{"content": "The plan has five milestones.", "delay_ms": delay_ms}],
        "plan": [{"content": "- [ ] 1. Notes — write notes.md"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.md", "content": NOTES}}]},
            {"content": "Written."}
        ]},
        "summary": [{"content": "notes.md is in the draft."}]
    }))
    .unwrap_or_default()
}

fn history(cluster: &Cluster, workbench: &str) -> anyhow::Result<Vec<ConversationMessage>> {
    cluster.cli_ok(&["history", workbench, "--json"])?.json()
}

fn roles_and_ids(messages: &[ConversationMessage]) -> Vec<(String, Role)> {
    messages
        .iter()
        .map(|message| (message.id.clone(), message.role))
        .collect()
}

fn draft_paths(cluster: &Cluster, workbench: &str) -> anyhow::Result<Option<Vec<String>>> {
    let out = cluster.cli(&["wb", "ls", workbench, "--draft", "--json"])?;
    if out.failed_with(ErrorCode::NoDraft.as_str()) {
        return Ok(None);
    }
    let listing: Listing = out.json()?;
    Ok(Some(listing.files.into_iter().map(|f| f.path).collect()))
}

fn published_paths(cluster: &Cluster, workbench: &str) -> anyhow::Result<Vec<String>> {
    let listing: Listing = cluster.cli_ok(&["wb", "ls", workbench, "--json"])?.json()?;
    Ok(listing.files.into_iter().map(|f| f.path).collect())
}

/// The system prompts of one job's research phase, in the order asked.
fn research_prompts(model: &ScriptedModel) -> Vec<String> {
    model
        .requests()
        .into_iter()
        .filter(|request| request.phase == "research")
        .map(|request| {
            request.body["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

fn assert_succeeded(view: &JobView, cluster: &Cluster) {
    assert_eq!(
        view.state,
        JobState::Succeeded,
        "{:?}\n{}",
        view.error,
        cluster.logs()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_message_sees_the_first_and_a_draft_refuses_new_messages() -> anyhow::Result<()> {
    let model = ScriptedModel::start(notes_script(0)).await?;
    let spec = model.model_spec();
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "plan.csv")?;

    let first = cluster.run_job("q3", "Summarize the launch plan", &spec, &[])?;
    assert_succeeded(&first, &cluster);
    assert!(
        !research_prompts(&model)[0].contains("Earlier conversation"),
        "the first job has no earlier conversation"
    );

    // A draft exists: a new message is refused at once, and nothing joins the conversation.
    let refused = cluster.cli(&["submit", "q3", "And now?", "--model", &spec])?;
    assert!(refused.failed_with("DRAFT_EXISTS"), "{refused:?}");
    assert!(
        refused.stderr.contains("publish or discard"),
        "{}",
        refused.stderr
    );
    assert_eq!(history(&cluster, "q3")?.len(), 2);

    // A client that skips the check is answered through the job: failed with the code.
    let submit = JobSubmit {
        v: PROTOCOL_VERSION,
        job_id: "raw-refused".into(),
        workbench: "q3".into(),
        message: "bypassing the check".into(),
        model: Some(spec.clone()),
        submitted_at_ms: 0,
        auto_approve: false,
        continue_draft: false,
        approvals: None,
        workflow: None,
        batch_id: None,
        time_limit_secs: None,
        priority: None,
        budget: Default::default(),
    };
    cluster.publish_raw(&submit).await?;
    let watched = cluster.cli(&["watch", "raw-refused", "--json"])?;
    assert!(!watched.success);
    let view = cluster.wait_finished("raw-refused", Duration::from_secs(20))?;
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(view.error.map(|e| e.code), Some(ErrorCode::DraftExists));
    assert_eq!(history(&cluster, "q3")?.len(), 2);

    // Publish, then the second message is answered with the first one in its context.
    cluster.cli_ok(&["draft", "publish", "q3"])?;
    cluster.kill_coordinator();
    cluster.start_coordinator()?;
    // It writes notes.md again, over the published one: an overwrite, allowed for this job.
    let overwrite = ["--approve", "destructive=auto"];
    let second = cluster.run_job("q3", "Now count the milestones", &spec, &overwrite)?;
    assert_succeeded(&second, &cluster);
    let prompts = research_prompts(&model);
    let second_prompt = prompts.last().context("no second research prompt")?;
    assert!(
        second_prompt.contains("Earlier conversation"),
        "{second_prompt}"
    );
    assert!(
        second_prompt.contains("[m1 user]\nSummarize the launch plan"),
        "{second_prompt}"
    );
    assert!(
        second_prompt.contains("[m2 assistant]\nnotes.md is in the draft."),
        "{second_prompt}"
    );
    assert!(
        second_prompt.contains("published the draft"),
        "{second_prompt}"
    );
    // The request itself is the user turn, not part of the earlier conversation.
    assert!(
        !second_prompt.contains("Now count the milestones"),
        "{second_prompt}"
    );

    // With --continue-draft the message is taken and works on the draft.
    let third = cluster.run_job(
        "q3",
        "Keep going",
        &spec,
        &["--continue-draft", "--approve", "destructive=auto"],
    )?;
    assert_succeeded(&third, &cluster);
    let messages = history(&cluster, "q3")?;
    let texts: Vec<_> = messages.iter().map(|m| (m.role, m.text.as_str())).collect();
    assert_eq!(texts[0], (Role::User, "Summarize the launch plan"));
    assert_eq!(texts[1].0, Role::Assistant);
    assert!(
        texts[1]
            .1
            .starts_with("notes.md is in the draft.\n\nDraft changes"),
        "{}",
        texts[1].1
    );
    assert_eq!(texts[2].0, Role::System);
    assert_eq!(texts[3], (Role::User, "Now count the milestones"));
    assert_eq!(texts[5], (Role::User, "Keep going"));
    assert_eq!(messages.len(), 7);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn one_job_at_a_time_and_rewind_then_regenerate_across_a_sigkill() -> anyhow::Result<()> {
    let model = ScriptedModel::start(notes_script(2_500)).await?;
    let spec = model.model_spec();
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "plan.csv")?;

    // While the (slow) job runs, other messages and rewinds are refused as busy.
    let job = cluster.submit("q3", "Write notes", &spec)?;
    wait_until(Duration::from_secs(20), || {
        cluster
            .cli(&["job", &job, "--json"])
            .ok()
            .and_then(|out| out.json::<JobView>().ok())
            .is_some_and(|view| view.state == JobState::Running)
    })?;
    let busy = cluster.cli(&[
        "submit",
        "q3",
        "Another",
        "--model",
        &spec,
        "--continue-draft",
    ])?;
    assert!(busy.failed_with("WORKBENCH_BUSY"), "{busy:?}");
    let rewind_busy = cluster.cli(&["rewind", "q3", "m1"])?;
    assert!(rewind_busy.failed_with("WORKBENCH_BUSY"), "{rewind_busy:?}");
    assert_succeeded(
        &cluster.wait_finished(&job, Duration::from_secs(60))?,
        &cluster,
    );
    assert_eq!(
        draft_paths(&cluster, "q3")?,
        Some(vec!["notes.md".into(), "plan.csv".into()])
    );

    // Unknown ids are NOT_FOUND; rewinding to the user message removes notes.md from the draft.
    assert!(
        cluster
            .cli(&["rewind", "q3", "m9"])?
            .failed_with("NOT_FOUND")
    );
    assert!(
        cluster
            .cli(&["rewind", "q3", "bogus"])?
            .failed_with("NOT_FOUND")
    );
    let rewound: serde_json::Value = cluster.cli_ok(&["rewind", "q3", "m1", "--json"])?.json()?;
    assert_eq!(rewound["removed"], json!(["m2"]));
    assert_eq!(rewound["has_draft"], false);
    assert_eq!(draft_paths(&cluster, "q3")?, None);

    // The rewind survives a SIGKILL.
    cluster.kill_coordinator();
    cluster.start_coordinator()?;
    let after_kill = history(&cluster, "q3")?;
    assert_eq!(
        roles_and_ids(&after_kill),
        vec![
            ("m1".to_string(), Role::User),
            ("m3".to_string(), Role::System)
        ]
    );

    // Regenerate answers m1 again; the coordinator is killed mid-job and the job completes.
    let regenerated: serde_json::Value = cluster
        .cli_ok(&["regenerate", "q3", "--job-id", "regen-1", "--json"])?
        .json()?;
    assert_eq!(regenerated["from_message_id"], "m1");
    std::thread::sleep(Duration::from_millis(800));
    cluster.kill_coordinator();
    cluster.start_coordinator()?;
    assert_succeeded(
        &cluster.wait_finished("regen-1", Duration::from_secs(60))?,
        &cluster,
    );
    assert_eq!(
        draft_paths(&cluster, "q3")?,
        Some(vec!["notes.md".into(), "plan.csv".into()])
    );
    let notes = cluster.cli_ok(&["wb", "cat", "q3", "notes.md", "--draft"])?;
    assert_eq!(notes.stdout, NOTES);
    let messages = history(&cluster, "q3")?;
    assert_eq!(
        roles_and_ids(&messages),
        vec![
            ("m1".to_string(), Role::User),
            ("m4".to_string(), Role::System),
            ("m5".to_string(), Role::Assistant),
        ],
        "the regenerate replaced what followed m1, and one answer came after the crash"
    );
    assert_eq!(messages[2].job_id.as_deref(), Some("regen-1"));

    // Regenerating again replaces that answer; the draft goes back to m1's (none) first.
    cluster.cli_ok(&[
        "regenerate",
        "q3",
        "--job-id",
        "regen-2",
        "--wait",
        "--json",
    ])?;
    let ids: Vec<_> = history(&cluster, "q3")?.into_iter().map(|m| m.id).collect();
    assert_eq!(ids, ["m1", "m6", "m7"]);

    // A model switch and a context change, then everything the workbench went through is in
    // its event stream, once each and in order, across both SIGKILLs.
    cluster.cli_ok(&["wb", "set-model", "q3", &spec])?;
    let situation = cluster.dir.path().join("situation.txt");
    std::fs::write(&situation, "Quarterly board review.\n")?;
    cluster.cli_ok(&[
        "context",
        "add",
        "q3",
        "--situation",
        &situation.to_string_lossy(),
    ])?;
    assert_workshop_events(&cluster).await
}

/// The workshop events of q3 after the rewind-and-regenerate story above.
async fn assert_workshop_events(cluster: &Cluster) -> anyhow::Result<()> {
    let client = async_nats::connect(&cluster.nats.url).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let events: Vec<Stored<WorkshopEvent>> = loop {
        let events: Vec<Stored<WorkshopEvent>> = stored_messages(
            &client,
            subjects::workshop::EVENTS_STREAM,
            subjects::workshop::workbench_events("q3"),
        )
        .await?;
        let complete = events
            .last()
            .is_some_and(|last| last.payload.kind == WorkshopEventKind::ContextChanged);
        if complete || std::time::Instant::now() > deadline {
            break events;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let told: Vec<(&str, Option<&str>)> = events
        .iter()
        .filter(|event| event.payload.kind != WorkshopEventKind::DraftRevisionCreated)
        .map(|event| {
            let message = event.payload.message.as_ref().map(|m| m.id.as_str());
            (event.payload.kind.as_str(), message)
        })
        .collect();
    assert_eq!(
        told,
        [
            ("message_added", Some("m1")),
            ("message_added", Some("m2")),
            ("rewound", Some("m3")),
            ("regenerated", Some("m4")),
            ("message_added", Some("m5")),
            ("regenerated", Some("m6")),
            ("message_added", Some("m7")),
            ("model_changed", Some("m8")),
            ("context_changed", None),
        ]
    );
    let revisions: Vec<(String, bool, u64)> = events
        .iter()
        .filter_map(|event| event.payload.revision.clone())
        .map(|revision| (revision.message_id, revision.has_draft, revision.files))
        .collect();
    assert_eq!(revisions[1], ("m2".to_string(), true, 2), "{revisions:?}");
    assert_eq!(revisions[2], ("m3".to_string(), false, 0), "{revisions:?}");
    assert_eq!(
        revisions.len(),
        8,
        "one revision per message: {revisions:?}"
    );
    for event in &events {
        assert_eq!(
            event.subject,
            subjects::workshop::event("q3", event.payload.kind.as_str())
        );
        assert_eq!(event.content_type.as_deref(), Some("application/msgpack"));
    }
    let context = events
        .last()
        .and_then(|event| event.payload.context.clone());
    assert_eq!(
        context.map(|c| (c.name, c.removed)),
        Some(("situation".into(), false))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn restoring_the_first_checkpoint_brings_back_the_state_before_the_first_publish()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(notes_script(0)).await?;
    let spec = model.model_spec();
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "plan.csv")?;
    assert_succeeded(&cluster.run_job("q3", "Write notes", &spec, &[])?, &cluster);
    cluster.cli_ok(&["draft", "publish", "q3"])?;
    assert_eq!(published_paths(&cluster, "q3")?, ["notes.md", "plan.csv"]);
    cluster.cli_ok(&["checkpoint", "q3", "--note", "after notes"])?;

    let checkpoints: Vec<CheckpointInfo> =
        cluster.cli_ok(&["checkpoints", "q3", "--json"])?.json()?;
    let summary: Vec<_> = checkpoints
        .iter()
        .map(|c| (c.id.as_str(), c.reason, c.files.len(), c.note.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            ("1", CheckpointReason::Publish, 1, None),
            ("2", CheckpointReason::Manual, 2, Some("after notes")),
        ]
    );
    assert!(checkpoints.iter().all(|c| c.at_ms > 0));

    // Refused while a draft exists; unknown ids are NOT_FOUND.
    let overwrite = ["--approve", "destructive=auto"];
    assert_succeeded(
        &cluster.run_job("q3", "Again", &spec, &overwrite)?,
        &cluster,
    );
    assert!(
        cluster
            .cli(&["restore", "q3", "1"])?
            .failed_with("DRAFT_EXISTS")
    );
    cluster.cli_ok(&["draft", "discard", "q3"])?;
    assert!(
        cluster
            .cli(&["restore", "q3", "77"])?
            .failed_with("NOT_FOUND")
    );

    let restored: serde_json::Value = cluster.cli_ok(&["restore", "q3", "1", "--json"])?.json()?;
    assert_eq!(restored["safety_checkpoint_id"], "3");
    cluster.kill_coordinator();
    cluster.start_coordinator()?;
    assert_eq!(published_paths(&cluster, "q3")?, ["plan.csv"]);
    let last = history(&cluster, "q3")?.pop().context("no messages")?;
    assert!(
        last.text.starts_with("restored checkpoint 1"),
        "{}",
        last.text
    );
    // The replaced state is itself a checkpoint, and restoring it brings notes.md back.
    cluster.cli_ok(&["restore", "q3", "3"])?;
    assert_eq!(published_paths(&cluster, "q3")?, ["notes.md", "plan.csv"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoint_retention_and_blob_garbage_collection() -> anyhow::Result<()> {
    let mut cluster = Cluster::start()?;
    cluster.kill_coordinator();
    cluster.start_coordinator_with_env(&[("ATELIER_CHECKPOINTS_KEPT", "2")])?;
    cluster.cli_ok(&["wb", "create", "keep"])?;
    let dir = tempfile::tempdir()?;
    for n in 1..=4 {
        let file = dir.path().join(format!("v{n}.txt"));
        std::fs::write(&file, format!("version {n}\n"))?;
        let path = file.to_string_lossy().to_string();
        cluster.cli_ok(&["wb", "add", "keep", &path, "--as", "data.txt"])?;
        cluster.cli_ok(&["checkpoint", "keep"])?;
    }
    let checkpoints: Vec<CheckpointInfo> =
        cluster.cli_ok(&["checkpoints", "keep", "--json"])?.json()?;
    let ids: Vec<_> = checkpoints.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["3", "4"]);

    // Versions 1 and 2 are referenced by nothing now: collected; 3 and 4 stay readable.
    let blobs = cluster.data_dir().join("blobs");
    let count = || {
        walk_files(&blobs)
            .into_iter()
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with(".tmp"))
            })
            .count()
    };
    let before = count();
    // Table databases the host's workers cached: one of a file no blob is left of, one of the
    // current data.txt.
    let tables = cluster.data_dir().join("cache").join("tabular");
    std::fs::create_dir_all(&tables)?;
    let orphan = tables.join(format!("{}.duckdb", "e".repeat(64)));
    let current_digest = hex::encode(sha2::Sha256::digest(b"version 4\n"));
    let current = tables.join(format!("{current_digest}.duckdb"));
    std::fs::write(&orphan, [0u8; 300])?;
    std::fs::write(&current, [0u8; 300])?;
    let collected: serde_json::Value = cluster.cli_ok(&["gc", "--json"])?.json()?;
    assert_eq!(collected["removed_blobs"], 2);
    assert_eq!(collected["removed_tables"], 1);
    assert_eq!(count(), before - 2);
    assert!(!orphan.exists() && current.exists());
    let current = cluster.cli_ok(&["wb", "cat", "keep", "data.txt"])?;
    assert_eq!(current.stdout, "version 4\n");
    cluster.cli_ok(&["restore", "keep", "3"])?;
    assert_eq!(
        cluster.cli_ok(&["wb", "cat", "keep", "data.txt"])?.stdout,
        "version 3\n"
    );
    // A second collection finds nothing more to remove.
    let again: serde_json::Value = cluster.cli_ok(&["gc", "--json"])?.json()?;
    assert_eq!(again["removed_blobs"], 0);
    Ok(())
}

/// A one-item plan that sets two cells of `book.xlsx` and adds a sheet.
fn workbook_edit_script() -> Script {
    serde_json::from_value(json!({
        "research": [{"content": "Revenue per month in B2:B7."}],
        "plan": [{"content": "- [ ] 1. Update — correct January and add a forecast"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "xlsx_operations", "arguments": {"path": "book.xlsx", "operations": [
                {"op": "set_cells", "sheet": "Revenue", "cells": [{"cell": "B2", "value": 4321}, {"cell": "C2", "value": "corrected"}]},
                {"op": "ensure_sheet", "sheet": "Forecast"}
            ]}}]},
            {"content": "Updated."}
        ]},
        "summary": [{"content": "book.xlsx is updated in the draft."}]
    }))
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_draft_diff_of_an_edited_workbook_shows_the_new_cell_values() -> anyhow::Result<()> {
    let model = ScriptedModel::start(workbook_edit_script()).await?;
    let mut cluster = Cluster::start()?;
    cluster.cli_ok(&["wb", "create", "fin"])?;
    let book = atelier_tests::fixtures().join("keenbench/office/multi-sheet.xlsx");
    let book = book.to_string_lossy().to_string();
    cluster.cli_ok(&["wb", "add", "fin", &book, "--as", "book.xlsx"])?;
    let before: serde_json::Value = cluster.cli_ok(&["wb", "ls", "fin", "--json"])?.json()?;
    assert_eq!(before["files"][0]["path"], "book.xlsx");
    assert_succeeded(
        &cluster.run_job("fin", "Fix January", &model.model_spec(), &[])?,
        &cluster,
    );
    cluster.kill_coordinator();
    cluster.start_coordinator()?;

    let review: Review = cluster
        .cli_ok(&["draft", "diff", "fin", "--json"])?
        .json()?;
    assert_eq!(review.modified, ["book.xlsx"]);
    let [file] = review.files.as_slice() else {
        panic!("one changed file: {review:?}")
    };
    assert_eq!(file.change, Change::Modified);
    let ContentDiff::Workbook {
        sheets_added,
        sheets,
        ..
    } = &file.content
    else {
        panic!("not a workbook diff: {:?}", file.content)
    };
    assert_eq!(sheets_added, &["Forecast"]);
    let revenue = sheets
        .iter()
        .find(|s| s.sheet == "Revenue")
        .context("Revenue")?;
    assert_eq!(revenue.cells_changed, 2);
    let cells: Vec<_> = revenue
        .sample
        .iter()
        .map(|c| (c.cell.as_str(), c.new.clone()))
        .collect();
    assert_eq!(cells, [("B2", json!(4321)), ("C2", json!("corrected"))]);
    assert_ne!(revenue.sample[0].old, json!(4321));
    assert_eq!(revenue.sample[1].old, serde_json::Value::Null);

    // The human view says the same.
    let text = cluster.cli_ok(&["draft", "diff", "fin"])?.stdout;
    assert!(text.contains("M book.xlsx"), "{text}");
    assert!(text.contains("B2: ") && text.contains("→ 4321"), "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_prompt_carries_structural_maps_then_context_items() -> anyhow::Result<()> {
    let script: Script = serde_json::from_value(json!({
        "research": [{"content": "Looked."}],
        "plan": [{"content": "NO_CHANGE_NEEDED: nothing needs to change"}],
        "summary": [{"content": "Nothing changed."}]
    }))?;
    let model = ScriptedModel::start(script).await?;
    let spec = model.model_spec();
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("ctx", "plan.csv")?;
    let fixtures = atelier_tests::fixtures().join("keenbench");
    let book = fixtures
        .join("office/multi-sheet.xlsx")
        .to_string_lossy()
        .to_string();
    cluster.cli_ok(&["wb", "add", "ctx", &book, "--as", "book.xlsx"])?;

    let situation = fixtures.join("context/keenbench_situation_alpha.txt");
    let situation_text = std::fs::read_to_string(&situation)?;
    cluster.cli_ok(&[
        "context",
        "add",
        "ctx",
        "--situation",
        &situation.to_string_lossy(),
    ])?;
    let skill = tempfile::tempdir()?;
    let skill_dir = skill.path().join("house-style");
    std::fs::create_dir_all(skill_dir.join("references"))?;
    std::fs::write(
        skill_dir.join("SKILL.md"),
        "Round money to cents. See references/summary.md.\n",
    )?;
    std::fs::write(
        skill_dir.join("references/summary.md"),
        "Lead with totals.\n",
    )?;
    std::fs::write(skill_dir.join("unrelated.md"), "NOT REFERENCED\n")?;
    cluster.cli_ok(&[
        "context",
        "add",
        "ctx",
        "--skill",
        &skill_dir.to_string_lossy(),
    ])?;
    let items: Vec<serde_json::Value> = cluster
        .cli_ok(&["context", "ls", "ctx", "--json"])?
        .json()?;
    let names: Vec<_> = items
        .iter()
        .map(|i| i["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["situation", "house-style"]);
    assert!(
        cluster
            .cli(&["context", "rm", "ctx", "nope"])?
            .failed_with("NOT_FOUND")
    );

    assert_succeeded(
        &cluster.run_job("ctx", "What is in here?", &spec, &[])?,
        &cluster,
    );
    let prompt = research_prompts(&model)
        .pop()
        .context("no research prompt")?;
    let at = |needle: &str| {
        prompt
            .find(needle)
            .with_context(|| format!("{needle:?} missing:\n{prompt}"))
    };
    let manifest = at("plan.csv (csv")?;
    let maps = at("## Structural maps")?;
    // The CSV's map has its columns; the workbook's its sheets with their dimensions.
    let csv_map = at("<map path=\"plan.csv\">")?;
    at("Department")?;
    let book_map = at("<map path=\"book.xlsx\">")?;
    at("\"Revenue\"")?;
    let situation_at = at(situation_text.lines().next().unwrap_or_default().trim())?;
    let skill_at = at("Round money to cents.")?;
    at("Lead with totals.")?;
    assert!(!prompt.contains("NOT REFERENCED"), "{prompt}");
    // Files in path order, then the situation, then the skill.
    assert!(
        manifest < maps && maps < book_map && book_map < csv_map,
        "{prompt}"
    );
    assert!(
        csv_map < situation_at && situation_at < skill_at,
        "{prompt}"
    );

    // A removed item is gone from the next job's prompts.
    cluster.cli_ok(&["context", "rm", "ctx", "house-style"])?;
    assert_succeeded(&cluster.run_job("ctx", "And now?", &spec, &[])?, &cluster);
    let prompt = research_prompts(&model)
        .pop()
        .context("no research prompt")?;
    assert!(!prompt.contains("Round money to cents."), "{prompt}");
    assert!(prompt.contains("[m1 user]\nWhat is in here?"), "{prompt}");
    Ok(())
}

/// `atelier chat` driven through its stdin as a person would type, its stdout read line by line.
struct ChatSession {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl ChatSession {
    fn start(cluster: &Cluster, workbench: &str) -> anyhow::Result<Self> {
        use std::io::BufRead;
        let mut child = std::process::Command::new(atelier_tests::atelier_bin())
            .args(["chat", workbench, "--nats", &cluster.nats.url])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = send.send(line);
            }
        });
        Ok(Self {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        })
    }

    fn say(&mut self, line: &str) -> anyhow::Result<()> {
        use std::io::Write;
        writeln!(self.stdin, "{line}")?;
        Ok(self.stdin.flush()?)
    }

    /// Waits for a line containing `needle`; returns the lines up to it.
    fn expect(&mut self, needle: &str) -> anyhow::Result<Vec<String>> {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let start = self.seen.len();
        while std::time::Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                let found = line.contains(needle);
                self.seen.push(line);
                if found {
                    return Ok(self.seen[start..].to_vec());
                }
            }
        }
        anyhow::bail!(
            "no line with {needle:?}; the session said:\n{}",
            self.seen.join("\n")
        )
    }
}

impl Drop for ChatSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_session_sends_streams_and_runs_its_commands() -> anyhow::Result<()> {
    let model = ScriptedModel::start(notes_script(0)).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "plan.csv")?;
    cluster.cli_ok(&["wb", "set-model", "q3", &model.model_spec()])?;
    let mut chat = ChatSession::start(&cluster, "q3")?;
    chat.expect("chat on q3")?;

    chat.say("Write notes")?;
    let answer = chat.expect("[succeeded]")?;
    assert!(
        answer
            .iter()
            .any(|l| l.contains("· write_text_file notes.md")),
        "{answer:?}"
    );
    assert!(
        answer
            .iter()
            .any(|l| l.contains("notes.md is in the draft.")),
        "{answer:?}"
    );

    // A draft exists: the next message is refused with the code, and the session goes on.
    chat.say("More")?;
    chat.expect("DRAFT_EXISTS")?;
    chat.say("/diff")?;
    let diff = chat.expect("+# Notes")?;
    assert!(diff.iter().any(|l| l == "A notes.md"), "{diff:?}");
    // m1 is the model switch, m2 the message, m3 its answer: rewinding to the answer keeps the
    // draft it left.
    chat.say("/rewind m3")?;
    chat.expect("rewound to m3")?;
    chat.say("/rewind m99")?;
    chat.expect("NOT_FOUND")?;
    chat.say("/publish")?;
    chat.expect("published; the previous state is checkpoint 1")?;
    chat.say("/history")?;
    let listed = chat.expect("published the draft")?;
    assert!(
        listed.iter().any(|l| l.contains("m2  user: Write notes")),
        "{listed:?}"
    );
    // Regenerating from a message says first what goes; the same line again goes on. The
    // regenerated answer writes notes.md over the published one: the session shows the call
    // waiting for approval and takes the decision while the job runs.
    chat.say("/regenerate m2")?;
    chat.expect("regenerating the answer to m2 discards m3, m4")?;
    chat.expect("type /regenerate m2 again to go on")?;
    chat.say("/regenerate m2")?;
    let waiting = chat.expect("/approve or /reject")?;
    assert!(
        waiting
            .iter()
            .any(|l| l.contains("? write_text_file") && l.contains("(destructive")),
        "{waiting:?}"
    );
    chat.say("More while it runs")?;
    chat.expect("is running")?;
    chat.say("/approve fine to replace")?;
    chat.expect("approved: fine to replace")?;
    chat.expect("[succeeded]")?;
    chat.say("/quit")?;
    let status = chat.child.wait()?;
    assert!(status.success());
    let messages = history(&cluster, "q3")?;
    assert_eq!(messages.last().map(|m| m.role), Some(Role::Assistant));
    Ok(())
}

fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_summarizes_keeps_a_summary_of_older_messages_in_the_conversation()
-> anyhow::Result<()> {
    let mut script = notes_script(0);
    script.compress = serde_json::from_value(json!([
        {"content": "The model was chosen again and again; nothing was written yet."}
    ]))?;
    let model = ScriptedModel::start(script).await?;
    let mut cluster = Cluster::start()?;
    cluster.restart_coordinator_with_config(
        &model.profile_toml("big", "summarize_history = true"),
        &[],
    )?;
    cluster.workbench_with_launch_plan("q3", "plan.csv")?;
    // m1…m10: ten model switches, of which the eight most recent are given verbatim.
    for _ in 0..10 {
        cluster.cli_ok(&["wb", "set-model", "q3", "big"])?;
    }
    let first = cluster.run_job("q3", "Write notes", "big", &[])?;
    assert_succeeded(&first, &cluster);
    let compressions = |model: &ScriptedModel| -> Vec<String> {
        model
            .requests()
            .iter()
            .filter(|request| request.phase == "compress")
            .map(|request| request.body["messages"][1]["content"].to_string())
            .collect()
    };
    let asked = compressions(&model);
    assert_eq!(asked.len(), 1, "{asked:?}");
    // The summary's tokens are the job's (each scripted reply uses 100 + 20), not a turn.
    assert_eq!(
        (first.prompt_tokens, first.completion_tokens),
        (100 * (first.model_turns + 1), 20 * (first.model_turns + 1)),
        "{first:?}"
    );
    assert!(asked[0].contains("[m1 system]") && asked[0].contains("[m2 system]"));
    assert!(!asked[0].contains("[m3 system]"), "{}", asked[0]);
    let research = research_prompts(&model);
    assert!(
        research[0].contains(
            "Summary of the conversation through m2: The model was chosen again and again"
        ),
        "{}",
        research[0]
    );
    // The summary is kept in the conversation, after the message whose job made it.
    let messages = history(&cluster, "q3")?;
    assert_eq!(
        roles_and_ids(&messages[10..]),
        vec![
            ("m11".to_string(), Role::User),
            ("m12".to_string(), Role::System),
            ("m13".to_string(), Role::Assistant),
        ]
    );
    // The next job summarizes only what grew since, from that summary.
    let second = cluster.run_job(
        "q3",
        "Write notes again",
        "big",
        &["--continue-draft", "--approve", "destructive=auto"],
    )?;
    assert_succeeded(&second, &cluster);
    let asked = compressions(&model);
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[1].contains("Summary so far:") && asked[1].contains("[m3 system]"));
    assert!(!asked[1].contains("[m1 system]"), "{}", asked[1]);
    // Clients following the workbench hear of it.
    let client = async_nats::connect(&cluster.nats.url).await?;
    let events: Vec<Stored<WorkshopEvent>> = stored_messages(
        &client,
        subjects::workshop::EVENTS_STREAM,
        subjects::workshop::event("q3", "context_compressed"),
    )
    .await?;
    let summaries: Vec<_> = events
        .iter()
        .filter_map(|event| event.payload.message.as_ref().map(|m| m.id.as_str()))
        .collect();
    assert_eq!(summaries, ["m12", "m15"]);
    Ok(())
}
