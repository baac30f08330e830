//! NATS is the trust boundary, and accounts draw it (docs/adr/0016): the server `atelier up`
//! starts holds the coordinators with JetStream in one account and clients and workers each in
//! an account of their own, which reach the core only through the services it exports to them
//! ([`atelier_messages::access`]). The accounts are data: the embedded server's configuration,
//! the tables, the accounts example and the `nsc` commands in docs/operations.md are all made
//! from them, and a test keeps the document equal to the code.
//!
//! Passwords are random per start. The client's URL (`nats://client:PASSWORD@HOST:PORT`,
//! usable as-is by the `nats` CLI with `--inbox-prefix _INBOX_client`) is written to
//! `<data>/nats.url` and the worker's to `<data>/nats-worker.url` (for the workers `atelier up`
//! starts and more workers on the host), both readable by their owner only.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
pub use atelier_messages::access::Role;
use atelier_messages::access::{ANSWER_WITHIN, Account, RESPONSES_MAX, services};
use rand::Rng;
use rand::distr::Alphanumeric;

/// A role's `permissions` block in nats-server's configuration syntax (none for a role that
/// may publish anywhere and subscribe to anything in its account).
fn permissions(role: Role) -> String {
    let rights = role.rights();
    if rights.publish == [">"] && rights.subscribe == [">"] {
        return String::new();
    }
    let responses = match rights.responds {
        true => {
            format!(", allow_responses: {{ max: {RESPONSES_MAX}, expires: \"{ANSWER_WITHIN}\" }}")
        }
        false => String::new(),
    };
    format!(
        ", permissions: {{ publish: {{ allow: [{}] }}, subscribe: {{ allow: [{}] }}{responses} }}",
        quoted(&rights.publish),
        quoted(&rights.subscribe)
    )
}

fn quoted<T: std::fmt::Debug>(subjects: impl IntoIterator<Item = T>) -> String {
    subjects
        .into_iter()
        .map(|subject| format!("{subject:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `accounts` block: each account with its one role's user (its password as `password`
/// gives it), the services it exports to the accounts that call them, and those it imports.
fn accounts_block(indent: &str, password: impl Fn(Role) -> String) -> String {
    let mut block = format!("{indent}accounts {{\n");
    for account in Account::ALL {
        let inner = format!("{indent}    ");
        block.push_str(&format!("{indent}  {} {{\n", account.name()));
        if account.jetstream() {
            block.push_str(&format!("{inner}jetstream: enabled\n"));
        }
        let role = account.role();
        block.push_str(&format!(
            "{inner}users = [\n{inner}  {{ user: \"{}\", password: {}{} }}\n{inner}]\n",
            role.user(),
            password(role),
            permissions(role)
        ));
        let exports: Vec<String> = services()
            .filter(|service| service.exporter == account)
            .map(|service| {
                format!(
                    "{inner}  {{ service: {:?}, accounts: [{}], response_type: {}, response_threshold: \"{ANSWER_WITHIN}\" }}",
                    service.subject,
                    quoted(service.importers.iter().map(|account| account.name())),
                    service.answers.response_type().to_lowercase()
                )
            })
            .collect();
        if !exports.is_empty() {
            block.push_str(&format!(
                "{inner}exports = [\n{}\n{inner}]\n",
                exports.join("\n")
            ));
        }
        let imports: Vec<String> = services()
            .filter(|service| service.importers.contains(&account))
            .map(|service| {
                format!(
                    "{inner}  {{ service: {{ account: {:?}, subject: {:?} }} }}",
                    service.exporter.name(),
                    service.subject
                )
            })
            .collect();
        if !imports.is_empty() {
            block.push_str(&format!(
                "{inner}imports = [\n{}\n{inner}]\n",
                imports.join("\n")
            ));
        }
        block.push_str(&format!("{indent}  }}\n"));
    }
    block.push_str(&format!("{indent}}}\n"));
    block
}

/// The services between accounts as a Markdown table (docs/operations.md holds it verbatim).
#[cfg(test)]
fn services_table() -> String {
    let mut table =
        String::from("| subject | served in | called from | answers |\n|---|---|---|---|\n");
    for service in services() {
        let importers: Vec<String> = service
            .importers
            .iter()
            .map(|account| format!("`{}`", account.name()))
            .collect();
        table.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            service.subject,
            service.exporter.name(),
            importers.join(" "),
            match service.answers {
                atelier_messages::access::Answers::One => "one reply",
                atelier_messages::access::Answers::Many => "replies and progress",
            }
        ));
    }
    table
}

/// The roles' rights within their accounts as a Markdown table (docs/operations.md holds it
/// verbatim).
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
        "| role | account | may publish to | may subscribe to | answers requests it received |\n|---|---|---|---|---|\n",
    );
    for role in Role::ALL {
        let atelier_messages::access::Rights {
            publish,
            subscribe,
            responds,
        } = role.rights();
        table.push_str(&format!(
            "| `{}` | `{}` | {} | {} | {} |\n",
            role.user(),
            role.account().name(),
            code(&publish),
            code(&subscribe),
            match responds {
                true => format!("yes (at most {RESPONSES_MAX} messages within {ANSWER_WITHIN})"),
                false => "no".to_string(),
            }
        ));
    }
    table
}

