//! `atelier up`: the embedded default starts its own nats-server, serves clients that find it
//! through the data directory, and stops everything on Ctrl-C.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use atelier_tests::up::{Role, Up};
use atelier_tests::{atelier_bin, wait_until};

#[test]
fn up_serves_clients_and_ctrl_c_stops_everything() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let data_arg = data.to_string_lossy().to_string();
    let mut up = Command::new(atelier_bin())
        .args(["up", "--data", &data_arg, "--http", "127.0.0.1:0"])
        .env("ATELIER_NATS_PORT", "0")
        .env_remove("ATELIER_NATS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = up.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            line.split("NATS at ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_string)
        })
        .context("`up` never printed its NATS URL")?;
    assert!(url.starts_with("nats://127.0.0.1:"), "{url}");
    let port: u16 = url.rsplit(':').next().unwrap_or_default().parse()?;
    // The client's URL, with its credentials, is in the data directory for its owner only.
    let client_url = std::fs::read_to_string(data.join("nats.url"))?;
    assert!(
        client_url.starts_with("nats://client:")
            && client_url.ends_with(&format!("@127.0.0.1:{port}")),
        "{client_url}"
    );
    let mode = std::fs::metadata(data.join("nats.url"))?
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    // Without credentials the server refuses.
    let runtime = tokio::runtime::Runtime::new()?;
    assert!(
        runtime.block_on(async_nats::connect(&url)).is_err(),
        "anonymous access"
    );

    // A client with only --data finds the server `up` started.
    let created = Command::new(atelier_bin())
        .args(["wb", "create", "local", "--data", &data_arg])
        .output()?;
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let listed = Command::new(atelier_bin())
        .args(["wb", "list", "--json", "--data", &data_arg])
        .output()?;
    let workbenches: serde_json::Value = serde_json::from_slice(&listed.stdout)?;
    assert_eq!(workbenches[0]["name"], "local");
    // A comma-separated server list, as a cluster's seed servers are given (docs/operations.md),
    // with a dead server first; a bad address in a list is named without its password.
    let dead = client_url.replace(&format!("@127.0.0.1:{port}"), "@127.0.0.1:1");
    let listed = Command::new(atelier_bin())
        .args([
            "wb",
            "list",
            "--json",
            "--nats",
            &format!("{dead},{client_url}"),
        ])
        .output()?;
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let workbenches: serde_json::Value = serde_json::from_slice(&listed.stdout)?;
    assert_eq!(workbenches[0]["name"], "local");
    let bad_port = client_url.replace(&format!("@127.0.0.1:{port}"), "@127.0.0.1:port");
    let refused = Command::new(atelier_bin())
        .args(["wb", "list", "--nats", &format!("{client_url},{bad_port}")])
        .output()?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let password = client_url
        .split_once("client:")
        .and_then(|(_, rest)| rest.split_once('@'))
        .map(|(password, _)| password.to_string())
        .unwrap_or_default();
    assert!(!refused.status.success());
    assert!(
        stderr.contains("`nats://…@127.0.0.1:port` is not a NATS server address")
            && !password.is_empty()
            && !stderr.contains(&password),
        "{stderr}"
    );
    // The URL `up` printed, given with its data directory, takes the credentials recorded there;
    // without it the refusal says where they are, and nothing of operator mode.
    let bare = Command::new(atelier_bin())
        .args(["wb", "list", "--json", "--nats", &url, "--data", &data_arg])
        .output()?;
    assert!(
        bare.status.success(),
        "{}",
        String::from_utf8_lossy(&bare.stderr)
    );
    let elsewhere = tempfile::tempdir()?;
    let refused = Command::new(atelier_bin())
        .args(["wb", "list", "--nats", &url])
        .current_dir(elsewhere.path())
        .output()?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("--data DIR")
            && stderr.contains("nats.url")
            && !stderr.contains("operator mode needs"),
        "{stderr}"
    );

    // Ctrl-C: the process exits 0, the child server is gone, the URL file removed.
    Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status()?;
    let mut status = None;
    wait_until(Duration::from_secs(20), || {
        status = up.try_wait().ok().flatten();
        status.is_some()
    })?;
    assert!(status.is_some_and(|status| status.success()), "{status:?}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nats-server still listening"
    );
    assert!(!data.join("nats.url").exists());
    let config = data.join("nats").join("nats-server.conf");
    let leftover = Command::new("pgrep")
        .args(["-f", &config.to_string_lossy()])
        .output()?;
    assert!(
        leftover.stdout.is_empty(),
        "a nats-server is still running: {}",
        String::from_utf8_lossy(&leftover.stdout)
    );
    Ok(())
}

