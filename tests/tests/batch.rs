//! Workflows and batches end to end: `atelier run` without a model, workflow files with
//! variables and CSV rows, batches over workbenches and files with partial failure, a
//! coordinator SIGKILL in the middle, retry, publish, cancel and the failure threshold.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use atelier_messages::batch::{BatchEvent, BatchState, BatchView};
use atelier_messages::job::{JobOutcome, JobState, JobView};
use atelier_messages::{Format, decode, subjects};
use atelier_tests::scripted::{ScriptedModel, launch_plan_export_script};
use atelier_tests::{Cluster, docx_paragraph_text, export_draft, simple_docx, wait_until};
use futures::StreamExt;

fn batch_status(cluster: &Cluster, id: &str) -> anyhow::Result<BatchView> {
    cluster.cli_ok(&["batch", "status", id, "--json"])?.json()
}

fn wait_batch_end(cluster: &Cluster, id: &str, timeout: Duration) -> anyhow::Result<BatchView> {
    wait_until(timeout, || {
        batch_status(cluster, id).is_ok_and(|view| view.state.is_terminal())
    })
    .map_err(|error| {
        anyhow::anyhow!(
            "{error}: {:?}\n{}",
            batch_status(cluster, id),
            cluster.logs()
        )
    })?;
    batch_status(cluster, id)
}

#[test]
fn run_exports_a_table_into_the_draft_without_a_model_and_prints_read_results() -> anyhow::Result<()>
{
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "plan.csv")?;
    let export = r#"{"path": "plan.csv", "query": "SELECT Milestone, Owner FROM data ORDER BY Milestone", "target_path": "out/plan.csv", "format": "csv"}"#;
    let out = cluster.cli_ok(&[
        "run",
        "q3",
        "table_export",
        "--args",
        export,
        "--wait",
        "--json",
    ])?;
    let job: JobView = out.json()?;
    assert_eq!(job.state, JobState::Succeeded, "{job:?}");
    assert_eq!(job.model, "none");
    assert_eq!((job.model_turns, job.tool_calls), (0, 1));
    assert_eq!(job.items.len(), 1);
    // A workflow's outcome is the store's too: the one file it wrote.
    let exported = JobOutcome::Changed {
        files: vec!["out/plan.csv".into()],
    };
    assert_eq!(job.outcome, Some(exported));
    let csv = cluster
        .cli_ok(&["wb", "cat", "q3", "out/plan.csv", "--draft"])?
        .stdout;
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 6, "{csv}");
    assert_eq!(lines[0], "Milestone,Owner");
    assert_eq!(lines[1], "Context UX polish,Ethan Park");
    // The published state is untouched.
    let published = cluster.cli_ok(&["wb", "ls", "q3", "--json"])?.stdout;
    assert!(!published.contains("out/plan.csv"), "{published}");

    // A read tool prints its result.
    let count =
        r#"{"path": "plan.csv", "query": "SELECT count(*) AS n, 4242 AS marker FROM data"}"#;
    let out = cluster.cli_ok(&["run", "q3", "table_query", "--args", count, "--wait"])?;
    assert!(out.stdout.contains("4242"), "{}", out.stdout);
    assert!(
        out.stdout
            .lines()
            .any(|line| line == "outcome    answered without changes"),
        "{}",
        out.stdout
    );
    // A run that writes meets the draft rule of any message.
    let refused = cluster.cli(&["run", "q3", "table_export", "--args", export])?;
    assert!(refused.failed_with("DRAFT_EXISTS"), "{refused:?}");
    assert!(
        out.stdout.contains("table_query plan.csv: done"),
        "{}",
        out.stdout
    );

    // The approval rules of agent jobs hold: a delete waits for a person, then runs.
    let delete = r#"{"path": "plan.csv"}"#;
    let job_id = cluster
        .cli_ok(&[
            "run",
            "q3",
            "delete_file",
            "--args",
            delete,
            "--continue-draft",
        ])?
        .stdout
        .trim()
        .to_string();
    let waiting = cluster.wait_for_state(&job_id, JobState::AwaitingApproval)?;
    let pending = waiting.pending_approval.map(|pending| pending.tool);
    assert_eq!(pending.as_deref(), Some("delete_file"));
    assert!(cluster.draft_digests("q3")?.contains_key("plan.csv"));
    cluster.cli_ok(&["approve", &job_id])?;
    let done = cluster.wait_finished(&job_id, Duration::from_secs(30))?;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    assert!(!cluster.draft_digests("q3")?.contains_key("plan.csv"));
    // It continued a draft that already held out/plan.csv: only its own change is its outcome.
    let deleted = JobOutcome::Changed {
        files: vec!["plan.csv".into()],
    };
    assert_eq!(done.outcome, Some(deleted));

    // The conversation records both runs as user messages.
    let history = cluster.cli_ok(&["history", "q3"])?.stdout;
    assert!(history.contains("[run] table_export"), "{history}");

    // Bad input: an unknown tool, arguments that are not JSON, a failing call.
    let unknown = cluster.cli(&["run", "q3", "rm_rf", "--continue-draft"])?;
    assert!(unknown.failed_with("VALIDATION_FAILED"), "{unknown:?}");
    let not_json = cluster.cli(&[
        "run",
        "q3",
        "table_query",
        "--args",
        "{",
        "--continue-draft",
    ])?;
    assert!(not_json.failed_with("VALIDATION_FAILED"), "{not_json:?}");
    let local = cluster.cli(&["run", "q3", "recall_tool_result", "--continue-draft"])?;
    assert!(local.failed_with("VALIDATION_FAILED"), "{local:?}");
    let missing = r#"{"path": "nope.csv", "query": "SELECT 1"}"#;
    let failed = cluster.cli(&[
        "run",
        "q3",
        "table_query",
        "--args",
        missing,
        "--continue-draft",
        "--wait",
        "--json",
    ])?;
    assert!(!failed.success);
    let job: JobView = failed.json()?;
    assert_eq!(job.state, JobState::Failed);
    let code = job.error.map(|error| error.code.as_str().to_string());
    assert_eq!(
        code.as_deref(),
        Some("FILE_READ_FAILED"),
        "{}",
        failed.stdout
    );
    Ok(())
}

