//! The attack suite: with only a client's or a worker's credentials, every path around the
//! accounts (docs/adr/0016) is tried on a real server — `atelier up`, and coordinators sharing a
//! replicated store under the documented accounts — and each must be refused, leave no forged
//! byte anywhere, and leave the deployment running jobs.
//!
//! The paths: JetStream's API, which publishes on a caller's behalf to a reply or deliver
//! subject it names (direct and message gets with a foreign reply, consumers with a foreign
//! deliver subject), stream creation, deletion and purges, KV puts to the shard leases and the
//! members, changelog appends, object puts to every bucket, a shard's own subjects, inbox
//! forgery (publishing into and reading the coordinators' replies), and every subject a role
//! may publish to, asked with a foreign reply subject. The last are the code's own table
//! (`atelier_messages::access`): a wildcard granted there without a case in [`CASES`] fails the
//! suite.
//!
//! "No forged byte anywhere" is watched from inside: a coordinator's connection, which sees
//! every subject of the core account, and a worker's, on every subject workers serve, record
//! what arrives while the attacks run; nothing may carry the attack's marker outside the
//! services the attacker's account may call, no stream, bucket object or workbench may bear
//! it, and the streams and leases are as they were.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use atelier_messages::access::{Account, Role as AccessRole, services};
use atelier_tests::up::{Role, Up};
use atelier_tests::{NatsServer, Process, documented_accounts, wait_until};
use bytes::Bytes;
use futures::StreamExt;

/// For every wildcard a client or a worker may publish to, a concrete subject to attack it by
/// (a subject without a wildcard is attacked as it is).
const CASES: [(&str, &str); 6] = [
    ("atelier.ctl.*", "atelier.ctl.ping"),
    ("atelier.workshop.*", "atelier.workshop.models"),
    ("atelier.batch.*", "atelier.batch.list"),
    ("atelier.tool.*", "atelier.tool.tabular"),
    ("atelier.pool.*.scaled", "atelier.pool.tabular.scaled"),
    ("$SRV.>", "$SRV.PING"),
];

/// The concrete subject to attack `granted` by; `None` for a wildcard without a case.
fn case_of(granted: &str) -> Option<&str> {
    if !granted.contains(['*', '>']) {
        return Some(granted);
    }
    CASES
        .iter()
        .find(|(wildcard, _)| *wildcard == granted)
        .map(|(_, concrete)| *concrete)
}

/// The JetStream streams of the core account an attacker would aim at.
const STREAMS: [&str; 5] = [
    "ATELIER_JOBS",
    "ATELIER_EVENTS",
    "ATELIER_WORKSHOP_EVENTS",
    "OBJ_atelier-blob-store",
    "ATELIER_SHARDLOG",
];

/// One thing an attacker sends.
#[derive(Debug, Clone)]
struct Attack {
    what: String,
    subject: String,
    reply: Option<String>,
    payload: Vec<u8>,
}

impl Attack {
    fn new(what: &str, subject: String, reply: Option<String>, payload: String) -> Self {
        Self {
            what: what.to_string(),
            subject,
            reply,
            payload: payload.into_bytes(),
        }
    }
}