#[test]
fn up_without_a_usable_nats_server_says_how_to_install_one() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(atelier_bin())
        .args(["up", "--data", &dir.path().to_string_lossy()])
        .env(
            "ATELIER_NATS_SERVER_BIN",
            dir.path().join("no-such-nats-server"),
        )
        .env_remove("ATELIER_NATS_URL")
        .output()?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("scripts/setup.sh") && stderr.contains("2.10"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn client_commands_without_a_server_say_what_to_do() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(atelier_bin())
        .args(["jobs", "--data", &dir.path().to_string_lossy()])
        .env_remove("ATELIER_NATS_URL")
        .output()?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("atelier up") && stderr.contains("--nats"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn on_the_embedded_server_each_role_may_do_only_its_part() -> anyhow::Result<()> {
    use atelier_messages::PROTOCOL_VERSION;
    use atelier_messages::job::JobSubmit;
    use atelier_messages::store::CreateWorkbench;
    use atelier_transport::Policy;
    use futures::StreamExt;

    let up = Up::start()?;
    let created = up.cli(&["wb", "create", "mine"])?;
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let worker = up.connect_as(Role::Worker).await?;
        let client = up.connect_as(Role::Client).await?;
        let quick = Policy::once(Duration::from_secs(2));

        // A worker may not change workbenches or submit jobs.
        let create = CreateWorkbench {
            v: PROTOCOL_VERSION,
            workbench: "by-worker".into(),
        };
        assert!(
            atelier_transport::request(&worker, &create, quick)
                .await
                .is_err()
        );
        let submit = JobSubmit {
            v: PROTOCOL_VERSION,
            job_id: "by-worker".into(),
            workbench: "mine".into(),
            message: "x".into(),
            model: None,
            submitted_at_ms: 0,
            auto_approve: false,
            approvals: None,
            continue_draft: false,
            workflow: None,
            batch_id: None,
            time_limit_secs: None,
            priority: None,
            budget: Default::default(),
        };
        let payload = atelier_messages::encode(&submit, atelier_messages::Format::MessagePack)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let js = async_nats::jetstream::new(worker.clone());
        let acked = tokio::time::timeout(Duration::from_secs(3), async {
            js.publish(atelier_messages::subjects::JOB_SUBMIT, payload.into())
                .await?
                .await
        })
        .await;
        assert!(
            !matches!(acked, Ok(Ok(_))),
            "the worker's submission was accepted"
        );

        // A client may not answer Atelier subjects: its would-be store never hears a request.
        let mut fake_store = client
            .queue_subscribe(
                atelier_messages::subjects::store::WILDCARD,
                "atelier-store".into(),
            )
            .await?;
        let listed = up.cli(&["wb", "list", "--json"])?;
        let names: serde_json::Value = serde_json::from_slice(&listed.stdout)?;
        let names: Vec<&str> = names
            .as_array()
            .map(|list| list.iter().filter_map(|wb| wb["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, vec!["mine"], "no workbench made by the worker");
        let overheard = tokio::time::timeout(Duration::from_millis(500), fake_store.next()).await;
        assert!(
            !matches!(overheard, Ok(Some(_))),
            "a client received a store request"
        );
        let jobs = up.cli(&["jobs", "--json"])?;
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&jobs.stdout)?,
            serde_json::json!([])
        );
        // The client role reaches the workshop and batch verbs (the CLI's history and batches).
        let history = up.cli(&["history", "mine", "--json"])?;
        assert!(
            history.status.success(),
            "{}",
            String::from_utf8_lossy(&history.stderr)
        );
        let batches = up.cli(&["batch", "list", "--json"])?;
        assert!(
            batches.status.success(),
            "{}",
            String::from_utf8_lossy(&batches.stderr)
        );
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&batches.stdout)?,
            serde_json::json!([])
        );
        anyhow::Ok(())
    })
}

