//! Hostile input at every entry point, as a table of cases: NATS payloads on every subject, tool
//! arguments for every tool, SQL, paths, the CLI and the dashboard's HTTP API. Each case gets
//! its stable code (or HTTP status), no process dies, and nothing is written outside the
//! workbench.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use atelier_messages::store::Listing;
use atelier_messages::tool::{Pool, ToolName};
use atelier_messages::verb::Route;
use atelier_messages::{ErrorCode, Format, decode_reply, subjects};
use atelier_tests::{Cluster, atelier_bin, call_tool, nats_request};
use serde_json::{Value, json};

/// Every file under `dir`, except the system's own data, NATS store and logs.
fn outside_files(dir: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let relative = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .to_string_lossy()
                .to_string();
            if relative == "data" || relative == "nats" || relative.ends_with(".log") {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else {
                found.insert(relative);
            }
        }
    }
    found
}

/// Payloads no verb accepts, with the code each must get (MessagePack when `json` is false).
fn hostile_payloads() -> Vec<(&'static str, Vec<u8>, bool, ErrorCode)> {
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    vec![
        (
            "garbage msgpack",
            b"\xc1\xff\x00garbage".to_vec(),
            false,
            ErrorCode::ValidationFailed,
        ),
        (
            "broken json",
            b"{not json".to_vec(),
            true,
            ErrorCode::ValidationFailed,
        ),
        ("empty", Vec::new(), false, ErrorCode::ValidationFailed),
        (
            "future version",
            br#"{"v": 99}"#.to_vec(),
            true,
            ErrorCode::UnsupportedVersion,
        ),
        (
            "a json string",
            br#""v""#.to_vec(),
            true,
            ErrorCode::ValidationFailed,
        ),
        (
            "a json array",
            br#"[1, 2, 3]"#.to_vec(),
            true,
            ErrorCode::ValidationFailed,
        ),
        (
            "deep nesting",
            deep.into_bytes(),
            true,
            ErrorCode::ValidationFailed,
        ),
        (
            "a msgpack integer",
            vec![0x2a],
            false,
            ErrorCode::ValidationFailed,
        ),
        (
            "version as text",
            br#"{"v": "1"}"#.to_vec(),
            true,
            ErrorCode::ValidationFailed,
        ),
    ]
}

/// Every verb the protocol declares on its public subject, and the tool pools'.
fn request_subjects() -> Vec<String> {
    let mut all: Vec<String> = atelier_messages::verb::DECLARED
        .iter()
        .filter(|verb| verb.route.is_public() || verb.route == Route::Worker)
        .map(|verb| verb.subject.to_string())
        .collect();
    all.extend(Pool::ALL.map(Pool::subject));
    all
}

/// Arguments each tool refuses, with the code: nothing at all (except `list_files`, which takes
/// nothing), a non-object, and hostile paths.
fn hostile_tool_args(tool: ToolName) -> Vec<(Value, ErrorCode)> {
    let mut cases = vec![(json!([1, 2]), ErrorCode::ValidationFailed)];
    if tool != ToolName::ListFiles {
        cases.push((json!({}), ErrorCode::ValidationFailed));
        cases.push((json!({"path": 42}), ErrorCode::ValidationFailed));
    }
    let takes_path = !matches!(tool, ToolName::ListFiles);
    if takes_path {
        // The other arguments valid, so the path is what is refused.
        let target = match tool {
            ToolName::TableUpdateFromExport => "x.xlsx",
            _ => "x.csv",
        };
        for path in [
            "../../outside.txt",
            "/etc/passwd",
            "a/\u{202E}txt.exe",
            "a\u{0}b",
        ] {
            cases.push((
                json!({"path": path, "new_path": "x.csv", "content": "x", "target_path": target,
                       "query": "SELECT 1", "operations": [], "format": "csv",
                       "row_start": 1, "row_count": 1, "sheet": "S", "mode": "append_rows"}),
                ErrorCode::SandboxViolation,
            ));
        }
    }
    cases
}

const HOSTILE_SQL: [&str; 16] = [
    "DROP TABLE data",
    "DELETE FROM data",
    "INSERT INTO data VALUES (1)",
    "CREATE TABLE x AS SELECT 1",
    "SELECT 1; SELECT 2",
    "COPY data TO '/tmp/atelier-hostile.csv'",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "ATTACH '/tmp/atelier-hostile.db' AS evil",
    "INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA database_list",
    "SET memory_limit='100GB'",
    "EXPORT DATABASE '/tmp/atelier-hostile'",
    "SELECT * FROM glob('/etc/*')",
    "CALL pragma_version()",
];

