//! Batch benchmark: a model-free batch over 1,000 workbenches — per target a docx
//! `replace_text` and an xlsx `set_cells`, as one two-step workflow — end to end (submission,
//! the BatchRunner, one child job per target, the office pool, the draft writes), with 1 and
//! then 2 office worker processes; and, in the same run, the same edits done by a plain Python
//! script driving python-docx and openpyxl over the same files on local disk.
//!
//! Two more passes run it with 1 worker on a server that fsyncs every JetStream write
//! (`sync_interval: always`): with the coordinator's own sled, and with a replicated store whose
//! every write is committed to its changelog (docs/adr/0014), shared by one, two and then three
//! coordinators (its 16 shards split between them).
//!
//! A last pass runs a non-idempotent batch (`append_paragraph`) over the same 1,000
//! workbenches and SIGKILLs the coordinator twice while it runs, then checks that every
//! target succeeded and every draft write was applied exactly once.
//!
//! ```sh
//! pip install openpyxl python-docx
//! cargo build --release --bin atelier
//! cargo bench -p atelier-tests --bench batch
//! ```
//! `BATCH_TARGETS` (default 1000) and `BATCH_CONCURRENCY` (default 16) change the size;
//! `BATCH_PASSES` runs only some passes (see [`chosen`]); `BATCH_PROFILE` is a shell command
//! started beside each timed pass as its batch is submitted, with `COORDINATOR_PID`,
//! `WORKER_PID` and `NATS_PID` set (for `perf stat -p "$COORDINATOR_PID" -- sleep 5`).
//! `BATCH_COORDINATOR_CPU` (cores, e.g. `0.3`) holds each coordinator to that much CPU, in a
//! cgroup of its own (root only): several coordinators on one machine then stand for several
//! hosts, each bringing the same CPU, instead of sharing the same cores.
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use atelier_messages::batch::{
    BatchAction, BatchState, BatchView, GetBatch, SubmitBatch, TargetSet,
};
use atelier_messages::store::{AddFiles, CreateWorkbench, FileContent, ReadFile, View};
use atelier_messages::workflow::{Workflow, WorkflowStep};
use atelier_messages::{PROTOCOL_VERSION, subjects};
use atelier_tests::{Cluster, fixtures, simple_docx};
use atelier_transport::Policy;
use serde_json::json;

/// A replicated store's coordinators.
const REPLICATED: [(&str, &str); 1] = [("ATELIER_REPLICATED_STORE", "true")];

const PYTHON: &str = r#"
import json, os, sys, time
root, count = sys.argv[1], int(sys.argv[2])
import docx, openpyxl
t = time.perf_counter()
for n in range(count):
    folder = os.path.join(root, "w-%04d" % n)
    d = docx.Document(os.path.join(folder, "report.docx"))
    for p in d.paragraphs:
        for run in p.runs:
            if "Introduction" in run.text:
                run.text = run.text.replace("Introduction", "Introduction for w-%04d" % n)
    d.save(os.path.join(folder, "report.out.docx"))
    wb = openpyxl.load_workbook(os.path.join(folder, "sheet.xlsx"))
    ws = wb["Summary"]
    ws["H1"] = "Reviewed"
    ws["H2"] = n
    wb.save(os.path.join(folder, "sheet.out.xlsx"))
print(json.dumps({"seconds": time.perf_counter() - t}))
"#;

