//! The tabular pool end to end: real nats-server, coordinator and worker processes, every
//! `table_*` tool through `atelier.tool.tabular`, the SQL lockdown, timeouts and shared ingest.

use std::collections::BTreeSet;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use atelier_messages::store::Listing;
use atelier_messages::tool::{ToolOutput, ToolRequest};
use atelier_messages::{
    ErrorBody, ErrorCode, Format, PROTOCOL_VERSION, decode_reply, encode, subjects,
};
use atelier_tests::{Cluster, atelier_bin, fixtures};
use calamine::{Data, Reader, Xlsx, open_workbook_from_rs};
use serde_json::{Value, json};

/// Adds the corpus files to a new workbench and returns its listing.
fn workbench(cluster: &Cluster, name: &str, files: &[(&str, &str)]) -> anyhow::Result<Listing> {
    cluster.cli_ok(&["wb", "create", name])?;
    for (source, target) in files {
        let path = fixtures().join(source);
        cluster.cli_ok(&[
            "wb",
            "add",
            name,
            path.to_str().unwrap_or_default(),
            "--as",
            target,
        ])?;
    }
    cluster.cli_ok(&["wb", "ls", name, "--json"])?.json()
}

fn keenbench(cluster: &Cluster, name: &str) -> anyhow::Result<Listing> {
    workbench(
        cluster,
        name,
        &[
            ("keenbench/context/keenbench_launch_plan.csv", "plan.csv"),
            ("keenbench/synthetic/client_data.csv", "client_data.csv"),
            ("keenbench/synthetic/projects.csv", "projects.csv"),
            (
                "keenbench/synthetic/quarterly_data.xlsx",
                "quarterly_data.xlsx",
            ),
        ],
    )
}

async fn call(
    client: &async_nats::Client,
    listing: &Listing,
    call_id: &str,
    tool: &str,
    args: Value,
) -> anyhow::Result<Result<Value, ErrorBody>> {
    let reply = atelier_tests::call_tool(client, listing, call_id, tool, args, "tabular").await?;
    Ok(reply.map(|out| out.output))
}

async fn ok(
    client: &async_nats::Client,
    listing: &Listing,
    call_id: &str,
    tool: &str,
    args: Value,
) -> anyhow::Result<Value> {
    call(client, listing, call_id, tool, args)
        .await?
        .map_err(|e| anyhow::anyhow!("{tool}: {e:?}"))
}

/// A draft file's bytes, through `atelier wb export --draft`.
fn draft_file(cluster: &Cluster, name: &str, path: &str) -> anyhow::Result<Vec<u8>> {
    let out = cluster.dir.path().join(format!("export-{name}"));
    cluster.cli_ok(&[
        "wb",
        "export",
        name,
        out.to_str().unwrap_or_default(),
        "--draft",
    ])?;
    Ok(std::fs::read(out.join(path))?)
}

fn sheet(bytes: &[u8], name: &str) -> anyhow::Result<Vec<Vec<Data>>> {
    let mut workbook: Xlsx<_> = open_workbook_from_rs(Cursor::new(bytes.to_vec()))?;
    Ok(workbook
        .worksheet_range(name)?
        .rows()
        .map(<[Data]>::to_vec)
        .collect())
}

