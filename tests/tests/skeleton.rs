//! End-to-end: real nats-server, real coordinator and worker processes, the CLI, and a scripted
//! OpenAI-protocol model server.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context;
use atelier_messages::job::{JobState, JobView, Phase};
use atelier_messages::store::{DraftDiff, Listing};
use atelier_tests::scripted::{ScriptedModel, launch_plan_export_script};
use atelier_tests::{Cluster, launch_plan_csv, wait_until};
use calamine::{Data, Reader};

/// Department → milestone count, computed from the CSV without our code.
fn expected_counts() -> BTreeMap<String, f64> {
    let text = std::fs::read_to_string(launch_plan_csv()).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for line in text.lines().skip(1).filter(|line| !line.trim().is_empty()) {
        let department = line.split(',').nth(2).unwrap_or_default().to_string();
        *counts.entry(department).or_insert(0.0) += 1.0;
    }
    counts
}

fn read_summary_sheet(path: &std::path::Path) -> anyhow::Result<Vec<Vec<Data>>> {
    let mut workbook: calamine::Xlsx<_> =
        calamine::open_workbook(path).context("summary.xlsx does not open")?;
    let range = workbook
        .worksheet_range("Summary")
        .context("no Summary sheet")?;
    Ok(range.rows().map(<[Data]>::to_vec).collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn job_exports_an_aggregate_through_real_nats_and_publishes() -> anyhow::Result<()> {
    let model = ScriptedModel::start(launch_plan_export_script(0)).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "launch_plan.csv")?;

    let view = cluster.run_job(
        "q3",
        "Count milestones per department into summary.xlsx",
        &model.model_spec(),
        &[],
    )?;
    assert_eq!(
        view.state,
        JobState::Succeeded,
        "{:?}\n{}",
        view.error,
        cluster.logs()
    );
    assert_eq!(view.phase, Phase::Done);
    assert_eq!(view.items.len(), 1);
    assert_eq!(view.items_done(), 1);
    assert_eq!(view.tool_calls, 2);

    // The model saw the tools and the protocol profile.
    let first = &model.requests()[0];
    assert_eq!(first.phase, "research");
    assert_eq!(first.body["stream"], true);
    assert_eq!(first.body["tool_choice"], "required");
    let tools: Vec<_> = first.body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(tools.contains(&"table_get_map".to_string()));
    assert!(
        !tools.contains(&"table_export".to_string()),
        "research must be read-only: {tools:?}"
    );
    // The map result went back to the model as a tool message.
    let results = model.tool_results("research", None, 1);
    let map: serde_json::Value = serde_json::from_str(results.first().context("no tool message")?)?;
    assert_eq!(map["row_count"], 5);
    assert_eq!(map["columns"][2]["name"], "Department");

    // Draft diff: exactly one added file.
    let diff: DraftDiff = cluster.cli_ok(&["draft", "diff", "q3", "--json"])?.json()?;
    assert!(diff.has_draft);
    assert_eq!(diff.added, vec!["summary.xlsx".to_string()]);
    assert!(diff.modified.is_empty() && diff.deleted.is_empty());

    // The exported cells: header, then department and a numeric count per row.
    let export_dir = cluster.dir.path().join("export");
    cluster.cli_ok(&[
        "wb",
        "export",
        "q3",
        export_dir.to_str().unwrap_or_default(),
        "--draft",
    ])?;
    let rows = read_summary_sheet(&export_dir.join("summary.xlsx"))?;
    assert_eq!(
        rows[0],
        vec![
            Data::String("Department".into()),
            Data::String("milestones".into())
        ]
    );
    let got: BTreeMap<String, f64> = rows[1..]
        .iter()
        .map(|row| match (&row[0], &row[1]) {
            (Data::String(department), Data::Float(count)) => (department.clone(), *count),
            (Data::String(department), Data::Int(count)) => (department.clone(), *count as f64),
            other => panic!("unexpected cell types {other:?}"),
        })
        .collect();
    assert_eq!(got, expected_counts());
    assert_eq!(got.get("Engineering"), Some(&3.0));

    // Published is untouched until publish; then it holds the export and the draft is gone.
    let published: Listing = cluster.cli_ok(&["wb", "ls", "q3", "--json"])?.json()?;
    assert_eq!(
        published
            .files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>(),
        vec!["launch_plan.csv"]
    );
    cluster.cli_ok(&["draft", "publish", "q3"])?;
    let published: Listing = cluster.cli_ok(&["wb", "ls", "q3", "--json"])?.json()?;
    let paths: BTreeSet<_> = published.files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(
        paths,
        BTreeSet::from(["launch_plan.csv".to_string(), "summary.xlsx".to_string()])
    );
    assert!(!published.has_draft);
    let after: DraftDiff = cluster.cli_ok(&["draft", "diff", "q3", "--json"])?.json()?;
    assert!(!after.has_draft);
    let cat = cluster.cli_ok(&["wb", "cat", "q3", "launch_plan.csv"])?;
    assert_eq!(
        cat.stdout.as_bytes(),
        std::fs::read(launch_plan_csv())?.as_slice()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn coordinator_sigkilled_between_phases_resumes_without_repeating_research()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(launch_plan_export_script(4_000)).await?;
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("crash", "launch_plan.csv")?;
    let job_id = cluster.submit(
        "crash",
        "Count milestones per department",
        &model.model_spec(),
    )?;

    // Research is checkpointed; the plan turn is in flight (the model answers after 4 s).
    wait_until(Duration::from_secs(30), || {
        model.count("plan", None, 0) == 1
    })?;
    let view: JobView = cluster.cli_ok(&["job", &job_id, "--json"])?.json()?;
    assert_eq!(view.phase, Phase::Plan);
    assert_eq!(view.state, JobState::Running);
    cluster.kill_coordinator();

    cluster.start_coordinator()?;
    let mut finished = None;
    wait_until(Duration::from_secs(60), || {
        let view: Option<JobView> = cluster
            .cli(&["job", &job_id, "--json"])
            .ok()
            .and_then(|out| out.json().ok());
        finished = view.filter(|view| view.state.is_terminal());
        finished.is_some()
    })
    .with_context(|| cluster.logs())?;
    let view = finished.context("job did not finish")?;
    assert_eq!(
        view.state,
        JobState::Succeeded,
        "{:?}\n{}",
        view.error,
        cluster.logs()
    );
    // Research turns were asked once each; the interrupted plan turn was asked again.
    assert_eq!(model.count("research", None, 0), 1);
    assert_eq!(model.count("research", None, 1), 1);
    assert_eq!(model.count("plan", None, 0), 2);
    let diff: DraftDiff = cluster
        .cli_ok(&["draft", "diff", "crash", "--json"])?
        .json()?;
    assert_eq!(diff.added, vec!["summary.xlsx".to_string()]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_without_model_fails_with_provider_not_configured() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("nomodel", "launch_plan.csv")?;
    let out = cluster.cli(&["submit", "nomodel", "anything", "--wait", "--json"])?;
    assert!(!out.success, "a job without a model must not succeed");
    assert_eq!(out.code, Some(1));
    let view: JobView = out.json()?;
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(
        view.error.map(|e| e.code),
        Some(atelier_messages::ErrorCode::ProviderNotConfigured)
    );
    Ok(())
}
