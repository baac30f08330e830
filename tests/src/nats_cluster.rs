//! A three-node nats-server cluster on loopback with JetStream (`sync_interval: always`), for
//! tests of replicated (R3) streams, buckets and fail-over. Each node is a [`NatsServer`] with
//! its own store; nodes can be SIGKILLed and restarted.

use std::path::Path;
use std::time::Duration;

use crate::{NatsServer, free_port};

/// Three clustered nats-servers, SIGKILLed on drop.
pub struct NatsCluster {
    pub nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts three nodes under `dir` (`n1`, `n2`, `n3`) and waits until JetStream has a leader.
    /// A port chosen free can be taken before a node binds it (other test binaries run beside
    /// this one): the cluster then starts again on new ports (`dir/retry-N`), three times at
    /// most.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let mut started = Self::start_on_new_ports(dir).await;
        for retry in 1..3 {
            if started.is_ok() {
                break;
            }
            started = Self::start_on_new_ports(&dir.join(format!("retry-{retry}"))).await;
        }
        started
    }

    async fn start_on_new_ports(dir: &Path) -> anyhow::Result<Self> {
        let cluster_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let routes = cluster_ports
            .iter()
            .map(|port| format!("nats://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(", ");
        let nodes = cluster_ports
            .iter()
            .enumerate()
            .map(|(index, cluster_port)| {
                let name = format!("n{}", index + 1);
                let cluster = format!(
                    "server_name: {name}\n\
                     cluster {{ name: atelier, host: 127.0.0.1, port: {cluster_port}, routes: [{routes}] }}\n"
                );
                NatsServer::start_synced_with(&dir.join(&name), &cluster)
            })
            .collect::<anyhow::Result<_>>()?;
        let cluster = Self { nodes };
        cluster.wait_for_jetstream().await?;
        Ok(cluster)
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
        self.nodes[index].url.clone()
    }

    /// SIGKILLs node `index`.
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// Starts node `index` again on its port and store.
    pub fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        self.nodes[index].restart()
    }

    /// Every node's log.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(index, node)| format!("--- n{} ---\n{}", index + 1, node.log()))
            .collect()
    }
}