/// Every attack of the suite, marked with `marker` (subjects and payloads carry it, so anything
/// that arrives where it should not is found).
fn attacks(marker: &str) -> Vec<Attack> {
    let victim = format!("_INBOX_coordinator.{marker}");
    let tool_victim = format!("atelier.tool.{marker}");
    let mut all = Vec::new();
    for stream in STREAMS {
        for reply in [&victim, &tool_victim] {
            all.push(Attack::new(
                "direct get with a foreign reply",
                format!("$JS.API.DIRECT.GET.{stream}"),
                Some(reply.clone()),
                r#"{"seq":1}"#.into(),
            ));
            all.push(Attack::new(
                "message get with a foreign reply",
                format!("$JS.API.STREAM.MSG.GET.{stream}"),
                Some(reply.clone()),
                r#"{"seq":1}"#.into(),
            ));
            let consumer = format!(
                r#"{{"stream_name":"{stream}","config":{{"deliver_subject":"{reply}","deliver_policy":"all","ack_policy":"none","name":"{marker}"}}}}"#
            );
            all.push(Attack::new(
                "consumer with a foreign deliver subject",
                format!("$JS.API.CONSUMER.CREATE.{stream}.{marker}"),
                None,
                consumer.clone(),
            ));
            all.push(Attack::new(
                "consumer with a foreign deliver subject",
                format!("$JS.API.CONSUMER.CREATE.{stream}"),
                None,
                consumer,
            ));
        }
        all.push(Attack::new(
            "stream purge",
            format!("$JS.API.STREAM.PURGE.{stream}"),
            Some(victim.clone()),
            "{}".into(),
        ));
        all.push(Attack::new(
            "stream delete",
            format!("$JS.API.STREAM.DELETE.{stream}"),
            Some(victim.clone()),
            String::new(),
        ));
    }
    all.push(Attack::new(
        "stream over the tool and inbox subjects",
        format!("$JS.API.STREAM.CREATE.FORGED_{marker}"),
        Some(victim.clone()),
        format!(
            r#"{{"name":"FORGED_{marker}","subjects":["atelier.tool.*","_INBOX_coordinator.>"]}}"#
        ),
    ));
    for kv in [
        "$KV.atelier-shard-leases.shard-0",
        "$KV.atelier-coordinators.forged",
        // A forged pause or a full line would stall every model call of the deployment.
        "$KV.atelier-provider-limits.forged",
        "$KV.atelier-store-claims.own-store",
    ] {
        all.push(Attack::new(
            "key-value put",
            kv.into(),
            Some(victim.clone()),
            format!("forged {marker}"),
        ));
    }
    all.push(Attack::new(
        "changelog append",
        "atelier.shardlog.0".into(),
        Some(victim.clone()),
        format!("forged {marker}"),
    ));
    for bucket in ["atelier-blob-store", "atelier-shard-snapshots"] {
        for kind in ["C", "M"] {
            all.push(Attack::new(
                "object put",
                format!("$O.{bucket}.{kind}.{marker}"),
                Some(victim.clone()),
                format!("forged {marker}"),
            ));
        }
    }
    let create = format!(r#"{{"v":1,"workbench":"forged-{marker}"}}"#);
    all.push(Attack::new(
        "a shard's own subject",
        "atelier.shard.0.atelier.store.create".into(),
        Some(victim.clone()),
        create,
    ));
    all.push(Attack::new(
        "forged reply into the coordinators' inboxes",
        victim.clone(),
        None,
        format!(r#"{{"v":1,"ok":{{"forged":"{marker}"}}}}"#),
    ));
    all.push(Attack::new(
        "forged tool request",
        "atelier.tool.tabular".into(),
        Some(victim.clone()),
        format!("forged {marker}"),
    ));
    for role in [AccessRole::Client, AccessRole::Worker] {
        for granted in role.rights().publish {
            let Some(subject) = case_of(&granted) else {
                continue;
            };
            for reply in [&victim, &tool_victim] {
                all.push(Attack::new(
                    &format!("{granted} with a foreign reply"),
                    subject.into(),
                    Some(reply.clone()),
                    format!("forged {marker}"),
                ));
            }
        }
    }
    all
}

/// Whether `subject` matches the NATS pattern `pattern`.
fn matches(pattern: &str, subject: &str) -> bool {
    let mut subject_tokens = subject.split('.');
    for token in pattern.split('.') {
        match (token, subject_tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (token, Some(actual)) if token == actual => {}
            _ => return false,
        }
    }
    subject_tokens.next().is_none()
}

/// Every subject a client or a worker may publish to has a case.
#[test]
fn every_subject_a_client_or_worker_may_publish_to_has_a_case() {
    for role in [AccessRole::Client, AccessRole::Worker] {
        for subject in role.rights().publish {
            let Some(concrete) = case_of(&subject) else {
                panic!("{role:?} may publish to {subject}: add a case to CASES in attacks.rs");
            };
            assert!(matches(&subject, concrete), "{subject} vs {concrete}");
        }
    }
    assert!(matches("atelier.store.*", "atelier.store.ls"));
    assert!(matches("$SRV.>", "$SRV.PING.x"));
    assert!(!matches("atelier.store.*", "atelier.store.a.b"));
    assert!(!matches("atelier.tool.*", "atelier.toolx.a"));
}

/// The subjects the role's account may call (its requests arrive in the exporter's account).
fn callable(role: AccessRole) -> Vec<&'static str> {
    services()
        .filter(|service| service.importers.contains(&role.account()))
        .map(|service| service.subject)
        .collect()
}

/// A message a watcher saw: the account it was in, its subject and payload.
type Seen = (Account, String, Bytes);

/// Watches everything of the core account and every subject workers serve.
async fn watch(
    coordinator: &async_nats::Client,
    worker: &async_nats::Client,
) -> anyhow::Result<tokio::sync::mpsc::UnboundedReceiver<Seen>> {
    let (seen, received) = tokio::sync::mpsc::unbounded_channel();
    let mut subscriptions = vec![(Account::Core, coordinator.subscribe(">").await?)];
    for subject in ["atelier.tool.*", "atelier.review.*", "_INBOX_worker.>"] {
        subscriptions.push((Account::Workers, worker.subscribe(subject).await?));
    }
    coordinator.flush().await?;
    worker.flush().await?;
    // The watcher sees the core account: a canary published there arrives.
    let canary = format!("atelier.canary.{}", std::process::id());
    coordinator.publish(canary.clone(), "canary".into()).await?;
    coordinator.flush().await?;
    let (_, first) = subscriptions.first_mut().context("no watcher")?;
    let arrived = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(message) = first.next().await {
            if message.subject.as_str() == canary {
                return true;
            }
        }
        false
    })
    .await;
    anyhow::ensure!(
        arrived == Ok(true),
        "the watcher does not see the core account"
    );
    for (account, mut subscription) in subscriptions {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(message) = subscription.next().await {
                let _ = seen.send((account, message.subject.to_string(), message.payload));
            }
        });
    }
    Ok(received)
}

