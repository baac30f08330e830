//! Protocol-level tests over real NATS: bad input on every subject, sandboxing, SQL lockdown,
//! and load sharing inside a pool.

use std::collections::BTreeSet;

use atelier_messages::store::{DraftDiff, Listing};
use atelier_messages::verb::Route;
use atelier_messages::{ErrorCode, Format, PROTOCOL_VERSION, decode_reply, subjects};
use atelier_tests::{Cluster, call_tool, nats_request};
use serde_json::{Value, json};

fn setup(cluster: &Cluster, name: &str) -> anyhow::Result<Listing> {
    cluster.workbench_with_launch_plan(name, "plan.csv")?;
    cluster.cli_ok(&["wb", "ls", name, "--json"])?.json()
}

fn code_of(reply: &[u8], format: Format) -> Option<ErrorCode> {
    decode_reply::<Value>(reply, format).err().map(|e| e.code)
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_payloads_get_codes_on_every_subject_and_nothing_crashes() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    setup(&cluster, "bad")?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    // Every verb the protocol declares (messages::verb::DECLARED): on its public subject when
    // the front door or a pool answers it, and as a shard's owner answers it for the other
    // coordinators.
    let declared = atelier_messages::verb::DECLARED;
    let mut request_subjects: Vec<String> = declared
        .iter()
        .filter(|verb| verb.route.is_public() || verb.route == Route::Worker)
        .map(|verb| verb.subject.to_string())
        .collect();
    request_subjects.extend(["tabular", "office"].map(subjects::tool));
    request_subjects.extend(
        declared
            .iter()
            .filter(|verb| verb.route.answered_by_shard())
            .map(|verb| subjects::shard::verb(0, verb.subject)),
    );
    for subject in &request_subjects {
        for (payload, json) in [
            (b"\xc1\xff\x00garbage".to_vec(), false),
            (b"{not json".to_vec(), true),
            (Vec::new(), false),
        ] {
            let reply = nats_request(&client, subject, payload, json).await?;
            let format = if json {
                Format::Json
            } else {
                Format::MessagePack
            };
            assert_eq!(
                code_of(&reply, format),
                Some(ErrorCode::ValidationFailed),
                "{subject} json={json}"
            );
        }
        let reply = nats_request(&client, subject, br#"{"v": 99}"#.to_vec(), true).await?;
        assert_eq!(
            code_of(&reply, Format::Json),
            Some(ErrorCode::UnsupportedVersion),
            "{subject}"
        );
        // JSON in, JSON out.
        let reply_value: Value = serde_json::from_slice(&reply)?;
        assert_eq!(reply_value["error"]["code"], "UNSUPPORTED_VERSION");
    }
    // A page of references is 1 to MAX_LISTED_REFERENCES long.
    let references = subjects::shard::verb(0, subjects::shard::REFERENCES);
    for limit in [0, atelier_messages::shard::MAX_LISTED_REFERENCES + 1] {
        let page = format!(r#"{{"v": {PROTOCOL_VERSION}, "limit": {limit}}}"#);
        let reply = nats_request(&client, &references, page.into_bytes(), true).await?;
        assert_eq!(
            code_of(&reply, Format::Json),
            Some(ErrorCode::ValidationFailed),
            "limit {limit}"
        );
    }
    // Garbage on the JetStream submit subject is dropped; the coordinator keeps answering.
    let js = async_nats::jetstream::new(client.clone());
    js.publish(subjects::JOB_SUBMIT, "garbage".into())
        .await?
        .await?;
    js.publish(
        subjects::JOB_SUBMIT,
        br#"{"v":1,"job_id":"../x","workbench":"bad","message":"m"}"#
            .to_vec()
            .into(),
    )
    .await?
    .await?;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let ping = nats_request(&client, subjects::ctl::PING, br#"{"v":1}"#.to_vec(), true).await?;
    let pong: Value = serde_json::from_slice(&ping)?;
    assert_eq!(pong["ok"]["protocol_version"], 1);
    let jobs: Vec<Value> = cluster.cli_ok(&["jobs", "--json"])?.json()?;
    assert!(
        jobs.is_empty(),
        "bad submissions must not create jobs: {jobs:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_tool_calls_and_sql_are_refused_and_nothing_is_written() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let listing = setup(&cluster, "locked")?;
    let client = async_nats::connect(&cluster.nats.url).await?;

    let unknown = call_tool(&client, &listing, "c1", "rm_rf", json!({}), "tabular").await?;
    assert_eq!(
        unknown.err().map(|e| e.code),
        Some(ErrorCode::ValidationFailed)
    );
    let wrong_pool = call_tool(
        &client,
        &listing,
        "c2",
        "write_text_file",
        json!({"path": "a.txt", "content": "x"}),
        "tabular",
    )
    .await?;
    assert_eq!(
        wrong_pool.err().map(|e| e.code),
        Some(ErrorCode::ValidationFailed)
    );

    for (index, path) in [
        "../evil.txt",
        "/tmp/evil.txt",
        "a/../../evil.txt",
        "ok/\u{7}bell.txt",
    ]
    .iter()
    .enumerate()
    {
        let reply = call_tool(
            &client,
            &listing,
            &format!("w{index}"),
            "write_text_file",
            json!({"path": path, "content": "pwned"}),
            "office",
        )
        .await?;
        assert_eq!(
            reply.err().map(|e| e.code),
            Some(ErrorCode::SandboxViolation),
            "{path:?}"
        );
    }
    let traversal_export = call_tool(
        &client,
        &listing,
        "e1",
        "table_export",
        json!({"path": "plan.csv", "target_path": "../out.csv", "format": "csv"}),
        "tabular",
    )
    .await?;
    assert_eq!(
        traversal_export.err().map(|e| e.code),
        Some(ErrorCode::SandboxViolation)
    );
    let traversal_read = call_tool(
        &client,
        &listing,
        "r1",
        "table_get_map",
        json!({"path": "../../etc/passwd"}),
        "tabular",
    )
    .await?;
    assert_eq!(
        traversal_read.err().map(|e| e.code),
        Some(ErrorCode::SandboxViolation)
    );

    let escape_file = cluster.dir.path().join("escape.csv");
    let statements = [
        format!("COPY (SELECT 1) TO '{}'", escape_file.display()),
        format!(
            "ATTACH '{}' AS other",
            cluster.dir.path().join("x.duckdb").display()
        ),
        "SELECT * FROM read_csv('/etc/passwd')".to_string(),
        "SELECT * FROM read_text('/etc/passwd')".to_string(),
        "INSTALL httpfs".to_string(),
        "LOAD httpfs".to_string(),
        "PRAGMA database_list".to_string(),
        "SET enable_external_access = true".to_string(),
        "DELETE FROM data".to_string(),
        "DROP TABLE data".to_string(),
        "CREATE TABLE t AS SELECT 1".to_string(),
        "SELECT 1; SELECT 2".to_string(),
    ];
    for (index, sql) in statements.iter().enumerate() {
        let reply = call_tool(
            &client,
            &listing,
            &format!("q{index}"),
            "table_query",
            json!({"path": "plan.csv", "query": sql}),
            "tabular",
        )
        .await?;
        assert_eq!(
            reply.err().map(|e| e.code),
            Some(ErrorCode::ValidationFailed),
            "{sql}"
        );
    }
    assert!(!escape_file.exists());
    assert!(!cluster.dir.path().join("x.duckdb").exists());
    assert!(!std::path::Path::new("/tmp/evil.txt").exists());

    // A good query still works afterwards.
    let ok = call_tool(
        &client,
        &listing,
        "q-ok",
        "table_query",
        json!({"path": "plan.csv", "query": "SELECT COUNT(*) AS n FROM data"}),
        "tabular",
    )
    .await?;
    let output = ok.map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(output.output["rows"][0][0], 5);

    let diff: DraftDiff = cluster
        .cli_ok(&["draft", "diff", "locked", "--json"])?
        .json()?;
    assert!(
        !diff.has_draft,
        "refused calls must not create a draft: {diff:?}"
    );
    let bad_add = cluster.cli(&["wb", "add", "locked", "Cargo.toml", "--as", "../escape"])?;
    assert!(
        bad_add.failed_with("SANDBOX_VIOLATION"),
        "{}",
        bad_add.stderr
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_in_one_pool_share_the_calls() -> anyhow::Result<()> {
    let cluster = Cluster::start_with(&["tabular", "tabular", "office"])?;
    let listing = setup(&cluster, "shared")?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let mut workers = BTreeSet::new();
    for index in 0..40 {
        let reply = call_tool(
            &client,
            &listing,
            &format!("m{index}"),
            "table_query",
            json!({"path": "plan.csv", "query": "SELECT COUNT(*) FROM data"}),
            "tabular",
        )
        .await?;
        let output = reply.map_err(|e| anyhow::anyhow!("{e}"))?;
        assert_eq!(output.output["rows"][0][0], 5);
        workers.insert(output.worker);
    }
    assert_eq!(
        workers.len(),
        2,
        "both tabular workers should have served calls: {workers:?}"
    );
    Ok(())
}
