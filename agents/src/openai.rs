//! Chat Completions for OpenAI and compatible servers (vLLM, llama.cpp, Ollama, LM Studio …).
//!
//! One [`ModelProvider::complete`] call is one `POST {base_url}/chat/completions` with
//! `stream: true`. The server-sent events are decoded as they arrive: text deltas go to the
//! caller's sink, tool-call fragments are assembled by `index`, and the finish reason and token
//! usage are captured. Servers that ignore `stream` and answer with one JSON document work too.
//!
//! Request profile: `parallel_tool_calls: false` whenever tools are offered, and
//! `temperature: 0` except for reasoning models (`gpt-5*`, `o1`, `o3`, …) that reject it.
//!
//! Failures: 401/403 end the call at once ([`AgentError::AuthFailed`]); 429 waits for
//! `Retry-After` (capped at 60 s) or backs off; 5xx, 408 and connection or timeout errors back
//! off exponentially with full jitter. After `max_retries` retries the call fails with
//! [`AgentError::RateLimited`] or [`AgentError::Unavailable`]. Other 4xx answers are
//! [`AgentError::BadResponse`] carrying the server's message. A retried turn streams its text
//! again from the start.
//!
//! The API key is sent as a bearer token only; it is redacted from `Debug` output and from
//! every error message.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use rand::Rng;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;

use crate::AgentError;
use crate::catalog::ToolSpec;
use crate::provider::{
    ChatMessage, DeltaSink, ModelProvider, ModelRequest, ModelResponse, Role, ToolCall, ToolChoice,
    Usage,
};

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

/// How a client authenticates, waits and retries.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Sent as a bearer token; blank counts as none.
    pub api_key: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
    pub retry: RetryPolicy,
}

