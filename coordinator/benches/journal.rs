//! Per-step cost of journaling (sled insert + flush, i.e. fsync: a step committed through the
//! job store's `Store`, as the coordinator journals one) against the floor of the same
//! disk: appending the same bytes to a plain file and `fdatasync`-ing it; then the same steps on
//! a replicated store (each flush a commit to the changelog on a local nats-server with
//! `sync_interval: always`), one writer at a time and eight at once (group commit).
//!
//! Run: `cargo bench -p atelier-coordinator --bench journal` (numbers in docs/benchmarks.md;
//! needs `nats-server` on the PATH).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use atelier_coordinator::jobs::Jobs;
use atelier_coordinator::replication::ReplicationSettings;
use atelier_coordinator::replication::ownership::{Ownership, take_store};
use atelier_coordinator::storage::{Durability, Storage, Store};
use common::{nats_server, percentile};

mod common;

/// Writers of the concurrent runs, and steps each.
const WRITERS: usize = 8;
const EACH: usize = 250;

/// A store held by lease on `url`, its writes committed to the changelog.
fn replicated(runtime: &tokio::runtime::Runtime, url: &str, dir: &Path) -> (Storage, Ownership) {
    runtime.block_on(async {
        let client = async_nats::connect(url).await.expect("nats");
        let jetstream = async_nats::jetstream::new(client);
        let ownership = take_store(&jetstream, ReplicationSettings::default(), "bench", dir)
            .await
            .expect("the store");
        let storage = Storage::replicated(ownership.db.clone(), ownership.log.clone());
        (storage, ownership)
    })
}

/// Steps per second with `WRITERS` writers journaling `EACH` steps each at once.
/// Journals one step and commits it, as the coordinator does (on this thread: no runtime here).
fn journal_step(jobs: &Store<Jobs>, job_id: &str, key: &str, entry: &serde_json::Value) {
    jobs.write_here(Durability::Commit, |jobs| jobs.record(job_id, key, entry))
        .expect("record");
}

fn concurrent(storage: &Storage, entry: &serde_json::Value) -> f64 {
    let jobs = Store::new(Jobs::new(storage.clone()));
    let started = Instant::now();
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let jobs = jobs.clone();
            scope.spawn(move || {
                for step in 0..EACH {
                    journal_step(
                        &jobs,
                        &format!("job-{writer}"),
                        &format!("model/{step}"),
                        entry,
                    );
                }
            });
        }
    });
    (WRITERS * EACH) as f64 / started.elapsed().as_secs_f64()
}

const STEPS: usize = 2_000;

fn report(name: &str, samples: &mut [Duration]) -> (Duration, Duration) {
    let p50 = percentile(samples, 0.50);
    let p99 = percentile(samples, 0.99);
    println!(
        "{name:<28} p50 {:>8.3} ms   p99 {:>8.3} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    (p50, p99)
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A model turn as journaled: ~2 KB of JSON.
    let entry = serde_json::json!({
        "content": "x".repeat(1_500),
        "tool_calls": [{"id": "call-1", "name": "table_query", "arguments": "{\"path\":\"sales.csv\",\"query\":\"SELECT region, SUM(units) FROM data GROUP BY region\"}"}],
        "finish_reason": "tool_calls",
        "usage": {"prompt_tokens": 1200, "completion_tokens": 80}
    });
    let bytes = serde_json::to_vec(&entry).expect("json");

    let storage = Storage::open(&dir.path().join("db")).expect("sled");
    let jobs = Store::new(Jobs::new(storage));
    let mut journal = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        let started = Instant::now();
        journal_step(
            &jobs,
            "bench-job",
            &format!("model/implement/1/1/{step}"),
            &entry,
        );
        journal.push(started.elapsed());
    }

    let mut file = std::fs::File::create(dir.path().join("plain.log")).expect("file");
    let mut plain = Vec::with_capacity(STEPS);
    for _ in 0..STEPS {
        let started = Instant::now();
        file.write_all(&bytes).expect("write");
        file.sync_data().expect("fdatasync");
        plain.push(started.elapsed());
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (_server, url) = nats_server(dir.path(), true);
    let (replicated_store, _ownership) = replicated(&runtime, &url, &dir.path().join("replicated"));
    let replicated_jobs = Store::new(Jobs::new(replicated_store.clone()));
    let mut changelog = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        let started = Instant::now();
        journal_step(
            &replicated_jobs,
            "bench-job",
            &format!("model/implement/1/1/{step}"),
            &entry,
        );
        changelog.push(started.elapsed());
    }

    println!("{STEPS} steps of {} bytes each", bytes.len());
    let (journal_p50, journal_p99) = report("journal (sled + flush)", &mut journal);
    let (plain_p50, plain_p99) = report("baseline (append + fdatasync)", &mut plain);
    println!(
        "ratio journal/baseline        p50 {:.2}x   p99 {:.2}x",
        journal_p50.as_secs_f64() / plain_p50.as_secs_f64(),
        journal_p99.as_secs_f64() / plain_p99.as_secs_f64()
    );
    let (changelog_p50, changelog_p99) = report("journal (changelog commit)", &mut changelog);
    println!(
        "ratio changelog/sled flush    p50 {:.2}x   p99 {:.2}x",
        changelog_p50.as_secs_f64() / journal_p50.as_secs_f64(),
        changelog_p99.as_secs_f64() / journal_p99.as_secs_f64()
    );

    let local = Storage::open(&dir.path().join("concurrent")).expect("sled");
    let local_rate = concurrent(&local, &entry);
    let replicated_rate = concurrent(&replicated_store, &entry);
    println!("{WRITERS} writers x {EACH} steps at once:");
    println!("  sled + flush per step        {local_rate:>8.0} steps/s");
    println!(
        "  changelog (group commit)     {replicated_rate:>8.0} steps/s   ratio {:.2}x",
        replicated_rate / local_rate
    );
}
