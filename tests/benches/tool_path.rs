//! The cost of one tool call on the job path: NATS requests, fsyncs and latency of a write
//! (`write_text_file` of 1 KB) and of a no-op read (`get_file_info` on a small text file), next
//! to a raw async-nats request/reply echo on the same server in the same run.
//!
//! A job with a scripted model makes `CALLS` calls of one kind in one plan item (`BATCH` per
//! model turn). Requests are counted by a client subscribed to `atelier.store.>` and
//! `atelier.tool.>`; fsyncs by `strace -f -c` attached to the coordinator for the job; both
//! minus the same job with no calls, divided by `CALLS` (strace's seccomp filter stops the
//! coordinator only on those calls, not on every system call). Latency is each call's
//! `tool_complete` `elapsed_us` (the orchestrator's dispatch to result in hand, store write
//! included).
//!
//! Run: `cargo build --release --bin atelier && cargo bench -p atelier-tests --bench tool_path`
//! (needs `strace`; numbers in docs/benchmarks.md).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use atelier_messages::job::EventKind;
use atelier_messages::subjects;
use atelier_tests::Cluster;
use atelier_tests::scripted::{Script, ScriptedModel};
use futures::StreamExt;
use serde_json::{Value, json};

const CALLS: usize = 200;
const BATCH: usize = 20;
const ECHOES: usize = 2_000;

fn script(calls: Vec<Value>) -> Script {
    let mut turns: Vec<Value> = calls
        .chunks(BATCH)
        .map(|chunk| json!({"tool_calls": chunk}))
        .collect();
    turns.push(json!({"content": "Done."}));
    serde_json::from_value(json!({
        "research": [{"content": "One text file."}],
        "plan": [{"content": "- [ ] 1. Work — make the calls"}],
        "implement": {"1": turns},
        "summary": [{"content": "Done."}]
    }))
    .unwrap()
}

fn write_calls() -> Vec<Value> {
    // 1 KB each, every one different (so each is a new blob to store).
    (0..CALLS)
        .map(|n| {
            let content = format!("{n:08}") + &"x".repeat(1015) + "\n";
            json!({"name": "write_text_file", "arguments": {"path": format!("out/{n}.txt"), "content": content}})
        })
        .collect()
}

fn read_calls() -> Vec<Value> {
    // Distinct (ignored) argument values keep the loop detector quiet.
    (0..CALLS)
        .map(|n| json!({"name": "get_file_info", "arguments": {"path": "notes.txt", "note": n}}))
        .collect()
}

struct Measured {
    requests: u64,
    fsyncs: u64,
    latencies_us: Vec<u64>,
}

/// Counts fsync-family syscalls of `pid` (all threads) until stopped.
struct FsyncCounter {
    child: std::process::Child,
    output: std::path::PathBuf,
}

impl FsyncCounter {
    fn attach(pid: u32, output: std::path::PathBuf) -> Self {
        let child = Command::new("strace")
            .args([
                // Only the counted calls stop the coordinator (seccomp filter): stopping it on
                // every system call, as plain `strace -f` does, slows the path being timed.
                "--seccomp-bpf",
                "-f",
                "-c",
                "-e",
                "trace=fsync,fdatasync,sync_file_range,msync",
                "-o",
            ])
            .arg(&output)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("strace is needed for this benchmark (apt-get install strace)");
        std::thread::sleep(Duration::from_millis(500));
        Self { child, output }
    }

    fn stop(mut self) -> u64 {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let summary = std::fs::read_to_string(&self.output).unwrap_or_default();
        if std::env::var_os("TOOL_PATH_SHOW_STRACE").is_some() {
            println!("{summary}");
        }
        summary
            .lines()
            .filter(|line| {
                ["fsync", "fdatasync", "sync_file_range", "msync"]
                    .iter()
                    .any(|name| line.trim_end().ends_with(name))
            })
            .filter_map(|line| line.split_whitespace().nth(3)?.parse::<u64>().ok())
            .sum()
    }
}

