//! Hardening: tool failures told to the model in every phase, results over the server's
//! payload limit, exactly-once tool calls across worker and coordinator crashes, approvals by
//! action class, races between control verbs and runs, hostile input at every entry point.

use std::time::{Duration, Instant};

use anyhow::Context;
use atelier_messages::job::JobState;
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::{Cluster, wait_until};
use serde_json::json;

const JOB_TIMEOUT: Duration = Duration::from_secs(60);

/// One research query, then an empty plan.
fn research_query_script(query: &str) -> Script {
    serde_json::from_value(json!({
        "research": [
            {"tool_calls": [{"name": "table_query", "arguments": {
                "path": "plan.csv", "query": query, "window_rows": 10_000}}]},
            {"content": "Noted."}
        ],
        "plan": [{"content": "NO_CHANGE_NEEDED: nothing to change"}],
        "summary": [{"content": "Nothing to change."}]
    }))
    .unwrap_or_default()
}

/// The first tool result the model was shown in research, as JSON.
fn first_research_result(model: &ScriptedModel) -> anyhow::Result<serde_json::Value> {
    let results = model.tool_results("research", None, 1);
    let first = results
        .first()
        .ok_or_else(|| anyhow::anyhow!("the model saw no tool result"))?;
    Ok(serde_json::from_str(first)?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_timeout_in_research_is_told_to_the_model_and_the_job_goes_on() -> anyhow::Result<()>
{
    let heavy = "SELECT count(*), (SELECT sum(a.i * b.j) FROM range(0, 200000) a(i), range(0, 20000) b(j)) FROM data";
    let model = ScriptedModel::start(research_query_script(heavy)).await?;
    let mut cluster = Cluster::start_with(&["office"])?;
    cluster.start_worker_with_env("tabular", &[("ATELIER_TABULAR_QUERY_TIMEOUT_MS", "300")])?;
    cluster.workbench_with_launch_plan("slow", "plan.csv")?;
    let view = cluster.run_job("slow", "count", &model.model_spec(), &[])?;
    assert_eq!(view.state, JobState::Succeeded, "{:?}", view.error);
    let result = first_research_result(&model)?;
    assert_eq!(result["error"]["code"], "TOOL_TIMEOUT", "{result}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_over_the_servers_max_payload_is_a_clear_error_at_once() -> anyhow::Result<()> {
    // About 2 MB of rows against a 256 KiB limit.
    let big = "SELECT repeat('x', 2000) AS s FROM range(1000)";
    let model = ScriptedModel::start(research_query_script(big)).await?;
    let cluster = Cluster::start_with_max_payload(&["tabular", "office"], 256 << 10)?;
    cluster.workbench_with_launch_plan("big", "plan.csv")?;
    let started = Instant::now();
    let view = cluster.run_job("big", "look", &model.model_spec(), &[])?;
    assert_eq!(view.state, JobState::Succeeded, "{:?}", view.error);
    let result = first_research_result(&model)?;
    assert_eq!(result["error"]["code"], "RESULT_TOO_LARGE", "{result}");
    assert!(
        started.elapsed() < JOB_TIMEOUT / 6,
        "the caller was answered at once, not after its idle timeout: {:?}",
        started.elapsed()
    );
    Ok(())
}

/// A write tool call the exactly-once matrix runs, on a workbench holding `plan.csv`,
/// `quarterly_data.xlsx` and `simple.docx`.
struct WriteCase {
    name: &'static str,
    pool: &'static str,
    call: serde_json::Value,
}

fn write_cases() -> Vec<WriteCase> {
    vec![
        WriteCase {
            name: "delete_file",
            pool: "office",
            call: json!({"name": "delete_file", "arguments": {"path": "plan.csv"}}),
        },
        WriteCase {
            name: "rename_file",
            pool: "office",
            call: json!({"name": "rename_file", "arguments": {"path": "plan.csv", "new_path": "milestones.csv"}}),
        },
        WriteCase {
            name: "create_new",
            pool: "office",
            call: json!({"name": "xlsx_operations", "arguments": {"path": "new.xlsx", "create_new": true,
                "operations": [{"op": "set_cells", "sheet": "Sheet1", "cells": [{"cell": "A1", "value": 42}]}]}}),
        },
        WriteCase {
            name: "append_rows",
            pool: "tabular",
            call: json!({"name": "table_update_from_export", "arguments": {"path": "plan.csv",
                "query": "SELECT * FROM data", "target_path": "quarterly_data.xlsx", "sheet": "Q1",
                "mode": "append_rows"}}),
        },
        WriteCase {
            name: "append_paragraph",
            pool: "office",
            call: json!({"name": "docx_operations", "arguments": {"path": "simple.docx",
                "operations": [{"op": "append_paragraph", "text": "Added exactly once."}]}}),
        },
    ]
}

fn one_write_script(call: &serde_json::Value) -> Script {
    serde_json::from_value(json!({
        "research": [{"content": "Three files."}],
        "plan": [{"content": "- [ ] 1. Change — one write"}],
        "implement": {"1": [{"tool_calls": [call]}, {"content": "Done."}]},
        "summary": [{"content": "Done."}]
    }))
    .unwrap_or_default()
}

/// Where a run is killed.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// No crash: the reference run.
    Nowhere,
    /// The coordinator, after the call's changes reached the draft, before its result was journaled.
    CoordinatorAfterWrite,
    /// The worker, after computing the call, before replying.
    WorkerBeforeReply,
}

/// What a run left: the job's state, the draft, the result the model was shown, and how many
/// times each call's changes were applied.
#[derive(Debug, PartialEq)]
struct WriteRun {
    state: JobState,
    draft: std::collections::BTreeMap<String, String>,
    shown: Vec<String>,
    applied: Vec<usize>,
}

async fn run_write(case: &WriteCase, kill: Kill) -> anyhow::Result<WriteRun> {
    let model = ScriptedModel::start(one_write_script(&case.call)).await?;
    let other_pool = if case.pool == "office" {
        "tabular"
    } else {
        "office"
    };
    let mut cluster = Cluster::start_with(&[other_pool])?;
    let failpoint = [("ATELIER_FAILPOINTS", "worker_before_reply")];
    match kill {
        Kill::WorkerBeforeReply => cluster.start_worker_with_env(case.pool, &failpoint)?,
        _ => cluster.start_worker(case.pool)?,
    }
    if let Kill::CoordinatorAfterWrite = kill {
        cluster.kill_coordinator();
        cluster.start_coordinator_with_env(&[("ATELIER_FAILPOINTS", "before_tool_result")])?;
    }
    let fixtures = atelier_tests::fixtures().join("keenbench");
    cluster.workbench_with_launch_plan("w", "plan.csv")?;
    for file in ["synthetic/quarterly_data.xlsx", "office/simple.docx"] {
        let path = fixtures.join(file).to_string_lossy().to_string();
        cluster.cli_ok(&["wb", "add", "w", &path])?;
    }
    let job_id = cluster.submit_with("w", "change", &model.model_spec(), &["--auto-approve"])?;
    match kill {
        Kill::Nowhere => {}
        Kill::CoordinatorAfterWrite => {
            let coordinator = cluster.coordinator.as_mut().context("no coordinator")?;
            anyhow::ensure!(
                coordinator.wait_exit(JOB_TIMEOUT),
                "{}: the coordinator never died",
                case.name
            );
            cluster.start_coordinator()?;
        }
        Kill::WorkerBeforeReply => {
            let worker = cluster.workers.last_mut().context("no worker")?;
            anyhow::ensure!(
                worker.wait_exit(JOB_TIMEOUT),
                "{}: the worker never died",
                case.name
            );
            cluster.start_worker(case.pool)?;
        }
    }
    let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
    Ok(WriteRun {
        state: view.state,
        draft: cluster.draft_digests("w")?,
        shown: model.tool_results("implement", Some(1), 1),
        applied: cluster.applied_writes().into_values().collect(),
    })
}

async fn assert_exactly_once(kill: Kill) -> anyhow::Result<()> {
    for case in write_cases() {
        let reference = run_write(&case, Kill::Nowhere).await?;
        assert_eq!(reference.state, JobState::Succeeded, "{}", case.name);
        assert_eq!(reference.applied, vec![1], "{}", case.name);
        assert!(
            !reference.shown[0].contains("\"error\""),
            "{}: {:?}",
            case.name,
            reference.shown
        );
        let crashed = run_write(&case, kill).await?;
        assert_eq!(
            crashed, reference,
            "{} killed at {kill:?}: the draft, the model's view and the number of applications \
             must equal an uninterrupted run's",
            case.name
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn write_tools_apply_once_and_tell_the_truth_when_the_coordinator_dies_after_the_write()
-> anyhow::Result<()> {
    assert_exactly_once(Kill::CoordinatorAfterWrite).await
}

#[tokio::test(flavor = "multi_thread")]
async fn write_tools_apply_once_and_tell_the_truth_when_the_worker_dies_before_replying()
-> anyhow::Result<()> {
    assert_exactly_once(Kill::WorkerBeforeReply).await
}

/// The `finished` events of `job_id` in the EVENTS stream, as (state, run).
async fn finished_events(cluster: &Cluster, job_id: &str) -> anyhow::Result<Vec<(JobState, u32)>> {
    use atelier_messages::job::EventKind;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let subject = atelier_messages::subjects::event(job_id, "finished");
    let events = atelier_tests::stored_events(&client, subject).await?;
    Ok(events
        .into_iter()
        .filter_map(|event| match event.kind {
            EventKind::JobFinished { state, run, .. } => Some((state, run)),
            _ => None,
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_run_of_a_resumed_job_ends_and_announces_its_own_end() -> anyhow::Result<()> {
    let model = ScriptedModel::start(research_query_script("SELECT 1")).await?;
    model.fail_with(401);
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("again", "plan.csv")?;
    let job_id = cluster.submit("again", "count", &model.model_spec())?;
    let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
    assert_eq!((view.state, view.run), (JobState::Failed, 0));
    for run in 1..=4 {
        // Resumed the moment the previous run is recorded as ended, while its orchestrator may
        // still be stopping: the job must run again, not stay queued.
        cluster.cli_ok(&["resume", &job_id])?;
        let last = last_watched_event(&cluster, &job_id)?;
        assert_eq!(last["kind"]["type"], "job_finished", "{last}");
        assert_eq!(
            last["kind"]["run"], run,
            "watch follows the new run: {last}"
        );
        let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
        assert_eq!((view.state, view.run), (JobState::Failed, run));
    }
    let finished = finished_events(&cluster, &job_id).await?;
    let expected: Vec<(JobState, u32)> = (0..=4).map(|run| (JobState::Failed, run)).collect();
    assert_eq!(
        finished, expected,
        "one `finished` event per run, none dropped as a duplicate"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reused_job_id_is_refused_with_a_clear_answer() -> anyhow::Result<()> {
    let model = ScriptedModel::start(research_query_script("SELECT 1")).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("ids", "plan.csv")?;
    let spec = model.model_spec();
    let args = [
        "submit", "ids", "count", "--model", &spec, "--job-id", "job-7", "--wait",
    ];
    cluster.cli_ok(&args)?;
    let again = cluster.cli(&args)?;
    assert!(again.failed_with("VALIDATION_FAILED"), "{}", again.stderr);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    Ok(())
}

fn overwrite_script() -> Script {
    overwrite_script_answering("Handled.")
}

/// The overwrite job, whose model answers `after` once its call returned.
fn overwrite_script_answering(after: &str) -> Script {
    serde_json::from_value(json!({
        "research": [{"content": "plan.csv holds the milestones."}],
        "plan": [{"content": "- [ ] 1. Replace — overwrite plan.csv"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "plan.csv", "content": "gone\n"}}]},
            {"content": after}
        ]},
        "summary": [{"content": "done"}]
    }))
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn overwriting_a_file_waits_for_approval_and_a_stale_decision_is_refused()
-> anyhow::Result<()> {
    // Told of the rejection, the model states why nothing changes.
    let model = ScriptedModel::start(overwrite_script_answering(
        "NO_CHANGE_NEEDED: the user keeps plan.csv as it is",
    ))
    .await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("ask", "plan.csv")?;
    let job_id = cluster.submit("ask", "replace it", &model.model_spec())?;
    let waiting = cluster.wait_for_state(&job_id, JobState::AwaitingApproval)?;
    let pending = waiting.pending_approval.context("a pending call")?;
    assert_eq!(pending.tool, "write_text_file");
    assert_eq!(
        pending.action_class,
        atelier_messages::approval::ActionClass::Destructive
    );
    assert_eq!(pending.why.as_deref(), Some("overwrites plan.csv"));
    // A decision about another call (a stale page) is refused and changes nothing.
    let stale = cluster.cli(&["approve", &job_id, "--call", "some-older-call"])?;
    assert!(stale.failed_with("VALIDATION_FAILED"), "{}", stale.stderr);
    assert_eq!(
        cluster
            .wait_for_state(&job_id, JobState::AwaitingApproval)?
            .state,
        JobState::AwaitingApproval
    );
    cluster.cli_ok(&[
        "approve",
        &job_id,
        "--reject",
        "--call",
        &pending.call_id,
        "--reason",
        "keep the plan",
    ])?;
    let view = cluster.wait_finished(&job_id, JOB_TIMEOUT)?;
    assert_eq!(view.state, JobState::Succeeded);
    let shown = model.tool_results("implement", Some(1), 1);
    let result: serde_json::Value =
        serde_json::from_str(shown.first().context("the model saw no tool result")?)?;
    assert_eq!(result["error"]["code"], "APPROVAL_REJECTED");
    assert!(
        result["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("keep the plan")),
        "the reason is told to the model: {result}"
    );
    let diff: serde_json::Value = cluster
        .cli_ok(&["draft", "diff", "ask", "--json"])?
        .json()?;
    assert_eq!(diff["has_draft"], false, "nothing was written");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workbench_policy_lets_destructive_calls_run_and_a_job_can_ask_for_additive_ones()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(overwrite_script()).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("auto", "plan.csv")?;
    let policy: serde_json::Value = cluster
        .cli_ok(&["wb", "approvals", "auto", "destructive=auto", "--json"])?
        .json()?;
    assert_eq!(policy["approvals"]["destructive"], "auto");
    let view = cluster.run_job("auto", "replace it", &model.model_spec(), &[])?;
    assert_eq!(view.state, JobState::Succeeded, "{:?}", view.error);
    let content = cluster.cli_ok(&["wb", "cat", "auto", "plan.csv", "--draft"])?;
    assert_eq!(content.stdout, "gone\n");

    // A job that asks for additive calls too waits on a new file as well.
    let model = ScriptedModel::start(serde_json::from_value(json!({
        "research": [{"content": "ok"}],
        "plan": [{"content": "- [ ] 1. Add — a new note"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "new.md", "content": "x"}}]},
            {"content": "Added."}
        ]},
        "summary": [{"content": "done"}]
    }))?)
    .await?;
    cluster.cli_ok(&["draft", "discard", "auto"])?;
    let job_id = cluster.submit_with(
        "auto",
        "add",
        &model.model_spec(),
        &["--approve", "additive=ask"],
    )?;
    let waiting = cluster.wait_for_state(&job_id, JobState::AwaitingApproval)?;
    let pending = waiting.pending_approval.context("a pending call")?;
    assert_eq!(
        pending.action_class,
        atelier_messages::approval::ActionClass::Additive
    );
    cluster.cli_ok(&["approve", &job_id])?;
    assert_eq!(
        cluster.wait_finished(&job_id, JOB_TIMEOUT)?.state,
        JobState::Succeeded
    );
    let bad = cluster.cli(&["submit", "auto", "x", "--approve", "everything=yes"])?;
    assert!(bad.failed_with("VALIDATION_FAILED"), "{}", bad.stderr);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_coordinator_runs_at_most_its_job_limit_and_the_rest_wait_their_turn()
-> anyhow::Result<()> {
    let script: Script = serde_json::from_value(json!({
        "research": [{"content": "ok"}],
        "plan": [{"content": "NO_CHANGE_NEEDED: nothing to change", "delay_ms": 3000}],
        "summary": [{"content": "done"}]
    }))?;
    let model = ScriptedModel::start(script).await?;
    let mut cluster = Cluster::start()?;
    cluster.kill_coordinator();
    cluster.start_coordinator_with_env(&[("ATELIER_MAX_RUNNING_JOBS", "2")])?;
    // One workbench per job: a workbench answers one message at a time.
    let jobs: Vec<String> = (0..5)
        .map(|n| {
            let workbench = format!("busy{n}");
            cluster.cli_ok(&["wb", "create", &workbench])?;
            cluster.submit(&workbench, &format!("job {n}"), &model.model_spec())
        })
        .collect::<anyhow::Result<_>>()?;
    // The third waits for a slot (recorded `queued`): cancelled there, it ends at once, and its
    // end is announced like any run's (batches and watchers follow it).
    let waiting = &jobs[2];
    wait_until(JOB_TIMEOUT, || {
        cluster
            .cli(&["job", waiting, "--json"])
            .ok()
            .and_then(|out| out.json::<atelier_messages::job::JobView>().ok())
            .is_some_and(|view| view.state == JobState::Queued)
    })?;
    cluster.cli_ok(&["cancel", waiting])?;
    let last = last_watched_event(&cluster, waiting)?;
    assert_eq!(last["kind"]["type"], "job_finished", "{last}");
    assert_eq!(last["kind"]["state"], "cancelled", "{last}");
    let mut most_running = 0;
    let started = Instant::now();
    loop {
        let views: Vec<atelier_messages::job::JobView> =
            cluster.cli_ok(&["jobs", "--json"])?.json()?;
        let running = views
            .iter()
            .filter(|v| v.state == JobState::Running)
            .count();
        most_running = most_running.max(running);
        let done = views.iter().filter(|v| v.state.is_terminal()).count();
        if done == jobs.len() {
            let states: Vec<(&str, JobState)> = views
                .iter()
                .map(|view| (view.job_id.as_str(), view.state))
                .collect();
            assert!(
                states
                    .iter()
                    .all(|(job_id, state)| match job_id == waiting {
                        true => *state == JobState::Cancelled,
                        false => *state == JobState::Succeeded,
                    }),
                "{states:?}"
            );
            break;
        }
        anyhow::ensure!(started.elapsed() < JOB_TIMEOUT, "jobs did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(most_running <= 2, "{most_running} jobs ran at once");
    assert_eq!(most_running, 2, "the limit is used");
    Ok(())
}

/// The last event `atelier watch --json` prints for the job (it exits non-zero for a job that
/// did not succeed).
fn last_watched_event(cluster: &Cluster, job_id: &str) -> anyhow::Result<serde_json::Value> {
    let watched = cluster.cli(&["watch", job_id, "--json"])?;
    let last = watched
        .stdout
        .lines()
        .last()
        .context("watch printed no event")?;
    Ok(serde_json::from_str(last)?)
}

fn raw_submit(job_id: &str, workbench: &str, model: &str) -> atelier_messages::job::JobSubmit {
    atelier_messages::job::JobSubmit {
        v: atelier_messages::PROTOCOL_VERSION,
        job_id: job_id.into(),
        workbench: workbench.into(),
        message: "count".into(),
        model: Some(model.into()),
        submitted_at_ms: 0,
        auto_approve: false,
        continue_draft: true,
        approvals: None,
        workflow: None,
        batch_id: None,
        time_limit_secs: None,
        priority: None,
        budget: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_named_profile_sends_its_key_and_limits_only_to_its_server_and_unknown_names_are_refused()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(research_query_script("SELECT 1")).await?;
    let mut cluster = Cluster::start()?;
    let profile = model.profile_toml(
        "local",
        "api_key_env = \"LOCAL_MODEL_KEY\"\nmax_tokens = 777",
    );
    cluster
        .restart_coordinator_with_config(&profile, &[("LOCAL_MODEL_KEY", "sk-profile-secret")])?;
    cluster.workbench_with_launch_plan("profiles", "plan.csv")?;

    let view = cluster.run_job("profiles", "count", "local", &[])?;
    assert_eq!(view.state, JobState::Succeeded, "{:?}", view.error);
    let by_profile = model.requests();
    assert!(!by_profile.is_empty());
    for request in &by_profile {
        assert_eq!(
            request.authorization.as_deref(),
            Some("Bearer sk-profile-secret")
        );
        assert_eq!(request.body["max_tokens"], 777);
    }
    // The same server named ad hoc is the submitter's choice: no key, no profile limits.
    let spec = model.model_spec();
    let view = cluster.run_job("profiles", "count again", &spec, &["--continue-draft"])?;
    assert_eq!(view.state, JobState::Succeeded, "{:?}", view.error);
    let ad_hoc = &model.requests()[by_profile.len()..];
    assert!(!ad_hoc.is_empty());
    assert!(ad_hoc.iter().all(|r| r.authorization.is_none()));
    assert!(ad_hoc.iter().all(|r| r.body.get("max_tokens").is_none()));

    // An unknown profile is refused at once, naming those configured; so is a foreign URL as
    // the workbench's model.
    let started = Instant::now();
    let unknown = cluster.cli(&["submit", "profiles", "x", "--model", "nope", "--wait"])?;
    assert!(
        unknown.failed_with("MODEL_NOT_ALLOWED"),
        "{}",
        unknown.stderr
    );
    assert!(
        unknown.stderr.contains("configured: local"),
        "{}",
        unknown.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let foreign = cluster.cli(&[
        "wb",
        "set-model",
        "profiles",
        "openai-compat:https://attacker.example/v1#m",
    ])?;
    assert!(
        foreign.failed_with("MODEL_NOT_ALLOWED"),
        "{}",
        foreign.stderr
    );
    cluster.cli_ok(&["wb", "set-model", "profiles", "local"])?;
    assert!(
        !cluster.logs().contains("sk-profile-secret"),
        "the key is in a log"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operators_key_never_goes_to_a_submitters_url_and_foreign_urls_are_refused()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(research_query_script("SELECT 1")).await?;
    let mut cluster = Cluster::start()?;
    cluster.kill_coordinator();
    cluster.start_coordinator_with_env(&[("ATELIER_OPENAI_API_KEY", "sk-operator-secret")])?;
    cluster.workbench_with_launch_plan("keys", "plan.csv")?;
    // A loopback openai-compat server may serve a job, but never sees the operator's key.
    let view = cluster.run_job("keys", "count", &model.model_spec(), &[])?;
    assert_eq!(view.state, JobState::Succeeded, "{:?}", view.error);
    let requests = model.requests();
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|request| request.authorization.is_none()),
        "a key was sent: {:?}",
        requests
            .iter()
            .map(|r| r.authorization.clone())
            .collect::<Vec<_>>()
    );
    // A URL beyond this machine, or a replay script outside the replay directory: refused
    // with a code at once by `submit`, nothing fetched or read.
    // The replay directory is one of its own: the data directory's stores are outside it.
    assert!(cluster.data_dir().join("db/conf").exists());
    for spec in [
        "openai-compat:https://attacker.example/v1#m",
        "replay:/etc/passwd",
        "replay:../db/conf",
    ] {
        let started = Instant::now();
        let refused = cluster.cli(&["submit", "keys", "count", "--model", spec, "--wait"])?;
        assert!(
            refused.failed_with("MODEL_NOT_ALLOWED"),
            "{spec}: {}",
            refused.stderr
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{spec}: answered at once"
        );
    }
    // A client that skips the CLI's check gets a failed job with the code, at once.
    cluster
        .publish_raw(&raw_submit(
            "raw-foreign",
            "keys",
            "openai-compat:https://attacker.example/v1#m",
        ))
        .await?;
    let raw = cluster.wait_finished("raw-foreign", Duration::from_secs(10))?;
    assert_eq!(raw.state, JobState::Failed);
    assert_eq!(
        raw.error.map(|e| e.code),
        Some(atelier_messages::ErrorCode::ModelNotAllowed)
    );
    assert!(
        !cluster.logs().contains("sk-operator-secret"),
        "the key is in a log"
    );
    Ok(())
}

#[test]
fn a_malformed_submission_is_refused_at_once_instead_of_hanging() -> anyhow::Result<()> {
    let cluster = Cluster::start_with(&[])?;
    cluster.cli_ok(&["wb", "create", "w"])?;
    for args in [
        vec!["submit", "w", "   ", "--wait"],
        vec!["submit", "w", "go", "--job-id", "../x", "--wait"],
    ] {
        let started = Instant::now();
        let out = cluster.cli(&args)?;
        assert!(
            out.failed_with("VALIDATION_FAILED"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?} hung");
    }
    Ok(())
}
