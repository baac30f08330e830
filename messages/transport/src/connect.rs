//! Connecting: a NATS URL may carry a user and password (`nats://USER:PASSWORD@HOST:PORT`, as
//! `atelier up` writes them into its data directory), and a process may instead be given a NATS
//! credentials file (a user JWT and its nkey seed, as `nsc generate creds` writes it) for a
//! server in operator (decentralized JWT) mode. The client library does not read credentials
//! from the URL by itself, so every Atelier connection starts from [`options`].
//!
//! The two are exclusive: a URL with a user *and* a credentials file is refused
//! ([`ConnectError::Conflict`]) rather than one silently winning over the other.
//!
//! With `retry_on_initial_connect` the client keeps retrying a server that refuses its
//! credentials; [`AuthWatch`] sees those refusals in the connection's events so a caller can
//! stop waiting and say so.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_nats::{ConnectOptions, ServerAddr};

/// Why connect options could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The credentials file is missing or unreadable.
    #[error(
        "cannot read the NATS credentials file {}: {reason}; give the path of a readable \
         .creds file (a user JWT and its nkey seed, as `nsc generate creds` writes)",
        path.display()
    )]
    CredentialsUnreadable { path: PathBuf, reason: String },
    /// The credentials file does not hold a user JWT and an nkey seed.
    #[error(
        "the NATS credentials file {} is not a valid credentials file ({reason}); it must hold \
         a user JWT between `-----BEGIN NATS USER JWT-----` and `------END NATS USER JWT------` \
         and the user's seed between `-----BEGIN USER NKEY SEED-----` and \
         `------END USER NKEY SEED------` (`nsc generate creds` writes one)",
        path.display()
    )]
    CredentialsMalformed { path: PathBuf, reason: String },
    /// Both the URL and a credentials file carry credentials.
    #[error(
        "both the NATS URL (user `{user}`) and the credentials file {} carry credentials; \
         give one of them: remove `USER:PASSWORD@` from the URL, or drop the credentials file",
        path.display()
    )]
    Conflict { user: String, path: PathBuf },
    /// A server of the URL (or of its comma-separated list) is not a NATS address.
    #[error(
        "`{server}` is not a NATS server address ({reason}); give `nats://HOST:PORT`, or \
         several separated by commas: `nats://a:4222,nats://b:4222`"
    )]
    ServerAddress { server: String, reason: String },
}

/// The servers `url` names: one address, or a comma-separated list of them
/// (`nats://a:4222,nats://b:4222`, as a cluster's seed servers are given), each checked now.
/// The client connects to one of them and fails over to the others (and to those the cluster
/// tells it of).
pub fn servers(url: &str) -> Result<Vec<ServerAddr>, ConnectError> {
    url.split(',')
        .map(str::trim)
        .map(|server| {
            server
                .parse::<ServerAddr>()
                .map_err(|error| ConnectError::ServerAddress {
                    server: without_password(server),
                    reason: error.to_string(),
                })
        })
        .collect()
}

/// `server` with the password of its user, if any, hidden (for an error message).
fn without_password(server: &str) -> String {
    match (server.split_once("://"), server.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, host))) => format!("{scheme}://…@{host}"),
        _ => server.to_string(),
    }
}

/// Connect options with the credentials embedded in `url`, if any, or those of the credentials
/// file `creds`. Reads and checks the file now, so a wrong path fails before any connection
/// attempt.
pub async fn options(url: &str, creds: Option<&Path>) -> Result<ConnectOptions, ConnectError> {
    let url_user = url_credentials(url);
    match (url_user, creds) {
        (Some((user, _)), Some(path)) => Err(ConnectError::Conflict {
            user,
            path: path.to_path_buf(),
        }),
        (Some((user, password)), None) => {
            Ok(ConnectOptions::with_user_and_password(user, password))
        }
        (None, Some(path)) => credentials_file(path).await,
        (None, None) => Ok(ConnectOptions::new()),
    }
}

/// The user and password of `url` (the first server of a list), if it names a user.
fn url_credentials(url: &str) -> Option<(String, String)> {
    // A list of servers shares one set of credentials; the first one's are used.
    let first = url.split(',').next().unwrap_or(url).trim();
    let addr = first.parse::<ServerAddr>().ok()?;
    let user = addr.username()?.to_string();
    let password = addr.password().unwrap_or_default().to_string();
    Some((user, password))
}

async fn credentials_file(path: &Path) -> Result<ConnectOptions, ConnectError> {
    let contents = tokio::fs::read_to_string(path).await.map_err(|error| {
        ConnectError::CredentialsUnreadable {
            path: path.to_path_buf(),
            reason: error.to_string(),
        }
    })?;
    ConnectOptions::with_credentials(&contents).map_err(|error| {
        ConnectError::CredentialsMalformed {
            path: path.to_path_buf(),
            reason: error.to_string(),
        }
    })
}

