//! Resume time: a coordinator with 100 jobs in flight is SIGKILLed and started again; how long
//! until the first resumed job takes its next step (the interrupted model turn is asked again),
//! and until all 100 have. Baseline: the same coordinator restarting with no jobs, until it
//! answers its first control request.
//!
//! Run: `cargo build --release --bin atelier && cargo bench -p atelier-tests --bench durability`
//! (numbers in docs/benchmarks.md).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::{Cluster, wait_until};
use serde_json::json;

const JOBS: usize = 100;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let script: Script = serde_json::from_value(json!({
        "research": [{"content": "ok"}],
        "plan": [{"content": "nothing to do", "delay_ms": 600_000}],
        "summary": [{"content": "done"}]
    }))?;
    let model = ScriptedModel::start(script).await?;

    let mut cluster = Cluster::start_with(&[])?;
    cluster.kill_coordinator();
    let cold_started = Instant::now();
    cluster.start_coordinator()?;
    let cold_start = cold_started.elapsed();

    cluster.cli_ok(&["wb", "create", "bench"])?;
    for n in 0..JOBS {
        cluster.cli_ok(&[
            "submit",
            "bench",
            &format!("job {n}"),
            "--model",
            &model.model_spec(),
        ])?;
    }
    // Every job has journaled its research and waits on its plan turn.
    wait_until(Duration::from_secs(120), || {
        model.count("plan", None, 0) == JOBS
    })?;

    cluster.kill_coordinator();
    let before = model.requests().len();
    let restarted = Instant::now();
    cluster.start_coordinator()?;
    wait_until(Duration::from_secs(60), || model.requests().len() > before)?;
    let first = model.requests()[before].at.duration_since(restarted);
    wait_until(Duration::from_secs(120), || {
        model.requests().len() >= before + JOBS
    })?;
    let all = model.requests()[before + JOBS - 1]
        .at
        .duration_since(restarted);
    let research_again = model.count("research", None, 0) - JOBS;

    println!("{JOBS} jobs in flight, coordinator SIGKILLed and restarted");
    println!(
        "baseline: cold start to first answer   {:>8.1} ms",
        cold_start.as_secs_f64() * 1e3
    );
    println!(
        "restart to first resumed step          {:>8.1} ms",
        first.as_secs_f64() * 1e3
    );
    println!(
        "restart to all {JOBS} resumed             {:>8.1} ms",
        all.as_secs_f64() * 1e3
    );
    println!("research turns asked again             {research_again:>8}");
    Ok(())
}
