//! NATS is the trust boundary: the server `atelier up` starts admits three users, each allowed
//! only what its role needs.
//!
//! - `coordinator`: everything (it owns the streams, the store and the control plane).
//! - `worker`: answers tool calls (`atelier.tool.>`) and the micro-service verbs (`$SRV.>`),
//!   replies and sends progress to inboxes, fetches blobs (`atelier.store.blob`, or asks
//!   `atelier.store.stage` and reads and writes the blob bucket `atelier-blobs`); it cannot
//!   write drafts, submit jobs or use the control plane.
//! - `client` (CLI, dashboard, scripts): sends store, control and tool requests, submits and
//!   follows jobs through JetStream; it cannot answer any Atelier subject (it subscribes only to
//!   its inboxes), so it cannot impersonate the store, a worker or the coordinator.
//!
//! Passwords are random per start. The client's URL (`nats://client:PASSWORD@HOST:PORT`,
//! usable as-is by the `nats` CLI) is written to `<data>/nats.url` and the worker's to
//! `<data>/nats-worker.url` (for more workers on the host), both readable by their owner only.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use rand::Rng;
use rand::distr::Alphanumeric;

/// A user of the embedded server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Coordinator,
    Worker,
    Client,
}

impl Role {
    fn user(self) -> &'static str {
        match self {
            Role::Coordinator => "coordinator",
            Role::Worker => "worker",
            Role::Client => "client",
        }
    }

    /// The role's `permissions` block in nats-server's configuration syntax.
    fn permissions(self) -> &'static str {
        match self {
            Role::Coordinator => "",
            Role::Worker => concat!(
                r#", permissions: { publish: { allow: ["_INBOX.>", "atelier.store.blob", "atelier.store.stage", "$SRV.>", "#,
                r#""atelier.pool.>", "$O.atelier-blobs.>", "$JS.FC.>", "$JS.API.INFO", "$JS.API.STREAM.INFO.OBJ_atelier-blobs", "#,
                r#""$JS.API.STREAM.MSG.GET.OBJ_atelier-blobs", "$JS.API.DIRECT.GET.OBJ_atelier-blobs.>", "#,
                r#""$JS.API.STREAM.PURGE.OBJ_atelier-blobs", "$JS.API.CONSUMER.CREATE.OBJ_atelier-blobs", "#,
                r#""$JS.API.CONSUMER.CREATE.OBJ_atelier-blobs.>", "$JS.API.CONSUMER.DELETE.OBJ_atelier-blobs.>"] }, "#,
                r#"subscribe: { allow: ["atelier.tool.>", "$SRV.>", "_INBOX.>"] } }"#
            ),
            Role::Client => concat!(
                r#", permissions: { publish: { allow: ["atelier.store.>", "atelier.ctl.>", "atelier.tool.>", "atelier.workshop.>", "atelier.batch.>", "#,
                r#""atelier.job.submit", "$JS.API.>", "$JS.FC.>", "$O.atelier-blobs.>", "$SRV.>", "_INBOX.>"] }, "#,
                r#"subscribe: { allow: ["_INBOX.>"] } }"#
            ),
        }
    }
}

/// The three users' passwords for one start of the server.
#[derive(Clone)]
pub struct Roles {
    coordinator: String,
    worker: String,
    client: String,
}

impl std::fmt::Debug for Roles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Roles { .. }")
    }
}

fn password() -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

impl Roles {
    pub fn generate() -> Self {
        Self {
            coordinator: password(),
            worker: password(),
            client: password(),
        }
    }

    fn password(&self, role: Role) -> &str {
        match role {
            Role::Coordinator => &self.coordinator,
            Role::Worker => &self.worker,
            Role::Client => &self.client,
        }
    }

    /// The server's `authorization` block.
    pub fn authorization(&self) -> String {
        let users: Vec<String> = [Role::Coordinator, Role::Worker, Role::Client]
            .into_iter()
            .map(|role| {
                format!(
                    "    {{ user: \"{}\", password: \"{}\"{} }}",
                    role.user(),
                    self.password(role),
                    role.permissions()
                )
            })
            .collect();
        format!(
            "authorization {{\n  users = [\n{}\n  ]\n}}\n",
            users.join("\n")
        )
    }

    /// `nats://USER:PASSWORD@HOST:PORT` for `role` on the server at `host_port`.
    pub fn url(&self, role: Role, host_port: &str) -> String {
        format!("nats://{}:{}@{host_port}", role.user(), self.password(role))
    }
}

/// `url` without its user and password, for printing.
pub fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, host))) => format!("{scheme}://{host}"),
        _ => url.to_string(),
    }
}

/// Writes `contents` to `path` readable and writable by its owner only.
pub fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(contents.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_carry_the_role_and_printing_hides_it() {
        let roles = Roles::generate();
        let url = roles.url(Role::Client, "127.0.0.1:4222");
        assert!(url.starts_with("nats://client:"));
        assert_eq!(redact(&url), "nats://127.0.0.1:4222");
        assert_eq!(redact("nats://h:1"), "nats://h:1");
        assert!(!format!("{roles:?}").contains(&roles.client));
        let block = roles.authorization();
        assert_eq!(block.matches("user:").count(), 3);
        assert!(block.contains("atelier.store.blob"));
    }

    #[test]
    fn private_files_are_for_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("nats.url");
        write_private(&path, "secret").unwrap_or_else(|e| panic!("{e}"));
        write_private(&path, "again").unwrap_or_else(|e| panic!("{e}"));
        let mode = std::fs::metadata(&path)
            .map(|meta| meta.permissions().mode() & 0o777)
            .unwrap_or_default();
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap_or_default(), "again");
    }
}