#[test]
fn a_workflow_file_fills_its_variables_from_set_and_from_csv_rows() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    cluster.cli_ok(&["wb", "create", "invoices"])?;
    // The template itself, made without a model and published.
    let template = r#"{"path": "invoice_template.docx", "create_new": true, "operations": [
        {"op": "append_paragraph", "text": "Invoice for [CUSTOMER]"},
        {"op": "append_paragraph", "text": "Period [PERIOD], total [TOTAL] EUR"}]}"#;
    let made = cluster.cli_ok(&[
        "run",
        "invoices",
        "docx_operations",
        "--args",
        template,
        "--wait",
    ])?;
    assert!(made.stdout.contains("succeeded"), "{}", made.stdout);
    cluster.cli_ok(&["draft", "publish", "invoices"])?;

    let workflow = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/workflows/invoice.toml");
    let workflow = workflow.to_string_lossy().to_string();
    let rows = cluster.dir.path().join("customers.csv");
    std::fs::write(&rows, "customer,total\nACME,120\n\"Globex, Inc\",75\n")?;
    let rows = rows.to_string_lossy().to_string();

    // A variable without a value is refused before anything runs, by name.
    let missing = cluster.cli(&["run", "invoices", "--workflow", &workflow])?;
    assert!(missing.failed_with("VALIDATION_FAILED"), "{missing:?}");
    assert!(
        missing.stderr.contains("{{customer}}"),
        "{}",
        missing.stderr
    );
    let bad_rows = cluster.dir.path().join("bad.csv");
    std::fs::write(&bad_rows, "customer,total\nACME\n")?;
    let bad_rows = bad_rows.to_string_lossy().to_string();
    let ragged = cluster.cli(&[
        "run",
        "invoices",
        "--workflow",
        &workflow,
        "--rows",
        &bad_rows,
    ])?;
    assert!(ragged.failed_with("VALIDATION_FAILED"), "{ragged:?}");

    let out = cluster.cli_ok(&[
        "run",
        "invoices",
        "--workflow",
        &workflow,
        "--rows",
        &rows,
        "--set",
        "period=Q4",
        "--wait",
        "--json",
    ])?;
    let job: JobView = out.json()?;
    assert_eq!(job.state, JobState::Succeeded, "{job:?}");
    assert_eq!(job.items.len(), 2);
    assert_eq!(job.items[1].label, "invoice for Globex, Inc");
    let dir = export_draft(&cluster, "invoices")?;
    let acme = docx_paragraph_text(&dir.join("invoices/ACME.docx"))?;
    assert!(acme.contains("Invoice for ACME<"), "{acme}");
    assert!(acme.contains("Period Q4, total 120 EUR<"), "{acme}");
    let globex = docx_paragraph_text(&dir.join("invoices/Globex, Inc.docx"))?;
    assert!(globex.contains("Invoice for Globex, Inc<"), "{globex}");
    assert!(globex.contains("Period Q4, total 75 EUR<"), "{globex}");
    assert!(!globex.contains("[CUSTOMER]"), "{globex}");
    // The template is untouched.
    let template = docx_paragraph_text(&dir.join("invoice_template.docx"))?;
    assert!(template.contains("Invoice for [CUSTOMER]<"), "{template}");
    Ok(())
}