async fn run(
    cluster: &Cluster,
    nats: &async_nats::Client,
    workbench: &str,
    calls: Vec<Value>,
) -> anyhow::Result<Measured> {
    let model = ScriptedModel::start(script(calls)).await?;
    let requests = Arc::new(AtomicU64::new(0));
    let mut counters = Vec::new();
    for subject in ["atelier.store.>", "atelier.tool.>"] {
        let mut subscription = nats.subscribe(subject).await?;
        let requests = Arc::clone(&requests);
        counters.push(tokio::spawn(async move {
            while subscription.next().await.is_some() {
                requests.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    nats.flush().await?;
    let pid = cluster
        .coordinator
        .as_ref()
        .and_then(|process| process.pid())
        .expect("coordinator runs");
    let fsyncs = FsyncCounter::attach(pid, cluster.dir.path().join(format!("strace-{workbench}")));
    let job = cluster.submit(workbench, "Make the calls.", &model.model_spec())?;
    cluster.wait_finished(&job, Duration::from_secs(600))?;
    let fsyncs = fsyncs.stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for counter in counters {
        counter.abort();
    }
    Ok(Measured {
        requests: requests.load(Ordering::Relaxed),
        fsyncs,
        latencies_us: tool_latencies(nats, &job).await?,
    })
}

async fn tool_latencies(nats: &async_nats::Client, job: &str) -> anyhow::Result<Vec<u64>> {
    let events = atelier_tests::stored_events(nats, subjects::event(job, "tool_complete")).await?;
    let mut latencies = Vec::new();
    for event in events {
        if let EventKind::ToolComplete { ok, elapsed_us, .. } = event.kind {
            assert!(ok, "every benchmarked call succeeds");
            latencies.push(elapsed_us);
        }
    }
    Ok(latencies)
}

fn percentile<T: Copy + Ord>(values: &mut [T], p: f64) -> T {
    values.sort_unstable();
    let index = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[index]
}

async fn echo(nats: &async_nats::Client) -> anyhow::Result<(f64, f64)> {
    let mut subscription = nats.subscribe("bench.echo").await?;
    let responder = nats.clone();
    let server = tokio::spawn(async move {
        while let Some(message) = subscription.next().await {
            if let Some(reply) = message.reply {
                let _ = responder.publish(reply, message.payload).await;
            }
        }
    });
    nats.flush().await?;
    let payload = bytes::Bytes::from(vec![b'x'; 512]);
    let mut micros = Vec::with_capacity(ECHOES);
    for _ in 0..ECHOES {
        let started = Instant::now();
        nats.request("bench.echo", payload.clone()).await?;
        micros.push(started.elapsed().as_micros() as u64);
    }
    server.abort();
    let p50 = percentile(&mut micros, 0.5) as f64 / 1000.0;
    let p99 = percentile(&mut micros, 0.99) as f64 / 1000.0;
    Ok((p50, p99))
}

fn report(name: &str, measured: &mut Measured, empty: &Measured, echo_p50: f64) {
    let per_call = |total: u64, base: u64| total.saturating_sub(base) as f64 / CALLS as f64;
    let p50 = percentile(&mut measured.latencies_us, 0.5) as f64 / 1000.0;
    let p99 = percentile(&mut measured.latencies_us, 0.99) as f64 / 1000.0;
    println!(
        "{name:<28} {:>6.2} requests/call {:>6.2} fsyncs/call   p50 {p50:.3} ms  p99 {p99:.3} ms  (p50 = {:.2}× echo)",
        per_call(measured.requests, empty.requests),
        per_call(measured.fsyncs, empty.fsyncs),
        p50 / echo_p50,
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let nats = async_nats::connect(&cluster.nats.url).await?;
    let notes = cluster.dir.path().join("notes.txt");
    std::fs::write(&notes, "A small text file.\n")?;
    for workbench in ["empty", "writes", "reads"] {
        cluster.cli_ok(&["wb", "create", workbench])?;
        cluster.cli_ok(&["wb", "add", workbench, &notes.to_string_lossy()])?;
    }
    let (echo_p50, echo_p99) = echo(&nats).await?;
    let empty = run(&cluster, &nats, "empty", Vec::new()).await?;
    let mut writes = run(&cluster, &nats, "writes", write_calls()).await?;
    let mut reads = run(&cluster, &nats, "reads", read_calls()).await?;
    assert_eq!(writes.latencies_us.len(), CALLS);
    assert_eq!(reads.latencies_us.len(), CALLS);
    println!("raw async-nats echo (512 B)  p50 {echo_p50:.3} ms  p99 {echo_p99:.3} ms");
    report("write_text_file (1 KB)", &mut writes, &empty, echo_p50);
    report("get_file_info (no-op read)", &mut reads, &empty, echo_p50);
    Ok(())
}
