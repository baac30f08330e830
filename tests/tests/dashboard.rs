//! The ops dashboard, `/metrics` and traces, end to end: real nats-server, coordinator, workers
//! and `atelier dashboard` processes, a scripted model, an in-process OTLP receiver, and (for
//! the browser test) headless Chromium driven by `tests/browser/dashboard.test.mjs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use atelier_messages::job::{JobEvent, JobOutcome, JobState, JobView};
use atelier_messages::store::DraftDiff;
use atelier_tests::browser::{self, PageScript, browser_dir, browser_setup, run_browser_script};
use atelier_tests::scripted::{ScriptedModel, launch_plan_export_script};
use atelier_tests::{Cluster, NatsServer, atelier_bin, launch_plan_csv, simple_docx, wait_until};
use serde_json::{Value, json};

/// An HTTP client (reqwest is built without a TLS provider; install ring's as the binary does).
fn http_client(follow_redirects: bool) -> anyhow::Result<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let policy = if follow_redirects {
        reqwest::redirect::Policy::default()
    } else {
        reqwest::redirect::Policy::none()
    };
    Ok(reqwest::Client::builder().redirect(policy).build()?)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or(0)
}

/// A child process killed on drop, logging to `<dir>/<name>.log`.
struct Spawned {
    child: Child,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_atelier(
    dir: &Path,
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<Spawned> {
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let child = Command::new(atelier_bin())
        .args(args)
        .envs(env.iter().copied())
        .env("ATELIER_LOG", "info")
        .env_remove("ATELIER_DEFAULT_MODEL")
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()?;
    Ok(Spawned { child })
}

/// `atelier dashboard` on a free port, ready when `/api/status` answers.
struct DashboardProcess {
    url: String,
    http: reqwest::Client,
    _process: Spawned,
}

impl DashboardProcess {
    async fn start(dir: &Path, nats_url: &str, token: Option<&str>) -> anyhow::Result<Self> {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut env = Vec::new();
        if let Some(token) = token {
            env.push(("ATELIER_DASHBOARD_TOKEN", token));
        }
        let process = spawn_atelier(
            dir,
            "dashboard",
            &["dashboard", "--nats", nats_url, "--http", &addr],
            &env,
        )?;
        let url = format!("http://{addr}");
        let http = http_client(true)?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut request = http.get(format!("{url}/api/status"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if request.send().await.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            ensure!(Instant::now() < deadline, "the dashboard did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Self {
            url,
            http,
            _process: process,
        })
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let response = self.http.get(format!("{}{path}", self.url)).send().await?;
        let status = response.status();
        let body: Value = response.json().await?;
        ensure!(status.is_success(), "GET {path}: {status} {body}");
        Ok(body)
    }

    async fn metrics(&self) -> anyhow::Result<Metrics> {
        let text = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await?
            .text()
            .await?;
        Metrics::parse(&text)
    }
}

/// `/metrics`, checked line by line against the text format and read with prometheus-parse.
struct Metrics {
    scrape: prometheus_parse::Scrape,
}

impl Metrics {
    fn parse(text: &str) -> anyhow::Result<Self> {
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            check_sample_line(line).with_context(|| format!("not Prometheus text: {line:?}"))?;
        }
        let scrape =
            prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_string())))?;
        Ok(Self { scrape })
    }

    /// The sum of a counter or gauge over the samples whose labels include `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels)
            .map(|sample| match &sample.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => *v,
                _ => 0.0,
            })
            .sum()
    }

    /// Observations of a histogram (its `+Inf` bucket) over the matching samples.
    fn observations(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels)
            .filter_map(|sample| match &sample.value {
                prometheus_parse::Value::Histogram(buckets) => buckets
                    .iter()
                    .find(|b| b.less_than.is_infinite())
                    .map(|b| b.count),
                _ => None,
            })
            .sum()
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a prometheus_parse::Sample> + 'a {
        self.scrape.samples.iter().filter(move |sample| {
            sample.metric == name
                && labels
                    .iter()
                    .all(|(key, value)| sample.labels.get(key) == Some(*value))
        })
    }
}

/// `name{k="v",...} value`: a metric name, optional well-formed labels, a float.
fn check_sample_line(line: &str) -> anyhow::Result<()> {
    let (series, value) = line.rsplit_once(' ').context("no value")?;
    ensure!(
        value == "+Inf" || value == "NaN" || value.parse::<f64>().is_ok(),
        "bad value"
    );
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (
            name,
            Some(rest.strip_suffix('}').context("unclosed labels")?),
        ),
        None => (series, None),
    };
    ensure!(
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !name.starts_with(|c: char| c.is_ascii_digit()),
        "bad metric name"
    );
    if let Some(labels) = labels {
        let mut rest = labels;
        while !rest.is_empty() {
            let (key, after) = rest.split_once("=\"").context("label without =\"")?;
            ensure!(
                key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "bad label name {key}"
            );
            let mut end = None;
            let mut escaped = false;
            for (i, c) in after.char_indices() {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end.context("unterminated label value")?;
            rest = after[end + 1..]
                .strip_prefix(',')
                .unwrap_or(&after[end + 1..]);
        }
    }
    Ok(())
}

