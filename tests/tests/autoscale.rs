//! Pools that size themselves: `atelier pool` grows a pool from one worker process under a
//! backlog of slow calls and retires the extra worker after the idle delay; a worker retired
//! mid-load (SIGTERM) finishes every call it holds, so no call is lost or answered twice; a
//! worker process runs one async thread unless told otherwise.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use atelier_messages::store::Listing;
use atelier_messages::tool::{ToolOutput, ToolRequest};
use atelier_messages::{PROTOCOL_VERSION, subjects};
use atelier_tests::{Cluster, wait_until};
use atelier_transport::Policy;
use serde_json::{Value, json};

/// A CPU-bound query of about a second on one DuckDB thread, and its answer.
const SLOW_QUERY: &str = "SELECT count(*) FROM range(200000000) t WHERE hash(t.range) % 7 = 0";

/// One slow call, sent as the coordinator sends tool calls (progress, retries, same call id).
async fn slow_call(
    client: &async_nats::Client,
    listing: &Listing,
    call_id: String,
) -> Result<ToolOutput, atelier_messages::ErrorBody> {
    let request = ToolRequest {
        v: PROTOCOL_VERSION,
        call_id,
        job_id: None,
        workbench: listing.workbench.clone(),
        tool: "table_query".into(),
        args: json!({"path": "plan.csv", "query": SLOW_QUERY}),
        files: listing.files.clone(),
    };
    atelier_transport::request_to(client, &subjects::tool("tabular"), &request, Policy::TOOLS).await
}

fn instances(pool: &Value) -> usize {
    pool["instances"].as_array().map_or(0, Vec::len)
}

