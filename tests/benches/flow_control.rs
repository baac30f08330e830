//! Flow-control benchmark: a message batch of 1,000 targets against a scripted OpenAI-protocol
//! provider that accepts R requests in any minute (429 with `Retry-After` beyond it), with the
//! model profile declaring `requests_per_minute = R`; once with one coordinator (its own
//! store), once with three coordinators sharing a replicated store's 16 shards (each its own
//! process, as on three hosts). Reports the rate achieved over the middle 80 % of the calls as
//! a fraction of R (goal ≥ 0.9) and the answers of 429 after the first minute (goal 0).
//!
//! ```sh
//! cargo build --release --bin atelier
//! cargo bench -p atelier-tests --bench flow_control
//! ```
//! `FC_TARGETS` (default 1000), `FC_RPM` (R, default 1200), `FC_DELAY_MS` (each answer's delay,
//! default 250) and `FC_CONCURRENCY` (targets in flight, default 64) change the run;
//! `FC_PASSES` (`one`, `three`; both when unset) chooses the passes.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::batch::{
    BatchAction, BatchState, BatchView, GetBatch, SubmitBatch, TargetSet,
};
use atelier_messages::store::CreateWorkbench;
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::{Cluster, Process};
use atelier_transport::Policy;
use serde_json::json;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn chosen(pass: &str) -> bool {
    std::env::var("FC_PASSES")
        .map(|passes| passes.split(',').any(|chosen| chosen.trim() == pass))
        .unwrap_or(true)
}

/// Each job: research, plan, a write and its answer, a summary — five calls.
fn script(delay_ms: u64) -> anyhow::Result<Script> {
    let turn = |content: &str| json!({"content": content, "delay_ms": delay_ms});
    Ok(serde_json::from_value(json!({
        "research": [turn("The workbench is empty.")],
        "plan": [turn("- [ ] 1. Note — write the note → note.txt")],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "note.txt", "content": "noted\n"}}], "delay_ms": delay_ms},
            turn("Wrote note.txt.")
        ]},
        "summary": [turn("note.txt holds the note.")]
    }))?)
}

const CALLS_PER_TARGET: usize = 5;

async fn request<V: atelier_messages::verb::Verb>(
    client: &async_nats::Client,
    verb: &V,
) -> anyhow::Result<V::Reply> {
    atelier_transport::request(client, verb, Policy::once(Duration::from_secs(60)))
        .await
        .map_err(|error| anyhow::anyhow!("{error}"))
}

/// The cluster with `coordinators` coordinators reading `config` (a replicated store for more
/// than one), and the coordinators beyond its own.
fn start(coordinators: usize, config: &str) -> anyhow::Result<(Cluster, Vec<Process>)> {
    let one = [("ATELIER_CONFIG", config)];
    let replicated = [
        ("ATELIER_CONFIG", config),
        ("ATELIER_REPLICATED_STORE", "true"),
    ];
    if coordinators == 1 {
        return Ok((
            Cluster::start_synced(&["tabular", "office"], &one)?,
            Vec::new(),
        ));
    }
    let cluster = Cluster::start_synced(&["tabular", "office"], &replicated)?;
    let mut more = Vec::new();
    for n in 1..coordinators {
        more.push(cluster.spawn_coordinator(&format!("coordinator-{n}"), &replicated)?);
    }
    atelier_tests::wait_until(Duration::from_secs(60), || {
        (1..coordinators).all(|n| {
            let log = cluster.dir.path().join(format!("coordinator-{n}.log"));
            std::fs::read_to_string(log).is_ok_and(|log| log.contains("serving the shard"))
        })
    })?;
    Ok((cluster, more))
}

struct Pass {
    coordinators: usize,
    calls: usize,
    /// Calls a minute over the middle 80 % of the calls.
    steady_rpm: f64,
    refused_first_minute: usize,
    refused_after: usize,
    seconds: f64,
}

async fn pass(coordinators: usize) -> anyhow::Result<Pass> {
    let targets = setting("FC_TARGETS", 1_000) as usize;
    let rpm = setting("FC_RPM", 1_200);
    let model = ScriptedModel::start(script(setting("FC_DELAY_MS", 250))?).await?;
    model.limit_rate(rpm as usize, Duration::from_secs(60), 1);
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("atelier.toml");
    std::fs::write(
        &config,
        model.profile_toml("limited", &format!("requests_per_minute = {rpm}")),
    )?;
    let (cluster, _more) = start(coordinators, &config.to_string_lossy())?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    for n in 0..targets {
        let workbench = format!("fc-{n:04}");
        request(
            &client,
            &CreateWorkbench {
                v: PROTOCOL_VERSION,
                workbench,
            },
        )
        .await?;
    }
    let submit = SubmitBatch {
        v: PROTOCOL_VERSION,
        batch_id: "flow".into(),
        targets: TargetSet::Workbenches {
            names: Vec::new(),
            glob: Some("fc-*".into()),
        },
        action: BatchAction::Message {
            message: "Write a note into note.txt.".into(),
            model: Some("limited".into()),
        },
        concurrency: Some(setting("FC_CONCURRENCY", 64) as u32),
        tolerate_failures: None,
        auto_approve: true,
        continue_draft: false,
        time_limit_secs: None,
        priority: None,
        budget: Default::default(),
    };
    let started = Instant::now();
    request(&client, &submit).await?;
    let mut refused_first_minute = None;
    let view = loop {
        if refused_first_minute.is_none() && started.elapsed() >= Duration::from_secs(60) {
            refused_first_minute = Some(model.refused());
        }
        let get = GetBatch {
            v: PROTOCOL_VERSION,
            batch_id: "flow".into(),
        };
        if let Ok(view) = request(&client, &get).await
            && view.state.is_terminal()
        {
            break view;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let seconds = started.elapsed().as_secs_f64();
    let view: BatchView = view;
    ensure!(
        view.state == BatchState::Succeeded,
        "the batch did not succeed: {view:?}"
    );
    let mut starts: Vec<Instant> = model.requests().iter().map(|call| call.at).collect();
    starts.sort();
    let refused = model.refused();
    let calls = starts.len() - refused;
    ensure!(
        calls >= targets * CALLS_PER_TARGET,
        "{calls} calls for {targets} targets"
    );
    let (low, high) = (starts.len() / 10, starts.len() * 9 / 10);
    let span = starts[high].duration_since(starts[low]).as_secs_f64();
    let steady_rpm = (high - low) as f64 / span.max(f64::EPSILON) * 60.0;
    let refused_first_minute = refused_first_minute.unwrap_or(refused);
    Ok(Pass {
        coordinators,
        calls,
        steady_rpm,
        refused_first_minute,
        refused_after: refused - refused_first_minute,
        seconds,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let rpm = setting("FC_RPM", 1_200) as f64;
    let mut passes = Vec::new();
    for (name, coordinators) in [("one", 1), ("three", 3)] {
        if chosen(name) {
            passes.push(
                pass(coordinators)
                    .await
                    .with_context(|| format!("pass {name}"))?,
            );
        }
    }
    println!(
        "| coordinators | calls | steady rate (calls/min) | of R = {rpm} | 429 in the first minute | 429 after | wall |"
    );
    println!("|---|---|---|---|---|---|---|");
    for pass in &passes {
        println!(
            "| {} | {} | {:.0} | {:.2} | {} | {} | {:.0} s |",
            pass.coordinators,
            pass.calls,
            pass.steady_rpm,
            pass.steady_rpm / rpm,
            pass.refused_first_minute,
            pass.refused_after,
            pass.seconds
        );
    }
    Ok(())
}