async fn wait_for(
    timeout: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    while Instant::now() < deadline {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(error) => last = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    bail!("{what} within {timeout:?} (last error: {last:?})")
}

fn watch_json(cluster: &Cluster, job_id: &str) -> anyhow::Result<Vec<JobEvent>> {
    let out = cluster.cli_ok(&["watch", job_id, "--json"])?;
    out.stdout
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).context("watch --json line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn api_tells_what_the_cli_tells_metrics_move_and_it_survives_a_nats_restart()
-> anyhow::Result<()> {
    let model = ScriptedModel::start(launch_plan_export_script(0)).await?;
    let mut cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "launch_plan.csv")?;
    let dashboard = DashboardProcess::start(cluster.dir.path(), &cluster.nats.url, None).await?;

    let before = dashboard.metrics().await?;
    assert_eq!(
        before.value("atelier_jobs_finished_total", &[("state", "succeeded")]),
        0.0
    );
    assert_eq!(before.value("atelier_jobs", &[("state", "succeeded")]), 0.0);

    let cli_view = cluster.run_job(
        "q3",
        "Count milestones per department into summary.xlsx",
        &model.model_spec(),
        &[],
    )?;
    ensure!(
        cli_view.state == JobState::Succeeded,
        "job failed: {:?}\n{}",
        cli_view.error,
        cluster.logs()
    );
    let id = cli_view.job_id.clone();

    // The job page's JSON is the CLI's JSON, and its events are `watch --json`'s events.
    let cli_job: JobView = cluster.cli_ok(&["job", &id, "--json"])?.json()?;
    let page = dashboard.get(&format!("/api/jobs/{id}")).await?;
    let api_job: JobView = serde_json::from_value(page["job"].clone())?;
    assert_eq!(api_job, cli_job);
    let exported = JobOutcome::Changed {
        files: vec!["summary.xlsx".into()],
    };
    assert_eq!(api_job.outcome, Some(exported));
    let api_events: Vec<JobEvent> =
        serde_json::from_value(dashboard.get(&format!("/api/jobs/{id}/events")).await?)?;
    assert_eq!(api_events, watch_json(&cluster, &id)?);
    assert!(api_events.len() >= 10, "{api_events:?}");

    // The trace: four phases with ends, the item done, both tool calls ok with their worker.
    let trace = &page["trace"];
    let phases: Vec<&str> = trace["phases"]
        .as_array()
        .context("phases")?
        .iter()
        .filter_map(|p| p["phase"].as_str())
        .collect();
    assert_eq!(phases, ["research", "plan", "implement", "summary"]);
    assert!(
        trace["phases"]
            .as_array()
            .is_some_and(|p| p.iter().all(|p| p["ended_ms"].is_u64()))
    );
    assert_eq!(trace["items"][0]["status"], "done");
    assert_eq!(trace["items"][0]["label"], "Aggregate");
    let calls: Vec<&Value> = trace["log"]
        .as_array()
        .context("log")?
        .iter()
        .filter(|e| e["kind"] == "call")
        .collect();
    let tools: Vec<&str> = calls.iter().filter_map(|c| c["tool"].as_str()).collect();
    assert_eq!(tools, ["table_get_map", "table_export"]);
    assert!(calls.iter().all(|c| {
        c["status"] == "ok"
            && c["pool"] == "tabular"
            && c["worker"]
                .as_str()
                .is_some_and(|w| w.starts_with("tabular-"))
    }));
    assert_eq!(calls[1]["item"], 1);

    // The list: filters by state, workbench and id.
    let rows = dashboard.get("/api/jobs?state=succeeded").await?;
    let row = rows
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["job_id"] == id.as_str()))
        .context("job not in the succeeded list")?;
    assert_eq!(
        (&row["items_done"], &row["items_total"], &row["workbench"]),
        (&json!(1), &json!(1), &json!("q3"))
    );
    assert_eq!(
        row["tokens"],
        json!(cli_view.prompt_tokens + cli_view.completion_tokens)
    );
    assert_eq!(
        dashboard.get("/api/jobs?state=failed").await?,
        json!([]),
        "no failed jobs"
    );
    assert_eq!(dashboard.get("/api/jobs?workbench=other").await?, json!([]));
    let found = dashboard
        .get(&format!("/api/jobs?q={}", &id[id.len() - 6..]))
        .await?;
    assert_eq!(found.as_array().map(Vec::len), Some(1));

    // The draft as the CLI sees it.
    let diff: DraftDiff = cluster.cli_ok(&["draft", "diff", "q3", "--json"])?.json()?;
    let api_diff: DraftDiff =
        serde_json::from_value(dashboard.get("/api/workbenches/q3/diff").await?)?;
    assert_eq!(api_diff, diff);

    // Workers from $SRV: one instance per pool; the tabular one ran both calls.
    let pools = dashboard.get("/api/workers").await?;
    let pool = |name: &str| {
        pools
            .as_array()
            .and_then(|p| p.iter().find(|p| p["pool"] == name))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(pool("tabular")["service"], "atelier-tabular");
    assert_eq!(
        pool("tabular")["instances"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(
        pool("office")["instances"].as_array().map(Vec::len),
        Some(1)
    );
    // The CSV's structural map when the job starts, then the job's two tool calls.
    assert_eq!(pool("tabular")["requests"], 3);
    assert_eq!(
        pool("tabular")["instances"][0]["subject"],
        "atelier.tool.tabular"
    );
    assert_eq!(
        pool("tabular")["instances"][0]["queue_group"],
        "atelier-tool-tabular"
    );

    // Throughput: the job and its two calls are in the last hour.
    let throughput = dashboard.get("/api/throughput").await?;
    assert_eq!(throughput["hour"]["succeeded"], 1);
    assert_eq!(throughput["hour"]["tool_calls"], 2);
    assert_eq!(throughput["minutes"].as_array().map(Vec::len), Some(60));

    // Metrics moved.
    let after = dashboard.metrics().await?;
    assert_eq!(
        after.value("atelier_jobs_finished_total", &[("state", "succeeded")]),
        1.0
    );
    assert_eq!(after.value("atelier_jobs", &[("state", "succeeded")]), 1.0);
    assert_eq!(
        after.value(
            "atelier_tool_calls_total",
            &[("pool", "tabular"), ("outcome", "ok")]
        ),
        2.0
    );
    assert_eq!(
        after.observations(
            "atelier_tool_call_duration_seconds",
            &[("tool", "table_export"), ("pool", "tabular")]
        ),
        1.0
    );
    assert_eq!(
        after.value("atelier_steps_total", &[("kind", "item"), ("name", "done")]),
        1.0
    );
    assert_eq!(
        after.value("atelier_model_tokens_total", &[("kind", "prompt")]),
        cli_view.prompt_tokens as f64
    );
    assert_eq!(after.value("atelier_workers", &[("pool", "tabular")]), 1.0);
    // Pool demand: one worker of the default concurrency, idle, every call it took started.
    let tabular = [("pool", "tabular")];
    let workers_now = dashboard.get("/api/workers").await?;
    let tabular_requests = workers_now
        .as_array()
        .and_then(|pools| pools.iter().find(|pool| pool["pool"] == "tabular"))
        .and_then(|pool| pool["requests"].as_f64())
        .unwrap_or(0.0);
    assert!(tabular_requests >= 2.0, "{workers_now}");
    assert_eq!(after.value("atelier_pool_workers", &tabular), 1.0);
    assert_eq!(after.value("atelier_pool_slots", &tabular), 4.0);
    assert_eq!(after.value("atelier_pool_busy_slots", &tabular), 0.0);
    assert_eq!(after.value("atelier_pool_pending_calls", &tabular), 0.0);
    assert_eq!(
        after.observations("atelier_pool_dispatch_wait_seconds", &tabular),
        tabular_requests
    );
    assert_eq!(after.value("atelier_nats_reconnects_total", &[]), 0.0);

    // NATS restarts: the dashboard reconnects and keeps following the stream.
    cluster.nats.restart()?;
    wait_for(
        Duration::from_secs(20),
        "the dashboard reconnects",
        async || Ok(dashboard.get("/api/status").await?["nats_reconnects"] == 1),
    )
    .await?;
    // So does the coordinator (its subscriptions come back with its connection).
    wait_until(Duration::from_secs(20), || {
        cluster
            .cli(&["jobs", "--json"])
            .is_ok_and(|out| out.success)
    })
    .context("the coordinator did not come back after the NATS restart")?;
    // It writes summary.xlsx again, over the first job's: a destructive call, approved ahead.
    let second = cluster.cli(&[
        "submit",
        "q3",
        "Again",
        "--model",
        &model.model_spec(),
        "--continue-draft",
        "--wait",
        "--json",
        "--approve",
        "destructive=auto",
    ])?;
    ensure!(
        second.success,
        "second job failed: {}\n{}",
        second.stderr,
        cluster.logs()
    );
    let second: JobView = second.json()?;
    wait_for(
        Duration::from_secs(20),
        "the second job's events arrive",
        async || {
            let metrics = dashboard.metrics().await?;
            Ok(metrics.value("atelier_jobs_finished_total", &[("state", "succeeded")]) == 2.0)
        },
    )
    .await?;
    let page = dashboard
        .get(&format!("/api/jobs/{}", second.job_id))
        .await?;
    assert_eq!(page["trace"]["state"], "succeeded");
    assert_eq!(
        dashboard
            .metrics()
            .await?
            .value("atelier_nats_reconnects_total", &[]),
        1.0
    );
    cluster.kill_coordinator();
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn access_needs_the_token_beyond_loopback_and_never_shows_it() -> anyhow::Result<()> {
    let cluster = Cluster::start_with(&[])?;
    let token = "s3cret-dashboard-token-42";
    let dashboard =
        DashboardProcess::start(cluster.dir.path(), &cluster.nats.url, Some(token)).await?;
    let http = http_client(false)?;
    let url = |path: &str| format!("{}{path}", dashboard.url);

    for path in ["/api/jobs", "/api/workers", "/metrics"] {
        let status = http.get(url(path)).send().await?.status();
        assert_eq!(status, reqwest::StatusCode::UNAUTHORIZED, "{path}");
    }
    let page = http.get(url("/")).send().await?;
    assert_eq!(page.status(), reqwest::StatusCode::SEE_OTHER);
    assert_eq!(page.headers()["location"], "/login");
    let wrong = http
        .get(url("/api/jobs"))
        .bearer_auth("nope")
        .send()
        .await?;
    assert_eq!(wrong.status(), reqwest::StatusCode::UNAUTHORIZED);

    let jobs = http.get(url("/api/jobs")).bearer_auth(token).send().await?;
    assert_eq!(jobs.status(), reqwest::StatusCode::OK);
    assert_eq!(jobs.json::<Value>().await?, json!([]));

    // The login form sets an HttpOnly cookie that opens the pages; no page carries the token.
    let login = http
        .post(url("/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await?;
    let cookie = login.headers()["set-cookie"].to_str()?.to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let cookie = cookie.split(';').next().unwrap_or_default().to_string();
    for path in ["/", "/login", "/assets/app.js", "/api/status", "/metrics"] {
        let response = http.get(url(path)).header("cookie", &cookie).send().await?;
        assert_eq!(response.status(), reqwest::StatusCode::OK, "{path}");
        assert!(
            !response.text().await?.contains(token),
            "{path} shows the token"
        );
    }
    // A cookie alone cannot POST without the UI's header (cross-site forms cannot add it).
    let forged = http
        .post(url("/api/workbenches/q3/discard"))
        .header("cookie", &cookie)
        .send()
        .await?;
    assert_eq!(forged.status(), reqwest::StatusCode::FORBIDDEN);
    let log = std::fs::read_to_string(cluster.dir.path().join("dashboard.log"))?;
    assert!(!log.contains(token), "the log shows the token");

    // Beyond loopback without a token: refused at start.
    let out = Command::new(atelier_bin())
        .args(["dashboard", "--nats", &cluster.nats.url, "--http"])
        .arg(format!("0.0.0.0:{}", free_port()))
        .env_remove("ATELIER_DASHBOARD_TOKEN")
        .output()?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("dashboard_token"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_naming_another_host_are_refused_so_dns_rebinding_cannot_publish()
-> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "plan.csv")?;
    let listing: atelier_messages::store::Listing =
        cluster.cli_ok(&["wb", "ls", "q3", "--json"])?.json()?;
    let client = async_nats::connect(&cluster.nats.url).await?;
    let args = json!({"path": "notes.md", "content": "draft"});
    atelier_tests::call_tool(&client, &listing, "c1", "write_text_file", args, "office")
        .await?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let dashboard = DashboardProcess::start(cluster.dir.path(), &cluster.nats.url, None).await?;
    let http = http_client(false)?;
    let port = dashboard
        .url
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let publish = format!("{}/api/workbenches/q3/publish", dashboard.url);
    // A page on evil.example whose name now resolves to 127.0.0.1: its Host, or its Origin.
    for (host, origin) in [
        (format!("evil.example:{port}"), None),
        (
            format!("127.0.0.1:{port}"),
            Some(format!("http://evil.example:{port}")),
        ),
    ] {
        let mut request = http
            .post(&publish)
            .header("host", &host)
            .header("x-atelier-csrf", "1");
        if let Some(origin) = &origin {
            request = request.header("origin", origin);
        }
        let response = request.send().await?;
        assert_eq!(
            response.status(),
            reqwest::StatusCode::FORBIDDEN,
            "{host} {origin:?}"
        );
        let body: Value = response.json().await?;
        assert_eq!(body["error"]["code"], "HOST_NOT_ALLOWED");
    }
    let diff: Value = cluster.cli_ok(&["draft", "diff", "q3", "--json"])?.json()?;
    assert_eq!(diff["has_draft"], true, "the draft was not published");
    // Its own address (and localhost) still work.
    let response = http
        .post(&publish)
        .header("host", format!("localhost:{port}"))
        .header("x-atelier-csrf", "1")
        .send()
        .await?;
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let diff: Value = cluster.cli_ok(&["draft", "diff", "q3", "--json"])?.json()?;
    assert_eq!(diff["has_draft"], false);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn http2_requests_are_served_and_their_authority_is_checked_as_a_host() -> anyhow::Result<()>
{
    let cluster = Cluster::start_with(&[])?;
    cluster.cli_ok(&["wb", "create", "q3"])?;
    let dashboard = DashboardProcess::start(cluster.dir.path(), &cluster.nats.url, None).await?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build()?;

    // HTTP/2 with prior knowledge (h2c): the authority is `:authority`, there is no `Host`.
    let response = h2
        .get(format!("{}/api/workbenches", dashboard.url))
        .send()
        .await?;
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let listed: Value = response.json().await?;
    assert_eq!(listed[0]["name"], "q3", "{listed}");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "h2", "version": "1"}}});
    let response = h2
        .post(format!("{}/mcp", dashboard.url))
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(initialize.to_string())
        .send()
        .await?;
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    assert!(response.headers().contains_key("mcp-session-id"));

    // A rebound name is still refused: its `:authority` names another host.
    let addr: std::net::SocketAddr = dashboard.url.trim_start_matches("http://").parse()?;
    let rebound = reqwest::Client::builder()
        .http2_prior_knowledge()
        .resolve("evil.example", addr)
        .build()?;
    let response = rebound
        .post(format!(
            "http://evil.example:{}/api/workbenches/q3/discard",
            addr.port()
        ))
        .header("x-atelier-csrf", "1")
        .send()
        .await?;
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), reqwest::StatusCode::FORBIDDEN);
    let body: Value = response.json().await?;
    assert_eq!(body["error"]["code"], "HOST_NOT_ALLOWED");
    Ok(())
}