/// A Chat Completions client for one model on one server.
#[derive(Debug)]
pub struct OpenAiProvider {
    label: String,
    endpoint: String,
    model: String,
    api_key: Option<ApiKey>,
    client: reqwest::Client,
    retry: RetryPolicy,
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
            client: http_client(options.timeout)?,
            retry: options.retry,
        })
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
        let response = request
            .send()
            .await
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
        while let Some(bytes) = response
            .chunk()
            .await
            .map_err(|e| self.transport_failure(&e))?
        {
            for data in decoder.push(&bytes) {
                stream.apply_data(&data, on_delta)?;
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
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport_failure(&e))?;
        let completion: Completion = serde_json::from_slice(&bytes).map_err(|e| {
            Failure::Fatal(AgentError::BadResponse(format!(
                "the completion is not valid JSON: {e}"
            )))
        })?;
        completion.into_response(on_delta)
    }

    fn transport_failure(&self, error: &reqwest::Error) -> Failure {
        Failure::Retryable {
            error: AgentError::Unavailable(self.redact(&format!(
                "request to {} failed: {}",
                self.endpoint,
                error_chain(error)
            ))),
            retry_after: None,
        }
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
        let body = ChatBody::new(&self.model, request);
        async {
            let response = self.call_with_retries(&body, on_delta).await?;
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

fn http_client(timeout: Duration) -> Result<reqwest::Client, AgentError> {
    // reqwest is built without a crypto provider; installing ring twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| AgentError::NotConfigured(format!("cannot build the HTTP client: {e}")))
}

/// Reasoning models reject sampling parameters such as `temperature`.
fn is_reasoning_model(model: &str) -> bool {
    // Routers spell models as `vendor/model`.
    let name = model.rsplit('/').next().unwrap_or(model);
    let mut chars = name.chars();
    name.starts_with("gpt-5")
        || (chars.next() == Some('o') && chars.next().is_some_and(|c| c.is_ascii_digit()))
}

// ---------------------------------------------------------------------------------------------
// Failures

/// Why one attempt failed, and whether another attempt may help.
#[derive(Debug)]
enum Failure {
    Retryable {
        error: AgentError,
        retry_after: Option<Duration>,
    },
    Fatal(AgentError),
}

impl Failure {
    fn into_error(self) -> AgentError {
        match self {
            Failure::Retryable { error, .. } | Failure::Fatal(error) => error,
        }
    }
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
        StatusCode::REQUEST_TIMEOUT => Failure::Retryable {
            error: AgentError::Unavailable(detail),
            retry_after: None,
        },
        s if s.is_server_error() => Failure::Retryable {
            error: AgentError::Unavailable(detail),
            retry_after: None,
        },
        _ => Failure::Fatal(AgentError::BadResponse(detail)),
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

/// The server's explanation: OpenAI's `{"error":{"message":…}}`, else the start of the body.
async fn error_message(response: reqwest::Response) -> String {
    let reason = response
        .status()
        .canonical_reason()
        .unwrap_or("error")
        .to_string();
    let Ok(text) = response.text().await else {
        return reason;
    };
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

#[derive(Debug, Deserialize)]
struct ErrorEnvelope {
    error: WireError,
}

/// OpenAI's error object; some compatible servers send a bare string instead.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum WireError {
    Object { message: String },
    Text(String),
}

impl WireError {
    fn into_message(self) -> String {
        match self {
            WireError::Object { message } | WireError::Text(message) => message,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Request body

#[derive(Debug, Serialize)]
struct ChatBody<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<u8>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
}

impl<'a> ChatBody<'a> {
    fn new(model: &'a str, request: &'a ModelRequest) -> Self {
        let has_tools = !request.tools.is_empty();
        Self {
            model,
            messages: request.messages.iter().map(WireMessage::from).collect(),
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            temperature: (!is_reasoning_model(model)).then_some(0),
            tools: request.tools.iter().map(WireTool::from).collect(),
            tool_choice: has_tools.then_some(tool_choice_name(request.tool_choice)),
            parallel_tool_calls: has_tools.then_some(false),
        }
    }
}

fn tool_choice_name(choice: ToolChoice) -> &'static str {
    match choice {
        ToolChoice::Auto => "auto",
        ToolChoice::Required => "required",
        ToolChoice::None => "none",
    }
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: Role,
    /// `null` for an assistant turn that only calls tools.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

impl<'a> From<&'a ChatMessage> for WireMessage<'a> {
    fn from(message: &'a ChatMessage) -> Self {
        let only_calls = message.content.is_empty() && !message.tool_calls.is_empty();
        Self {
            role: message.role,
            content: (!only_calls).then_some(message.content.as_str()),
            tool_calls: message.tool_calls.iter().map(WireToolCall::from).collect(),
            tool_call_id: message.tool_call_id.as_deref(),
        }
    }
}

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

impl<'a> From<&'a ToolCall> for WireToolCall<'a> {
    fn from(call: &'a ToolCall) -> Self {
        Self {
            id: &call.id,
            kind: "function",
            function: WireFunctionCall {
                name: &call.name,
                arguments: &call.arguments,
            },
        }
    }
}

#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

impl<'a> From<&'a ToolSpec> for WireTool<'a> {
    fn from(spec: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: WireFunction {
                name: spec.name,
                description: spec.description,
                parameters: &spec.parameters,
            },
        }
    }
}

#[derive(Debug, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

// ---------------------------------------------------------------------------------------------
// Server-sent events

/// Splits a byte stream into SSE `data` payloads, whatever the chunk boundaries.
///
/// Lines end with LF or CRLF; `data:` lines accumulate until a blank line ends the event;
/// comments (`: keep-alive`) and other fields (`event:`, `id:`, `retry:`) are ignored.
#[derive(Debug, Default)]
struct SseDecoder {
    line: Vec<u8>,
    data: Option<String>,
}

impl SseDecoder {
    /// Feeds bytes; returns the payloads of the events they complete.
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        for &byte in bytes {
            if byte != b'\n' {
                self.line.push(byte);
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(event) = self.take_line(&String::from_utf8_lossy(&line)) {
                events.push(event);
            }
        }
        events
    }

    /// Ends the stream; returns an event the server did not terminate with a blank line.
    fn finish(&mut self) -> Option<String> {
        let line = std::mem::take(&mut self.line);
        let line = String::from_utf8_lossy(&line);
        let line = line.trim_end_matches('\r');
        self.take_line(line).or_else(|| self.data.take())
    }

    fn take_line(&mut self, line: &str) -> Option<String> {
        if line.is_empty() {
            return self.data.take();
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        if field == "data" {
            let value = value.strip_prefix(' ').unwrap_or(value);
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            }
        }
        None
    }
}

/// A tool call being assembled from stream fragments.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The turn so far, built from decoded stream events.
#[derive(Debug, Default)]
struct StreamAccumulator {
    content: String,
    calls: BTreeMap<u32, PartialCall>,
    finish_reason: Option<String>,
    usage: Usage,
    done: bool,
}

impl StreamAccumulator {
    fn apply_data(&mut self, data: &str, on_delta: DeltaSink<'_>) -> Result<(), Failure> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            Failure::Fatal(AgentError::BadResponse(format!(
                "a stream event is not valid JSON: {e}"
            )))
        })?;
        if let Some(error) = chunk.error {
            return Err(Failure::Retryable {
                error: AgentError::Unavailable(format!(
                    "the stream reported an error: {}",
                    error.into_message()
                )),
                retry_after: None,
            });
        }
        if let Some(usage) = chunk.usage {
            self.usage = usage.into();
        }
        for choice in chunk.choices.unwrap_or_default() {
            self.apply_choice(choice, on_delta);
        }
        Ok(())
    }

    fn apply_choice(&mut self, choice: ChunkChoice, on_delta: DeltaSink<'_>) {
        if let Some(reason) = choice.finish_reason {
            self.finish_reason = Some(reason);
        }
        let Some(delta) = choice.delta else {
            return;
        };
        if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
            on_delta(&text);
            self.content.push_str(&text);
        }
        for (position, fragment) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let index = fragment
                .index
                .unwrap_or_else(|| u32::try_from(position).unwrap_or(u32::MAX));
            let call = self.calls.entry(index).or_default();
            if call.id.is_empty()
                && let Some(id) = fragment.id
            {
                call.id = id;
            }
            if let Some(function) = fragment.function {
                if call.name.is_empty()
                    && let Some(name) = function.name
                {
                    call.name = name;
                }
                if let Some(arguments) = function.arguments {
                    call.arguments.push_str(&arguments);
                }
            }
        }
    }

    fn finish(self) -> Result<ModelResponse, Failure> {
        if !self.done && self.finish_reason.is_none() {
            return Err(Failure::Retryable {
                error: AgentError::Unavailable(
                    "the stream ended before the model finished its answer".into(),
                ),
                retry_after: None,
            });
        }
        let tool_calls = self
            .calls
            .into_iter()
            .map(|(index, call)| finish_call(index, call))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ModelResponse {
            content: self.content,
            tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
        })
    }
}