#[test]
fn up_with_autoscale_runs_pool_workers_as_processes_and_large_files_move_in_pieces()
-> anyhow::Result<()> {
    use atelier_messages::store::Listing;

    let up = Up::start_with(
        &["--autoscale", "tabular=1..2"],
        &[("ATELIER_WORKER_CONCURRENCY", "2")],
    )?;
    let pools = || -> Option<serde_json::Value> {
        let out = up.cli(&["workers", "--json"]).ok()?;
        serde_json::from_slice(&out.stdout).ok()
    };
    let pool = |pools: &serde_json::Value, name: &str| {
        pools
            .as_array()
            .and_then(|all| all.iter().find(|pool| pool["pool"] == name))
            .cloned()
            .unwrap_or_default()
    };
    wait_until(Duration::from_secs(30), || {
        pools().is_some_and(|all| {
            pool(&all, "tabular")["instances"].as_array().map(Vec::len) == Some(1)
                && pool(&all, "office")["instances"].as_array().map(Vec::len) == Some(1)
        })
    })?;
    let all = pools().context("no pools")?;
    let tabular = pool(&all, "tabular");
    assert_eq!(tabular["autoscale"]["min"], 1);
    assert_eq!(tabular["autoscale"]["max"], 2);
    assert_eq!(tabular["slots"], 2);
    // A pool not autoscaled is one supervised worker process.
    assert_eq!(pool(&all, "office")["autoscale"]["min"], 1);
    assert_eq!(pool(&all, "office")["autoscale"]["max"], 1);
    // Each pool's worker process runs one async thread (its tools run on blocking threads).
    for name in ["tabular", "office"] {
        assert_eq!(
            pool(&all, name)["instances"][0]["async_threads"],
            1,
            "{name}: {all}"
        );
    }

    // A 2.4 MB CSV in and out, in pieces, through the client's account.
    let csv = up.data().with_file_name("sales.csv");
    let mut content = String::from("id,region,amount\n");
    for id in 0..120_000 {
        content.push_str(&format!("{id},region-{},{}\n", id % 7, id % 1000));
    }
    std::fs::write(&csv, &content)?;
    assert!(content.len() > 2_000_000);
    for args in [
        vec!["wb", "create", "big"],
        vec!["wb", "add", "big", &csv.to_string_lossy()],
    ] {
        let out = up.cli(&args)?;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let cat = up.cli(&["wb", "cat", "big", "sales.csv"])?;
    assert!(
        cat.status.success(),
        "{}",
        String::from_utf8_lossy(&cat.stderr)
    );
    assert_eq!(cat.stdout, content.as_bytes());
    let listing: Listing = serde_json::from_slice(&up.cli(&["wb", "ls", "big", "--json"])?.stdout)?;
    let entry = listing.files[0].clone();
    assert_eq!(entry.size, content.len() as u64);

    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        // The worker role fetches blobs in pieces from the store, as workers on other hosts do.
        let worker = up.connect_as(Role::Worker).await?;
        let blob = atelier_messages::store::BlobRef {
            digest: entry.digest.clone(),
            size: entry.size,
        };
        let fetched = up.data().with_file_name("fetched.csv");
        atelier_transport::pieces::fetch_to(&worker, Some("big"), &blob, &fetched, false, &|_| {})
            .await
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        assert_eq!(std::fs::read(&fetched)?, content.as_bytes());

        // A write of several hundred KiB from the autoscaled worker process comes back in
        // pieces (a tool call as the coordinator makes it: only its account reaches the pools).
        let coordinator = up.connect_as(Role::Coordinator).await?;
        let output = atelier_tests::call_tool(
            &coordinator,
            &listing,
            "copy-1",
            "table_export",
            serde_json::json!({"path": "sales.csv", "query": "SELECT * FROM data", "target_path": "copy.csv", "format": "csv"}),
            "tabular",
        )
        .await?
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        assert_eq!(output.output["row_count"], 120_000);
        assert!(
            !output.worker.ends_with(&format!("-{}", up.pid())),
            "the tabular call ran inside `up`: {}",
            output.worker
        );
        anyhow::Ok(())
    })?;
    let draft: Listing =
        serde_json::from_slice(&up.cli(&["wb", "ls", "big", "--draft", "--json"])?.stdout)?;
    let copy = draft.files.iter().find(|file| file.path == "copy.csv");
    assert_eq!(copy.map(|file| file.size), Some(content.len() as u64));

    // Stopping `up` retires the pool's worker processes.
    let data = up.data().to_string_lossy().to_string();
    let supervised = Command::new("pgrep")
        .args(["-f", "--", &format!("--supervised.*{data}")])
        .output()?;
    assert_eq!(
        String::from_utf8_lossy(&supervised.stdout).lines().count(),
        2,
        "one tabular and one office worker process"
    );
    drop(up);
    wait_until(Duration::from_secs(30), || {
        // pgrep exits 1 when no process matches.
        Command::new("pgrep")
            .args(["-f", "--", &format!("--supervised.*{data}")])
            .status()
            .is_ok_and(|status| status.code() == Some(1))
    })?;
    Ok(())
}

