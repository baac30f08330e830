//! The HTTP side: one `POST {base_url}/chat/completions` per attempt, retries with
//! `Retry-After` or jittered backoff, and HTTP failures mapped to [`AgentError`]s.

use std::fmt;
use std::time::Duration;

use rand::Rng;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use tracing::Instrument;

use super::failure::Failure;
use super::stream::{SseDecoder, StreamAccumulator, from_completion};
use super::turn::Turn;
use super::wire::{ChatBody, Completion, ErrorEnvelope};
use crate::AgentError;
use crate::provider::{DeltaSink, ModelProvider, ModelRequest, ModelResponse};
use crate::text_tools::ToolMode;

/// The base URL of the OpenAI API.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
const BACKOFF_BASE: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(8);
/// How much of a non-JSON error body ends up in an error message.
const ERROR_BODY_LIMIT: usize = 300;

/// An API key that never shows in `Debug` output.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// How often and how patiently a call is retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The backoff ceiling of the first retry; it doubles with every further one.
    pub base: Duration,
    /// The largest backoff ceiling.
    pub cap: Duration,
}

impl RetryPolicy {
    /// `max_retries` retries with the standard backoff (0.5 s doubling up to 8 s, full jitter).
    pub fn new(max_retries: u32) -> Self {
        Self {
            max_retries,
            base: BACKOFF_BASE,
            cap: BACKOFF_CAP,
        }
    }

    /// Full jitter: a uniform delay between zero and `min(cap, base · 2^attempt)`.
    fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(2u32.saturating_pow(attempt))
            .min(self.cap);
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::rng().random_range(0..=millis))
    }
}

/// The OpenAI API itself, or a server that speaks its Chat Completions dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `openai:MODEL`: an API key is required.
    OpenAi,
    /// `openai-compat:BASE_URL#MODEL`: the API key is optional.
    Compatible,
}

/// How a client authenticates, waits, retries and offers tools.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Sent as a bearer token; blank counts as none.
    pub api_key: Option<String>,
    /// The longest silence allowed while waiting for the answer to start and between streamed
    /// chunks; a long answer that keeps streaming is never cut.
    pub idle_timeout: Duration,
    /// The longest wait for the connection.
    pub connect_timeout: Duration,
    /// An optional ceiling on one whole HTTP exchange (none: only the idle timeout applies).
    pub request_timeout: Option<Duration>,
    pub retry: RetryPolicy,
    /// The most tokens one turn may generate (`max_tokens`; none: the server's default).
    pub max_tokens: Option<u32>,
    /// How the model is offered tools and how its calls are read.
    pub tool_mode: ToolMode,
}

impl ClientOptions {
    /// Options with the standard waits (idle 60 s, connect 10 s), native tools, no key.
    pub fn new(retry: RetryPolicy) -> Self {
        Self {
            api_key: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: None,
            retry,
            max_tokens: None,
            tool_mode: ToolMode::Native,
        }
    }
}

