//! One model endpoint: the HTTP client, the key and how it is sent, the idle timeout, the
//! retry loop, and the size caps on what is read back.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderValue};
use serde::{Deserialize, Serialize};

use super::failure::{Failure, classify_status, retry_after};
use super::options::{ClientOptions, RetryPolicy};
use super::sse::SseDecoder;
use super::{Gate, Permit};
use crate::AgentError;
use crate::provider::{DeltaSink, ModelResponse};

/// How much of a non-JSON error body ends up in an error message.
const ERROR_BODY_LIMIT: usize = 300;
/// The most bytes one answer may have: far beyond any real completion, short of memory trouble.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The most bytes one server-sent event (or one unfinished line) may have.
const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// The most bytes of an error body read for its message.
const ERROR_BODY_READ_LIMIT: usize = 64 * 1024;

/// An API key that never shows in `Debug` output.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// How the key travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// `Authorization: Bearer KEY`.
    Bearer,
    /// A header of its own (`x-api-key: KEY`).
    Header(&'static str),
}

/// A server's error object: `{"error": {"message": …}}` (OpenAI, and Anthropic's
/// `{"type": "error", "error": {"type": …, "message": …}}`); some compatible servers send a bare
/// string instead.
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorEnvelope {
    pub(crate) error: WireError,
}

/// The error object itself (see [`ErrorEnvelope`]).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum WireError {
    Object {
        #[serde(default, rename = "type")]
        kind: Option<String>,
        message: String,
    },
    Text(String),
}

impl WireError {
    /// The message, after the error type when the server names one (`overloaded_error: …`).
    pub(crate) fn into_message(self) -> String {
        match self {
            WireError::Object {
                kind: Some(kind),
                message,
            } if !kind.is_empty() => format!("{kind}: {message}"),
            WireError::Object { message, .. } | WireError::Text(message) => message,
        }
    }
}

/// One model endpoint (`POST url`) with its key, waits and retries.
#[derive(Debug)]
pub(crate) struct Endpoint {
    url: String,
    api_key: Option<ApiKey>,
    auth: Auth,
    headers: Vec<(&'static str, &'static str)>,
    client: reqwest::Client,
    retry: RetryPolicy,
    idle_timeout: Duration,
    gate: Option<Gate>,
}

impl Endpoint {
    /// An endpoint at `url` sending `options.api_key` (blank counts as none) as `auth` says.
    pub(crate) fn new(
        url: String,
        options: &ClientOptions,
        auth: Auth,
    ) -> Result<Self, AgentError> {
        Ok(Self {
            url,
            api_key: options
                .api_key
                .clone()
                .filter(|key| !key.trim().is_empty())
                .map(ApiKey),
            auth,
            headers: Vec::new(),
            client: http_client(options)?,
            retry: options.retry,
            idle_timeout: options.idle_timeout,
            gate: options.gate.clone(),
        })
    }

