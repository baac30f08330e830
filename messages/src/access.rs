//! Who may reach what on the bus: the deployment's NATS accounts (docs/adr/0016).
//!
//! An account is NATS's own boundary: a message published in one account reaches no
//! subscriber of another, and a JetStream API call is served only in the account that has
//! JetStream. Atelier uses three:
//!
//! - [`Account::Core`] (`ATELIER`): the coordinators, with JetStream (the job and event streams,
//!   the store's changelog, leases, buckets). Nothing else connects to it.
//! - [`Account::Clients`] (`ATELIER_CLIENTS`): the CLI, the dashboard, scripts. No JetStream.
//! - [`Account::Workers`] (`ATELIER_WORKERS`): tool workers and pool supervisors. No JetStream.
//!
//! The accounts meet only through [`services`]: request/reply subjects one account exports and
//! the others import. The server routes an imported request's answers back to the requester
//! only, through a reply subject of its own making, so a requester that names someone else's
//! subject as its reply reaches nothing beyond its own account. JetStream's API (which
//! publishes on a caller's behalf to any reply or deliver subject it names) is never exported:
//! clients submit jobs by publishing to [`JOB_SUBMIT`](crate::subjects::JOB_SUBMIT), which the
//! core account exports as a service (the stream's acknowledgement is the answer), follow
//! events through `atelier.ctl.events`, and move blobs through `atelier.store.blob` and
//! `atelier.store.upload`.
//!
//! The embedded server's configuration, the documented example and the operator-mode accounts
//! are all made from this table, and the attack suite (tests/tests/attacks.rs) has a case for
//! every subject in it.

use crate::subjects::{self, inbox};

/// A NATS account of the deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Account {
    /// The coordinators and JetStream.
    Core,
    /// CLI, dashboard, scripts.
    Clients,
    /// Tool workers and pool supervisors.
    Workers,
}

impl Account {
    pub const ALL: [Account; 3] = [Account::Core, Account::Clients, Account::Workers];

    /// The account's name in the server's configuration.
    pub fn name(self) -> &'static str {
        match self {
            Account::Core => "ATELIER",
            Account::Clients => "ATELIER_CLIENTS",
            Account::Workers => "ATELIER_WORKERS",
        }
    }

    /// Whether the account has JetStream (only the core's).
    pub fn jetstream(self) -> bool {
        self == Account::Core
    }

    /// The role whose users this account holds.
    pub fn role(self) -> Role {
        match self {
            Account::Core => Role::Coordinator,
            Account::Clients => Role::Client,
            Account::Workers => Role::Worker,
        }
    }
}

/// A kind of connection, one per account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Coordinator,
    Worker,
    Client,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Coordinator, Role::Worker, Role::Client];

    /// The user name of the role on the embedded server.
    pub fn user(self) -> &'static str {
        match self {
            Role::Coordinator => "coordinator",
            Role::Worker => "worker",
            Role::Client => "client",
        }
    }

    /// The account the role's users are in.
    pub fn account(self) -> Account {
        match self {
            Role::Coordinator => Account::Core,
            Role::Worker => Account::Workers,
            Role::Client => Account::Clients,
        }
    }

    /// The prefix of the role's reply inboxes; its connections use it.
    pub fn inbox_prefix(self) -> &'static str {
        match self {
            Role::Coordinator => inbox::COORDINATOR,
            Role::Worker => inbox::WORKER,
            Role::Client => inbox::CLIENT,
        }
    }
}

/// How many messages answer one request of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answers {
    /// One reply.
    One,
    /// Progress messages and a reply (a long call), or one reply from each of many responders
    /// (`$SRV.PING`).
    Many,
}

impl Answers {
    /// NATS's name of the export's response type (`Singleton`, `Stream`), as JWTs and `nsc`
    /// spell it; server configurations take it in lower case.
    pub fn response_type(self) -> &'static str {
        match self {
            Answers::One => "Singleton",
            Answers::Many => "Stream",
        }
    }
}

/// A request/reply subject one account exports to others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Service {
    /// The subject (a wildcard for a family of verbs).
    pub subject: &'static str,
    /// The account that serves it.
    pub exporter: Account,
    /// The accounts that may call it.
    pub importers: &'static [Account],
    pub answers: Answers,
}

/// How long an exported service may take to answer (past a tool call's longest try, a large
/// import's 900 s): the server forgets where to route a request's answers after it.
pub const ANSWER_WITHIN: &str = "20m";

/// The store's verbs clients call, and those workers call too (a blob's pieces): each is
/// exported by its own subject, since an export may not overlap another (`atelier.store.*`
/// would hold `atelier.store.blob`, which workers import).
fn store_services() -> impl Iterator<Item = Service> {
    const CLIENTS_AND_WORKERS: &[Account] = &[Account::Clients, Account::Workers];
    subjects::store::ALL.into_iter().map(|subject| Service {
        subject,
        exporter: Account::Core,
        importers: match subject {
            subjects::store::BLOB | subjects::store::UPLOAD => CLIENTS_AND_WORKERS,
            _ => &[Account::Clients],
        },
        answers: Answers::Many,
    })
}

