//! The cost of one tool call on the job path: NATS requests, fsyncs and latency of a write
//! (`write_text_file` of 1 KB) and of a no-op read (`get_file_info` on a small text file), next
//! to a raw async-nats request/reply echo on the same server in the same run.
//!
//! A job with a scripted model makes `CALLS` calls of one kind in one plan item (`BATCH` per
//! model turn). Requests are counted by a client subscribed to `atelier.store.>` and
//! `atelier.tool.>`; fsyncs by `strace -f -c` attached to the coordinator for the job; both
//! minus the same job with no calls, divided by `CALLS` (strace's seccomp filter stops the
//! coordinator only on those calls, not on every system call). Latency is timed on a second
//! job of the same calls with no strace attached (a traced process is slower on every call,
//! not only on the traced ones): each call's `tool_complete` `elapsed_us` (the orchestrator's
//! dispatch to result in hand, store write included), split into legs by when the server
//! delivered the request, the worker's "taken" and its reply (see [`Legs`]). The same no-op
//! read is also sent straight to the office pool by the bench's idle client: the call without
//! the coordinator. Each timed job is compared with the echo measured just before and just
//! after it (the machine drifts between minutes more than a variant of the engine moves the
//! calls; run the bench several times to compare two builds).
//!
//! Run: `cargo build --release --bin atelier && cargo bench -p atelier-tests --bench tool_path`
//! (needs `strace`; numbers in docs/benchmarks.md).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use atelier_messages::job::EventKind;
use atelier_messages::store::{ListFiles, Listing, View};
use atelier_messages::tool::{Pool, ToolOutput, ToolRequest};
use atelier_messages::{PROTOCOL_VERSION, subjects};
use atelier_tests::Cluster;
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_transport::Policy;
use atelier_transport::headers::has_progress_mark;
use futures::StreamExt;
use serde_json::{Value, json};

const CALLS: usize = 200;
const BATCH: usize = 20;
const ECHOES: usize = 1_000;

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

