//! `atelier up` as the README runs it: the embedded default with its own `nats-server`, the three
//! roles on, clients finding it through the data directory (no `--nats`). Stopped with Ctrl-C on
//! drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use anyhow::Context;

use crate::{atelier_bin, wait_until};

/// One of the embedded server's users: the client's and the worker's credentials are in URL
/// files of the data directory; the coordinator's only in the server's configuration (which the
/// tests, as the operator, may read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Coordinator,
    Worker,
    Client,
}

impl Role {
    /// The inbox prefix the role's connections must use (the server lets each role read only
    /// its own replies).
    pub fn inbox_prefix(self) -> &'static str {
        self.access().inbox_prefix()
    }

    /// The role as the code's accounts table names it.
    pub fn access(self) -> atelier_messages::access::Role {
        use atelier_messages::access::Role as Access;
        match self {
            Role::Coordinator => Access::Coordinator,
            Role::Worker => Access::Worker,
            Role::Client => Access::Client,
        }
    }
}

/// `atelier up` in a temp data directory.
pub struct Up {
    child: Child,
    data: PathBuf,
    dir: tempfile::TempDir,
}

impl Up {
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(&[], &[])
    }

    /// `up` with extra arguments and environment (e.g. `ATELIER_OPENAI_BASE_URL`).
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        let log = std::fs::File::create(dir.path().join("up.log"))?;
        let out = std::fs::File::create(dir.path().join("up.out"))?;
        let child = Command::new(atelier_bin())
            .args(["up", "--data", &data.to_string_lossy()])
            .args(["--http", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .env("ATELIER_NATS_PORT", "0")
            .env_remove("ATELIER_NATS_URL")
            .current_dir(dir.path())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(log))
            .spawn()?;
        let up = Self { child, data, dir };
        // The clients' URL is written once everything serves (the workers' earlier, for them).
        wait_until(Duration::from_secs(30), || {
            up.data.join("nats.url").exists()
        })
        .with_context(|| format!("`atelier up` did not start:\n{}", up.log()))?;
        Ok(up)
    }

    /// The process id of `up`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// A scratch directory beside the data (the CLI's working directory).
    pub fn workdir(&self) -> &Path {
        self.dir.path()
    }

    /// The URL, with credentials, of `role`.
    pub fn url(&self, role: Role) -> anyhow::Result<String> {
        let file = match role {
            Role::Client => "nats.url",
            Role::Worker => "nats-worker.url",
            Role::Coordinator => return self.coordinator_url(),
        };
        Ok(std::fs::read_to_string(self.data.join(file))?)
    }

    /// The coordinator's URL, its password read from the server's configuration.
    fn coordinator_url(&self) -> anyhow::Result<String> {
        let config = std::fs::read_to_string(self.data.join("nats/nats-server.conf"))?;
        let password = config
            .split("user: \"coordinator\", password: \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .context("no coordinator user in the server's configuration")?;
        let client = self.url(Role::Client)?;
        let host = client
            .trim()
            .rsplit('@')
            .next()
            .context("no host in the client's URL")?;
        Ok(format!("nats://coordinator:{password}@{host}"))
    }

    /// Connects as `role`, with its inbox prefix, as a third-party client would.
    pub async fn connect_as(&self, role: Role) -> anyhow::Result<async_nats::Client> {
        let url = self.url(role)?;
        Ok(atelier_transport::connect::options(&url, None)
            .await?
            .custom_inbox_prefix(role.inbox_prefix())
            .connect(&url)
            .await?)
    }

    /// Runs the CLI as a user does beside `up`: in the scratch directory, `--data` only.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<Output> {
        self.cli_with_env(args, &[])
    }

    /// Runs the CLI and fails with its output unless it succeeds; its stdout.
    pub fn cli_ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let output = self.cli(args)?;
        anyhow::ensure!(
            output.status.success(),
            "`atelier {}` failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    pub fn cli_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Output> {
        Ok(Command::new(atelier_bin())
            .args(args)
            .args(["--data", &self.data.to_string_lossy()])
            .envs(env.iter().copied())
            .env_remove("ATELIER_NATS_URL")
            .current_dir(self.dir.path())
            .output()?)
    }

    /// The dashboard's address (`127.0.0.1:PORT`), as `up` printed it (waited for: on a loaded
    /// machine the line can come a moment after NATS answers).
    pub fn dashboard_addr(&self) -> anyhow::Result<String> {
        let printed = || {
            std::fs::read_to_string(self.dir.path().join("up.out"))
                .ok()?
                .lines()
                .find_map(|line| line.strip_prefix("dashboard at http://"))
                .map(|addr| addr.trim().to_string())
        };
        wait_until(Duration::from_secs(30), || printed().is_some())
            .context("`up` printed no dashboard address")?;
        printed().context("`up` printed no dashboard address")
    }

    /// `up`'s own log (stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("up.log")).unwrap_or_default()
    }

    /// The embedded nats-server's log.
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.data.join("nats/nats-server.log")).unwrap_or_default()
    }

    /// Every permission the server refused, as its log (`Publish Violation`, `Subscription
    /// Violation`) and the clients' errors (`Permissions Violation`) state them.
    pub fn permission_violations(&self) -> Vec<String> {
        self.server_log()
            .lines()
            .chain(self.log().lines())
            .filter(|line| line.contains(" Violation"))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
