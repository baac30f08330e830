//! A NATS operator (decentralized JWT) setup for tests, built from scratch: an operator, a
//! system account, Atelier's three accounts (docs/adr/0016) with their exports and imports, and
//! a user of each, each an nkey with a JWT signed by its issuer — what `nsc` would generate —
//! plus the server configuration that trusts them (memory resolver) and each user's `.creds`
//! file.
//!
//! A NATS JWT is `base64url(header) . base64url(claims) . base64url(signature)`, unpadded, with
//! the header `{"typ":"JWT","alg":"ed25519-nkey"}`; the signature is the issuer's ed25519
//! signature of the first two parts. The claims carry `jti` (base32 of the SHA-256 of the
//! claims without `jti`), `iat`, `iss` (the issuer's public key), `sub` (the subject's public
//! key), `name`, and `nats` (`type` operator/account/user, `version` 2, and the type's fields).

use anyhow::Context;
use atelier_messages::access::{ANSWER_WITHIN, Account, RESPONSES_MAX, Role, services};
use data_encoding::{BASE32_NOPAD, BASE64URL_NOPAD};
use nkeys::KeyPair;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The JWT header of every NATS JWT.
const HEADER: &str = r#"{"typ":"JWT","alg":"ed25519-nkey"}"#;

/// Encodes and signs `claims` (without `jti`, which is added) with `issuer`'s key.
pub fn sign(claims: Value, issuer: &KeyPair) -> anyhow::Result<String> {
    let mut claims = claims;
    let object = claims
        .as_object_mut()
        .context("JWT claims must be a JSON object")?;
    object.remove("jti");
    let unique = Sha256::digest(serde_json::to_vec(&object)?);
    object.insert("jti".into(), Value::String(BASE32_NOPAD.encode(&unique)));
    let signing_input = format!(
        "{}.{}",
        BASE64URL_NOPAD.encode(HEADER.as_bytes()),
        BASE64URL_NOPAD.encode(&serde_json::to_vec(&claims)?)
    );
    let signature = issuer
        .sign(signing_input.as_bytes())
        .map_err(|error| anyhow::anyhow!("cannot sign the JWT: {error}"))?;
    Ok(format!(
        "{signing_input}.{}",
        BASE64URL_NOPAD.encode(&signature)
    ))
}

/// Seconds since the epoch, for `iat`.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or_default()
}

/// Claims common to every JWT: issuer, subject, name, issued-at and the `nats` section.
fn claims(issuer: &KeyPair, subject: &str, name: &str, nats: Value) -> Value {
    json!({
        "iat": now(),
        "iss": issuer.public_key(),
        "sub": subject,
        "name": name,
        "nats": nats,
    })
}

/// Account limits with everything unlimited (`-1`; an absent limit would be 0, which the
/// server reads as "none allowed"), with JetStream unlimited too when `jetstream` (the system
/// account may not have it).
fn unlimited_account(jetstream: bool) -> Value {
    let mut limits = json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
    });
    if jetstream && let Some(limits) = limits.as_object_mut() {
        for key in ["mem_storage", "disk_storage", "streams", "consumer"] {
            limits.insert(key.into(), json!(-1));
        }
    }
    limits
}

/// An operator JWT (self-signed).
pub fn operator_jwt(operator: &KeyPair, name: &str) -> anyhow::Result<String> {
    let nats = json!({ "type": "operator", "version": 2 });
    sign(
        claims(operator, &operator.public_key(), name, nats),
        operator,
    )
}

/// An account JWT issued by `operator`, with unlimited limits, JetStream enabled when
/// `jetstream` (never for the system account: the server refuses to start then), and the
/// `exports` and `imports` given.
pub fn account_jwt(
    operator: &KeyPair,
    account: &KeyPair,
    name: &str,
    jetstream: bool,
) -> anyhow::Result<String> {
    account_jwt_with(operator, account, name, jetstream, json!([]), json!([]))
}

fn account_jwt_with(
    operator: &KeyPair,
    account: &KeyPair,
    name: &str,
    jetstream: bool,
    exports: Value,
    imports: Value,
) -> anyhow::Result<String> {
    let nats = json!({
        "type": "account",
        "version": 2,
        "limits": unlimited_account(jetstream),
        "default_permissions": { "pub": {}, "sub": {} },
        "exports": exports,
        "imports": imports,
    });
    sign(
        claims(operator, &account.public_key(), name, nats),
        operator,
    )
}

/// A user JWT issued by `account`, with `permissions` (the `pub`, `sub` and `resp` claims;
/// empty ones allow everything in its account).
pub fn user_jwt(
    account: &KeyPair,
    user: &KeyPair,
    name: &str,
    permissions: Value,
) -> anyhow::Result<String> {
    let mut nats = json!({
        "type": "user",
        "version": 2,
        "pub": {}, "sub": {},
        "subs": -1, "data": -1, "payload": -1,
    });
    if let (Some(nats), Some(permissions)) = (nats.as_object_mut(), permissions.as_object()) {
        nats.extend(permissions.clone());
    }
    sign(claims(account, &user.public_key(), name, nats), account)
}

