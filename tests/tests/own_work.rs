//! Amendments and retries never ask a person about the job's own work: an item that appends
//! the items writing some of its targets hands them on (it is not tried again), and a retry
//! that writes over a file the same job created is additive, so an unattended job never waits
//! on `awaiting_approval` for a file nobody but the job ever had. A write over a file that was
//! there before the job still asks. Real nats-server, coordinator and workers; the model is a
//! scripted OpenAI-protocol server.

use std::time::Duration;

use atelier_messages::job::{ItemStatus, JobState, JobView};
use atelier_tests::Cluster;
use atelier_tests::scripted::{Script, ScriptedModel};
use serde_json::{Value, json};

fn script(value: Value) -> anyhow::Result<Script> {
    Ok(serde_json::from_value(value)?)
}

fn write(path: &str, content: &str) -> Value {
    json!({"tool_calls": [{"name": "write_text_file", "arguments": {"path": path, "content": content}}]})
}

/// Submits `message` to workbench `w` (launch plan as plan.csv) and waits up to a minute for
/// the job to end; a job that waits for approval instead fails the test.
async fn run(script: Script, message: &str) -> anyhow::Result<(Cluster, JobView)> {
    let model = ScriptedModel::start(script).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("w", "plan.csv")?;
    let job_id = cluster.submit("w", message, &model.model_spec())?;
    let view = cluster.wait_finished(&job_id, Duration::from_secs(60));
    let view = match view {
        Ok(view) => view,
        Err(error) => {
            let now: JobView = cluster.cli_ok(&["job", &job_id, "--json"])?.json()?;
            anyhow::bail!("the job did not end ({error}); it is {:?}", now.state);
        }
    };
    Ok((cluster, view))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_item_that_hands_a_target_to_its_amendment_is_done_not_retried() -> anyhow::Result<()> {
    // The request names two files; the one-item plan takes both as targets, and the item
    // writes islands.csv and appends the item that writes notes.txt.
    let (cluster, view) = run(
        script(json!({
            "research": [{"content": "plan.csv has five milestones."}],
            // Told once that the plan leaves notes.txt out, the model keeps its plan.
            "plan": [
                {"content": "- [ ] 1. Export — the milestones → islands.csv"},
                {"content": "- [ ] 1. Export — the milestones → islands.csv"}
            ],
            "implement": {
                "1": [
                    write("islands.csv", "milestone\nA\n"),
                    {"content": "Wrote islands.csv.\n- [ ] 2. Notes — say how it was made → notes.txt"}
                ],
                "2": [write("notes.txt", "exported\n"), {"content": "Wrote notes.txt."}]
            },
            "summary": [{"content": "Both written."}]
        }))?,
        "Export the milestones of plan.csv to islands.csv and note how in notes.txt.",
    )
    .await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(view.items[0].targets, ["islands.csv", "notes.txt"]);
    let attempts: Vec<u32> = view.items.iter().map(|item| item.attempts).collect();
    assert_eq!(attempts, [1, 1], "{:?}", view.items);
    assert!(view.items[1].amended);
    assert!(
        view.items
            .iter()
            .all(|item| item.status == ItemStatus::Done)
    );
    let notes = cluster.cli_ok(&["wb", "cat", "w", "notes.txt", "--draft"])?;
    assert_eq!(notes.stdout, "exported\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_over_the_jobs_own_file_runs_without_asking() -> anyhow::Result<()> {
    // The first attempt writes a table without the promised header; the retry writes the same
    // file again, which only this job ever had.
    let (cluster, view) = run(
        script(json!({
            "research": [{"content": "plan.csv has five milestones."}],
            "plan": [{"content": "- [ ] 1. Export — the first owner → owners.csv\n  - owners.csv: table (owner) from plan.csv = SELECT Owner FROM data LIMIT 1"}],
            "implement": {
                "1": [write("owners.csv", "name\nEthan Park\n"), {"content": "Wrote owners.csv."}],
                "1@retry": [write("owners.csv", "owner\nEthan Park\n"), {"content": "Wrote owners.csv."}]
            },
            "summary": [{"content": "Exported."}]
        }))?,
        "Export the first owner of plan.csv to owners.csv.",
    )
    .await?;
    assert_eq!(view.state, JobState::Succeeded, "{view:?}");
    assert_eq!(view.items[0].attempts, 2);
    let owners = cluster.cli_ok(&["wb", "cat", "w", "owners.csv", "--draft"])?;
    assert_eq!(owners.stdout, "owner\nEthan Park\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_over_a_file_from_before_the_job_still_asks() -> anyhow::Result<()> {
    let model = ScriptedModel::start(script(json!({
        "research": [{"content": "plan.csv has five milestones."}],
        "plan": [{"content": "- [ ] 1. Replace — the plan → plan.csv"}],
        "implement": {"1": [write("plan.csv", "replaced\n"), {"content": "Replaced plan.csv."}]},
        "summary": [{"content": "Replaced."}]
    }))?)
    .await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("w", "plan.csv")?;
    let job_id = cluster.submit("w", "Replace plan.csv with one line.", &model.model_spec())?;
    let view = cluster.wait_for_state(&job_id, JobState::AwaitingApproval)?;
    let pending = view.pending_approval.map(|pending| pending.tool);
    assert_eq!(pending.as_deref(), Some("write_text_file"));
    Ok(())
}
