//! Model specs: which provider serves a job, written `openai:MODEL`,
//! `openai-compat:BASE_URL#MODEL` or `replay:FILE`, and the settings the providers read.
//!
//! A spec comes from whoever submits a job, so it is checked against the operator's settings
//! before anything is built ([`check`]): the configured key goes only to the configured OpenAI
//! base URL (an `openai-compat:` server never gets it); an ad-hoc `openai-compat:` URL beyond
//! this machine is refused unless the operator allows ad-hoc URLs; `replay:` reads only files in
//! the configured replay directory. A refused spec is `MODEL_NOT_ALLOWED`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::AgentError;
use crate::openai::{self, ClientOptions, Flavor, OpenAiProvider, RetryPolicy};
use crate::provider::ModelProvider;
use crate::replay::ReplayProvider;

const DEFAULT_TIMEOUT_SECS: u64 = 120;
const DEFAULT_MAX_RETRIES: u32 = 3;

/// A parsed model spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// `openai:MODEL`: the OpenAI API (at `openai_base_url` when set).
    OpenAi { model: String },
    /// `openai-compat:BASE_URL#MODEL`: a server speaking the Chat Completions dialect.
    OpenAiCompat { base_url: String, model: String },
    /// `replay:FILE`: a scripted provider.
    Replay { path: PathBuf },
}

impl ModelSpec {
    /// Parses a spec; a malformed one is [`AgentError::InvalidSpec`] saying what is expected.
    pub fn parse(spec: &str) -> Result<Self, AgentError> {
        let invalid = |reason: &str| AgentError::InvalidSpec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = spec.split_once(':').ok_or_else(|| {
            invalid("expected `openai:MODEL`, `openai-compat:BASE_URL#MODEL` or `replay:FILE`")
        })?;
        match scheme {
            "openai" if rest.is_empty() => Err(invalid("missing model name after `openai:`")),
            "openai" => Ok(ModelSpec::OpenAi {
                model: rest.to_string(),
            }),
            "openai-compat" => {
                let (base_url, model) = rest
                    .rsplit_once('#')
                    .ok_or_else(|| invalid("expected `openai-compat:BASE_URL#MODEL`"))?;
                if base_url.is_empty() || model.is_empty() {
                    return Err(invalid("both BASE_URL and MODEL are required"));
                }
                Ok(ModelSpec::OpenAiCompat {
                    base_url: base_url.to_string(),
                    model: model.to_string(),
                })
            }
            "replay" => Ok(ModelSpec::Replay {
                path: PathBuf::from(rest),
            }),
            _ => Err(invalid(
                "unknown provider; use openai, openai-compat or replay",
            )),
        }
    }
}

/// Settings the providers read (API keys never appear in logs or job views).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProviderSettings {
    /// API key for `openai:` and `openai-compat:` (falls back to `OPENAI_API_KEY`).
    #[serde(default)]
    pub openai_api_key: Option<String>,
    /// Base URL for `openai:` (default `https://api.openai.com/v1`).
    #[serde(default)]
    pub openai_base_url: Option<String>,
    /// Per-request timeout in seconds (default 120).
    #[serde(default)]
    pub request_timeout_secs: Option<u64>,
    /// Retries on 429/5xx/connection errors before giving up (default 3).
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// Accept `openai-compat:` URLs beyond this machine (default: loopback only).
    #[serde(default)]
    pub allow_adhoc_urls: bool,
    /// The only directory `replay:` scripts are read from (none: `replay:` is refused).
    #[serde(default)]
    pub replay_dir: Option<PathBuf>,
}

impl ProviderSettings {
    /// The client options for the configured OpenAI endpoint: its key, falling back to
    /// `OPENAI_API_KEY`.
    fn openai_options(&self) -> ClientOptions {
        ClientOptions {
            api_key: self
                .openai_api_key
                .clone()
                .or_else(|| std::env::var("OPENAI_API_KEY").ok()),
            ..self.keyless_options()
        }
    }

    /// The client options for any other endpoint: never a configured key.
    fn keyless_options(&self) -> ClientOptions {
        ClientOptions {
            api_key: None,
            timeout: Duration::from_secs(self.request_timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS)),
            retry: RetryPolicy::new(self.max_retries.unwrap_or(DEFAULT_MAX_RETRIES)),
        }
    }
}

