//! Model specs: which provider serves a job, written `openai:MODEL`,
//! `openai-compat:BASE_URL#MODEL` or `replay:FILE`, and the settings the providers read.

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
}

impl ProviderSettings {
    /// The client options these settings give, the key falling back to `OPENAI_API_KEY`.
    fn client_options(&self) -> ClientOptions {
        ClientOptions {
            api_key: self
                .openai_api_key
                .clone()
                .or_else(|| std::env::var("OPENAI_API_KEY").ok()),
            timeout: Duration::from_secs(self.request_timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS)),
            retry: RetryPolicy::new(self.max_retries.unwrap_or(DEFAULT_MAX_RETRIES)),
        }
    }
}

/// Builds the provider a model spec names (see [`ModelSpec`]).
pub fn provider_from_spec(
    spec: &str,
    settings: &ProviderSettings,
) -> Result<Arc<dyn ModelProvider>, AgentError> {
    let provider: Arc<dyn ModelProvider> = match ModelSpec::parse(spec)? {
        ModelSpec::OpenAi { model } => {
            let base_url = settings
                .openai_base_url
                .as_deref()
                .unwrap_or(openai::DEFAULT_BASE_URL);
            Arc::new(OpenAiProvider::new(
                Flavor::OpenAi,
                base_url,
                &model,
                settings.client_options(),
            )?)
        }
        ModelSpec::OpenAiCompat { base_url, model } => Arc::new(OpenAiProvider::new(
            Flavor::Compatible,
            &base_url,
            &model,
            settings.client_options(),
        )?),
        ModelSpec::Replay { path } => Arc::new(ReplayProvider::load(&path)?),
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
        assert!(matches!(missing, AgentError::Replay(_)), "{missing}");
    }
}