fn targets() -> usize {
    std::env::var("BATCH_TARGETS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000)
}

fn concurrency() -> u32 {
    std::env::var("BATCH_CONCURRENCY")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(16)
}

/// Whether `BATCH_PASSES` (a comma-separated list of `python`, `local`, `local2`, `synced`,
/// `replicated1`, `replicated2`, `replicated3`, `killed`; all when unset) chose this pass.
fn chosen(pass: &str) -> bool {
    std::env::var("BATCH_PASSES")
        .map(|passes| passes.split(',').any(|chosen| chosen.trim() == pass))
        .unwrap_or(true)
}

/// The CPU each coordinator is held to (`BATCH_COORDINATOR_CPU`, in cores), if any.
fn coordinator_cpu() -> anyhow::Result<Option<f64>> {
    match std::env::var("BATCH_COORDINATOR_CPU") {
        Ok(cores) => Ok(Some(cores.trim().parse().with_context(|| {
            format!("BATCH_COORDINATOR_CPU is a number of cores, not {cores:?}")
        })?)),
        Err(_) => Ok(None),
    }
}

fn name(n: usize) -> String {
    format!("w-{n:04}")
}

fn quick() -> Policy {
    Policy::once(Duration::from_secs(60))
}

async fn request<V: atelier_messages::verb::Verb>(
    client: &async_nats::Client,
    verb: &V,
) -> anyhow::Result<V::Reply> {
    atelier_transport::request(client, verb, quick())
        .await
        .map_err(|error| anyhow::anyhow!("{error}"))
}

/// Creates the workbenches, each with `report.docx` and `sheet.xlsx`.
async fn create_workbenches(
    client: &async_nats::Client,
    count: usize,
    docx: &[u8],
    xlsx: &[u8],
) -> anyhow::Result<()> {
    for n in 0..count {
        let workbench = name(n);
        request(
            client,
            &CreateWorkbench {
                v: PROTOCOL_VERSION,
                workbench: workbench.clone(),
            },
        )
        .await?;
        let files = vec![
            FileContent::inline("report.docx", docx.to_vec()),
            FileContent::inline("sheet.xlsx", xlsx.to_vec()),
        ];
        request(
            client,
            &AddFiles {
                v: PROTOCOL_VERSION,
                workbench,
                files,
            },
        )
        .await?;
    }
    Ok(())
}

fn step(tool: &str, args: serde_json::Value) -> WorkflowStep {
    WorkflowStep {
        tool: tool.into(),
        args,
        name: None,
    }
}

fn edit_workflow() -> Workflow {
    Workflow {
        name: Some("review".into()),
        steps: vec![
            step(
                "docx_operations",
                json!({"path": "report.docx", "operations": [
                    {"op": "replace_text", "search": "Introduction", "replace": "Introduction for {{workbench}}"}]}),
            ),
            step(
                "xlsx_operations",
                json!({"path": "sheet.xlsx", "operations": [{"op": "set_cells", "sheet": "Summary", "cells": [
                    {"cell": "H1", "value": "Reviewed"}, {"cell": "H2", "value": "{{index}}", "type": "number"}]}]}),
            ),
        ],
    }
}

fn append_workflow() -> Workflow {
    Workflow {
        name: Some("append".into()),
        steps: vec![step(
            "docx_operations",
            json!({"path": "report.docx", "operations": [
                {"op": "append_paragraph", "text": "Appended once for {{workbench}}"}]}),
        )],
    }
}

async fn submit(
    client: &async_nats::Client,
    batch_id: &str,
    workflow: Workflow,
    continue_draft: bool,
) -> anyhow::Result<()> {
    let submit = SubmitBatch {
        v: PROTOCOL_VERSION,
        batch_id: batch_id.into(),
        targets: TargetSet::Workbenches {
            names: Vec::new(),
            glob: Some("w-*".into()),
        },
        action: BatchAction::Workflow {
            workflow,
            vars: Default::default(),
        },
        concurrency: Some(concurrency()),
        tolerate_failures: None,
        time_limit_secs: None,
        priority: None,
        auto_approve: true,
        continue_draft,
        budget: Default::default(),
    };
    request(client, &submit).await?;
    Ok(())
}

async fn status(client: &async_nats::Client, batch_id: &str) -> anyhow::Result<BatchView> {
    request(
        client,
        &GetBatch {
            v: PROTOCOL_VERSION,
            batch_id: batch_id.into(),
        },
    )
    .await
}

async fn wait_end(client: &async_nats::Client, batch_id: &str) -> anyhow::Result<BatchView> {
    loop {
        // The coordinator may be restarting.
        if let Ok(view) = status(client, batch_id).await
            && view.state.is_terminal()
        {
            return Ok(view);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Peak resident memory of a process, in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

struct Pass {
    workers: usize,
    seconds: f64,
    coordinator_peak_mib: f64,
    store: Store,
    /// CPU seconds spent during the batch by the coordinators, the workers and nats-server.
    cpu: Cpu,
    /// Messages written to each JetStream stream during the batch.
    writes: Vec<(&'static str, u64)>,
    /// The share of the machine's CPU time that was busy during the batch.
    machine_busy: f64,
}

/// The machine's CPU time so far, busy and in all, in clock ticks (`/proc/stat`).
fn machine_ticks() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> = (stat.lines().next().unwrap_or_default())
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    let all: f64 = ticks.iter().sum();
    // Fields 4 and 5 are idle and waiting for I/O.
    let idle = ticks.get(3).copied().unwrap_or(0.0) + ticks.get(4).copied().unwrap_or(0.0);
    (all - idle, all)
}

/// The streams a batch writes to, with the names the table gives them.
const STREAMS: [(&str, &str); 5] = [
    (subjects::JOBS_STREAM, "jobs"),
    (subjects::EVENTS_STREAM, "events"),
    (subjects::workshop::EVENTS_STREAM, "workshop"),
    (subjects::batch::EVENTS_STREAM, "batch"),
    (subjects::shard::LOG_STREAM, "changelog"),
];

/// How many messages each stream has taken so far (its last sequence; 0 for one not made).
async fn stream_writes(client: &async_nats::Client) -> Vec<(&'static str, u64)> {
    let jetstream = async_nats::jetstream::new(client.clone());
    let mut writes = Vec::new();
    for (stream, label) in STREAMS {
        let last = match jetstream.get_stream(stream).await {
            Ok(mut stream) => stream
                .info()
                .await
                .map_or(0, |info| info.state.last_sequence),
            Err(_) => 0,
        };
        writes.push((label, last));
    }
    writes
}

/// CPU seconds used during a pass, by kind of process.
#[derive(Default)]
struct Cpu {
    coordinators: f64,
    workers: f64,
    nats: f64,
}

impl Cpu {
    /// Each process's CPU seconds so far.
    fn read(coordinators: &[u32], workers: &[u32], nats: &[u32]) -> Self {
        let sum = |pids: &[u32]| {
            pids.iter()
                .map(|pid| atelier_tests::cpu_seconds(*pid))
                .sum()
        };
        Self {
            coordinators: sum(coordinators),
            workers: sum(workers),
            nats: sum(nats),
        }
    }

    fn since(self, before: &Self) -> Self {
        Self {
            coordinators: self.coordinators - before.coordinators,
            workers: self.workers - before.workers,
            nats: self.nats - before.nats,
        }
    }
}

/// Where a pass's coordinator keeps its store.
#[derive(Debug, Clone, Copy)]
enum Store {
    /// Its own sled, on a stock server (JetStream's default `sync_interval`).
    Local,
    /// Its own sled, on a server that fsyncs every JetStream write.
    LocalSynced,
    /// Replicated (docs/adr/0014): every write committed to the changelog, on a server that
    /// fsyncs every JetStream write, as a replicated deployment's servers run; this many
    /// coordinators share its 16 shards.
    Replicated(usize),
}

impl Store {
    fn label(self) -> &'static str {
        match self {
            Self::Local => "own sled, stock server",
            Self::LocalSynced => "own sled, server with `sync_interval: always`",
            Self::Replicated(1) => {
                "replicated store (changelog, 16 shards), server with `sync_interval: always`"
            }
            Self::Replicated(2) => "replicated store, 2 coordinators sharing the 16 shards",
            Self::Replicated(_) => "replicated store, 3 coordinators sharing the 16 shards",
        }
    }

    /// The cluster and the coordinators beyond its own (they stop when dropped).
    fn cluster(self, pools: &[&str]) -> anyhow::Result<(Cluster, Vec<atelier_tests::Process>)> {
        match self {
            Self::Local => Ok((Cluster::start_with(pools)?, Vec::new())),
            Self::LocalSynced => Ok((Cluster::start_synced(pools, &[])?, Vec::new())),
            Self::Replicated(coordinators) => {
                let cluster = Cluster::start_synced(pools, &REPLICATED)?;
                let mut more = Vec::new();
                for n in 1..coordinators {
                    let name = format!("coordinator-{n}");
                    more.push(cluster.spawn_coordinator(&name, &REPLICATED)?);
                }
                // Until the shards are split: each coordinator serves its share.
                atelier_tests::wait_until(Duration::from_secs(60), || {
                    (1..coordinators).all(|n| {
                        let log = cluster.dir.path().join(format!("coordinator-{n}.log"));
                        std::fs::read_to_string(log)
                            .is_ok_and(|log| log.contains("serving the shard"))
                    })
                })?;
                Ok((cluster, more))
            }
        }
    }
}

async fn timed_pass(
    store: Store,
    workers: usize,
    docx: &[u8],
    xlsx: &[u8],
) -> anyhow::Result<Pass> {
    let pools = vec!["office"; workers];
    let (cluster, more_coordinators) = store.cluster(&pools)?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let count = targets();
    create_workbenches(&client, count, docx, xlsx).await?;
    let coordinators: Vec<u32> = cluster
        .coordinator
        .iter()
        .chain(&more_coordinators)
        .filter_map(atelier_tests::Process::pid)
        .collect();
    let worker_pids: Vec<u32> = cluster
        .workers
        .iter()
        .filter_map(atelier_tests::Process::pid)
        .collect();
    let nats: Vec<u32> = cluster.nats.pid().into_iter().collect();
    let _cap = match coordinator_cpu()? {
        Some(cores) => Some(atelier_tests::cpu_cap::CpuCap::apply(&coordinators, cores)?),
        None => None,
    };
    let machine_before = machine_ticks();
    let cpu_before = Cpu::read(&coordinators, &worker_pids, &nats);
    let writes_before = stream_writes(&client).await;
    let profiler = profile(&coordinators, &worker_pids, &nats).await?;
    let started = Instant::now();
    submit(&client, "bench", edit_workflow(), false).await?;
    let view = wait_end(&client, "bench").await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = Cpu::read(&coordinators, &worker_pids, &nats).since(&cpu_before);
    let machine_after = machine_ticks();
    let machine_busy =
        (machine_after.0 - machine_before.0) / (machine_after.1 - machine_before.1).max(1.0);
    let writes = stream_writes(&client)
        .await
        .into_iter()
        .zip(writes_before)
        .map(|((label, after), (_, before))| (label, after - before))
        .collect();
    if let Some(mut profiler) = profiler {
        profiler.wait().await?;
    }
    ensure!(
        view.state == BatchState::Succeeded && view.counts.succeeded == count as u64,
        "the batch did not succeed: {view:?}"
    );
    let pid = cluster
        .coordinator
        .as_ref()
        .and_then(atelier_tests::Process::pid)
        .unwrap_or(0);
    Ok(Pass {
        store,
        workers,
        seconds,
        coordinator_peak_mib: peak_rss_mib(pid),
        cpu,
        writes,
        machine_busy,
    })
}

/// Starts `BATCH_PROFILE`, if set, on the pass's processes (the first of each kind), and gives
/// it a moment to attach.
async fn profile(
    coordinators: &[u32],
    workers: &[u32],
    nats: &[u32],
) -> anyhow::Result<Option<tokio::process::Child>> {
    let Ok(command) = std::env::var("BATCH_PROFILE") else {
        return Ok(None);
    };
    let first = |pids: &[u32]| pids.first().map(u32::to_string).unwrap_or_default();
    let child = tokio::process::Command::new("sh")
        .args(["-c", &command])
        .env("COORDINATOR_PID", first(coordinators))
        .env("WORKER_PID", first(workers))
        .env("NATS_PID", first(nats))
        .spawn()
        .context("start BATCH_PROFILE")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(Some(child))
}

/// The non-idempotent batch with two coordinator SIGKILLs; returns the seconds it took.
async fn killed_pass(docx: &[u8], xlsx: &[u8]) -> anyhow::Result<f64> {
    let mut cluster = Cluster::start_with(&["office", "office"])?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let count = targets();
    create_workbenches(&client, count, docx, xlsx).await?;
    let started = Instant::now();
    submit(&client, "killed", append_workflow(), false).await?;
    for fraction in [4, 2] {
        loop {
            let view = status(&client, "killed").await?;
            if view.counts.done() >= (count / fraction) as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        cluster.kill_coordinator();
        cluster.start_coordinator()?;
    }
    let view = wait_end(&client, "killed").await?;
    let seconds = started.elapsed().as_secs_f64();
    ensure!(
        view.state == BatchState::Succeeded && view.counts.succeeded == count as u64,
        "the killed batch did not succeed: {view:?}"
    );
    // No write is logged as applied twice (a kill right after a write and before its log line
    // leaves one unlogged: the documents below are the proof).
    let applied = cluster.applied_writes();
    ensure!(
        applied
            .iter()
            .filter(|(call_id, _)| call_id.starts_with("killed-"))
            .all(|(_, times)| *times == 1),
        "a write was applied twice"
    );
    // Every document holds its appended paragraph exactly once.
    for n in 0..count {
        let file = request(
            &client,
            &ReadFile {
                v: PROTOCOL_VERSION,
                workbench: name(n),
                path: "report.docx".into(),
                view: View::Draft,
            },
        )
        .await?;
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(file.content.into_vec()))?;
        let mut xml = String::new();
        std::io::Read::read_to_string(&mut archive.by_name("word/document.xml")?, &mut xml)?;
        let marker = format!("Appended once for {}<", name(n));
        ensure!(
            xml.matches(&marker).count() == 1,
            "{}: not exactly once",
            name(n)
        );
    }
    Ok(seconds)
}

fn python_baseline(root: &Path, docx: &[u8], xlsx: &[u8]) -> anyhow::Result<Option<f64>> {
    let count = targets();
    for n in 0..count {
        let folder = root.join(name(n));
        std::fs::create_dir_all(&folder)?;
        std::fs::write(folder.join("report.docx"), docx)?;
        std::fs::write(folder.join("sheet.xlsx"), xlsx)?;
    }
    let output = std::process::Command::new("python3")
        .args(["-c", PYTHON])
        .arg(root)
        .arg(count.to_string())
        .output()
        .context("python3 is missing")?;
    if !output.status.success() {
        println!(
            "python baseline skipped: {}",
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return Ok(None);
    }
    let result: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    Ok(result["seconds"].as_f64())
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let docx = std::fs::read(simple_docx())?;
    let xlsx = std::fs::read(fixtures().join("keenbench/office/multi-sheet.xlsx"))?;
    let count = targets();
    let scratch = tempfile::tempdir()?;
    let python = match chosen("python") {
        true => python_baseline(scratch.path(), &docx, &xlsx)?,
        false => None,
    };
    let mut passes = Vec::new();
    let setups = [
        ("local", Store::Local, 1),
        ("local2", Store::Local, 2),
        ("synced", Store::LocalSynced, 1),
        ("replicated1", Store::Replicated(1), 1),
        ("replicated2", Store::Replicated(2), 1),
        ("replicated3", Store::Replicated(3), 1),
    ];
    for (_, store, workers) in setups.into_iter().filter(|(name, ..)| chosen(name)) {
        passes.push(timed_pass(store, workers, &docx, &xlsx).await?);
    }
    let killed = match chosen("killed") {
        true => Some(killed_pass(&docx, &xlsx).await?),
        false => None,
    };
    println!(
        "{count} targets, concurrency {}, two steps per target (docx replace_text, xlsx set_cells)\n",
        concurrency()
    );
    if let Some(cores) = coordinator_cpu()? {
        println!("Each coordinator held to {cores} CPU (a cgroup of its own).\n");
    }
    println!(
        "| run | wall time | targets/s | coordinator peak RSS | CPU ms per target: coordinators / workers / nats-server | machine CPU busy |"
    );
    println!("|---|---|---|---|---|---|");
    let per_target = |seconds: f64| seconds * 1000.0 / count as f64;
    for pass in &passes {
        println!(
            "| batch, {}, {} office worker(s) | {:.1} s | {:.1} | {:.0} MiB | {:.1} / {:.1} / {:.1} | {:.0} % |",
            pass.store.label(),
            pass.workers,
            pass.seconds,
            count as f64 / pass.seconds,
            pass.coordinator_peak_mib,
            per_target(pass.cpu.coordinators),
            per_target(pass.cpu.workers),
            per_target(pass.cpu.nats),
            pass.machine_busy * 100.0,
        );
    }
    if let Some(seconds) = python {
        println!(
            "| python-docx + openpyxl script, local files, one process | {seconds:.1} s | {:.1} | — | — | — |",
            count as f64 / seconds
        );
    }
    if let Some(killed) = killed {
        println!(
            "| append_paragraph batch, 2 workers, coordinator SIGKILLed twice (every write applied once) | {killed:.1} s | {:.1} | — | — | — |",
            count as f64 / killed
        );
    }
    print_writes(&passes, count);
    Ok(())
}

/// JetStream messages written per target, by stream: what a server that fsyncs every write
/// (`sync_interval: always`) pays for.
fn print_writes(passes: &[Pass], count: usize) {
    let Some(first) = passes.first() else {
        return;
    };
    let labels: Vec<&str> = first.writes.iter().map(|(label, _)| *label).collect();
    println!(
        "\n| run | JetStream writes per target: {} |",
        labels.join(" / ")
    );
    println!("|---|---|");
    for pass in passes {
        let per_target: Vec<String> = pass
            .writes
            .iter()
            .map(|(_, writes)| format!("{:.2}", *writes as f64 / count as f64))
            .collect();
        println!(
            "| batch, {}, {} office worker(s) | {} |",
            pass.store.label(),
            pass.workers,
            per_target.join(" / ")
        );
    }
}