/// Gives q3 a situation (a `context_changed` workshop event).
fn add_situation(up: &Up) -> anyhow::Result<()> {
    let situation = up.workdir().join("situation.txt");
    std::fs::write(&situation, "Board review.\n")?;
    let situation = situation.to_string_lossy();
    up.cli_ok(&["context", "add", "q3", "--situation", &situation])?;
    Ok(())
}

#[test]
fn a_nats_js_client_reads_the_events_as_json_through_the_events_verb() -> anyhow::Result<()> {
    let browser = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("browser");
    anyhow::ensure!(
        browser.join("node_modules/nats").exists(),
        "nats.js is missing: `npm ci --prefix tests/browser`"
    );
    // Stored as MessagePack (the default): the verb answers a JSON request in JSON.
    let up = Up::start()?;
    up.cli_ok(&["wb", "create", "q3"])?;
    let args = r#"{"path": "notes.md", "content": "North leads.\n"}"#;
    let job = up.cli_ok(&["run", "q3", "write_text_file", "--args", args])?;
    let job = job.trim().to_string();
    up.cli_ok(&["watch", &job])?;
    add_situation(&up)?;

    // Read as docs/protocol.md says, by a client this project did not write.
    let streams = format!("workshop=atelier.workshop.evt.q3.>,jobs=atelier.evt.{job}.>");
    let read = || -> anyhow::Result<Vec<serde_json::Value>> {
        let output = Command::new("node")
            .arg(browser.join("events.mjs"))
            .env("NATS_URL", up.url(Role::Client)?.trim())
            .env("STREAMS", &streams)
            .output()
            .context("node is missing")?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        anyhow::ensure!(
            stdout.lines().any(|line| line == "DONE"),
            "nats.js did not read the streams:\n{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(stdout
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect())
    };
    let mut messages = Vec::new();
    wait_until(Duration::from_secs(20), || {
        messages = read().unwrap_or_default();
        messages
            .iter()
            .any(|m| m["data"]["kind"] == "context_changed")
    })
    .with_context(|| format!("{messages:#?}"))?;
    for message in &messages {
        assert!(message["data"].is_object(), "readable as it is: {message}");
        assert!(
            message["seq"].as_u64().is_some_and(|seq| seq > 0),
            "{message}"
        );
    }
    let workshop: Vec<&str> = messages
        .iter()
        .filter(|m| m["stream"] == "workshop")
        .filter_map(|m| m["data"]["kind"].as_str())
        .collect();
    assert_eq!(
        workshop,
        [
            "message_added",
            "draft_revision_created",
            "message_added",
            "draft_revision_created",
            "context_changed"
        ]
    );
    let finished = messages
        .iter()
        .find(|m| m["data"]["kind"]["type"] == "job_finished")
        .context("the job's end is in its stream")?;
    assert_eq!(finished["data"]["kind"]["state"], "succeeded", "{finished}");
    assert_eq!(finished["data"]["job_id"], job.as_str());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn msgpack_events_say_so_and_atelier_decode_prints_them_as_json() -> anyhow::Result<()> {
    use futures::StreamExt;
    use std::io::Write;
    let up = Up::start()?;
    up.cli_ok(&["wb", "create", "q3"])?;
    add_situation(&up)?;
    // Read from the stream itself, as an operator with the coordinator's account would.
    let coordinator = up.connect_as(Role::Coordinator).await?;
    let consumer = async_nats::jetstream::new(coordinator)
        .get_stream("ATELIER_WORKSHOP_EVENTS")
        .await?
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: "atelier.workshop.evt.q3.context_changed".into(),
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    let message = tokio::time::timeout(Duration::from_secs(20), messages.next())
        .await?
        .context("no event")??;
    let content_type = message.headers.as_ref().and_then(|h| h.get("Content-Type"));
    assert_eq!(
        content_type.map(|v| v.as_str()),
        Some("application/msgpack")
    );
    // What `nats ... --translate 'atelier decode'` shows of it.
    let mut decode = Command::new(atelier_bin())
        .arg("decode")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    decode
        .stdin
        .take()
        .context("no stdin")?
        .write_all(&message.payload)?;
    let output = decode.wait_with_output()?;
    assert!(output.status.success());
    let event: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    assert_eq!(
        (
            &event["kind"],
            &event["workbench"],
            &event["context"]["name"]
        ),
        (
            &serde_json::json!("context_changed"),
            &serde_json::json!("q3"),
            &serde_json::json!("situation")
        )
    );
    Ok(())
}

/// `watch --timeout` stops following a job that has not ended (exit status 124, saying how to
/// look again) and leaves the job alone; without a timeout reached it ends with the job.
#[test]
fn watch_stops_at_its_timeout_and_the_job_goes_on() -> anyhow::Result<()> {
    let up = Up::start()?;
    up.cli_ok(&["wb", "create", "q3"])?;
    let plan = up.workdir().join("plan.csv");
    std::fs::write(&plan, "Milestone\nBeta\n")?;
    up.cli_ok(&["wb", "add", "q3", &plan.to_string_lossy()])?;
    // Deleting a published file waits for a person.
    let job = up.cli_ok(&[
        "run",
        "q3",
        "delete_file",
        "--args",
        r#"{"path": "plan.csv"}"#,
    ])?;
    let job = job.trim().to_string();

    let started = std::time::Instant::now();
    let stopped = up.cli(&["watch", &job, "--timeout", "2"])?;
    assert_eq!(stopped.status.code(), Some(124), "{stopped:?}");
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert!(stderr.contains("had not finished after 2 s"), "{stderr}");
    assert!(stderr.contains(&format!("atelier job {job}")), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30));

    up.cli_ok(&["approve", &job])?;
    let followed = up.cli(&["watch", &job, "--timeout", "60"])?;
    assert_eq!(followed.status.code(), Some(0), "{followed:?}");
    let listing = up.cli_ok(&["wb", "ls", "q3", "--draft", "--json"])?;
    assert!(!listing.contains("plan.csv"), "{listing}");
    Ok(())
}

