//! Shard leases, the fenced changelog and shard snapshots (docs/adr/0014) on a real three-node
//! NATS cluster with every stream and bucket replicated three times: one owner per shard, a
//! deposed owner's late writes refused, a takeover that replays every committed write once,
//! forged entries refused on replay, snapshots checked by digest, a change larger than one
//! entry applied whole (and never in part), and appends that go on when the owner's NATS node
//! is killed.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use atelier_coordinator::error::CoordinatorError;
use atelier_coordinator::replication::changelog::{Changelog, ShardLog};
use atelier_coordinator::replication::lease::{Lease, Leases};
use atelier_coordinator::replication::replica::{Replica, Snapshots};
use atelier_coordinator::replication::snapshot_file::Snapshot;
use atelier_coordinator::replication::{Checked, Packed, Position, ReplicationSettings};
use atelier_messages::shard::{ChangelogEntry, EntryKind, Mutation};
use atelier_messages::subjects::shard;
use atelier_messages::{ErrorCode, Format, PROTOCOL_VERSION, encode};
use atelier_tests::nats_cluster::NatsCluster;
use sha2::Digest;

const SETTINGS: ReplicationSettings = ReplicationSettings {
    lease_ttl: Duration::from_secs(2),
    replicas: 3,
    snapshot_entries: 10_000,
    shards: 16,
    cache_bytes: 16 * CACHE,
    blob_grace: atelier_coordinator::replication::DEFAULT_BLOB_GRACE,
};

/// The page cache of one test store.
const CACHE: u64 = 8 << 20;

/// A coordinator's view: its own connection (to node `first`, then the others) and jetstream
/// context.
async fn connect(cluster: &NatsCluster, first: usize) -> anyhow::Result<jetstream::Context> {
    let client = async_nats::ConnectOptions::new()
        .retain_servers_order()
        .connect(cluster.addrs_from(first)?)
        .await?;
    Ok(jetstream::new(client))
}

fn write(key: &str, value: &str) -> Mutation {
    Mutation {
        tree: "jobs".into(),
        key: key.as_bytes().to_vec(),
        value: Some(value.as_bytes().to_vec()),
    }
}

fn code(error: CoordinatorError) -> Option<ErrorCode> {
    match error {
        CoordinatorError::Rejected(body) => Some(body.code),
        _ => None,
    }
}

/// Takes `shard` over into `replica` with `lease`.
async fn take_over(
    changelog: &Changelog,
    replica: &Replica,
    lease: &Lease,
) -> anyhow::Result<ShardLog> {
    let mut apply = |seq: u64, checked: &Checked| replica.apply(seq, checked);
    let position = replica.position()?;
    let (log, _) =
        ShardLog::take_over(changelog, lease.shard, lease.epoch, position, &mut apply).await?;
    Ok(log)
}

/// Appends `mutations` and applies them to the owner's own store.
async fn commit(
    log: &mut ShardLog,
    replica: &Replica,
    mutations: Vec<Mutation>,
) -> anyhow::Result<u64> {
    let seq = log.append(mutations.clone()).await?;
    replica.apply(seq, &Checked::Mutations(mutations))?;
    Ok(seq)
}