// ---- traces ---------------------------------------------------------------------------------

/// A span as the OTLP receiver got it.
#[derive(Debug, Clone)]
struct ReceivedSpan {
    service: String,
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    attributes: BTreeMap<String, String>,
}

/// An in-process OTLP/HTTP (protobuf) trace receiver.
struct OtlpReceiver {
    endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OtlpReceiver {
    async fn start() -> anyhow::Result<Self> {
        use axum::routing::post;
        let spans = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::clone(&spans);
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |body: axum::body::Bytes| {
                let shared = Arc::clone(&shared);
                async move {
                    let received = decode_spans(&body);
                    if let Ok(mut spans) = shared.lock() {
                        spans.extend(received);
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            endpoint,
            spans,
            task,
        })
    }

    fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn decode_spans(body: &[u8]) -> Vec<ReceivedSpan> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message;
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return Vec::new();
    };
    let text = |value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>| match value
        .as_ref()
        .and_then(|v| v.value.as_ref())
    {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    };
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(&kv.value))
            .unwrap_or_default();
        for span in resource_spans
            .scope_spans
            .into_iter()
            .flat_map(|scope| scope.spans)
        {
            out.push(ReceivedSpan {
                service: service.clone(),
                name: span.name,
                trace_id: span.trace_id,
                span_id: span.span_id,
                parent_span_id: span.parent_span_id,
                attributes: span
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), text(&kv.value)))
                    .collect(),
            });
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn one_job_is_one_trace_and_it_includes_the_workers_tool_call_span() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await?;
    let model = ScriptedModel::start(launch_plan_export_script(0)).await?;
    let dir = tempfile::tempdir()?;
    let nats = NatsServer::start(dir.path())?;
    let data = dir.path().join("data");
    let data = data.to_string_lossy().to_string();
    let otel = [
        ("ATELIER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let _coordinator = spawn_atelier(
        dir.path(),
        "coordinator",
        &["coordinator", "--nats", &nats.url, "--data", &data],
        &otel,
    )?;
    let _worker = spawn_atelier(
        dir.path(),
        "worker",
        &[
            "worker", "--pool", "tabular", "--nats", &nats.url, "--data", &data,
        ],
        &otel,
    )?;
    let cli = |args: &[&str]| -> anyhow::Result<std::process::Output> {
        Ok(Command::new(atelier_bin())
            .args(args)
            .args(["--nats", &nats.url])
            .output()?)
    };
    wait_until(Duration::from_secs(20), || {
        cli(&["jobs", "--json"]).is_ok_and(|out| out.status.success())
    })?;
    std::thread::sleep(Duration::from_millis(300));
    cli(&["wb", "create", "q3"])?;
    let csv = launch_plan_csv();
    let csv = csv.to_string_lossy().to_string();
    cli(&["wb", "add", "q3", &csv, "--as", "launch_plan.csv"])?;
    let out = cli(&[
        "submit",
        "q3",
        "Count milestones",
        "--model",
        &model.model_spec(),
        "--job-id",
        "traced-job",
        "--wait",
        "--json",
    ])?;
    ensure!(
        out.status.success(),
        "job failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let of_job = |spans: &[ReceivedSpan]| -> Vec<ReceivedSpan> {
        spans
            .iter()
            .filter(|s| s.attributes.get("job_id").map(String::as_str) == Some("traced-job"))
            .cloned()
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let spans = loop {
        let spans = receiver.spans();
        let job = of_job(&spans);
        let worker_calls = job
            .iter()
            .filter(|s| s.service == "atelier-worker-tabular" && s.name == "tool_call")
            .count();
        // The CSV's structural map when the job starts, then the job's two tool calls.
        if worker_calls == 3 && job.iter().any(|s| s.name == "job") {
            break spans;
        }
        ensure!(
            Instant::now() < deadline,
            "spans missing: {:?}",
            job.iter()
                .map(|s| (&s.service, &s.name))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let job_spans = of_job(&spans);
    let traces: BTreeSet<&Vec<u8>> = job_spans.iter().map(|s| &s.trace_id).collect();
    assert_eq!(traces.len(), 1, "one job, one trace");
    let trace_id = traces.into_iter().next().cloned().unwrap_or_default();
    let in_trace: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.trace_id == trace_id).collect();
    let names: BTreeSet<&str> = in_trace.iter().map(|s| s.name.as_str()).collect();
    for expected in ["job", "phase", "item", "tool_call"] {
        assert!(
            names.contains(expected),
            "no `{expected}` span in {names:?}"
        );
    }
    // Each worker span is the child of a coordinator span of the same trace.
    for worker_span in in_trace
        .iter()
        .filter(|s| s.service == "atelier-worker-tabular")
    {
        let parent = in_trace
            .iter()
            .find(|s| s.span_id == worker_span.parent_span_id)
            .context("the worker span's parent is not in the trace")?;
        assert_eq!(parent.service, "atelier-coordinator");
        assert_eq!(parent.name, "tool_call");
    }
    let roots: Vec<&&ReceivedSpan> = in_trace
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1);
    assert_eq!(roots[0].name, "job");
    Ok(())
}

// ---- the browser ----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn dashboard_in_headless_chromium_follows_a_job_live_and_publishes() -> anyhow::Result<()> {
    if browser::skipped() {
        return Ok(());
    }
    let chromium = browser_setup()?;
    let model = ScriptedModel::start(launch_plan_export_script(4000)).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "launch_plan.csv")?;
    let dashboard = DashboardProcess::start(cluster.dir.path(), &cluster.nats.url, None).await?;
    let artifacts = browser_dir().join("artifacts");
    let _ = std::fs::remove_dir_all(&artifacts);
    std::fs::create_dir_all(&artifacts)?;
    let job_id = format!("browser-{}", std::process::id());

    let chromium_path = chromium.to_string_lossy().to_string();
    let artifacts_path = artifacts.to_string_lossy().to_string();
    let env = [
        ("DASHBOARD_URL", dashboard.url.as_str()),
        ("JOB_ID", job_id.as_str()),
        ("CHROMIUM_PATH", chromium_path.as_str()),
        ("ARTIFACTS", artifacts_path.as_str()),
    ];
    let result = run_browser_script("dashboard.test.mjs", &env, &|| cluster.logs(), |line| {
        if line == "READY" {
            // The page is open: submit now, so the browser sees the job start and finish.
            cluster.cli_ok(&[
                "submit",
                "q3",
                "Count milestones per department into summary.xlsx",
                "--model",
                &model.model_spec(),
                "--job-id",
                &job_id,
            ])?;
        }
        Ok(())
    })?;

    assert_eq!(result["sawRunning"], true, "{result}");
    assert_eq!(result["sawSucceeded"], true, "{result}");
    assert_eq!(
        result["reloaded"], false,
        "the list updated without a reload"
    );
    assert_eq!(
        result["planItems"],
        json!([{"label": "Aggregate", "status": "done"}])
    );
    assert_eq!(
        result["toolCalls"],
        json!([
            {"tool": "table_get_map", "status": "ok"},
            {"tool": "table_export", "status": "ok"}
        ])
    );
    assert_eq!(result["draftBefore"], json!(["summary.xlsx"]));
    assert_eq!(result["listOutcome"], "changed 1 file");
    // A model spec without a profile has no prices: its cost is unknown, never $0.
    assert_eq!(result["listCost"], "unknown");
    assert_eq!(result["cost"], "unknown (the model profile has no prices)");
    assert_eq!(result["spending"], json!([model.model_spec()]));
    assert_eq!(
        result["outcome"],
        json!({"kind": "changed", "files": "summary.xlsx", "text": "changed 1 file: summary.xlsx"})
    );
    assert_eq!(result["draftGone"], true);
    assert_eq!(result["workers"], json!({"tabular": 1, "office": 1}));
    let idle = json!({"slots": "0/4", "pending": 0, "autoscale": "fixed"});
    assert_eq!(
        result["poolDemand"],
        json!({"tabular": idle.clone(), "office": idle})
    );
    assert_eq!(
        result["chartBars"], 1,
        "one minute bar: the one succeeded job"
    );
    let diff: DraftDiff = cluster.cli_ok(&["draft", "diff", "q3", "--json"])?.json()?;
    assert!(
        !diff.has_draft,
        "Publish in the browser published the draft"
    );
    let published = cluster.cli_ok(&["wb", "ls", "q3", "--json"])?.stdout;
    assert!(published.contains("summary.xlsx"));
    browser::assert_screenshots(
        &artifacts,
        &[
            "1-running",
            "2-succeeded",
            "3-job",
            "4-published",
            "5-workers",
            "6-throughput",
        ],
    )?;
    Ok(())
}

