//! Server-sent events: a byte stream split into `data` payloads.

/// Splits a byte stream into SSE `data` payloads, whatever the chunk boundaries.
///
/// Lines end with LF or CRLF; `data:` lines accumulate until a blank line ends the event;
/// comments (`: keep-alive`) and other fields (`event:`, `id:`, `retry:`) are ignored.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    line: Vec<u8>,
    data: Option<String>,
}

impl SseDecoder {
    /// Feeds bytes; returns the payloads of the events they complete.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<String> {
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

    /// Bytes of the line and event being assembled (what a server that never ends a line or
    /// an event would make grow).
    pub(crate) fn pending(&self) -> usize {
        self.line.len() + self.data.as_ref().map_or(0, String::len)
    }

    /// Ends the stream; returns an event the server did not terminate with a blank line.
    pub(crate) fn finish(&mut self) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_decoder_is_robust_to_chunk_boundaries() {
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
    fn sse_decoder_flushes_an_unterminated_event() {
        let mut decoder = SseDecoder::default();
        assert!(decoder.push(b"data: {\"x\":1}").is_empty());
        assert_eq!(decoder.finish().as_deref(), Some("{\"x\":1}"));
    }
}
