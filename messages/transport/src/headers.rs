//! Message headers: the payload format, W3C trace context, and progress marks.

use async_nats::HeaderMap;
use atelier_messages::Format;
use atelier_messages::codec::{CONTENT_TYPE_HEADER, PROGRESS_HEADER};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The payload format a message declares (no or unknown `Content-Type`: MessagePack).
pub fn format_of(headers: Option<&HeaderMap>) -> Format {
    Format::from_content_type(
        headers
            .and_then(|headers| headers.get(CONTENT_TYPE_HEADER))
            .map(|value| value.as_str()),
    )
}

/// True when the message carries the progress mark (a progress message, or a request that
/// asks for progress messages).
pub fn has_progress_mark(headers: Option<&HeaderMap>) -> bool {
    headers.is_some_and(|headers| headers.get(PROGRESS_HEADER).is_some())
}

/// Headers of a request or reply in `format`.
pub fn with_format(format: Format) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE_HEADER, format.content_type());
    headers
}

/// Writes trace-context headers into a NATS header map.
struct HeaderInjector<'a>(&'a mut HeaderMap);

impl opentelemetry::propagation::Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

/// Adds the current span's W3C trace context (`traceparent`, `tracestate`) to `headers`; with no
/// OpenTelemetry pipeline installed nothing is added.
pub fn inject_trace_context(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers));
    });
}

/// Reads the W3C trace context of a message's headers.
struct HeaderExtractor<'a>(Option<&'a HeaderMap>);

impl opentelemetry::propagation::Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .and_then(|headers| headers.get(key))
            .map(|value| value.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .map(|headers| headers.iter().map(|(name, _)| name.as_ref()).collect())
            .unwrap_or_default()
    }
}

/// Makes `span` a child of the trace context a message carries (a no-op when it carries none).
pub fn join_trace(span: &tracing::Span, headers: Option<&HeaderMap>) {
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(headers))
    });
    if let Err(error) = span.set_parent(parent) {
        tracing::debug!(?error, "trace context not attached");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_and_progress_come_from_headers() {
        assert_eq!(format_of(None), Format::MessagePack);
        assert_eq!(format_of(Some(&with_format(Format::Json))), Format::Json);
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE_HEADER, " Application/JSON ");
        assert_eq!(format_of(Some(&headers)), Format::Json);
        assert!(!has_progress_mark(Some(&headers)));
        headers.insert(PROGRESS_HEADER, "1");
        assert!(has_progress_mark(Some(&headers)));
    }
}
