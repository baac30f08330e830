//! Test harness for end-to-end tests: a real `nats-server` with JetStream, real `atelier`
//! processes, the `atelier` CLI, and a local HTTP server speaking the OpenAI Chat Completions
//! protocol with scripted replies (the only stand-in: for the remote model).
//!
//! # Layout
//! - [`NatsServer`]: a throwaway JetStream server on a free port.
//! - [`Process`]: an `atelier` child process, SIGKILLed on drop.
//! - [`Cluster`]: nats-server + coordinator + workers in one temp dir, plus CLI helpers.
//! - [`scripted`]: the scripted OpenAI-protocol server.
//! - [`nats_request`]: raw request/reply for protocol-level tests.
//! - [`nats_cluster`]: three clustered nats-servers (JetStream R3) for fail-over tests.
//! - [`nats_jwt`]: an operator-mode trust chain (operator, accounts, user JWTs and `.creds`).
//! - [`browser`]: headless Chromium on the dashboard (`tests/browser` scripts).
//! - [`python`]: the official MCP and OpenAI Python SDKs as test clients.
//! - [`up`]: `atelier up` as the README runs it, with its roles, for user-journey tests.
//! - [`cpu_cap`]: a CPU budget per process (a cgroup each), for benchmarks that stand several
//!   processes on one machine for several hosts.

pub mod browser;
pub mod cpu_cap;
pub mod docs_runner;
pub mod nats_cluster;
pub mod nats_jwt;
pub mod python;
pub mod scripted;
pub mod up;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::de::DeserializeOwned;