/// How many times each call id ran to completion, from every worker's log.
fn completed_calls(cluster: &Cluster) -> BTreeMap<String, usize> {
    let mut done = BTreeMap::new();
    for entry in std::fs::read_dir(cluster.dir.path())
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().to_string();
        if !(name.starts_with("worker") || name.starts_with("pool")) || !name.ends_with(".log") {
            continue;
        }
        let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in log.lines().filter(|line| line.contains("tool call done")) {
            if let Some(call_id) = line
                .split("call_id=")
                .nth(1)
                .and_then(|rest| rest.split([' ', '}', ':']).next())
            {
                *done
                    .entry(call_id.trim_matches('"').to_string())
                    .or_insert(0) += 1;
            }
        }
    }
    done
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_of_slow_calls_grows_the_pool_from_one_and_it_shrinks_after_the_idle_delay()
-> anyhow::Result<()> {
    let cluster = Cluster::start_with(&[])?;
    let mut pool_process = cluster.start_pool_supervisor(
        "tabular",
        "2",
        &[
            ("ATELIER_WORKER_CONCURRENCY", "1"),
            ("ATELIER_TABULAR_THREADS", "1"),
            ("ATELIER_AUTOSCALE_IDLE_SECS", "3"),
            ("ATELIER_AUTOSCALE_COOLDOWN_SECS", "1"),
        ],
    )?;
    wait_until(Duration::from_secs(20), || {
        cluster
            .pool_view("tabular")
            .is_ok_and(|pool| instances(&pool) == 1)
    })?;
    cluster.workbench_with_launch_plan("scale", "plan.csv")?;
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "scale", "--json"])?.json()?;
    let client = async_nats::connect(&cluster.nats.url).await?;

    // Three callers, each sending slow calls one after another (as jobs do).
    let started = Instant::now();
    let callers = (0..3).map(|caller| {
        let client = client.clone();
        let listing = listing.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            for call in 0..5 {
                answers.push(slow_call(&client, &listing, format!("c{caller}-{call}")).await);
            }
            answers
        })
    });
    let mut grown_after = None;
    let watch = async {
        while grown_after.is_none() && started.elapsed() < Duration::from_secs(60) {
            if cluster
                .pool_view("tabular")
                .is_ok_and(|pool| instances(&pool) == 2)
            {
                grown_after = Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let (answers, ()) = tokio::join!(futures::future::join_all(callers), watch);
    let load_ended_ms = atelier_messages::now_ms();
    let grown_after =
        grown_after.ok_or_else(|| anyhow::anyhow!("the pool never grew\n{}", cluster.logs()))?;
    let mut workers = BTreeMap::new();
    let expected = answers_of_slow_query();
    for answer in answers
        .into_iter()
        .flat_map(|joined| joined.unwrap_or_default())
    {
        let output = answer.map_err(|error| anyhow::anyhow!("{error:?}\n{}", cluster.logs()))?;
        assert_eq!(output.output["rows"], expected);
        *workers.entry(output.worker).or_insert(0) += 1;
    }
    assert_eq!(workers.values().sum::<usize>(), 15);
    assert_eq!(workers.len(), 2, "both workers served calls: {workers:?}");
    let pool = cluster.pool_view("tabular")?;
    assert!(pool["autoscale"]["scale_ups"].as_u64() >= Some(2), "{pool}");
    assert_eq!(pool["autoscale"]["min"], 1);
    assert_eq!(pool["autoscale"]["max"], 2);
    // Two saturated ticks, the start of a process, its first stats answer.
    assert!(grown_after < Duration::from_secs(10), "{grown_after:?}");

    // Quiet now: after the idle delay the extra worker is retired.
    wait_until(Duration::from_secs(30), || {
        cluster.pool_view("tabular").is_ok_and(|pool| {
            instances(&pool) == 1 && pool["autoscale"]["scale_downs"].as_u64() == Some(1)
        })
    })?;
    let pool = cluster.pool_view("tabular")?;
    assert_eq!(pool["autoscale"]["last_decision"]["direction"], "down");
    // The pool went quiet as the last answers left the workers (within a tick of this).
    let retired_at = pool["autoscale"]["last_decision"]["at_ms"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        retired_at + 500 >= load_ended_ms + 3000,
        "retired {} ms after the load ended",
        retired_at.saturating_sub(load_ended_ms)
    );
    assert_eq!(pool["autoscale"]["last_decision"]["to"], 1);
    assert_eq!(pool["pending_calls"], 0);
    assert!(completed_calls(&cluster).values().all(|count| *count == 1));
    // Its workers never outlive the supervisor, even one killed outright.
    pool_process.kill();
    wait_until(Duration::from_secs(10), || {
        cluster
            .pool_view("tabular")
            .is_ok_and(|pool| instances(&pool) == 0)
    })?;
    // pgrep exits 1 when no process matches.
    let data = cluster.data_dir().to_string_lossy().to_string();
    wait_until(Duration::from_secs(10), || {
        std::process::Command::new("pgrep")
            .args(["-f", "--", &format!("--supervised.*{data}")])
            .status()
            .is_ok_and(|status| status.code() == Some(1))
    })?;
    Ok(())
}

/// What every slow call answers: the count of values in range(2e8) whose hash is 0 mod 7,
/// computed once by the first answer and compared across all (the value is DuckDB's).
fn answers_of_slow_query() -> Value {
    static EXPECTED: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    EXPECTED
        .get_or_init(|| {
            let duck = duckdb::Connection::open_in_memory().ok();
            let count: Option<i64> =
                duck.and_then(|conn| conn.query_row(SLOW_QUERY, [], |row| row.get(0)).ok());
            json!([[count.unwrap_or(-1)]])
        })
        .clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_retired_mid_load_finishes_its_calls_and_none_is_lost_or_repeated()
-> anyhow::Result<()> {
    let mut cluster = Cluster::start_with(&[])?;
    let env = [
        ("ATELIER_WORKER_CONCURRENCY", "1"),
        ("ATELIER_TABULAR_THREADS", "1"),
    ];
    cluster.start_worker_with_env("tabular", &env)?;
    cluster.start_worker_with_env("tabular", &env)?;
    cluster.workbench_with_launch_plan("retire", "plan.csv")?;
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "retire", "--json"])?.json()?;
    let client = async_nats::connect(&cluster.nats.url).await?;

    let calls: Vec<_> = (0..8)
        .map(|index| {
            let client = client.clone();
            let listing = listing.clone();
            tokio::spawn(async move { slow_call(&client, &listing, format!("r-{index}")).await })
        })
        .collect();
    // Let both workers take their share, then retire the first one mid-load.
    wait_until(Duration::from_secs(20), || {
        cluster
            .pool_view("tabular")
            .is_ok_and(|pool| pool["in_flight"] == 2)
    })?;
    let retired = cluster.workers[0]
        .pid()
        .ok_or_else(|| anyhow::anyhow!("worker 0 is not running"))?;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &retired.to_string()])
        .status()?;
    assert!(status.success());
    let mut answered = BTreeMap::new();
    let expected = answers_of_slow_query();
    for (index, call) in calls.into_iter().enumerate() {
        let output = call
            .await?
            .map_err(|e| anyhow::anyhow!("{e:?}\n{}", cluster.logs()))?;
        assert_eq!(output.call_id, format!("r-{index}"));
        assert_eq!(output.output["rows"], expected);
        *answered.entry(output.worker).or_insert(0) += 1;
    }
    assert_eq!(answered.values().sum::<usize>(), 8);
    assert!(
        cluster.workers[0].wait_exit(Duration::from_secs(30)),
        "the retired worker did not exit"
    );
    let done = completed_calls(&cluster);
    assert_eq!(done.len(), 8, "{done:?}");
    assert!(
        done.values().all(|count| *count == 1),
        "a call ran twice: {done:?}"
    );
    let log = std::fs::read_to_string(cluster.dir.path().join("worker-tabular-0.log"))?;
    assert!(log.contains("draining"), "{log}");
    Ok(())
}

