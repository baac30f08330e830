//! Payload encoding: MessagePack (named fields) by default, JSON when the request says
//! `Content-Type: application/json`. Decoding checks the protocol version first, so an
//! unsupported version gets `UNSUPPORTED_VERSION` and anything malformed `VALIDATION_FAILED`.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::{ErrorBody, ErrorCode, PROTOCOL_VERSION};

/// The NATS header that selects the payload format.
pub const CONTENT_TYPE_HEADER: &str = "Content-Type";
/// The content type that selects JSON.
pub const JSON_CONTENT_TYPE: &str = "application/json";
/// Progress: a request carrying this header asks the worker for progress messages, which it
/// sends (with the same header) to the reply subject every few seconds while a long call runs;
/// the caller restarts its idle deadline on each. Requests without it get only the reply.
pub const PROGRESS_HEADER: &str = "Atelier-Progress";
/// The content type of the default format.
pub const MSGPACK_CONTENT_TYPE: &str = "application/msgpack";

/// A payload format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    MessagePack,
    Json,
}

impl Format {
    /// The format named by a `Content-Type` header value (absent or unknown: MessagePack).
    pub fn from_content_type(content_type: Option<&str>) -> Self {
        match content_type {
            Some(value) if value.trim().eq_ignore_ascii_case(JSON_CONTENT_TYPE) => Format::Json,
            _ => Format::MessagePack,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::MessagePack => MSGPACK_CONTENT_TYPE,
            Format::Json => JSON_CONTENT_TYPE,
        }
    }
}

/// Encodes a payload. Structs are written as maps with field names, so readers ignore unknown
/// fields and optional fields may be added later.
pub fn encode<T: Serialize>(value: &T, format: Format) -> Result<Vec<u8>, ErrorBody> {
    let encoded = match format {
        Format::MessagePack => rmp_serde::to_vec_named(value).map_err(|e| e.to_string()),
        Format::Json => serde_json::to_vec(value).map_err(|e| e.to_string()),
    };
    encoded
        .map_err(|reason| ErrorBody::new(ErrorCode::Internal, format!("encode failed: {reason}")))
}

#[derive(Deserialize)]
struct VersionProbe {
    #[serde(default)]
    v: Option<u64>,
}

fn decode_raw<T: DeserializeOwned>(bytes: &[u8], format: Format) -> Result<T, String> {
    match format {
        Format::MessagePack => rmp_serde::from_slice(bytes).map_err(|e| e.to_string()),
        Format::Json => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
    }
}

/// Decodes a versioned payload: checks `v` first, then the full shape.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], format: Format) -> Result<T, ErrorBody> {
    let malformed = |reason: String| {
        ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!("malformed {} payload: {reason}", format_name(format)),
        )
    };
    crate::limits::check_depth(bytes, format)?;
    let probe: VersionProbe = decode_raw(bytes, format).map_err(malformed)?;
    match probe.v {
        None => {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "payload has no protocol version field `v` (this server speaks v{PROTOCOL_VERSION})"
                ),
            ));
        }
        Some(v) if v != u64::from(PROTOCOL_VERSION) => {
            return Err(ErrorBody::new(
                ErrorCode::UnsupportedVersion,
                format!(
                    "protocol version {v} is not supported; this server speaks v{PROTOCOL_VERSION}"
                ),
            ));
        }
        Some(_) => {}
    }
    decode_raw(bytes, format).map_err(malformed)
}

fn format_name(format: Format) -> &'static str {
    match format {
        Format::MessagePack => "MessagePack",
        Format::Json => "JSON",
    }
}

/// Every reply: either `ok` with the verb's result or `error` with a stable code.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
pub struct Reply<T> {
    pub v: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// Beside `ok`: what the answer leaves out of what was asked (a listing without the shards
    /// that have no owner now: `SHARD_UNAVAILABLE` naming them). A client that knows nothing of
    /// it reads `ok` as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<ErrorBody>,
}

impl<T> Reply<T> {
    pub fn ok(value: T) -> Self {
        Self::partial(value, None)
    }

    /// `value`, leaving out what `left_out` says (if anything).
    pub fn partial(value: T, left_out: Option<ErrorBody>) -> Self {
        Self {
            v: PROTOCOL_VERSION,
            ok: Some(value),
            error: None,
            partial: left_out,
        }
    }

    pub fn error(error: ErrorBody) -> Self {
        Self {
            v: PROTOCOL_VERSION,
            ok: None,
            error: Some(error),
            partial: None,
        }
    }

    pub fn from_result(result: Result<T, ErrorBody>) -> Self {
        match result {
            Ok(value) => Self::ok(value),
            Err(error) => Self::error(error),
        }
    }

