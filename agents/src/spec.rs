//! Model specs: which provider serves a job, and the settings the providers read. A spec is
//! one of:
//!
//! - `NAME`: a profile the operator configured (`[models.NAME]`, kind `openai`,
//!   `openai-compat` or `anthropic`);
//! - `openai:MODEL`: the OpenAI API (or `openai_base_url`);
//! - `anthropic:MODEL`: the Anthropic Messages API (or `anthropic_base_url`);
//! - `openai-compat:BASE_URL#MODEL`: any server speaking Chat Completions, in `auto` tool mode
//!   (`openai-compat+MODE:BASE_URL#MODEL` for `native`, `text` or `constrained`);
//! - `replay:FILE`: a scripted provider.
//!
//! A spec comes from whoever submits a job, so it is checked against the operator's settings
//! before anything is built ([`check`]): a profile's key goes only to that profile's base URL,
//! the `openai_api_key` only to the configured OpenAI base URL, the `anthropic_api_key` (or
//! `ANTHROPIC_API_KEY`) only to the configured Anthropic base URL, and an `openai-compat:`
//! server named in a spec never gets a key; an ad-hoc `openai-compat:` URL is read with the HTTP
//! client's own parser and refused when it is not http(s), carries credentials, or (unless the
//! operator allows ad-hoc URLs) names a host other than `localhost` or a loopback address,
//! host names never being looked up (see `url_check`); `replay:` reads only files in the configured
//! replay directory; an unknown profile is refused. A refused spec is `MODEL_NOT_ALLOWED`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::AgentError;
use crate::anthropic::{self, AnthropicProvider};
use crate::http::Gate;
use crate::openai::{self, ClientOptions, Flavor, OpenAiProvider, RetryPolicy};
use crate::provider::ModelProvider;
use crate::replay::ReplayProvider;
use crate::text_tools::ToolMode;

mod profile;
mod url_check;
pub use profile::{ModelProfile, ProfileKind, ProfileSpending, ProviderLimits};

const DEFAULT_MAX_RETRIES: u32 = 3;
/// The environment variable an Anthropic key falls back to (for the default base URL only).
pub(crate) const ANTHROPIC_KEY_VARIABLE: &str = "ANTHROPIC_API_KEY";
/// `max_tokens` of an `openai-compat` profile that sets none: small local models can otherwise
/// generate until the context is full.
pub const DEFAULT_COMPAT_MAX_TOKENS: u32 = 4096;

/// A parsed model spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// `openai:MODEL`: the OpenAI API (at `openai_base_url` when set).
    OpenAi { model: String },
    /// `anthropic:MODEL`: the Anthropic API (at `anthropic_base_url` when set).
    Anthropic { model: String },
    /// `openai-compat:BASE_URL#MODEL`: a server speaking the Chat Completions dialect, in
    /// `auto` tool mode (native calls, and calls written as text); `openai-compat+MODE:…`
    /// names another mode (`native`, `text`, `auto`, `constrained`).
    OpenAiCompat {
        base_url: String,
        model: String,
        tool_mode: ToolMode,
    },
    /// `replay:FILE`: a scripted provider.
    Replay { path: PathBuf },
    /// `NAME`: a profile from the operator's `[models.NAME]` settings.
    Profile { name: String },
}

/// A tool mode by its name in a spec.
fn parse_tool_mode(name: &str) -> Option<ToolMode> {
    match name {
        "native" => Some(ToolMode::Native),
        "text" => Some(ToolMode::Text),
        "auto" => Some(ToolMode::Auto),
        "constrained" => Some(ToolMode::Constrained),
        _ => None,
    }
}