/// One item that writes notes.md, held to text, for the workbench page.
fn notes_script() -> atelier_tests::scripted::Script {
    serde_json::from_value(json!({
        "research": [{"content": "Five milestones."}],
        "plan": [{"content": "- [ ] 1. Notes — write notes.md → notes.md\n  - notes.md: text"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "write_text_file", "arguments": {"path": "notes.md", "content": "# Notes\nEngineering leads.\n"}}]},
            {"content": "Written."}
        ]},
        "summary": [{"content": "notes.md is in the draft."}]
    }))
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_workbench_page_in_chromium_rewinds_regenerates_publishes_and_restores()
-> anyhow::Result<()> {
    if browser::skipped() {
        return Ok(());
    }
    let chromium = browser_setup()?;
    let model = ScriptedModel::start(notes_script()).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "plan.csv")?;
    let view = cluster.run_job("q3", "Write notes", &model.model_spec(), &[])?;
    assert_eq!(view.state, JobState::Succeeded, "{:?}", view.error);
    let dashboard = DashboardProcess::start(cluster.dir.path(), &cluster.nats.url, None).await?;
    let page = PageScript {
        script: "workbench.test.mjs",
        artifacts: "artifacts-workbench",
        chromium: &chromium,
        url: &dashboard.url,
        subject: ("WORKBENCH", "q3"),
        env: &[],
    };
    let (result, artifacts) = page.run(&|| cluster.logs())?;

    assert_eq!(result.get("error"), None, "{result}");
    assert_eq!(result["before"], json!(["m1:user", "m2:assistant"]));
    let diff_text = result["diffText"].as_str().unwrap_or_default();
    assert!(diff_text.contains("+# Notes"), "{result}");
    let origin = result["draftOrigin"].as_str().unwrap_or_default();
    assert!(
        origin.starts_with("Started ") && origin.contains("ago by message m1 (job "),
        "{result}"
    );
    // The draft's file shows the contract the plan of the job that wrote it holds it to, and
    // that job's page shows it under its item.
    assert_eq!(result["heldTo"], "held to notes.md: text", "{result}");
    assert_eq!(
        result["planContracts"],
        json!(["notes.md: text"]),
        "{result}"
    );
    assert_eq!(result["afterRewind"], json!(["m1:user", "m3:system"]));
    assert!(
        result["lastDialog"].is_string(),
        "destructive actions ask first: {result}"
    );
    assert_eq!(
        result["afterRegenerate"],
        json!(["m1:user", "m4:system", "m5:assistant"])
    );
    assert_eq!(
        result["regenerateDialog"],
        "Regenerating the answer to m1 will discard m4, m5 and put the draft back as it was at m1."
    );
    assert_eq!(
        result["afterRegenerateFrom"],
        json!(["m1:user", "m6:system", "m7:assistant"])
    );
    // The model's words, then the draft's real changes.
    let answer = result["answer"].as_str().unwrap_or_default();
    assert!(answer.starts_with("notes.md is in the draft."), "{answer}");
    assert!(answer.contains("added: notes.md"), "{answer}");
    assert_eq!(
        result["checkpoints"],
        json!(["1:publish", "2:before_restore"])
    );
    assert!(
        result["lastMessage"]
            .as_str()
            .is_some_and(|text| text.starts_with("restored checkpoint 1")),
        "{result}"
    );
    // What the browser did is what the CLI sees: the state before the publish is back.
    let published = cluster.cli_ok(&["wb", "ls", "q3", "--json"])?.stdout;
    assert!(
        published.contains("plan.csv") && !published.contains("notes.md"),
        "{published}"
    );
    browser::assert_screenshots(
        &artifacts,
        &[
            "w1-conversation",
            "w2-rewound",
            "w3-regenerated",
            "w4-restored",
            "w5-job-contracts",
        ],
    )?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_batch_page_in_chromium_shows_progress_and_failures_then_retries_and_publishes()
