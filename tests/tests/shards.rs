//! Several active coordinators split a replicated deployment's shards (docs/adr/0014): whichever
//! coordinator a client's request lands on, a workbench's verbs reach its shard's owner; a
//! coordinator that joins takes its share, one that leaves cleanly hands its shards over at once,
//! and a killed one's shards are taken over when their leases run out — with every workbench,
//! file and job still there.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::job::{JobState, JobSubmit, JobView, ListJobs};
use atelier_messages::shard::{ShardLease, shard_of};
use atelier_messages::store::WorkbenchInfo;
use atelier_messages::workflow::{Workflow, WorkflowStep};
use atelier_messages::{Format, decode, subjects};
use atelier_tests::{Cluster, NatsServer, Process};
use atelier_transport::{Policy, request};
use futures::StreamExt;

const SHARDS: u32 = 8;
/// Long enough that a hand-over within it can only be a release, not an expiry.
const LEASE_MS: u64 = 10_000;

fn env() -> Vec<(&'static str, String)> {
    vec![
        ("ATELIER_REPLICATED_STORE", "true".into()),
        ("ATELIER_STORE_LEASE_MS", LEASE_MS.to_string()),
        ("ATELIER_STORE_SHARDS", SHARDS.to_string()),
    ]
}

/// One workbench name per shard.
fn one_per_shard() -> Vec<String> {
    let mut by_shard = BTreeMap::new();
    for i in 0.. {
        let name = format!("wb-{i}");
        by_shard.entry(shard_of(&name, SHARDS)).or_insert(name);
        if by_shard.len() == SHARDS as usize {
            break;
        }
    }
    by_shard.into_values().collect()
}

/// Who holds each shard, by the pid ending the owner's name (`coordinator-HOST-PID`).
async fn owners(cluster: &Cluster) -> anyhow::Result<BTreeMap<u32, u32>> {
    let client = async_nats::connect(&cluster.nats.url).await?;
    let leases = async_nats::jetstream::new(client)
        .get_key_value(subjects::shard::LEASES_BUCKET)
        .await?;
    let mut owners = BTreeMap::new();
    let mut keys = leases.keys().await?;
    while let Some(key) = keys.next().await {
        let key = key?;
        let Some(value) = leases.get(&key).await? else {
            continue;
        };
        let lease: ShardLease = decode(&value, Format::MessagePack)?;
        let shard = key.trim_start_matches("shard-").parse()?;
        let pid = lease.owner.rsplit('-').next().unwrap_or_default().parse()?;
        owners.insert(shard, pid);
    }
    Ok(owners)
}