/// The `atelier` binary next to this test executable (built by the README's test command).
pub fn atelier_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let bin = dir.join("atelier");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --bin atelier` first (scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// The KeenBench launch plan: 5 milestones, 6 columns (`Department` is the third).
pub fn launch_plan_csv() -> PathBuf {
    fixtures().join("keenbench/context/keenbench_launch_plan.csv")
}

/// A real two-section report (KeenBench's `simple.docx`).
pub fn simple_docx() -> PathBuf {
    fixtures().join("keenbench/office/simple.docx")
}

/// A model-free workflow of two steps on a new `notes.docx`: "first line" appended, then
/// "second line" (the second step reads what the first wrote).
pub const TWO_PARAGRAPHS_WORKFLOW: &str = r#"
name = "two-paragraphs"
[[steps]]
tool = "docx_operations"
args = { path = "notes.docx", create_new = true, operations = [{ op = "append_paragraph", text = "first line" }] }
[[steps]]
tool = "docx_operations"
args = { path = "notes.docx", operations = [{ op = "append_paragraph", text = "second line" }] }
"#;

/// Real files from elsewhere that the tests use (`tests/fixtures`, with their licences).
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or(0)
}

/// A throwaway nats-server with JetStream, killed on drop.
pub struct NatsServer {
    child: Option<Child>,
    max_payload: usize,
    /// More configuration lines (e.g. an operator-mode trust chain).
    extra_config: String,
    /// JetStream fsyncs every write (`sync_interval: always`), as a replicated store's servers
    /// run.
    sync_always: bool,
    pub url: String,
    port: u16,
    dir: PathBuf,
}

impl NatsServer {
    pub fn start(dir: &Path) -> anyhow::Result<Self> {
        Self::start_with_max_payload(dir, 64 << 20)
    }

    /// A server whose messages may be at most `max_payload` bytes.
    pub fn start_with_max_payload(dir: &Path, max_payload: usize) -> anyhow::Result<Self> {
        Self::start_with_config(dir, max_payload, String::new())
    }

    /// A server with more configuration (e.g. the accounts docs/operations.md documents).
    pub fn start_with_extra_config(dir: &Path, extra_config: &str) -> anyhow::Result<Self> {
        Self::start_with_config(dir, 64 << 20, extra_config.to_string())
    }

    /// A server whose JetStream fsyncs every write (`sync_interval: always`).
    pub fn start_synced(dir: &Path) -> anyhow::Result<Self> {
        Self::start_synced_with(dir, "")
    }

    /// A server whose JetStream fsyncs every write, with more configuration (a cluster block).
    pub fn start_synced_with(dir: &Path, extra_config: &str) -> anyhow::Result<Self> {
        let mut server = Self::prepare(dir, 64 << 20, extra_config.to_string());
        server.sync_always = true;
        server.spawn_on_a_free_port()?;
        Ok(server)
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("nats-server.log")).unwrap_or_default()
    }

    /// A server in operator (decentralized JWT) mode that trusts `setup`'s operator: only users
    /// of its accounts, presenting a JWT and signing with their seed, get in.
    pub fn start_operator(dir: &Path, setup: &nats_jwt::OperatorSetup) -> anyhow::Result<Self> {
        Self::start_with_config(dir, 64 << 20, setup.server_config())
    }

    fn start_with_config(
        dir: &Path,
        max_payload: usize,
        extra_config: String,
    ) -> anyhow::Result<Self> {
        let mut server = Self::prepare(dir, max_payload, extra_config);
        server.spawn_on_a_free_port()?;
        Ok(server)
    }

    /// Starts the server, on another free port while the one picked is taken by the time the
    /// server binds it (another test's server picked it too).
    fn spawn_on_a_free_port(&mut self) -> anyhow::Result<()> {
        for _ in 0..5 {
            match self.spawn() {
                Err(_) if self.port_was_taken() => {
                    self.port = free_port();
                    self.url = format!("nats://127.0.0.1:{}", self.port);
                }
                started => return started,
            }
        }
        self.spawn()
    }

    fn port_was_taken(&self) -> bool {
        self.log().contains("address already in use")
    }

    /// A server not started yet.
    fn prepare(dir: &Path, max_payload: usize, extra_config: String) -> Self {
        let port = free_port();
        Self {
            child: None,
            max_payload,
            extra_config,
            sync_always: false,
            url: format!("nats://127.0.0.1:{port}"),
            port,
            dir: dir.join("nats"),
        }
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let config = self.dir.join("nats.conf");
        std::fs::write(
            &config,
            format!(
                "host: 127.0.0.1\nport: {}\nmax_payload: {}\njetstream {{ store_dir: {:?}{} }}\n{}",
                self.port,
                self.max_payload,
                self.dir.join("js").display().to_string(),
                if self.sync_always {
                    ", sync_interval: always"
                } else {
                    ""
                },
                self.extra_config
            ),
        )?;
        let log = self.dir.join("nats-server.log");
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("nats-server not found: run scripts/setup.sh")?;
        self.child = Some(child);
        // Ready when this server says so: a connection alone could reach another test's server
        // that took the port first.
        wait_until(Duration::from_secs(10), || {
            let exited = self
                .child
                .as_mut()
                .is_none_or(|child| child.try_wait().ok().flatten().is_some());
            exited || self.log().contains("Server is ready")
        })
        .and_then(|()| match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => Ok(()),
            _ => Err(anyhow::anyhow!("nats-server exited")),
        })
        .with_context(|| {
            format!(
                "nats-server did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        })
    }

    /// The OS process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILLs the server.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and store.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.spawn()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// CPU time (user + system) a running process has used so far, in seconds; 0 once it is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3; utime and stime
    // are fields 14 and 15, in clock ticks of 1/100 s on Linux.
    let Some((_, after_name)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Polls `condition` every 50 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("condition not met within {timeout:?}")
}

/// An `atelier` child process, SIGKILLed on drop.
pub struct Process {
    child: Option<Child>,
    pub name: String,
}

impl Process {
    pub fn spawn(name: &str, args: &[&str], log_dir: &Path) -> anyhow::Result<Self> {
        Self::spawn_with_env(name, args, log_dir, &[])
    }

    /// Spawns with extra environment variables (e.g. `ATELIER_FAILPOINTS`). The log is appended
    /// to, so a restarted process keeps its predecessor's lines.
    pub fn spawn_with_env(
        name: &str,
        args: &[&str],
        log_dir: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_dir.join(format!("{name}.log")))?;
        let child = Command::new(atelier_bin())
            .args(args)
            .envs(env.iter().copied())
            .env("ATELIER_LOG", "info,atelier=debug")
            .env_remove("ATELIER_DEFAULT_MODEL")
            .env_remove("OPENAI_API_KEY")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()?;
        Ok(Self {
            child: Some(child),
            name: name.to_string(),
        })
    }

    /// The OS process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits up to `timeout` for the process to exit by itself; true if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        self.child.is_none() || self.wait_status(timeout).is_some()
    }

    /// Waits up to `timeout` for the process to exit by itself; how it exited, if it did
    /// (`None` too for a process already waited for).
    pub fn wait_status(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let mut status = None;
        let _ = wait_until(timeout, || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `atelier ARGS` to completion (no server chosen for it beyond `args`: the NATS URL and
/// credentials variables of this environment are removed).
pub fn cli(args: &[&str]) -> anyhow::Result<CliOutput> {
    let output = Command::new(atelier_bin())
        .args(args)
        .env_remove("ATELIER_DEFAULT_MODEL")
        .env_remove("ATELIER_NATS_URL")
        .env_remove("ATELIER_NATS_CREDS")
        .output()?;
    Ok(output.into())
}

/// A whole system in a temp dir: nats-server, a coordinator, workers.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nats: NatsServer,
    /// The other nodes when `nats` is one of a cluster's ([`Cluster::start_three_nodes`]).
    pub more_nats: Vec<NatsServer>,
    pub coordinator: Option<Process>,
    pub workers: Vec<Process>,
}

/// The accounts example (```conf) of docs/operations.md, with every user's password `password`.
pub fn documented_accounts(password: &str) -> anyhow::Result<String> {
    let guide = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"),
    )?;
    let block = guide
        .split("```conf\n")
        .filter_map(|rest| rest.split("```").next())
        .find(|block| block.contains("accounts {"))
        .context("docs/operations.md has no ```conf block of accounts")?;
    Ok(["COORDINATOR", "WORKER", "CLIENT"]
        .iter()
        .fold(block.to_string(), |conf, role| {
            conf.replace(&format!("${role}_PASSWORD"), &format!("{password:?}"))
        }))
}

