//! Two coordinators with data directories of their own on one NATS, with a replicated store
//! (docs/adr/0014): the first holds the store's lease and commits every write to its changelog,
//! the second waits as a standby. SIGKILL the first in the middle of a job, after a draft write:
//! the standby takes the store over from the changelog within the lease's life, resumes the job
//! without repeating a committed step, and the write is applied once.

use std::time::{Duration, Instant};

use anyhow::Context;
use atelier_messages::subjects;
use atelier_messages::workshop::{WorkshopEvent, WorkshopEventKind};
use atelier_tests::scripted::ScriptedModel;
use atelier_tests::{Cluster, Process, Stored, stored_messages, wait_until};
use serde_json::json;

const LEASE_MS: &str = "2000";

/// A replicated store, snapshotted every few entries so that take-overs restore a snapshot
/// taken while the owner was writing and replay only the changelog after it.
fn replicated() -> [(&'static str, &'static str); 4] {
    [
        ("ATELIER_REPLICATED_STORE", "true"),
        ("ATELIER_STORE_LEASE_MS", LEASE_MS),
        ("ATELIER_STORE_SNAPSHOT_ENTRIES", "5"),
        // One shard: the second coordinator stands by (balancing is `shards.rs`'s).
        ("ATELIER_STORE_SHARDS", "1"),
    ]
}

/// A CSV of about `bytes` bytes.
fn csv(bytes: usize) -> String {
    let mut out = String::from("id,value\n");
    let mut n = 0;
    while out.len() < bytes {
        out.push_str(&format!("{n},{}\n", n * 7 % 1000));
        n += 1;
    }
    out
}

/// The log lines of `name` (a process of the cluster) that contain `needle`.
fn lines(cluster: &Cluster, name: &str, needle: &str) -> usize {
    std::fs::read_to_string(cluster.dir.path().join(format!("{name}.log")))
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(needle))
        .count()
}

/// The number `field=N` of the first log line of `name` that contains `needle`.
fn logged_number(cluster: &Cluster, name: &str, needle: &str, field: &str) -> Option<u64> {
    let log = std::fs::read_to_string(cluster.dir.path().join(format!("{name}.log"))).ok()?;
    let line = log.lines().find(|line| line.contains(needle))?;
    let (_, after) = line.split_once(&format!("{field}="))?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Submits `job_id` (writing out.md) and waits until its write is applied and journaled: the
/// item's second turn is asked for.
fn submit_and_wait_for_the_write(
    cluster: &Cluster,
    model: &ScriptedModel,
    job_id: &str,
) -> anyhow::Result<()> {
    cluster.submit_with(
        "q3",
        "Write out.md",
        &model.model_spec(),
        &["--job-id", job_id],
    )?;
    wait_until(Duration::from_secs(60), || {
        model.count("implement", Some(1), 1) > 0
    })
    .with_context(|| cluster.logs())
}

/// Waits until the standby (`coordinator-b`) says it took the store over.
fn wait_for_takeover(cluster: &Cluster) -> anyhow::Result<()> {
    wait_until(Duration::from_secs(30), || {
        lines(
            cluster,
            "coordinator-b",
            "took the store over from its snapshot and changelog",
        ) > 0
    })
    .with_context(|| cluster.logs())
}

/// A job that writes out.md, then answers its item's second turn after `delay_ms`.
fn write_out(delay_ms: u64) -> anyhow::Result<atelier_tests::scripted::Script> {
    Ok(serde_json::from_value(json!({
        "research": [{"content": "Nothing to read."}],
        "plan": [{"content": "- [ ] 1. Out — write out.md"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "out.md", "content": "# Out\n"}}]},
            {"content": "Written.", "delay_ms": delay_ms}
        ]},
        "summary": [{"content": "out.md is in the draft."}]
    }))?)
}

/// Waits for `job_id` (of [`write_out`], killed while its item's second turn was asked for) and
/// checks it went on after the take-over: succeeded, committed steps not asked for again (the
/// turn in flight at the kill was), its write in the draft and applied once, by the first owner.
fn assert_the_job_went_on_once(
    cluster: &Cluster,
    model: &ScriptedModel,
    job_id: &str,
) -> anyhow::Result<()> {
    cluster.wait_succeeded(job_id, Duration::from_secs(90))?;
    assert_eq!(model.count("research", None, 0), 1);
    assert_eq!(model.count("plan", None, 0), 1);
    assert_eq!(model.count("implement", Some(1), 0), 1);
    assert_eq!(model.count("implement", Some(1), 1), 2);
    assert_eq!(
        cluster
            .cli_ok(&["wb", "cat", "q3", "out.md", "--draft"])?
            .stdout,
        "# Out\n"
    );
    let applied = lines(cluster, "coordinator", "draft write")
        + lines(cluster, "coordinator-b", "draft write");
    assert_eq!(applied, 1, "the write is applied once, by the first owner");
    Ok(())
}

