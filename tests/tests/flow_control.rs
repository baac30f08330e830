//! Flow control on a model provider: a profile's `max_concurrent_requests`,
//! `requests_per_minute` and `tokens_per_minute` hold for the whole deployment. Proven on
//! `atelier up` as the README runs it, with a message batch against a provider that refuses
//! requests over its rate (a scripted OpenAI-protocol server answering 429 with
//! `Retry-After`), and on the shared limiter itself with three coordinators' connections to
//! one real nats-server.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use atelier_coordinator::provider_limits::{Limiters, Place, ProviderLimits};
use atelier_messages::batch::BatchView;
use atelier_messages::job::JobView;
use atelier_messages::provider::Priority;
use atelier_tests::NatsServer;
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::up::Up;
use serde_json::json;

/// The workbenches the batch runs over.
const TARGETS: usize = 6;

/// Each job: one research turn, one plan turn, a write and an answer, a summary; every turn
/// takes a little while, so calls overlap.
fn script() -> anyhow::Result<Script> {
    let turn = |content: &str| json!({"content": content, "delay_ms": 120});
    Ok(serde_json::from_value(json!({
        "research": [turn("The workbench is empty.")],
        "plan": [turn("- [ ] 1. Note — write the note → note.txt")],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "note.txt", "content": "noted\n"}}], "delay_ms": 120},
            turn("Wrote note.txt.")
        ]},
        "summary": [turn("note.txt holds the note.")]
    }))?)
}

/// `atelier up` with `profile` (TOML lines) as the model profile `limited` of `model`, and
/// the workbenches `fc-0` … of the batch.
struct Limited {
    up: Up,
    config: String,
    _config_dir: tempfile::TempDir,
}

impl Limited {
    fn start(model: &ScriptedModel, profile: &str) -> anyhow::Result<Self> {
        let config_dir = tempfile::tempdir()?;
        let config = config_dir.path().join("atelier.toml");
        std::fs::write(&config, model.profile_toml("limited", profile))?;
        let config = config.to_string_lossy().to_string();
        let up = Up::start_with(&["--config", &config], &[])?;
        for index in 0..TARGETS {
            up.cli_ok(&["wb", "create", &format!("fc-{index}")])?;
        }
        Ok(Self {
            up,
            config,
            _config_dir: config_dir,
        })
    }

    /// `batch submit` of one message per workbench, `TARGETS` in flight, with `extra`
    /// arguments.
    fn submit_batch(&self, extra: &[&str]) -> anyhow::Result<std::process::Output> {
        let concurrency = TARGETS.to_string();
        let mut args = vec!["--config", &self.config];
        args.extend(batch_submit(&concurrency));
        args.extend_from_slice(extra);
        self.up.cli(&args)
    }
}

/// `batch submit` of one message per workbench `fc-*` on the profile `limited`.
fn batch_submit(concurrency: &str) -> Vec<&str> {
    vec![
        "batch",
        "submit",
        "--workbenches",
        "fc-*",
        "--message",
        "Write a note into note.txt.",
        "--model",
        "limited",
        "--concurrency",
        concurrency,
    ]
}

/// Asserts calls started 3 a second: any 4 consecutive ones span about a second (a margin for
/// the scheduling of a busy machine).
fn assert_paced(calls: &[atelier_tests::scripted::LoggedRequest]) {
    let mut starts: Vec<Instant> = calls.iter().map(|call| call.at).collect();
    starts.sort();
    for window in starts.windows(4) {
        let span = window[3].duration_since(window[0]);
        assert!(span >= Duration::from_millis(800), "4 calls in {span:?}");
    }
}