/// Output of a CLI run.
#[derive(Debug)]
pub struct CliOutput {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<std::process::Output> for CliOutput {
    fn from(output: std::process::Output) -> Self {
        CliOutput {
            success: output.status.success(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).to_string(),
        }
    }
}

impl CliOutput {
    /// True when the command failed and its error names `code` (e.g. `VALIDATION_FAILED`).
    pub fn failed_with(&self, code: &str) -> bool {
        !self.success && self.stderr.contains(code)
    }

    pub fn json<T: DeserializeOwned>(&self) -> anyhow::Result<T> {
        serde_json::from_str(&self.stdout).with_context(|| {
            format!(
                "stdout is not the expected JSON: {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

impl Cluster {
    /// nats-server + coordinator + one worker per pool.
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(&["tabular", "office"])
    }

    /// nats-server + coordinator + one worker per listed pool (repeat a pool for more).
    pub fn start_with(pools: &[&str]) -> anyhow::Result<Self> {
        Self::start_with_max_payload(pools, 64 << 20)
    }

    /// Like [`Cluster::start_with`], on a server whose messages may be at most `max_payload`
    /// bytes (a stock `nats-server` allows 1 MiB).
    pub fn start_with_max_payload(pools: &[&str], max_payload: usize) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let nats = NatsServer::start_with_max_payload(dir.path(), max_payload)?;
        Self::start_on(dir, nats, pools, &[])
    }

    /// Like [`Cluster::start_with`], on a server with `sync_interval: always` and the
    /// coordinator started with `coordinator_env` (e.g. a replicated store).
    pub fn start_synced(pools: &[&str], coordinator_env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let nats = NatsServer::start_synced(dir.path())?;
        Self::start_on(dir, nats, pools, coordinator_env)
    }

    /// Three clustered nats-servers (JetStream fsyncing every write) and nothing else yet:
    /// `nats` is the first node, which the CLI and workers use; `more_nats` the two others.
    pub async fn start_three_nodes() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut nodes = nats_cluster::NatsCluster::start(dir.path()).await?.nodes;
        let nats = nodes.remove(0);
        Ok(Self {
            dir,
            nats,
            more_nats: nodes,
            coordinator: None,
            workers: Vec::new(),
        })
    }

    fn start_on(
        dir: tempfile::TempDir,
        nats: NatsServer,
        pools: &[&str],
        coordinator_env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut cluster = Self {
            dir,
            nats,
            more_nats: Vec::new(),
            coordinator: None,
            workers: Vec::new(),
        };
        cluster.start_coordinator_with_env(coordinator_env)?;
        for pool in pools {
            cluster.start_worker(pool)?;
        }
        Ok(cluster)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn start_coordinator(&mut self) -> anyhow::Result<()> {
        self.start_coordinator_with_env(&[])
    }

    /// Starts the coordinator with extra environment (e.g. an armed failpoint) and waits until
    /// it answers.
    pub fn start_coordinator_with_env(&mut self, env: &[(&str, &str)]) -> anyhow::Result<()> {
        let data = self.data_dir();
        let data = data.to_string_lossy().to_string();
        let process = Process::spawn_with_env(
            "coordinator",
            &["coordinator", "--nats", &self.nats.url, "--data", &data],
            self.dir.path(),
            env,
        )?;
        self.coordinator = Some(process);
        wait_until(Duration::from_secs(20), || {
            self.cli(&["jobs", "--json"])
                .map(|out| out.success)
                .unwrap_or(false)
        })
        .context("coordinator did not answer")
    }

    /// Restarts the coordinator with `toml` as its configuration file (and extra environment).
    pub fn restart_coordinator_with_config(
        &mut self,
        toml: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let config = self.dir.path().join("atelier.toml");
        std::fs::write(&config, toml)?;
        let config = config.to_string_lossy().to_string();
        let mut env = env.to_vec();
        env.push(("ATELIER_CONFIG", &config));
        self.kill_coordinator();
        self.start_coordinator_with_env(&env)
    }

    /// Another coordinator on this cluster's NATS, named `name` (its log is `name.log`), with a
    /// data directory of its own (`name/`), as on another host.
    pub fn spawn_coordinator(&self, name: &str, env: &[(&str, &str)]) -> anyhow::Result<Process> {
        self.spawn_coordinator_on(name, &self.nats.url, env)
    }

    /// Like [`Cluster::spawn_coordinator`], connected to the server at `url`.
    pub fn spawn_coordinator_on(
        &self,
        name: &str,
        url: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Process> {
        let data = self.dir.path().join(name);
        Process::spawn_with_env(
            name,
            &[
                "coordinator",
                "--nats",
                url,
                "--data",
                &data.to_string_lossy(),
            ],
            self.dir.path(),
            env,
        )
    }

    pub fn kill_coordinator(&mut self) {
        if let Some(mut process) = self.coordinator.take() {
            process.kill();
        }
    }

    pub fn start_worker(&mut self, pool: &str) -> anyhow::Result<()> {
        self.start_worker_with_env(pool, &[])
    }

    /// Starts a worker with extra environment (e.g. a tabular query timeout or a failpoint).
    pub fn start_worker_with_env(
        &mut self,
        pool: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let data = self.data_dir();
        self.spawn_worker(pool, &data, env)
    }

    /// Starts a worker on a data directory of its own (as on another host): it shares no blob
    /// directory with the coordinator, so it fetches blobs through the blob bucket. Returns
    /// that directory.
    pub fn start_worker_elsewhere(
        &mut self,
        pool: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<PathBuf> {
        let data = self
            .dir
            .path()
            .join(format!("worker-{pool}-{}-data", self.workers.len()));
        std::fs::create_dir_all(&data)?;
        self.spawn_worker(pool, &data, env)?;
        Ok(data)
    }

    fn spawn_worker(
        &mut self,
        pool: &str,
        data: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let data = data.to_string_lossy().to_string();
        let name = format!("worker-{pool}-{}", self.workers.len());
        let process = Process::spawn_with_env(
            &name,
            &[
                "worker",
                "--pool",
                pool,
                "--nats",
                &self.nats.url,
                "--data",
                &data,
            ],
            self.dir.path(),
            env,
        )?;
        self.workers.push(process);
        // A worker is ready when its queue subscription exists; give it a moment.
        std::thread::sleep(Duration::from_millis(300));
        Ok(())
    }

    /// Starts `atelier pool --pool POOL --min 1 --max MAX`, a pool supervisor on this
    /// cluster's NATS and data directory, with extra environment.
    pub fn start_pool_supervisor(
        &self,
        pool: &str,
        max: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Process> {
        let data = self.data_dir().to_string_lossy().to_string();
        let args = [
            "pool",
            "--pool",
            pool,
            "--min",
            "1",
            "--max",
            max,
            "--nats",
            &self.nats.url,
            "--data",
            &data,
        ];
        Process::spawn_with_env(&format!("pool-{pool}"), &args, self.dir.path(), env)
    }

    /// `pool` as `atelier workers --json` shows it.
    pub fn pool_view(&self, pool: &str) -> anyhow::Result<serde_json::Value> {
        let pools: Vec<serde_json::Value> = self.cli_ok(&["workers", "--json"])?.json()?;
        pools
            .into_iter()
            .find(|view| view["pool"] == pool)
            .with_context(|| format!("no {pool} pool listed"))
    }

    /// The draft's files, path → digest.
    pub fn draft_digests(
        &self,
        workbench: &str,
    ) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
        let listing: atelier_messages::store::Listing = self
            .cli_ok(&["wb", "ls", workbench, "--draft", "--json"])?
            .json()?;
        Ok(listing
            .files
            .into_iter()
            .map(|file| (file.path, file.digest))
            .collect())
    }

    /// Per call id, how many times the coordinator's store applied (not replayed) a draft write,
    /// from its log (kept across restarts).
    pub fn applied_writes(&self) -> std::collections::HashMap<String, usize> {
        let log =
            std::fs::read_to_string(self.dir.path().join("coordinator.log")).unwrap_or_default();
        let mut applied = std::collections::HashMap::new();
        for line in log
            .lines()
            .filter(|line| line.contains("draft write") && line.contains("replayed=false"))
        {
            if let Some(call_id) = line
                .split("call_id=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
            {
                *applied
                    .entry(call_id.trim_matches('"').to_string())
                    .or_insert(0) += 1;
            }
        }
        applied
    }

    /// Runs the CLI against this cluster.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<CliOutput> {
        let mut args = args.to_vec();
        args.extend(["--nats", self.nats.url.as_str()]);
        cli(&args)
    }

    /// Runs the CLI and fails unless it succeeds.
    pub fn cli_ok(&self, args: &[&str]) -> anyhow::Result<CliOutput> {
        let output = self.cli(args)?;
        if !output.success {
            bail!(
                "`atelier {}` failed: {}\n{}",
                args.join(" "),
                output.stderr,
                self.logs()
            );
        }
        Ok(output)
    }

    /// Creates each workbench of `names` holding a docx at `as_path`: [`simple_docx`], or for
    /// the names `broken` picks, bytes that are not a docx.
    pub fn docx_workbenches(
        &self,
        names: &[String],
        as_path: &str,
        broken: impl Fn(&str) -> bool,
    ) -> anyhow::Result<()> {
        let docx = simple_docx().to_string_lossy().to_string();
        let not_docx = self.dir.path().join("broken.docx");
        std::fs::write(&not_docx, b"PK\x03\x04 this is not a docx")?;
        let not_docx = not_docx.to_string_lossy().to_string();
        for name in names {
            self.cli_ok(&["wb", "create", name])?;
            let file = if broken(name) { &not_docx } else { &docx };
            self.cli_ok(&["wb", "add", name, file, "--as", as_path])?;
        }
        Ok(())
    }

    /// `atelier batch submit` over the workbenches matching `glob`: a `docx_operations` call
    /// appending a paragraph `text` to `path` in each, with `extra` flags.
    pub fn append_batch(
        &self,
        glob: &str,
        path: &str,
        text: &str,
        extra: &[&str],
    ) -> anyhow::Result<CliOutput> {
        let args = serde_json::json!({"path": path, "operations": [
            {"op": "append_paragraph", "text": text}]})
        .to_string();
        let mut command = vec![
            "batch",
            "submit",
            "--workbenches",
            glob,
            "--tool",
            "docx_operations",
            "--args",
            &args,
        ];
        command.extend_from_slice(extra);
        self.cli(&command)
    }

    /// Creates `workbench` holding the launch plan CSV at `as_path`.
    pub fn workbench_with_launch_plan(&self, workbench: &str, as_path: &str) -> anyhow::Result<()> {
        self.cli_ok(&["wb", "create", workbench])?;
        let csv = launch_plan_csv();
        self.cli_ok(&[
            "wb",
            "add",
            workbench,
            csv.to_str().unwrap_or_default(),
            "--as",
            as_path,
        ])?;
        Ok(())
    }

    /// The files an agent sees: the draft when there is one, else published.
    pub fn current_listing(
        &self,
        workbench: &str,
    ) -> anyhow::Result<atelier_messages::store::Listing> {
        let published: atelier_messages::store::Listing =
            self.cli_ok(&["wb", "ls", workbench, "--json"])?.json()?;
        if !published.has_draft {
            return Ok(published);
        }
        self.cli_ok(&["wb", "ls", workbench, "--draft", "--json"])?
            .json()
    }

    /// Submits a job (without waiting) and returns its id.
    pub fn submit(&self, workbench: &str, message: &str, model: &str) -> anyhow::Result<String> {
        self.submit_with(workbench, message, model, &[])
    }

    /// Submits a job with `extra` flags (e.g. `--auto-approve`) and returns its id at once.
    pub fn submit_with(
        &self,
        workbench: &str,
        message: &str,
        model: &str,
        extra: &[&str],
    ) -> anyhow::Result<String> {
        let mut args = vec!["submit", workbench, message, "--model", model];
        args.extend_from_slice(extra);
        let out = self.cli_ok(&args)?;
        Ok(out.stdout.trim().to_string())
    }

    /// Publishes `submit` to the JOBS stream directly, as a client that skips the CLI's checks
    /// would.
    pub async fn publish_raw(
        &self,
        submit: &atelier_messages::job::JobSubmit,
    ) -> anyhow::Result<()> {
        let client = async_nats::connect(&self.nats.url).await?;
        let js = async_nats::jetstream::new(client);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", submit.job_id.as_str());
        let payload = atelier_messages::encode(submit, atelier_messages::Format::MessagePack)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        js.publish_with_headers(
            atelier_messages::subjects::JOB_SUBMIT,
            headers,
            payload.into(),
        )
        .await?
        .await?;
        Ok(())
    }

    /// Submits a job with `--wait --json` (plus `extra` flags) and returns its final view,
    /// whatever the job's outcome.
    pub fn run_job(
        &self,
        workbench: &str,
        message: &str,
        model: &str,
        extra: &[&str],
    ) -> anyhow::Result<atelier_messages::job::JobView> {
        let mut args = vec![
            "submit", workbench, message, "--model", model, "--wait", "--json",
        ];
        args.extend_from_slice(extra);
        self.cli(&args)?.json()
    }

    /// Creates `workbench`, runs the workflow `toml` there as job `job_id` (`atelier run
    /// --workflow`) and waits until it succeeded.
    pub fn run_workflow(
        &self,
        workbench: &str,
        toml: &str,
        job_id: &str,
    ) -> anyhow::Result<atelier_messages::job::JobView> {
        let file = self.dir.path().join(format!("{job_id}.toml"));
        std::fs::write(&file, toml)?;
        let file = file.to_string_lossy().to_string();
        self.cli_ok(&["wb", "create", workbench])?;
        self.cli_ok(&["run", workbench, "--workflow", &file, "--job-id", job_id])?;
        self.wait_succeeded(job_id, Duration::from_secs(60))
    }

    /// Polls `atelier job ID --json` until the job is in `state`.
    pub fn wait_for_state(
        &self,
        job_id: &str,
        state: atelier_messages::job::JobState,
    ) -> anyhow::Result<atelier_messages::job::JobView> {
        let mut seen = None;
        wait_until(Duration::from_secs(60), || {
            let view: Option<atelier_messages::job::JobView> = self
                .cli(&["job", job_id, "--json"])
                .ok()
                .and_then(|out| out.json().ok());
            seen = view.filter(|view| view.state == state);
            seen.is_some()
        })
        .with_context(|| format!("job never reached {state}\n{}", self.logs()))?;
        seen.context("no view")
    }

    /// Polls `atelier job ID --json` until the job is in a terminal state.
    /// Waits for `job_id` to finish and checks it succeeded (else fails with its error and
    /// every process's log).
    pub fn wait_succeeded(
        &self,
        job_id: &str,
        timeout: Duration,
    ) -> anyhow::Result<atelier_messages::job::JobView> {
        let view = self.wait_finished(job_id, timeout)?;
        anyhow::ensure!(
            view.state == atelier_messages::job::JobState::Succeeded,
            "job {job_id} ended {}: {:?}\n{}",
            view.state,
            view.error,
            self.logs()
        );
        Ok(view)
    }

    pub fn wait_finished(
        &self,
        job_id: &str,
        timeout: Duration,
    ) -> anyhow::Result<atelier_messages::job::JobView> {
        let mut finished = None;
        wait_until(timeout, || {
            let view: Option<atelier_messages::job::JobView> = self
                .cli(&["job", job_id, "--json"])
                .ok()
                .and_then(|out| out.json().ok());
            finished = view.filter(|view| view.state.is_terminal());
            finished.is_some()
        })
        .with_context(|| format!("job {job_id} did not finish\n{}", self.logs()))?;
        finished.context("job did not finish")
    }

    /// Every process log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|ext| ext == "log") {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    let tail: Vec<_> = text.lines().rev().take(40).collect();
                    out.push_str(&format!("--- {} (last lines)\n", path.display()));
                    for line in tail.into_iter().rev() {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
            }
        }
        out
    }
}

/// Sends raw bytes to a subject (with an optional Content-Type) and returns the reply payload.
pub async fn nats_request(
    client: &async_nats::Client,
    subject: &str,
    payload: Vec<u8>,
    json: bool,
) -> anyhow::Result<bytes::Bytes> {
    let mut headers = async_nats::HeaderMap::new();
    if json {
        headers.insert("Content-Type", "application/json");
    }
    let request = async_nats::Request::new()
        .payload(payload.into())
        .headers(headers)
        .timeout(Some(Duration::from_secs(300)));
    let reply = client.send_request(subject.to_string(), request).await?;
    Ok(reply.payload)
}

/// Sends one tool call (MessagePack) to `pool` with the files of `listing` and applies the
/// draft changes of its reply through `atelier.store.write`, as the coordinator does, so a write
/// tool's result is in the draft when this returns.
pub async fn call_tool(
    client: &async_nats::Client,
    listing: &atelier_messages::store::Listing,
    call_id: &str,
    tool: &str,
    args: serde_json::Value,
    pool: &str,
) -> anyhow::Result<Result<atelier_messages::tool::ToolOutput, atelier_messages::ErrorBody>> {
    use atelier_messages::store::WriteDraft;
    use atelier_messages::{
        Format, PROTOCOL_VERSION, decode_reply, encode, subjects, tool::ToolRequest,
    };
    let request = ToolRequest {
        v: PROTOCOL_VERSION,
        call_id: call_id.into(),
        job_id: None,
        workbench: listing.workbench.clone(),
        tool: tool.into(),
        args,
        files: listing.files.clone(),
    };
    let payload = encode(&request, Format::MessagePack).map_err(|e| anyhow::anyhow!("{e}"))?;
    let reply = nats_request(client, &subjects::tool(pool), payload, false).await?;
    let mut output: atelier_messages::tool::ToolOutput =
        match decode_reply(&reply, Format::MessagePack) {
            Ok(output) => output,
            Err(error) => return Ok(Err(error)),
        };
    if let Some(changes) = output.changes.take() {
        let write = WriteDraft {
            v: PROTOCOL_VERSION,
            workbench: listing.workbench.clone(),
            call_id: call_id.into(),
            files: changes.files,
            delete: changes.delete,
        };
        let policy = atelier_transport::Policy::once(Duration::from_secs(60));
        if let Err(error) = atelier_transport::request(client, &write, policy).await {
            return Ok(Err(error));
        }
    }
    Ok(Ok(output))
}

/// Every job event stored in the EVENTS stream on `subject` (a wildcard is fine), oldest first,
/// read until the stream has nothing more for half a second.
pub async fn stored_events(
    client: &async_nats::Client,
    subject: String,
) -> anyhow::Result<Vec<atelier_messages::job::JobEvent>> {
    let stored =
        stored_messages(client, atelier_messages::subjects::EVENTS_STREAM, subject).await?;
    Ok(stored.into_iter().map(|message| message.payload).collect())
}

/// A message read back from a stream.
#[derive(Debug)]
pub struct Stored<T> {
    pub subject: String,
    /// Its `Content-Type` header.
    pub content_type: Option<String>,
    pub payload: T,
}

/// Every message stored in `stream` on `subject` (a wildcard is fine), oldest first, decoded in
/// the format it states, read until the stream has nothing more for half a second.
pub async fn stored_messages<T: DeserializeOwned>(
    client: &async_nats::Client,
    stream: &str,
    subject: String,
) -> anyhow::Result<Vec<Stored<T>>> {
    use atelier_messages::decode;
    use atelier_transport::headers::format_of;
    use futures::StreamExt;
    let consumer = async_nats::jetstream::new(client.clone())
        .get_stream(stream)
        .await?
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: subject,
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    let mut stored = Vec::new();
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(500), messages.next()).await
    {
        let message = message?;
        let payload = decode(&message.payload, format_of(message.headers.as_ref()))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let content_type = message
            .headers
            .as_ref()
            .and_then(|headers| headers.get("Content-Type"))
            .map(|value| value.as_str().to_string());
        stored.push(Stored {
            subject: message.subject.to_string(),
            content_type,
            payload,
        });
    }
    Ok(stored)
}

/// The body of a docx (`word/document.xml`): the text of every `<w:t>`, in order, with its
/// markup.
pub fn docx_paragraph_text(path: &Path) -> anyhow::Result<String> {
    let mut archive = zip::ZipArchive::new(std::fs::File::open(path)?)?;
    let mut xml = String::new();
    archive
        .by_name("word/document.xml")?
        .read_to_string(&mut xml)?;
    Ok(xml)
}

/// Exports a workbench's draft into a fresh folder and returns it.
pub fn export_draft(cluster: &Cluster, workbench: &str) -> anyhow::Result<PathBuf> {
    let dir = cluster.dir.path().join(format!("export-{workbench}"));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_arg = dir.to_string_lossy().to_string();
    cluster.cli_ok(&["wb", "export", workbench, &dir_arg, "--draft"])?;
    Ok(dir)
}