/// Waits until every shard is held, by exactly the processes `pids`, each holding its share
/// (a hand-over in progress leaves one with more); the owners then.
async fn wait_for_owners(
    cluster: &Cluster,
    pids: &BTreeSet<u32>,
    timeout: Duration,
) -> anyhow::Result<BTreeMap<u32, u32>> {
    let deadline = Instant::now() + timeout;
    let share = SHARDS as usize / pids.len().max(1);
    loop {
        let seen = owners(cluster).await?;
        let holders: BTreeSet<u32> = seen.values().copied().collect();
        let shared = pids
            .iter()
            .all(|pid| seen.values().filter(|owner| *owner == pid).count() >= share);
        if seen.len() == SHARDS as usize && &holders == pids && shared {
            return Ok(seen);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "shards held {seen:?}, wanted every one held by {pids:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pid(process: &Process) -> anyhow::Result<u32> {
    process.pid().context("the process runs")
}

/// Exports the launch plan's milestones into a new file of the workbench's draft, without a
/// model.
fn export(
    cluster: &Cluster,
    workbench: &str,
    target: &str,
    extra: &[&str],
) -> anyhow::Result<JobView> {
    let export = format!(
        r#"{{"path": "plan.csv", "query": "SELECT Milestone FROM data ORDER BY Milestone", "target_path": "{target}", "format": "csv"}}"#
    );
    let args = ["run", workbench, "table_export", "--args", &export];
    cluster
        .cli_ok(&[&args[..], extra, &["--wait", "--json"]].concat())?
        .json()
}

fn workbench_names(cluster: &Cluster) -> anyhow::Result<Vec<String>> {
    let listed: Vec<WorkbenchInfo> = cluster.cli_ok(&["wb", "list", "--json"])?.json()?;
    Ok(listed.into_iter().map(|info| info.name).collect())
}

/// How many `message_added` workshop events the stream holds, per workbench.
async fn message_added_counts(cluster: &Cluster) -> anyhow::Result<BTreeMap<String, u64>> {
    let client = async_nats::connect(&cluster.nats.url).await?;
    let stream = async_nats::jetstream::new(client)
        .get_stream(subjects::workshop::EVENTS_STREAM)
        .await?;
    let mut subjects = stream
        .info_with_subjects("atelier.workshop.evt.*.message_added")
        .await?;
    let mut counts = BTreeMap::new();
    while let Some(entry) = subjects.next().await {
        let (subject, count) = entry?;
        let workbench = subject.split('.').nth(3).unwrap_or_default().to_string();
        counts.insert(workbench, count as u64);
    }
    Ok(counts)
}

#[tokio::test(flavor = "multi_thread")]
async fn coordinators_split_the_shards_and_hand_them_over_as_they_join_and_leave()
-> anyhow::Result<()> {
    let env = env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cluster = Cluster::start_synced(&["tabular"], &env)?;
    let first = pid(cluster
        .coordinator
        .as_ref()
        .context("the first coordinator")?)?;
    // Alone, the first coordinator holds every shard.
    wait_for_owners(&cluster, &BTreeSet::from([first]), Duration::from_secs(10)).await?;

    // Two more join: each takes a share, and the first gives up what they rank first.
    let mut second = cluster.spawn_coordinator("coordinator-b", &env)?;
    let third = cluster.spawn_coordinator("coordinator-c", &env)?;
    let all = BTreeSet::from([first, pid(&second)?, pid(&third)?]);
    let split = wait_for_owners(&cluster, &all, Duration::from_secs(30)).await?;

    // Every workbench's verbs reach its shard's owner, whichever coordinator the request
    // lands on: a file added right after the workbench is created, a job run on it.
    let names = one_per_shard();
    for name in &names {
        cluster.workbench_with_launch_plan(name, "plan.csv")?;
        let job = export(&cluster, name, "out/milestones.csv", &[])?;
        assert_eq!(job.state, JobState::Succeeded, "{name}: {job:?}");
        assert_eq!(job.tool_calls, 1);
    }
    assert_eq!(workbench_names(&cluster)?, {
        let mut sorted = names.clone();
        sorted.sort();
        sorted
    });
    // Every shard's workshop events reach the stream (each shard counts its own ids): the
    // run's user message and its answer, for every workbench.
    let added = message_added_counts(&cluster).await?;
    for name in &names {
        let count = added.get(name.as_str()).copied().unwrap_or(0);
        assert!(
            count >= 2,
            "{name}: {count} message_added events of {added:?}"
        );
    }
    // A job is found whoever holds it, and the listing merged from every shard pages as one.
    let jobs: Vec<JobView> = cluster.cli_ok(&["jobs", "--json"])?.json()?;
    assert_eq!(jobs.len(), names.len());
    let client = async_nats::connect(&cluster.nats.url).await?;
    let mut paged = Vec::new();
    for offset in (0..names.len() as u64 + 3).step_by(3) {
        let page = ListJobs {
            v: PROTOCOL_VERSION,
            state: None,
            workbench: None,
            offset,
            limit: Some(3),
        };
        let once = Policy::once(Duration::from_secs(10));
        let listed = request(&client, &page, once)
            .await
            .map_err(anyhow::Error::msg)?;
        paged.extend(listed.into_iter().map(|job| job.job_id));
    }
    let all: Vec<String> = jobs.iter().map(|job| job.job_id.clone()).collect();
    assert_eq!(paged, all);
    for job in &jobs {
        let found: JobView = cluster.cli_ok(&["job", &job.job_id, "--json"])?.json()?;
        assert_eq!(found.state, JobState::Succeeded);
    }

    // The second leaves cleanly: its shards are taken at once, well within a lease's life.
    let leaving: Vec<u32> = (split.iter())
        .filter(|(_, owner)| **owner == pid(&second).unwrap_or_default())
        .map(|(shard, _)| *shard)
        .collect();
    let stopped = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid(&second)?.to_string()])
        .status()?;
    anyhow::ensure!(status.success());
    let remaining = BTreeSet::from([first, pid(&third)?]);
    wait_for_owners(&cluster, &remaining, Duration::from_secs(30)).await?;
    let handed_over = stopped.elapsed();
    assert!(second.wait_exit(Duration::from_secs(10)));
    assert!(
        handed_over < Duration::from_millis(LEASE_MS / 2),
        "shards {leaving:?} handed over in {handed_over:?} (lease {LEASE_MS} ms)"
    );
    // What the shards held moved with them.
    for name in &names {
        let listing = cluster
            .cli_ok(&["wb", "ls", name, "--draft", "--json"])?
            .stdout;
        assert!(listing.contains("out/milestones.csv"), "{name}: {listing}");
    }

    // The third is killed: a job for a workbench of one of its shards waits, then runs on the
    // coordinator that takes the shard over when its lease runs out.
    let mut third = third;
    let killed_shard = owners(&cluster)
        .await?
        .into_iter()
        .find(|(_, owner)| *owner == pid(&third).unwrap_or_default())
        .map(|(shard, _)| shard)
        .context("the third holds a shard")?;
    let name = names
        .iter()
        .find(|name| shard_of(name, SHARDS) == killed_shard)
        .context("a workbench of that shard")?;
    third.kill();
    let job = export(&cluster, name, "out/again.csv", &["--continue-draft"])?;
    assert_eq!(
        job.state,
        JobState::Succeeded,
        "{job:?}\n{}",
        cluster.logs()
    );
    wait_for_owners(&cluster, &BTreeSet::from([first]), Duration::from_secs(30)).await?;
    assert_eq!(workbench_names(&cluster)?.len(), names.len());
    Ok(())
}