fn finish_call(index: u32, call: PartialCall) -> Result<ToolCall, Failure> {
    if call.name.is_empty() {
        return Err(Failure::Fatal(AgentError::BadResponse(format!(
            "tool call #{index} has no function name"
        ))));
    }
    Ok(ToolCall {
        id: if call.id.is_empty() {
            format!("call_{index}")
        } else {
            call.id
        },
        name: call.name,
        arguments: normalize_arguments(call.arguments),
    })
}

/// A call without arguments is sent back as `{}`, which every server accepts.
fn normalize_arguments(arguments: String) -> String {
    if arguments.trim().is_empty() {
        "{}".to_string()
    } else {
        arguments
    }
}

#[derive(Debug, Deserialize)]
struct Chunk {
    choices: Option<Vec<ChunkChoice>>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
}

#[derive(Debug, Deserialize)]
struct ChunkChoice {
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Delta {
    content: Option<String>,
    tool_calls: Option<Vec<DeltaToolCall>>,
}

#[derive(Debug, Deserialize)]
struct DeltaToolCall {
    index: Option<u32>,
    id: Option<String>,
    function: Option<DeltaFunction>,
}

#[derive(Debug, Deserialize)]
struct DeltaFunction {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Usage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Non-streaming answers

#[derive(Debug, Deserialize)]
struct Completion {
    #[serde(default)]
    choices: Vec<CompletionChoice>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct CompletionChoice {
    message: CompletionMessage,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct CompletionMessage {
    content: Option<String>,
    tool_calls: Option<Vec<CompletionToolCall>>,
}

#[derive(Debug, Deserialize)]
struct CompletionToolCall {
    #[serde(default)]
    id: String,
    function: CompletionFunction,
}

#[derive(Debug, Deserialize)]
struct CompletionFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

impl Completion {
    fn into_response(self, on_delta: DeltaSink<'_>) -> Result<ModelResponse, Failure> {
        let Some(choice) = self.choices.into_iter().next() else {
            return Err(Failure::Fatal(AgentError::BadResponse(
                "the completion has no choices".into(),
            )));
        };
        let content = choice.message.content.unwrap_or_default();
        if !content.is_empty() {
            on_delta(&content);
        }
        let calls = choice.message.tool_calls.unwrap_or_default();
        let tool_calls = (0u32..)
            .zip(calls)
            .map(|(index, call)| {
                finish_call(
                    index,
                    PartialCall {
                        id: call.id,
                        name: call.function.name,
                        arguments: call.function.arguments,
                    },
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ModelResponse {
            content,
            tool_calls,
            finish_reason: choice.finish_reason,
            usage: self.usage.map(Usage::from).unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use axum::Json;
    use axum::Router;
    use axum::body::Body;
    use axum::http::HeaderMap as AxumHeaders;
    use axum::response::Response;
    use axum::routing::post;
    use serde_json::json;

    use super::*;
    use crate::catalog::catalog;

    const KEY: &str = "sk-test-secret-123";

    /// What the test server received.
    #[derive(Clone, Default)]
    struct Received {
        bodies: Arc<Mutex<Vec<Value>>>,
        auth: Arc<Mutex<Vec<Option<String>>>>,
    }

    impl Received {
        fn count(&self) -> usize {
            self.bodies.lock().expect("lock").len()
        }

        fn body(&self, n: usize) -> Value {
            self.bodies.lock().expect("lock")[n].clone()
        }
    }

    /// Starts a Chat Completions stand-in; `respond(n)` answers the n-th request (0-based).
    async fn serve<F>(respond: F) -> (String, Received)
    where
        F: Fn(usize) -> Response + Clone + Send + Sync + 'static,
    {
        let received = Received::default();
        let recorder = received.clone();
        let handler = move |headers: AxumHeaders, Json(body): Json<Value>| {
            let recorder = recorder.clone();
            let respond = respond.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                recorder.auth.lock().expect("lock").push(auth);
                let mut bodies = recorder.bodies.lock().expect("lock");
                bodies.push(body);
                respond(bodies.len() - 1)
            }
        };
        let app = Router::new().route("/v1/chat/completions", post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}/v1"), received)
    }

    /// An SSE answer sent as the given body chunks.
    fn sse(chunks: Vec<String>) -> Response {
        let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, Infallible>));
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .expect("response")
    }

    fn event(value: Value) -> String {
        format!("data: {value}\n\n")
    }

    fn status(code: u16, headers: &[(&str, &str)], body: &str) -> Response {
        let mut builder = Response::builder().status(code);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder
            .body(Body::from(body.to_string()))
            .expect("response")
    }

    fn text_stream() -> Response {
        sse(vec![
            ": keep-alive\n\n".to_string(),
            event(
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            ),
            event(json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]})),
            // One event split over two chunks, with CRLF line ends.
            "data: {\"choices\": [{\"index\": 0, \"delta\": {\"con".to_string(),
            "tent\": \"lo \"}}]}\r\n\r\n".to_string(),
            event(
                json!({"choices": [{"index": 0, "delta": {"content": "world"}, "finish_reason": null}]}),
            ),
            event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
            event(json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}})),
            "data: [DONE]\n\n".to_string(),
        ])
    }