fn write_calls(tag: char) -> Vec<Value> {
    // 1 KB each, every one different, in each job too (so each is a new blob to store).
    (0..CALLS)
        .map(|n| {
            let content = format!("{n:08}") + &tag.to_string().repeat(1015) + "\n";
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
    legs: Legs,
}

/// Whether a job's coordinator is traced to count fsyncs (its latencies are then not kept) or
/// left alone to be timed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Counted,
    Timed,
}

/// When the bench's own connection saw each tool request and the messages back to its reply
/// inbox (the worker's "taken" progress and its reply): how a call's time splits between the
/// worker and the coordinator, as seen from the server (the observer's own delay cancels out).
#[derive(Default)]
struct Legs {
    requested: HashMap<String, Instant>,
    taken: HashMap<String, Instant>,
    answered: HashMap<String, Instant>,
}

impl Legs {
    /// Per call: request to "taken", "taken" to reply, request to reply (µs).
    fn spans(&self) -> [Vec<u64>; 3] {
        let mut spans: [Vec<u64>; 3] = Default::default();
        for (inbox, requested) in &self.requested {
            let (Some(taken), Some(answered)) = (self.taken.get(inbox), self.answered.get(inbox))
            else {
                continue;
            };
            let micros = |from: &Instant, to: &Instant| to.duration_since(*from).as_micros() as u64;
            spans[0].push(micros(requested, taken));
            spans[1].push(micros(taken, answered));
            spans[2].push(micros(requested, answered));
        }
        spans
    }
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
    pass: Pass,
) -> anyhow::Result<Measured> {
    cluster.cli_ok(&["wb", "create", workbench])?;
    let notes = cluster.dir.path().join("notes.txt");
    cluster.cli_ok(&["wb", "add", workbench, &notes.to_string_lossy()])?;
    let model = ScriptedModel::start(script(calls)).await?;
    let requests = Arc::new(AtomicU64::new(0));
    let legs = Arc::new(Mutex::new(Legs::default()));
    let mut counters = Vec::new();
    for subject in ["atelier.store.>", "atelier.tool.>"] {
        let mut subscription = nats.subscribe(subject).await?;
        let requests = Arc::clone(&requests);
        let legs = Arc::clone(&legs);
        counters.push(tokio::spawn(async move {
            while let Some(message) = subscription.next().await {
                let seen = Instant::now();
                requests.fetch_add(1, Ordering::Relaxed);
                if let Some(reply) = message.reply {
                    legs.lock()
                        .unwrap()
                        .requested
                        .insert(reply.to_string(), seen);
                }
            }
        }));
    }
    let mut replies = nats
        .subscribe(format!("{}.>", subjects::inbox::COORDINATOR))
        .await?;
    let reply_legs = Arc::clone(&legs);
    counters.push(tokio::spawn(async move {
        while let Some(message) = replies.next().await {
            let seen = Instant::now();
            let mut legs = reply_legs.lock().unwrap();
            let inbox = message.subject.to_string();
            match has_progress_mark(message.headers.as_ref()) {
                true => legs.taken.entry(inbox).or_insert(seen),
                false => legs.answered.entry(inbox).or_insert(seen),
            };
        }
    }));
    nats.flush().await?;
    let pid = cluster
        .coordinator
        .as_ref()
        .and_then(|process| process.pid())
        .expect("coordinator runs");
    let strace = cluster.dir.path().join(format!("strace-{workbench}"));
    let counter = (pass == Pass::Counted).then(|| FsyncCounter::attach(pid, strace));
    let job = cluster.submit(workbench, "Make the calls.", &model.model_spec())?;
    cluster.wait_finished(&job, Duration::from_secs(600))?;
    let fsyncs = counter.map_or(0, FsyncCounter::stop);
    tokio::time::sleep(Duration::from_millis(200)).await;
    for counter in counters {
        counter.abort();
    }
    let legs = std::mem::take(&mut *legs.lock().unwrap());
    Ok(Measured {
        requests: requests.load(Ordering::Relaxed),
        fsyncs,
        latencies_us: tool_latencies(nats, &job).await?,
        legs,
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

/// `ECHOES` raw request/reply round trips on the same server (µs each).
async fn echo(nats: &async_nats::Client) -> anyhow::Result<Vec<u64>> {
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
    Ok(micros)
}

/// The echo's samples just before and just after a timed job, together: the baseline of that
/// job, measured in the same minute (the machine drifts between minutes more than the calls
/// differ).
fn around(before: &[u64], after: &[u64]) -> Vec<u64> {
    before.iter().chain(after).copied().collect()
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

/// The same no-op read sent straight to the office pool by this idle client (no coordinator):
/// the worker's part of a call, with the transport's progress handling, from end to end.
async fn direct_reads(nats: &async_nats::Client, workbench: &str) -> anyhow::Result<Vec<u64>> {
    let listing: Listing = atelier_transport::request(
        nats,
        &ListFiles {
            v: PROTOCOL_VERSION,
            workbench: workbench.to_string(),
            view: View::Current,
        },
        Policy::once(Duration::from_secs(10)),
    )
    .await
    .map_err(|error| anyhow::anyhow!("{error:?}"))?;
    let mut micros = Vec::with_capacity(CALLS);
    for n in 0..CALLS {
        let request = ToolRequest {
            v: PROTOCOL_VERSION,
            call_id: format!("direct.{n}"),
            job_id: None,
            workbench: workbench.to_string(),
            tool: "get_file_info".into(),
            args: json!({"path": "notes.txt"}),
            files: listing.files.clone(),
        };
        let started = Instant::now();
        let output: ToolOutput =
            atelier_transport::request_to(nats, &Pool::Office.subject(), &request, Policy::TOOLS)
                .await
                .map_err(|error| anyhow::anyhow!("{error:?}"))?;
        micros.push(started.elapsed().as_micros() as u64);
        assert_eq!(output.call_id, request.call_id);
    }
    Ok(micros)
}

fn report(name: &str, counted: &Measured, timed: &mut Measured, empty: &Measured, echo_p50: f64) {
    let per_call = |total: u64, base: u64| total.saturating_sub(base) as f64 / CALLS as f64;
    let p50 = percentile(&mut timed.latencies_us, 0.5) as f64 / 1000.0;
    let p99 = percentile(&mut timed.latencies_us, 0.99) as f64 / 1000.0;
    println!(
        "{name:<28} {:>6.2} requests/call {:>6.2} fsyncs/call   p50 {p50:.3} ms  p99 {p99:.3} ms  (p50 = {:.2}× echo)",
        per_call(counted.requests, empty.requests),
        per_call(counted.fsyncs, empty.fsyncs),
        p50 / echo_p50,
    );
    let [to_taken, to_reply, on_the_wire] = timed.legs.spans();
    let median = |mut values: Vec<u64>| match values.is_empty() {
        true => f64::NAN,
        false => percentile(&mut values, 0.5) as f64 / 1000.0,
    };
    let on_the_wire = median(on_the_wire);
    println!(
        "{:<28} request to taken p50 {:.3} ms, taken to reply {:.3} ms, request to reply {on_the_wire:.3} ms; the rest (coordinator and its hops to the server) {:.3} ms",
        "",
        median(to_taken),
        median(to_reply),
        p50 - on_the_wire,
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let nats = async_nats::connect(&cluster.nats.url).await?;
    std::fs::write(cluster.dir.path().join("notes.txt"), "A small text file.\n")?;
    let empty = run(&cluster, &nats, "empty", Vec::new(), Pass::Counted).await?;
    let writes = run(
        &cluster,
        &nats,
        "writes-counted",
        write_calls('c'),
        Pass::Counted,
    )
    .await?;
    let reads = run(
        &cluster,
        &nats,
        "reads-counted",
        read_calls(),
        Pass::Counted,
    )
    .await?;
    let before_writes = echo(&nats).await?;
    let mut timed_writes = run(&cluster, &nats, "writes", write_calls('t'), Pass::Timed).await?;
    let before_reads = echo(&nats).await?;
    let mut timed_reads = run(&cluster, &nats, "reads", read_calls(), Pass::Timed).await?;
    let mut direct = direct_reads(&nats, "reads").await?;
    let after_reads = echo(&nats).await?;
    assert_eq!(timed_writes.latencies_us.len(), CALLS);
    assert_eq!(timed_reads.latencies_us.len(), CALLS);
    let mut writes_echo = around(&before_writes, &before_reads);
    let mut reads_echo = around(&before_reads, &after_reads);
    let writes_echo_p50 = ms(percentile(&mut writes_echo, 0.5));
    let reads_echo_p50 = ms(percentile(&mut reads_echo, 0.5));
    println!(
        "raw async-nats echo (512 B)  p50 {reads_echo_p50:.3} ms  p99 {:.3} ms  (around the reads; around the writes p50 {writes_echo_p50:.3} ms)",
        ms(percentile(&mut reads_echo, 0.99)),
    );
    report(
        "write_text_file (1 KB)",
        &writes,
        &mut timed_writes,
        &empty,
        writes_echo_p50,
    );
    report(
        "get_file_info (no-op read)",
        &reads,
        &mut timed_reads,
        &empty,
        reads_echo_p50,
    );
    let direct_p50 = ms(percentile(&mut direct, 0.5));
    println!(
        "{:<28} p50 {direct_p50:.3} ms  p99 {:.3} ms  (p50 = {:.2}× echo)",
        "get_file_info, no coordinator",
        ms(percentile(&mut direct, 0.99)),
        direct_p50 / reads_echo_p50,
    );
    Ok(())
}
