//! Hardening: tool failures told to the model in every phase, results over the server's
//! payload limit, exactly-once tool calls across worker and coordinator crashes, approvals by
//! action class, races between control verbs and runs, hostile input at every entry point.

use std::time::{Duration, Instant};

use atelier_messages::job::JobState;
use atelier_tests::Cluster;
use atelier_tests::scripted::{Script, ScriptedModel};
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
        "plan": [{"content": ""}],
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