/// 40 workbenches, one with a broken docx; every edit is an `append_paragraph` (not
/// idempotent), so an edit applied twice would show twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_forty_workbench_batch_survives_a_coordinator_sigkill_with_every_edit_applied_once()
-> anyhow::Result<()> {
    const TARGETS: usize = 40;
    const BROKEN: &str = "client-17";
    let mut cluster = Cluster::start_with(&["tabular", "office", "office"])?;
    let docx = simple_docx().to_string_lossy().to_string();
    let names: Vec<String> = (0..TARGETS).map(|n| format!("client-{n:02}")).collect();
    cluster.docx_workbenches(&names, "report.docx", |name| name == BROKEN)?;
    cluster.cli_ok(&["wb", "create", "unrelated"])?;
    let out = cluster.append_batch(
        "client-*",
        "report.docx",
        "Reviewed for {{workbench}}",
        &["--concurrency", "3", "--batch-id", "review-40", "--json"],
    )?;
    assert!(out.success, "{out:?}");
    let submitted: serde_json::Value = out.json()?;
    assert_eq!(submitted["batch_id"], "review-40");

    // Kill the coordinator with the batch part-way, twice.
    for threshold in [6, 20] {
        wait_until(Duration::from_secs(60), || {
            batch_status(&cluster, "review-40").is_ok_and(|view| view.counts.done() >= threshold)
        })?;
        cluster.kill_coordinator();
        cluster.start_coordinator()?;
    }
    let view = wait_batch_end(&cluster, "review-40", Duration::from_secs(120))?;
    assert_eq!(view.state, BatchState::CompletedWithFailures, "{view:?}");
    let counts = view.counts;
    assert_eq!(
        (
            counts.total,
            counts.succeeded,
            counts.failed,
            counts.cancelled
        ),
        (40, 39, 1, 0)
    );
    assert_eq!((counts.queued, counts.running), (0, 0));
    assert_eq!(view.failures.len(), 1);
    let failure = &view.failures[0];
    assert_eq!(failure.workbench, BROKEN);
    let code = failure.error.as_ref().map(|error| error.code.as_str());
    assert_eq!(code, Some("FILE_READ_FAILED"), "{failure:?}");
    assert_eq!(failure.job_id.as_deref(), Some("review-40-t17-a0"));

    // Every other workbench got the paragraph exactly once, each from one child job.
    for name in names.iter().filter(|name| *name != BROKEN) {
        let text = docx_paragraph_text(&export_draft(&cluster, name)?.join("report.docx"))?;
        let marker = format!("Reviewed for {name}<");
        assert_eq!(text.matches(&marker).count(), 1, "{name}: {text}");
    }
    // The coordinator's log names each write it applied: never one twice. A write committed
    // just before a kill may miss its line (it is logged after the commit), so the lines may
    // fall short of the 39 the documents show by at most the writes in flight at the two
    // kills (three each, the batch's concurrency).
    let applied = cluster.applied_writes();
    for (call_id, times) in &applied {
        assert_eq!(*times, 1, "call {call_id} applied {times} times");
    }
    let logged = (applied.keys())
        .filter(|id| id.starts_with("review-40-"))
        .count();
    assert!(
        (39 - 2 * 3..=39).contains(&logged),
        "{logged} writes logged"
    );
    let jobs: Vec<JobView> = cluster.cli_ok(&["jobs", "--json"])?.json()?;
    assert_eq!(
        jobs.iter()
            .filter(|job| job.job_id.starts_with("review-40-"))
            .count(),
        40
    );
    let human = cluster.cli_ok(&["batch", "status", "review-40"])?.stdout;
    assert!(
        human.contains(BROKEN) && human.contains("FILE_READ_FAILED"),
        "{human}"
    );

    // Publishing before the retry would settle the 39; instead fix the file and retry.
    cluster.cli_ok(&["wb", "add", BROKEN, &docx, "--as", "report.docx"])?;
    let retried = cluster.cli(&["batch", "retry", "review-40", "--wait", "--json"])?;
    assert!(retried.success, "{retried:?}");
    let view: BatchView = retried.json()?;
    assert_eq!(view.state, BatchState::Succeeded);
    assert_eq!((view.counts.succeeded, view.counts.failed), (40, 0));
    let nothing = cluster.cli(&["batch", "retry", "review-40"])?;
    assert!(nothing.failed_with("VALIDATION_FAILED"), "{nothing:?}");

    let settled: serde_json::Value = cluster
        .cli_ok(&["batch", "publish", "review-40", "--json"])?
        .json()?;
    assert_eq!(settled["settled"].as_array().map(Vec::len), Some(40));
    let listing = cluster.cli_ok(&["wb", "ls", BROKEN, "--json"])?.stdout;
    assert!(listing.contains("report.docx"), "{listing}");
    let draft = cluster.cli(&["draft", "diff", "client-03", "--json"])?;
    assert!(!draft.stdout.contains("report.docx"), "{draft:?}");

    // The batch's events are in their stream.
    let client = async_nats::connect(&cluster.nats.url).await?;
    let kinds = batch_event_kinds(&client, "review-40").await?;
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("batch_started"),
        "{kinds:?}"
    );
    assert!(
        kinds.iter().any(|kind| kind == "batch_progress"),
        "{kinds:?}"
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|kind| *kind == "batch_finished")
            .count(),
        2,
        "{kinds:?}"
    );
    let list = cluster.cli_ok(&["batch", "list"])?.stdout;
    assert!(
        list.contains("review-40") && list.contains("succeeded"),
        "{list}"
    );
    Ok(())
}