/// Two coordinators sharing eight shards with a 120 s lease (a killed one's shards stay
/// without an owner for the rest of a test): the cluster, the first's pid, the second, and who
/// holds each shard.
async fn two_coordinators_with_a_long_lease()
-> anyhow::Result<(Cluster, u32, Process, BTreeMap<u32, u32>)> {
    let env = [
        ("ATELIER_REPLICATED_STORE", "true"),
        ("ATELIER_STORE_LEASE_MS", "120000"),
        ("ATELIER_STORE_SHARDS", "8"),
    ];
    let cluster = Cluster::start_synced(&[], &env)?;
    let first = pid(cluster
        .coordinator
        .as_ref()
        .context("the first coordinator")?)?;
    let second = cluster.spawn_coordinator("coordinator-b", &env)?;
    let both = BTreeSet::from([first, pid(&second)?]);
    let split = wait_for_owners(&cluster, &both, Duration::from_secs(30)).await?;
    Ok((cluster, first, second, split))
}

/// A coordinator killed with a long lease: until its lease runs out nobody may serve its
/// shards, so a verb for one of them waits a while for an owner and is then refused with
/// `SHARD_UNAVAILABLE` — never answered from another coordinator's copy — while the shards of
/// the coordinator left are served as usual.
#[tokio::test(flavor = "multi_thread")]
async fn a_verb_for_a_shard_nobody_holds_now_is_refused_as_unavailable() -> anyhow::Result<()> {
    let (cluster, first, mut second, split) = two_coordinators_with_a_long_lease().await?;
    let names = one_per_shard();
    for name in &names {
        cluster.cli_ok(&["wb", "create", name])?;
    }
    let held_by = |owner: u32| {
        names
            .iter()
            .find(|name| split.get(&shard_of(name, SHARDS)) == Some(&owner))
            .cloned()
    };
    let orphaned = held_by(pid(&second)?).context("a workbench of the second's")?;
    let kept = held_by(first).context("a workbench of the first's")?;

    second.kill();
    // A submission for the orphaned shard, queued ahead of one for a kept shard, does not hold
    // the kept one up: the intake does not wait for an owner (a shard's verbs do, below).
    let client = async_nats::connect(&cluster.nats.url).await?;
    let mut kept_events = client.subscribe(subjects::job_events("kept-1")).await?;
    for (job_id, workbench) in [("orphaned-1", &orphaned), ("kept-1", &kept)] {
        cluster.publish_raw(&submission(job_id, workbench)).await?;
    }
    tokio::time::timeout(Duration::from_secs(10), kept_events.next())
        .await
        .context("the kept shard's job did not start within 10 s: the intake waited")?
        .context("the event subscription ended")?;

    let asked = Instant::now();
    let refused = cluster.cli(&["wb", "ls", &orphaned])?;
    assert!(refused.failed_with("SHARD_UNAVAILABLE"), "{refused:?}");
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_secs(14),
        "refused after {waited:?}, without waiting for an owner"
    );
    let listing = cluster.cli_ok(&["wb", "ls", &kept, "--json"])?.stdout;
    assert!(
        listing.contains(&format!("\"workbench\": \"{kept}\"")),
        "{listing}"
    );
    // A listing over every shard answers from the shards that have an owner and names the
    // ones left out, rather than failing whole.
    let listed = cluster.cli_ok(&["wb", "list", "--json"])?;
    let names: Vec<String> = serde_json::from_str::<Vec<serde_json::Value>>(&listed.stdout)?
        .iter()
        .filter_map(|info| info["name"].as_str().map(str::to_string))
        .collect();
    assert!(
        names.contains(&kept) && !names.contains(&orphaned),
        "{names:?}"
    );
    let orphaned_shard = shard_of(&orphaned, SHARDS).to_string();
    let warning = listed
        .stderr
        .lines()
        .find(|line| line.starts_with("warning: SHARD_UNAVAILABLE: shard"))
        .with_context(|| format!("no warning: {}", listed.stderr))?;
    let named = warning
        .trim_start_matches("warning: SHARD_UNAVAILABLE: shard")
        .trim_start_matches('s')
        .trim_start()
        .split(" had no owner")
        .next()
        .unwrap_or_default();
    assert!(
        named.split(", ").any(|shard| shard == orphaned_shard),
        "{warning}"
    );
    Ok(())
}

