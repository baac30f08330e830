//! The HTTP side: one `POST {base_url}/v1/messages` per attempt through the shared
//! [`Endpoint`] (retries, waits, caps, key redaction), the key sent as `x-api-key`.

use super::stream::{EventAccumulator, from_message};
use super::wire::{Message, MessagesBody};
use crate::AgentError;
use crate::http::{Auth, ClientOptions, Endpoint, Failure, is_json};
use crate::provider::{DeltaSink, ModelProvider, ModelRequest, ModelResponse};
use crate::text_tools::ToolMode;
use crate::turn::{Turn, traced};

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
        })
    }

    /// Runs one turn: exchanges until a reply is usable or the in-turn retries run out.
    async fn run_turn(
        &self,
        request: &ModelRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, AgentError> {
        let mut turn = Turn::new(request, self.tool_mode);
        loop {
            let response = {
                let body = MessagesBody::for_turn(&self.model, &turn, self.max_tokens);
                self.endpoint
                    .retrying(|| self.attempt(&body, on_delta))
                    .await?
            };
            if let Some(response) = turn.judge(response)? {
                return Ok(response);
            }
        }
    }

    /// One HTTP exchange.
    async fn attempt(
        &self,
        body: &MessagesBody<'_>,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, Failure> {
        let response = self.endpoint.post(body).await?;
        if is_json(&response) {
            let bytes = self.endpoint.read_body(response).await?;
            let message: Message = serde_json::from_slice(&bytes).map_err(|e| {
                Failure::bad_response(format!("the message is not valid JSON: {e}"))
            })?;
            return Ok(from_message(message, on_delta));
        }
        let mut stream = EventAccumulator::default();
        self.endpoint
            .read_events(response, |data| stream.apply_data(data, on_delta))
            .await?;
        stream.finish()
    }
}

#[async_trait::async_trait]
impl ModelProvider for AnthropicProvider {
    fn label(&self) -> String {
        self.label.clone()
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, AgentError> {
        traced(&self.label, request, self.run_turn(request, on_delta)).await
    }
}