/// Two replicated coordinators with `env` on one NATS: the first holds the store (it is
/// `cluster.coordinator`), the second (`coordinator-b`, a data directory of its own) waits as the
/// standby; with a worker per pool when `workers`.
fn owner_and_standby(env: &[(&str, &str)], workers: bool) -> anyhow::Result<(Cluster, Process)> {
    let mut cluster = Cluster::start_with(&[])?;
    cluster.kill_coordinator();
    cluster.start_coordinator_with_env(env)?;
    if workers {
        cluster.start_worker("tabular")?;
        cluster.start_worker("office")?;
    }
    let standby = cluster.spawn_coordinator("coordinator-b", env)?;
    wait_until(Duration::from_secs(20), || {
        lines(
            &cluster,
            "coordinator-b",
            "standby: another coordinator holds the store",
        ) > 0
    })?;
    Ok((cluster, standby))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_takes_the_store_over_and_the_job_goes_on_without_repeating_a_step()
-> anyhow::Result<()> {
    // The item's second turn (after its write) answers slowly: the owner dies while it waits.
    let model = ScriptedModel::start(write_out(4000)?).await?;
    let (mut cluster, mut standby) = owner_and_standby(&replicated(), true)?;

    cluster.cli_ok(&["wb", "create", "q3"])?;
    let notes = cluster.dir.path().join("notes.md");
    std::fs::write(&notes, "# Notes\nOne line.\n")?;
    cluster.cli_ok(&["wb", "add", "q3", &notes.to_string_lossy()])?;
    // Files beyond what sled keeps inline: one sent in the message, one through the bucket.
    let (medium, large) = (csv(100 << 10), csv(400 << 10));
    for (name, content) in [("medium.csv", &medium), ("large.csv", &large)] {
        let path = cluster.dir.path().join(name);
        std::fs::write(&path, content)?;
        cluster.cli_ok(&["wb", "add", "q3", &path.to_string_lossy()])?;
    }
    // Twelve files of 60 KiB in one addition: those sent inline kept in sled (and the
    // changelog), the rest through the bucket.
    let many = cluster.dir.path().join("many");
    std::fs::create_dir_all(&many)?;
    let small = csv(60 << 10);
    let mut paths = Vec::new();
    for n in 0..12 {
        let path = many.join(format!("part-{n}.csv"));
        std::fs::write(&path, format!("{n}\n{small}"))?;
        paths.push(path.to_string_lossy().to_string());
    }
    let mut add = vec!["wb", "add", "q3"];
    add.extend(paths.iter().map(String::as_str));
    cluster.cli_ok(&add)?;
    submit_and_wait_for_the_write(&cluster, &model, "failover-1")?;
    cluster.kill_coordinator();
    let killed = Instant::now();

    wait_for_takeover(&cluster)?;
    let took_over = killed.elapsed();
    assert!(
        took_over < Duration::from_secs(8),
        "taken over {took_over:?} after the kill (lease {LEASE_MS} ms)"
    );
    // The first owner snapshotted its store and trimmed the changelog as it went: the new owner
    // restored the latest snapshot and replayed only what followed it.
    let snapshots = lines(&cluster, "coordinator", "snapshotted the store");
    assert!(snapshots >= 2, "{snapshots} snapshots\n{}", cluster.logs());
    let restored = logged_number(
        &cluster,
        "coordinator-b",
        "took the store over",
        "snapshot_seq",
    );
    assert!(
        restored.is_some_and(|seq| seq > 0),
        "restored at {restored:?}"
    );
    let replayed = logged_number(&cluster, "coordinator-b", "took the store over", "entries");
    assert!(
        replayed.is_some_and(|entries| entries <= 16),
        "replayed {replayed:?}"
    );
    let client = async_nats::connect(&cluster.nats.url).await?;
    let mut changelog = async_nats::jetstream::new(client.clone())
        .get_stream(subjects::shard::LOG_STREAM)
        .await?;
    let state = changelog.info().await?.state.clone();
    assert!(
        // (Its first message, the deployment's record, is never trimmed.)
        state.messages < state.last_sequence,
        "the changelog was not trimmed: {state:?}"
    );
    assert_the_job_went_on_once(&cluster, &model, "failover-1")?;
    let published: String = cluster.cli_ok(&["wb", "cat", "q3", "notes.md"])?.stdout;
    assert_eq!(published, "# Notes\nOne line.\n");
    // The new owner never had the large files on its disk: it brings them from the bucket.
    for (name, content) in [("medium.csv", &medium), ("large.csv", &large)] {
        let read = cluster.cli_ok(&["wb", "cat", "q3", name])?.stdout;
        assert!(
            read == *content,
            "{name} read back differs ({} bytes)",
            read.len()
        );
    }
    assert_eq!(
        lines(
            &cluster,
            "coordinator-b",
            "blob brought from the replicated store's bucket"
        ),
        2
    );
    for n in [0, 11] {
        let read = cluster
            .cli_ok(&["wb", "cat", "q3", &format!("part-{n}.csv")])?
            .stdout;
        assert!(
            read == format!("{n}\n{small}"),
            "part-{n}.csv read back differs"
        );
    }

    // The conversation's events reached their stream from both owners: the new owner's ids go
    // on from the old one's, so none is taken for a duplicate.
    let told = loop {
        let events: Vec<Stored<WorkshopEvent>> = stored_messages(
            &client,
            subjects::workshop::EVENTS_STREAM,
            subjects::workshop::workbench_events("q3"),
        )
        .await?;
        let told: Vec<String> = events
            .iter()
            .filter(|event| event.payload.kind == WorkshopEventKind::MessageAdded)
            .filter_map(|event| event.payload.message.as_ref().map(|m| m.id.clone()))
            .collect();
        if told.len() >= 2 || killed.elapsed() > Duration::from_secs(60) {
            break told;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(told, ["m1", "m2"]);

    // The new owner serves everything: a workbench created now takes files at once.
    cluster.cli_ok(&["wb", "create", "q4"])?;
    cluster.cli_ok(&["wb", "add", "q4", &notes.to_string_lossy()])?;
    standby.kill();
    Ok(())
}

/// On three clustered servers with every stream and bucket on all three (R3), the owner and the
/// server it is connected to are SIGKILLed together: the standby, on another server, takes the
/// store over once the lease runs out and the streams have new leaders, and the job goes on
/// without repeating a committed step, its write applied once.
#[tokio::test(flavor = "multi_thread")]
async fn the_owner_and_its_nats_server_killed_together_lose_nothing() -> anyhow::Result<()> {
    let model = ScriptedModel::start(write_out(4000)?).await?;
    let mut cluster = Cluster::start_three_nodes().await?;
    let mut env = replicated().to_vec();
    env.push(("ATELIER_STORE_REPLICAS", "3"));
    cluster.start_worker("tabular")?;
    cluster.start_worker("office")?;
    // The owner on the third server, the standby on the second; the CLI and workers on the first.
    let (second, third) = (
        cluster.more_nats[0].url.clone(),
        cluster.more_nats[1].url.clone(),
    );
    let mut owner = cluster.spawn_coordinator_on("coordinator", &third, &env)?;
    wait_until(Duration::from_secs(30), || {
        lines(&cluster, "coordinator", "coordinator ready") > 0
    })
    .with_context(|| cluster.logs())?;
    let mut standby = cluster.spawn_coordinator_on("coordinator-b", &second, &env)?;
    wait_until(Duration::from_secs(30), || {
        lines(
            &cluster,
            "coordinator-b",
            "standby: another coordinator holds the store",
        ) > 0
    })
    .with_context(|| cluster.logs())?;
    // With three copies the job events are replicated and written as the servers sync (the
    // servers refuse asynchronous writes for them).
    let events = async_nats::jetstream::new(async_nats::connect(&cluster.nats.url).await?)
        .get_stream(subjects::EVENTS_STREAM)
        .await?
        .info()
        .await?
        .config
        .clone();
    assert_eq!(events.num_replicas, 3);
    assert_ne!(
        events.persist_mode,
        Some(async_nats::jetstream::stream::PersistenceMode::Async)
    );
    cluster.cli_ok(&["wb", "create", "q3"])?;
    let notes = cluster.dir.path().join("notes.md");
    std::fs::write(&notes, "# Notes\nOne line.\n")?;
    cluster.cli_ok(&["wb", "add", "q3", &notes.to_string_lossy()])?;
    submit_and_wait_for_the_write(&cluster, &model, "failover-node")?;

    owner.kill();
    cluster.more_nats[1].kill();
    wait_for_takeover(&cluster)?;
    assert_the_job_went_on_once(&cluster, &model, "failover-node")?;
    assert_eq!(
        cluster.cli_ok(&["wb", "cat", "q3", "notes.md"])?.stdout,
        "# Notes\nOne line.\n"
    );
    // A client given the cluster's servers as a list, the dead one first, reaches a live one.
    let servers = format!("{third},{second},{}", cluster.nats.url);
    let listed = atelier_tests::cli(&["wb", "cat", "q3", "notes.md", "--nats", &servers])?;
    assert!(listed.success, "{}", listed.stderr);
    assert_eq!(listed.stdout, "# Notes\nOne line.\n");
    standby.kill();
    Ok(())
}

/// Sends `signal` (`STOP`, `CONT`) to `process`.
fn signal(process: &Process, signal: &str) -> anyhow::Result<()> {
    let pid = process.pid().context("the process runs")?.to_string();
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid} failed");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_owner_that_wakes_up_after_a_takeover_writes_nothing_and_stops()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(write_out(500)?).await?;
    let (mut cluster, _standby) = owner_and_standby(&replicated(), true)?;
    let mut owner = cluster.coordinator.take().context("the owner runs")?;
    cluster.cli_ok(&["wb", "create", "q3"])?;
    submit_and_wait_for_the_write(&cluster, &model, "paused-1")?;
    // Paused with the model's answer on its way (it arrives while the owner sleeps): it neither
    // renews nor commits.
    signal(&owner, "STOP")?;
    wait_for_takeover(&cluster)?;
    signal(&owner, "CONT")?;
    // Awake, it learns it lost the lease and stops; whatever it tries to commit is refused.
    wait_until(Duration::from_secs(20), || {
        lines(&cluster, "coordinator", "lost the store's lease") > 0
    })
    .with_context(|| cluster.logs())?;
    assert!(
        owner.wait_exit(Duration::from_secs(20)),
        "the deposed owner exits"
    );
    cluster.wait_succeeded("paused-1", Duration::from_secs(60))?;
    let applied = lines(&cluster, "coordinator", "draft write")
        + lines(&cluster, "coordinator-b", "draft write");
    assert_eq!(applied, 1, "{}", cluster.logs());
    assert_eq!(
        cluster
            .cli_ok(&["wb", "cat", "q3", "out.md", "--draft"])?
            .stdout,
        "# Out\n"
    );
    // The woken owner's late commit never reached the store: the job is succeeded once, with
    // one summary in the conversation.
    let history = cluster.cli_ok(&["history", "q3", "--json"])?.stdout;
    assert_eq!(
        history.matches("out.md is in the draft.").count(),
        1,
        "{history}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clean_stop_hands_the_store_over_at_once() -> anyhow::Result<()> {
    // A long lease: only the release explains a quick takeover.
    let env = [
        ("ATELIER_REPLICATED_STORE", "true"),
        ("ATELIER_STORE_LEASE_MS", "20000"),
        ("ATELIER_STORE_SHARDS", "1"),
    ];
    let (mut cluster, _standby) = owner_and_standby(&env, false)?;
    let mut owner = cluster.coordinator.take().context("the owner runs")?;
    cluster.cli_ok(&["wb", "create", "q3"])?;

    signal(&owner, "TERM")?;
    let stopped = Instant::now();
    wait_for_takeover(&cluster)?;
    let handed_over = stopped.elapsed();
    assert!(
        handed_over < Duration::from_secs(2),
        "handed over {handed_over:?} after SIGTERM, with a 20 s lease"
    );
    assert!(owner.wait_exit(Duration::from_secs(10)));
    assert_eq!(
        lines(&cluster, "coordinator", "released the store's lease"),
        1
    );
    // The new owner serves what the old one stored.
    let notes = cluster.dir.path().join("notes.md");
    std::fs::write(&notes, "# Notes\n")?;
    cluster.cli_ok(&["wb", "add", "q3", &notes.to_string_lossy()])?;
    assert_eq!(
        cluster.cli_ok(&["wb", "cat", "q3", "notes.md"])?.stdout,
        "# Notes\n"
    );
    Ok(())
}

/// Streams and buckets made before with one copy, as a deployment that grew from one server has
/// them: a coordinator with `store_replicas = 3` raises them to three copies and says how to
/// make again an event stream the server cannot raise (written without waiting for the disk);
/// the streams it makes itself have three.
#[tokio::test(flavor = "multi_thread")]
async fn streams_made_with_fewer_copies_are_raised_or_said() -> anyhow::Result<()> {
    use async_nats::jetstream::stream::{Config, PersistenceMode, RetentionPolicy};
    let cluster = Cluster::start_three_nodes().await?;
    let js = async_nats::jetstream::new(async_nats::connect(&cluster.nats.url).await?);
    js.create_stream(Config {
        name: subjects::JOBS_STREAM.into(),
        subjects: vec![subjects::JOB_SUBMIT.into()],
        retention: RetentionPolicy::WorkQueue,
        ..Default::default()
    })
    .await?;
    js.create_stream(Config {
        name: subjects::EVENTS_STREAM.into(),
        subjects: vec![subjects::EVENTS_ALL.into()],
        persist_mode: Some(PersistenceMode::Async),
        ..Default::default()
    })
    .await?;
    // A bucket and an object store too, as a replicated deployment on one server made them.
    js.create_key_value(async_nats::jetstream::kv::Config {
        bucket: subjects::shard::LEASES_BUCKET.into(),
        history: 1,
        max_age: Duration::from_millis(LEASE_MS.parse()?),
        ..Default::default()
    })
    .await?;
    js.create_object_store(async_nats::jetstream::object_store::Config {
        bucket: subjects::shard::SNAPSHOTS_BUCKET.into(),
        ..Default::default()
    })
    .await?;
    let mut env = replicated().to_vec();
    env.push(("ATELIER_STORE_REPLICAS", "3"));
    let url = cluster.nats.url.clone();
    let _coordinator = cluster.spawn_coordinator_on("coordinator", &url, &env)?;
    wait_until(Duration::from_secs(30), || {
        lines(&cluster, "coordinator", "coordinator ready") > 0
    })
    .with_context(|| cluster.logs())?;

    let copies = |name: String| {
        let js = js.clone();
        async move {
            let mut stream = js.get_stream(name).await?;
            anyhow::Ok(stream.info().await?.config.num_replicas)
        }
    };
    assert_eq!(copies(subjects::JOBS_STREAM.into()).await?, 3);
    assert_eq!(copies(subjects::EVENTS_STREAM.into()).await?, 1);
    assert_eq!(copies(subjects::workshop::EVENTS_STREAM.into()).await?, 3);
    let leases = format!("KV_{}", subjects::shard::LEASES_BUCKET);
    assert_eq!(copies(leases).await?, 3);
    let snapshots = format!("OBJ_{}", subjects::shard::SNAPSHOTS_BUCKET);
    assert_eq!(copies(snapshots).await?, 3);
    let told = format!("nats stream rm {} -f", subjects::EVENTS_STREAM);
    assert_eq!(
        lines(&cluster, "coordinator", &told),
        1,
        "{}",
        cluster.logs()
    );
    // The submissions' stream and the snapshots' (the leases' bucket is made again as set).
    assert_eq!(
        lines(
            &cluster,
            "coordinator",
            "stream raised to store_replicas copies"
        ),
        2
    );
    Ok(())
}

/// A coordinator restarted with another lease takes it: the leases' bucket is set to the new
/// life instead of refusing the start, and the store is served as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_coordinator_restarted_with_another_lease_takes_it() -> anyhow::Result<()> {
    let mut env = replicated().to_vec();
    let mut cluster = Cluster::start_synced(&[], &env)?;
    cluster.cli_ok(&["wb", "create", "kept"])?;
    cluster.kill_coordinator();
    env.retain(|(key, _)| *key != "ATELIER_STORE_LEASE_MS");
    env.push(("ATELIER_STORE_LEASE_MS", "9000"));
    cluster.start_coordinator_with_env(&env)?;
    let listed = cluster.cli_ok(&["wb", "list"])?.stdout;
    assert!(listed.contains("kept"), "{listed}");
    let js = async_nats::jetstream::new(async_nats::connect(&cluster.nats.url).await?);
    let mut leases = js
        .get_stream(format!("KV_{}", subjects::shard::LEASES_BUCKET))
        .await?;
    assert_eq!(leases.info().await?.config.max_age, Duration::from_secs(9));
    Ok(())
}

/// A data directory whose coordinator ran with a store of its own, started again with a
/// replicated store: the coordinator says that store is not served (its workbenches would
/// otherwise seem gone), and started without it again, serves them as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_of_its_own_is_named_when_the_store_becomes_replicated() -> anyhow::Result<()> {
    let mut cluster = Cluster::start_synced(&[], &[])?;
    cluster.cli_ok(&["wb", "create", "mine"])?;
    cluster.kill_coordinator();
    cluster.start_coordinator_with_env(&replicated())?;
    let log = cluster.logs();
    assert!(
        log.contains("this data directory holds a store of its own"),
        "{log}"
    );
    assert!(!cluster.cli_ok(&["wb", "list"])?.stdout.contains("mine"));
    cluster.kill_coordinator();
    cluster.start_coordinator()?;
    assert!(cluster.cli_ok(&["wb", "list"])?.stdout.contains("mine"));
    Ok(())
}
