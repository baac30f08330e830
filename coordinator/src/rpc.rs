//! Typed request/reply over NATS with the MessagePack codec.

use std::time::Duration;

use async_nats::client::RequestErrorKind;
use atelier_messages::codec::CONTENT_TYPE_HEADER;
use atelier_messages::{ErrorBody, ErrorCode, Format, decode_reply, encode};
use serde::{Serialize, de::DeserializeOwned};

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