/// A model-free submission to the JOBS intake (its workflow's one step lists the files).
fn submission(job_id: &str, workbench: &str) -> JobSubmit {
    let list_files = WorkflowStep {
        tool: "list_files".into(),
        args: serde_json::json!({}),
        name: None,
    };
    JobSubmit {
        auto_approve: true,
        continue_draft: true,
        workflow: Some(Workflow {
            name: None,
            steps: vec![list_files],
        }),
        ..JobSubmit::new(job_id.into(), workbench.into(), "list".into())
    }
}

/// How many lines of `name`'s log hold every one of `needles`.
fn lines_with(cluster: &Cluster, name: &str, needles: &[&str]) -> usize {
    let log = std::fs::read_to_string(cluster.dir.path().join(format!("{name}.log")));
    log.unwrap_or_default()
        .lines()
        .filter(|line| needles.iter().all(|needle| line.contains(needle)))
        .count()
}

/// Jobs run on every shard while a second coordinator joins: the first stops the runs of the
/// shards it hands over before it lets them go, so each job ends once — on the coordinator
/// holding its shard by then — having written its file, and nothing runs on beside the new
/// owner.
#[tokio::test(flavor = "multi_thread")]
async fn jobs_running_on_shards_handed_over_end_once_on_their_new_owner() -> anyhow::Result<()> {
    // The item's second turn, after its write, answers slowly: the hand-over falls in it.
    let script = serde_json::from_value(serde_json::json!({
        "research": [{"content": "Nothing to read."}],
        "plan": [{"content": "- [ ] 1. Out — write out.md"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "out.md", "content": "# Out\n"}}]},
            {"content": "Written.", "delay_ms": 3000}
        ]},
        "summary": [{"content": "out.md is in the draft."}]
    }))?;
    let model = atelier_tests::scripted::ScriptedModel::start(script).await?;
    let env = env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cluster = Cluster::start_synced(&["tabular", "office"], &env)?;
    let names = one_per_shard();
    for (n, name) in names.iter().enumerate() {
        cluster.cli_ok(&["wb", "create", name])?;
        let job_id = format!("moving-{n}");
        let flags = ["--job-id", job_id.as_str()];
        cluster.submit_with(name, "Write out.md", &model.model_spec(), &flags)?;
    }
    atelier_tests::wait_until(Duration::from_secs(60), || {
        model.count("implement", Some(1), 1) >= names.len()
    })
    .with_context(|| cluster.logs())?;

    let second = cluster.spawn_coordinator("coordinator-b", &env)?;
    let first = pid(cluster
        .coordinator
        .as_ref()
        .context("the first coordinator")?)?;
    wait_for_owners(
        &cluster,
        &BTreeSet::from([first, pid(&second)?]),
        Duration::from_secs(30),
    )
    .await?;
    for (n, workbench) in names.iter().enumerate() {
        let job_id = format!("moving-{n}");
        cluster.wait_succeeded(&job_id, Duration::from_secs(60))?;
        let ended = format!("job_id={job_id} workbench");
        let ends = || -> usize {
            ["coordinator", "coordinator-b"]
                .iter()
                .map(|name| lines_with(&cluster, name, &[&ended, "job finished"]))
                .sum()
        };
        // The end is recorded, then logged: the log line may follow the state a moment later.
        let _ = atelier_tests::wait_until(Duration::from_secs(5), || ends() > 0);
        let ends = ends();
        assert_eq!(ends, 1, "{job_id} ended {ends} times\n{}", cluster.logs());
        let draft = cluster
            .cli_ok(&["wb", "cat", workbench, "out.md", "--draft"])?
            .stdout;
        assert_eq!(draft, "# Out\n");
    }
    // Some shards moved while their jobs ran: the new owner took them over mid-job.
    assert!(lines_with(&cluster, "coordinator", &["handing the shard over"]) > 0);
    Ok(())
}