-> anyhow::Result<()> {
    if browser::skipped() {
        return Ok(());
    }
    let chromium = browser_setup()?;
    let cluster = Cluster::start()?;
    let names: Vec<String> = (0..6).map(|n| format!("ui-{n}")).collect();
    cluster.docx_workbenches(&names, "r.docx", |name| name == "ui-4")?;
    let docx = simple_docx().to_string_lossy().to_string();
    let out = cluster.append_batch(
        "ui-*",
        "r.docx",
        "ok",
        &["--batch-id", "ui-batch", "--wait"],
    )?;
    assert!(!out.success, "one target fails: {out:?}");
    cluster.cli_ok(&["wb", "add", "ui-4", &docx, "--as", "r.docx"])?;
    let dashboard = DashboardProcess::start(cluster.dir.path(), &cluster.nats.url, None).await?;
    let api = dashboard.get("/api/batches/ui-batch").await?;
    assert_eq!(api["batch"]["state"], "completed_with_failures", "{api}");
    let metrics = dashboard.metrics().await?;
    let batches = |state: &str| metrics.value("atelier_batches", &[("state", state)]);
    let targets = |state: &str| metrics.value("atelier_batch_targets", &[("state", state)]);
    assert_eq!(
        (batches("completed_with_failures"), batches("running")),
        (1.0, 0.0)
    );
    assert_eq!((targets("succeeded"), targets("failed")), (5.0, 1.0));
    assert_eq!(api["failed"][0]["workbench"], "ui-4", "{api}");

    let page = PageScript {
        script: "batches.test.mjs",
        artifacts: "artifacts-batches",
        chromium: &chromium,
        url: &dashboard.url,
        subject: ("BATCH", "ui-batch"),
        env: &[],
    };
    let (result, artifacts) = page.run(&|| cluster.logs())?;
    assert_eq!(result.get("error"), None, "{result}");
    assert_eq!(result["listState"], "completed_with_failures");
    assert_eq!(result["listProgress"], "6 / 6");
    assert_eq!(result["before"]["succeeded"], "5");
    assert_eq!(result["before"]["changed"], "5");
    assert_eq!(result["before"]["answered"], "0");
    assert_eq!(result["before"]["failed"], "1");
    assert_eq!(
        result["failures"],
        json!([{"workbench": "ui-4", "code": "FILE_READ_FAILED"}])
    );
    assert_eq!(result["jobHash"], "#/jobs/ui-batch-t4-a0");
    assert_eq!(result["after"]["succeeded"], "6");
    assert_eq!(result["after"]["changed"], "6");
    assert!(
        result["countsText"].as_str().is_some_and(
            |text| text.contains("6 succeeded (6 with changes, 0 answered without changes)")
        ),
        "{result}"
    );
    assert_eq!(result["after"]["failed"], "0");
    let toast = result["toast"].as_str().unwrap_or_default();
    assert!(toast.starts_with("Published"), "{result}");
    // What the browser did is what the CLI sees: every draft was published.
    for n in 0..6 {
        let diff: DraftDiff = cluster
            .cli_ok(&["draft", "diff", &format!("ui-{n}"), "--json"])?
            .json()?;
        assert!(!diff.has_draft, "ui-{n} still has a draft");
    }
    browser::assert_screenshots(&artifacts, &["b1-list", "b2-batch", "b3-retried"])?;
    Ok(())
}

