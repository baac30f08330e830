//! The HTTP side: one `POST {base_url}/chat/completions` per attempt through the shared
//! [`Endpoint`] (retries, waits, caps, key redaction).

use super::stream::{StreamAccumulator, from_completion};
use super::wire::{ChatBody, Completion};
use crate::AgentError;
use crate::http::{Auth, ClientOptions, Endpoint, Failure, is_json};
use crate::provider::{DeltaSink, ModelProvider, ModelRequest, ModelResponse};
use crate::text_tools::ToolMode;
use crate::turn::{Turn, traced};

/// The base URL of the OpenAI API.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

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
        let endpoint = Endpoint::new(
            format!("{base_url}/chat/completions"),
            &options,
            Auth::Bearer,
        )?;
        if flavor == Flavor::OpenAi && !endpoint.has_key() {
            return Err(AgentError::NotConfigured(format!(
                "`{label}` needs an API key: set the OPENAI_API_KEY environment variable \
                 or `openai_api_key` in atelier.toml"
            )));
        }
        Ok(Self {
            label,
            model: model.to_string(),
            endpoint,
            max_tokens: options.max_tokens,
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
                let body = ChatBody::for_turn(&self.model, &turn, self.max_tokens);
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
        body: &ChatBody<'_>,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, Failure> {
        let response = self.endpoint.post(body).await?;
        if is_json(&response) {
            let bytes = self.endpoint.read_body(response).await?;
            let completion: Completion = serde_json::from_slice(&bytes).map_err(|e| {
                Failure::bad_response(format!("the completion is not valid JSON: {e}"))
            })?;
            return from_completion(completion, on_delta);
        }
        let mut stream = StreamAccumulator::default();
        self.endpoint
            .read_events(response, |data| stream.apply_data(data, on_delta))
            .await?;
        stream.finish()
    }
}

#[async_trait::async_trait]
impl ModelProvider for OpenAiProvider {
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