/// Other clients submit batches as JSON (the `nats req` of docs/protocol.md) or MessagePack.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_submitted_as_json_over_nats_runs_like_one_from_the_cli() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("n-1", "plan.csv")?;
    cluster.workbench_with_launch_plan("n-2", "plan.csv")?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let submit = serde_json::json!({
        "v": 1, "batch_id": "over-nats",
        "targets": {"kind": "workbenches", "glob": "n-*"},
        "action": {"kind": "tool", "tool": "table_export", "args": {
            "path": "plan.csv", "target_path": "{{workbench}}.csv", "format": "csv"}},
        "concurrency": 2
    });
    let reply = atelier_tests::nats_request(
        &client,
        subjects::batch::SUBMIT,
        serde_json::to_vec(&submit)?,
        true,
    )
    .await?;
    let reply: serde_json::Value = serde_json::from_slice(&reply)?;
    assert_eq!(reply["ok"]["batch_id"], "over-nats", "{reply}");
    assert_eq!(reply["ok"]["total"], 2, "{reply}");
    let view = wait_batch_end(&cluster, "over-nats", Duration::from_secs(60))?;
    assert_eq!(view.state, BatchState::Succeeded);
    for name in ["n-1", "n-2"] {
        let csv = cluster
            .cli_ok(&["wb", "cat", name, &format!("{name}.csv"), "--draft"])?
            .stdout;
        assert_eq!(csv.lines().count(), 6, "{csv}");
    }
    // The typed verb (MessagePack) answers the same batch; a malformed one gets its code.
    let status = atelier_messages::batch::GetBatch {
        v: 1,
        batch_id: "over-nats".into(),
    };
    let view = atelier_transport::request(
        &client,
        &status,
        atelier_transport::Policy::once(Duration::from_secs(5)),
    )
    .await
    .map_err(|error| anyhow::anyhow!("{error}"))?;
    assert_eq!(view.counts.succeeded, 2);
    let bad = serde_json::json!({"v": 1, "batch_id": "x", "targets": {"kind": "nope"}});
    let reply = atelier_tests::nats_request(
        &client,
        subjects::batch::SUBMIT,
        serde_json::to_vec(&bad)?,
        true,
    )
    .await?;
    let reply: serde_json::Value = serde_json::from_slice(&reply)?;
    assert_eq!(reply["error"]["code"], "VALIDATION_FAILED", "{reply}");
    Ok(())
}

