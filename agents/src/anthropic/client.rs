//! The HTTP side: one `POST {base_url}/v1/messages` per attempt through the shared
//! [`Endpoint`] (retries, waits, caps, key redaction), the key sent as `x-api-key`.

use super::stream::EventAccumulator;
use super::wire::MessagesBody;
use crate::AgentError;
use crate::http::{Auth, ClientOptions, Endpoint, estimate_of};
use crate::provider::{DeltaSink, ModelResponse, PromptStyle};
use crate::text_tools::ToolMode;
use crate::turn::{SendTurn, Turn};
use crate::window::Window;

/// The base URL of the Anthropic API.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The `anthropic-version` header sent with every request.
pub const API_VERSION: &str = "2023-06-01";
/// `max_tokens` when the profile sets none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A Messages API client for one model.
#[derive(Debug)]
pub struct AnthropicProvider {
    label: String,
    model: String,
    endpoint: Endpoint,
    max_tokens: u32,
    tool_mode: ToolMode,
    prompt_style: PromptStyle,
    /// The profile's `context_tokens`, if set (the API does not tell its window).
    window: Window,
}

impl AnthropicProvider {
    /// A client for `model` at `base_url`; an API key is required.
    pub fn new(base_url: &str, model: &str, options: ClientOptions) -> Result<Self, AgentError> {
        let base_url = base_url.trim_end_matches('/');
        let label = format!("anthropic:{model}");
        let endpoint = Endpoint::new(
            format!("{base_url}/v1/messages"),
            &options,
            Auth::Header("x-api-key"),
        )?
        .with_header("anthropic-version", API_VERSION);
        if !endpoint.has_key() {
            return Err(AgentError::NotConfigured(format!(
                "`{label}` needs an API key: set the ANTHROPIC_API_KEY environment variable, \
                 `anthropic_api_key` in atelier.toml, or a model profile's `api_key`"
            )));
        }
        Ok(Self {
            label,
            model: model.to_string(),
            endpoint,
            max_tokens: options.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            tool_mode: options.tool_mode,
            prompt_style: options.prompt_style,
            window: Window::new(options.context_tokens, None, options.max_tokens),
        })
    }
}

impl SendTurn for AnthropicProvider {
    fn label(&self) -> &str {
        &self.label
    }

    fn tool_mode(&self) -> ToolMode {
        self.tool_mode
    }

    fn prompt_style(&self) -> PromptStyle {
        self.prompt_style
    }

    fn window(&self) -> &Window {
        &self.window
    }

    async fn send_turn(
        &self,
        turn: &Turn<'_>,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, AgentError> {
        let body = MessagesBody::for_turn(&self.model, turn, self.max_tokens);
        self.endpoint
            .retrying(estimate_of(&body, Some(self.max_tokens)), || {
                self.endpoint
                    .exchange::<EventAccumulator, _>(&body, on_delta)
            })
            .await
    }
}