    /// The reply as a `Result`; a reply with neither part is a protocol error.
    pub fn into_result(self) -> Result<T, ErrorBody> {
        self.into_partial().map(|(value, _)| value)
    }

    /// The reply as a `Result` of its value and what it leaves out.
    pub fn into_partial(self) -> Result<(T, Option<ErrorBody>), ErrorBody> {
        match (self.ok, self.error) {
            (_, Some(error)) => Err(error),
            (Some(value), None) => Ok((value, self.partial)),
            (None, None) => Err(ErrorBody::new(
                ErrorCode::Internal,
                "reply carried neither a result nor an error",
            )),
        }
    }
}

/// Encodes a reply, falling back to an `INTERNAL` error reply if the value cannot be encoded.
pub fn encode_reply<T: Serialize>(reply: &Reply<T>, format: Format) -> Vec<u8> {
    match encode(reply, format) {
        Ok(bytes) => bytes,
        Err(error) => encode(&Reply::<()>::error(error), format).unwrap_or_default(),
    }
}

/// Decodes a reply payload into a `Result`.
pub fn decode_reply<T: DeserializeOwned>(bytes: &[u8], format: Format) -> Result<T, ErrorBody> {
    decode::<Reply<T>>(bytes, format)?.into_result()
}

/// Decodes a reply payload into its value and what it leaves out ([`Reply::partial`]).
pub fn decode_partial_reply<T: DeserializeOwned>(
    bytes: &[u8],
    format: Format,
) -> Result<(T, Option<ErrorBody>), ErrorBody> {
    decode::<Reply<T>>(bytes, format)?.into_partial()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        v: u16,
        name: String,
        #[serde(default)]
        added_later: Option<u32>,
    }

    fn sample() -> Sample {
        Sample {
            v: PROTOCOL_VERSION,
            name: "q3".into(),
            added_later: None,
        }
    }

    #[test]
    fn a_partial_answer_keeps_its_value_for_every_client_and_tells_what_it_left_out() {
        let left_out = ErrorBody::new(ErrorCode::ShardUnavailable, "shard 3 had no owner");
        let reply = Reply::partial(vec![1_u32, 2], Some(left_out.clone()));
        for format in [Format::MessagePack, Format::Json] {
            let bytes = encode_reply(&reply, format);
            assert_eq!(decode_reply::<Vec<u32>>(&bytes, format), Ok(vec![1, 2]));
            assert_eq!(
                decode_partial_reply::<Vec<u32>>(&bytes, format),
                Ok((vec![1, 2], Some(left_out.clone())))
            );
        }
        let whole = encode_reply(&Reply::ok(7_u32), Format::Json);
        assert_eq!(String::from_utf8_lossy(&whole), r#"{"v":1,"ok":7}"#);
        assert_eq!(
            decode_partial_reply::<u32>(&whole, Format::Json),
            Ok((7, None))
        );
    }

    #[test]
    fn round_trips_in_both_formats() {
        for format in [Format::MessagePack, Format::Json] {
            let bytes = encode(&sample(), format).unwrap_or_default();
            let back: Sample = decode(&bytes, format).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back, sample());
        }
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let bytes = br#"{"v":1,"name":"q3","future":[1,2]}"#;
        let back: Sample = decode(bytes, Format::Json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.name, "q3");
    }

    #[test]
    fn wrong_version_is_unsupported() {
        let err = decode::<Sample>(br#"{"v":99,"name":"x"}"#, Format::Json).err();
        assert_eq!(err.map(|e| e.code), Some(ErrorCode::UnsupportedVersion));
    }

    #[test]
    fn garbage_is_validation_failed_in_both_formats() {
        for format in [Format::MessagePack, Format::Json] {
            for bytes in [&b"\xc1\xff\x00"[..], b"{not json", b"", b"[1,2,3]"] {
                let err = decode::<Sample>(bytes, format).err();
                assert_eq!(
                    err.map(|e| e.code),
                    Some(ErrorCode::ValidationFailed),
                    "{bytes:?}"
                );
            }
        }
    }

    #[test]
    fn missing_version_is_validation_failed() {
        let err = decode::<Sample>(br#"{"name":"x"}"#, Format::Json).err();
        assert_eq!(err.map(|e| e.code), Some(ErrorCode::ValidationFailed));
    }

    #[test]
    fn content_type_selects_format() {
        assert_eq!(
            Format::from_content_type(Some("application/json")),
            Format::Json
        );
        assert_eq!(
            Format::from_content_type(Some("text/plain")),
            Format::MessagePack
        );
        assert_eq!(Format::from_content_type(None), Format::MessagePack);
    }
}
