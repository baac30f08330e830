//! Scale-out and shared-nothing hosts, each side by side with its baseline in one run:
//!
//! - **(a) scaling**: a burst of CPU-bound tabular calls (8 callers, each sending its calls one
//!   after another, as jobs do) on one fixed worker (`atelier pool --min 1 --max 1`) versus an
//!   autoscaled pool (`--min 1 --max 2`); every worker pinned to its own core
//!   (`autoscale_pin_cpus`), DuckDB at 1 thread, 1 slot per worker; the burst starts once the
//!   pool has settled at one worker (past the cool-down of its start). Reports throughput, the
//!   ratio, and the time from the burst to the second worker's first call. Two alternating
//!   runs of each.
//! - **(b) ingest**: the first call (`SELECT count(*)`) on a 1 GB CSV through a worker on a
//!   data directory of its own, on a stock 1 MiB `max_payload` server (the blob fetched from the
//!   store in pieces, verified, then ingested), versus raw DuckDB loading the same file locally
//!   (same threads and memory limit); `wb add` (upload in pieces, checked) reported beside it.
//! - **(c) memory**: peak resident memory (`VmHWM`) of the coordinator and that worker after (b).
//!
//! Run from the repository root:
//! `cargo build --release --bin atelier && cargo bench -p atelier-tests --bench scaling`
//! (`SCALING_PART=a` or `b` runs one part; `SCALING_CSV_MB` sets the CSV size, default 1024).
#![allow(clippy::print_stdout)]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use atelier_messages::store::Listing;
use atelier_messages::tool::{ToolOutput, ToolRequest};
use atelier_messages::{ErrorBody, PROTOCOL_VERSION, subjects};
use atelier_tests::{Cluster, Process, wait_until};
use atelier_transport::Policy;
use serde_json::json;

/// About half a second of one core in DuckDB.
const CPU_QUERY: &str = "SELECT count(*) FROM range(100000000) t WHERE hash(t.range) % 7 = 0";
const CALLERS: usize = 8;
/// How long a pool runs at its minimum before the burst (past the autoscaler's cool-down).
const SETTLE: Duration = Duration::from_secs(6);
const CALLS_PER_CALLER: usize = 6;

async fn tool_call(
    client: &async_nats::Client,
    listing: &Listing,
    call_id: String,
    path: &str,
    query: &str,
) -> Result<ToolOutput, ErrorBody> {
    let request = ToolRequest {
        v: PROTOCOL_VERSION,
        call_id,
        job_id: None,
        workbench: listing.workbench.clone(),
        tool: "table_query".into(),
        args: json!({"path": path, "query": query}),
        files: listing.files.clone(),
    };
    atelier_transport::request_to(client, &subjects::tool("tabular"), &request, Policy::TOOLS).await
}

fn tabular_instances(cluster: &Cluster) -> usize {
    cluster
        .pool_view("tabular")
        .map_or(0, |pool| pool["instances"].as_array().map_or(0, Vec::len))
}

/// One burst's outcome.
struct Burst {
    seconds: f64,
    calls: usize,
    workers: usize,
    /// From the burst's start to the start of the first call on a second worker.
    second_worker_after: Option<Duration>,
}

