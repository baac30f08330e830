//! `atelier mcp` on `atelier up`, driven by the official MCP SDKs' clients (rmcp for Rust, `mcp`
//! for Python on stdio and over the dashboard's HTTP) the way an MCP host starts it (a child
//! process on stdio) and by raw JSON-RPC: the catalog's tools with a workbench argument, reads
//! over the current files, writes that land in the draft once per request id, resources, a whole
//! job with progress, and Atelier's codes for bad input: a refused call is a tool result with
//! `isError: true` and the code in `structuredContent.error.code` (SEP-1303), an unknown tool a
//! JSON-RPC error.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use atelier_tests::scripted::ScriptedModel;
use atelier_tests::up::Up;
use atelier_tests::{atelier_bin, fixtures};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ProgressNotificationParam, ReadResourceRequestParams,
    ResourceContents,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use serde_json::{Map, Value, json};

/// An MCP host that keeps the progress messages it is sent.
#[derive(Clone, Default)]
struct Host {
    progress: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Host {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Ok(mut progress) = self.progress.lock() {
            progress.push(params.message.unwrap_or_default());
        }
    }
}

fn command(up: &Up, args: &[&str]) -> tokio::process::Command {
    tokio::process::Command::new(atelier_bin()).configure(|command| {
        command
            .arg("mcp")
            .args(args)
            .args(["--data", &up.data().to_string_lossy()])
            .env_remove("ATELIER_NATS_URL")
            .current_dir(up.workdir());
    })
}

async fn connect(
    up: &Up,
    args: &[&str],
    host: Host,
) -> anyhow::Result<RunningService<RoleClient, Host>> {
    Ok(host
        .serve(TokioChildProcess::new(command(up, args))?)
        .await?)
}

fn arguments(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

async fn call_tool(
    client: &RunningService<RoleClient, Host>,
    tool: &str,
    args: Value,
) -> Result<CallToolResult, ServiceError> {
    let request = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments(args));
    client.call_tool(request).await
}

async fn call(
    client: &RunningService<RoleClient, Host>,
    tool: &str,
    args: Value,
) -> Result<Value, ServiceError> {
    let result = call_tool(client, tool, args).await?;
    Ok(result.structured_content.unwrap_or_default())
}

/// Atelier's code of a call refused as a tool result the host's model reads: `isError: true`,
/// the code in `structuredContent.error.code` beside the message, and both at the head of the
/// text content.
fn refusal(answered: Result<CallToolResult, ServiceError>) -> Option<String> {
    let result = answered.ok()?;
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let error = result.structured_content.clone().unwrap_or_default()["error"].clone();
    let code = error["code"].as_str()?.to_string();
    let message = error["message"].as_str().unwrap_or_default();
    let text = result.content.first().and_then(|content| content.as_text());
    let text = text.map(|text| text.text.as_str()).unwrap_or_default();
    assert!(
        !message.is_empty() && text.starts_with(&format!("{code}: {message}")),
        "{result:?}"
    );
    Some(code)
}