/// True when `url`'s host is this machine (`localhost`, `127.0.0.0/8`, `[::1]`).
fn is_loopback_url(url: &str) -> bool {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = match host_port.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Parses `spec` and checks it against the operator's settings (see the module docs).
pub fn check(spec: &str, settings: &ProviderSettings) -> Result<ModelSpec, AgentError> {
    let refuse = |reason: String| AgentError::NotAllowed {
        spec: spec.to_string(),
        reason,
    };
    let parsed = ModelSpec::parse(spec)?;
    match &parsed {
        ModelSpec::OpenAi { .. } => {}
        ModelSpec::OpenAiCompat { base_url, .. } => {
            if !settings.allow_adhoc_urls && !is_loopback_url(base_url) {
                return Err(refuse(format!(
                    "ad-hoc model URLs beyond this machine are off ({base_url}); the operator can \
                     allow them with `allow_adhoc_model_urls = true` in atelier.toml"
                )));
            }
        }
        ModelSpec::Replay { path } => {
            let Some(dir) = &settings.replay_dir else {
                return Err(refuse(
                    "replay scripts are off: the operator sets `replay_dir` in atelier.toml".into(),
                ));
            };
            let inside = std::fs::canonicalize(dir.join(path))
                .ok()
                .zip(std::fs::canonicalize(dir).ok())
                .is_some_and(|(file, dir)| file.starts_with(dir));
            if !inside {
                return Err(refuse(format!(
                    "replay scripts are read only from {} (the file must exist there)",
                    dir.display()
                )));
            }
        }
    }
    Ok(parsed)
}

/// Builds the provider a model spec names (see [`ModelSpec`]).
pub fn provider_from_spec(
    spec: &str,
    settings: &ProviderSettings,
) -> Result<Arc<dyn ModelProvider>, AgentError> {
    let provider: Arc<dyn ModelProvider> = match check(spec, settings)? {
        ModelSpec::OpenAi { model } => {
            let base_url = settings
                .openai_base_url
                .as_deref()
                .unwrap_or(openai::DEFAULT_BASE_URL);
            Arc::new(OpenAiProvider::new(
                Flavor::OpenAi,
                base_url,
                &model,
                settings.openai_options(),
            )?)
        }
        ModelSpec::OpenAiCompat { base_url, model } => Arc::new(OpenAiProvider::new(
            Flavor::Compatible,
            &base_url,
            &model,
            settings.keyless_options(),
        )?),
        ModelSpec::Replay { path } => {
            let dir = settings.replay_dir.clone().unwrap_or_default();
            Arc::new(ReplayProvider::load(&dir.join(path))?)
        }
    };
    Ok(provider)
}

#[cfg(test)]
mod tests {
    use atelier_messages::ErrorCode;

    use super::*;

    /// The reason of an [`AgentError::InvalidSpec`], or a panic.
    fn invalid_reason(spec: &str) -> String {
        match ModelSpec::parse(spec) {
            Err(AgentError::InvalidSpec {
                spec: named,
                reason,
            }) => {
                assert_eq!(named, spec);
                reason
            }
            other => panic!("{spec}: expected InvalidSpec, got {other:?}"),
        }
    }

    #[test]
    fn spec_parses_each_provider() {
        assert_eq!(
            ModelSpec::parse("openai:gpt-4o-mini").expect("openai"),
            ModelSpec::OpenAi {
                model: "gpt-4o-mini".into()
            }
        );
        assert_eq!(
            ModelSpec::parse("openai-compat:http://localhost:8000/v1#qwen:7b").expect("compat"),
            ModelSpec::OpenAiCompat {
                base_url: "http://localhost:8000/v1".into(),
                model: "qwen:7b".into()
            }
        );
        assert_eq!(
            ModelSpec::parse("replay:demo/script.json").expect("replay"),
            ModelSpec::Replay {
                path: PathBuf::from("demo/script.json")
            }
        );
    }

    #[test]
    fn spec_errors_say_what_is_expected() {
        assert!(invalid_reason("gpt-4o").contains("`openai:MODEL`"));
        assert_eq!(
            invalid_reason("openai:"),
            "missing model name after `openai:`"
        );
        assert_eq!(
            invalid_reason("openai-compat:http://host/v1"),
            "expected `openai-compat:BASE_URL#MODEL`"
        );
        assert_eq!(
            invalid_reason("openai-compat:#qwen"),
            "both BASE_URL and MODEL are required"
        );
        assert_eq!(
            invalid_reason("anthropic:claude"),
            "unknown provider; use openai, openai-compat or replay"
        );
        let error = ModelSpec::parse("openai:").expect_err("invalid");
        assert_eq!(error.code(), ErrorCode::ProviderNotConfigured);
        assert_eq!(
            error.to_string(),
            "invalid model spec `openai:`: missing model name after `openai:`"
        );
    }

    #[test]
    fn provider_from_spec_builds_the_named_provider() {
        let settings = ProviderSettings {
            openai_api_key: Some("sk-test".into()),
            ..ProviderSettings::default()
        };
        let openai = provider_from_spec("openai:gpt-4o", &settings).expect("openai");
        assert_eq!(openai.label(), "openai:gpt-4o");
        let compat = provider_from_spec("openai-compat:http://localhost:8000/v1/#qwen", &settings)
            .expect("compat");
        assert_eq!(
            compat.label(),
            "openai-compat:http://localhost:8000/v1#qwen"
        );
        let missing = provider_from_spec("replay:/no/such/script.json", &settings)
            .err()
            .expect("missing script");
        assert_eq!(missing.code(), ErrorCode::ModelNotAllowed, "{missing}");
    }

    #[test]
    fn specs_are_checked_against_the_operators_settings() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("script.json"), "{}").expect("script");
        let outside = tempfile::NamedTempFile::new().expect("outside file");
        let settings = ProviderSettings {
            openai_api_key: Some("sk-secret".into()),
            replay_dir: Some(dir.path().to_path_buf()),
            ..ProviderSettings::default()
        };
        let code = |spec: &str| check(spec, &settings).err().map(|e| e.code());
        assert_eq!(code("openai:gpt-4o"), None);
        assert_eq!(code("openai-compat:http://127.0.0.1:8080/v1#m"), None);
        assert_eq!(code("openai-compat:http://localhost/v1#m"), None);
        assert_eq!(code("openai-compat:http://[::1]:1/v1#m"), None);
        for refused in [
            "openai-compat:https://attacker.example/v1#m",
            "openai-compat:http://127.0.0.1.attacker.example/v1#m",
            "openai-compat:http://10.0.0.5/v1#m",
        ] {
            assert_eq!(code(refused), Some(ErrorCode::ModelNotAllowed), "{refused}");
        }
        assert_eq!(code("replay:script.json"), None);
        let escape = format!("replay:{}", outside.path().display());
        assert_eq!(code(&escape), Some(ErrorCode::ModelNotAllowed));
        assert_eq!(
            code("replay:../../etc/passwd"),
            Some(ErrorCode::ModelNotAllowed)
        );
        let open = ProviderSettings {
            allow_adhoc_urls: true,
            ..settings.clone()
        };
        assert!(check("openai-compat:https://gpu.example/v1#m", &open).is_ok());
    }
}
