//! Typed request/reply over NATS with the MessagePack codec. Every request carries the W3C trace
//! context of the current span (`traceparent`/`tracestate` headers) so the peer's span joins the
//! caller's trace; with no OpenTelemetry pipeline installed nothing is added.

use std::time::Duration;

use async_nats::client::RequestErrorKind;
use atelier_messages::codec::CONTENT_TYPE_HEADER;
use atelier_messages::{ErrorBody, ErrorCode, Format, decode_reply, encode};
use serde::{Serialize, de::DeserializeOwned};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Writes trace-context headers into a NATS header map.
struct HeaderInjector<'a>(&'a mut async_nats::HeaderMap);

impl opentelemetry::propagation::Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

/// Adds the current span's W3C trace context to `headers`.
pub fn inject_trace_context(headers: &mut async_nats::HeaderMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers));
    });
}

/// Sends `request` to `subject` and decodes the reply, mapping transport failures to codes:
/// no responders → `TOOL_WORKER_UNAVAILABLE` (or `unavailable_code`), timeout → `TOOL_TIMEOUT`.
pub async fn request<Req: Serialize, Res: DeserializeOwned>(
    client: &async_nats::Client,
    subject: String,
    request: &Req,
    timeout: Duration,
) -> Result<Res, ErrorBody> {
    let payload = encode(request, Format::MessagePack)?;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(CONTENT_TYPE_HEADER, Format::MessagePack.content_type());
    inject_trace_context(&mut headers);
    let outgoing = async_nats::Request::new()
        .payload(payload.into())
        .headers(headers)
        .timeout(Some(timeout));
    let reply = client
        .send_request(subject.clone(), outgoing)
        .await
        .map_err(|error| match error.kind() {
            RequestErrorKind::NoResponders => ErrorBody::new(
                ErrorCode::ToolWorkerUnavailable,
                format!("nothing is serving `{subject}`; start the matching `atelier worker`/`atelier coordinator`"),
            ),
            RequestErrorKind::TimedOut => ErrorBody::new(
                ErrorCode::ToolTimeout,
                format!("no reply on `{subject}` within {} s", timeout.as_secs()),
            ),
            RequestErrorKind::MaxPayloadExceeded => ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("request on `{subject}` exceeds the server's max payload"),
            ),
            _ => ErrorBody::new(ErrorCode::Internal, format!("request on `{subject}` failed: {error}")),
        })?;
    decode_reply(&reply.payload, Format::MessagePack)
}
