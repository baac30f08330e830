//! Durable execution, proven by killing real processes: the coordinator at every journal
//! boundary (named failpoints), a worker during a slow call, the NATS server mid-job; plus
//! cancel, resume after a provider outage, loop detection, and 1,000 jobs across three
//! coordinator crashes.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::Context;
use atelier_messages::job::{EventKind, ItemStatus, JobEvent, JobState, JobSubmit, JobView};
use atelier_messages::{ErrorCode, Format, PROTOCOL_VERSION, decode, encode, subjects};
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::{Cluster, docx_paragraph_text, export_draft, nats_request, wait_until};
use futures::StreamExt;
use serde_json::json;

const JOB_TIMEOUT: Duration = Duration::from_secs(60);

fn multi_item_script() -> Script {
    serde_json::from_value(json!({
        "research": [
            {"tool_calls": [{"name": "table_get_map", "arguments": {"path": "plan.csv"}}]},
            {"content": "Milestones by department; five rows."}
        ],
        "plan": [{"content": "- [ ] 1. Export — counts per department to summary.csv\n- [ ] 2. Notes — write notes.md"}],
        "implement": {
            "1": [
                {"tool_calls": [{"name": "table_export", "arguments": {
                    "path": "plan.csv", "format": "csv", "target_path": "summary.csv",
                    "query": "SELECT Department, COUNT(*) AS n FROM data GROUP BY Department ORDER BY Department"}}]},
                {"content": "Exported."}
            ],
            "2": [
                {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.md", "content": "# Notes\nEngineering leads.\n"}}]},
                {"content": "Written."}
            ]
        },
        "summary": [{"content": "Two files are in the draft."}]
    }))
    .unwrap_or_default()
}

/// Model turns the script has: research 2, plan 1, item 1: 2, item 2: 2, summary 1.
const MODEL_TURNS: usize = 8;
const TOOL_CALLS: usize = 3;
const CHECKPOINTS: usize = 6;

struct RunOutcome {
    view: JobView,
    digests: BTreeMap<String, String>,
    asks: BTreeMap<(String, Option<u32>, usize), usize>,
    applied: HashMap<String, usize>,
}

/// Runs the multi-item job; with a failpoint, the coordinator must die at it and a fresh one
/// must finish the job.
async fn run_multi_item_job(failpoint: Option<&str>) -> anyhow::Result<RunOutcome> {
    let model = ScriptedModel::start(multi_item_script()).await?;
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("wb", "plan.csv")?;
    if let Some(point) = failpoint {
        cluster.kill_coordinator();
        cluster.start_coordinator_with_env(&[("ATELIER_FAILPOINTS", point)])?;
    }
    let job_id = cluster.submit(
        "wb",
        "Count milestones and write notes",
        &model.model_spec(),
    )?;
    if let Some(point) = failpoint {
        restart_after_failpoint(&mut cluster, point)?;
    }
    let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
    let mut asks = BTreeMap::new();
    for request in model.requests() {
        *asks
            .entry((request.phase, request.item, request.turn))
            .or_insert(0) += 1;
    }
    Ok(RunOutcome {
        digests: cluster.draft_digests("wb")?,
        applied: cluster.applied_writes(),
        asks,
        view,
    })
}

async fn assert_survives(points: &[String]) -> anyhow::Result<()> {
    let baseline = run_multi_item_job(None).await?;
    assert_eq!(
        baseline.view.state,
        JobState::Succeeded,
        "{:?}",
        baseline.view.error
    );
    assert_eq!(
        baseline.digests.len(),
        3,
        "plan.csv, summary.csv, notes.md: {:?}",
        baseline.digests
    );
    for point in points {
        let run = run_multi_item_job(Some(point))
            .await
            .with_context(|| format!("failpoint {point}"))?;
        assert_eq!(
            run.view.state,
            JobState::Succeeded,
            "{point}: {:?}",
            run.view.error
        );
        assert_eq!(
            run.view
                .items
                .iter()
                .filter(|i| i.status == ItemStatus::Done)
                .count(),
            2,
            "{point}"
        );
        assert_eq!(
            run.digests, baseline.digests,
            "{point}: the draft differs from an uninterrupted run"
        );
        assert_eq!(run.asks.len(), MODEL_TURNS, "{point}: {:?}", run.asks);
        for (turn, count) in &run.asks {
            assert_eq!(
                *count, 1,
                "{point}: model turn {turn:?} was asked {count} times"
            );
        }
        assert_eq!(
            run.applied.len(),
            2,
            "{point}: two writes expected: {:?}",
            run.applied
        );
        for (call_id, count) in &run.applied {
            assert_eq!(*count, 1, "{point}: write {call_id} applied {count} times");
        }
    }
    Ok(())
}

/// Waits for the coordinator armed with `point` to kill itself there, then starts it again.
fn restart_after_failpoint(cluster: &mut Cluster, point: &str) -> anyhow::Result<()> {
    let coordinator = cluster.coordinator.as_mut().context("no coordinator")?;
    anyhow::ensure!(
        coordinator.wait_exit(JOB_TIMEOUT),
        "failpoint {point} was never reached\n{}",
        cluster.logs()
    );
    cluster.start_coordinator()
}

fn numbered(point: &str, hits: usize) -> Vec<String> {
    (1..=hits).map(|n| format!("{point}@{n}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_submit_and_after_every_model_turn_the_job_completes_identically()
-> anyhow::Result<()> {
    let mut points = vec!["after_submit_record".to_string()];
    points.extend(numbered("after_model_turn", MODEL_TURNS));
    assert_survives(&points).await
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_around_every_tool_result_the_job_completes_identically() -> anyhow::Result<()> {
    let mut points = numbered("before_tool_result", TOOL_CALLS);
    points.extend(numbered("after_tool_result", TOOL_CALLS));
    points.extend(numbered("store_before_flush", 2));
    assert_survives(&points).await
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_every_checkpoint_the_job_completes_identically() -> anyhow::Result<()> {
    assert_survives(&numbered("after_checkpoint", CHECKPOINTS)).await
}

/// A workflow's states are saved without flushes of their own (a replay rebuilds them from
/// the journal), and so are its run's start and the files it started from: killed after each
/// of them — the start, the files, the plan, each step's mark, the end — the job still ends as
/// an uninterrupted one, each of its non-idempotent writes applied once.
#[test]
fn a_workflow_killed_after_each_unflushed_write_completes_with_each_write_once()
-> anyhow::Result<()> {
    let workflow = atelier_tests::TWO_PARAGRAPHS_WORKFLOW;
    // Writes: the run's start, the files it started from; saves: the plan, after step 1,
    // after step 2, the end.
    let writes = numbered("after_rebuildable_write", 2);
    let saves = numbered("after_rebuildable_save", 4);
    for (hit, point) in writes.into_iter().chain(saves).enumerate() {
        let mut cluster = Cluster::start()?;
        let file = cluster.dir.path().join("twice.toml");
        std::fs::write(&file, workflow)?;
        cluster.cli_ok(&["wb", "create", "w"])?;
        cluster.kill_coordinator();
        cluster.start_coordinator_with_env(&[("ATELIER_FAILPOINTS", point.as_str())])?;
        let job_id = format!("twice-{hit}");
        let file = file.to_string_lossy().to_string();
        cluster.cli_ok(&["run", "w", "--workflow", &file, "--job-id", &job_id])?;
        restart_after_failpoint(&mut cluster, &point)?;
        let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
        assert_eq!(view.state, JobState::Succeeded, "{point}: {:?}", view.error);
        assert_eq!(
            view.items
                .iter()
                .map(|item| item.status)
                .collect::<Vec<_>>(),
            vec![ItemStatus::Done, ItemStatus::Done],
            "{point}"
        );
        let text = docx_paragraph_text(&export_draft(&cluster, "w")?.join("notes.docx"))?;
        for line in ["first line", "second line"] {
            assert_eq!(text.matches(line).count(), 1, "{point}: {line} in {text}");
        }
        let applied = cluster.applied_writes();
        assert_eq!(applied.len(), 2, "{point}: {applied:?}");
        assert!(
            applied.values().all(|times| *times == 1),
            "{point}: {applied:?}"
        );
    }
    Ok(())
}

fn slow_query_script() -> Script {
    serde_json::from_value(json!({
        "research": [
            {"tool_calls": [{"name": "table_query", "arguments": {
                "path": "plan.csv",
                "query": "SELECT count(*) AS n, (SELECT sum(a.i * b.j) FROM range(0, 20000) a(i), range(0, 2500) b(j)) AS heavy FROM data"}}]},
            {"content": "Counted."}
        ],
        "plan": [{"content": "NO_CHANGE_NEEDED: nothing to change"}],
        "summary": [{"content": "Nothing to change."}]
    }))
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_during_a_slow_call_is_replaced_and_the_call_completes()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(slow_query_script()).await?;
    let mut cluster = Cluster::start_with(&["tabular", "office"])?;
    cluster.workbench_with_launch_plan("slow", "plan.csv")?;
    let job_id = cluster.submit("slow", "count", &model.model_spec())?;
    // The query is running on the only tabular worker: kill it, then bring another.
    wait_until(JOB_TIMEOUT, || model.count("research", None, 0) == 1)?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.workers[0].kill();
    cluster.start_worker("tabular")?;
    let view = cluster.wait_finished(&job_id, Duration::from_secs(90))?;
    assert_eq!(
        view.state,
        JobState::Succeeded,
        "{:?}\n{}",
        view.error,
        cluster.logs()
    );
    let results = model.tool_results("research", None, 1);
    let result: serde_json::Value =
        serde_json::from_str(results.first().context("no tool result")?)?;
    assert_eq!(
        result["rows"][0][0], 5,
        "the call completed on the new worker: {result}"
    );
    Ok(())
}

fn delayed_plan_script(delay_ms: u64) -> Script {
    let mut script = multi_item_script();
    script.plan[0].delay_ms = delay_ms;
    script
}

#[tokio::test(flavor = "multi_thread")]
async fn nats_server_killed_and_restarted_mid_job_the_job_completes() -> anyhow::Result<()> {
    let model = ScriptedModel::start(delayed_plan_script(3_000)).await?;
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("outage", "plan.csv")?;
    let job_id = cluster.submit("outage", "go", &model.model_spec())?;
    wait_until(JOB_TIMEOUT, || model.count("plan", None, 0) == 1)?;
    cluster.nats.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.nats.restart()?;
    let view = cluster.wait_finished(&job_id, Duration::from_secs(90))?;
    assert_eq!(
        view.state,
        JobState::Succeeded,
        "{:?}\n{}",
        view.error,
        cluster.logs()
    );
    assert_eq!(cluster.draft_digests("outage")?.len(), 3);
    assert_eq!(model.count("research", None, 0), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_stops_a_job_at_the_next_step_with_user_canceled() -> anyhow::Result<()> {
    let model = ScriptedModel::start(delayed_plan_script(2_000)).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("cancel", "plan.csv")?;
    let job_id = cluster.submit("cancel", "go", &model.model_spec())?;
    wait_until(JOB_TIMEOUT, || model.count("plan", None, 0) == 1)?;
    cluster.cli_ok(&["cancel", &job_id])?;
    let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
    assert_eq!(view.state, JobState::Cancelled);
    assert_eq!(view.error.map(|e| e.code), Some(ErrorCode::UserCanceled));
    // Nothing after the plan turn ran, and nothing was written.
    assert_eq!(
        model
            .requests()
            .iter()
            .filter(|r| r.phase == "implement")
            .count(),
        0
    );
    let diff: serde_json::Value = cluster
        .cli_ok(&["draft", "diff", "cancel", "--json"])?
        .json()?;
    assert_eq!(diff["has_draft"], false);
    // A finished job cannot be cancelled again.
    let again = cluster.cli(&["cancel", &job_id])?;
    assert!(again.failed_with("VALIDATION_FAILED"), "{}", again.stderr);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_outage_fails_the_job_and_resume_continues_without_redoing_steps()
-> anyhow::Result<()> {
    let mut script = multi_item_script();
    script.research[1].delay_ms = 1_000;
    let model = ScriptedModel::start(script).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("resume", "plan.csv")?;
    let job_id = cluster.submit("resume", "go", &model.model_spec())?;
    // Research gets through (its last answer takes 1 s); the outage starts with the plan turn.
    wait_until(JOB_TIMEOUT, || model.count("research", None, 1) == 1)?;
    model.fail_with(503);
    let failed = cluster.wait_finished(&job_id, Duration::from_secs(90))?;
    assert_eq!(failed.state, JobState::Failed);
    assert_eq!(
        failed.error.map(|e| e.code),
        Some(ErrorCode::ProviderUnavailable)
    );
    model.recover();
    cluster.cli_ok(&["resume", &job_id])?;
    let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
    assert_eq!(view.state, JobState::Succeeded, "{:?}", view.error);
    assert_eq!(
        model.count("research", None, 0),
        1,
        "journaled research turns are not asked again"
    );
    assert_eq!(model.count("research", None, 1), 1);
    assert_eq!(cluster.draft_digests("resume")?.len(), 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_repeating_one_call_is_warned_then_stopped_with_agent_loop_detected()
-> anyhow::Result<()> {
    let same = json!({"tool_calls": [{"name": "table_query", "arguments": {"path": "plan.csv", "query": "SELECT 1"}}]});
    let script: Script = serde_json::from_value(json!({
        "research": [{"content": "ok"}],
        "plan": [{"content": "- [ ] 1. Spin — query forever"}],
        "implement": {"1": [same.clone(), same.clone(), same.clone(), same.clone(), same.clone(), same]},
        "summary": [{"content": "The item failed."}]
    }))?;
    let model = ScriptedModel::start(script).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("loop", "plan.csv")?;
    let view = cluster.run_job("loop", "go", &model.model_spec(), &[])?;
    let item = &view.items[0];
    assert_eq!(item.status, ItemStatus::Failed);
    assert_eq!(item.failure_code, Some(ErrorCode::AgentLoopDetected));
    assert_eq!(item.attempts, 1, "a loop is not retried");
    // The third identical call came back with a warning the model could read.
    let results = model.tool_results("implement", Some(1), 3);
    let last_tool = results.last().context("no tool message")?;
    assert!(
        last_tool.contains("[warning: you called `table_query`"),
        "{last_tool}"
    );
    assert_eq!(
        model.count("implement", Some(1), 5),
        0,
        "the fifth repeat stops the item before another turn"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_jobs_across_three_coordinator_crashes_complete_exactly_once()
-> anyhow::Result<()> {
    const JOBS: usize = 1_000;
    let script: Script = serde_json::from_value(json!({
        "research": [{"content": "nothing to read"}],
        "plan": [{"content": "NO_CHANGE_NEEDED: nothing to change"}],
        "summary": [{"content": "done"}]
    }))?;
    let model = ScriptedModel::start(script).await?;
    let mut cluster = Cluster::start()?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let js = async_nats::jetstream::new(client.clone());
    let ids: Vec<String> = (0..JOBS).map(|n| format!("bulk-{n:04}")).collect();
    // One job at a time per workbench: each job gets its own.
    for id in &ids {
        let create = serde_json::to_vec(&json!({"v": PROTOCOL_VERSION, "workbench": id}))?;
        nats_request(&client, subjects::store::CREATE, create, true).await?;
    }
    for (n, id) in ids.iter().enumerate() {
        let submit = JobSubmit {
            v: PROTOCOL_VERSION,
            job_id: id.clone(),
            workbench: id.clone(),
            message: format!("job {n}"),
            model: Some(model.model_spec()),
            submitted_at_ms: 0,
            auto_approve: false,
            approvals: None,
            continue_draft: false,
            workflow: None,
            batch_id: None,
            time_limit_secs: None,
            priority: None,
            budget: Default::default(),
        };
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id.as_str());
        js.publish_with_headers(
            subjects::JOB_SUBMIT,
            headers,
            encode(&submit, Format::MessagePack)
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .into(),
        )
        .await?
        .await?;
    }
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        cluster.kill_coordinator();
        cluster.start_coordinator()?;
    }
    wait_until(Duration::from_secs(240), || {
        let jobs: Vec<JobView> = cluster
            .cli(&["jobs", "--state", "succeeded", "--json"])
            .ok()
            .and_then(|out| out.json().ok())
            .unwrap_or_default();
        jobs.len() == JOBS
    })
    .with_context(|| cluster.logs())?;
    let all: Vec<JobView> = cluster.cli_ok(&["jobs", "--json"])?.json()?;
    assert_eq!(all.len(), JOBS, "one record per submitted job");
    // Exactly one `finished` event per job in the EVENTS stream.
    let stream = js.get_stream(subjects::EVENTS_STREAM).await?;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: "atelier.evt.*.finished".into(),
            ..Default::default()
        })
        .await?;
    let mut finished: HashMap<String, usize> = HashMap::new();
    let mut messages = consumer.messages().await?;
    while finished.values().sum::<usize>() < JOBS {
        let Ok(Some(message)) = tokio::time::timeout(Duration::from_secs(5), messages.next()).await
        else {
            break;
        };
        let event: JobEvent =
            decode(&message?.payload, Format::MessagePack).map_err(|e| anyhow::anyhow!("{e}"))?;
        assert!(matches!(
            event.kind,
            EventKind::JobFinished {
                state: JobState::Succeeded,
                ..
            }
        ));
        *finished.entry(event.job_id).or_insert(0) += 1;
    }
    // Drain anything beyond one per job.
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(500), messages.next()).await
    {
        let event: JobEvent =
            decode(&message?.payload, Format::MessagePack).map_err(|e| anyhow::anyhow!("{e}"))?;
        *finished.entry(event.job_id).or_insert(0) += 1;
    }
    assert_eq!(finished.len(), JOBS);
    assert!(
        finished.values().all(|count| *count == 1),
        "duplicate finished events: {:?}",
        finished.iter().filter(|(_, c)| **c > 1).collect::<Vec<_>>()
    );
    // Each job's summary was asked at least once; across 3 crashes, a turn in flight may be
    // asked again, never more often than the crashes allow.
    let mut summaries: HashMap<String, usize> = HashMap::new();
    for request in model
        .requests()
        .into_iter()
        .filter(|r| r.phase == "summary")
    {
        let message = request.body["messages"][1]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        *summaries.entry(message).or_insert(0) += 1;
    }
    assert_eq!(summaries.len(), JOBS);
    assert!(summaries.values().all(|count| *count <= 4));
    Ok(())
}

fn delete_script() -> Script {
    delete_script_answering("Handled.")
}

/// The delete job, whose model answers `after` once its call returned.
fn delete_script_answering(after: &str) -> Script {
    serde_json::from_value(json!({
        "research": [{"content": "plan.csv is the only file."}],
        "plan": [{"content": "- [ ] 1. Remove — delete plan.csv"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "delete_file", "arguments": {"path": "plan.csv"}}]},
            {"content": after}
        ]},
        "summary": [{"content": "done"}]
    }))
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destructive_call_waits_for_approval_across_a_restart_then_runs() -> anyhow::Result<()> {
    let model = ScriptedModel::start(delete_script()).await?;
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("approve", "plan.csv")?;
    let job_id = cluster.submit("approve", "clean up", &model.model_spec())?;
    let waiting = cluster.wait_for_state(&job_id, JobState::AwaitingApproval)?;
    let pending = waiting.pending_approval.context("no pending approval")?;
    assert_eq!(pending.tool, "delete_file");
    assert!(pending.arguments.contains("plan.csv"));
    // Nothing was deleted yet, and the wait survives a crash of the coordinator.
    let diff: serde_json::Value = cluster
        .cli_ok(&["draft", "diff", "approve", "--json"])?
        .json()?;
    assert_eq!(diff["has_draft"], false);
    cluster.kill_coordinator();
    cluster.start_coordinator()?;
    cluster.wait_for_state(&job_id, JobState::AwaitingApproval)?;
    cluster.cli_ok(&["approve", &job_id])?;
    let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
    assert_eq!(view.state, JobState::Succeeded, "{:?}", view.error);
    let diff: serde_json::Value = cluster
        .cli_ok(&["draft", "diff", "approve", "--json"])?
        .json()?;
    assert_eq!(diff["deleted"], json!(["plan.csv"]));
    assert_eq!(
        model.count("implement", Some(1), 0),
        1,
        "the turn that asked for the call is not asked again"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_destructive_call_is_told_to_the_model_and_nothing_is_deleted()
-> anyhow::Result<()> {
    // Told of the rejection, the model states why nothing changes: the item is done as such.
    let model = ScriptedModel::start(delete_script_answering(
        "NO_CHANGE_NEEDED: the user rejected deleting plan.csv, so it stays",
    ))
    .await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("reject", "plan.csv")?;
    let job_id = cluster.submit("reject", "clean up", &model.model_spec())?;
    cluster.wait_for_state(&job_id, JobState::AwaitingApproval)?;
    cluster.cli_ok(&["approve", &job_id, "--reject"])?;
    let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
    assert_eq!(view.state, JobState::Succeeded);
    let results = model.tool_results("implement", Some(1), 1);
    let tool = results.first().context("no turn after the rejection")?;
    assert!(tool.contains("APPROVAL_REJECTED"), "{tool}");
    let diff: serde_json::Value = cluster
        .cli_ok(&["draft", "diff", "reject", "--json"])?
        .json()?;
    assert_eq!(
        diff["has_draft"], false,
        "a rejected delete changes nothing"
    );
    // Approving a job that waits for nothing is refused with a code.
    let out = cluster.cli(&["approve", &job_id])?;
    assert!(out.failed_with("VALIDATION_FAILED"), "{}", out.stderr);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_approve_runs_destructive_calls_without_pausing() -> anyhow::Result<()> {
    let model = ScriptedModel::start(delete_script()).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("auto", "plan.csv")?;
    let view = cluster.run_job("auto", "clean up", &model.model_spec(), &["--auto-approve"])?;
    assert_eq!(view.state, JobState::Succeeded);
    let diff: serde_json::Value = cluster
        .cli_ok(&["draft", "diff", "auto", "--json"])?
        .json()?;
    assert_eq!(diff["deleted"], json!(["plan.csv"]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delete_applied_before_a_crash_is_answered_as_done_not_run_again() -> anyhow::Result<()> {
    let model = ScriptedModel::start(delete_script()).await?;
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("crash", "plan.csv")?;
    // Die after the delete reached the draft and before its result was journaled.
    cluster.kill_coordinator();
    cluster.start_coordinator_with_env(&[("ATELIER_FAILPOINTS", "before_tool_result")])?;
    let job_id = cluster.submit_with(
        "crash",
        "clean up",
        &model.model_spec(),
        &["--auto-approve"],
    )?;
    let coordinator = cluster.coordinator.as_mut().context("no coordinator")?;
    anyhow::ensure!(
        coordinator.wait_exit(JOB_TIMEOUT),
        "the failpoint was never reached"
    );
    cluster.start_coordinator()?;
    let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
    assert_eq!(view.state, JobState::Succeeded, "{:?}", view.error);
    let results = model.tool_results("implement", Some(1), 1);
    let result: serde_json::Value =
        serde_json::from_str(results.first().context("the model saw no tool result")?)?;
    assert_eq!(
        result,
        json!({"path": "plan.csv", "deleted": true}),
        "the model is told what the first run did, not a recomputed FILE_READ_FAILED"
    );
    let diff: serde_json::Value = cluster
        .cli_ok(&["draft", "diff", "crash", "--json"])?
        .json()?;
    assert_eq!(diff["deleted"], json!(["plan.csv"]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_over_its_model_turn_budget_fails_with_budget_exceeded() -> anyhow::Result<()> {
    let model = ScriptedModel::start(multi_item_script()).await?;
    let mut cluster = Cluster::start()?;
    cluster.kill_coordinator();
    cluster.start_coordinator_with_env(&[("ATELIER_JOB_MAX_MODEL_TURNS", "3")])?;
    cluster.workbench_with_launch_plan("budget", "plan.csv")?;
    let view = cluster.run_job("budget", "go", &model.model_spec(), &[])?;
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(view.error.map(|e| e.code), Some(ErrorCode::BudgetExceeded));
    assert_eq!(view.model_turns, 3);
    assert_eq!(model.requests().len(), 3, "no model turn beyond the budget");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn stats_report_the_journal_and_retention_prunes_finished_jobs() -> anyhow::Result<()> {
    let model = ScriptedModel::start(multi_item_script()).await?;
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("stats", "plan.csv")?;
    let view = cluster.run_job("stats", "go", &model.model_spec(), &[])?;
    assert_eq!(view.state, JobState::Succeeded);
    let stats: serde_json::Value = cluster.cli_ok(&["jobs", "--stats", "--json"])?.json()?;
    assert_eq!(stats["jobs_by_state"]["succeeded"], 1);
    // 8 model turns, 3 tool results, 5 system prompts and the files the job and each of its
    // 2 items started from.
    assert_eq!(stats["journal_entries"], 19);
    assert!(stats["storage_bytes"].as_u64().unwrap_or(0) > 0);
    cluster.kill_coordinator();
    cluster.start_coordinator_with_env(&[("ATELIER_JOURNAL_RETENTION_SECS", "0")])?;
    wait_until(Duration::from_secs(10), || {
        let stats: Option<serde_json::Value> = cluster
            .cli(&["jobs", "--stats", "--json"])
            .ok()
            .and_then(|out| out.json().ok());
        stats.is_some_and(|stats| stats["journal_entries"] == 0)
    })?;
    // The job itself stays listed.
    let view: JobView = cluster
        .cli_ok(&["jobs", "--json"])?
        .json::<Vec<JobView>>()?
        .remove(0);
    assert_eq!(view.state, JobState::Succeeded);
    Ok(())
}

/// A watch whose job's `finished` event is gone (a server crash before it reached the disk, a
/// stream trimmed by its limits) still ends, with the state the job's record shows.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_ends_from_the_jobs_record_when_its_finished_event_is_lost() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    cluster.run_workflow(
        "w",
        r#"
name = "one"
[[steps]]
tool = "docx_operations"
args = { path = "notes.docx", create_new = true, operations = [{ op = "append_paragraph", text = "a line" }] }
"#,
        "lost-end",
    )?;
    let js = async_nats::jetstream::new(async_nats::connect(&cluster.nats.url).await?);
    let purged = js
        .get_stream(subjects::EVENTS_STREAM)
        .await?
        .purge()
        .filter(subjects::event("lost-end", "finished"))
        .await?;
    assert_eq!(purged.purged, 1, "the run's end was announced once");

    let mut watch = std::process::Command::new(atelier_tests::atelier_bin())
        .args(["watch", "lost-end", "--json", "--nats", &cluster.nats.url])
        .stdout(std::process::Stdio::null())
        .spawn()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = watch.try_wait()? {
            break status;
        }
        if std::time::Instant::now() > deadline {
            watch.kill()?;
            anyhow::bail!("the watch did not end from the job's record within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "the watch ends as the job did: {status}");
    Ok(())
}

/// The event streams are notifications of what records hold (docs/adr/0015): with one copy
/// they are written without waiting for the disk, while submissions are written as the server
/// syncs; every reader that waits for an end also looks at the record (above).
#[tokio::test(flavor = "multi_thread")]
async fn event_streams_do_not_wait_for_the_disk_and_submissions_do() -> anyhow::Result<()> {
    use async_nats::jetstream::stream::PersistenceMode;
    let cluster = Cluster::start()?;
    let js = async_nats::jetstream::new(async_nats::connect(&cluster.nats.url).await?);
    let expected = [
        (subjects::JOBS_STREAM, None),
        (subjects::EVENTS_STREAM, Some(PersistenceMode::Async)),
        (
            subjects::workshop::EVENTS_STREAM,
            Some(PersistenceMode::Async),
        ),
        (subjects::batch::EVENTS_STREAM, Some(PersistenceMode::Async)),
    ];
    for (stream, mode) in expected {
        let config = js.get_stream(stream).await?.info().await?.config.clone();
        assert_eq!(config.num_replicas, 1, "{stream}");
        assert_eq!(
            config
                .persist_mode
                .filter(|m| *m != PersistenceMode::Default),
            mode,
            "{stream}"
        );
    }
    Ok(())
}