/// Every other service one account offers another.
const SERVICES: [Service; 7] = [
    Service {
        subject: subjects::ctl::WILDCARD,
        exporter: Account::Core,
        importers: &[Account::Clients],
        answers: Answers::Many,
    },
    Service {
        subject: subjects::workshop::WILDCARD,
        exporter: Account::Core,
        importers: &[Account::Clients],
        answers: Answers::Many,
    },
    Service {
        subject: subjects::batch::WILDCARD,
        exporter: Account::Core,
        importers: &[Account::Clients],
        answers: Answers::Many,
    },
    Service {
        subject: subjects::JOB_SUBMIT,
        exporter: Account::Core,
        importers: &[Account::Clients],
        answers: Answers::One,
    },
    // Clients run read tools directly too (the MCP server's reads).
    Service {
        subject: subjects::TOOL_WILDCARD,
        exporter: Account::Workers,
        importers: &[Account::Core, Account::Clients],
        answers: Answers::Many,
    },
    Service {
        subject: subjects::review::WILDCARD,
        exporter: Account::Workers,
        importers: &[Account::Core],
        answers: Answers::Many,
    },
    // The micro-service verbs (`$SRV.PING|INFO|STATS`) of workers and pool supervisors, which
    // clients ask (the dashboard, `atelier workers`).
    Service {
        subject: MICRO_SERVICES,
        exporter: Account::Workers,
        importers: &[Account::Clients],
        answers: Answers::Many,
    },
];

/// The micro-service verbs' subjects.
pub const MICRO_SERVICES: &str = "$SRV.>";

/// Every service one account offers another; nothing else crosses an account. No two exports
/// of one account overlap (operator mode refuses an account whose do).
pub fn services() -> impl Iterator<Item = Service> {
    store_services().chain(SERVICES)
}

/// What a role's users may do inside their account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rights {
    /// Subjects it may publish to (`>` for any): the services its account imports and the
    /// subjects its account serves to its own users.
    pub publish: Vec<String>,
    /// Subjects it may subscribe to.
    pub subscribe: Vec<String>,
    /// Whether it may answer the requests it received (a reply and progress messages, within
    /// [`RESPONSES_MAX`] messages and [`ANSWER_WITHIN`]).
    pub responds: bool,
}

/// Most messages a responder may send to one request's reply subject: progress every 2 s for a
/// tool call's 600 s, and the reply.
pub const RESPONSES_MAX: u32 = 1000;

impl Role {
    /// What the role's users may do in their account: defence in depth within it (the account
    /// is the boundary).
    pub fn rights(self) -> Rights {
        let own_inboxes = format!("{}.>", self.inbox_prefix());
        let imported = |account: Account| {
            services()
                .filter(|service| service.importers.contains(&account))
                .map(|service| service.subject.to_string())
                .collect::<Vec<_>>()
        };
        match self {
            Role::Coordinator => Rights {
                publish: vec![">".into()],
                subscribe: vec![">".into()],
                responds: false,
            },
            Role::Worker => {
                let mut publish = imported(Account::Workers);
                // A pool supervisor reports its decisions and asks its workers' numbers.
                publish.extend([subjects::POOL_SCALED.to_string(), MICRO_SERVICES.into()]);
                Rights {
                    publish,
                    subscribe: vec![
                        subjects::TOOL_WILDCARD.into(),
                        subjects::review::WILDCARD.into(),
                        MICRO_SERVICES.into(),
                        own_inboxes,
                    ],
                    responds: true,
                }
            }
            Role::Client => Rights {
                publish: imported(Account::Clients),
                subscribe: vec![own_inboxes],
                responds: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_core_has_jetstream_and_no_service_exposes_its_api() {
        for account in Account::ALL {
            assert_eq!(account.jetstream(), account == Account::Core);
            assert_eq!(account.role().account(), account);
        }
        for service in services() {
            assert!(!service.subject.starts_with("$JS"), "{service:?}");
            assert!(!service.subject.starts_with("$O."), "{service:?}");
            assert!(!service.subject.starts_with("$KV."), "{service:?}");
            assert!(!service.subject.contains("shard"), "{service:?}");
            assert!(
                !service.importers.contains(&service.exporter),
                "{service:?}"
            );
        }
    }

    #[test]
    fn no_two_exports_of_an_account_overlap() {
        let all: Vec<Service> = services().collect();
        for (index, one) in all.iter().enumerate() {
            for other in &all[index + 1..] {
                let overlap = one.exporter == other.exporter
                    && (covers(one.subject, other.subject) || covers(other.subject, one.subject));
                assert!(!overlap, "{one:?} overlaps {other:?}");
            }
        }
    }

    /// Whether the pattern `wide` matches every subject `narrow` does (enough for our tables).
    fn covers(wide: &str, narrow: &str) -> bool {
        let (mut wide, mut narrow) = (wide.split('.'), narrow.split('.'));
        loop {
            match (wide.next(), narrow.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(_)) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    #[test]
    fn clients_and_workers_publish_only_what_their_account_imports_or_serves_itself() {
        for role in [Role::Client, Role::Worker] {
            let rights = role.rights();
            for subject in &rights.publish {
                assert!(
                    !subject.starts_with("$JS") && !subject.contains("_INBOX") && subject != ">",
                    "{role:?} publishes to {subject}"
                );
            }
            for subject in &rights.subscribe {
                let others = Role::ALL
                    .into_iter()
                    .filter(|other| *other != role)
                    .any(|other| subject.starts_with(other.inbox_prefix()));
                assert!(
                    !others && !subject.starts_with("_INBOX."),
                    "{role:?} reads {subject}"
                );
            }
        }
    }
}