/// The default longest silence of a streaming answer.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default longest wait for a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A Chat Completions client for one model on one server.
#[derive(Debug)]
pub struct OpenAiProvider {
    label: String,
    endpoint: String,
    model: String,
    api_key: Option<ApiKey>,
    client: reqwest::Client,
    retry: RetryPolicy,
    max_tokens: Option<u32>,
    idle_timeout: Duration,
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
        let client = http_client(&options)?;
        let base_url = base_url.trim_end_matches('/');
        let label = match flavor {
            Flavor::OpenAi => format!("openai:{model}"),
            Flavor::Compatible => format!("openai-compat:{base_url}#{model}"),
        };
        let api_key = options
            .api_key
            .filter(|key| !key.trim().is_empty())
            .map(ApiKey);
        if flavor == Flavor::OpenAi && api_key.is_none() {
            return Err(AgentError::NotConfigured(format!(
                "`{label}` needs an API key: set the OPENAI_API_KEY environment variable \
                 or `openai_api_key` in atelier.toml"
            )));
        }
        Ok(Self {
            label,
            endpoint: format!("{base_url}/chat/completions"),
            model: model.to_string(),
            api_key,
            client,
            retry: options.retry,
            max_tokens: options.max_tokens,
            idle_timeout: options.idle_timeout,
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
                let body = turn.body(&self.model, self.max_tokens);
                self.call_with_retries(&body, on_delta).await?
            };
            if let Some(response) = turn.judge(response)? {
                return Ok(response);
            }
        }
    }

    /// Runs the call, retrying transient failures per the retry policy.
    async fn call_with_retries(
        &self,
        body: &ChatBody<'_>,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, AgentError> {
        let mut attempt = 0;
        loop {
            tracing::Span::current().record("attempt", attempt + 1);
            let failure = match self.attempt(body, on_delta).await {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            let Failure::Retryable { error, retry_after } = failure else {
                return Err(failure.into_error());
            };
            if attempt >= self.retry.max_retries {
                return Err(error);
            }
            let delay = retry_after.unwrap_or_else(|| self.retry.backoff(attempt));
            tracing::debug!(
                attempt = attempt + 1,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "model call failed; retrying"
            );
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    /// One HTTP exchange.
    async fn attempt(
        &self,
        body: &ChatBody<'_>,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, Failure> {
        let mut request = self.client.post(&self.endpoint).json(body);
        if let Some(ApiKey(key)) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = self
            .before_idle_timeout(request.send())
            .await?
            .map_err(|e| self.transport_failure(&e))?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let message = self.redact(&error_message(response).await);
            return Err(classify_status(status, &message, retry_after));
        }
        if is_json(response.headers()) {
            self.read_json(response, on_delta).await
        } else {
            self.read_stream(response, on_delta).await
        }
    }

    /// Decodes a server-sent-event stream.
    async fn read_stream(
        &self,
        mut response: reqwest::Response,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, Failure> {
        let mut decoder = SseDecoder::default();
        let mut stream = StreamAccumulator::default();
        let mut received = 0;
        while let Some(bytes) = self
            .before_idle_timeout(response.chunk())
            .await?
            .map_err(|e| self.transport_failure(&e))?
        {
            received += bytes.len();
            if received > MAX_RESPONSE_BYTES {
                return Err(too_large("the streamed answer", MAX_RESPONSE_BYTES));
            }
            for data in decoder.push(&bytes) {
                stream.apply_data(&data, on_delta)?;
            }
            if decoder.pending() > MAX_EVENT_BYTES {
                return Err(too_large("one streamed event", MAX_EVENT_BYTES));
            }
        }
        if let Some(data) = decoder.finish() {
            // A trailing event cut off mid-JSON is a truncated stream, judged below.
            let _ = stream.apply_data(&data, on_delta);
        }
        stream.finish()
    }

    /// Reads a plain JSON answer from a server that ignored `stream: true`.
    async fn read_json(
        &self,
        response: reqwest::Response,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, Failure> {
        let bytes = self
            .before_idle_timeout(read_capped(response, MAX_RESPONSE_BYTES))
            .await?
            .map_err(|e| self.transport_failure(&e))?
            .ok_or_else(|| too_large("the answer", MAX_RESPONSE_BYTES))?;
        let completion: Completion = serde_json::from_slice(&bytes)
            .map_err(|e| Failure::bad_response(format!("the completion is not valid JSON: {e}")))?;
        from_completion(completion, on_delta)
    }

    /// `future`'s output, or a retryable failure when the server stays silent for the idle
    /// timeout.
    async fn before_idle_timeout<T>(
        &self,
        future: impl std::future::Future<Output = T>,
    ) -> Result<T, Failure> {
        tokio::time::timeout(self.idle_timeout, future)
            .await
            .map_err(|_| {
                Failure::unavailable(format!(
                    "{} sent nothing for {} ms (idle timeout)",
                    self.endpoint,
                    self.idle_timeout.as_millis()
                ))
            })
    }

    fn transport_failure(&self, error: &reqwest::Error) -> Failure {
        Failure::unavailable(self.redact(&format!(
            "request to {} failed: {}",
            self.endpoint,
            error_chain(error)
        )))
    }

    /// Removes the API key from text that may end up in logs or job views.
    fn redact(&self, text: &str) -> String {
        match &self.api_key {
            Some(ApiKey(key)) => text.replace(key.as_str(), "<redacted>"),
            None => text.to_string(),
        }
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
        let span = tracing::info_span!(
            "model_call",
            provider = %self.label,
            phase = %request.phase,
            item = ?request.item_index,
            attempt = tracing::field::Empty,
        );
        async {
            let response = self.run_turn(request, on_delta).await?;
            tracing::debug!(
                finish_reason = ?response.finish_reason,
                tool_calls = response.tool_calls.len(),
                prompt_tokens = response.usage.prompt_tokens,
                completion_tokens = response.usage.completion_tokens,
                "model call finished"
            );
            Ok(response)
        }
        .instrument(span)
        .await
    }
}

fn http_client(options: &ClientOptions) -> Result<reqwest::Client, AgentError> {
    // reqwest is built without a crypto provider; installing ring twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder().connect_timeout(options.connect_timeout);
    if let Some(ceiling) = options.request_timeout {
        builder = builder.timeout(ceiling);
    }
    builder
        .build()
        .map_err(|e| AgentError::NotConfigured(format!("cannot build the HTTP client: {e}")))
}

fn classify_status(status: StatusCode, message: &str, retry_after: Option<Duration>) -> Failure {
    let detail = format!("HTTP {}: {message}", status.as_u16());
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            Failure::Fatal(AgentError::AuthFailed(detail))
        }
        StatusCode::TOO_MANY_REQUESTS => Failure::Retryable {
            error: AgentError::RateLimited(detail),
            retry_after,
        },
        s if s == StatusCode::REQUEST_TIMEOUT || s.is_server_error() => {
            Failure::unavailable(detail)
        }
        _ => Failure::bad_response(detail),
    }
}

/// `Retry-After` in seconds, capped; HTTP dates are ignored (the backoff applies instead).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let delay = Duration::try_from_secs_f64(seconds).ok()?;
    Some(delay.min(MAX_RETRY_AFTER))
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.contains("application/json"))
}