/// An agent job per target: the message names its workbench, each job writes its draft.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_batch_runs_an_agent_job_per_workbench() -> anyhow::Result<()> {
    let model = ScriptedModel::start(launch_plan_export_script(0)).await?;
    let cluster = Cluster::start()?;
    for name in ["m-a", "m-b", "m-c"] {
        cluster.workbench_with_launch_plan(name, "launch_plan.csv")?;
    }
    let spec = model.model_spec();
    let out = cluster.cli(&[
        "batch",
        "submit",
        "--workbenches",
        "m-a,m-b",
        "--workbenches",
        "m-?",
        "--message",
        "Count milestones of {{workbench}} into summary.xlsx",
        "--model",
        &spec,
        "--wait",
        "--json",
    ])?;
    assert!(out.success, "{out:?}\n{}", cluster.logs());
    let view: BatchView = out.json()?;
    assert_eq!((view.counts.total, view.counts.succeeded), (3, 3));
    assert_eq!((view.counts.changed, view.counts.answered), (3, 0));
    for name in ["m-a", "m-b", "m-c"] {
        assert!(
            cluster.draft_digests(name)?.contains_key("summary.xlsx"),
            "{name}"
        );
        let history = cluster.cli_ok(&["history", name])?.stdout;
        assert!(
            history.contains(&format!("Count milestones of {name} into summary.xlsx")),
            "{history}"
        );
    }
    let research_prompts = model
        .requests()
        .iter()
        .filter(|request| request.phase == "research" && request.turn == 0)
        .count();
    assert_eq!(research_prompts, 3);
    Ok(())
}

