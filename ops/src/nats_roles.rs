//! NATS is the trust boundary: the server `atelier up` starts admits three users, each allowed
//! only what its role needs. The rights are data ([`Role::rights`]): the embedded server's
//! configuration, the table in docs/operations.md ([`rights_table`]) and the operator's example
//! there are all made from it, and a test keeps the document equal to the code.
//!
//! - `coordinator`: publishes anywhere (it owns the streams, the store and the control plane);
//!   subscribes to the Atelier subjects, `$SRV.>` and its own inboxes only.
//! - `worker`: serves tool calls (`atelier.tool.*`), content reviews (`atelier.review.*`) and the
//!   micro-service verbs (`$SRV.>`), answering only the requests it received
//!   (`allow_responses`: a reply and progress messages); fetches blobs (`atelier.store.blob`,
//!   or asks `atelier.store.stage` and reads and writes the blob bucket `atelier-blobs`); it
//!   cannot write drafts, submit jobs or use the control plane.
//! - `client` (CLI, dashboard, scripts): sends store, control, workshop, batch and tool requests,
//!   submits jobs, follows the event streams through consumers of its own and moves blobs
//!   through the bucket; it subscribes to its own inboxes only, so it cannot answer any Atelier
//!   subject, read another role's replies, or administer JetStream.
//!
//! Passwords are random per start. The client's URL (`nats://client:PASSWORD@HOST:PORT`,
//! usable as-is by the `nats` CLI with `--inbox-prefix _INBOX_client`) is written to
//! `<data>/nats.url` and the worker's to `<data>/nats-worker.url` (for more workers on the
//! host), both readable by their owner only.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use atelier_messages::subjects::{self, inbox};
use rand::Rng;
use rand::distr::Alphanumeric;

/// A user of the embedded server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Coordinator,
    Worker,
    Client,
}

/// What one role may do on the bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rights {
    /// Subjects it may publish to (`>` for any).
    pub publish: Vec<String>,
    /// Subjects it may subscribe to.
    pub subscribe: Vec<String>,
    /// Whether it may answer the requests it received (a reply and progress messages, within
    /// [`RESPONSES_MAX`] messages and [`RESPONSES_EXPIRE`]), wherever they asked to be
    /// answered.
    pub responds: bool,
}

/// Most messages a responder may send to one request's reply subject: progress every 2 s for a
/// tool call's 600 s, and the reply.
pub const RESPONSES_MAX: u32 = 1000;
/// How long a responder may answer a request: past a tool call's longest try.
pub const RESPONSES_EXPIRE: &str = "20m";

