//! `atelier up`: the embedded default starts its own nats-server, serves clients that find it
//! through the data directory, and stops everything on Ctrl-C.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
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
                .map(|rest| rest.trim().to_string())
        })
        .context("`up` never printed its NATS URL")?;
    assert!(url.starts_with("nats://127.0.0.1:"), "{url}");
    let port: u16 = url.rsplit(':').next().unwrap_or_default().parse()?;
    assert_eq!(std::fs::read_to_string(data.join("nats.url"))?.trim(), url);

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