/// A target whose workbench is answering another job waits for it instead of failing, and
/// waiting writes nothing: after the one refusal its workbench is only looked at.
#[tokio::test(flavor = "multi_thread")]
async fn a_target_waits_while_its_workbench_answers_another_job() -> anyhow::Result<()> {
    let model = ScriptedModel::start(launch_plan_export_script(6_000)).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("shared", "launch_plan.csv")?;
    let job_id = cluster.submit("shared", "Count milestones", &model.model_spec())?;
    cluster.wait_for_state(&job_id, JobState::Running)?;
    let export = r#"{"path": "launch_plan.csv", "target_path": "copy.csv", "format": "csv"}"#;
    cluster.cli_ok(&[
        "batch",
        "submit",
        "--workbenches",
        "shared",
        "--tool",
        "table_export",
        "--args",
        export,
        "--continue-draft",
        "--batch-id",
        "waits",
    ])?;
    let status = || -> anyhow::Result<BatchView> {
        cluster
            .cli_ok(&["batch", "status", "waits", "--json"])?
            .json()
    };
    // The target was refused once (its child not recorded: back in the queue), then the
    // workbench is looked at every second, which leaves the batch's record as it was.
    std::thread::sleep(Duration::from_millis(1_500));
    let refused = status()?;
    std::thread::sleep(Duration::from_millis(2_500));
    let waiting = status()?;
    let agent: atelier_messages::job::JobView =
        cluster.cli_ok(&["job", &job_id, "--json"])?.json()?;
    assert_eq!(agent.state, JobState::Running, "the window was not a wait");
    assert_eq!((refused.counts.queued, waiting.counts.queued), (1, 1));
    assert_eq!(
        refused.updated_at_ms, waiting.updated_at_ms,
        "waiting for the workbench wrote to the batch"
    );

    let agent = cluster.wait_finished(&job_id, Duration::from_secs(30))?;
    assert_eq!(agent.state, JobState::Succeeded);
    let child = atelier_messages::batch::child_job_id("waits", 0, 0);
    let target = cluster.wait_succeeded(&child, Duration::from_secs(30))?;
    assert!(
        target.created_at_ms > agent.updated_at_ms,
        "the target ran after the job"
    );
    atelier_tests::wait_until(Duration::from_secs(30), || {
        status().is_ok_and(|view| view.state.is_terminal())
    })?;
    let view = status()?;
    assert_eq!(view.counts.succeeded, 1, "{view:?}");
    let draft = cluster.draft_digests("shared")?;
    assert!(draft.contains_key("copy.csv") && draft.contains_key("summary.xlsx"));
    Ok(())
}

async fn batch_event_kinds(
    client: &async_nats::Client,
    batch_id: &str,
) -> anyhow::Result<Vec<String>> {
    let consumer = async_nats::jetstream::new(client.clone())
        .get_stream(subjects::batch::EVENTS_STREAM)
        .await?
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: subjects::batch::batch_events(batch_id),
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    let mut kinds = Vec::new();
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(500), messages.next()).await
    {
        let event: BatchEvent =
            decode(&message?.payload, Format::MessagePack).map_err(|e| anyhow::anyhow!("{e}"))?;
        kinds.push(event.kind.as_str().to_string());
    }
    Ok(kinds)
}