/// The JetStream API subjects that read a stream through a consumer of one's own: the stream's
/// info, creating, reading and removing consumers, and direct reads of a message.
fn stream_reader(stream: &str) -> Vec<String> {
    [
        format!("$JS.API.STREAM.INFO.{stream}"),
        format!("$JS.API.STREAM.MSG.GET.{stream}"),
        format!("$JS.API.DIRECT.GET.{stream}.>"),
        format!("$JS.API.CONSUMER.CREATE.{stream}"),
        format!("$JS.API.CONSUMER.CREATE.{stream}.>"),
        format!("$JS.API.CONSUMER.INFO.{stream}.*"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.*"),
        format!("$JS.API.CONSUMER.DELETE.{stream}.*"),
    ]
    .into()
}

/// Everything a role needs of the blob bucket: its objects, flow control, and the bucket's stream
/// read and purged of an object's replaced chunks (never created or deleted).
fn blob_bucket() -> Vec<String> {
    let stream = format!("OBJ_{}", subjects::BLOB_BUCKET);
    let mut rights = vec![
        format!("$O.{}.>", subjects::BLOB_BUCKET),
        "$JS.FC.>".to_string(),
        "$JS.API.INFO".to_string(),
        format!("$JS.API.STREAM.PURGE.{stream}"),
    ];
    rights.extend(stream_reader(&stream));
    rights
}

fn strings(subjects: &[&str]) -> Vec<String> {
    subjects.iter().map(|subject| subject.to_string()).collect()
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Coordinator, Role::Worker, Role::Client];

    pub fn user(self) -> &'static str {
        match self {
            Role::Coordinator => "coordinator",
            Role::Worker => "worker",
            Role::Client => "client",
        }
    }

    /// The prefix of the role's reply inboxes; its connections must use it.
    pub fn inbox_prefix(self) -> &'static str {
        match self {
            Role::Coordinator => inbox::COORDINATOR,
            Role::Worker => inbox::WORKER,
            Role::Client => inbox::CLIENT,
        }
    }

    /// What the role may do.
    pub fn rights(self) -> Rights {
        let own_inboxes = format!("{}.>", self.inbox_prefix());
        match self {
            Role::Coordinator => Rights {
                publish: strings(&[">"]),
                subscribe: vec!["atelier.>".into(), "$SRV.>".into(), own_inboxes],
                responds: false,
            },
            Role::Worker => {
                let mut publish = strings(&[
                    subjects::store::BLOB,
                    subjects::store::STAGE,
                    "atelier.pool.*.scaled",
                    "$SRV.>",
                ]);
                publish.extend(blob_bucket());
                Rights {
                    publish,
                    subscribe: vec![
                        "atelier.tool.*".into(),
                        subjects::review::WILDCARD.into(),
                        "$SRV.>".into(),
                        own_inboxes,
                    ],
                    responds: true,
                }
            }
            Role::Client => {
                let mut publish = strings(&[
                    subjects::store::WILDCARD,
                    subjects::ctl::WILDCARD,
                    subjects::workshop::WILDCARD,
                    subjects::batch::WILDCARD,
                    "atelier.tool.*",
                    subjects::JOB_SUBMIT,
                    "$SRV.>",
                ]);
                publish.extend(stream_reader(subjects::EVENTS_STREAM));
                publish.extend(stream_reader(subjects::workshop::EVENTS_STREAM));
                publish.extend(stream_reader(subjects::batch::EVENTS_STREAM));
                publish.extend(blob_bucket());
                Rights {
                    publish,
                    subscribe: vec![own_inboxes],
                    responds: false,
                }
            }
        }
    }

    /// The role's `permissions` block in nats-server's configuration syntax (none for a role
    /// that may publish anywhere and subscribe to anything).
    fn permissions(self) -> String {
        let rights = self.rights();
        let quoted = |subjects: &[String]| {
            subjects
                .iter()
                .map(|subject| format!("{subject:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let responses = match rights.responds {
            true => format!(
                ", allow_responses: {{ max: {RESPONSES_MAX}, expires: \"{RESPONSES_EXPIRE}\" }}"
            ),
            false => String::new(),
        };
        format!(
            ", permissions: {{ publish: {{ allow: [{}] }}, subscribe: {{ allow: [{}] }}{responses} }}",
            quoted(&rights.publish),
            quoted(&rights.subscribe)
        )
    }
}

/// The roles' rights as a Markdown table (docs/operations.md holds it verbatim).
#[cfg(test)]
fn rights_table() -> String {
    let code = |subjects: &[String]| {
        subjects
            .iter()
            .map(|subject| format!("`{subject}`"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut table = String::from(
        "| role | may publish to | may subscribe to | answers requests it received |\n|---|---|---|---|\n",
    );
    for role in Role::ALL {
        let rights = role.rights();
        table.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            role.user(),
            code(&rights.publish),
            code(&rights.subscribe),
            match rights.responds {
                true => format!("yes (at most {RESPONSES_MAX} messages within {RESPONSES_EXPIRE})"),
                false => "no".to_string(),
            }
        ));
    }
    table
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
        format!(
            "authorization {{\n  users = [\n{}\n  ]\n}}\n",
            users("    ", |role| format!("{:?}", self.password(role)))
        )
    }

    /// `nats://USER:PASSWORD@HOST:PORT` for `role` on the server at `host_port`.
    pub fn url(&self, role: Role, host_port: &str) -> String {
        format!("nats://{}:{}@{host_port}", role.user(), self.password(role))
    }
}

/// The three users' entries, one a line after `indent`, with the password `password` gives.
fn users(indent: &str, password: impl Fn(Role) -> String) -> String {
    Role::ALL
        .into_iter()
        .map(|role| {
            format!(
                "{indent}{{ user: \"{}\", password: {}{} }}",
                role.user(),
                password(role),
                role.permissions()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The operator's example in docs/operations.md: an account of the three users with the roles'
/// rights, passwords from the environment.
#[cfg(test)]
fn account_example() -> String {
    format!(
        "accounts {{\n  ATELIER {{\n    jetstream: enabled\n    users = [\n{}\n    ]\n  }}\n}}\n",
        users("      ", |role| format!(
            "${}_PASSWORD",
            role.user().to_uppercase()
        ))
    )
}

/// `recorded` (a URL with a role's credentials that `atelier up` wrote) when `url` names the same
/// server without credentials of its own.
pub fn recorded_credentials(url: &str, recorded: &str) -> Option<String> {
    let bare = |url: &str| {
        url.trim()
            .trim_start_matches("nats://")
            .trim_end_matches('/')
            .to_string()
    };
    let carries_user = redact(url) != url;
    let same_server = !recorded.is_empty() && bare(&redact(recorded)) == bare(url);
    (!carries_user && same_server && redact(recorded) != recorded).then(|| recorded.to_string())
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

    /// docs/operations.md shows the rights the code grants: the table and the operator's
    /// example are the code's own output, so a new verb cannot be granted and not documented.
    #[test]
    fn the_operations_guide_shows_the_roles_rights_as_the_code_grants_them() {
        let guide = include_str!("../../docs/operations.md");
        assert!(
            guide.contains(&rights_table()),
            "docs/operations.md must hold this table verbatim:\n{}",
            rights_table()
        );
        assert!(
            guide.contains(&account_example()),
            "docs/operations.md must hold this example verbatim:\n{}",
            account_example()
        );
    }

    #[test]
    fn no_role_may_read_another_roles_replies_and_only_the_coordinator_administers_jetstream() {
        for role in Role::ALL {
            let rights = role.rights();
            for subject in &rights.subscribe {
                assert!(!subject.starts_with("_INBOX."), "{role:?} reads {subject}");
                let other_inbox = Role::ALL
                    .into_iter()
                    .filter(|other| *other != role)
                    .any(|other| subject.starts_with(other.inbox_prefix()));
                assert!(!other_inbox, "{role:?} reads {subject}");
            }
            if role == Role::Coordinator {
                continue;
            }
            for subject in &rights.publish {
                assert!(
                    !subject.contains("_INBOX") && subject != ">" && subject != "$JS.API.>",
                    "{role:?} publishes to {subject}"
                );
                let administers = ["STREAM.CREATE", "STREAM.UPDATE", "STREAM.DELETE"]
                    .iter()
                    .any(|verb| subject.contains(verb));
                assert!(!administers, "{role:?} publishes to {subject}");
            }
        }
    }

    #[test]
    fn a_bare_url_of_the_recorded_server_takes_its_credentials() {
        let recorded = "nats://client:secret@127.0.0.1:4222";
        for url in [
            "nats://127.0.0.1:4222",
            "127.0.0.1:4222",
            "nats://127.0.0.1:4222/",
        ] {
            assert_eq!(
                recorded_credentials(url, recorded).as_deref(),
                Some(recorded),
                "{url}"
            );
        }
        assert_eq!(
            recorded_credentials("nats://127.0.0.1:4223", recorded),
            None
        );
        assert_eq!(
            recorded_credentials("nats://other:pw@127.0.0.1:4222", recorded),
            None
        );
        assert_eq!(recorded_credentials("nats://127.0.0.1:4222", ""), None);
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