/// Replication settings out of their range are refused by name when a coordinator starts, not
/// quietly changed: a shard count is fixed for the deployment's life.
#[test]
fn a_coordinator_refuses_replication_settings_out_of_range() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let nats = NatsServer::start(dir.path())?;
    for (setting, value) in [
        ("ATELIER_STORE_SHARDS", "0"),
        ("ATELIER_STORE_SHARDS", "1025"),
        ("ATELIER_STORE_LEASE_MS", "100"),
        ("ATELIER_STORE_REPLICAS", "0"),
        ("ATELIER_STORE_SNAPSHOT_ENTRIES", "0"),
        // Three copies on one server that is not in a cluster.
        ("ATELIER_STORE_REPLICAS", "3"),
    ] {
        let data = dir.path().join(format!("data-{setting}-{value}"));
        let data = data.to_string_lossy();
        let label = format!("coordinator-{setting}-{value}");
        let args = ["coordinator", "--nats", nats.url.as_str(), "--data", &data];
        let env = [("ATELIER_REPLICATED_STORE", "true"), (setting, value)];
        let mut coordinator = Process::spawn_with_env(&label, &args, dir.path(), &env)?;
        // An accepted setting starts a coordinator that runs on (stopped when dropped).
        let status = coordinator.wait_status(Duration::from_secs(20));
        let stderr = std::fs::read_to_string(dir.path().join(format!("{label}.log")))?;
        assert!(
            status.is_some_and(|status| !status.success()),
            "{setting}={value} was accepted"
        );
        let name = setting.trim_start_matches("ATELIER_").to_lowercase();
        assert!(stderr.contains(&name), "{setting}={value}: {stderr}");
    }
    Ok(())
}