#[tokio::test(flavor = "multi_thread")]
async fn every_entry_point_answers_hostile_input_with_a_code_and_writes_nothing_outside()
-> anyhow::Result<()> {
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("wb", "plan.csv")?;
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "wb", "--json"])?.json()?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let file = cluster.dir.path().join("x.txt");
    std::fs::write(&file, "x")?;
    let file = file.to_string_lossy().to_string();
    let before = outside_files(cluster.dir.path());
    let mut cases = 0;

    // NATS payloads on every request subject.
    for subject in request_subjects() {
        for (name, payload, json, expected) in hostile_payloads() {
            let reply = nats_request(&client, &subject, payload, json).await?;
            let format = if json {
                Format::Json
            } else {
                Format::MessagePack
            };
            let code = decode_reply::<Value>(&reply, format).err().map(|e| e.code);
            assert_eq!(code, Some(expected), "{subject}: {name}");
            cases += 1;
        }
    }

    // The new verbs' own arguments: events of another stream's subjects, an upload whose
    // digest is a path or whose piece runs past its size.
    let workbench = &listing.workbench;
    for (subject, payload) in [
        (
            subjects::ctl::EVENTS,
            json!({"v": 1, "stream": "jobs", "filter": "atelier.store.>"}),
        ),
        (
            subjects::store::UPLOAD,
            json!({"v": 1, "workbench": workbench, "upload": "u", "digest": "../../outside.txt",
                   "size": 3, "offset": 0, "content": [1, 2, 3]}),
        ),
        (
            subjects::store::UPLOAD,
            json!({"v": 1, "workbench": workbench, "upload": "u", "digest": "ab".repeat(32),
                   "size": 2, "offset": 0, "content": [1, 2, 3]}),
        ),
    ] {
        let reply = nats_request(&client, subject, payload.to_string().into_bytes(), true).await?;
        let code = decode_reply::<Value>(&reply, Format::Json)
            .err()
            .map(|e| e.code);
        assert_eq!(
            code,
            Some(ErrorCode::ValidationFailed),
            "{subject}: {payload}"
        );
        cases += 1;
    }

    // Tool arguments for every tool.
    // Local tools never reach a worker (the agent driver answers them).
    for tool in ToolName::ALL {
        let Some(pool) = tool.pool() else {
            continue;
        };
        for (index, (args, expected)) in hostile_tool_args(tool).into_iter().enumerate() {
            let call_id = format!("hostile-{tool}-{index}");
            let reply = call_tool(
                &client,
                &listing,
                &call_id,
                tool.as_str(),
                args.clone(),
                pool.as_str(),
            )
            .await?;
            assert_eq!(reply.err().map(|e| e.code), Some(expected), "{tool} {args}");
            cases += 1;
        }
    }

    // SQL through every tool that takes a query.
    for (index, sql) in HOSTILE_SQL.iter().enumerate() {
        for tool in [ToolName::TableQuery, ToolName::TableExport] {
            let args = json!({"path": "plan.csv", "query": sql, "target_path": "out.csv", "format": "csv"});
            let call_id = format!("sql-{tool}-{index}");
            let reply =
                call_tool(&client, &listing, &call_id, tool.as_str(), args, "tabular").await?;
            assert_eq!(
                reply.err().map(|e| e.code),
                Some(ErrorCode::ValidationFailed),
                "{tool}: {sql}"
            );
            cases += 1;
        }
    }

    // Paths and names through the CLI.
    for (args, code) in [
        (
            vec!["wb", "add", "wb", &file, "--as", "../outside.txt"],
            "SANDBOX_VIOLATION",
        ),
        (
            vec!["wb", "add", "wb", &file, "--as", "/etc/evil"],
            "SANDBOX_VIOLATION",
        ),
        (
            vec!["wb", "add", "wb", &file, "--as", "a\u{200B}b.txt"],
            "SANDBOX_VIOLATION",
        ),
        (
            vec!["wb", "add", "wb", &file, "--as", "plan.csv/inner.txt"],
            "VALIDATION_FAILED",
        ),
        (vec!["wb", "create", "../evil"], "VALIDATION_FAILED"),
        (vec!["wb", "create", ".hidden"], "VALIDATION_FAILED"),
        (vec!["wb", "ls", "no-such-workbench"], "NOT_FOUND"),
        (
            vec!["wb", "cat", "wb", "../../etc/passwd"],
            "SANDBOX_VIOLATION",
        ),
        (vec!["job", "no-such-job"], "NOT_FOUND"),
        (vec!["cancel", "no-such-job"], "NOT_FOUND"),
        (vec!["resume", "no-such-job"], "NOT_FOUND"),
        (
            vec!["submit", "wb", "go", "--job-id", "a/b"],
            "VALIDATION_FAILED",
        ),
        (
            vec!["submit", "wb", "go", "--approve", "all=yes"],
            "VALIDATION_FAILED",
        ),
        (
            vec!["wb", "approvals", "wb", "destructive=maybe"],
            "VALIDATION_FAILED",
        ),
    ] {
        let out = cluster.cli(&args)?;
        assert!(out.failed_with(code), "{args:?}: {}", out.stderr);
        cases += 1;
    }

    // The dashboard's HTTP API.
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut dashboard = Command::new(atelier_bin())
        .args(["dashboard", "--nats", &cluster.nats.url, "--http", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let url = |path: &str| format!("http://{addr}{path}");
    let started = Instant::now();
    while http.get(url("/api/status")).send().await.is_err() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(20),
            "the dashboard did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let csrf = ("x-atelier-csrf", "1");
    for (method, path, body, status) in [
        ("GET", "/api/jobs/no-such-job", None, 404),
        ("GET", "/api/nothing-here", None, 404),
        ("POST", "/api/jobs/no-such-job/cancel", None, 404),
        (
            "POST",
            "/api/jobs/no-such-job/approve",
            Some("{not json"),
            400,
        ),
        ("POST", "/api/workbenches/no-such-wb/publish", None, 404),
        ("POST", "/api/workbenches/wb/publish", None, 409),
        ("DELETE", "/api/jobs", None, 405),
        ("GET", "/api/jobs?state=bogus", None, 400),
    ] {
        let mut request = http
            .request(method.parse()?, url(path))
            .header(csrf.0, csrf.1)
            .header("content-type", "application/json");
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().await?;
        assert_eq!(response.status().as_u16(), status, "{method} {path}");
        cases += 1;
    }
    let _ = dashboard.kill();
    let _ = dashboard.wait();

    assert!(cases >= 200, "only {cases} cases");
    // Every process is alive and answering, and nothing appeared outside the data directory.
    let ping = nats_request(&client, subjects::ctl::PING, br#"{"v":1}"#.to_vec(), true).await?;
    assert_eq!(
        serde_json::from_slice::<Value>(&ping)?["ok"]["protocol_version"],
        1
    );
    let again: Listing = cluster.cli_ok(&["wb", "ls", "wb", "--json"])?.json()?;
    assert_eq!(
        again.files, listing.files,
        "the published files are untouched"
    );
    let tool_alive = call_tool(
        &client,
        &listing,
        "alive",
        "list_files",
        json!({}),
        "office",
    )
    .await?;
    assert!(tool_alive.is_ok());
    let count = call_tool(
        &client,
        &listing,
        "alive-sql",
        "table_query",
        json!({"path": "plan.csv", "query": "SELECT count(*) FROM data"}),
        "tabular",
    )
    .await?
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(count.output["rows"][0][0], 5);
    assert_eq!(
        outside_files(cluster.dir.path()),
        before,
        "files appeared outside the data"
    );
    for stray in [
        "/tmp/atelier-hostile.csv",
        "/tmp/atelier-hostile.db",
        "/tmp/atelier-hostile",
    ] {
        assert!(!Path::new(stray).exists(), "{stray} was written");
    }
    assert!(cluster.coordinator.is_some());
    cluster.kill_coordinator();
    Ok(())
}

/// A worker thread count in the environment that is not one is refused by name before anything
/// starts (the runtime would panic on it); a valid one changes nothing else.
#[test]
fn a_worker_thread_count_that_is_not_a_number_is_refused_by_name() -> anyhow::Result<()> {
    let run = |threads: &str| -> anyhow::Result<atelier_tests::CliOutput> {
        Ok(Command::new(atelier_bin())
            .args(["wb", "list", "--config", "/nonexistent/atelier.toml"])
            .env("TOKIO_WORKER_THREADS", threads)
            .output()?
            .into())
    };
    for threads in ["", "0", "two", "-1", " 2"] {
        let out = run(threads)?;
        assert!(out.failed_with("VALIDATION_FAILED"), "{threads:?}: {out:?}");
        assert!(
            out.stderr.contains("TOKIO_WORKER_THREADS") && !out.stderr.contains("panicked"),
            "{threads:?}: {}",
            out.stderr
        );
    }
    // A valid count starts the command, which stops at the missing configuration file.
    let out = run("1")?;
    assert!(
        !out.success
            && out
                .stderr
                .contains("/nonexistent/atelier.toml does not exist"),
        "{out:?}"
    );
    Ok(())
}

/// A workbook fuzzing found, on 1,000 rows: in each, an inline string's stray end tags would make
/// calamine's value reader see a cell at column HGIRC (121 GB of dense cells in all). The
/// package's own parts are written here, the sheet being the hostile one.
fn stray_end_tags_xlsx(rows: u32) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    const MAIN: &str = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";
    const RELS: &str = "http://schemas.openxmlformats.org/package/2006/relationships";
    const DOC: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
    let cells: String = (1..=rows)
        .map(|r| {
            format!(
                r#"<row r="{r}"><c r="A{r}" t="inlineStr"><is><t>x</p></is#</c><c r="B{r}" t="inlineStr"><is><t>y</t></is></c><c r="hgirC{r}"><v>1</v></c></row>"#
            )
        })
        .collect();
    let parts = [
        (
            "[Content_Types].xml",
            r#"<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>"#
                .to_string(),
        ),
        (
            "_rels/.rels",
            format!(
                r#"<Relationships xmlns="{RELS}"><Relationship Id="rId1" Type="{DOC}/officeDocument" Target="xl/workbook.xml"/></Relationships>"#
            ),
        ),
        (
            "xl/workbook.xml",
            format!(
                r#"<workbook xmlns="{MAIN}" xmlns:r="{DOC}"><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>"#
            ),
        ),
        (
            "xl/_rels/workbook.xml.rels",
            format!(
                r#"<Relationships xmlns="{RELS}"><Relationship Id="rId1" Type="{DOC}/worksheet" Target="worksheets/sheet1.xml"/></Relationships>"#
            ),
        ),
        (
            "xl/worksheets/sheet1.xml",
            format!(r#"<worksheet xmlns="{MAIN}"><sheetData>{cells}</sheetData></worksheet>"#),
        ),
    ];
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, content) in parts {
        writer.start_file(name, zip::write::SimpleFileOptions::default())?;
        writer.write_all(content.as_bytes())?;
    }
    Ok(writer.finish()?.into_inner())
}

/// The stray-end-tag workbook through a real office worker: `get_file_map` is refused as damaged
/// (FILE_READ_FAILED) before any reader sizes a sheet by it, twice, and the worker that answered
/// is still running and answers another call.
#[tokio::test(flavor = "multi_thread")]
async fn a_workbook_whose_stray_end_tags_hide_a_huge_sheet_is_refused_and_the_worker_lives()
-> anyhow::Result<()> {
    let mut cluster = Cluster::start_with(&["office"])?;
    cluster.cli_ok(&["wb", "create", "stray"])?;
    let file = cluster.dir.path().join("stray.xlsx");
    std::fs::write(&file, stray_end_tags_xlsx(1000)?)?;
    cluster.cli_ok(&["wb", "add", "stray", &file.to_string_lossy()])?;
    let listing: Listing = cluster.cli_ok(&["wb", "ls", "stray", "--json"])?.json()?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    for attempt in ["first", "second"] {
        let args = json!({"path": "stray.xlsx"});
        let call_id = format!("stray-{attempt}");
        let reply = call_tool(&client, &listing, &call_id, "get_file_map", args, "office").await?;
        assert_eq!(
            reply.err().map(|e| e.code),
            Some(ErrorCode::FileReadFailed),
            "{attempt} get_file_map\n{}",
            cluster.logs()
        );
    }
    for worker in &mut cluster.workers {
        let exited = worker.wait_status(Duration::from_millis(200));
        assert!(exited.is_none(), "{} exited: {exited:?}", worker.name);
    }
    let alive = call_tool(
        &client,
        &listing,
        "stray-alive",
        "list_files",
        json!({}),
        "office",
    )
    .await?;
    assert!(alive.is_ok(), "{alive:?}");
    Ok(())
}
