//! Per-step cost of journaling (sled insert + flush, i.e. fsync) against the floor of the same
//! disk: appending the same bytes to a plain file and `fdatasync`-ing it.
//!
//! Run: `cargo bench -p atelier-coordinator --bench journal` (numbers in docs/benchmarks.md).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::time::{Duration, Instant};

use atelier_coordinator::jobs::Jobs;
use atelier_coordinator::storage::Storage;

const STEPS: usize = 2_000;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

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
    let jobs = Jobs::new(storage);
    let mut journal = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        let started = Instant::now();
        jobs.record("bench-job", &format!("model/implement/1/1/{step}"), &entry)
            .expect("record");
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

    println!("{STEPS} steps of {} bytes each", bytes.len());
    let (journal_p50, journal_p99) = report("journal (sled + flush)", &mut journal);
    let (plain_p50, plain_p99) = report("baseline (append + fdatasync)", &mut plain);
    println!(
        "ratio journal/baseline        p50 {:.2}x   p99 {:.2}x",
        journal_p50.as_secs_f64() / plain_p50.as_secs_f64(),
        journal_p99.as_secs_f64() / plain_p99.as_secs_f64()
    );
}