/// The JSON-RPC error code and Atelier's code (`data.code`) of a request refused at the
/// protocol level (an unknown tool, a resource).
fn protocol_error<T>(refused: Result<T, ServiceError>) -> Option<(i32, String)> {
    match refused {
        Err(ServiceError::McpError(error)) => {
            let code = error.data?["code"].as_str()?.to_string();
            Some((error.code.0, code))
        }
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_host_reads_writes_into_the_draft_and_gets_codes_for_bad_input() -> anyhow::Result<()>
{
    let up = Up::start()?;
    std::fs::write(
        up.workdir().join("sales.csv"),
        "region,revenue\nNorth,120\nSouth,80\nWest,95\n",
    )?;
    let invoice = fixtures().join("keenbench/synthetic/invoice_template.docx");
    up.cli_ok(&["wb", "create", "q3"])?;
    up.cli_ok(&["wb", "add", "q3", "sales.csv", &invoice.to_string_lossy()])?;
    let client = connect(&up, &[], Host::default()).await?;

    // The catalog's tools, with a workbench argument and hints from their classes.
    let tools = client.list_all_tools().await?;
    let tool = |name: &str| tools.iter().find(|tool| tool.name == name).cloned();
    let read = tool("read_file").context("read_file is offered")?;
    assert_eq!(read.input_schema["required"][0], "workbench");
    assert_eq!(
        read.annotations.as_ref().and_then(|a| a.read_only_hint),
        Some(true)
    );
    let delete = tool("delete_file").context("delete_file is offered")?;
    assert_eq!(
        delete.annotations.as_ref().and_then(|a| a.destructive_hint),
        Some(true)
    );
    for own in ["list_workbenches", "draft_diff", "submit_job"] {
        assert!(tool(own).is_some(), "{own}");
    }
    assert!(
        tool("recall_tool_result").is_none(),
        "the agent's own tools are not offered"
    );

    // Reads.
    let listed = call(&client, "list_workbenches", json!({})).await?;
    assert_eq!(listed["workbenches"][0]["name"], "q3", "{listed}");
    let total = call(
        &client,
        "table_query",
        json!({"workbench": "q3", "path": "sales.csv", "query": "SELECT SUM(revenue) AS total FROM data"}),
    )
    .await?;
    assert_eq!(total["rows"][0][0], 295, "{total}");

    // A write lands in the draft, never in the published files.
    let written = call(
        &client,
        "write_text_file",
        json!({"workbench": "q3", "path": "notes.md", "content": "North leads.\n"}),
    )
    .await?;
    assert_eq!(written["state"], "succeeded", "{written}");
    assert_eq!(
        up.cli_ok(&["wb", "cat", "q3", "notes.md", "--draft"])?,
        "North leads.\n"
    );
    assert!(!up.cli_ok(&["wb", "ls", "q3"])?.contains("notes.md"));
    let review = call(&client, "draft_diff", json!({"workbench": "q3"})).await?;
    assert_eq!(review["added"], json!(["notes.md"]), "{review}");

    // Bad input: tool results the model reads, with Atelier's codes; nothing written outside
    // the draft.
    let unknown_workbench = call_tool(
        &client,
        "read_file",
        json!({"workbench": "nope", "path": "a.txt"}),
    )
    .await;
    assert_eq!(refusal(unknown_workbench).as_deref(), Some("NOT_FOUND"));
    let outside = call_tool(
        &client,
        "read_file",
        json!({"workbench": "q3", "path": "../x.csv"}),
    )
    .await;
    assert_eq!(refusal(outside).as_deref(), Some("SANDBOX_VIOLATION"));
    let missing = call_tool(
        &client,
        "read_file",
        json!({"workbench": "q3", "path": "missing.csv"}),
    )
    .await;
    assert_eq!(refusal(missing).as_deref(), Some("FILE_READ_FAILED"));
    let traversal = call_tool(
        &client,
        "write_text_file",
        json!({"workbench": "q3", "path": "../../escape.txt", "content": "x"}),
    )
    .await;
    assert_eq!(refusal(traversal).as_deref(), Some("SANDBOX_VIOLATION"));
    assert!(!up.workdir().join("escape.txt").exists());
    let no_query = call_tool(
        &client,
        "table_query",
        json!({"workbench": "q3", "path": "sales.csv"}),
    )
    .await;
    assert_eq!(refusal(no_query).as_deref(), Some("VALIDATION_FAILED"));
    let unnamed = call_tool(&client, "read_file", json!({"path": "sales.csv"})).await;
    assert_eq!(refusal(unnamed).as_deref(), Some("VALIDATION_FAILED"));
    // A tool the server does not offer is no call it can route: a JSON-RPC error (-32602).
    let unknown_tool = call_tool(&client, "format_disk", json!({"workbench": "q3"})).await;
    assert_eq!(
        protocol_error(unknown_tool),
        Some((-32602, "VALIDATION_FAILED".to_string()))
    );

    // Resources: published and draft files.
    let resources = client.list_all_resources().await?;
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert!(uris.contains(&"atelier://q3/sales.csv"), "{uris:?}");
    assert!(
        uris.contains(&"atelier://q3/notes.md?view=draft"),
        "{uris:?}"
    );
    let text = |uri: &str| ReadResourceRequestParams::new(uri.to_string());
    let sales = client.read_resource(text("atelier://q3/sales.csv")).await?;
    match &sales.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => {
            assert!(text.starts_with("region,revenue\nNorth,120"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    let docx = client
        .read_resource(text("atelier://q3/invoice_template.docx"))
        .await?;
    match &docx.contents[0] {
        ResourceContents::BlobResourceContents { blob, .. } => {
            let bytes = data_encoding::BASE64.decode(blob.as_bytes())?;
            assert_eq!(&bytes[..2], b"PK");
        }
        other => panic!("{other:?}"),
    }
    // A missing resource is a JSON-RPC error (resources are no tool results).
    let missing = client.read_resource(text("atelier://q3/missing.txt")).await;
    assert_eq!(
        protocol_error(missing).map(|(_, code)| code).as_deref(),
        Some("NOT_FOUND")
    );
    client.cancel().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bound_server_runs_a_whole_job_with_progress() -> anyhow::Result<()> {
    let model = ScriptedModel::start(serde_json::from_value(json!({
        "research": [{"content": "sales.csv has three regions.", "delay_ms": 600}],
        "plan": [{"content": "- [ ] 1. Notes — write notes.md"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.md", "content": "North leads.\n"}}]},
            {"content": "Written."}
        ]},
        "summary": [{"content": "notes.md is in the draft."}]
    }))?)
    .await?;
    let up = Up::start()?;
    std::fs::write(
        up.workdir().join("sales.csv"),
        "region,revenue\nNorth,120\n",
    )?;
    up.cli_ok(&["wb", "create", "q3"])?;
    up.cli_ok(&["wb", "add", "q3", "sales.csv"])?;
    let host = Host::default();
    let client = connect(&up, &["--workbench", "q3"], host.clone()).await?;
    let tools = client.list_all_tools().await?;
    let read = tools
        .iter()
        .find(|tool| tool.name == "read_file")
        .context("read_file")?;
    assert!(
        read.input_schema["properties"].get("workbench").is_none(),
        "bound: no workbench argument"
    );
    let job = call(
        &client,
        "submit_job",
        json!({"message": "Write notes on sales", "model": model.model_spec()}),
    )
    .await?;
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["outcome"]["files"], json!(["notes.md"]), "{job}");
    let told = host.progress.lock().map(|p| p.clone()).unwrap_or_default();
    assert!(
        told.iter().any(|line| line.contains("research")),
        "{told:?}"
    );
    // A draft now waits: another job is refused with the code, until it may continue it.
    let refused = call_tool(
        &client,
        "submit_job",
        json!({"message": "Again", "model": model.model_spec()}),
    )
    .await;
    assert_eq!(refusal(refused).as_deref(), Some("DRAFT_EXISTS"));
    // A budget as `atelier submit --budget-*` takes it: a bad one refused by name, at once.
    for (budget, named) in [
        (json!({"budget_tokens": 0}), "budget_tokens"),
        (json!({"budget_tokens": "many"}), "budget_tokens"),
        (json!({"budget_usd": -1}), "budget_usd"),
    ] {
        let mut args = json!({"message": "Again", "continue_draft": true});
        args.as_object_mut()
            .context("args")?
            .extend(budget.as_object().cloned().unwrap_or_default());
        let refused = call_tool(&client, "submit_job", args).await;
        let text = format!("{refused:?}");
        assert_eq!(
            refusal(refused).as_deref(),
            Some("VALIDATION_FAILED"),
            "{budget}"
        );
        assert!(text.contains(named), "{text}");
    }
    client.cancel().await?;
    Ok(())
}

/// Sends one JSON-RPC message on a line.
fn send(stdin: &mut impl Write, message: &Value) -> anyhow::Result<()> {
    writeln!(stdin, "{message}")?;
    stdin.flush()?;
    Ok(())
}

/// Reads lines until the answer to request `id`.
fn answer(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    id: u64,
) -> anyhow::Result<Value> {
    for line in lines {
        let message: Value = serde_json::from_str(&line?)?;
        if message["id"] == id {
            return Ok(message);
        }
    }
    anyhow::bail!("no answer to request {id}")
}

#[test]
fn a_request_sent_again_writes_once_and_its_id_reused_for_another_call_runs_its_own_job()
-> anyhow::Result<()> {
    let up = Up::start()?;
    up.cli_ok(&["wb", "create", "q3"])?;
    let mut server = Command::new(atelier_bin())
        .args([
            "mcp",
            "--workbench",
            "q3",
            "--data",
            &up.data().to_string_lossy(),
        ])
        .env_remove("ATELIER_NATS_URL")
        .current_dir(up.workdir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = server.stdin.take().context("stdin")?;
    let mut lines = BufReader::new(server.stdout.take().context("stdout")?).lines();
    send(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}),
    )?;
    let initialized = answer(&mut lines, 1)?;
    assert_eq!(
        initialized["result"]["serverInfo"]["name"], "atelier",
        "{initialized}"
    );
    send(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )?;
    let write = |path: &str, content: &str| {
        json!({"jsonrpc": "2.0", "id": 40, "method": "tools/call", "params": {
        "name": "write_text_file", "arguments": {"path": path, "content": content}}})
    };
    let job = |message: &Value| message["result"]["structuredContent"]["job_id"].clone();
    send(&mut stdin, &write("a.txt", "first\n"))?;
    let first = answer(&mut lines, 40)?;
    assert_eq!(
        first["result"]["structuredContent"]["state"], "succeeded",
        "{first}"
    );
    // The same request again (a client's retry): the same job, nothing more written.
    send(&mut stdin, &write("a.txt", "first\n"))?;
    let again = answer(&mut lines, 40)?;
    assert_eq!(job(&first), job(&again), "{first} {again}");
    // The same request id for another call: its own job, which writes b.txt; never the first
    // call's answer.
    send(&mut stdin, &write("b.txt", "second\n"))?;
    let other = answer(&mut lines, 40)?;
    assert_eq!(
        other["result"]["structuredContent"]["state"], "succeeded",
        "{other}"
    );
    assert_ne!(job(&first), job(&other), "{first} {other}");
    assert_eq!(
        up.cli_ok(&["wb", "cat", "q3", "a.txt", "--draft"])?,
        "first\n"
    );
    assert_eq!(
        up.cli_ok(&["wb", "cat", "q3", "b.txt", "--draft"])?,
        "second\n"
    );
    let jobs: Vec<atelier_messages::job::JobView> =
        serde_json::from_str(&up.cli_ok(&["jobs", "--json"])?)?;
    assert_eq!(jobs.len(), 2, "one job per distinct call: {jobs:?}");
    drop(stdin);
    let _ = server.wait();
    Ok(())
}

/// One JSON-RPC message to `/mcp` over streamable HTTP: the status, the session id the server
/// gave, and the answer (from the SSE stream's `data:` lines, or a JSON body).
async fn post(
    http: &reqwest::Client,
    url: &str,
    auth: (Option<&str>, Option<&str>),
    message: Value,
) -> anyhow::Result<(reqwest::StatusCode, Option<String>, Option<Value>)> {
    let (token, session) = auth;
    let mut request = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(message.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request
            .header("Mcp-Session-Id", session)
            .header("MCP-Protocol-Version", "2025-06-18");
    }
    let response = request.send().await?;
    let status = response.status();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    let text = response.text().await?;
    let answer = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
        .or_else(|| serde_json::from_str(&text).ok());
    Ok((status, session, answer))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_serves_mcp_over_http_behind_its_token() -> anyhow::Result<()> {
    let up = Up::start_with(&[], &[("ATELIER_DASHBOARD_TOKEN", "s3cret-token")])?;
    up.cli_ok(&["wb", "create", "q3"])?;
    let url = format!("http://{}/mcp", up.dashboard_addr()?);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "http", "version": "1"}}});
    let (status, _, refused) = post(&http, &url, (None, None), initialize.clone()).await?;
    assert_eq!(status, reqwest::StatusCode::UNAUTHORIZED);
    assert_eq!(
        refused.map(|body| body["error"]["code"].clone()),
        Some(json!("UNAUTHORIZED"))
    );
    let token = Some("s3cret-token");
    let (status, session, answer) = post(&http, &url, (token, None), initialize).await?;
    assert!(status.is_success(), "{status}");
    assert_eq!(
        answer.context("an answer")?["result"]["serverInfo"]["name"],
        "atelier"
    );
    let session = session.context("a session id")?;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(&http, &url, (token, Some(&session)), initialized).await?;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "list_workbenches", "arguments": {}}});
    let (status, _, answer) = post(&http, &url, (token, Some(&session)), call).await?;
    assert!(status.is_success(), "{status}");
    let listed = &answer.context("an answer")?["result"]["structuredContent"];
    assert_eq!(listed["workbenches"][0]["name"], "q3", "{listed}");
    Ok(())
}