/// True for a profile name: 1–64 characters of `A-Z a-z 0-9 - _ .`.
fn is_profile_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl ModelSpec {
    /// Parses a spec; a malformed one is [`AgentError::InvalidSpec`] saying what is expected.
    pub fn parse(spec: &str) -> Result<Self, AgentError> {
        let invalid = |reason: &str| AgentError::InvalidSpec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let Some((scheme, rest)) = spec.split_once(':') else {
            if is_profile_name(spec) {
                return Ok(ModelSpec::Profile {
                    name: spec.to_string(),
                });
            }
            return Err(invalid(
                "expected a profile name, `openai:MODEL`, `anthropic:MODEL`, \
                 `openai-compat:BASE_URL#MODEL` or `replay:FILE`",
            ));
        };
        let (scheme, mode) = match scheme.split_once('+') {
            Some(("openai-compat", mode)) => (
                "openai-compat",
                Some(parse_tool_mode(mode).ok_or_else(|| {
                    invalid(
                        "the tool mode after `openai-compat+` is native, text, auto or constrained",
                    )
                })?),
            ),
            _ => (scheme, None),
        };
        match scheme {
            "openai" if rest.is_empty() => Err(invalid("missing model name after `openai:`")),
            "openai" => Ok(ModelSpec::OpenAi {
                model: rest.to_string(),
            }),
            "anthropic" if rest.is_empty() => Err(invalid("missing model name after `anthropic:`")),
            "anthropic" => Ok(ModelSpec::Anthropic {
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
                    tool_mode: mode.unwrap_or(ToolMode::Auto),
                })
            }
            "replay" => Ok(ModelSpec::Replay {
                path: PathBuf::from(rest),
            }),
            _ => Err(invalid(
                "unknown provider; use openai, anthropic, openai-compat or replay",
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
    /// API key for `anthropic:` (falls back to `ANTHROPIC_API_KEY`); sent only to the
    /// Anthropic base URL.
    #[serde(default)]
    pub anthropic_api_key: Option<String>,
    /// Base URL for `anthropic:` (default `https://api.anthropic.com`).
    #[serde(default)]
    pub anthropic_base_url: Option<String>,
    /// The longest silence of a streaming answer, in seconds (default 60).
    #[serde(default)]
    pub idle_timeout_secs: Option<u64>,
    /// An optional ceiling on one whole HTTP exchange, in seconds (default: none).
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
    /// Named model profiles (`[models.NAME]`); a spec naming one uses it.
    #[serde(default)]
    pub profiles: BTreeMap<String, ModelProfile>,
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

    /// The client options for the configured Anthropic endpoint: its key, falling back to
    /// `ANTHROPIC_API_KEY`.
    fn anthropic_options(&self) -> ClientOptions {
        ClientOptions {
            api_key: self
                .anthropic_api_key
                .clone()
                .or_else(|| std::env::var(ANTHROPIC_KEY_VARIABLE).ok()),
            ..self.keyless_options()
        }
    }

    /// The client options for any other endpoint: never a configured key.
    fn keyless_options(&self) -> ClientOptions {
        ClientOptions {
            idle_timeout: self
                .idle_timeout_secs
                .map_or(openai::DEFAULT_IDLE_TIMEOUT, Duration::from_secs),
            request_timeout: self.request_timeout_secs.map(Duration::from_secs),
            ..ClientOptions::new(RetryPolicy::new(
                self.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
            ))
        }
    }

    /// The client options of a profile: its own key, limits and timeouts.
    fn profile_options(&self, profile: &ModelProfile) -> ClientOptions {
        let defaults = self.keyless_options();
        let default_max_tokens = match profile.kind {
            ProfileKind::OpenAi => None,
            ProfileKind::OpenAiCompat => Some(DEFAULT_COMPAT_MAX_TOKENS),
            ProfileKind::Anthropic => Some(anthropic::DEFAULT_MAX_TOKENS),
        };
        ClientOptions {
            api_key: profile.key(),
            idle_timeout: profile
                .idle_timeout_secs
                .map_or(defaults.idle_timeout, Duration::from_secs),
            request_timeout: profile
                .request_timeout_secs
                .map(Duration::from_secs)
                .or(defaults.request_timeout),
            retry: profile.max_retries.map_or(defaults.retry, RetryPolicy::new),
            max_tokens: profile.max_tokens.or(default_max_tokens),
            tool_mode: profile.tool_mode,
            strict_tools: profile.strict_tools,
            context_tokens: profile.context_tokens,
            prompt_style: profile.prompt,
            reasoning_effort: profile.reasoning_effort,
            ..defaults
        }
    }

    /// The profiles a message may name: each configured one that [`check`] accepts, by name.
    pub fn usable_profiles(&self) -> impl Iterator<Item = (&str, &ModelProfile)> {
        self.profiles
            .iter()
            .filter(|(name, _)| check(name, self).is_ok())
            .map(|(name, profile)| (name.as_str(), profile))
    }

    /// The profile `name`, or why there is none.
    fn profile(&self, spec: &str, name: &str) -> Result<&ModelProfile, AgentError> {
        self.profiles.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.profiles.keys().map(String::as_str).collect();
            let known = if known.is_empty() {
                "none are configured ([models.NAME] in atelier.toml)".to_string()
            } else {
                format!("configured: {}", known.join(", "))
            };
            AgentError::NotAllowed {
                spec: spec.to_string(),
                reason: format!("no model profile `{name}`; {known}"),
            }
        })
    }
}

/// Parses `spec` and checks it against the operator's settings (see the module docs).
pub fn check(spec: &str, settings: &ProviderSettings) -> Result<ModelSpec, AgentError> {
    let refuse = |reason: String| AgentError::NotAllowed {
        spec: spec.to_string(),
        reason,
    };
    let parsed = ModelSpec::parse(spec)?;
    match &parsed {
        ModelSpec::OpenAi { .. } | ModelSpec::Anthropic { .. } => {}
        ModelSpec::Profile { name } => {
            let profile = settings.profile(spec, name)?;
            if profile.base_url().is_none() {
                return Err(AgentError::NotConfigured(format!(
                    "model profile `{name}` (openai-compat) needs a base_url"
                )));
            }
            let openai_only = [
                ("strict_tools", profile.strict_tools),
                ("reasoning_effort", profile.reasoning_effort.is_some()),
            ];
            if let (ProfileKind::Anthropic, Some((setting, _))) =
                (profile.kind, openai_only.iter().find(|(_, set)| *set))
            {
                return Err(AgentError::NotConfigured(format!(
                    "model profile `{name}` (anthropic) sets {setting}, which only openai and \
                     openai-compat profiles support: remove it"
                )));
            }
            if let Some(limit) = profile.limits().zero() {
                return Err(AgentError::NotConfigured(format!(
                    "model profile `{name}` sets {limit} = 0, which would never call the \
                     provider: set at least 1, or leave it out for no limit"
                )));
            }
        }
        ModelSpec::OpenAiCompat { base_url, .. } => {
            url_check::check_adhoc_url(base_url, settings.allow_adhoc_urls).map_err(refuse)?;
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

/// Whether the model `spec` names summarizes older conversation (its profile's
/// `summarize_history`; never for a spec that names no profile).
pub fn summarizes_history(spec: &str, settings: &ProviderSettings) -> bool {
    match ModelSpec::parse(spec) {
        Ok(ModelSpec::Profile { name }) => settings
            .profiles
            .get(&name)
            .is_some_and(|profile| profile.summarize_history),
        _ => false,
    }
}

/// The name of the profile a model spec names, if it names one.
pub fn profile_name(spec: &str) -> Option<String> {
    match ModelSpec::parse(spec) {
        Ok(ModelSpec::Profile { name }) => Some(name),
        _ => None,
    }
}

/// The profile a model spec names and its limits on the provider, when it names a profile
/// that sets any.
pub fn profile_limits(spec: &str, settings: &ProviderSettings) -> Option<(String, ProviderLimits)> {
    let name = profile_name(spec)?;
    let limits = settings.profiles.get(&name)?.limits();
    limits.any().then_some((name, limits))
}

/// Builds the provider a model spec names (see [`ModelSpec`]).
pub fn provider_from_spec(
    spec: &str,
    settings: &ProviderSettings,
) -> Result<Arc<dyn ModelProvider>, AgentError> {
    gated_provider_from_spec(spec, settings, None)
}

/// [`provider_from_spec`] whose every attempt waits for `gate` (a profile's limits; a spec
/// naming no profile is never gated).
pub fn gated_provider_from_spec(
    spec: &str,
    settings: &ProviderSettings,
    gate: Option<Gate>,
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
        ModelSpec::Anthropic { model } => {
            let base_url = settings
                .anthropic_base_url
                .as_deref()
                .unwrap_or(anthropic::DEFAULT_BASE_URL);
            Arc::new(AnthropicProvider::new(
                base_url,
                &model,
                settings.anthropic_options(),
            )?)
        }
        ModelSpec::OpenAiCompat {
            base_url,
            model,
            tool_mode,
        } => Arc::new(OpenAiProvider::new(
            Flavor::Compatible,
            &base_url,
            &model,
            ClientOptions {
                tool_mode,
                ..settings.keyless_options()
            },
        )?),
        ModelSpec::Profile { name } => {
            profile_provider(settings.profile(spec, &name)?, settings, gate)?
        }
        ModelSpec::Replay { path } => {
            let dir = settings.replay_dir.clone().unwrap_or_default();
            Arc::new(ReplayProvider::load(&dir.join(path))?)
        }
    };
    Ok(provider)
}

/// Builds the provider of a profile (checked: it has a base URL).
fn profile_provider(
    profile: &ModelProfile,
    settings: &ProviderSettings,
    gate: Option<Gate>,
) -> Result<Arc<dyn ModelProvider>, AgentError> {
    let base_url = profile.base_url().unwrap_or_default();
    let options = ClientOptions {
        gate,
        ..settings.profile_options(profile)
    };
    let flavor = match profile.kind {
        ProfileKind::Anthropic => {
            return Ok(Arc::new(AnthropicProvider::new(
                base_url,
                &profile.model,
                options,
            )?));
        }
        ProfileKind::OpenAi => Flavor::OpenAi,
        ProfileKind::OpenAiCompat => Flavor::Compatible,
    };
    Ok(Arc::new(OpenAiProvider::new(
        flavor,
        base_url,
        &profile.model,
        options,
    )?))
}

#[cfg(test)]
mod tests {
    use atelier_messages::ErrorCode;

    use super::*;
    use crate::http::ReasoningEffort;
    use crate::provider::PromptStyle;

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
                model: "qwen:7b".into(),
                tool_mode: ToolMode::Auto,
            }
        );
        assert_eq!(
            ModelSpec::parse("openai-compat+text:http://localhost:8000/v1#qwen").expect("mode"),
            ModelSpec::OpenAiCompat {
                base_url: "http://localhost:8000/v1".into(),
                model: "qwen".into(),
                tool_mode: ToolMode::Text,
            }
        );
        assert!(
            invalid_reason("openai-compat+json:http://localhost:8000/v1#qwen")
                .contains("native, text, auto or constrained")
        );
        assert_eq!(
            ModelSpec::parse("anthropic:claude-sonnet-4-5").expect("anthropic"),
            ModelSpec::Anthropic {
                model: "claude-sonnet-4-5".into()
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
        assert!(invalid_reason("not a name").contains("a profile name, `openai:MODEL`"));
        assert_eq!(
            ModelSpec::parse("local-qwen").expect("profile"),
            ModelSpec::Profile {
                name: "local-qwen".into()
            }
        );
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
            invalid_reason("anthropic:"),
            "missing model name after `anthropic:`"
        );
        assert_eq!(
            invalid_reason("mistral:large"),
            "unknown provider; use openai, anthropic, openai-compat or replay"
        );
        assert!(invalid_reason("not a name").contains("`anthropic:MODEL`"));
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
            anthropic_api_key: Some("sk-ant-test".into()),
            ..ProviderSettings::default()
        };
        let openai = provider_from_spec("openai:gpt-4o", &settings).expect("openai");
        assert_eq!(openai.label(), "openai:gpt-4o");
        let claude = provider_from_spec("anthropic:claude-sonnet-4-5", &settings).expect("claude");
        assert_eq!(claude.label(), "anthropic:claude-sonnet-4-5");
        assert_eq!(
            settings.anthropic_options().api_key.as_deref(),
            Some("sk-ant-test")
        );
        // The Anthropic key never goes to the OpenAI endpoint, nor the OpenAI key to Anthropic.
        assert_eq!(
            settings.openai_options().api_key.as_deref(),
            Some("sk-test")
        );
        assert_eq!(settings.keyless_options().api_key, None);
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
        assert_eq!(code("anthropic:claude-sonnet-4-5"), None);
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

    fn profile(kind: ProfileKind, base_url: Option<&str>) -> ModelProfile {
        ModelProfile {
            kind,
            base_url: base_url.map(str::to_string),
            model: "m".into(),
            api_key: Some("sk-profile".into()),
            api_key_env: None,
            max_tokens: Some(512),
            tool_mode: ToolMode::Native,
            idle_timeout_secs: None,
            request_timeout_secs: None,
            max_retries: None,
            strict_tools: false,
            context_tokens: None,
            prompt: PromptStyle::Full,
            reasoning_effort: None,
            summarize_history: false,
            max_concurrent_requests: None,
            requests_per_minute: None,
            tokens_per_minute: None,
            input_usd_per_mtok: None,
            output_usd_per_mtok: None,
            job_budget_tokens: None,
            job_budget_usd: None,
        }
    }

    #[test]
    fn a_profiles_prices_and_budget_are_read_and_bad_ones_refused_by_name() {
        let mut priced = profile(ProfileKind::OpenAiCompat, Some("http://127.0.0.1:1/v1"));
        priced.input_usd_per_mtok = Some(2.5);
        priced.output_usd_per_mtok = Some(0.0);
        priced.job_budget_usd = Some(1.5);
        let spending = priced.spending("priced").expect("priced");
        let prices = spending.prices.expect("prices");
        assert_eq!(prices.input_usd_per_mtok.micros(), 2_500_000);
        assert_eq!(prices.output_usd_per_mtok.micros(), 0);
        assert_eq!(spending.budget.usd.map(|usd| usd.micros()), Some(1_500_000));
        // A spec names a profile, or none.
        assert_eq!(profile_name("priced").as_deref(), Some("priced"));
        assert_eq!(profile_name("openai:gpt-4o"), None);
        let refused = |change: fn(&mut ModelProfile)| {
            let mut bad = priced.clone();
            change(&mut bad);
            bad.spending("p")
                .map_err(|error| (error.code, error.message))
        };
        type Change = fn(&mut ModelProfile);
        let cases: [(Change, &str); 4] = [
            (
                |p| p.input_usd_per_mtok = Some(-1.0),
                "models.p.input_usd_per_mtok",
            ),
            (|p| p.output_usd_per_mtok = None, "output_usd_per_mtok"),
            (
                |p| p.job_budget_tokens = Some(0),
                "models.p.job_budget_tokens",
            ),
            (
                |p| {
                    p.input_usd_per_mtok = None;
                    p.output_usd_per_mtok = None;
                },
                "job_budget_usd without prices",
            ),
        ];
        for (change, named) in cases {
            let (code, message) = refused(change).expect_err(named);
            assert_eq!(code, ErrorCode::ValidationFailed, "{message}");
            assert!(message.contains(named), "{message}");
        }
    }

    #[test]
    fn profiles_are_named_checked_and_built_with_their_own_endpoint() {
        let mut settings = ProviderSettings::default();
        settings.profiles.insert(
            "local".into(),
            profile(
                ProfileKind::OpenAiCompat,
                Some("http://gpu.internal:8080/v1"),
            ),
        );
        settings
            .profiles
            .insert("cloud".into(), profile(ProfileKind::OpenAi, None));
        settings
            .profiles
            .insert("broken".into(), profile(ProfileKind::OpenAiCompat, None));
        // A profile may name any host: the operator configured it, not the submitter.
        let local = provider_from_spec("local", &settings).expect("local");
        assert_eq!(local.label(), "openai-compat:http://gpu.internal:8080/v1#m");
        let cloud = provider_from_spec("cloud", &settings).expect("cloud");
        assert_eq!(cloud.label(), "openai:m");
        let code = |spec: &str| check(spec, &settings).err().map(|e| e.code());
        assert_eq!(code("nope"), Some(ErrorCode::ModelNotAllowed));
        assert_eq!(code("broken"), Some(ErrorCode::ProviderNotConfigured));
        // A limit of 0 would never call the provider: refused, with the setting named.
        let mut stalled = settings.clone();
        let mut zero = profile(ProfileKind::OpenAi, None);
        zero.requests_per_minute = Some(0);
        stalled.profiles.insert("zero".into(), zero);
        let refused = check("zero", &stalled).expect_err("a zero limit");
        assert_eq!(refused.code(), ErrorCode::ProviderNotConfigured);
        assert!(
            refused.to_string().contains("requests_per_minute = 0"),
            "{refused}"
        );
        // The ones to offer leave the broken one out.
        let usable: Vec<(&str, &str)> = settings
            .usable_profiles()
            .map(|(name, profile)| (name, profile.kind.as_str()))
            .collect();
        assert_eq!(usable, [("cloud", "openai"), ("local", "openai-compat")]);
        let unknown = check("nope", &settings).expect_err("unknown");
        assert!(
            unknown
                .to_string()
                .contains("configured: broken, cloud, local"),
            "{unknown}"
        );
        // The profile's key and limits are its own.
        let options = settings.profile_options(&settings.profiles["local"]);
        assert_eq!(options.api_key.as_deref(), Some("sk-profile"));
        assert_eq!(options.max_tokens, Some(512));
        let printed = format!("{:?}", settings.profiles["local"]);
        assert!(!printed.contains("sk-profile"), "{printed}");
    }

    #[test]
    fn a_profile_reads_its_key_from_the_variable_it_names() {
        let mut with_env = profile(ProfileKind::OpenAiCompat, Some("http://127.0.0.1:1/v1"));
        with_env.api_key = None;
        with_env.api_key_env = Some("PATH".into());
        assert_eq!(with_env.key(), std::env::var("PATH").ok());
        with_env.api_key_env = Some("ATELIER_SURELY_UNSET_VARIABLE".into());
        assert_eq!(with_env.key(), None);
    }

    #[test]
    fn profiles_deserialize_from_settings_and_refuse_unknown_fields() {
        let parsed: ModelProfile = serde_json::from_value(serde_json::json!({
            "kind": "openai-compat", "base_url": "http://127.0.0.1:8080/v1", "model": "qwen",
            "api_key_env": "LOCAL_KEY", "max_tokens": 1024
        }))
        .expect("profile");
        assert_eq!(parsed.kind, ProfileKind::OpenAiCompat);
        assert_eq!(parsed.max_tokens, Some(1024));
        let typo = serde_json::from_value::<ModelProfile>(serde_json::json!({
            "kind": "openai", "model": "gpt-4o", "api_kee": "x"
        }));
        assert!(typo.is_err());
    }

    #[test]
    fn profiles_carry_tool_mode_idle_timeout_and_compat_max_tokens_default() {
        let parsed: ModelProfile = serde_json::from_value(serde_json::json!({
            "kind": "openai-compat", "base_url": "http://127.0.0.1:8080/v1", "model": "qwen",
            "tool_mode": "text", "idle_timeout_secs": 5
        }))
        .expect("profile");
        let settings = ProviderSettings::default();
        let options = settings.profile_options(&parsed);
        assert_eq!(options.tool_mode, ToolMode::Text);
        assert_eq!(options.idle_timeout, Duration::from_secs(5));
        assert_eq!(options.max_tokens, Some(DEFAULT_COMPAT_MAX_TOKENS));
        assert_eq!(options.request_timeout, None);

        let mut cloud = profile(ProfileKind::OpenAi, None);
        cloud.max_tokens = None;
        let options = settings.profile_options(&cloud);
        assert_eq!(options.tool_mode, ToolMode::Native);
        assert_eq!(options.idle_timeout, openai::DEFAULT_IDLE_TIMEOUT);
        assert_eq!(options.max_tokens, None);
        for mode in ["native", "text", "auto", "constrained"] {
            let parsed: ModelProfile = serde_json::from_value(serde_json::json!({
                "kind": "openai", "model": "m", "tool_mode": mode
            }))
            .expect(mode);
            assert_eq!(serde_json::to_value(parsed.tool_mode).expect("mode"), mode);
        }
        let unknown = serde_json::from_value::<ModelProfile>(serde_json::json!({
            "kind": "openai", "model": "m", "tool_mode": "xml"
        }));
        assert!(unknown.is_err());
    }

    #[test]
    fn strict_tools_is_off_by_default_and_refused_on_anthropic_profiles() {
        let parsed: ModelProfile = serde_json::from_value(serde_json::json!({
            "kind": "openai", "model": "gpt-4.1-mini"
        }))
        .expect("profile");
        let settings = ProviderSettings::default();
        assert!(!settings.profile_options(&parsed).strict_tools);
        let strict: ModelProfile = serde_json::from_value(serde_json::json!({
            "kind": "openai-compat", "base_url": "http://127.0.0.1:8080/v1", "model": "m",
            "strict_tools": true
        }))
        .expect("profile");
        assert!(settings.profile_options(&strict).strict_tools);
        let mut settings = ProviderSettings::default();
        let mut claude = profile(ProfileKind::Anthropic, None);
        claude.strict_tools = true;
        settings.profiles.insert("claude".into(), claude);
        assert_eq!(
            check("claude", &settings).err().map(|e| e.code()),
            Some(ErrorCode::ProviderNotConfigured)
        );
        // So is reasoning_effort, which openai profiles pass on.
        let mut thinking = profile(ProfileKind::Anthropic, None);
        thinking.reasoning_effort = Some(ReasoningEffort::Low);
        settings.profiles.insert("claude".into(), thinking);
        let refused = check("claude", &settings).err();
        assert!(refused.is_some_and(|e| e.to_string().contains("reasoning_effort")));
        let reasoning: ModelProfile = serde_json::from_value(serde_json::json!({
            "kind": "openai", "model": "o4-mini", "reasoning_effort": "low"
        }))
        .expect("profile");
        assert_eq!(
            ProviderSettings::default()
                .profile_options(&reasoning)
                .reasoning_effort,
            Some(ReasoningEffort::Low)
        );
    }

    #[test]
    fn anthropic_profiles_default_to_the_anthropic_api_and_keep_keys_to_their_url() {
        let parsed: ModelProfile = serde_json::from_value(serde_json::json!({
            "kind": "anthropic", "model": "claude-sonnet-4-5", "api_key": "sk-ant-profile"
        }))
        .expect("profile");
        assert_eq!(parsed.kind, ProfileKind::Anthropic);
        assert_eq!(parsed.base_url(), Some(anthropic::DEFAULT_BASE_URL));
        assert!(parsed.uses_default_anthropic_url());
        let mut settings = ProviderSettings::default();
        let options = settings.profile_options(&parsed);
        assert_eq!(options.api_key.as_deref(), Some("sk-ant-profile"));
        assert_eq!(options.max_tokens, Some(anthropic::DEFAULT_MAX_TOKENS));

        // A proxy profile gets only its own key: ANTHROPIC_API_KEY is for the default URL.
        let mut proxy = profile(ProfileKind::Anthropic, Some("https://llm-proxy.internal"));
        proxy.api_key = None;
        assert!(!proxy.uses_default_anthropic_url());
        assert_eq!(proxy.key(), None);
        let mut default_slash = profile(ProfileKind::Anthropic, Some("https://api.anthropic.com/"));
        default_slash.api_key = None;
        assert!(default_slash.uses_default_anthropic_url());
        assert!(!profile(ProfileKind::OpenAi, None).uses_default_anthropic_url());

        settings.profiles.insert("claude".into(), parsed);
        settings.profiles.insert(
            "proxied".into(),
            profile(ProfileKind::Anthropic, Some("https://llm-proxy.internal")),
        );
        assert!(check("claude", &settings).is_ok());
        let claude = provider_from_spec("claude", &settings).expect("claude");
        assert_eq!(claude.label(), "anthropic:claude-sonnet-4-5");
        let proxied = provider_from_spec("proxied", &settings).expect("proxied");
        assert_eq!(proxied.label(), "anthropic:m");
        let printed = format!("{:?}", settings.profiles["claude"]);
        assert!(!printed.contains("sk-ant-profile"), "{printed}");
    }
}