#[test]
fn each_file_targets_run_one_after_another_on_one_draft() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    cluster.cli_ok(&["wb", "create", "reports"])?;
    let docx = simple_docx().to_string_lossy().to_string();
    for name in ["a.docx", "b.docx", "in/c.docx", "in/deep/d.docx"] {
        cluster.cli_ok(&["wb", "add", "reports", &docx, "--as", name])?;
    }
    let args = r#"{"path": "{{file}}", "operations": [{"op": "append_paragraph", "text": "Seen {{file_stem}} #{{index}}"}]}"#;
    let out = cluster.cli(&[
        "batch",
        "submit",
        "--workbench",
        "reports",
        "--each-file",
        "**/*.docx",
        "--tool",
        "docx_operations",
        "--args",
        args,
        "--concurrency",
        "8",
        "--batch-id",
        "each-file-w",
        "--wait",
        "--json",
    ])?;
    assert!(out.success, "{out:?}\n{}", cluster.logs());
    let view: BatchView = out.json()?;
    assert_eq!(view.state, BatchState::Succeeded);
    assert_eq!((view.counts.total, view.counts.succeeded), (4, 4));
    assert_eq!((view.counts.changed, view.counts.answered), (4, 0));
    // Each target's child changed its own file, though all four share one draft.
    let child: JobView = cluster
        .cli_ok(&["job", "each-file-w-t2-a0", "--json"])?
        .json()?;
    let own = JobOutcome::Changed {
        files: vec!["in/c.docx".into()],
    };
    assert_eq!(child.outcome, Some(own));
    let dir = export_draft(&cluster, "reports")?;
    let expected: BTreeMap<&str, &str> = [
        ("a.docx", "Seen a #0<"),
        ("b.docx", "Seen b #1<"),
        ("in/c.docx", "Seen c #2<"),
        ("in/deep/d.docx", "Seen d #3<"),
    ]
    .into();
    for (path, marker) in expected {
        let text = docx_paragraph_text(&dir.join(path))?;
        assert_eq!(text.matches(marker).count(), 1, "{path}: {text}");
    }
    // A batch that only reads meets no draft rule (the coordinator's, not the CLI's).
    let read = r#"{"path": "{{file}}"}"#;
    let out = cluster.cli(&[
        "batch",
        "submit",
        "--workbench",
        "reports",
        "--each-file",
        "**/*.docx",
        "--tool",
        "read_file",
        "--args",
        read,
        "--batch-id",
        "each-file-r",
        "--wait",
        "--json",
    ])?;
    assert!(out.success, "{out:?}");
    let view: BatchView = out.json()?;
    assert_eq!(view.counts.succeeded, 4);
    assert_eq!((view.counts.changed, view.counts.answered), (0, 4));
    let status = cluster.cli_ok(&["batch", "status", "each-file-r"])?.stdout;
    assert!(
        status.contains(
            "targets      4 total: 4 succeeded (0 with changes, 4 answered without changes), \
             0 failed, 0 cancelled, 0 running, 0 queued"
        ),
        "{status}"
    );
    let status = cluster.cli_ok(&["batch", "status", "each-file-w"])?.stdout;
    assert!(
        status.contains("4 succeeded (4 with changes, 0 answered without changes)"),
        "{status}"
    );
    let none = cluster.cli(&[
        "batch",
        "submit",
        "--workbench",
        "reports",
        "--each-file",
        "*.xlsx",
        "--tool",
        "docx_operations",
    ])?;
    assert!(none.failed_with("VALIDATION_FAILED"), "{none:?}");
    Ok(())
}