/// An `initialize` on `/mcp` with request id `id`, without a session: the response as it came.
async fn initialize(
    http: &reqwest::Client,
    url: &str,
    id: u64,
) -> anyhow::Result<reqwest::Response> {
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "cap", "version": "1"}}});
    Ok(http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(message.to_string())
        .send()
        .await?)
}

/// The session an accepted `initialize` opened (its answer read to the end).
async fn opened(response: reqwest::Response) -> anyhow::Result<String> {
    anyhow::ensure!(
        response.status() == reqwest::StatusCode::OK,
        "initialize answered {}",
        response.status()
    );
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_string)
        .context("a session id")?;
    response.text().await?;
    Ok(session)
}

/// Checks that `response` refuses an `initialize` (request id `id`) for want of sessions.
async fn assert_no_room(response: reqwest::Response, id: u64) -> anyhow::Result<()> {
    assert_eq!(response.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    assert!(retry_after.is_some_and(|secs| secs > 0), "{retry_after:?}");
    let body: Value = response.json().await?;
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["id"], id, "{body}");
    assert_eq!(body["error"]["code"], -32000, "{body}");
    assert_eq!(body["error"]["data"]["code"], "TOO_MANY_SESSIONS", "{body}");
    assert_eq!(body["error"]["data"]["max_sessions"], 3, "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_sessions_are_capped_and_a_closed_or_idle_one_gives_its_place_back()
-> anyhow::Result<()> {
    let up = Up::start_with(
        &[],
        &[
            ("ATELIER_MCP_MAX_SESSIONS", "3"),
            ("ATELIER_MCP_SESSION_IDLE_SECS", "8"),
        ],
    )?;
    let url = format!("http://{}/mcp", up.dashboard_addr()?);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let mut sessions = Vec::new();
    for id in 1..=3 {
        sessions.push(opened(initialize(&http, &url, id).await?).await?);
    }
    // A fourth is refused with the status, Retry-After and the code, as JSON-RPC.
    assert_no_room(initialize(&http, &url, 4).await?, 4).await?;

    // A session closed by its client gives its place back.
    let closed = http
        .delete(&url)
        .header("Mcp-Session-Id", &sessions[0])
        .header("MCP-Protocol-Version", "2025-06-18")
        .send()
        .await?;
    assert!(closed.status().is_success(), "{}", closed.status());
    opened(initialize(&http, &url, 5).await?).await?;
    assert_no_room(initialize(&http, &url, 6).await?, 6).await?;

    // So does one idle for longer than mcp_session_idle_secs: it is closed and forgotten.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut id = 7;
    loop {
        let response = initialize(&http, &url, id).await?;
        if response.status() == reqwest::StatusCode::OK {
            opened(response).await?;
            break;
        }
        assert_no_room(response, id).await?;
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "idle sessions were never closed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        id += 1;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_mcp_body_is_400_with_the_json_rpc_code_and_an_oversized_one_413()
-> anyhow::Result<()> {
    let up = Up::start()?;
    let url = format!("http://{}/mcp", up.dashboard_addr()?);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let send = |body: String| {
        http.post(&url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .body(body)
            .send()
    };
    // Not JSON: 400 and the JSON-RPC parse error.
    let response = send(r#"{"jsonrpc": "2.0", "id": 1, "method""#.to_string()).await?;
    assert_eq!(response.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: Value = response.json().await?;
    assert_eq!(body["error"]["code"], -32700, "{body}");
    assert_eq!(body["id"], Value::Null, "{body}");
    // JSON, but no JSON-RPC message: 400 and invalid request.
    let response = send(json!({"id": 2, "hello": "world"}).to_string()).await?;
    assert_eq!(response.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: Value = response.json().await?;
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["id"], 2, "{body}");
    // Over the limit: 413 at once, from the length declared (a client still writing the body
    // when the answer closes the connection would see a broken pipe, not the answer).
    let addr = up.dashboard_addr()?;
    assert_eq!(status_of_a_declared_body(&addr, 5 << 20).await?, 413);
    // A good request is still served.
    opened(initialize(&http, &url, 4).await?).await?;
    Ok(())
}

/// The status `/mcp` answers a JSON POST that declares a body of `length` bytes, read before
/// any of the body is sent.
async fn status_of_a_declared_body(addr: &str, length: usize) -> anyhow::Result<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let mut answer = vec![0; 64];
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut answer))
        .await??;
    let status_line = String::from_utf8_lossy(&answer[..read]).to_string();
    let status = status_line.split_whitespace().nth(1);
    Ok(status.context("no status line")?.parse()?)
}

/// What `tests/python/mcp_client.py` (the official MCP Python SDK) must see on either transport.
fn assert_python_host(result: &Value) {
    assert_eq!(
        result["has_tools"],
        json!([
            "draft_diff",
            "read_file",
            "submit_job",
            "table_query",
            "write_text_file"
        ]),
        "{result}"
    );
    assert_eq!(result["read_only_hint"], true, "{result}");
    assert_eq!(result["destructive_hint"], true, "{result}");
    assert_eq!(result["total"], 295, "{result}");
    assert_eq!(result["write_state"], "succeeded", "{result}");
    assert_eq!(result["draft_added"], json!(["py-notes.md"]), "{result}");
    let resources = result["resources"].as_array().cloned().unwrap_or_default();
    assert!(
        resources.contains(&json!("atelier://q3/sales.csv"))
            && resources.contains(&json!("atelier://q3/py-notes.md?view=draft")),
        "{result}"
    );
    assert_eq!(result["sales_head"], "region,revenue", "{result}");
    assert_eq!(result["traversal"], "SANDBOX_VIOLATION", "{result}");
    assert_eq!(result["unknown_workbench"], "NOT_FOUND", "{result}");
    assert_eq!(result["outside"], "SANDBOX_VIOLATION", "{result}");
    assert_eq!(result["missing"], "FILE_READ_FAILED", "{result}");
    assert_eq!(
        result["unknown_tool"],
        json!([-32602, "VALIDATION_FAILED"]),
        "{result}"
    );
}

/// `up` with workbench q3 holding sales.csv.
fn sales_workbench(up: &Up) -> anyhow::Result<()> {
    std::fs::write(
        up.workdir().join("sales.csv"),
        "region,revenue\nNorth,120\nSouth,80\nWest,95\n",
    )?;
    up.cli_ok(&["wb", "create", "q3"])?;
    up.cli_ok(&["wb", "add", "q3", "sales.csv"])?;
    Ok(())
}

#[test]
fn the_official_python_sdk_drives_the_server_on_stdio_and_over_http() -> anyhow::Result<()> {
    let up = Up::start_with(&[], &[("ATELIER_DASHBOARD_TOKEN", "py-token")])?;
    sales_workbench(&up)?;
    let bin = atelier_bin().to_string_lossy().to_string();
    let data = up.data().to_string_lossy().to_string();
    let workdir = up.workdir().to_string_lossy().to_string();
    let stdio = atelier_tests::python::run(
        "mcp_client.py",
        &[
            ("ATELIER_BIN", &bin),
            ("ATELIER_DATA", &data),
            ("WORKDIR", &workdir),
        ],
    )?;
    assert_python_host(&stdio);
    assert_eq!(
        up.cli_ok(&["wb", "cat", "q3", "py-notes.md", "--draft"])?,
        "From Python.\n"
    );
    assert!(!up.cli_ok(&["wb", "ls", "q3"])?.contains("py-notes.md"));
    assert!(!up.workdir().join("escape.txt").exists());

    // The same host over streamable HTTP, with the dashboard's token; the draft starts afresh.
    up.cli_ok(&["draft", "discard", "q3"])?;
    let url = format!("http://{}/mcp", up.dashboard_addr()?);
    let http = atelier_tests::python::run(
        "mcp_client.py",
        &[("MCP_URL", &url), ("MCP_TOKEN", "py-token")],
    )?;
    assert_python_host(&http);
    Ok(())
}

/// `mcp-inspector --cli` (npm `@modelcontextprotocol/inspector`) starting `atelier mcp` as its
/// stdio server, with `args` after the server command; its exit code, stdout and stderr.
fn inspector(up: &Up, args: &[&str]) -> anyhow::Result<(Option<i32>, Value, String)> {
    let bin = atelier_tests::browser::browser_dir().join("node_modules/.bin/mcp-inspector");
    anyhow::ensure!(
        bin.exists(),
        "the MCP Inspector is missing: `bash scripts/setup.sh --tests` (npm ci in tests/browser)"
    );
    let output = Command::new(bin)
        .args(["--cli", "--cwd", &up.workdir().to_string_lossy()])
        .arg(atelier_bin())
        .args(["mcp", "--data", &up.data().to_string_lossy()])
        .args(args)
        .env_remove("ATELIER_NATS_URL")
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let parsed = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    Ok((output.status.code(), parsed, stderr))
}

/// The Inspector's exit code for a tool result with `isError: true` (its `TOOL_ERROR`), after it
/// printed the result.
const INSPECTOR_TOOL_ERROR: Option<i32> = Some(5);

#[test]
fn the_mcp_inspector_cli_lists_queries_writes_and_is_refused_a_traversal() -> anyhow::Result<()> {
    let up = Up::start()?;
    sales_workbench(&up)?;

    let (exit, listed, stderr) = inspector(&up, &["--method", "tools/list"])?;
    assert_eq!(exit, Some(0), "{stderr}");
    let tools = listed["tools"].as_array().cloned().unwrap_or_default();
    let query = tools.iter().find(|tool| tool["name"] == "table_query");
    let query = query.context("table_query is listed")?;
    assert_eq!(query["annotations"]["readOnlyHint"], true, "{query}");
    assert_eq!(query["inputSchema"]["required"][0], "workbench", "{query}");

    let sum = "query=SELECT SUM(revenue) AS total FROM data";
    let call = ["--method", "tools/call", "--tool-name"];
    let (exit, total, stderr) = inspector(
        &up,
        &[
            &call[..],
            &[
                "table_query",
                "--tool-arg",
                "workbench=q3",
                "path=sales.csv",
                sum,
            ],
        ]
        .concat(),
    )?;
    assert_eq!(exit, Some(0), "{stderr}");
    assert_eq!(total["structuredContent"]["rows"][0][0], 295, "{total}");

    let write = ["write_text_file", "--tool-arg", "workbench=q3"];
    let (exit, written, stderr) = inspector(
        &up,
        &[&call[..], &write, &["path=inspector.md", "content=hello"]].concat(),
    )?;
    assert_eq!(exit, Some(0), "{stderr}");
    assert_eq!(written["structuredContent"]["state"], "succeeded");
    assert_eq!(
        up.cli_ok(&["wb", "cat", "q3", "inspector.md", "--draft"])?,
        "hello"
    );
    assert!(!up.cli_ok(&["wb", "ls", "q3"])?.contains("inspector.md"));

    // A refused call is a tool result: isError, the code for programs, the message for the
    // model.
    let (exit, refused, stderr) = inspector(
        &up,
        &[&call[..], &write, &["path=../../escape.txt", "content=x"]].concat(),
    )?;
    assert_eq!(exit, INSPECTOR_TOOL_ERROR, "{stderr}");
    assert_eq!(refused["isError"], true, "{refused}");
    let error = &refused["structuredContent"]["error"];
    assert_eq!(error["code"], "SANDBOX_VIOLATION", "{refused}");
    let text = refused["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("SANDBOX_VIOLATION: ") && text.contains("leaves the workbench"),
        "{refused}"
    );
    let read = ["read_file", "--tool-arg", "workbench=q3"];
    let (exit, missing, stderr) =
        inspector(&up, &[&call[..], &read, &["path=missing.csv"]].concat())?;
    assert_eq!(exit, INSPECTOR_TOOL_ERROR, "{stderr}");
    assert_eq!(missing["isError"], true, "{missing}");
    assert_eq!(
        missing["structuredContent"]["error"]["code"], "FILE_READ_FAILED",
        "{missing}"
    );
    // (An unknown tool is not asked here: the Inspector looks it up in tools/list and refuses it
    // itself; the rmcp and Python hosts above see it as a JSON-RPC error.)
    assert!(!up.workdir().join("escape.txt").exists());
    assert!(
        !up.workdir()
            .parent()
            .is_some_and(|dir| dir.join("escape.txt").exists())
    );

    let (exit, resources, stderr) = inspector(&up, &["--method", "resources/list"])?;
    assert_eq!(exit, Some(0), "{stderr}");
    let uris: Vec<&str> = resources["resources"]
        .as_array()
        .map(|list| list.iter().filter_map(|r| r["uri"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        uris.contains(&"atelier://q3/inspector.md?view=draft"),
        "{uris:?}"
    );
    Ok(())
}

/// Waits for the one job awaiting approval, checks what it waits on, and decides it with the
/// CLI as a person would (`atelier approve [--reject]`); its id.
fn decide_pending(up: &Up, tool: &str, reject: bool) -> anyhow::Result<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let listed = up.cli_ok(&["jobs", "--state", "awaiting_approval", "--json"])?;
        let jobs: Vec<atelier_messages::job::JobView> = serde_json::from_str(&listed)?;
        if let Some(job) = jobs.first() {
            let pending = job.pending_approval.as_ref().context("a pending call")?;
            anyhow::ensure!(pending.tool == tool, "{pending:?}");
            let mut args = vec!["approve", job.job_id.as_str()];
            if reject {
                args.extend(["--reject", "--reason", "keep the sales"]);
            }
            up.cli_ok(&args)?;
            return Ok(job.job_id.clone());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no call waited for approval"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A person deciding the pending `delete_file` call from the CLI, on a blocking thread.
async fn deciding(up: &std::sync::Arc<Up>, reject: bool) -> anyhow::Result<String> {
    let up = std::sync::Arc::clone(up);
    tokio::task::spawn_blocking(move || decide_pending(&up, "delete_file", reject)).await?
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destructive_call_waits_for_a_persons_decision() -> anyhow::Result<()> {
    let up = std::sync::Arc::new(Up::start()?);
    sales_workbench(&up)?;
    let client = connect(&up, &["--workbench", "q3"], Host::default()).await?;
    let delete = json!({"path": "sales.csv"});

    // Rejected: the host gets Atelier's code, and the file stays.
    let (rejected, decided) = tokio::join!(
        call_tool(&client, "delete_file", delete.clone()),
        deciding(&up, true)
    );
    decided?;
    assert_eq!(refusal(rejected).as_deref(), Some("APPROVAL_REJECTED"));
    let untouched = call(&client, "draft_diff", json!({})).await?;
    assert_eq!(untouched["has_draft"], false, "{untouched}");

    // Approved: the deletion lands in the draft only.
    let (deleted, decided) =
        tokio::join!(call(&client, "delete_file", delete), deciding(&up, false));
    let job_id = decided?;
    let deleted = deleted?;
    assert_eq!(deleted["state"], "succeeded", "{deleted}");
    assert_eq!(deleted["job_id"], job_id.as_str());
    let review = call(&client, "draft_diff", json!({})).await?;
    assert_eq!(review["deleted"], json!(["sales.csv"]), "{review}");
    assert!(up.cli_ok(&["wb", "ls", "q3"])?.contains("sales.csv"));
    client.cancel().await?;
    Ok(())
}