/// The `nsc` commands that make the same accounts on an operator-mode server (exports are
/// public to the operator's accounts there: nsc restricts them only with activation tokens).
#[cfg(test)]
fn nsc_commands() -> String {
    let mut lines = Vec::new();
    for account in Account::ALL {
        lines.push(format!("nsc add account --name {}", account.name()));
        if account.jetstream() {
            lines.push(format!(
                "nsc edit account --name {} --js-mem-storage=-1 --js-disk-storage=-1 --js-streams=-1 --js-consumer=-1",
                account.name()
            ));
        }
    }
    for service in services() {
        let subject = service.subject.replace('$', "\\$");
        lines.push(format!(
            "nsc add export --account {} --service --subject \"{subject}\" --response-type {} --response-threshold {ANSWER_WITHIN}",
            service.exporter.name(),
            service.answers.response_type()
        ));
        for importer in service.importers {
            lines.push(format!(
                "nsc add import --account {} --src-account {} --service --remote-subject \"{subject}\"",
                importer.name(),
                service.exporter.name()
            ));
        }
    }
    for role in Role::ALL {
        let rights = role.rights();
        let mut line = format!(
            "nsc add user -a {} --name {}",
            role.account().name(),
            role.user()
        );
        if rights.publish != [">"] {
            let list = |subjects: &[String]| subjects.join(",").replace('$', "\\$");
            line.push_str(&format!(
                " --allow-pub \"{}\" --allow-sub \"{}\"",
                list(&rights.publish),
                list(&rights.subscribe)
            ));
        }
        if rights.responds {
            line.push_str(&format!(
                " --allow-pub-response={RESPONSES_MAX} --response-ttl {ANSWER_WITHIN}"
            ));
        }
        lines.push(line);
    }
    lines.join("\n") + "\n"
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

    /// The server's `accounts` block (docs/adr/0016).
    pub fn accounts(&self) -> String {
        accounts_block("", |role| format!("{:?}", self.password(role)))
    }

    /// `nats://USER:PASSWORD@HOST:PORT` for `role` on the server at `host_port`.
    pub fn url(&self, role: Role, host_port: &str) -> String {
        format!("nats://{}:{}@{host_port}", role.user(), self.password(role))
    }
}

/// The operator's example in docs/operations.md: the three accounts, passwords from the
/// environment.
#[cfg(test)]
fn accounts_example() -> String {
    accounts_block("", |role| {
        format!("${}_PASSWORD", role.user().to_uppercase())
    })
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

/// `url` without its user and password, for printing (each server of a comma-separated list).
pub fn redact(url: &str) -> String {
    url.split(',')
        .map(|server| {
            let server = server.trim();
            match (server.split_once("://"), server.rsplit_once('@')) {
                (Some((scheme, _)), Some((_, host))) => format!("{scheme}://{host}"),
                _ => server.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
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
        let block = roles.accounts();
        assert_eq!(block.matches("user:").count(), 3);
        assert_eq!(block.matches("jetstream: enabled").count(), 1);
        assert!(block.contains("atelier.store.blob"));
        assert!(
            !block.contains("$JS."),
            "no JetStream API crosses an account"
        );
    }

    /// docs/operations.md shows the accounts the code makes: the tables, the accounts example
    /// and the `nsc` commands are the code's own output, so a new verb cannot be granted and
    /// not documented.
    #[test]
    fn the_operations_guide_shows_the_accounts_as_the_code_makes_them() {
        let guide = include_str!("../../docs/operations.md");
        for (what, text) in [
            ("services table", services_table()),
            ("rights table", rights_table()),
            ("accounts example", accounts_example()),
            ("nsc commands", nsc_commands()),
        ] {
            assert!(
                guide.contains(&text),
                "docs/operations.md must hold this {what} verbatim:\n{text}"
            );
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
