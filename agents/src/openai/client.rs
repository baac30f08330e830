//! The HTTP side: one `POST {base_url}/chat/completions` per attempt through the shared
//! [`Endpoint`] (retries, waits, caps, key redaction).

use std::sync::atomic::{AtomicBool, Ordering};

use super::stream::StreamAccumulator;
use super::strict::drop_absent;
use super::wire::ChatBody;
use crate::AgentError;
use crate::http::{Auth, ClientOptions, Endpoint, ReasoningEffort, estimate_of};
use crate::provider::{DeltaSink, ModelResponse, PromptStyle};
use crate::text_tools::ToolMode;
use crate::turn::{SendTurn, Turn};
use crate::window::{ServerProbe, Window};

/// The base URL of the OpenAI API.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The URL a client at `base_url` posts each turn to: `{base_url}/chat/completions`, a trailing
/// `/` of the base dropped. The ad-hoc URL check ([`crate::spec::check`]) parses this very
/// string with the HTTP client's own parser, so the host checked is the host requested.
pub(crate) fn chat_completions_url(base_url: &str) -> String {
    format!("{}/chat/completions", base_url.trim_end_matches('/'))
}

/// The OpenAI API itself, or a server that speaks its Chat Completions dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `openai:MODEL`: an API key is required.
    OpenAi,
    /// `openai-compat:BASE_URL#MODEL`: the API key is optional.
    Compatible,
}

/// A Chat Completions client for one model on one server.
#[derive(Debug)]
pub struct OpenAiProvider {
    label: String,
    model: String,
    endpoint: Endpoint,
    max_tokens: Option<u32>,
    tool_mode: ToolMode,
    strict_tools: bool,
    reasoning_effort: Option<ReasoningEffort>,
    prompt_style: PromptStyle,
    window: Window,
    /// Set once the server refused constrained mode's `response_format`.
    format_refused: AtomicBool,
}

impl OpenAiProvider {
    /// A client for `model` at `base_url`; the OpenAI API itself needs an API key.
    pub fn new(
        flavor: Flavor,
        base_url: &str,
        model: &str,
        options: ClientOptions,
    ) -> Result<Self, AgentError> {
        let base_url = base_url.trim_end_matches('/');
        let label = match flavor {
            Flavor::OpenAi => format!("openai:{model}"),
            Flavor::Compatible => format!("openai-compat:{base_url}#{model}"),
        };
        let endpoint = Endpoint::new(chat_completions_url(base_url), &options, Auth::Bearer)?;
        if flavor == Flavor::OpenAi && !endpoint.has_key() {
            return Err(AgentError::NotConfigured(format!(
                "`{label}` needs an API key: set the OPENAI_API_KEY environment variable \
                 or `openai_api_key` in atelier.toml"
            )));
        }
        // A compatible server may tell its window; the OpenAI API does not.
        let probe = (flavor == Flavor::Compatible && options.context_tokens.is_none())
            .then(|| ServerProbe::new(base_url, model, options.api_key.clone()));
        Ok(Self {
            label,
            model: model.to_string(),
            endpoint,
            max_tokens: options.max_tokens,
            tool_mode: options.tool_mode,
            strict_tools: options.strict_tools,
            reasoning_effort: options.reasoning_effort,
            prompt_style: options.prompt_style,
            window: Window::new(options.context_tokens, probe, options.max_tokens),
            format_refused: AtomicBool::new(false),
        })
    }
}

impl SendTurn for OpenAiProvider {
    fn label(&self) -> &str {
        &self.label
    }

    fn tool_mode(&self) -> ToolMode {
        if self.tool_mode == ToolMode::Constrained && self.format_refused.load(Ordering::Relaxed) {
            return ToolMode::Text;
        }
        self.tool_mode
    }

    fn prompt_style(&self) -> PromptStyle {
        self.prompt_style
    }

    fn response_format_refused(&self) {
        self.format_refused.store(true, Ordering::Relaxed);
    }

    fn window(&self) -> &Window {
        &self.window
    }

    async fn send_turn(
        &self,
        turn: &Turn<'_>,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, AgentError> {
        let body = ChatBody::for_turn(&self.model, turn, self.max_tokens, self.strict_tools)
            .with_reasoning_effort(self.reasoning_effort);
        let mut response = self
            .endpoint
            .retrying(estimate_of(&body, self.max_tokens), || {
                self.endpoint
                    .exchange::<StreamAccumulator, _>(&body, on_delta)
            })
            .await?;
        if self.strict_tools {
            for call in &mut response.tool_calls {
                let tools = turn.native_tools();
                if let Some(spec) = tools.iter().find(|spec| spec.name.as_str() == call.name) {
                    call.arguments = drop_absent(&call.arguments, &spec.parameters);
                }
            }
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use crate::http::RetryPolicy;

    use super::*;

    const KEY: &str = "sk-test-secret-123";

    fn options(api_key: Option<&str>) -> ClientOptions {
        ClientOptions {
            api_key: api_key.map(str::to_string),
            ..ClientOptions::new(RetryPolicy::new(0))
        }
    }

    #[test]
    fn openai_requires_a_key_but_compat_does_not() {
        let error = OpenAiProvider::new(Flavor::OpenAi, DEFAULT_BASE_URL, "gpt-4o", options(None))
            .expect_err("no key");
        assert!(
            matches!(error, AgentError::NotConfigured(ref m) if m.contains("OPENAI_API_KEY") && m.contains("atelier.toml")),
            "{error}"
        );

        let compat = OpenAiProvider::new(
            Flavor::Compatible,
            "http://localhost:8000/v1/",
            "qwen",
            options(None),
        )
        .expect("compat without key");
        assert_eq!(
            compat.label(),
            "openai-compat:http://localhost:8000/v1#qwen"
        );
        assert_eq!(
            compat.endpoint.url(),
            "http://localhost:8000/v1/chat/completions"
        );

        let openai = OpenAiProvider::new(
            Flavor::OpenAi,
            DEFAULT_BASE_URL,
            "gpt-4o",
            options(Some(KEY)),
        )
        .expect("openai");
        assert_eq!(openai.label(), "openai:gpt-4o");
        assert!(!format!("{openai:?}").contains(KEY));
    }
}