    /// Options with a short timeout and millisecond backoffs.
    fn options(api_key: Option<&str>, max_retries: u32) -> ClientOptions {
        ClientOptions {
            api_key: api_key.map(str::to_string),
            timeout: Duration::from_secs(10),
            retry: RetryPolicy {
                max_retries,
                base: Duration::from_millis(1),
                cap: Duration::from_millis(5),
            },
        }
    }

    fn provider(base: &str, max_retries: u32) -> OpenAiProvider {
        OpenAiProvider::new(
            Flavor::OpenAi,
            base,
            "gpt-4o-mini",
            options(Some(KEY), max_retries),
        )
        .expect("provider")
    }

    fn simple_request() -> ModelRequest {
        ModelRequest {
            phase: "research".into(),
            item_index: None,
            messages: vec![ChatMessage::system("Be brief."), ChatMessage::user("Hi")],
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
        }
    }

    /// Runs a call and returns the result with the concatenated deltas.
    async fn run(
        provider: &OpenAiProvider,
        request: &ModelRequest,
    ) -> (Result<ModelResponse, AgentError>, String) {
        let deltas = Mutex::new(String::new());
        let sink = |text: &str| deltas.lock().expect("lock").push_str(text);
        let result = provider.complete(request, &sink).await;
        let text = deltas.lock().expect("lock").clone();
        (result, text)
    }

