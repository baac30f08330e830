//! A three-node nats-server cluster on loopback with JetStream (`sync_interval: always`), for
//! tests of replicated (R3) streams, buckets and fail-over. Each node has its own store; nodes
//! can be SIGKILLed and restarted.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use crate::{free_port, wait_until};

/// One node of the cluster.
struct Node {
    name: String,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// Three clustered nats-servers, SIGKILLed on drop.
pub struct NatsCluster {
    nodes: Vec<Node>,
}

impl NatsCluster {
    /// Starts three nodes under `dir` and waits until JetStream has a leader.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let cluster_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let routes = cluster_ports
            .iter()
            .map(|port| format!("nats://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut nodes = Vec::new();
        for (index, cluster_port) in cluster_ports.iter().enumerate() {
            let name = format!("n{}", index + 1);
            let dir = dir.join(&name);
            std::fs::create_dir_all(&dir)?;
            let port = free_port();
            std::fs::write(
                dir.join("nats.conf"),
                format!(
                    "server_name: {name}\nhost: 127.0.0.1\nport: {port}\n\
                     jetstream {{ store_dir: {:?}, sync_interval: always }}\n\
                     cluster {{ name: atelier, host: 127.0.0.1, port: {cluster_port}, routes: [{routes}] }}\n",
                    dir.join("js").display().to_string()
                ),
            )?;
            nodes.push(Node {
                name,
                port,
                dir,
                child: None,
            });
        }
        let mut cluster = Self { nodes };
        for index in 0..3 {
            cluster.spawn(index)?;
        }
        cluster.wait_for_jetstream().await?;
        Ok(cluster)
    }

    fn spawn(&mut self, index: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[index];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.dir.join("nats-server.log"))?;
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(node.dir.join("nats.conf"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("nats-server not found: run scripts/setup.sh")?;
        node.child = Some(child);
        let (port, name) = (node.port, node.name.clone());
        wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .with_context(|| format!("{name} did not start:\n{}", self.logs()))
    }

    /// Waits until a JetStream request answers (the meta group has a leader).
    async fn wait_for_jetstream(&self) -> anyhow::Result<()> {
        let client = async_nats::connect(self.addrs()?).await?;
        let jetstream = async_nats::jetstream::new(client);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::time::Instant::now() < deadline {
            if jetstream.query_account().await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        anyhow::bail!("JetStream elected no leader in 30 s:\n{}", self.logs())
    }

    /// Every node's address, so a client moves to another when its node dies; `first` is the
    /// one it tries first.
    pub fn addrs_from(&self, first: usize) -> anyhow::Result<Vec<async_nats::ServerAddr>> {
        let count = self.nodes.len();
        (0..count)
            .map(|offset| Ok(self.node_url((first + offset) % count).parse()?))
            .collect()
    }

    /// Every node's address.
    pub fn addrs(&self) -> anyhow::Result<Vec<async_nats::ServerAddr>> {
        self.addrs_from(0)
    }

    /// The URL of node `index` alone.
    pub fn node_url(&self, index: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[index].port)
    }

    /// SIGKILLs node `index`.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.nodes[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `index` again on its port and store.
    pub fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        self.kill(index);
        self.spawn(index)
    }

    /// Every node's log.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|node| {
                let log =
                    std::fs::read_to_string(node.dir.join("nats-server.log")).unwrap_or_default();
                format!("--- {} ---\n{log}", node.name)
            })
            .collect()
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for index in 0..self.nodes.len() {
            self.kill(index);
        }
    }
}