/// Sends every attack as `role`, then checks that nothing of it arrived anywhere it should not
/// and that the deployment is as it was.
async fn attack_as(
    role: AccessRole,
    attacker: &async_nats::Client,
    coordinator: &async_nats::Client,
    worker: &async_nats::Client,
) -> anyhow::Result<()> {
    let marker = format!(
        "m{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    );
    let js = async_nats::jetstream::new(coordinator.clone());
    let before = state(&js).await?;
    let mut seen = watch(coordinator, worker).await?;
    // The attacker listens where a reflection would land in its own account, and on the
    // coordinators' inboxes (refused by its permissions, and in another account anyway).
    let mut overheard = attacker.subscribe("_INBOX_coordinator.>").await?;
    for attack in attacks(&marker) {
        let payload = Bytes::from(attack.payload.clone());
        let sent = match &attack.reply {
            Some(reply) => {
                attacker
                    .publish_with_reply(attack.subject.clone(), reply.clone(), payload)
                    .await
            }
            None => {
                let answer = tokio::time::timeout(
                    Duration::from_millis(300),
                    attacker.request(attack.subject.clone(), payload),
                )
                .await;
                if let Ok(Ok(answer)) = answer {
                    let text = String::from_utf8_lossy(&answer.payload);
                    assert!(
                        !text.contains("\"created\"") && !text.contains("\"config\""),
                        "{role:?}: {} answered as done: {text}",
                        attack.what
                    );
                }
                Ok(())
            }
        };
        sent.with_context(|| format!("{role:?} could not send {}", attack.what))?;
    }
    attacker.flush().await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let allowed = callable(role);
    while let Ok((account, subject, payload)) = seen.try_recv() {
        // Inside its own account an attacker meets only its peers (one trust): a worker can
        // have the workers' micro services answer into the workers' account.
        if account == role.account() {
            continue;
        }
        let carries =
            subject.contains(&marker) || String::from_utf8_lossy(&payload).contains(&marker);
        let called = allowed.iter().any(|pattern| matches(pattern, &subject));
        assert!(
            !carries || called,
            "{role:?}: a forged message reached {subject}: {}",
            String::from_utf8_lossy(&payload)
        );
    }
    let heard = tokio::time::timeout(Duration::from_millis(200), overheard.next()).await;
    assert!(
        !matches!(heard, Ok(Some(_))),
        "{role:?} read the coordinators' inbox"
    );
    let after = state(&js).await?;
    assert_eq!(before, after, "{role:?}: the streams or leases changed");
    for name in after.keys() {
        assert!(!name.contains(&marker), "{role:?} made {name}");
    }
    Ok(())
}

/// The core account's streams with their message counts (the job queue, the blob and lease
/// buckets; event streams only by name: jobs write them) and the leases' revisions.
async fn state(
    js: &async_nats::jetstream::Context,
) -> anyhow::Result<BTreeMap<String, Option<u64>>> {
    let mut state = BTreeMap::new();
    let mut names = js.stream_names();
    while let Some(name) = names.next().await {
        let name = name?;
        let counted = [
            "ATELIER_JOBS",
            "OBJ_atelier-blobs",
            "KV_atelier-shard-leases",
            "KV_atelier-provider-limits",
        ]
        .contains(&name.as_str());
        let messages = match counted {
            true => Some(js.get_stream(&name).await?.info().await?.state.messages),
            false => None,
        };
        state.insert(name, messages);
    }
    Ok(state)
}

/// A job still runs and writes its draft.
fn still_runs(cli: &dyn Fn(&[&str]) -> anyhow::Result<String>) -> anyhow::Result<()> {
    let args = r#"{"path": "after.txt", "content": "still here\n"}"#;
    cli(&["run", "target", "write_text_file", "--args", args, "--wait"])?;
    let written = cli(&["wb", "cat", "target", "after.txt", "--draft"])?;
    assert_eq!(written, "still here\n");
    let listed = cli(&["wb", "list", "--json"])?;
    assert!(!listed.contains("forged"), "{listed}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn no_path_around_the_accounts_on_atelier_up() -> anyhow::Result<()> {
    let up = Up::start()?;
    up.cli_ok(&["wb", "create", "target"])?;
    let coordinator = up.connect_as(Role::Coordinator).await?;
    let worker = up.connect_as(Role::Worker).await?;
    for (role, attacker) in [
        (AccessRole::Client, up.connect_as(Role::Client).await?),
        (AccessRole::Worker, up.connect_as(Role::Worker).await?),
    ] {
        attack_as(role, &attacker, &coordinator, &worker).await?;
    }
    still_runs(&|args| up.cli_ok(args))
}

const PASSWORD: &str = "attack-suite";

/// Two coordinators sharing a replicated store of four shards and one worker per pool, on a
/// server with the documented accounts, each process with its own user.
struct Replicated {
    dir: tempfile::TempDir,
    host_port: String,
    _nats: NatsServer,
    _processes: Vec<Process>,
}

impl Replicated {
    fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let nats =
            NatsServer::start_with_extra_config(dir.path(), &documented_accounts(PASSWORD)?)?;
        let host_port = nats.url.trim_start_matches("nats://").to_string();
        let url = |user: &str| format!("nats://{user}:{PASSWORD}@{host_port}");
        let replicated = [
            ("ATELIER_REPLICATED_STORE", "true"),
            ("ATELIER_STORE_SHARDS", "4"),
        ];
        let mut processes = Vec::new();
        for name in ["coordinator-a", "coordinator-b"] {
            let data = dir.path().join(name).to_string_lossy().to_string();
            let args = [
                "coordinator",
                "--nats",
                &url("coordinator"),
                "--data",
                &data,
            ];
            processes.push(Process::spawn_with_env(
                name,
                &args,
                dir.path(),
                &replicated,
            )?);
        }
        for pool in ["tabular", "office"] {
            let args = ["worker", "--pool", pool, "--nats", &url("worker")];
            processes.push(Process::spawn(pool, &args, dir.path())?);
        }
        let deployment = Self {
            dir,
            host_port,
            _nats: nats,
            _processes: processes,
        };
        wait_until(Duration::from_secs(60), || {
            deployment.cli(&["wb", "create", "target"]).is_ok()
        })
        .context("the replicated coordinators serve")?;
        Ok(deployment)
    }

    /// Runs the CLI as a client, as the README's distributed section says.
    fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let client_url = format!("nats://client:{PASSWORD}@{}", self.host_port);
        let output = std::process::Command::new(atelier_tests::atelier_bin())
            .args(args)
            .args(["--nats", &client_url])
            .current_dir(self.dir.path())
            .env_remove("ATELIER_NATS_URL")
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "`atelier {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    async fn connect(&self, role: AccessRole) -> anyhow::Result<async_nats::Client> {
        Ok(
            async_nats::ConnectOptions::with_user_and_password(role.user().into(), PASSWORD.into())
                .custom_inbox_prefix(role.inbox_prefix())
                .connect(self.host_port.clone())
                .await?,
        )
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_path_around_the_documented_accounts_on_a_replicated_store() -> anyhow::Result<()> {
    let deployment = Replicated::start()?;
    let coordinator = deployment.connect(AccessRole::Coordinator).await?;
    let worker = deployment.connect(AccessRole::Worker).await?;
    for role in [AccessRole::Client, AccessRole::Worker] {
        let attacker = deployment.connect(role).await?;
        attack_as(role, &attacker, &coordinator, &worker).await?;
    }
    still_runs(&|args| deployment.cli(args))
}

/// An object of the replicated store's bucket whose content is not what its name says (a
/// broken writer, or one from before the accounts) is not taken as the blob: the store checks
/// the object's recorded digest, uploads the blob again, and the file reads back whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_poisoned_object_of_the_store_is_uploaded_again() -> anyhow::Result<()> {
    use sha2::Digest;
    let deployment = Replicated::start()?;
    let content: Vec<u8> = (0..600_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let digest = hex::encode(sha2::Sha256::digest(&content));
    let mut poison = content.clone();
    poison[0] = b'!';
    let coordinator = deployment.connect(AccessRole::Coordinator).await?;
    let bucket = async_nats::jetstream::new(coordinator)
        .get_object_store("atelier-blob-store")
        .await?;
    bucket.put(digest.as_str(), &mut poison.as_slice()).await?;
    let file = deployment.dir.path().join("letters.txt");
    std::fs::write(&file, &content)?;
    deployment.cli(&["wb", "add", "target", &file.to_string_lossy()])?;
    let read = deployment.cli(&["wb", "cat", "target", "letters.txt"])?;
    assert!(
        read.as_bytes() == content.as_slice(),
        "the file reads back whole"
    );
    let mut stored = Vec::new();
    let mut object = bucket.get(digest.as_str()).await?;
    tokio::io::AsyncReadExt::read_to_end(&mut object, &mut stored).await?;
    assert!(
        sha2::Sha256::digest(&stored).as_slice() == sha2::Sha256::digest(&content).as_slice(),
        "the poisoned object was replaced by the blob"
    );
    Ok(())
}
