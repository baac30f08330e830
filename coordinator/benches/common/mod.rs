//! What the coordinator's benches share: a local nats-server, percentiles.
#![allow(clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A nats-server with JetStream, killed on drop.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a nats-server with JetStream in `dir`; with `sync_always` it fsyncs every write (a
/// replicated store's servers run so), else it keeps the server's default.
pub fn nats_server(dir: &Path, sync_always: bool) -> (Server, String) {
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let config = dir.join("nats.conf");
    std::fs::write(
        &config,
        format!(
            "host: 127.0.0.1\nport: {port}\njetstream {{ store_dir: {:?}{} }}\n",
            dir.join("js").display().to_string(),
            if sync_always {
                ", sync_interval: always"
            } else {
                ""
            }
        ),
    )
    .expect("config");
    let child = Command::new("nats-server")
        .arg("-c")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server on the PATH (scripts/setup.sh)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nats-server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Server(child), format!("nats://127.0.0.1:{port}"))
}

/// The `p` percentile (0–1) of `samples` (sorted in place).
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}