/// A credentials file in the standard format (what `nsc generate creds` writes).
pub fn creds_file(user_jwt: &str, user: &KeyPair) -> anyhow::Result<String> {
    let seed = user
        .seed()
        .map_err(|error| anyhow::anyhow!("the user key has no seed: {error}"))?;
    Ok(format!(
        "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    ))
}

/// Nanoseconds in a Go duration string of minutes (`20m`), as JWT claims carry durations.
fn nanos_of_minutes(duration: &str) -> anyhow::Result<u64> {
    let minutes: u64 = duration
        .strip_suffix('m')
        .context("a duration in minutes")?
        .parse()?;
    Ok(minutes * 60 * 1_000_000_000)
}

/// The `pub`, `sub` and `resp` claims of a role's user.
fn permissions_of(role: Role) -> anyhow::Result<Value> {
    let rights = role.rights();
    if rights.publish == [">"] {
        return Ok(json!({}));
    }
    let mut permissions = json!({
        "pub": { "allow": rights.publish },
        "sub": { "allow": rights.subscribe },
    });
    if rights.responds
        && let Some(object) = permissions.as_object_mut()
    {
        object.insert(
            "resp".into(),
            json!({ "max": RESPONSES_MAX, "ttl": nanos_of_minutes(ANSWER_WITHIN)? }),
        );
    }
    Ok(permissions)
}

/// A whole operator-mode trust chain with Atelier's accounts (docs/adr/0016), made from the
/// code's table as `nsc` would: an operator, a system account, the three accounts with their
/// exports and imports, and one user per role with its rights.
pub struct OperatorSetup {
    pub operator_jwt: String,
    pub system_account: String,
    pub system_account_jwt: String,
    /// Each account's public key and JWT.
    pub accounts: Vec<(String, String)>,
    /// Each role's `.creds` file contents.
    creds: Vec<(Role, String)>,
}

impl OperatorSetup {
    /// Generates fresh keys and signs every JWT.
    pub fn generate() -> anyhow::Result<Self> {
        let operator = KeyPair::new_operator();
        let system = KeyPair::new_account();
        let keys: Vec<(Account, KeyPair)> = Account::ALL
            .into_iter()
            .map(|account| (account, KeyPair::new_account()))
            .collect();
        let key_of = |wanted: Account| {
            keys.iter()
                .find(|(account, _)| *account == wanted)
                .map(|(_, key)| key.public_key())
                .unwrap_or_default()
        };
        let mut accounts = Vec::new();
        let mut creds = Vec::new();
        for (account, key) in &keys {
            let exports: Vec<Value> = services()
                .filter(|service| service.exporter == *account)
                .map(|service| {
                    Ok(json!({
                        "name": service.subject,
                        "subject": service.subject,
                        "type": "service",
                        "response_type": service.answers.response_type(),
                        "response_threshold": nanos_of_minutes(ANSWER_WITHIN)?,
                    }))
                })
                .collect::<anyhow::Result<_>>()?;
            let imports: Vec<Value> = services()
                .filter(|service| service.importers.contains(account))
                .map(|service| {
                    json!({
                        "name": service.subject,
                        "subject": service.subject,
                        "account": key_of(service.exporter),
                        "type": "service",
                    })
                })
                .collect();
            let jwt = account_jwt_with(
                &operator,
                key,
                account.name(),
                account.jetstream(),
                json!(exports),
                json!(imports),
            )?;
            accounts.push((key.public_key(), jwt));
            let role = account.role();
            let user = KeyPair::new_user();
            let user_jwt = user_jwt(key, &user, role.user(), permissions_of(role)?)?;
            creds.push((role, creds_file(&user_jwt, &user)?));
        }
        Ok(Self {
            operator_jwt: operator_jwt(&operator, "TEST")?,
            system_account: system.public_key(),
            system_account_jwt: account_jwt(&operator, &system, "SYS", false)?,
            accounts,
            creds,
        })
    }

    /// The `.creds` file contents of `role`'s user.
    pub fn creds(&self, role: Role) -> &str {
        self.creds
            .iter()
            .find(|(of, _)| *of == role)
            .map(|(_, creds)| creds.as_str())
            .unwrap_or_default()
    }

    /// The server configuration lines that trust this operator (memory resolver, every
    /// account preloaded).
    pub fn server_config(&self) -> String {
        let mut preload = String::new();
        for (key, jwt) in self
            .accounts
            .iter()
            .chain([&(self.system_account.clone(), self.system_account_jwt.clone())])
        {
            preload.push_str(&format!("  {key}: {jwt}\n"));
        }
        format!(
            "operator: {}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n{preload}}}\n",
            self.operator_jwt, self.system_account,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwt_is_signed_by_its_issuer_and_carries_a_jti() -> anyhow::Result<()> {
        let operator = KeyPair::new_operator();
        let account = KeyPair::new_account();
        let jwt = account_jwt(&operator, &account, "APP", true)?;
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(
            BASE64URL_NOPAD.decode(parts[0].as_bytes())?,
            HEADER.as_bytes()
        );
        let claims: Value = serde_json::from_slice(&BASE64URL_NOPAD.decode(parts[1].as_bytes())?)?;
        assert_eq!(claims["iss"], operator.public_key());
        assert_eq!(claims["sub"], account.public_key());
        assert_eq!(claims["nats"]["type"], "account");
        assert_eq!(claims["nats"]["limits"]["streams"], -1);
        assert_eq!(claims["jti"].as_str().map(str::len), Some(52));
        let signature = BASE64URL_NOPAD.decode(parts[2].as_bytes())?;
        let signed = format!("{}.{}", parts[0], parts[1]);
        assert!(operator.verify(signed.as_bytes(), &signature).is_ok());
        assert!(account.verify(signed.as_bytes(), &signature).is_err());
        Ok(())
    }
}
