//! What a child process may inherit: the children `atelier up` and `atelier pool` start
//! (workers, `nats-server`) get the parent's environment without its secrets.

/// Whether an environment variable's name says it holds a secret (a key, token, password).
fn is_secret(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    name == "ATELIER_NATS_URL"
        || [
            "KEY",
            "TOKEN",
            "SECRET",
            "PASSWORD",
            "PASSWD",
            "CREDENTIALS",
        ]
        .iter()
        .any(|word| name.split('_').any(|part| part == *word) || name.ends_with(word))
}

/// Removes from a child's environment every variable that holds a secret (model keys, the
/// dashboard token, a NATS URL with credentials): the children `atelier up` starts (workers,
/// `nats-server`) need none of them.
pub fn without_secrets(command: &mut std::process::Command) {
    for (name, _) in std::env::vars_os() {
        if is_secret(&name.to_string_lossy()) {
            command.env_remove(&name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_known_by_their_names() {
        for secret in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "ATELIER_OPENAI_API_KEY",
            "ATELIER_DASHBOARD_TOKEN",
            "ATELIER_NATS_URL",
            "AWS_SECRET_ACCESS_KEY",
            "PGPASSWORD",
            "GITHUB_TOKEN",
        ] {
            assert!(is_secret(secret), "{secret}");
        }
        for plain in [
            "PATH",
            "HOME",
            "ATELIER_LOG",
            "ATELIER_DATA_DIR",
            "LD_LIBRARY_PATH",
            "KEYBOARD",
        ] {
            assert!(!is_secret(plain), "{plain}");
        }
    }
}