async fn burst(max: &str) -> anyhow::Result<Burst> {
    let cluster = Cluster::start_with(&[])?;
    let _pool = cluster.start_pool_supervisor(
        "tabular",
        max,
        &[
            ("ATELIER_WORKER_CONCURRENCY", "1"),
            ("ATELIER_TABULAR_THREADS", "1"),
            ("ATELIER_AUTOSCALE_PIN_CPUS", "true"),
            ("ATELIER_AUTOSCALE_IDLE_SECS", "600"),
        ],
    )?;
    let pool_started = Instant::now();
    wait_until(Duration::from_secs(30), || tabular_instances(&cluster) == 1)?;
    cluster.workbench_with_launch_plan("burst", "plan.csv")?;
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "burst", "--json"])?.json()?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    // Warm: the plan is ingested before the clock starts.
    tool_call(
        &client,
        &listing,
        "warm".into(),
        "plan.csv",
        "SELECT count(*) FROM data",
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    // A settled pool, as before any burst in service: its start (to the minimum) is a change,
    // and the next one waits for the cool-down (5 s).
    tokio::time::sleep(SETTLE.saturating_sub(pool_started.elapsed())).await;

    let started = Instant::now();
    let callers = (0..CALLERS).map(|caller| {
        let client = client.clone();
        let listing = listing.clone();
        tokio::spawn(async move {
            let mut done = Vec::new();
            for call in 0..CALLS_PER_CALLER {
                let id = format!("b{caller}-{call}");
                let output = tool_call(&client, &listing, id, "plan.csv", CPU_QUERY).await;
                done.push((Instant::now(), output));
            }
            done
        })
    });
    let mut finished = Vec::new();
    for caller in futures::future::join_all(callers).await {
        for (at, output) in caller? {
            let output = output.map_err(|e| anyhow::anyhow!("{e:?}"))?;
            let began = at - Duration::from_millis(output.elapsed_ms);
            finished.push((began, at, output.worker));
        }
    }
    let last = finished
        .iter()
        .map(|(_, at, _)| *at)
        .max()
        .context("no calls")?;
    finished.sort_by_key(|(began, _, _)| *began);
    let first_worker = finished[0].2.clone();
    let second_worker_after = finished
        .iter()
        .find(|(_, _, worker)| *worker != first_worker)
        .map(|(began, _, _)| began.saturating_duration_since(started));
    let mut per_worker: std::collections::BTreeMap<&String, (usize, Duration)> =
        std::collections::BTreeMap::new();
    for (began, at, worker) in &finished {
        let entry = per_worker.entry(worker).or_default();
        entry.0 += 1;
        entry.1 += *at - *began;
    }
    let shares: Vec<String> = per_worker
        .values()
        .map(|(calls, busy)| {
            format!(
                "{calls} calls, {:.0} ms each",
                busy.as_millis() as f64 / *calls as f64
            )
        })
        .collect();
    println!("    per worker: {}", shares.join("; "));
    let workers: Vec<&&String> = per_worker.keys().collect();
    Ok(Burst {
        seconds: (last - started).as_secs_f64(),
        calls: finished.len(),
        workers: workers.len(),
        second_worker_after,
    })
}

async fn part_a() -> anyhow::Result<()> {
    println!(
        "(a) burst of {} CPU-bound calls ({CALLERS} callers × {CALLS_PER_CALLER}), 1 slot and 1 DuckDB thread per worker, one core each",
        CALLERS * CALLS_PER_CALLER
    );
    println!("| run | pool | calls/s | wall | workers | second worker serving after |");
    println!("|---|---|---|---|---|---|");
    let mut fixed = Vec::new();
    let mut scaled = Vec::new();
    for round in 1..=2 {
        for (label, max) in [("fixed 1", "1"), ("autoscaled 1..2", "2")] {
            let burst = burst(max).await?;
            let rate = burst.calls as f64 / burst.seconds;
            println!(
                "| {round} | {label} | {rate:.2} | {:.2} s | {} | {} |",
                burst.seconds,
                burst.workers,
                burst
                    .second_worker_after
                    .map_or("–".to_string(), |after| format!(
                        "{:.2} s",
                        after.as_secs_f64()
                    ))
            );
            match max {
                "1" => fixed.push(rate),
                _ => scaled.push(rate),
            }
        }
    }
    let mean = |rates: &[f64]| rates.iter().sum::<f64>() / rates.len() as f64;
    println!(
        "throughput autoscaled ÷ fixed: {:.2}× (goal ≥ 1.6×)",
        mean(&scaled) / mean(&fixed)
    );
    Ok(())
}

/// Writes about `megabytes` MB of `id,region,amount,day,note` rows.
fn write_csv(path: &Path, megabytes: u64) -> anyhow::Result<u64> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    out.write_all(b"id,region,amount,day,note\n")?;
    let target = megabytes << 20;
    let mut written = 0u64;
    let mut id = 0u64;
    let regions = ["north", "south", "east", "west", "central"];
    while written < target {
        let line = format!(
            "{id},{},{}.{:02},2026-{:02}-{:02},order {id} of customer {}\n",
            regions[(id % 5) as usize],
            id % 10_000,
            id % 100,
            1 + id % 12,
            1 + id % 28,
            id % 77_777
        );
        out.write_all(line.as_bytes())?;
        written += line.len() as u64;
        id += 1;
    }
    out.flush()?;
    Ok(id)
}