#[test]
fn bounds_no_pool_can_keep_are_refused_before_anything_starts() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().to_string_lossy().to_string();
    let cases: [(&[&str], &str); 5] = [
        (
            &["pool", "--pool", "tabular", "--min", "3", "--max", "1"],
            "1 <= min <= max",
        ),
        (
            &["pool", "--pool", "tabular", "--min", "0", "--max", "2"],
            "1 <= min <= max",
        ),
        (&["up", "--autoscale", "gpu=1..2"], "unknown pool"),
        (&["up", "--autoscale", "tabular=4"], "MIN..MAX"),
        (&["up", "--autoscale", "office=2..x"], "bad maximum"),
    ];
    for (args, message) in cases {
        let mut args = args.to_vec();
        args.extend(["--data", &data, "--nats", "nats://127.0.0.1:1"]);
        let out = atelier_tests::cli(&args)?;
        assert!(!out.success, "{args:?} succeeded");
        assert!(out.stderr.contains(message), "{args:?}: {}", out.stderr);
    }
    Ok(())
}

/// A worker process runs one async thread (its tools' work runs on blocking threads; a pool
/// grows by processes), unless `TOKIO_WORKER_THREADS` gives it more; `atelier workers` shows it.
#[test]
fn a_worker_runs_one_async_thread_unless_its_environment_says_otherwise() -> anyhow::Result<()> {
    let mut cluster = Cluster::start_with(&["office"])?;
    cluster.start_worker_with_env("office", &[("TOKIO_WORKER_THREADS", "3")])?;
    let mut threads = Vec::new();
    wait_until(Duration::from_secs(20), || {
        threads = cluster.pool_view("office").map_or_else(
            |_| Vec::new(),
            |pool| {
                let instances = pool["instances"].as_array().cloned().unwrap_or_default();
                let mut threads: Vec<u64> = instances
                    .iter()
                    .filter_map(|instance| instance["async_threads"].as_u64())
                    .collect();
                threads.sort_unstable();
                threads
            },
        );
        threads.len() == 2
    })?;
    assert_eq!(threads, [1, 3]);
    Ok(())
}