/// A batch's child whose shard has no owner now is neither lost nor failed: its runner goes on
/// with the other targets and submits it again at every reconcile (the shard's lease outlasts
/// this test, so it stays `running`).
#[tokio::test(flavor = "multi_thread")]
async fn a_child_for_a_shard_nobody_holds_waits_while_the_batch_goes_on() -> anyhow::Result<()> {
    let (cluster, first, mut second, split) = two_coordinators_with_a_long_lease().await?;
    let held_by = |names: &[String], owner: u32| {
        names
            .iter()
            .find(|name| split.get(&shard_of(name, SHARDS)) == Some(&owner))
            .cloned()
    };
    // Targets run in the order of their names: the kept shard's first ("a-…" before "b-…").
    let kept_names: Vec<String> = (0..64).map(|n| format!("a-{n}")).collect();
    let orphaned_names: Vec<String> = (0..64).map(|n| format!("b-{n}")).collect();
    let kept = held_by(&kept_names, first).context("a workbench of the first's")?;
    let orphaned =
        held_by(&orphaned_names, pid(&second)?).context("a workbench of the second's")?;
    let batch_ids: Vec<String> = (0..64).map(|n| format!("batch-{n}")).collect();
    let batch_id = held_by(&batch_ids, first).context("a batch id of the first's")?;
    let notes = cluster.dir.path().join("notes.md");
    std::fs::write(&notes, "# Notes\n")?;
    for workbench in [&kept, &orphaned] {
        cluster.cli_ok(&["wb", "create", workbench])?;
        cluster.cli_ok(&["wb", "add", workbench, &notes.to_string_lossy()])?;
    }

    // One target at a time; the first (the kept shard's) waits for approval of its delete.
    cluster.cli_ok(&[
        "batch",
        "submit",
        "--workbenches",
        &format!("{kept},{orphaned}"),
        "--tool",
        "delete_file",
        "--args",
        r#"{"path": "notes.md"}"#,
        "--concurrency",
        "1",
        "--batch-id",
        &batch_id,
    ])?;
    let waiting = atelier_messages::batch::child_job_id(&batch_id, 0, 0);
    cluster.wait_for_state(&waiting, JobState::AwaitingApproval)?;
    second.kill();
    cluster.cli_ok(&["cancel", &waiting])?;

    // The orphaned shard's target is dispatched, its child cannot be recorded: it stays
    // running, submitted again at each reconcile, and the batch does not fail.
    let log = cluster.dir.path().join("coordinator.log");
    atelier_tests::wait_until(Duration::from_secs(60), || {
        std::fs::read_to_string(&log).is_ok_and(|log| {
            log.matches("child not recorded yet; submitting it again")
                .count()
                >= 2
        })
    })
    .with_context(|| cluster.logs())?;
    let view: atelier_messages::batch::BatchView = cluster
        .cli_ok(&["batch", "status", &batch_id, "--json"])?
        .json()?;
    assert_eq!(view.state, atelier_messages::batch::BatchState::Running);
    assert_eq!(
        (
            view.counts.cancelled,
            view.counts.running,
            view.counts.failed
        ),
        (1, 1, 0),
        "{view:?}"
    );
    Ok(())
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// A replicated deployment's garbage collection keeps whatever any shard references: the files
/// of workbenches in every shard stay in the host's blob cache, a blob nobody references is
/// kept while it is newer than the grace period (another shard's write may be about to
/// reference it) and removed once older.
#[tokio::test(flavor = "multi_thread")]
async fn garbage_collection_keeps_what_any_shard_references() -> anyhow::Result<()> {
    let env = env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cluster = Cluster::start_synced(&[], &env)?;
    let first = pid(cluster
        .coordinator
        .as_ref()
        .context("the first coordinator")?)?;
    wait_for_owners(&cluster, &BTreeSet::from([first]), Duration::from_secs(10)).await?;
    let names = one_per_shard();
    let sources = tempfile::tempdir()?;
    for name in &names {
        cluster.cli_ok(&["wb", "create", name])?;
        let file = sources.path().join(format!("{name}.txt"));
        std::fs::write(&file, format!("notes of {name}\n"))?;
        let path = file.to_string_lossy().to_string();
        cluster.cli_ok(&["wb", "add", name, &path, "--as", "notes.txt"])?;
    }
    let blobs = cluster.data_dir().join("blobs");
    let blob = |digest: &str| blobs.join(&digest[..2]).join(digest);
    let cached: Vec<_> = (names.iter())
        .map(|name| blob(&sha256_hex(format!("notes of {name}\n").as_bytes())))
        .collect();
    assert!(cached.iter().all(|path| path.exists()), "{cached:?}");
    let stray = blob(&sha256_hex(b"referenced by nobody"));
    std::fs::create_dir_all(stray.parent().context("a blob's folder")?)?;
    std::fs::write(&stray, b"referenced by nobody")?;

    let collected: serde_json::Value = cluster.cli_ok(&["gc", "--json"])?.json()?;
    assert_eq!(collected["removed_blobs"], 0, "{collected}");
    assert_eq!(
        collected["kept_blobs"],
        names.len() as u64 + 1,
        "{collected}"
    );
    assert!(stray.exists());

    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7_200);
    std::fs::File::options()
        .write(true)
        .open(&stray)?
        .set_modified(two_hours_ago)?;
    let collected: serde_json::Value = cluster.cli_ok(&["gc", "--json"])?.json()?;
    assert_eq!(collected["removed_blobs"], 1, "{collected}");
    assert!(!stray.exists());
    assert!(cached.iter().all(|path| path.exists()), "{cached:?}");
    for name in &names {
        let notes = cluster.cli_ok(&["wb", "cat", name, "notes.txt"])?;
        assert_eq!(notes.stdout, format!("notes of {name}\n"));
    }

    // With a second coordinator (its own data directory, as on another host), one collection
    // sweeps both hosts, whichever coordinator it reaches.
    let second = cluster.spawn_coordinator("coordinator-b", &env)?;
    let both = BTreeSet::from([first, pid(&second)?]);
    wait_for_owners(&cluster, &both, Duration::from_secs(30)).await?;
    let second_blobs = cluster.dir.path().join("coordinator-b").join("blobs");
    let strays = [
        stray.clone(),
        second_blobs.join(stray.strip_prefix(&blobs)?),
    ];
    for stray in &strays {
        std::fs::create_dir_all(stray.parent().context("a blob's folder")?)?;
        std::fs::write(stray, b"referenced by nobody")?;
        std::fs::File::options()
            .write(true)
            .open(stray)?
            .set_modified(two_hours_ago)?;
    }
    let collected: serde_json::Value = cluster.cli_ok(&["gc", "--json"])?.json()?;
    assert_eq!(collected["hosts"], 2, "{collected}");
    assert_eq!(collected["hosts_unanswered"], 0, "{collected}");
    assert_eq!(collected["removed_blobs"], 2, "{collected}");
    assert!(strays.iter().all(|stray| !stray.exists()));
    assert!(cached.iter().all(|path| path.exists()), "{cached:?}");
    let text = cluster.cli_ok(&["gc"])?;
    assert!(text.stdout.contains("on 2 hosts"), "{}", text.stdout);
    // Garbage on the hosts' subject gets a code, and the coordinators go on.
    let client = async_nats::connect(&cluster.nats.url).await?;
    let reply = atelier_tests::nats_request(
        &client,
        subjects::shard::SWEEP_HOST,
        b"{not json".to_vec(),
        true,
    )
    .await?;
    let reply: serde_json::Value = serde_json::from_slice(&reply)?;
    assert_eq!(reply["error"]["code"], "VALIDATION_FAILED", "{reply}");
    let collected: serde_json::Value = cluster.cli_ok(&["gc", "--json"])?.json()?;
    assert_eq!(collected["hosts"], 2, "{collected}");
    Ok(())
}