/// A streamed chat completion whose job's `finished` event never reaches its readers (the
/// events stream stores it under another subject, as if it were lost) still ends: after five
/// quiet seconds it looks at the job's record and sends the answer, the stop and `[DONE]`.
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_completion_ends_from_the_jobs_record_when_its_finished_event_is_lost()
-> anyhow::Result<()> {
    use async_nats::jetstream::stream::SubjectTransform;
    let model = ScriptedModel::start(notes_script()).await?;
    let cluster = Cluster::start()?;
    cluster.workbench_with_launch_plan("q3", "plan.csv")?;
    cluster.cli_ok(&["wb", "set-model", "q3", &model.model_spec()])?;
    let js = async_nats::jetstream::new(async_nats::connect(&cluster.nats.url).await?);
    let events = atelier_messages::subjects::EVENTS_STREAM;
    let mut config = js.get_stream(events).await?.info().await?.config.clone();
    config.subject_transform = Some(SubjectTransform {
        source: atelier_messages::subjects::EVENTS_FINISHED.to_string(),
        destination: "atelier.lost.{{wildcard(1)}}".to_string(),
    });
    js.update_stream(config).await?;
    let token = "lost-end-token";
    let dashboard =
        DashboardProcess::start(cluster.dir.path(), &cluster.nats.url, Some(token)).await?;

    let started = Instant::now();
    let request = json!({
        "model": "q3",
        "stream": true,
        "messages": [{"role": "user", "content": "Write notes.md"}],
    });
    let response = (dashboard.http)
        .post(format!("{}/v1/chat/completions", dashboard.url))
        .bearer_auth(token)
        .json(&request)
        .send()
        .await?;
    ensure!(response.status().is_success(), "{}", response.status());
    let body = tokio::time::timeout(Duration::from_secs(60), response.text()).await??;
    let chunks: Vec<Value> = (body.lines())
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let text: String = (chunks.iter())
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(text.starts_with("notes.md is in the draft."), "{body}");
    let finish = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str());
    assert_eq!(finish, Some("stop"), "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    // The end came from the record: its event is in the stream, where no reader looks.
    let job_id = (chunks.first())
        .and_then(|chunk| chunk["id"].as_str()?.strip_prefix("chatcmpl-"))
        .context("the job's id")?;
    let lost = js.get_stream(events).await?;
    let lost = lost
        .get_last_raw_message_by_subject(&format!("atelier.lost.{job_id}"))
        .await;
    assert!(lost.is_ok(), "the finished event was stored elsewhere");
    assert!(started.elapsed() >= Duration::from_secs(5), "{body}");
    Ok(())
}