fn s(text: &str) -> Data {
    Data::String(text.into())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_table_tool_over_nats_on_the_keenbench_fixtures() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let listing = keenbench(&cluster, "kb")?;
    let client = async_nats::connect(&cluster.nats.url).await?;

    let map = ok(
        &client,
        &listing,
        "m1",
        "table_get_map",
        json!({"path": "plan.csv"}),
    )
    .await?;
    assert_eq!(
        (map["row_count"].as_u64(), map["column_count"].as_u64()),
        (Some(5), Some(6))
    );
    assert_eq!(
        (map["format"].as_str(), map["format_inferred"].as_bool()),
        (Some("csv"), Some(false))
    );
    assert_eq!(
        (
            map["encoding_detected"].as_str(),
            map["encoding_confidence"].as_f64()
        ),
        (Some("utf-8"), Some(1.0))
    );
    assert_eq!(map["chunks"], json!([{"index": 0, "rows": "1-5"}]));

    let described = ok(
        &client,
        &listing,
        "d1",
        "table_describe",
        json!({"path": "projects.csv"}),
    )
    .await?;
    assert_eq!(
        described["columns"],
        json!([
            {"name": "Project", "index": 0, "inferred_type": "string", "nullable": false, "non_null_count": 2, "distinct_estimate": 2},
            {"name": "Start Date", "index": 1, "inferred_type": "date", "nullable": false, "non_null_count": 2, "distinct_estimate": 2},
            {"name": "Status", "index": 2, "inferred_type": "string", "nullable": false, "non_null_count": 2, "distinct_estimate": 2}
        ])
    );

    let stats = ok(
        &client,
        &listing,
        "s1",
        "table_stats",
        json!({"path": "client_data.csv", "columns": ["Unit Price", "Date"]}),
    )
    .await?;
    assert_eq!(
        stats,
        json!({"row_count": 1, "columns": [
            {"name": "Unit Price", "type": "float", "non_null_count": 1, "distinct_estimate": 1,
             "min": 24.99, "max": 24.99, "mean": 24.99, "sum": 24.99, "stddev": null},
            {"name": "Date", "type": "date", "non_null_count": 1, "distinct_estimate": 1,
             "min": "2026-03-01", "max": "2026-03-01"}
        ]})
    );

    let rows = ok(
        &client,
        &listing,
        "r1",
        "table_read_rows",
        json!({"path": "plan.csv", "row_start": 2, "row_count": 2, "columns": ["Owner", "Due"]}),
    )
    .await?;
    assert_eq!(
        rows["rows"],
        json!([
            ["Luis Alvarez", "2026-02-19"],
            ["Priya Desai", "2026-02-20"]
        ])
    );
    assert_eq!(rows["column_types"], json!(["string", "date"]));
    assert_eq!(
        (rows["total_rows"].as_u64(), rows["has_more"].as_bool()),
        (Some(5), Some(true))
    );

    let query = ok(&client, &listing, "q1", "table_query", json!({"path": "plan.csv", "query": "SELECT Owner, count(*) AS n FROM data GROUP BY Owner ORDER BY n DESC, Owner", "window_rows": 2, "window_offset": 1})).await?;
    assert_eq!(
        query["rows"],
        json!([["Luis Alvarez", 1], ["Mira Kwon", 1]])
    );
    assert_eq!(
        (
            query["total_row_count"].as_u64(),
            query["has_more"].as_bool()
        ),
        (Some(4), Some(true))
    );
    assert_eq!(
        (
            query["window_rows"].as_u64(),
            query["window_offset"].as_u64()
        ),
        (Some(2), Some(1))
    );

    let export = ok(&client, &listing, "e1", "table_export", json!({"path": "plan.csv", "query": "SELECT Milestone, Due FROM data ORDER BY Due, Milestone", "target_path": "out/dues.xlsx", "format": "xlsx", "sheet": "Dues"})).await?;
    assert_eq!(export["row_count"], 5);
    let dues = sheet(&draft_file(&cluster, "kb", "out/dues.xlsx")?, "Dues")?;
    assert_eq!(dues[0], vec![s("Milestone"), s("Due")]);
    assert_eq!(dues[1][0], s("Context UX polish"));
    assert!(
        matches!(&dues[1][1], Data::DateTime(d) if d.as_f64() == 46_071.0),
        "{:?}",
        dues[1][1]
    );

    let before = sheet(
        &std::fs::read(fixtures().join("keenbench/synthetic/quarterly_data.xlsx"))?,
        "Q4",
    )?;
    let update = ok(&client, &listing, "u1", "table_update_from_export", json!({"path": "client_data.csv", "target_path": "quarterly_data.xlsx", "sheet": "Q1", "mode": "append_rows"})).await?;
    assert_eq!(update["range"], "A14:E14");
    let workbook = draft_file(&cluster, "kb", "quarterly_data.xlsx")?;
    let q1 = sheet(&workbook, "Q1")?;
    assert_eq!(q1[13][0], s("Acme Corp"));
    assert!(
        matches!(&q1[13][1], Data::DateTime(d) if d.as_f64() == 46_082.0),
        "{:?}",
        q1[13][1]
    );
    assert_eq!(q1[13][3..], [Data::Float(50.0), Data::Float(24.99)]);
    assert_eq!(sheet(&workbook, "Q4")?, before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_arguments_get_stable_codes() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let listing = keenbench(&cluster, "args")?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let cases = [
        (
            "table_query",
            json!({"path": "plan.csv", "query": "SELECT 1", "window_rows": 1_000_000}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_query",
            json!({"path": "plan.csv", "query": "SELECT 1", "window_offset": -1}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_read_rows",
            json!({"path": "plan.csv", "row_start": 0, "row_count": 5}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_read_rows",
            json!({"path": "plan.csv", "row_start": 1}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_read_rows",
            json!({"path": "plan.csv", "row_start": 1, "row_count": 2, "columns": ["Nope"]}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_query",
            json!({"path": "plan.csv", "query": "SELECT nope FROM data"}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_query",
            json!({"path": "quarterly_data.xlsx", "query": "SELECT * FROM \"No such sheet\""}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_export",
            json!({"path": "plan.csv", "target_path": "../x.csv", "format": "csv"}),
            ErrorCode::SandboxViolation,
        ),
        (
            "table_export",
            json!({"path": "plan.csv", "target_path": "/tmp/x.csv", "format": "csv"}),
            ErrorCode::SandboxViolation,
        ),
        (
            "table_export",
            json!({"path": "plan.csv", "target_path": "x.xlsx", "format": "csv"}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_update_from_export",
            json!({"path": "plan.csv", "target_path": "plan.csv", "mode": "replace_sheet"}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_update_from_export",
            json!({"path": "plan.csv", "target_path": "x.xlsx", "mode": "merge"}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_update_from_export",
            json!({"path": "plan.csv", "target_path": "x.xlsx", "mode": "write_range", "start_cell": "ZZZZ0"}),
            ErrorCode::ValidationFailed,
        ),
        (
            "table_stats",
            json!({"path": "missing.csv"}),
            ErrorCode::FileReadFailed,
        ),
    ];
    for (index, (tool, args, code)) in cases.iter().enumerate() {
        let reply = call(&client, &listing, &format!("a{index}"), tool, args.clone()).await?;
        assert_eq!(
            reply.as_ref().err().map(|e| e.code),
            Some(*code),
            "{tool} {args}: {reply:?}"
        );
    }
    let unknown = call(
        &client,
        &listing,
        "a-col",
        "table_query",
        json!({"path": "plan.csv", "query": "SELECT nope FROM data"}),
    )
    .await?;
    let message = unknown.err().map(|e| e.message).unwrap_or_default();
    assert!(
        message.contains("Referenced column \"nope\" not found"),
        "{message}"
    );
    Ok(())
}

/// A target workbook the office pool refuses to open (encrypted, truncated) is refused by
/// `table_update_from_export` with the same code, and no draft is written.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_target_workbooks_are_refused_like_the_office_pool_does() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let quarterly = std::fs::read(fixtures().join("keenbench/synthetic/quarterly_data.xlsx"))?;
    // An OLE compound file: how Office stores a password-protected workbook.
    let mut encrypted = vec![0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];
    encrypted.resize(4096, 0);
    let truncated = quarterly[..quarterly.len() / 2].to_vec();
    let hostile = [("encrypted.xlsx", encrypted), ("truncated.xlsx", truncated)];
    let mut files = vec![(
        fixtures().join("keenbench/context/keenbench_launch_plan.csv"),
        "plan.csv",
    )];
    for (name, bytes) in &hostile {
        let path = cluster.dir.path().join(name);
        std::fs::write(&path, bytes)?;
        files.push((path, name));
    }
    cluster.cli_ok(&["wb", "create", "hostile"])?;
    for (path, target) in &files {
        let source = path.to_str().unwrap_or_default();
        cluster.cli_ok(&["wb", "add", "hostile", source, "--as", target])?;
    }
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "hostile", "--json"])?.json()?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    for (name, _) in &hostile {
        let update = call(
            &client,
            &listing,
            &format!("update-{name}"),
            "table_update_from_export",
            json!({"path": "plan.csv", "target_path": name, "sheet": "Q1", "mode": "append_rows"}),
        )
        .await?;
        let office = atelier_tests::call_tool(
            &client,
            &listing,
            &format!("office-{name}"),
            "xlsx_operations",
            json!({"path": name, "operations": [{"op": "ensure_sheet", "sheet": "Q1"}]}),
            "office",
        )
        .await?;
        let update_code = update.as_ref().err().map(|e| e.code);
        assert_eq!(
            update_code,
            Some(ErrorCode::FileReadFailed),
            "{name}: {update:?}"
        );
        assert_eq!(update_code, office.err().map(|e| e.code), "{name}");
    }
    let diff = cluster
        .cli_ok(&["draft", "diff", "hostile", "--json"])?
        .json::<Value>()?;
    assert_eq!(diff["has_draft"], false);
    Ok(())
}

/// At least 30 statements that must not run; none may create a file.
fn adversarial(probe: &Path) -> Vec<String> {
    let p = probe.display();
    vec![
        format!("COPY data TO '{p}.csv'"),
        format!("COPY (SELECT * FROM data) TO '{p}.parquet' (FORMAT parquet)"),
        format!("ATTACH '{p}.duckdb' AS other"),
        "DETACH data".into(),
        "INSTALL httpfs".into(),
        "LOAD httpfs".into(),
        "FORCE INSTALL httpfs FROM 'http://127.0.0.1:1'".into(),
        "PRAGMA database_list".into(),
        "PRAGMA enable_profiling".into(),
        "SET enable_external_access = true".into(),
        "SET memory_limit = '100GB'".into(),
        "RESET lock_configuration".into(),
        "SELECT 1; SELECT 2".into(),
        "SELECT 1; DROP TABLE data".into(),
        format!("SELECT * FROM data; COPY data TO '{p}.csv'"),
        "SELECT * FROM read_csv('/etc/passwd')".into(),
        "SELECT * FROM read_csv_auto('/etc/hosts')".into(),
        "SELECT * FROM read_text('/etc/passwd')".into(),
        "SELECT * FROM read_blob('/etc/passwd')".into(),
        "SELECT * FROM '/etc/passwd'".into(),
        "SELECT * FROM glob('/*')".into(),
        "SELECT * FROM read_json('/etc/hosts')".into(),
        "SELECT * FROM read_parquet('https://example.com/x.parquet')".into(),
        "SELECT * FROM read_csv('http://127.0.0.1:1/x.csv')".into(),
        "SELECT * FROM sniff_csv('/etc/passwd')".into(),
        format!("SELECT * FROM query('COPY data TO ''{p}.csv''')"),
        "DELETE FROM data".into(),
        "UPDATE data SET Owner = 'x'".into(),
        "INSERT INTO data SELECT * FROM data".into(),
        "CREATE TABLE t AS SELECT 1".into(),
        "CREATE TEMP TABLE t AS SELECT 1".into(),
        "CREATE MACRO m() AS 1".into(),
        "DROP TABLE data".into(),
        "ALTER TABLE data RENAME TO x".into(),
        "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')".into(),
        format!("EXPORT DATABASE '{p}'"),
        "CHECKPOINT".into(),
        "CALL pragma_version()".into(),
        "BEGIN TRANSACTION".into(),
        "USE memory".into(),
        "VACUUM".into(),
        "EXPLAIN ANALYZE SELECT 1".into(),
        "WITH x AS (DELETE FROM data RETURNING *) SELECT * FROM x".into(),
        "SELECT * FROM duckdb_extensions()".into(),
    ]
}

fn files_under(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.insert(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn adversarial_sql_is_refused_and_creates_no_file() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let listing = keenbench(&cluster, "locked")?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    ok(
        &client,
        &listing,
        "warm",
        "table_get_map",
        json!({"path": "plan.csv"}),
    )
    .await?;
    let cache = cluster.data_dir().join("cache");
    let cache_before = files_under(&cache);
    let probe = cluster.dir.path().join("probe");
    let statements = adversarial(&probe);
    assert!(statements.len() >= 30);
    for (index, sql) in statements.iter().enumerate() {
        for tool in ["table_query", "table_export", "table_update_from_export"] {
            let args = match tool {
                "table_query" => json!({"path": "plan.csv", "query": sql}),
                "table_export" => {
                    json!({"path": "plan.csv", "query": sql, "target_path": "x.csv", "format": "csv"})
                }
                _ => {
                    json!({"path": "plan.csv", "query": sql, "target_path": "x.xlsx", "mode": "replace_sheet"})
                }
            };
            let reply = call(&client, &listing, &format!("{tool}-{index}"), tool, args).await?;
            assert_eq!(
                reply.as_ref().err().map(|e| e.code),
                Some(ErrorCode::ValidationFailed),
                "{tool}: {sql}: {reply:?}"
            );
        }
    }
    let created: Vec<PathBuf> = files_under(cluster.dir.path())
        .into_iter()
        .filter(|p| p.starts_with(&probe) || p.to_string_lossy().contains("probe"))
        .collect();
    assert!(created.is_empty(), "{created:?}");
    assert_eq!(
        files_under(&cache),
        cache_before,
        "the cache must not change"
    );
    let diff = cluster
        .cli_ok(&["draft", "diff", "locked", "--json"])?
        .json::<Value>()?;
    assert_eq!(diff["has_draft"], false);
    let still = ok(
        &client,
        &listing,
        "after",
        "table_query",
        json!({"path": "plan.csv", "query": "SELECT count(*) FROM data"}),
    )
    .await?;
    assert_eq!(still["rows"], json!([[5]]));
    Ok(())
}

/// A tabular worker started with its own environment, killed on drop.
struct TabularWorker(Child);

impl TabularWorker {
    fn spawn(cluster: &Cluster, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut command = Command::new(atelier_bin());
        command
            .args([
                "worker",
                "--pool",
                "tabular",
                "--nats",
                &cluster.nats.url,
                "--data",
            ])
            .arg(cluster.data_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn()?;
        std::thread::sleep(Duration::from_millis(500));
        Ok(Self(child))
    }
}

impl Drop for TabularWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_query_past_the_timeout_is_tool_timeout_and_the_worker_keeps_serving()
-> anyhow::Result<()> {
    let cluster = Cluster::start_with(&["office"])?;
    let _worker = TabularWorker::spawn(&cluster, &[("ATELIER_TABULAR_QUERY_TIMEOUT_MS", "300")])?;
    let listing = keenbench(&cluster, "slow")?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let heavy =
        "SELECT count(*) FROM range(100000000) a, range(1000) b WHERE a.range % 7 = b.range";
    let started = std::time::Instant::now();
    let reply = call(
        &client,
        &listing,
        "slow",
        "table_query",
        json!({"path": "plan.csv", "query": heavy}),
    )
    .await?;
    assert_eq!(reply.err().map(|e| e.code), Some(ErrorCode::ToolTimeout));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let next = ok(
        &client,
        &listing,
        "next",
        "table_query",
        json!({"path": "plan.csv", "query": "SELECT max(Due) FROM data"}),
    )
    .await?;
    assert_eq!(next["rows"], json!([["2026-02-21"]]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_first_calls_on_two_workers_ingest_once() -> anyhow::Result<()> {
    let cluster = Cluster::start_with(&["tabular", "tabular", "office"])?;
    let dir = tempfile::tempdir()?;
    let csv = dir.path().join("big.csv");
    let mut text = String::from("id,group,value\n");
    for id in 0..200_000 {
        text.push_str(&format!("{id},g{},{}.25\n", id % 17, id % 1000));
    }
    std::fs::write(&csv, &text)?;
    cluster.cli_ok(&["wb", "create", "race"])?;
    cluster.cli_ok(&["wb", "add", "race", csv.to_str().unwrap_or_default()])?;
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "race", "--json"])?.json()?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let calls = (0..8).map(|index| {
        let (client, listing) = (client.clone(), listing.clone());
        async move {
            let args = json!({"path": "big.csv", "query": "SELECT count(*), sum(value) FROM data"});
            let request = ToolRequest {
                v: PROTOCOL_VERSION,
                call_id: format!("race-{index}"),
                job_id: None,
                workbench: listing.workbench.clone(),
                tool: "table_query".into(),
                args,
                files: listing.files.clone(),
            };
            let payload =
                encode(&request, Format::MessagePack).map_err(|e| anyhow::anyhow!("{e}"))?;
            let reply =
                atelier_tests::nats_request(&client, &subjects::tool("tabular"), payload, false)
                    .await?;
            decode_reply::<ToolOutput>(&reply, Format::MessagePack)
                .map_err(|e| anyhow::anyhow!("{e:?}"))
        }
    });
    let outputs = futures::future::try_join_all(calls).await?;
    let workers: BTreeSet<&str> = outputs.iter().map(|o| o.worker.as_str()).collect();
    assert_eq!(workers.len(), 2, "both workers answered: {workers:?}");
    let expected_sum: f64 = (0..200_000).map(|id| f64::from(id % 1000) + 0.25).sum();
    for output in &outputs {
        assert_eq!(output.output["rows"], json!([[200_000, expected_sum]]));
    }
    let digest = &listing.files[0].digest;
    let databases: Vec<String> = std::fs::read_dir(cluster.data_dir().join("cache/tabular"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "locks")
        .collect();
    assert_eq!(databases, vec![format!("{digest}.duckdb")]);
    let ingests = std::fs::read_to_string(cluster.dir.path().join("worker-tabular-0.log"))?
        .matches("ingested table")
        .count()
        + std::fs::read_to_string(cluster.dir.path().join("worker-tabular-1.log"))?
            .matches("ingested table")
            .count();
    assert_eq!(ingests, 1, "one ingest on the host");
    Ok(())
}

/// A field of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), in bytes.
fn status_bytes(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no {field} in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

#[tokio::test(flavor = "multi_thread")]
async fn heavy_queries_on_three_tables_at_once_stay_within_one_worker_budget() -> anyhow::Result<()>
{
    const BUDGET: u64 = 512 << 20;
    // DuckDB's bookkeeping, thread stacks and the allocator's slack.
    const SLACK: u64 = 128 << 20;
    let cluster = Cluster::start_with(&["office"])?;
    let worker = TabularWorker::spawn(&cluster, &[("ATELIER_TABULAR_MEMORY_LIMIT", "512MiB")])?;
    let listing = keenbench(&cluster, "heavy")?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let tables = ["plan.csv", "client_data.csv", "projects.csv"];
    // Each table is loaded before the measurement.
    for (index, table) in tables.iter().enumerate() {
        let args = json!({"path": table, "query": "SELECT count(*) FROM data"});
        ok(
            &client,
            &listing,
            &format!("load-{index}"),
            "table_query",
            args,
        )
        .await?;
    }
    let pid = worker.0.id();
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    let before = status_bytes(pid, "VmRSS:")?;
    // Each needs 2 GB of aggregate state, which DuckDB accounts for.
    let heavy = "SELECT length(string_agg(repeat('x', 1000000), '')) FROM range(2000)";
    let calls = tables.iter().enumerate().map(|(index, table)| {
        let args = json!({"path": table, "query": heavy});
        let (client, listing) = (&client, &listing);
        async move {
            call(
                client,
                listing,
                &format!("heavy-{index}"),
                "table_query",
                args,
            )
            .await
        }
    });
    let answers = futures::future::try_join_all(calls).await?;
    let growth = status_bytes(pid, "VmHWM:")?.saturating_sub(before);
    let codes: Vec<Option<ErrorCode>> = answers
        .iter()
        .map(|a| a.as_ref().err().map(|e| e.code))
        .collect();
    assert_eq!(codes, vec![Some(ErrorCode::QueryOutOfMemory); 3]);
    assert!(
        growth < BUDGET + SLACK,
        "the worker's peak RSS grew by {} MiB for a {} MiB budget",
        growth >> 20,
        BUDGET >> 20
    );
    let next = ok(
        &client,
        &listing,
        "next",
        "table_query",
        json!({"path": "plan.csv", "query": "SELECT count(*) FROM data"}),
    )
    .await?;
    assert_eq!(next["rows"], json!([[5]]));
    Ok(())
}