/// Records whether the server refused this connection's credentials, from its events: feed
/// every [`async_nats::Event`] to [`AuthWatch::observe`] (in the options' `event_callback`),
/// then ask [`AuthWatch::refusal`] while waiting for the connection.
#[derive(Debug, Clone, Default)]
pub struct AuthWatch {
    refusal: Arc<Mutex<Option<String>>>,
}

impl AuthWatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes a refusal (authorization violation, or a nonce the credentials could not sign);
    /// a later successful connection clears it.
    pub fn observe(&self, event: &async_nats::Event) {
        let refusal = match event {
            async_nats::Event::Connected => None,
            async_nats::Event::ServerError(async_nats::ServerError::AuthorizationViolation) => {
                Some("authorization violation".to_string())
            }
            async_nats::Event::ClientError(async_nats::ClientError::Other(error))
                if is_auth_error(error) =>
            {
                Some(error.clone())
            }
            _ => return,
        };
        if let Ok(mut slot) = self.refusal.lock() {
            *slot = refusal;
        }
    }

    /// Why the server refused the credentials, if it did since the last connection.
    pub fn refusal(&self) -> Option<String> {
        self.refusal.lock().ok().and_then(|slot| slot.clone())
    }
}

fn is_auth_error(error: &str) -> bool {
    let error = error.to_ascii_lowercase();
    error.contains("authorization") || error.contains("failed signing nonce")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, contents: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("atelier-connect-{}-{}", std::process::id(), name));
        std::fs::create_dir_all(&dir).ok();
        let path = dir.join(name);
        std::fs::write(&path, contents).ok();
        path
    }

    #[test]
    fn a_server_list_reads_every_server_and_names_a_bad_one() {
        let list = servers("nats://a:4222, nats://u:pw@b:4223,c:4224").unwrap_or_default();
        let hosts: Vec<(String, u16)> = list
            .iter()
            .map(|server| (server.host().to_string(), server.port()))
            .collect();
        assert_eq!(
            hosts,
            [("a".into(), 4222), ("b".into(), 4223), ("c".into(), 4224)]
        );
        assert_eq!(list[1].username(), Some("u"));
        match servers("nats://a:4222,nats://u:secret@b:port") {
            Err(ConnectError::ServerAddress { server, .. }) => {
                assert_eq!(server, "nats://…@b:port");
            }
            other => panic!("expected ServerAddress, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_missing_credentials_file_names_the_file() {
        let path = PathBuf::from("/nonexistent/atelier/user.creds");
        let error = options("nats://127.0.0.1:4222", Some(&path))
            .await
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(error.contains("/nonexistent/atelier/user.creds"), "{error}");
        assert!(error.contains("cannot read"), "{error}");
    }

    #[tokio::test]
    async fn a_malformed_credentials_file_says_what_it_must_hold() {
        let path = temp_file("garbage.creds", "not a credentials file\n");
        let error = options("nats://127.0.0.1:4222", Some(&path))
            .await
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(error.contains(&path.display().to_string()), "{error}");
        assert!(error.contains("BEGIN NATS USER JWT"), "{error}");
        let bad_seed = temp_file(
            "bad-seed.creds",
            "-----BEGIN NATS USER JWT-----\neyJhbGciOiJlZDI1NTE5In0.e30.c2ln\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\nSUNOTASEED\n------END USER NKEY SEED------\n",
        );
        let error = options("nats://127.0.0.1:4222", Some(&bad_seed))
            .await
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(error.contains("not a valid credentials file"), "{error}");
    }

    #[tokio::test]
    async fn url_credentials_and_a_credentials_file_conflict() {
        let path = temp_file("unused.creds", "");
        let error = options("nats://alice:secret@127.0.0.1:4222", Some(&path))
            .await
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(error.contains("alice") && error.contains("both"), "{error}");
        assert!(!error.contains("secret"), "the password leaked: {error}");
        // A list of servers: the first one's user counts.
        let listed = options(
            "nats://bob:pw@10.0.0.1:4222,nats://bob:pw@10.0.0.2:4222",
            Some(&path),
        )
        .await
        .err()
        .map(|error| error.to_string())
        .unwrap_or_default();
        assert!(listed.contains("`bob`"), "{listed}");
        assert!(
            options("nats://alice:secret@127.0.0.1:4222", None)
                .await
                .is_ok()
        );
        assert!(options("nats://127.0.0.1:4222", None).await.is_ok());
    }

    #[test]
    fn refusals_are_seen_and_cleared_by_a_connection() {
        let watch = AuthWatch::new();
        watch.observe(&async_nats::Event::ClientError(
            async_nats::ClientError::Other("IO error".into()),
        ));
        assert_eq!(watch.refusal(), None);
        watch.observe(&async_nats::Event::ClientError(
            async_nats::ClientError::Other("authorization violation".into()),
        ));
        assert_eq!(watch.refusal().as_deref(), Some("authorization violation"));
        watch.observe(&async_nats::Event::Connected);
        assert_eq!(watch.refusal(), None);
    }
}