/// The most bytes one answer may have: far beyond any real completion, short of memory trouble.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The most bytes one server-sent event (or one unfinished line) may have.
const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// The most bytes of an error body read for its message.
const ERROR_BODY_READ_LIMIT: usize = 64 * 1024;

fn too_large(what: &str, limit: usize) -> Failure {
    Failure::bad_response(format!(
        "{what} is over {} KiB; the server is not answering like a chat model",
        limit / 1024
    ))
}

/// The body, or `None` when it is over `limit` bytes (read no further than that).
async fn read_capped(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// The server's explanation: OpenAI's `{"error":{"message":…}}`, else the start of the body.
async fn error_message(response: reqwest::Response) -> String {
    let reason = response
        .status()
        .canonical_reason()
        .unwrap_or("error")
        .to_string();
    let Ok(Some(bytes)) = read_capped(response, ERROR_BODY_READ_LIMIT).await else {
        return reason;
    };
    let text = String::from_utf8_lossy(&bytes).to_string();
    if let Ok(body) = serde_json::from_str::<ErrorEnvelope>(&text) {
        return body.error.into_message();
    }
    let text = text.trim();
    if text.is_empty() {
        reason
    } else {
        text.chars().take(ERROR_BODY_LIMIT).collect()
    }
}

/// A reqwest error with its causes (the top level alone often says only "error sending request").
fn error_chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
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
        assert_eq!(compat.endpoint, "http://localhost:8000/v1/chat/completions");

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

    #[test]
    fn openai_backoff_stays_within_the_cap() {
        let policy = RetryPolicy::new(3);
        for attempt in 0..40 {
            assert!(policy.backoff(attempt) <= BACKOFF_CAP);
        }
        assert!(policy.backoff(0) <= BACKOFF_BASE);
    }

    #[test]
    fn openai_retry_after_is_parsed_and_capped() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, "2".parse().expect("header"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(RETRY_AFTER, "3600".parse().expect("header"));
        assert_eq!(retry_after(&headers), Some(MAX_RETRY_AFTER));
        headers.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().expect("header"),
        );
        assert_eq!(retry_after(&headers), None);
    }
}
