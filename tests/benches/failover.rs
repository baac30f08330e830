//! Fail-over time of a replicated store (docs/adr/0014): two coordinators with data directories of
//! their own on one NATS, `store_lease_ms` = 3000. In each trial a job waits on its plan turn
//! (research journaled; the model answers after 8 s), the coordinator holding the store is
//! SIGKILLed, and the time is taken from the kill to the first resumed step: the standby's
//! request for the plan turn again. The killed coordinator comes back as the standby, the job
//! ends, and the next trial kills the other one.
//!
//! With `FAILOVER_SERVERS=3` the same runs on three clustered nats-servers (`sync_interval:
//! always`, `store_replicas = 3`), each coordinator on a server of its own, and each trial
//! SIGKILLs the owner together with its server (which comes back with the coordinator).
//!
//! Run: `cargo build --release --bin atelier && cargo bench -p atelier-tests --bench failover`
//! (`FAILOVER_TRIALS`, default 20; numbers in docs/benchmarks.md).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use anyhow::Context;

use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::{Cluster, Process, wait_until};
use serde_json::json;

const LEASE_MS: &str = "3000";

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn log_lines(cluster: &Cluster, name: &str, needle: &str) -> usize {
    std::fs::read_to_string(cluster.dir.path().join(format!("{name}.log")))
        .unwrap_or_default()
        .matches(needle)
        .count()
}

/// The servers the coordinators run on: one, or three clustered.
struct Servers {
    clustered: bool,
}

impl Servers {
    fn from_env() -> Self {
        Self {
            clustered: std::env::var("FAILOVER_SERVERS").is_ok_and(|servers| servers == "3"),
        }
    }

    async fn start(&self) -> anyhow::Result<Cluster> {
        match self.clustered {
            true => Cluster::start_three_nodes().await,
            false => {
                let mut cluster = Cluster::start_with(&[])?;
                cluster.kill_coordinator();
                Ok(cluster)
            }
        }
    }

    /// Replicated coordinator `n` (named `name`) on its own data directory: on the first
    /// server, or on a clustered server of its own (the CLI keeps the first).
    fn coordinator(&self, cluster: &Cluster, n: usize, name: &str) -> Process {
        let mut env = vec![
            ("ATELIER_REPLICATED_STORE", "true"),
            ("ATELIER_STORE_LEASE_MS", LEASE_MS),
            // One shard: the second coordinator stands by, and the kill always hits the job's.
            ("ATELIER_STORE_SHARDS", "1"),
        ];
        let url = match self.clustered {
            true => {
                env.push(("ATELIER_STORE_REPLICAS", "3"));
                cluster.more_nats[n].url.clone()
            }
            false => cluster.nats.url.clone(),
        };
        cluster
            .spawn_coordinator_on(name, &url, &env)
            .expect("coordinator")
    }

    /// SIGKILLs coordinator `n`'s server, when it has one of its own.
    fn kill_server(&self, cluster: &mut Cluster, n: usize) {
        if self.clustered {
            cluster.more_nats[n].kill();
        }
    }

    /// Starts coordinator `n`'s server again, when it has one of its own.
    fn restart_server(&self, cluster: &mut Cluster, n: usize) -> anyhow::Result<()> {
        match self.clustered {
            true => cluster.more_nats[n].restart(),
            false => Ok(()),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let trials: usize = std::env::var("FAILOVER_TRIALS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let script: Script = serde_json::from_value(json!({
        "research": [{"content": "ok"}],
        "plan": [{"content": "- [ ] 1. Nothing — nothing to write", "delay_ms": 8000}],
        "summary": [{"content": "done"}]
    }))?;
    let model = ScriptedModel::start(script).await?;
    let servers = Servers::from_env();
    let mut cluster = servers.start().await?;
    let names = ["coord-a", "coord-b"];
    let mut processes = [
        Some(servers.coordinator(&cluster, 0, names[0])),
        Some(servers.coordinator(&cluster, 1, names[1])),
    ];
    wait_until(Duration::from_secs(30), || {
        cluster
            .cli(&["jobs", "--json"])
            .is_ok_and(|out| out.success)
    })?;
    let mut owner = (0..2)
        .find(|&n| log_lines(&cluster, names[n], "took the store over") > 0)
        .expect("one holds the store");

    let mut samples = Vec::with_capacity(trials);
    for trial in 0..trials {
        let workbench = format!("trial-{trial}");
        cluster.cli_ok(&["wb", "create", &workbench])?;
        let job_id = format!("failover-{trial}");
        cluster.submit_with(
            &workbench,
            "wait on the plan",
            &model.model_spec(),
            &["--job-id", &job_id],
        )?;
        let asked = model.count("plan", None, 0);
        wait_until(Duration::from_secs(60), || {
            model.count("plan", None, 0) > asked
        })
        .with_context(|| cluster.logs())?;
        let standby = 1 - owner;
        let took_over = log_lines(&cluster, names[standby], "took the store over");

        let before = model.requests().len();
        if let Some(mut process) = processes[owner].take() {
            process.kill();
        }
        servers.kill_server(&mut cluster, owner);
        let killed = Instant::now();
        wait_until(Duration::from_secs(60), || model.requests().len() > before)
            .with_context(|| cluster.logs())?;
        let resumed = model.requests()[before].at.duration_since(killed);
        assert!(log_lines(&cluster, names[standby], "took the store over") > took_over);
        samples.push(resumed);
        println!(
            "trial {trial:>2}: first resumed step {:.2} s after the kill",
            resumed.as_secs_f64()
        );

        // The killed coordinator comes back as the standby; the job ends on the new owner.
        let waiting = "standby: another coordinator holds the store";
        let standby_before = log_lines(&cluster, names[owner], waiting);
        servers.restart_server(&mut cluster, owner)?;
        processes[owner] = Some(servers.coordinator(&cluster, owner, names[owner]));
        wait_until(Duration::from_secs(30), || {
            log_lines(&cluster, names[owner], waiting) > standby_before
        })
        .with_context(|| cluster.logs())?;
        cluster.wait_finished(&job_id, Duration::from_secs(60))?;
        owner = standby;
    }
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    println!(
        "{} trials, lease {LEASE_MS} ms, {} server(s): p50 {:.2} s, p99 {:.2} s, max {:.2} s, mean {:.2} s",
        samples.len(),
        if servers.clustered { 3 } else { 1 },
        percentile(&samples, 0.50).as_secs_f64(),
        percentile(&samples, 0.99).as_secs_f64(),
        percentile(&samples, 1.0).as_secs_f64(),
        mean.as_secs_f64()
    );
    Ok(())
}