fn jobs(replica: &Replica, keys: &[&str]) -> anyhow::Result<Vec<Option<String>>> {
    keys.iter()
        .map(|key| {
            Ok(replica
                .get("jobs", key.as_bytes())?
                .map(|value| String::from_utf8_lossy(&value).into_owned()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shard_has_one_owner_and_a_deposed_owners_late_writes_are_refused() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let cluster = NatsCluster::start(dir.path()).await?;
    let a = connect(&cluster, 0).await?;
    let b = connect(&cluster, 1).await?;
    let (leases_a, leases_b) = (
        Leases::open(&a, &SETTINGS, "coordinator-a").await?,
        Leases::open(&b, &SETTINGS, "coordinator-b").await?,
    );
    let (log_a, log_b) = (
        Changelog::open(&a, &SETTINGS).await?,
        Changelog::open(&b, &SETTINGS).await?,
    );

    let mut lease_a = leases_a.acquire(5).await?.expect("shard 5 is free");
    assert_eq!(leases_b.acquire(5).await?, None, "one owner at a time");
    let holder = leases_b.holder(5).await?.expect("held");
    assert_eq!(
        (holder.owner.as_str(), holder.epoch),
        ("coordinator-a", lease_a.epoch)
    );
    leases_a.renew(&mut lease_a).await?;
    assert_eq!(leases_b.acquire(5).await?, None, "a renewed lease stays");

    let replica_a = Replica::open(&dir.path().join("a"), CACHE)?;
    let mut owner_a = take_over(&log_a, &replica_a, &lease_a).await?;
    for n in 1..=3 {
        commit(
            &mut owner_a,
            &replica_a,
            vec![write(&format!("j{n}"), "by a")],
        )
        .await?;
    }

    // A stops renewing (paused): B takes the shard when the lease runs out.
    let paused = Instant::now();
    let lease_b = loop {
        if let Some(lease) = leases_b.acquire(5).await? {
            break lease;
        }
        anyhow::ensure!(
            paused.elapsed() < Duration::from_secs(15),
            "the lease never ran out"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let waited = paused.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(5),
        "taken over {waited:?} after the last renewal (lease 2 s)"
    );
    assert!(
        lease_b.epoch > lease_a.epoch,
        "{lease_b:?} after {lease_a:?}"
    );
    let replica_b = Replica::open(&dir.path().join("b"), CACHE)?;
    let mut owner_b = take_over(&log_b, &replica_b, &lease_b).await?;
    assert_eq!(
        jobs(&replica_b, &["j1", "j2", "j3"])?,
        vec![Some("by a".to_string()); 3],
        "every write A committed is in B's store"
    );

    // A resumes: its renewal and its writes are refused; nothing of it lands.
    let renewed = leases_a
        .renew(&mut lease_a)
        .await
        .expect_err("the lease was lost");
    assert_eq!(code(renewed), Some(ErrorCode::ShardFenced));
    let late = owner_a
        .append(vec![write("j9", "late")])
        .await
        .expect_err("fenced");
    assert_eq!(code(late), Some(ErrorCode::ShardFenced));
    commit(&mut owner_b, &replica_b, vec![write("j4", "by b")]).await?;

    // A store rebuilt from the changelog alone holds each committed write once, none late.
    let rebuilt = Replica::open(&dir.path().join("rebuilt"), CACHE)?;
    let mut apply = |seq: u64, checked: &Checked| rebuilt.apply(seq, checked);
    let replayed = log_a.replay(5, Position::default(), &mut apply).await?;
    assert_eq!(
        replayed.applied, 6,
        "two fences and four writes: {replayed:?}"
    );
    assert!(replayed.refused.is_empty(), "{replayed:?}");
    assert_eq!(replayed.position.epoch, lease_b.epoch);
    assert_eq!(
        jobs(&rebuilt, &["j1", "j4", "j9"])?,
        vec![Some("by a".into()), Some("by b".into()), None]
    );
    // A second takeover at B's own (now old) epoch is refused.
    let again = ShardLog::take_over(
        &log_a,
        5,
        lease_b.epoch,
        Position::default(),
        &mut |_, _| Ok(()),
    )
    .await
    .err()
    .and_then(code);
    assert_eq!(again, Some(ErrorCode::ShardFenced));

    // A clean hand-over: B releases, and the shard is free at once (no lease to wait out).
    let released = Instant::now();
    leases_b.release(lease_b).await?;
    let next = leases_a
        .acquire(5)
        .await?
        .expect("free right after the release");
    assert!(released.elapsed() < Duration::from_secs(1));
    assert!(next.epoch > lease_a.epoch);
    Ok(())
}

/// Every hand-over in a row is free at once, whichever node answers the read behind a create: a
/// replica of the leases bucket that has not yet applied the release must not make the shard look
/// held, and who holds a shard reads the same from every node.
#[tokio::test(flavor = "multi_thread")]
async fn a_released_lease_is_free_at_once_from_every_node() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cluster = NatsCluster::start(dir.path()).await?;
    let mut leases = Vec::new();
    for node in 0..3 {
        let jetstream = connect(&cluster, node).await?;
        leases.push(Leases::open(&jetstream, &SETTINGS, &format!("coordinator-{node}")).await?);
    }
    let mut lease = leases[0].acquire(7).await?.expect("shard 7 is free");
    for round in 1..=150 {
        let (from, to) = (&leases[(round - 1) % 3], &leases[round % 3]);
        from.release(lease).await?;
        lease = to
            .acquire(7)
            .await?
            .unwrap_or_else(|| panic!("hand-over {round}: free right after the release"));
        for reader in &leases {
            let holder = reader.holder(7).await?.expect("held");
            assert_eq!(
                (holder.owner, holder.epoch),
                (format!("coordinator-{}", round % 3), lease.epoch),
                "hand-over {round}"
            );
        }
    }
    Ok(())
}

/// Publishes `payload` on `shard`'s subject as a forger would: no precondition.
async fn forge(
    jetstream: &jetstream::Context,
    on_shard: u32,
    payload: Vec<u8>,
) -> anyhow::Result<()> {
    jetstream
        .publish(shard::log(on_shard), payload.into())
        .await?
        .await?;
    Ok(())
}

fn entry(shard: u32, epoch: u64, kind: EntryKind) -> anyhow::Result<Vec<u8>> {
    let entry = ChangelogEntry {
        v: PROTOCOL_VERSION,
        shard,
        epoch,
        kind,
    };
    Ok(encode(&entry, Format::MessagePack)?)
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_entries_are_refused_on_replay_and_a_tampered_snapshot_is_not_restored()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cluster = NatsCluster::start(dir.path()).await?;
    let js = connect(&cluster, 0).await?;
    let leases = Leases::open(&js, &SETTINGS, "coordinator-a").await?;
    let changelog = Changelog::open(&js, &SETTINGS).await?;
    let lease = leases.acquire(2).await?.expect("free");
    let replica = Replica::open(&dir.path().join("owner"), CACHE)?;
    let mut owner = take_over(&changelog, &replica, &lease).await?;
    commit(&mut owner, &replica, vec![write("j1", "real")]).await?;

    let mutations = |key: &str| EntryKind::Mutations {
        mutations: vec![write(key, "forged")],
        continued: false,
    };
    forge(&js, 2, entry(7, lease.epoch, mutations("other-shard"))?).await?;
    forge(&js, 2, entry(2, lease.epoch - 1, mutations("stale-epoch"))?).await?;
    forge(
        &js,
        2,
        entry(2, lease.epoch + 100, mutations("unfenced-epoch"))?,
    )
    .await?;
    forge(&js, 2, entry(2, lease.epoch, EntryKind::Fence)?).await?;
    forge(&js, 2, b"\x93not an entry".to_vec()).await?;
    let reserved = EntryKind::Mutations {
        mutations: vec![Mutation {
            tree: "__replication".into(),
            key: b"position".to_vec(),
            value: Some(b"{}".to_vec()),
        }],
        continued: false,
    };
    forge(&js, 2, entry(2, lease.epoch, reserved)?).await?;

    let rebuilt = Replica::open(&dir.path().join("rebuilt"), CACHE)?;
    let mut apply = |seq: u64, checked: &Checked| rebuilt.apply(seq, checked);
    let replayed = changelog.replay(2, Position::default(), &mut apply).await?;
    let refused: Vec<ErrorCode> = replayed.refused.iter().map(|(_, body)| body.code).collect();
    assert_eq!(
        refused,
        [
            ErrorCode::ValidationFailed,
            ErrorCode::ShardFenced,
            ErrorCode::ShardFenced,
            ErrorCode::ShardFenced,
            ErrorCode::ValidationFailed,
            ErrorCode::ValidationFailed,
        ],
        "{replayed:?}"
    );
    assert_eq!(replayed.applied, 2, "the fence and the real write");
    assert_eq!(
        jobs(
            &rebuilt,
            &["j1", "other-shard", "stale-epoch", "unfenced-epoch"]
        )?,
        vec![Some("real".into()), None, None, None]
    );
    assert_eq!(rebuilt.position()?.epoch, lease.epoch);
    // The forgeries moved the subject on behind the owner: its next append is refused rather
    // than ordered after entries it never saw (only the coordinator role may publish there).
    let refused_append = owner
        .append(vec![write("j2", "real")])
        .await
        .err()
        .and_then(code);
    assert_eq!(refused_append, Some(ErrorCode::ShardFenced));

    // Snapshots: what is stored is restored; a tampered one is refused.
    let snapshots = Snapshots::open(&js, &SETTINGS).await?;
    let snapshot = rebuilt.export_to(2, &dir.path().join("taken"))?;
    assert_eq!(snapshots.put_file(&snapshot).await?, snapshot.size);
    let fetched = dir.path().join("fetched");
    let restored = snapshots.fetch(2, &fetched).await?.expect("stored");
    assert_eq!(
        (restored.header, &restored.digest, restored.size),
        (snapshot.header, &snapshot.digest, snapshot.size)
    );
    assert_eq!(
        std::fs::read(&restored.path)?,
        std::fs::read(&snapshot.path)?
    );
    let copy = Replica::import_from(&dir.path().join("copy"), CACHE, &restored)?;
    assert_eq!(copy.position()?, rebuilt.position()?);
    assert_eq!(jobs(&copy, &["j1"])?, vec![Some("real".to_string())]);
    assert_eq!(snapshots.fetch(3, &fetched).await?, None);

    let store = js.get_object_store(shard::SNAPSHOTS_BUCKET).await?;
    let name = shard::snapshot(2, snapshot.header.position.seq);
    assert_eq!(snapshots.names(2).await?, std::slice::from_ref(&name));
    let genuine = store.info(&name).await?;
    let tampered = async_nats::jetstream::object_store::ObjectMetadata {
        name: name.clone(),
        metadata: genuine.metadata.clone(),
        ..Default::default()
    };
    let mut other = std::fs::read(rebuilt.export_to(4, &dir.path().join("other"))?.path)?;
    other.push(0);
    store.put(tampered, &mut other.as_slice()).await?;
    let refused = snapshots.fetch(2, &fetched).await.expect_err("tampered");
    assert_eq!(code(refused), Some(ErrorCode::SnapshotCorrupt));
    assert_eq!(
        std::fs::read_dir(&fetched)?.count(),
        0,
        "a refused snapshot leaves no file"
    );

    // A snapshot of the first format (the whole store as one MessagePack value) still restores.
    let whole = Snapshot {
        v: 1,
        shard: 2,
        position: rebuilt.position()?,
        trees: [(
            "jobs".to_string(),
            vec![(b"j1".to_vec().into(), b"real".to_vec().into())],
        )]
        .into(),
    };
    let whole = encode(&whole, Format::MessagePack)?;
    let legacy = async_nats::jetstream::object_store::ObjectMetadata {
        name: name.clone(),
        metadata: [(
            "atelier-sha256".to_string(),
            hex::encode(sha2::Sha256::digest(&whole)),
        )]
        .into(),
        ..Default::default()
    };
    store.put(legacy, &mut whole.as_slice()).await?;
    let restored = snapshots.fetch(2, &fetched).await?.expect("stored");
    let copy = Replica::import_from(&dir.path().join("legacy"), CACHE, &restored)?;
    assert_eq!(copy.position()?, rebuilt.position()?);
    assert_eq!(jobs(&copy, &["j1"])?, vec![Some("real".to_string())]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn appends_go_on_when_the_owners_nats_node_is_killed() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut cluster = NatsCluster::start(dir.path()).await?;
    let client = async_nats::ConnectOptions::new()
        .retain_servers_order()
        .connect(cluster.addrs_from(0)?)
        .await?;
    let js = jetstream::new(client.clone());
    let leases = Leases::open(&js, &SETTINGS, "coordinator-a").await?;
    let changelog = Changelog::open(&js, &SETTINGS).await?;
    let lease = leases.acquire(1).await?.expect("free");
    let replica = Replica::open(&dir.path().join("owner"), CACHE)?;
    let mut owner = take_over(&changelog, &replica, &lease).await?;
    commit(&mut owner, &replica, vec![write("j1", "before")]).await?;

    let connected = client.server_info().port;
    let node = (0..3)
        .find(|n| cluster.node_url(*n).ends_with(&format!(":{connected}")))
        .expect("connected to a node");
    cluster.kill(node);
    let killed = Instant::now();
    // Each attempt is one append after `j1`; a retry after a lost acknowledgement is answered as
    // the duplicate it is.
    let seq = loop {
        match owner.append(vec![write("j2", "after")]).await {
            Ok(seq) => break seq,
            Err(error) => {
                let fenced = matches!(&error, CoordinatorError::Rejected(body) if body.code == ErrorCode::ShardFenced);
                anyhow::ensure!(
                    !fenced,
                    "the owner's own retried append was refused: {error}"
                );
                anyhow::ensure!(
                    killed.elapsed() < Duration::from_secs(30),
                    "no append 30 s after the node died: {error}\n{}",
                    cluster.logs()
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    replica.apply(seq, &Checked::Mutations(vec![write("j2", "after")]))?;
    // Reading back may time out while the cluster settles; a replay resumes where it stopped.
    let rebuilt = Replica::open(&dir.path().join("rebuilt"), CACHE)?;
    let applied = std::cell::Cell::new(0);
    let mut apply = |seq: u64, checked: &Checked| {
        if seq > rebuilt.position()?.seq {
            applied.set(applied.get() + 1);
        }
        rebuilt.apply(seq, checked)
    };
    loop {
        match changelog.replay(1, rebuilt.position()?, &mut apply).await {
            Ok(_) => break,
            Err(error) => {
                anyhow::ensure!(
                    killed.elapsed() < Duration::from_secs(60),
                    "the changelog could not be read back: {error}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    assert_eq!(applied.get(), 3, "the fence and each write once");
    assert_eq!(
        jobs(&rebuilt, &["j1", "j2"])?,
        vec![Some("before".into()), Some("after".into())]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_larger_than_an_entry_is_applied_whole_and_an_unfinished_one_never()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cluster = NatsCluster::start(dir.path()).await?;
    let js = connect(&cluster, 0).await?;
    let leases = Leases::open(&js, &SETTINGS, "coordinator-a").await?;
    let changelog = Changelog::open(&js, &SETTINGS).await?;
    let part = |key: &str, continued| Packed {
        mutations: vec![write(key, "part")],
        continued,
    };
    let held = |replica: &Replica| jobs(replica, &["a", "b", "c", "d", "e"]);
    let part_written = Some("part".to_string());

    let lease = leases.acquire(6).await?.expect("shard 6 is free");
    let replica = Replica::open(&dir.path().join("a"), CACHE)?;
    let mut owner = take_over(&changelog, &replica, &lease).await?;
    // One change in three entries, as `pack` cuts a change beyond an entry's budget. A reader
    // in the middle of it sees none of it, then all of it.
    owner.append_packed(part("a", true)).await?;
    owner.append_packed(part("b", true)).await?;
    let reader = Replica::open(&dir.path().join("reader"), CACHE)?;
    let mut apply = |seq: u64, checked: &Checked| reader.apply(seq, checked);
    let middle = changelog.replay(6, Position::default(), &mut apply).await?;
    assert!(middle.last > middle.position.seq, "{middle:?}");
    assert_eq!(held(&reader)?, vec![None; 5]);
    owner.append_packed(part("c", false)).await?;
    changelog.replay(6, middle.position, &mut apply).await?;
    assert_eq!(
        held(&reader)?,
        vec![
            part_written.clone(),
            part_written.clone(),
            part_written.clone(),
            None,
            None
        ]
    );

    // The owner stops between two parts of its next change: the new owner fences them off.
    owner.append_packed(part("d", true)).await?;
    leases.release(lease).await?;
    let lease = leases.acquire(6).await?.expect("released");
    let replica_b = Replica::open(&dir.path().join("b"), CACHE)?;
    let mut owner_b = take_over(&changelog, &replica_b, &lease).await?;
    commit(&mut owner_b, &replica_b, vec![write("e", "whole")]).await?;
    let expected = vec![
        part_written.clone(),
        part_written.clone(),
        part_written,
        None,
        Some("whole".to_string()),
    ];
    assert_eq!(held(&replica_b)?, expected);
    // Replayed from the start, the changelog gives the new owner's store.
    let fresh = Replica::open(&dir.path().join("fresh"), CACHE)?;
    let mut apply = |seq: u64, checked: &Checked| fresh.apply(seq, checked);
    changelog.replay(6, Position::default(), &mut apply).await?;
    assert_eq!(held(&fresh)?, expected);
    Ok(())
}