/// Text of more than the 64 KiB a shard's store keeps inline: a blob of the replicated store's
/// bucket.
fn large_text(tag: &str) -> String {
    (0..8_000)
        .map(|line| format!("{tag} line {line}\n"))
        .collect()
}

/// The replicated store's bucket keeps what any shard references; an object nobody references
/// is removed once the grace period has passed since it was written or last reused, and one
/// reused after half of it is freshened first.
#[tokio::test(flavor = "multi_thread")]
async fn the_stores_bucket_loses_what_no_shard_references_after_the_grace_period()
-> anyhow::Result<()> {
    let mut env = env();
    env.push(("ATELIER_STORE_BLOB_GRACE_SECS", "2".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cluster = Cluster::start_synced(&[], &env)?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let bucket = async_nats::jetstream::new(client)
        .get_object_store(subjects::BLOB_STORE_BUCKET)
        .await?;
    let sources = tempfile::tempdir()?;
    let add = |workbench: &str, content: &str| -> anyhow::Result<()> {
        let file = sources.path().join(format!("{workbench}.txt"));
        std::fs::write(&file, content)?;
        let path = file.to_string_lossy().to_string();
        cluster.cli_ok(&["wb", "add", workbench, &path, "--as", "big.txt"])?;
        Ok(())
    };
    cluster.cli_ok(&["wb", "create", "kept"])?;
    add("kept", &large_text("kept"))?;
    // Two objects nobody references yet: one will be, the other never.
    let (reused, orphan) = (large_text("reused"), large_text("orphan"));
    for content in [&reused, &orphan] {
        let mut bytes = content.as_bytes();
        bucket.put(sha256_hex(bytes).as_str(), &mut bytes).await?;
    }
    let collected: serde_json::Value = cluster.cli_ok(&["gc", "--json"])?.json()?;
    assert_eq!(collected["removed_stored_blobs"], 0, "{collected}");
    assert_eq!(collected["kept_stored_blobs"], 3, "{collected}");

    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let reused_digest = sha256_hex(reused.as_bytes());
    let written = bucket.info(&reused_digest).await?.modified;
    cluster.cli_ok(&["wb", "create", "reuser"])?;
    add("reuser", &reused)?;
    let freshened = bucket.info(&reused_digest).await?.modified;
    assert!(freshened > written, "{written:?} then {freshened:?}");

    let collected: serde_json::Value = cluster.cli_ok(&["gc", "--json"])?.json()?;
    assert_eq!(collected["removed_stored_blobs"], 1, "{collected}");
    assert_eq!(collected["kept_stored_blobs"], 2, "{collected}");
    assert!(bucket.get(sha256_hex(orphan.as_bytes())).await.is_err());
    // What is referenced reads back from the bucket once the host's cache has lost it.
    for (workbench, content) in [("kept", large_text("kept")), ("reuser", reused)] {
        let digest = sha256_hex(content.as_bytes());
        let cached = cluster
            .data_dir()
            .join("blobs")
            .join(&digest[..2])
            .join(&digest);
        std::fs::remove_file(&cached)?;
        let read = cluster.cli_ok(&["wb", "cat", workbench, "big.txt"])?;
        assert!(read.stdout == content, "{workbench}: other content");
    }
    Ok(())
}