/// The processes `up` started, and theirs: every descendant of `pid`.
fn descendants(pid: u32) -> Vec<u32> {
    let parent_of = |child: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
        // `pid (comm) state ppid …`; the name may hold spaces, so read after its `)`.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let all: Vec<u32> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![pid];
    let mut index = 0;
    while index < found.len() {
        let parent = found[index];
        found.extend(all.iter().filter(|&&p| parent_of(p) == Some(parent)));
        index += 1;
    }
    found.split_off(1)
}

/// No password of the embedded server's users, and no secret of `up`'s environment, is on the
/// command line or in the environment of any process `up` started (`ps` shows command lines to
/// every local user): the workers read their URL from the data directory.
#[test]
fn no_secret_on_a_command_line_or_in_a_childs_environment() -> anyhow::Result<()> {
    let key = "sk-test-a-key-nobody-else-may-see";
    let up = Up::start_with(
        &[],
        &[
            ("OPENAI_API_KEY", key),
            ("SOME_SERVICE_TOKEN", "token-nobody-may-see"),
        ],
    )?;
    up.cli_ok(&["wb", "create", "q3"])?;
    let password = |role: Role| -> anyhow::Result<String> {
        let url = up.url(role)?;
        let credentials = url.trim().trim_start_matches("nats://");
        let (user_password, _) = credentials.split_once('@').context("no credentials")?;
        let (_, password) = user_password.split_once(':').context("no password")?;
        Ok(password.to_string())
    };
    let secrets = [
        password(Role::Coordinator)?,
        password(Role::Worker)?,
        password(Role::Client)?,
        key.to_string(),
        "token-nobody-may-see".to_string(),
    ];
    let children = descendants(up.pid());
    assert!(
        children.len() >= 3,
        "nats-server and one worker per pool: {children:?}"
    );
    let mut workers = 0;
    for child in children {
        let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
        let environ = std::fs::read(format!("/proc/{child}/environ")).unwrap_or_default();
        let (cmdline, environ) = (
            String::from_utf8_lossy(&cmdline).replace('\0', " "),
            String::from_utf8_lossy(&environ),
        );
        workers += usize::from(cmdline.contains(" worker --supervised"));
        for secret in &secrets {
            assert!(!cmdline.contains(secret.as_str()), "{child}: {cmdline}");
            assert!(
                !environ.contains(secret.as_str()),
                "{child} has a secret in its environment"
            );
        }
    }
    assert_eq!(workers, 2, "one supervised worker per pool");
    // The workers serve, with the URL they read from the data directory.
    let args = r#"{"path": "notes.md", "content": "served\n"}"#;
    up.cli_ok(&["run", "q3", "write_text_file", "--args", args, "--wait"])?;
    assert_eq!(
        up.cli_ok(&["wb", "cat", "q3", "notes.md", "--draft"])?,
        "served\n"
    );
    Ok(())
}
