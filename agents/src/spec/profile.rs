//! Model profiles: what an operator configures under `[models.NAME]`.

use atelier_messages::budget::{Budget, Prices, Usd};
use atelier_messages::{ErrorBody, ErrorCode};
use serde::{Deserialize, Serialize};

use crate::anthropic;
use crate::http::ReasoningEffort;
use crate::openai;
use crate::provider::PromptStyle;
use crate::text_tools::ToolMode;

use super::ANTHROPIC_KEY_VARIABLE;

/// Which protocol a profile's server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileKind {
    /// The OpenAI API (base URL default `https://api.openai.com/v1`; a key is required).
    #[serde(rename = "openai")]
    OpenAi,
    /// A server speaking the Chat Completions dialect (llama.cpp, vLLM, Ollama, …).
    #[serde(rename = "openai-compat")]
    OpenAiCompat,
    /// The Anthropic Messages API (base URL default `https://api.anthropic.com`; a key is
    /// required: `api_key`, `api_key_env`, else `ANTHROPIC_API_KEY` for the default base URL).
    Anthropic,
}

impl ProfileKind {
    /// The name settings use (`kind = "openai-compat"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProfileKind::OpenAi => "openai",
            ProfileKind::OpenAiCompat => "openai-compat",
            ProfileKind::Anthropic => "anthropic",
        }
    }
}

/// A model the operator configured under `[models.NAME]`: where it is served, with which key,
/// its limits, and how it is offered tools. Its key is only ever sent to its `base_url` (and
/// never printed by `Debug`).
///
/// ```toml
/// [models.local]
/// kind = "openai-compat"
/// base_url = "http://127.0.0.1:8080/v1"
/// model = "qwen2.5-coder-0.5b-instruct"
/// max_tokens = 1024          # per turn; openai-compat and anthropic default 4096,
///                            # openai: the server's
/// tool_mode = "text"         # native (default), text, auto or constrained
/// idle_timeout_secs = 60     # longest silence of a streaming answer
/// strict_tools = false       # openai / openai-compat: strict JSON schemas (default off)
/// context_tokens = 16384     # the model's window (default: asked of the server)
/// prompt = "compact"         # full (default) or compact, for small models
/// reasoning_effort = "low"   # openai / openai-compat reasoning models: minimal, low,
///                            # medium or high (default: the server's)
/// max_concurrent_requests = 4  # over every coordinator of the deployment (default: none)
/// requests_per_minute = 60     # evenly spaced (default: none)
/// tokens_per_minute = 200000   # estimated before a call, corrected by its usage (default: none)
/// ```
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelProfile {
    pub kind: ProfileKind,
    /// The server (required for `openai-compat`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The model name the server knows.
    pub model: String,
    /// The key, written in the settings.
    #[serde(default)]
    pub api_key: Option<String>,
    /// The environment variable holding the key (read when the provider is built).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The most tokens one model turn may generate (sent as `max_tokens`). When unset,
    /// `openai-compat` profiles send [`DEFAULT_COMPAT_MAX_TOKENS`], `anthropic` profiles
    /// [`anthropic::DEFAULT_MAX_TOKENS`] (the API requires a value) and `openai` profiles none
    /// (the server's default).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// How the model is offered tools (see [`ToolMode`]): `native` (default: `tools` in the
    /// request), `text` (the catalog in the system message, calls read from the reply text),
    /// `auto` (native, plus calls written as text), `constrained` (text plus a JSON-schema
    /// `response_format`, for servers with guided decoding).
    #[serde(default)]
    pub tool_mode: ToolMode,
    /// The longest silence, in seconds, while waiting for an answer to start or between its
    /// streamed chunks (default: `idle_timeout_secs` of the settings, else 60). A long answer
    /// that keeps streaming is never cut; a silent one fails as `PROVIDER_UNAVAILABLE` and is
    /// retried.
    #[serde(default)]
    pub idle_timeout_secs: Option<u64>,
    /// An optional ceiling, in seconds, on one whole HTTP exchange (default: none; the idle
    /// timeout is what stops a stuck server).
    #[serde(default)]
    pub request_timeout_secs: Option<u64>,
    /// Retries on 429/5xx/connection errors (default: `max_retries`, else 3).
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// `openai` and `openai-compat` only: send native tools with `"strict": true` and their
    /// schemas normalized for strict mode (`additionalProperties: false`, every property
    /// required, optional ones nullable). Default off: OpenAI's recent models support it, many
    /// compatible servers and older models reject it. Refused on `anthropic` profiles.
    #[serde(default)]
    pub strict_tools: bool,
    /// The model's context window in tokens. Unset: asked of an `openai-compat` server
    /// (llama.cpp `/props`, Ollama `/api/show`), else unknown. Each request is kept under it
    /// less the reply's reserve, dropping in a documented order (docs/models.md); what cannot
    /// fit fails with `CONTEXT_OVERFLOW`.
    #[serde(default)]
    pub context_tokens: Option<u32>,
    /// `full` (default) or `compact`: for small models, only the tools the phase and the
    /// workbench's file kinds need, with their first sentences and bare schemas.
    #[serde(default)]
    pub prompt: PromptStyle,
    /// `openai` and `openai-compat` only: the `reasoning_effort` sent with every request
    /// (`minimal`, `low`, `medium`, `high`), for reasoning models. Unset: not sent. Refused on
    /// `anthropic` profiles.
    #[serde(default)]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Older conversation is summarized by the model (one extra call when it grows; the
    /// summary is kept in the conversation) instead of cut to one line per message. Off by
    /// default: for models that can afford it.
    #[serde(default)]
    pub summarize_history: bool,
    /// The most calls in flight to this profile's provider at once, over every coordinator
    /// of the deployment (default: no limit).
    #[serde(default)]
    pub max_concurrent_requests: Option<u32>,
    /// The most calls started in a minute, over the deployment, evenly spaced (default: no
    /// limit).
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// The most tokens (prompt and reply) a minute, over the deployment: each call is
    /// estimated before it is sent (its body's size and `max_tokens`) and corrected by the
    /// usage the provider reports (default: no limit).
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
    /// Dollars per million prompt tokens: with `output_usd_per_mtok`, what a job's calls cost
    /// (unset: the cost is unknown, and budgets in dollars are refused for this profile).
    #[serde(default)]
    pub input_usd_per_mtok: Option<f64>,
    /// Dollars per million reply tokens.
    #[serde(default)]
    pub output_usd_per_mtok: Option<f64>,
    /// The token budget of a job on this profile that names none (and whose workbench has no
    /// default).
    #[serde(default)]
    pub job_budget_tokens: Option<u64>,
    /// The dollar budget of a job on this profile that names none.
    #[serde(default)]
    pub job_budget_usd: Option<f64>,
}

