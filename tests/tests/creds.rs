//! `--creds FILE`: every process reaches a NATS server in operator (decentralized JWT) mode with
//! a user credentials file, and fails at once, saying why, without one or with a wrong one.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use anyhow::Context;
use atelier_messages::access::Role;
use atelier_messages::job::JobState;
use atelier_tests::nats_jwt::OperatorSetup;
use atelier_tests::scripted::{ScriptedModel, launch_plan_export_script};
use atelier_tests::{NatsServer, Process, cli, launch_plan_csv, wait_until};

/// How soon a refused or unreadable credential must fail (the connect patience is 30 s).
const FAILS_AT_ONCE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn every_process_connects_to_an_operator_mode_server_with_creds() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let setup = OperatorSetup::generate()?;
    let nats = NatsServer::start_operator(dir.path(), &setup)?;
    let url = nats.url.as_str();
    // Each process presents its own account's user (docs/adr/0016); the clients' is `creds`.
    let write_creds = |name: &str, role: Role| -> anyhow::Result<String> {
        let path = dir.path().join(name);
        std::fs::write(&path, setup.creds(role))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok(path.to_string_lossy().to_string())
    };
    let creds = write_creds("atelier.creds", Role::Client)?;
    let coordinator_creds = write_creds("coordinator.creds", Role::Coordinator)?;
    let worker_creds = write_creds("worker.creds", Role::Worker)?;
    let data = dir.path().join("data").to_string_lossy().to_string();
    let logs = || {
        ["coordinator", "worker-tabular", "worker-office"]
            .iter()
            .map(|name| {
                let log = std::fs::read_to_string(dir.path().join(format!("{name}.log")));
                format!("--- {name}\n{}", log.unwrap_or_default())
            })
            .collect::<Vec<_>>()
            .join("\n")
    };

    // The server really is in operator mode: a plain connection is refused.
    assert!(
        async_nats::connect(url).await.is_err(),
        "anonymous access to an operator-mode server"
    );

    let _coordinator = Process::spawn(
        "coordinator",
        &[
            "coordinator",
            "--nats",
            url,
            "--creds",
            &coordinator_creds,
            "--data",
            &data,
        ],
        dir.path(),
    )?;
    let mut workers = Vec::new();
    for pool in ["tabular", "office"] {
        workers.push(Process::spawn(
            &format!("worker-{pool}"),
            &[
                "worker",
                "--pool",
                pool,
                "--nats",
                url,
                "--creds",
                &worker_creds,
                "--data",
                &data,
            ],
            dir.path(),
        )?);
    }
    wait_until(Duration::from_secs(30), || {
        cli(&["jobs", "--json", "--nats", url, "--creds", &creds]).is_ok_and(|out| out.success)
    })
    .with_context(|| format!("the coordinator never answered\n{}", logs()))?;

    // Client commands with --creds: create a workbench, list it.
    let created = cli(&["wb", "create", "secured", "--nats", url, "--creds", &creds])?;
    assert!(created.success, "{}\n{}", created.stderr, logs());
    let listed = cli(&["wb", "list", "--json", "--nats", url, "--creds", &creds])?;
    assert!(listed.success, "{}", listed.stderr);
    let workbenches: serde_json::Value = listed.json()?;
    let names: Vec<&str> = workbenches
        .as_array()
        .map(|list| list.iter().filter_map(|wb| wb["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, vec!["secured"]);

    // A job runs end to end: the coordinator calls the tabular worker, both on creds.
    let csv = launch_plan_csv();
    let added = cli(&[
        "wb",
        "add",
        "secured",
        &csv.to_string_lossy(),
        "--as",
        "launch_plan.csv",
        "--nats",
        url,
        "--creds",
        &creds,
    ])?;
    assert!(added.success, "{}", added.stderr);
    let model = ScriptedModel::start(launch_plan_export_script(0)).await?;
    let spec = model.model_spec();
    let job = cli(&[
        "submit",
        "secured",
        "Count milestones per department into summary.xlsx",
        "--model",
        &spec,
        "--wait",
        "--json",
        "--nats",
        url,
        "--creds",
        &creds,
    ])?;
    let view: atelier_messages::job::JobView = job.json()?;
    assert_eq!(
        view.state,
        JobState::Succeeded,
        "{:?}\n{}",
        view.error,
        logs()
    );
    assert_eq!(view.tool_calls, 2);

    // The dashboard with --creds follows the job's events; without, it refuses to start.
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port();
    let http_addr = format!("127.0.0.1:{port}");
    let _dashboard = Process::spawn(
        "dashboard",
        &[
            "dashboard",
            "--nats",
            url,
            "--creds",
            &creds,
            "--http",
            &http_addr,
        ],
        dir.path(),
    )?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let status: Option<serde_json::Value> = match http
            .get(format!("http://{http_addr}/api/status"))
            .send()
            .await
        {
            Ok(response) => response.json().await.ok(),
            Err(_) => None,
        };
        if let Some(status) = status.filter(|status| {
            status["nats_connected"] == true && status["events_sequence"].as_u64() > Some(0)
        }) {
            break status;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the dashboard never followed the events\n{}",
            std::fs::read_to_string(dir.path().join("dashboard.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status["nats_reconnects"], 0);
    let started = Instant::now();
    let out = cli(&["dashboard", "--nats", url, "--http", "127.0.0.1:0"])?;
    assert!(!out.success);
    assert!(
        out.stderr.contains("authorization violation"),
        "{}",
        out.stderr
    );
    assert!(started.elapsed() < FAILS_AT_ONCE, "{:?}", started.elapsed());

    // The same command without --creds: refused, at once, and it says so.
    let started = Instant::now();
    let refused = cli(&["wb", "list", "--json", "--nats", url])?;
    assert!(!refused.success, "listed without credentials");
    assert_eq!(refused.code, Some(1));
    assert!(
        refused.stderr.contains("authorization violation")
            && refused.stderr.contains("--creds FILE"),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty(), "{}", refused.stdout);
    assert!(started.elapsed() < FAILS_AT_ONCE, "{:?}", started.elapsed());

    // Another account's user is not this server's: refused the same way.
    let stranger = OperatorSetup::generate()?;
    let stranger_path = dir.path().join("stranger.creds");
    std::fs::write(&stranger_path, stranger.creds(Role::Client))?;
    let stranger_path = stranger_path.to_string_lossy().to_string();
    let refused = cli(&["wb", "list", "--nats", url, "--creds", &stranger_path])?;
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("authorization violation")
            && refused.stderr.contains(&stranger_path),
        "{}",
        refused.stderr
    );

    // A missing credentials file fails before any connection, naming the file.
    let missing = dir
        .path()
        .join("no-such.creds")
        .to_string_lossy()
        .to_string();
    let started = Instant::now();
    let out = cli(&["wb", "list", "--nats", url, "--creds", &missing])?;
    assert!(!out.success);
    assert!(
        out.stderr.contains(&missing) && out.stderr.contains("cannot read"),
        "{}",
        out.stderr
    );
    assert!(started.elapsed() < FAILS_AT_ONCE, "{:?}", started.elapsed());

    // A file that is not a credentials file says what one holds.
    let garbage = dir.path().join("garbage.creds");
    std::fs::write(&garbage, "user=atelier\npassword=secret\n")?;
    let garbage = garbage.to_string_lossy().to_string();
    let out = cli(&["wb", "list", "--nats", url, "--creds", &garbage])?;
    assert!(!out.success);
    assert!(
        out.stderr.contains(&garbage) && out.stderr.contains("BEGIN NATS USER JWT"),
        "{}",
        out.stderr
    );

    // The environment variable works like the flag.
    let by_env = std::process::Command::new(atelier_tests::atelier_bin())
        .args(["wb", "list", "--json", "--nats", url])
        .env("ATELIER_NATS_CREDS", &creds)
        .output()?;
    assert!(
        by_env.status.success(),
        "{}",
        String::from_utf8_lossy(&by_env.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&by_env.stdout)?;
    assert_eq!(listed[0]["name"], "secured");

    // A user in the URL and a credentials file conflict instead of one silently winning.
    let with_user = url.replacen("nats://", "nats://someone:secret@", 1);
    let out = cli(&["wb", "list", "--nats", &with_user, "--creds", &creds])?;
    assert!(!out.success);
    assert!(
        out.stderr.contains("both") && out.stderr.contains("someone"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("secret"), "{}", out.stderr);

    // A worker without credentials does not wait 30 s for a server that refuses it.
    let started = Instant::now();
    let out = cli(&[
        "worker", "--pool", "tabular", "--nats", url, "--data", &data,
    ])?;
    assert!(!out.success);
    assert!(
        out.stderr.contains("authorization violation"),
        "{}",
        out.stderr
    );
    assert!(started.elapsed() < FAILS_AT_ONCE, "{:?}", started.elapsed());
    Ok(())
}

#[test]
fn up_refuses_creds_without_an_external_server() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let creds = dir.path().join("user.creds").to_string_lossy().to_string();
    let out = cli(&[
        "up",
        "--data",
        &dir.path().to_string_lossy(),
        "--creds",
        &creds,
    ])?;
    assert!(!out.success);
    assert!(
        out.stderr.contains(&creds) && out.stderr.contains("--nats"),
        "{}",
        out.stderr
    );
    Ok(())
}