    #[tokio::test]
    async fn openai_streams_text_deltas_usage_and_finish_reason() {
        let (base, received) = serve(|_| text_stream()).await;
        let provider = provider(&base, 0);
        let (result, deltas) = run(&provider, &simple_request()).await;
        let response = result.expect("completion");
        assert_eq!(response.content, "Hello world");
        assert_eq!(deltas, response.content);
        assert_eq!(response.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            response.usage,
            Usage {
                prompt_tokens: 12,
                completion_tokens: 3
            }
        );
        assert!(response.tool_calls.is_empty());

        let body = received.body(0);
        assert_eq!(body["model"], "gpt-4o-mini");
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["temperature"], 0);
        assert!(body.get("tools").is_none());
        assert!(body.get("tool_choice").is_none());
        assert!(body.get("parallel_tool_calls").is_none());
        let auth = received.auth.lock().expect("lock")[0].clone();
        assert_eq!(auth.as_deref(), Some("Bearer sk-test-secret-123"));
    }

    #[tokio::test]
    async fn openai_assembles_tool_calls_and_sends_the_openai_request_shape() {
        let (base, received) = serve(|_| {
            sse(vec![
                event(
                    json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null,
                    "tool_calls": [{"index": 0, "id": "call_abc", "type": "function",
                        "function": {"name": "table_get_map", "arguments": ""}}]}}]}),
                ),
                event(json!({"choices": [{"index": 0, "delta": {
                    "tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": "}}]}}]})),
                event(json!({"choices": [{"index": 0, "delta": {
                    "tool_calls": [{"index": 0, "function": {"arguments": "\"sales.csv\"}"}}]}}]})),
                event(
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
                ),
                // No [DONE]: a finish reason is enough.
            ])
        })
        .await;
        let provider = provider(&base, 0);
        let earlier = ToolCall {
            id: "call_1".into(),
            name: "list_files".into(),
            arguments: "{}".into(),
        };
        let request = ModelRequest {
            phase: "research".into(),
            item_index: None,
            messages: vec![
                ChatMessage::system("Research."),
                ChatMessage::user("Summarize sales.csv"),
                ChatMessage::assistant("", vec![earlier]),
                ChatMessage::tool_result("call_1", "[\"sales.csv\"]"),
            ],
            tools: catalog().into_iter().take(3).collect(),
            tool_choice: ToolChoice::Required,
        };
        let (result, deltas) = run(&provider, &request).await;
        let response = result.expect("completion");
        assert_eq!(deltas, "");
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            response.tool_calls,
            vec![ToolCall {
                id: "call_abc".into(),
                name: "table_get_map".into(),
                arguments: "{\"path\": \"sales.csv\"}".into(),
            }]
        );

        let body = received.body(0);
        assert_eq!(body["stream"], true);
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["parallel_tool_calls"], false);
        let tools = body["tools"].as_array().expect("tools");
        assert_eq!(tools.len(), 3);
        assert_eq!(tools[0]["type"], "function");
        assert_eq!(tools[0]["function"]["name"], "list_files");
        assert!(tools[0]["function"]["description"].is_string());
        assert_eq!(tools[0]["function"]["parameters"]["type"], "object");
        let messages = body["messages"].as_array().expect("messages");
        assert_eq!(
            messages[0],
            json!({"role": "system", "content": "Research."})
        );
        assert_eq!(
            messages[2],
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "list_files", "arguments": "{}"}}]})
        );
        assert_eq!(
            messages[3],
            json!({"role": "tool", "content": "[\"sales.csv\"]", "tool_call_id": "call_1"})
        );
    }

    #[tokio::test]
    async fn openai_accepts_a_non_streaming_json_answer() {
        let (base, _) = serve(|_| {
            let body = json!({
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": "Looking.",
                    "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "list_files", "arguments": "{}"}}]}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2}
            });
            status(
                200,
                &[("content-type", "application/json")],
                &body.to_string(),
            )
        })
        .await;
        let (result, deltas) = run(&provider(&base, 0), &simple_request()).await;
        let response = result.expect("completion");
        assert_eq!(response.content, "Looking.");
        assert_eq!(deltas, "Looking.");
        assert_eq!(response.tool_calls.len(), 1);
        assert_eq!(response.tool_calls[0].name, "list_files");
        assert_eq!(response.usage.completion_tokens, 2);
    }

    #[tokio::test]
    async fn openai_retries_429_honouring_retry_after() {
        let (base, received) = serve(|n| {
            if n == 0 {
                status(
                    429,
                    &[("retry-after", "0")],
                    r#"{"error":{"message":"slow down"}}"#,
                )
            } else {
                text_stream()
            }
        })
        .await;
        let (result, _) = run(&provider(&base, 3), &simple_request()).await;
        assert_eq!(result.expect("completion").content, "Hello world");
        assert_eq!(received.count(), 2);
    }

    #[tokio::test]
    async fn openai_gives_up_on_persistent_429_as_rate_limited() {
        let (base, received) = serve(|_| {
            status(
                429,
                &[("retry-after", "0")],
                r#"{"error":{"message":"quota"}}"#,
            )
        })
        .await;
        let (result, _) = run(&provider(&base, 1), &simple_request()).await;
        let error = result.expect_err("rate limited");
        assert!(
            matches!(error, AgentError::RateLimited(ref m) if m.contains("quota")),
            "{error}"
        );
        assert_eq!(received.count(), 2);
    }

    #[tokio::test]
    async fn openai_gives_up_on_500_after_max_retries() {
        let (base, received) = serve(|_| status(500, &[], "upstream broke")).await;
        let (result, _) = run(&provider(&base, 2), &simple_request()).await;
        let error = result.expect_err("unavailable");
        assert!(matches!(error, AgentError::Unavailable(_)), "{error}");
        assert_eq!(received.count(), 3);
    }

    #[tokio::test]
    async fn openai_does_not_retry_401_and_keeps_the_key_out_of_errors() {
        let (base, received) = serve(|_| {
            let body = format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#);
            status(401, &[("content-type", "application/json")], &body)
        })
        .await;
        let provider = provider(&base, 3);
        let (result, _) = run(&provider, &simple_request()).await;
        let error = result.expect_err("auth failed");
        assert!(matches!(error, AgentError::AuthFailed(_)), "{error}");
        assert!(error.to_string().contains("Incorrect API key"), "{error}");
        assert!(!error.to_string().contains(KEY), "{error}");
        assert!(!format!("{provider:?}").contains(KEY));
        assert_eq!(received.count(), 1);
    }

    #[tokio::test]
    async fn openai_reports_other_4xx_with_the_server_message() {
        let (base, received) = serve(|_| {
            status(
                400,
                &[],
                r#"{"error":{"message":"Invalid schema for function"}}"#,
            )
        })
        .await;
        let (result, _) = run(&provider(&base, 3), &simple_request()).await;
        let error = result.expect_err("bad request");
        assert!(
            matches!(error, AgentError::BadResponse(ref m) if m.contains("Invalid schema for function")),
            "{error}"
        );
        assert_eq!(received.count(), 1);
    }

    #[tokio::test]
    async fn openai_treats_an_empty_stream_as_unavailable() {
        let (base, received) = serve(|_| sse(vec![": keep-alive\n\n".to_string()])).await;
        let (result, _) = run(&provider(&base, 1), &simple_request()).await;
        let error = result.expect_err("unavailable");
        assert!(matches!(error, AgentError::Unavailable(_)), "{error}");
        assert_eq!(received.count(), 2);
    }

    #[tokio::test]
    async fn openai_connection_errors_are_unavailable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let (result, _) = run(
            &provider(&format!("http://{addr}/v1"), 1),
            &simple_request(),
        )
        .await;
        let error = result.expect_err("unavailable");
        assert!(matches!(error, AgentError::Unavailable(_)), "{error}");
    }

    #[test]
    fn openai_requires_a_key_but_compat_does_not() {
        let error =
            OpenAiProvider::new(Flavor::OpenAi, DEFAULT_BASE_URL, "gpt-4o", options(None, 0))
                .expect_err("no key");
        assert!(
            matches!(error, AgentError::NotConfigured(ref m) if m.contains("OPENAI_API_KEY") && m.contains("atelier.toml")),
            "{error}"
        );

        let compat = OpenAiProvider::new(
            Flavor::Compatible,
            "http://localhost:8000/v1/",
            "qwen",
            options(None, 0),
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
            options(Some(KEY), 0),
        )
        .expect("openai");
        assert_eq!(openai.label(), "openai:gpt-4o");
        assert!(!format!("{openai:?}").contains(KEY));
    }

    #[test]
    fn openai_omits_temperature_for_reasoning_models() {
        let request = simple_request();
        for (model, expected) in [
            ("gpt-4o-mini", Some(0)),
            ("gpt-4.1", Some(0)),
            ("qwen2.5-7b", Some(0)),
            ("gpt-5.2", None),
            ("o3-mini", None),
            ("o4-mini", None),
            ("openai/gpt-5", None),
        ] {
            let body = ChatBody::new(model, &request);
            assert_eq!(body.temperature, expected, "{model}");
        }
    }

    #[test]
    fn openai_sse_decoder_is_robust_to_chunk_boundaries() {
        let stream = ": keep-alive\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: {\"b\":\"é\"}\n\ndata: [DONE]\n\n";
        let expected = vec!["{\"a\":1}", "{\"b\":\"é\"}", "[DONE]"];
        let bytes = stream.as_bytes();
        for split in 0..=bytes.len() {
            let mut decoder = SseDecoder::default();
            let mut events = decoder.push(&bytes[..split]);
            events.extend(decoder.push(&bytes[split..]));
            events.extend(decoder.finish());
            assert_eq!(events, expected, "split at {split}");
        }
    }

    #[test]
    fn openai_sse_decoder_flushes_an_unterminated_event() {
        let mut decoder = SseDecoder::default();
        assert!(decoder.push(b"data: {\"x\":1}").is_empty());
        assert_eq!(decoder.finish().as_deref(), Some("{\"x\":1}"));
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
