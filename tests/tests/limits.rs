//! What others bring cannot corrupt the job store or crash-loop the coordinator: one nesting
//! limit for JSON and MessagePack at every entry, capped job messages, submissions refused as
//! they are read recorded as failed jobs, job listings that are paged, cut and never stopped by
//! a record that cannot be read, and a job whose run keeps killing the coordinator set aside so
//! the coordinator starts.

use std::time::{Duration, Instant};

use atelier_messages::job::{GetJob, JobState, JobSubmit, JobView};
use atelier_messages::workflow::Workflow;
use atelier_messages::{ErrorCode, Format, PROTOCOL_VERSION, decode_reply, encode, subjects};
use atelier_tests::{Cluster, Process, nats_request};
use serde_json::{Value, json};

/// A model nobody serves: the job is recorded, and fails.
const UNREACHABLE_MODEL: &str = "openai-compat:http://127.0.0.1:9/v1#none";

fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!([inner]))
}

fn submission(job_id: &str, message: String, workflow: Option<Workflow>) -> JobSubmit {
    JobSubmit {
        v: PROTOCOL_VERSION,
        job_id: job_id.into(),
        workbench: "w".into(),
        message,
        model: None,
        submitted_at_ms: 0,
        auto_approve: false,
        approvals: None,
        continue_draft: false,
        workflow,
        batch_id: None,
        time_limit_secs: None,
        priority: None,
        budget: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn deep_nesting_and_huge_messages_are_refused_and_jobs_still_list() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    cluster.cli_ok(&["wb", "create", "w"])?;

    // The CLI refuses 123 levels of --args by the shared limit, before anything is sent.
    let args = json!({"x": nested(123)}).to_string();
    let refused = cluster.cli(&["run", "w", "list_files", "--args", &args])?;
    assert!(refused.failed_with("VALIDATION_FAILED"), "{refused:?}");
    assert!(refused.stderr.contains("64 levels"), "{}", refused.stderr);

    // Raw submissions past the limits (MessagePack allows 1,024 levels) are refused: recorded
    // as failed jobs, never run.
    let deep = Workflow::single("list_files", json!({"x": nested(123)}));
    cluster
        .publish_raw(&submission("deep-args", "deep".into(), Some(deep)))
        .await?;
    for index in 0..3 {
        let huge = "x".repeat(300 * 1024);
        cluster
            .publish_raw(&submission(&format!("huge-{index}"), huge, None))
            .await?;
    }
    // A batch nested 500 levels deep, in JSON and in MessagePack.
    let client = async_nats::connect(&cluster.nats.url).await?;
    let batch = json!({"v": PROTOCOL_VERSION, "workbenches": ["w"],
        "action": {"tool": {"tool": "list_files", "args": {"x": nested(500)}}}});
    for format in [Format::Json, Format::MessagePack] {
        let payload = encode(&batch, format).map_err(|e| anyhow::anyhow!("{e}"))?;
        let reply = nats_request(
            &client,
            subjects::batch::SUBMIT,
            payload,
            format == Format::Json,
        )
        .await?;
        let answer = decode_reply::<Value>(&reply, format).expect_err("refused");
        assert_eq!(answer.code, ErrorCode::ValidationFailed, "{answer:?}");
        assert!(answer.message.contains("64 levels"), "{answer:?}");
    }

    // A job with a long message lists cut, and shows whole.
    let long = "word ".repeat(400);
    let id = cluster.submit("w", &long, UNREACHABLE_MODEL)?;
    let jobs: Vec<Value> = cluster.cli_ok(&["jobs", "--json"])?.json()?;
    let mut refused: Vec<(&str, &str, usize)> = jobs
        .iter()
        .filter(|job| job["job_id"] != id.as_str())
        .map(|job| {
            let message = job["message"].as_str().unwrap_or_default();
            (
                job["job_id"].as_str().unwrap_or_default(),
                job["error"]["code"].as_str().unwrap_or_default(),
                message.chars().count(),
            )
        })
        .collect();
    refused.sort_unstable();
    assert_eq!(
        refused,
        [
            ("deep-args", "VALIDATION_FAILED", 4),
            ("huge-0", "VALIDATION_FAILED", 201),
            ("huge-1", "VALIDATION_FAILED", 201),
            ("huge-2", "VALIDATION_FAILED", 201),
        ],
        "{jobs:?}"
    );
    let job = jobs
        .iter()
        .find(|job| job["job_id"] == id.as_str())
        .cloned()
        .unwrap_or_default();
    let listed = job["message"].as_str().unwrap_or_default();
    assert_eq!(listed.chars().count(), 201, "{listed}");
    assert!(job["plan_md"].is_null());
    let whole: Value = cluster.cli_ok(&["job", &id, "--json"])?.json()?;
    assert_eq!(whole["message"], long.as_str());
    let batches = cluster.cli_ok(&["batch", "list", "--json"])?;
    assert_eq!(batches.stdout.trim(), "[]");
    Ok(())
}

/// `GetJob` of `job_id` until the job is recorded (`NOT_FOUND` until then).
async fn recorded_job(client: &async_nats::Client, job_id: &str) -> anyhow::Result<JobView> {
    let request = GetJob {
        v: PROTOCOL_VERSION,
        job_id: job_id.into(),
    };
    let payload = encode(&request, Format::Json).map_err(|e| anyhow::anyhow!("{e}"))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = nats_request(client, subjects::ctl::JOB, payload.clone(), true).await?;
        match decode_reply::<JobView>(&reply, Format::Json) {
            Ok(view) => return Ok(view),
            Err(error) if error.code == ErrorCode::NotFound && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => anyhow::bail!("job {job_id}: {error:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_over_nested_json_submission_is_recorded_as_a_failed_job() -> anyhow::Result<()> {
    let cluster = Cluster::start_with(&[])?;
    cluster.cli_ok(&["wb", "create", "w"])?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let js = async_nats::jetstream::new(client.clone());
    // 200 levels: past the shared limit and past the JSON reader's own.
    let submission = |job_id: Option<&str>| {
        let mut submit = json!({"v": PROTOCOL_VERSION, "workbench": "w",
            "message": "count the rows", "submitted_at_ms": 7,
            "workflow": {"steps": [{"tool": "list_files", "args": {"x": nested(200)}}]}});
        if let Some(job_id) = job_id {
            submit["job_id"] = json!(job_id);
        }
        encode(&submit, Format::Json)
    };
    let publish = |msg_id: &'static str, job_id: Option<&'static str>| {
        let js = js.clone();
        async move {
            let payload = submission(job_id).map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Content-Type", "application/json");
            headers.insert("Nats-Msg-Id", msg_id);
            js.publish_with_headers(subjects::JOB_SUBMIT, headers, payload.into())
                .await?
                .await?;
            anyhow::Ok(())
        }
    };
    publish("no-id", None).await?;
    publish("deep-json", Some("deep-json")).await?;

    let view = recorded_job(&client, "deep-json").await?;
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(
        view.error.as_ref().map(|e| e.code),
        Some(ErrorCode::ValidationFailed)
    );
    assert_eq!(
        (view.workbench.as_str(), view.message.as_str()),
        ("w", "count the rows")
    );
    // The same submission again changes nothing, and the workbench takes the next job (taken
    // off the queue after it, so once that is recorded the repeat was handled).
    publish("deep-json-again", Some("deep-json")).await?;
    let id = cluster.submit("w", "a job", UNREACHABLE_MODEL)?;
    recorded_job(&client, &id).await?;
    let again = recorded_job(&client, "deep-json").await?;
    assert_eq!(
        (again.state, again.error, again.updated_at_ms),
        (view.state, view.error, view.updated_at_ms)
    );
    let jobs: Vec<Value> = cluster.cli_ok(&["jobs", "--json"])?.json()?;
    let mut ids: Vec<&str> = jobs
        .iter()
        .map(|job| job["job_id"].as_str().unwrap_or_default())
        .collect();
    ids.sort_unstable();
    let mut expected = vec!["deep-json", id.as_str()];
    expected.sort_unstable();
    assert_eq!(
        ids, expected,
        "the submission without an id is not recorded"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_that_cannot_be_read_is_listed_as_such_and_start_up_goes_on() -> anyhow::Result<()>
{
    let mut cluster = Cluster::start()?;
    cluster.cli_ok(&["wb", "create", "w"])?;
    let id = cluster.submit("w", "a job", UNREACHABLE_MODEL)?;
    cluster.wait_finished(&id, Duration::from_secs(20))?;
    cluster.kill_coordinator();
    // A record written by something else (or damaged): JSON nested past its reader's limit.
    {
        let db = sled::open(cluster.data_dir().join("db"))?;
        let garbage = format!("{{\"job_id\":{}}}", serde_json::to_string(&nested(200))?);
        db.open_tree("jobs")?
            .insert("damaged", garbage.as_bytes())?;
        db.flush()?;
    }
    cluster.start_coordinator()?;
    let jobs: Vec<Value> = cluster.cli_ok(&["jobs", "--json"])?.json()?;
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let damaged = jobs
        .iter()
        .find(|job| job["job_id"] == "damaged")
        .cloned()
        .unwrap_or_default();
    assert_eq!(damaged["state"], "failed");
    assert_eq!(damaged["error"]["code"], "INTERNAL");
    assert!(jobs.iter().any(|job| job["job_id"] == id.as_str()));
    let stats = cluster.cli_ok(&["jobs", "--stats", "--json"])?;
    assert!(stats.stdout.contains("storage_bytes"), "{}", stats.stdout);
    Ok(())
}

#[test]
fn a_job_that_kills_every_coordinator_start_is_set_aside_and_the_coordinator_starts()
-> anyhow::Result<()> {
    let mut cluster = Cluster::start()?;
    cluster.cli_ok(&["wb", "create", "w"])?;
    // Every start of this coordinator dies after a tool answers, before its result is journaled.
    let data = cluster.data_dir().to_string_lossy().to_string();
    let url = cluster.nats.url.clone();
    let start = |cluster: &mut Cluster| -> anyhow::Result<()> {
        cluster.coordinator = Some(Process::spawn_with_env(
            "coordinator",
            &["coordinator", "--nats", &url, "--data", &data],
            cluster.dir.path(),
            &[("ATELIER_FAILPOINTS", "before_tool_result")],
        )?);
        Ok(())
    };
    cluster.kill_coordinator();
    start(&mut cluster)?;
    atelier_tests::wait_until(Duration::from_secs(20), || {
        cluster.cli(&["jobs"]).is_ok_and(|out| out.success)
    })?;
    let args = json!({"path": "out.txt", "content": "once\n"}).to_string();
    let job = cluster
        .cli_ok(&["run", "w", "write_text_file", "--args", &args])?
        .stdout
        .trim()
        .to_string();
    let mut deaths = 0;
    while let Some(coordinator) = cluster.coordinator.as_mut() {
        if !coordinator.wait_exit(Duration::from_secs(20)) {
            break;
        }
        deaths += 1;
        anyhow::ensure!(
            deaths <= 6,
            "the coordinator keeps dying:\n{}",
            cluster.logs()
        );
        start(&mut cluster)?;
    }
    // The first run and two adoptions died; the third adoption set the job aside.
    assert_eq!(deaths, 3, "{}", cluster.logs());
    let view = cluster.wait_finished(&job, Duration::from_secs(20))?;
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(view.error.map(|e| e.code), Some(ErrorCode::CrashLoop));
    // The coordinator serves, the write was applied once, and the journal is kept.
    let draft = cluster.cli_ok(&["wb", "cat", "w", "out.txt", "--draft"])?;
    assert_eq!(draft.stdout, "once\n");
    assert_eq!(cluster.applied_writes().values().sum::<usize>(), 1);
    Ok(())
}
