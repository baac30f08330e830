//! Reaching NATS: connect options carrying a process's credentials, waiting until a client is
//! connected, and advice when the server refuses the credentials. `system::connect` and the
//! dashboard's own connection are both built from these.

use std::path::Path;

use anyhow::Context;
use atelier_transport::connect::AuthWatch;

use crate::nats_roles::{Role, redact};

/// Where the credentials file may be set, for error messages.
pub const CREDS_SOURCES: &str = "--creds FILE, ATELIER_NATS_CREDS or `nats_creds`";

/// Connect options for `url` with its credentials or those of `creds`, explaining where the
/// credentials file came from when it is the problem; replies arrive on `role`'s own inboxes.
pub async fn connect_options(
    url: &str,
    creds: Option<&Path>,
    role: Role,
) -> anyhow::Result<async_nats::ConnectOptions> {
    let options = atelier_transport::connect::options(url, creds)
        .await
        .with_context(|| format!("NATS credentials ({CREDS_SOURCES})"))?;
    Ok(options.custom_inbox_prefix(role.inbox_prefix()))
}

/// Waits up to `patience` for `client` to connect: `Ok(true)` once it is, `Ok(false)` when
/// time runs out, an error as soon as the server refuses the credentials.
pub async fn wait_connected(
    client: &async_nats::Client,
    watch: &AuthWatch,
    url: &str,
    creds: Option<&Path>,
    patience: std::time::Duration,
) -> anyhow::Result<bool> {
    let deadline = std::time::Instant::now() + patience;
    while client.connection_state() != async_nats::connection::State::Connected {
        if let Some(refusal) = watch.refusal() {
            anyhow::bail!(
                "NATS at {} refused the connection ({refusal}): {}",
                redact(url),
                refusal_advice(url, creds)
            );
        }
        if std::time::Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(true)
}

/// What to do when the server refused what this connection presented.
fn refusal_advice(url: &str, creds: Option<&Path>) -> String {
    match creds {
        Some(path) => format!(
            "the credentials file {} was refused; check that it is the right user for this \
             server and its account ({CREDS_SOURCES})",
            path.display()
        ),
        None if redact(url) != url => "the user and password in the URL were refused; for a \
             server `atelier up` started, use the URL it wrote to <data>/nats.url (or pass \
             --data DIR of that server)"
            .to_string(),
        None => format!(
            "it needs credentials: for a server `atelier up` started, pass --data DIR of that \
             server (its client URL with credentials is DIR/nats.url); for another server, put \
             USER:PASSWORD@ in the URL, or for one in operator (JWT) mode give a credentials \
             file ({CREDS_SOURCES})"
        ),
    }
}
