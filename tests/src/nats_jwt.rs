//! A NATS operator (decentralized JWT) setup for tests, built from scratch: an operator, a
//! system account, an application account with JetStream, and a user of that account, each an
//! nkey with a JWT signed by its issuer — what `nsc` would generate — plus the server
//! configuration that trusts them (memory resolver) and the user's `.creds` file.
//!
//! A NATS JWT is `base64url(header) . base64url(claims) . base64url(signature)`, unpadded, with
//! the header `{"typ":"JWT","alg":"ed25519-nkey"}`; the signature is the issuer's ed25519
//! signature of the first two parts. The claims carry `jti` (base32 of the SHA-256 of the
//! claims without `jti`), `iat`, `iss` (the issuer's public key), `sub` (the subject's public
//! key), `name`, and `nats` (`type` operator/account/user, `version` 2, and the type's fields).

use anyhow::Context;
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
/// `jetstream` (never for the system account: the server refuses to start then).
pub fn account_jwt(
    operator: &KeyPair,
    account: &KeyPair,
    name: &str,
    jetstream: bool,
) -> anyhow::Result<String> {
    let nats = json!({
        "type": "account",
        "version": 2,
        "limits": unlimited_account(jetstream),
        "default_permissions": { "pub": {}, "sub": {} },
    });
    sign(
        claims(operator, &account.public_key(), name, nats),
        operator,
    )
}

/// A user JWT issued by `account`, allowed everything in its account.
pub fn user_jwt(account: &KeyPair, user: &KeyPair, name: &str) -> anyhow::Result<String> {
    let nats = json!({
        "type": "user",
        "version": 2,
        "pub": {}, "sub": {},
        "subs": -1, "data": -1, "payload": -1,
    });
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

/// A whole operator-mode trust chain: operator, system account, an application account with
/// JetStream, and one user of the application account.
pub struct OperatorSetup {
    pub operator_jwt: String,
    pub system_account: String,
    pub system_account_jwt: String,
    pub account: String,
    pub account_jwt: String,
    /// The application user's `.creds` file contents.
    pub user_creds: String,
}

impl OperatorSetup {
    /// Generates fresh keys and signs every JWT.
    pub fn generate() -> anyhow::Result<Self> {
        let operator = KeyPair::new_operator();
        let system = KeyPair::new_account();
        let account = KeyPair::new_account();
        let user = KeyPair::new_user();
        let user_jwt = user_jwt(&account, &user, "atelier")?;
        Ok(Self {
            operator_jwt: operator_jwt(&operator, "TEST")?,
            system_account: system.public_key(),
            system_account_jwt: account_jwt(&operator, &system, "SYS", false)?,
            account: account.public_key(),
            account_jwt: account_jwt(&operator, &account, "APP", true)?,
            user_creds: creds_file(&user_jwt, &user)?,
        })
    }

    /// The server configuration lines that trust this operator (memory resolver, both
    /// accounts preloaded).
    pub fn server_config(&self) -> String {
        format!(
            "operator: {}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  {}: {}\n  {}: {}\n}}\n",
            self.operator_jwt,
            self.system_account,
            self.account,
            self.account_jwt,
            self.system_account,
            self.system_account_jwt,
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