#[test]
fn beyond_its_failure_tolerance_a_batch_stops_dispatching_and_fails() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let names: Vec<String> = (0..10).map(|n| format!("t-{n}")).collect();
    cluster.docx_workbenches(&names, "r.docx", |name| {
        ["t-0", "t-1", "t-2"].contains(&name)
    })?;
    let out = cluster.append_batch(
        "t-*",
        "r.docx",
        "x",
        &[
            "--concurrency",
            "1",
            "--tolerate-failures",
            "1",
            "--wait",
            "--json",
        ],
    )?;
    assert!(!out.success);
    let view: BatchView = out.json()?;
    assert_eq!(view.state, BatchState::Failed, "{view:?}");
    let code = view.error.as_ref().map(|error| error.code.as_str());
    assert_eq!(code, Some("FAILURE_THRESHOLD_EXCEEDED"));
    assert_eq!(
        (
            view.counts.failed,
            view.counts.succeeded,
            view.counts.cancelled
        ),
        (2, 0, 8)
    );

    // A percentage tolerance lets the same failures through.
    let out = cluster.append_batch(
        "t-*",
        "r.docx",
        "x",
        &[
            "--concurrency",
            "4",
            "--tolerate-failures",
            "30%",
            "--wait",
            "--json",
            "--continue-draft",
        ],
    )?;
    let view: BatchView = out.json()?;
    assert_eq!(view.state, BatchState::CompletedWithFailures, "{view:?}");
    assert_eq!((view.counts.failed, view.counts.succeeded), (3, 7));

    // Bad input at the CLI and the verbs.
    for (args, code) in [
        (vec!["batch", "status", "nope"], "NOT_FOUND"),
        (
            vec![
                "batch",
                "submit",
                "--workbenches",
                "zzz-*",
                "--tool",
                "docx_operations",
            ],
            "VALIDATION_FAILED",
        ),
        (
            vec![
                "batch",
                "submit",
                "--workbenches",
                "t-*",
                "--tool",
                "docx_operations",
                "--tolerate-failures",
                "150%",
            ],
            "VALIDATION_FAILED",
        ),
        (
            vec![
                "batch",
                "submit",
                "--workbenches",
                "t-*",
                "--tool",
                "docx_operations",
                "--concurrency",
                "0",
            ],
            "VALIDATION_FAILED",
        ),
        (
            vec![
                "batch",
                "submit",
                "--workbenches",
                "t-*",
                "--message",
                "hi",
                "--model",
                "openai-compat:http://203.0.113.9/v1#m",
            ],
            "MODEL_NOT_ALLOWED",
        ),
        (
            vec![
                "batch",
                "submit",
                "--workbenches",
                "t-*",
                "--tool",
                "table_query",
                "--args",
                r#"{"path": "{{nope}}"}"#,
            ],
            "VALIDATION_FAILED",
        ),
        (
            vec![
                "batch",
                "submit",
                "--batch-id",
                "../x",
                "--workbenches",
                "t-*",
                "--tool",
                "list_files",
            ],
            "VALIDATION_FAILED",
        ),
    ] {
        let out = cluster.cli(&args)?;
        assert!(out.failed_with(code), "{args:?}: {out:?}");
    }
    Ok(())
}

#[test]
fn a_cancelled_batch_ends_cancelled_and_concurrency_changes_while_it_runs() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let names: Vec<String> = (0..30).map(|n| format!("c-{n:02}")).collect();
    cluster.docx_workbenches(&names, "r.docx", |_| false)?;
    let submitted = cluster.append_batch(
        "c-*",
        "r.docx",
        "x",
        &["--concurrency", "1", "--batch-id", "to-cancel"],
    )?;
    assert!(submitted.success, "{submitted:?}");
    let updated: BatchView = cluster
        .cli_ok(&[
            "batch",
            "update",
            "to-cancel",
            "--concurrency",
            "2",
            "--json",
        ])?
        .json()?;
    assert_eq!(updated.concurrency, 2);
    let bad = cluster.cli(&["batch", "update", "to-cancel", "--concurrency", "0"])?;
    assert!(bad.failed_with("VALIDATION_FAILED"), "{bad:?}");
    cluster.cli_ok(&["batch", "cancel", "to-cancel"])?;
    let view = wait_batch_end(&cluster, "to-cancel", Duration::from_secs(60))?;
    assert_eq!(view.state, BatchState::Cancelled, "{view:?}");
    let counts = view.counts;
    assert!(counts.cancelled > 0, "{counts:?}");
    assert_eq!(counts.succeeded + counts.failed + counts.cancelled, 30);
    assert_eq!((counts.queued, counts.running), (0, 0));
    let again = cluster.cli(&["batch", "cancel", "to-cancel"])?;
    assert!(again.failed_with("VALIDATION_FAILED"), "{again:?}");
    // Only the targets that ran changed their workbench.
    let drafts = (0..30)
        .filter(|n| {
            cluster
                .cli(&["draft", "diff", &format!("c-{n:02}"), "--json"])
                .is_ok_and(|out| out.stdout.contains("r.docx"))
        })
        .count() as u64;
    assert_eq!(drafts, counts.succeeded);
    Ok(())
}