    /// The same endpoint sending a fixed header with every request.
    pub(crate) fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }

    #[cfg(test)]
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn has_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// Runs `attempt` until it succeeds, fails for good, or the retries run out; a retryable
    /// failure waits for its `Retry-After` or a jittered backoff. Each attempt first passes the
    /// gate, if there is one, as a call of about `estimate` tokens; a 429 slows the gate down.
    pub(crate) async fn retrying<F, Fut>(
        &self,
        estimate: u64,
        mut attempt: F,
    ) -> Result<ModelResponse, AgentError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<ModelResponse, Failure>>,
    {
        let mut retries = 0;
        loop {
            tracing::Span::current().record("attempt", retries + 1);
            let failure = match self.gated(estimate, &mut attempt).await? {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            let Failure::Retryable { error, retry_after } = failure else {
                return Err(failure.into_error());
            };
            let delay = retry_after.unwrap_or_else(|| self.retry.backoff(retries));
            if let (Some(gate), AgentError::RateLimited(_)) = (&self.gate, &error) {
                gate.0.rate_limited(delay).await;
            }
            if retries >= self.retry.max_retries {
                return Err(error);
            }
            tracing::debug!(
                attempt = retries + 1,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "model call failed; retrying"
            );
            tokio::time::sleep(delay).await;
            retries += 1;
        }
    }

    /// One attempt, admitted by the gate first when there is one and given back with the
    /// tokens the provider reported.
    async fn gated<F, Fut>(
        &self,
        estimate: u64,
        attempt: &mut F,
    ) -> Result<Result<ModelResponse, Failure>, AgentError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<ModelResponse, Failure>>,
    {
        let Some(gate) = &self.gate else {
            return Ok(attempt().await);
        };
        let admitted = Admitted {
            permit: Some(gate.0.acquire(estimate).await?),
            gate: gate.clone(),
        };
        let outcome = attempt().await;
        let used = outcome
            .as_ref()
            .ok()
            .map(|response| response.usage.prompt_tokens + response.usage.completion_tokens);
        admitted.release(used.filter(|used| *used > 0)).await;
        Ok(outcome)
    }

    /// Posts `body` as JSON; a non-success status is a failure carrying the server's message
    /// (without the key).
    pub(crate) async fn post<B: Serialize + ?Sized>(
        &self,
        body: &B,
    ) -> Result<reqwest::Response, Failure> {
        let mut request = self.client.post(&self.url).json(body);
        for (name, value) in &self.headers {
            request = request.header(*name, *value);
        }
        request = self.authorize(request)?;
        let response = self
            .before_idle_timeout(request.send())
            .await?
            .map_err(|e| self.transport_failure(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers());
        let message = self.redact(&error_message(response).await);
        Err(classify_status(status, &message, retry_after))
    }

    fn authorize(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let Some(ApiKey(key)) = &self.api_key else {
            return Ok(request);
        };
        match self.auth {
            Auth::Bearer => Ok(request.bearer_auth(key)),
            Auth::Header(name) => {
                let mut value = HeaderValue::from_str(key).map_err(|_| {
                    Failure::Fatal(AgentError::NotConfigured(
                        "the API key holds characters a header cannot carry".into(),
                    ))
                })?;
                value.set_sensitive(true);
                Ok(request.header(name, value))
            }
        }
    }

    /// Reads a server-sent-event stream, handing each event's `data` to `on_data`. A trailing
    /// event the server cut off is handed over too, its failure ignored: the caller judges
    /// whether the stream was complete.
    pub(crate) async fn read_events(
        &self,
        mut response: reqwest::Response,
        mut on_data: impl FnMut(&str) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let mut decoder = SseDecoder::default();
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
                on_data(&data)?;
            }
            if decoder.pending() > MAX_EVENT_BYTES {
                return Err(too_large("one streamed event", MAX_EVENT_BYTES));
            }
        }
        if let Some(data) = decoder.finish() {
            let _ = on_data(&data);
        }
        Ok(())
    }

    /// Reads a whole (capped) body.
    pub(crate) async fn read_body(&self, response: reqwest::Response) -> Result<Vec<u8>, Failure> {
        self.before_idle_timeout(read_capped(response, MAX_RESPONSE_BYTES))
            .await?
            .map_err(|e| self.transport_failure(&e))?
            .ok_or_else(|| too_large("the answer", MAX_RESPONSE_BYTES))
    }

    /// `future`'s output, or a retryable failure when the server stays silent for the idle
    /// timeout.
    async fn before_idle_timeout<T>(&self, future: impl Future<Output = T>) -> Result<T, Failure> {
        tokio::time::timeout(self.idle_timeout, future)
            .await
            .map_err(|_| {
                Failure::unavailable(format!(
                    "{} sent nothing for {} ms (idle timeout)",
                    self.url,
                    self.idle_timeout.as_millis()
                ))
            })
    }

    fn transport_failure(&self, error: &reqwest::Error) -> Failure {
        Failure::unavailable(self.redact(&format!(
            "request to {} failed: {}",
            self.url,
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

/// An admitted attempt's permit: given back when the attempt ends, and also when the attempt
/// is dropped midway (its job stopped by a time limit or a cancel), so its slot does not wait
/// for its lease to lapse.
struct Admitted {
    gate: Gate,
    permit: Option<Permit>,
}

impl Admitted {
    async fn release(mut self, used: Option<u64>) {
        if let Some(permit) = self.permit.take() {
            self.gate.0.release(permit, used).await;
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let gate = self.gate.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { gate.0.release(permit, None).await });
        }
    }
}

/// True when the answer is one JSON document rather than an event stream.
/// How a provider's wire format becomes a [`ModelResponse`]: a plain JSON answer (a server
/// that ignored `stream: true`), or streamed events gathered one `data` payload at a time.
pub(crate) trait Answer: Default {
    fn from_json(bytes: &[u8], on_delta: DeltaSink<'_>) -> Result<ModelResponse, Failure>;
    fn gather(&mut self, data: &str, on_delta: DeltaSink<'_>) -> Result<(), Failure>;
    fn end(self) -> Result<ModelResponse, Failure>;
}

impl Endpoint {
    /// One HTTP exchange: posts `body` and reads the answer, streamed or plain.
    pub(crate) async fn exchange<A: Answer, B: Serialize + ?Sized>(
        &self,
        body: &B,
        on_delta: DeltaSink<'_>,
    ) -> Result<ModelResponse, Failure> {
        let response = self.post(body).await?;
        if is_json(&response) {
            let bytes = self.read_body(response).await?;
            return A::from_json(&bytes, on_delta);
        }
        let mut answer = A::default();
        self.read_events(response, |data| answer.gather(data, on_delta))
            .await?;
        answer.end()
    }
}

pub(crate) fn is_json(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.contains("application/json"))
}

fn http_client(options: &ClientOptions) -> Result<reqwest::Client, AgentError> {
    // reqwest is built without a crypto provider; installing ring twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A model server is asked at the URL checked for it, never sent on elsewhere: a redirect
    // would take the workbench's data to a host no one checked (an answer of 3xx is an error).
    let mut builder = reqwest::Client::builder()
        .connect_timeout(options.connect_timeout)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(ceiling) = options.request_timeout {
        builder = builder.timeout(ceiling);
    }
    builder
        .build()
        .map_err(|e| AgentError::NotConfigured(format!("cannot build the HTTP client: {e}")))
}

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

/// The server's explanation: its error object's message, else the start of the body.
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

    #[test]
    fn error_objects_name_their_type_when_they_have_one() {
        let parse = |text: &str| {
            serde_json::from_str::<ErrorEnvelope>(text)
                .expect("envelope")
                .error
                .into_message()
        };
        assert_eq!(
            parse(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            "overloaded_error: Overloaded"
        );
        assert_eq!(parse(r#"{"error":{"message":"quota"}}"#), "quota");
        assert_eq!(parse(r#"{"error":"model not loaded"}"#), "model not loaded");
    }
}