/// The batch run to its end against `model` with `profile`.
fn run_batch(model: &ScriptedModel, profile: &str) -> anyhow::Result<(Up, BatchView)> {
    let limited = Limited::start(model, profile)?;
    // Exits non-zero unless every target succeeded; the view is printed either way.
    let out = limited.submit_batch(&["--wait", "--json"])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let view: BatchView = serde_json::from_str(&stdout).with_context(|| {
        format!(
            "batch submit printed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok((limited.up, view))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_within_its_profiles_limits_meets_no_429_where_a_burst_meets_many()
-> anyhow::Result<()> {
    // The provider accepts 4 requests in any second and asks the rest to come back in 1 s.
    let unlimited = ScriptedModel::start(script()?).await?;
    unlimited.limit_rate(4, Duration::from_secs(1), 1);
    let (_up, burst) = run_batch(&unlimited, "")?;
    assert_eq!(burst.counts.total, TARGETS as u64, "{burst:?}");
    assert!(
        unlimited.refused() >= 2,
        "six jobs at once start six research calls: the provider refuses the ones over 4 \
         (refused {})",
        unlimited.refused()
    );

    // The same batch with the provider's limits in the profile: paced, never refused.
    let limited = ScriptedModel::start(script()?).await?;
    limited.limit_rate(4, Duration::from_secs(1), 1);
    let (up, paced) = run_batch(
        &limited,
        "max_concurrent_requests = 2\nrequests_per_minute = 180",
    )?;
    assert_eq!(paced.counts.succeeded, TARGETS as u64, "{paced:?}");
    assert_eq!(limited.refused(), 0, "paced to 3 a second, none is refused");
    assert!(
        limited.most_in_flight() <= 2,
        "at most 2 calls in flight, and {} were",
        limited.most_in_flight()
    );
    let calls = limited.requests();
    assert_eq!(calls.len(), TARGETS * 5, "five calls a job, none retried");
    assert_paced(&calls);
    // The jobs that waited said so in their events.
    let jobs: Vec<JobView> = serde_json::from_str(&up.cli_ok(&["jobs", "--json"])?)?;
    let mut waited = 0;
    for job in &jobs {
        let events = up.cli_ok(&["watch", &job.job_id, "--json"])?;
        waited += usize::from(events.contains("\"provider_waiting\""));
    }
    assert!(waited > 0, "no job told that it waited for the provider");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn three_coordinators_share_one_limit() -> anyhow::Result<()> {
    // Three coordinators' limiters on one nats-server, 10 calls each, all at once: together
    // at most 2 in flight and one start every 100 ms.
    let dir = tempfile::tempdir()?;
    let nats = NatsServer::start(dir.path())?;
    let limits = ProviderLimits {
        max_concurrent_requests: Some(2),
        requests_per_minute: Some(600),
        tokens_per_minute: None,
    };
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut calls = Vec::new();
    for coordinator in ["c1", "c2", "c3"] {
        let client = async_nats::connect(&nats.url).await?;
        let jetstream = async_nats::jetstream::new(client);
        let limiter = Limiters::open(&jetstream, coordinator, 1)
            .await?
            .profile("shared", limits);
        for _ in 0..10 {
            let (limiter, in_flight, most, starts) = (
                limiter.clone(),
                in_flight.clone(),
                most.clone(),
                starts.clone(),
            );
            calls.push(tokio::spawn(async move {
                let place = Place::default();
                let lease = limiter.acquire(100, &place, |_, _| {}).await?;
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                if let Ok(mut starts) = starts.lock() {
                    starts.push(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                limiter.release(&lease, Some(80)).await;
                anyhow::Ok(())
            }));
        }
    }
    for call in calls {
        call.await??;
    }
    assert!(most.load(Ordering::SeqCst) <= 2, "{most:?} in flight");
    let mut starts = starts
        .lock()
        .map(|starts| starts.clone())
        .unwrap_or_default();
    assert_eq!(starts.len(), 30);
    starts.sort();
    // One start every 100 ms: any 5 consecutive ones span 400 ms (less a margin for when a
    // task records its start).
    for window in starts.windows(5) {
        let span = window[4].duration_since(window[0]);
        assert!(span >= Duration::from_millis(350), "5 starts in {span:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_coordinator_processes_keep_one_providers_rate_together() -> anyhow::Result<()> {
    // Two coordinators sharing a replicated store's shards, each running the targets of its
    // own shards, against a provider accepting 4 requests in any second: the profile's 180 a
    // minute (3 a second) holds for both together, so none is refused.
    let model = ScriptedModel::start(script()?).await?;
    model.limit_rate(4, Duration::from_secs(1), 1);
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("atelier.toml");
    std::fs::write(
        &config,
        model.profile_toml("limited", "requests_per_minute = 180"),
    )?;
    let config = config.to_string_lossy().to_string();
    let env = [
        ("ATELIER_CONFIG", config.as_str()),
        ("ATELIER_REPLICATED_STORE", "true"),
    ];
    let cluster = atelier_tests::Cluster::start_synced(&["tabular", "office"], &env)?;
    let _second = cluster.spawn_coordinator("coordinator-2", &env)?;
    atelier_tests::wait_until(Duration::from_secs(60), || {
        let log = cluster.dir.path().join("coordinator-2.log");
        std::fs::read_to_string(log).is_ok_and(|log| log.contains("serving the shard"))
    })?;
    // Names that fall in shards of both coordinators.
    let names: Vec<String> = (0..TARGETS).map(|index| format!("fc-{index}")).collect();
    for name in &names {
        cluster.cli_ok(&["wb", "create", name])?;
    }
    let concurrency = TARGETS.to_string();
    let mut args = batch_submit(&concurrency);
    args.extend(["--wait", "--json"]);
    let out = cluster.cli(&args)?;
    let view: BatchView = out.json()?;
    assert_eq!(view.counts.succeeded, TARGETS as u64, "{view:?}");
    assert_eq!(
        model.refused(),
        0,
        "paced to 3 a second over both coordinators"
    );
    let calls = model.requests();
    assert_eq!(calls.len(), TARGETS * 5);
    assert_paced(&calls);
    // Both coordinators ran targets: each one's log names jobs it ran.
    let ran = |log: &str| log.matches("job finished").count();
    let first = ran(&std::fs::read_to_string(
        cluster.dir.path().join("coordinator.log"),
    )?);
    let second = ran(&std::fs::read_to_string(
        cluster.dir.path().join("coordinator-2.log"),
    )?);
    assert!(first > 0 && second > 0, "jobs run: {first} and {second}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_persons_message_goes_before_a_saturating_batch() -> anyhow::Result<()> {
    // One call at a time to the provider; a batch of six low-priority targets fills the line,
    // then a person's message arrives: its calls go first, so it ends long before the batch.
    let model = ScriptedModel::start(script()?).await?;
    let limited = Limited::start(&model, "max_concurrent_requests = 1")?;
    let (up, config) = (&limited.up, &limited.config);
    up.cli_ok(&["wb", "create", "notes"])?;
    // A priority that is none of the three is refused before anything is submitted.
    let refused = up.cli(&["submit", "notes", "Hi.", "--priority", "urgent"])?;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("VALIDATION_FAILED: `urgent` is no priority; use high, normal or low"),
        "{refused:?}"
    );
    let submitted = limited.submit_batch(&["--batch-id", "saturating"])?;
    assert!(submitted.status.success(), "{submitted:?}");
    // The batch's first calls are in flight and the rest wait.
    atelier_tests::wait_until(Duration::from_secs(20), || model.requests().len() >= 2)?;
    let person = up.cli_ok(&[
        "--config",
        config,
        "submit",
        "notes",
        "Write a note into note.txt.",
        "--model",
        "limited",
        "--priority",
        "high",
        "--wait",
        "--json",
    ])?;
    let person: JobView = serde_json::from_str(&person)?;
    assert_eq!(person.priority, Some(Priority::High));
    // Five calls of its own, each taking the next free slot (the batch's calls in between
    // only while it thinks): 7 or 8 calls in all when it ends on an idle machine, 14 seen on a
    // loaded one (it thinks longer). Waiting its turn among the batch's calls, it ended after
    // 33 to 35 of the batch's 30 and its own 5: the bound sits between the two.
    let calls_so_far = model.requests().len();
    assert!(
        calls_so_far <= 20,
        "the person's job ended after {calls_so_far} calls in all"
    );
    let status = || -> anyhow::Result<BatchView> {
        Ok(serde_json::from_str(&up.cli_ok(&[
            "batch",
            "status",
            "saturating",
            "--json",
        ])?)?)
    };
    atelier_tests::wait_until(Duration::from_secs(60), || {
        status().is_ok_and(|view| view.counts.succeeded == TARGETS as u64)
    })?;
    assert_eq!(model.most_in_flight(), 1);
    Ok(())
}