/// What a profile's calls cost and what a job on it may spend when it names no budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProfileSpending {
    pub prices: Option<Prices>,
    pub budget: Budget,
}

/// What a deployment allows a profile's provider, over every coordinator at once (a limit
/// left out is none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderLimits {
    pub max_concurrent_requests: Option<u32>,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
}

impl ProviderLimits {
    /// Each limit by its setting's name, with the most any provider could mean by it.
    fn named(&self) -> [(&'static str, Option<u64>, u64); 3] {
        [
            (
                "max_concurrent_requests",
                self.max_concurrent_requests.map(u64::from),
                100_000,
            ),
            (
                "requests_per_minute",
                self.requests_per_minute.map(u64::from),
                100_000_000,
            ),
            (
                "tokens_per_minute",
                self.tokens_per_minute,
                1_000_000_000_000,
            ),
        ]
    }

    /// The name of a limit set to 0, if one is.
    pub fn zero(&self) -> Option<&'static str> {
        self.named()
            .into_iter()
            .find(|(_, limit, _)| *limit == Some(0))
            .map(|(name, _, _)| name)
    }

    /// `VALIDATION_FAILED` naming (as `models.NAME.…`) a limit of 0 or past any provider's
    /// (a typing mistake: a limit that high is none).
    pub fn check(&self, name: &str) -> Result<(), ErrorBody> {
        for (setting, limit, most) in self.named() {
            if let Some(limit) = limit
                && !(1..=most).contains(&limit)
            {
                return Err(ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!(
                        "models.{name}.{setting} = {limit} must be between 1 and {most}; leave \
                         it out for no limit"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// True when any limit is set.
    pub fn any(&self) -> bool {
        self.max_concurrent_requests.is_some()
            || self.requests_per_minute.is_some()
            || self.tokens_per_minute.is_some()
    }
}

impl std::fmt::Debug for ModelProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelProfile")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api_key_env", &self.api_key_env)
            .field("max_tokens", &self.max_tokens)
            .field("tool_mode", &self.tool_mode)
            .field("idle_timeout_secs", &self.idle_timeout_secs)
            .field("strict_tools", &self.strict_tools)
            .field("context_tokens", &self.context_tokens)
            .field("prompt", &self.prompt)
            .field("reasoning_effort", &self.reasoning_effort)
            .field("summarize_history", &self.summarize_history)
            .field("limits", &self.limits())
            .field("input_usd_per_mtok", &self.input_usd_per_mtok)
            .field("output_usd_per_mtok", &self.output_usd_per_mtok)
            .field("job_budget_tokens", &self.job_budget_tokens)
            .field("job_budget_usd", &self.job_budget_usd)
            .finish_non_exhaustive()
    }
}

impl ModelProfile {
    /// Its prices and default budget, or `VALIDATION_FAILED` naming the setting (`name`'s)
    /// that is negative, absurd, or a price without its other half.
    pub fn spending(&self, name: &str) -> Result<ProfileSpending, ErrorBody> {
        let dollars = |value: Option<f64>, key: &str| {
            value
                .map(|dollars| Usd::parse_dollars(dollars, &format!("models.{name}.{key}")))
                .transpose()
        };
        let input = dollars(self.input_usd_per_mtok, "input_usd_per_mtok")?;
        let output = dollars(self.output_usd_per_mtok, "output_usd_per_mtok")?;
        let prices = match (input, output) {
            (Some(input_usd_per_mtok), Some(output_usd_per_mtok)) => Some(Prices {
                input_usd_per_mtok,
                output_usd_per_mtok,
            }),
            (None, None) => None,
            _ => {
                return Err(ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!(
                        "model profile `{name}` sets one of input_usd_per_mtok and \
                         output_usd_per_mtok: set both (0 for a side that is free)"
                    ),
                ));
            }
        };
        let budget = Budget::parse(
            self.job_budget_tokens,
            self.job_budget_usd,
            &format!("models.{name}.job_budget_"),
        )?;
        if budget.usd.is_some() && prices.is_none() {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "model profile `{name}` sets job_budget_usd without prices: set \
                     input_usd_per_mtok and output_usd_per_mtok, or give job_budget_tokens"
                ),
            ));
        }
        Ok(ProfileSpending { prices, budget })
    }

    /// Its limits on the provider.
    pub fn limits(&self) -> ProviderLimits {
        ProviderLimits {
            max_concurrent_requests: self.max_concurrent_requests,
            requests_per_minute: self.requests_per_minute,
            tokens_per_minute: self.tokens_per_minute,
        }
    }

    /// Its key: `api_key`, else the variable `api_key_env` names, else (for an `anthropic`
    /// profile on the default base URL only) `ANTHROPIC_API_KEY`.
    pub(super) fn key(&self) -> Option<String> {
        self.api_key
            .clone()
            .or_else(|| {
                self.api_key_env
                    .as_deref()
                    .and_then(|name| std::env::var(name).ok())
            })
            .or_else(|| {
                self.uses_default_anthropic_url()
                    .then(|| std::env::var(ANTHROPIC_KEY_VARIABLE).ok())
                    .flatten()
            })
    }

    /// True for an `anthropic` profile that talks to the Anthropic API itself.
    pub(super) fn uses_default_anthropic_url(&self) -> bool {
        self.kind == ProfileKind::Anthropic
            && self.base_url().map(|url| url.trim_end_matches('/'))
                == Some(anthropic::DEFAULT_BASE_URL)
    }

    /// Its server: `base_url`, else the OpenAI API for `kind = "openai"`.
    pub(super) fn base_url(&self) -> Option<&str> {
        match (self.base_url.as_deref(), self.kind) {
            (Some(url), _) => Some(url),
            (None, ProfileKind::OpenAi) => Some(openai::DEFAULT_BASE_URL),
            (None, ProfileKind::Anthropic) => Some(anthropic::DEFAULT_BASE_URL),
            (None, ProfileKind::OpenAiCompat) => None,
        }
    }
}