/// Peak resident memory of a process, in MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn raw_duckdb_ingest(csv: &Path, db: &Path) -> anyhow::Result<(Duration, i64)> {
    let started = Instant::now();
    let conn = duckdb::Connection::open(db)?;
    conn.execute_batch("SET threads = 2; SET memory_limit = '2GB';")?;
    conn.execute_batch(&format!(
        "CREATE TABLE data AS SELECT * FROM read_csv('{}'); CHECKPOINT;",
        csv.display()
    ))?;
    let rows: i64 = conn.query_row("SELECT count(*) FROM data", [], |row| row.get(0))?;
    Ok((started.elapsed(), rows))
}

async fn part_b() -> anyhow::Result<()> {
    let megabytes: u64 = std::env::var("SCALING_CSV_MB")
        .ok()
        .and_then(|mb| mb.parse().ok())
        .unwrap_or(1024);
    let mut cluster = Cluster::start_with_max_payload(&[], 1 << 20)?;
    cluster.start_worker_elsewhere("tabular", &[])?;
    let csv = cluster.dir.path().join("big.csv");
    let rows = write_csv(&csv, megabytes)?;
    let size = std::fs::metadata(&csv)?.len();

    let baseline_db = cluster.dir.path().join("baseline.duckdb");
    let (raw, raw_rows) = raw_duckdb_ingest(&csv, &baseline_db)?;
    anyhow::ensure!(
        raw_rows as u64 == rows,
        "raw DuckDB counted {raw_rows} rows of {rows}"
    );

    cluster.cli_ok(&["wb", "create", "big"])?;
    let add_started = Instant::now();
    cluster.cli_ok(&["wb", "add", "big", &csv.to_string_lossy()])?;
    let add = add_started.elapsed();
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "big", "--json"])?.json()?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let first_started = Instant::now();
    let output = tool_call(
        &client,
        &listing,
        "first".into(),
        "big.csv",
        "SELECT count(*) FROM data",
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e:?}\n{}", cluster.logs()))?;
    let first = first_started.elapsed();
    anyhow::ensure!(
        output.output["rows"] == json!([[rows]]),
        "{}",
        output.output
    );

    println!();
    println!(
        "(b) {:.0} MB CSV, {rows} rows; stock 1 MiB max_payload; the worker on its own data directory",
        size as f64 / 1e6
    );
    println!("| step | time | raw DuckDB (same file, local) | ratio (goal ≤ 1.5×) |");
    println!("|---|---|---|---|");
    println!(
        "| first call: fetch in pieces + ingest + count | {:.2} s | {:.2} s | **{:.2}×** |",
        first.as_secs_f64(),
        raw.as_secs_f64(),
        first.as_secs_f64() / raw.as_secs_f64()
    );
    println!(
        "| `wb add` (digest, upload in 512 KiB pieces, checked by the store) | {:.2} s | – | – |",
        add.as_secs_f64()
    );
    let log = std::fs::read_to_string(cluster.dir.path().join("worker-tabular-0.log"))?;
    for (event, fields) in [
        ("blob fetched in pieces", &["elapsed_ms"][..]),
        ("table loaded", &["check_ms", "load_ms"][..]),
    ] {
        let line = log
            .lines()
            .find(|line| line.contains(event))
            .unwrap_or_default();
        let values: Vec<String> = fields
            .iter()
            .map(|field| {
                let value = line
                    .split(&format!("{field}="))
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .unwrap_or("?");
                format!("{field} {value}")
            })
            .collect();
        println!("    worker: {event}: {}", values.join(", "));
    }
    let coordinator = cluster.coordinator.as_ref().and_then(Process::pid);
    let worker = cluster.workers.first().and_then(Process::pid);
    println!();
    println!("(c) peak resident memory (VmHWM) during (b)");
    for (name, pid) in [("coordinator", coordinator), ("worker", worker)] {
        let peak = pid.and_then(peak_rss_mib);
        println!(
            "| {name} | {} |",
            peak.map_or("–".to_string(), |mib| format!("{mib:.0} MiB"))
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let part = std::env::var("SCALING_PART").unwrap_or_default();
    if part.is_empty() || part == "a" {
        part_a().await?;
    }
    if part.is_empty() || part == "b" {
        part_b().await?;
    }
    Ok(())
}
