//! Connecting: a NATS URL may carry a user and password (`nats://USER:PASSWORD@HOST:PORT`, as
//! `atelier up` writes them into its data directory). The client library does not read them
//! from the URL by itself, so every Atelier connection starts from [`options`].

use async_nats::{ConnectOptions, ServerAddr};

/// Connect options with the credentials embedded in `url`, if any.
pub fn options(url: &str) -> ConnectOptions {
    let credentials = url.parse::<ServerAddr>().ok().and_then(|addr| {
        let user = addr.username()?.to_string();
        let password = addr.password().unwrap_or_default().to_string();
        Some((user, password))
    });
    match credentials {
        Some((user, password)) => ConnectOptions::with_user_and_password(user, password),
        None => ConnectOptions::new(),
    }
}
