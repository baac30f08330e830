//! Large tool results as receipts, and the slices `recall_tool_result` reads back.
//!
//! A result longer than [`Budgets::receipt_over_chars`](super::Budgets) reaches the model as
//!
//! ```json
//! {"receipt": {"call_id": "…", "tool": "table_query", "chars": 48213,
//!              "preview": "<the first 2,000 characters>",
//!              "how_to_read": "call recall_tool_result with call_id, offset and length (at most 16000)"}}
//! ```
//!
//! - `call_id`: the call whose full result is journaled; pass it to `recall_tool_result`.
//! - `tool`: the tool that produced it.
//! - `chars`: the length of the full result, in characters (offsets count characters too).
//! - `preview`: its first characters, so the model can often go on without reading more.
//! - `how_to_read`: the instruction, in words.
//!
//! `recall_tool_result` answers `{"call_id", "offset", "length", "total_chars", "text",
//! "next_offset"}`: `length` is how many characters `text` holds and `next_offset` is where the
//! next slice starts (`null` at the end). Slices are cut on character boundaries.

use atelier_messages::tool::ToolName;
use atelier_messages::{ErrorBody, ErrorCode};
use serde_json::{Value, json};

use crate::catalog::RECALL_MAX_CHARS;

/// How many characters of a large result a receipt shows.
const PREVIEW_CHARS: usize = 2_000;

/// What the model sees of a call's rendered result: the result itself, or a receipt when it is
/// longer than `limit` characters. Results of `recall_tool_result` are already bounded slices
/// and are never replaced.
pub(super) fn present(call_id: &str, tool: ToolName, rendered: String, limit: usize) -> String {
    if tool == ToolName::RecallToolResult {
        return rendered;
    }
    let chars = rendered.chars().count();
    if chars <= limit {
        return rendered;
    }
    let preview: String = rendered.chars().take(PREVIEW_CHARS.min(limit)).collect();
    json!({"receipt": {
        "call_id": call_id,
        "tool": tool.as_str(),
        "chars": chars,
        "preview": preview,
        "how_to_read": format!(
            "call recall_tool_result with call_id, offset and length (at most {RECALL_MAX_CHARS})"
        ),
    }})
    .to_string()
}

/// The arguments of one `recall_tool_result` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RecallRequest {
    pub call_id: String,
    /// First character (0-based).
    pub offset: usize,
    /// At most this many characters.
    pub length: usize,
}

impl RecallRequest {
    /// Reads the arguments; `VALIDATION_FAILED` names what is wrong.
    pub(super) fn parse(args: &Value) -> Result<Self, ErrorBody> {
        let call_id = match args.get("call_id") {
            Some(Value::String(id)) if !id.trim().is_empty() => id.trim().to_string(),
            _ => return Err(invalid("`call_id` is required: the call_id of a receipt")),
        };
        let offset = count(args, "offset", 0, usize::MAX, 0)?;
        let length = count(args, "length", 1, RECALL_MAX_CHARS, RECALL_MAX_CHARS)?;
        Ok(Self {
            call_id,
            offset,
            length,
        })
    }

    /// The slice of `full` (a call's whole rendered result) this request asks for.
    pub(super) fn slice(&self, full: &str) -> Value {
        let total = full.chars().count();
        let text: String = full.chars().skip(self.offset).take(self.length).collect();
        let length = text.chars().count();
        let end = self.offset.saturating_add(length);
        json!({
            "call_id": self.call_id,
            "offset": self.offset,
            "length": length,
            "total_chars": total,
            "text": text,
            "next_offset": (end < total).then_some(end),
        })
    }
}

/// The optional integer argument `name` in `min..=max`, or `default` when absent or null.
fn count(
    args: &Value,
    name: &str,
    min: usize,
    max: usize,
    default: usize,
) -> Result<usize, ErrorBody> {
    let Some(value) = args.get(name).filter(|value| !value.is_null()) else {
        return Ok(default);
    };
    value
        .as_u64()
        .and_then(|number| usize::try_from(number).ok())
        .filter(|number| (min..=max).contains(number))
        .ok_or_else(|| {
            invalid(&format!(
                "`{name}` must be an integer from {min} to {max}, got {value}"
            ))
        })
}

fn invalid(message: &str) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// `NOT_FOUND` for a call id with no journaled result in this job.
pub(super) fn not_found(call_id: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::NotFound,
        format!(
            "no result of call `{call_id}` in this job; use the call_id of a receipt shown earlier"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(offset: usize, length: usize) -> RecallRequest {
        RecallRequest {
            call_id: "j.research.0.1.0.0".into(),
            offset,
            length,
        }
    }

    #[test]
    fn small_results_pass_and_large_ones_become_receipts() {
        let small = "x".repeat(100);
        assert_eq!(present("c", ToolName::ReadFile, small.clone(), 100), small);
        let large = format!("{}{}", "é".repeat(3_000), "TAIL");
        let shown = present("c1", ToolName::TableQuery, large.clone(), 100);
        let receipt: Value = serde_json::from_str(&shown).unwrap_or_default();
        let receipt = &receipt["receipt"];
        assert_eq!(receipt["call_id"], "c1");
        assert_eq!(receipt["tool"], "table_query");
        assert_eq!(receipt["chars"], 3_004);
        // The preview is at most the limit, cut on a character boundary.
        assert_eq!(receipt["preview"], "é".repeat(100));
        assert!(
            receipt["how_to_read"]
                .as_str()
                .is_some_and(|text| text.contains("recall_tool_result") && text.contains("16000"))
        );
        assert!(!shown.contains("TAIL"));
        assert_eq!(
            present("c1", ToolName::TableQuery, large.clone(), 16_000),
            large
        );
        // A recalled slice is shown as it is, whatever its size.
        let slice = "y".repeat(500);
        assert_eq!(
            present("c2", ToolName::RecallToolResult, slice.clone(), 100),
            slice
        );
    }

    #[test]
    fn the_preview_holds_the_first_two_thousand_characters() {
        let large = "ab".repeat(20_000);
        let shown = present("c", ToolName::TableReadRows, large.clone(), 16_000);
        let receipt: Value = serde_json::from_str(&shown).unwrap_or_default();
        let preview = receipt["receipt"]["preview"].as_str().unwrap_or_default();
        assert_eq!(preview, &large[..PREVIEW_CHARS]);
        assert!(shown.len() < 3_000);
    }

    #[test]
    fn slices_are_cut_on_character_boundaries() {
        let full = "aé€😀".repeat(10); // 40 characters of 1 to 4 bytes
        let first = request(0, 6).slice(&full);
        assert_eq!(first["text"], "aé€😀aé");
        assert_eq!(first["length"], 6);
        assert_eq!(first["total_chars"], 40);
        assert_eq!(first["next_offset"], 6);
        let middle = request(3, 2).slice(&full);
        assert_eq!(middle["text"], "😀a");
        let last = request(38, 16_000).slice(&full);
        assert_eq!(last["text"], "€😀");
        assert_eq!(last["length"], 2);
        assert_eq!(last["next_offset"], Value::Null);
        // Reading slice after slice gives back the whole result.
        let mut offset = Some(0);
        let mut joined = String::new();
        while let Some(at) = offset {
            let slice = request(usize::try_from(at).unwrap_or(0), 7).slice(&full);
            joined.push_str(slice["text"].as_str().unwrap_or_default());
            offset = slice["next_offset"].as_u64();
        }
        assert_eq!(joined, full);
    }

    #[test]
    fn offsets_past_the_end_give_empty_text() {
        for offset in [40, 41, usize::MAX] {
            let slice = request(offset, 10).slice(&"é".repeat(40));
            assert_eq!(slice["text"], "");
            assert_eq!(slice["length"], 0);
            assert_eq!(slice["total_chars"], 40);
            assert_eq!(slice["next_offset"], Value::Null);
        }
    }

    #[test]
    fn arguments_are_checked() {
        assert_eq!(
            RecallRequest::parse(&json!({"call_id": "c"})).ok(),
            Some(RecallRequest {
                call_id: "c".into(),
                offset: 0,
                length: RECALL_MAX_CHARS
            })
        );
        assert_eq!(
            RecallRequest::parse(&json!({"call_id": "c", "offset": 5, "length": 7, "extra": 1}))
                .map(|r| (r.offset, r.length))
                .ok(),
            Some((5, 7))
        );
        for bad in [
            json!({}),
            json!({"call_id": ""}),
            json!({"call_id": 7}),
            json!({"call_id": "c", "offset": -1}),
            json!({"call_id": "c", "offset": "10"}),
            json!({"call_id": "c", "offset": 1.5}),
            json!({"call_id": "c", "length": 0}),
            json!({"call_id": "c", "length": RECALL_MAX_CHARS + 1}),
        ] {
            let code = RecallRequest::parse(&bad).err().map(|error| error.code);
            assert_eq!(code, Some(ErrorCode::ValidationFailed), "{bad}");
        }
        assert_eq!(not_found("x").code, ErrorCode::NotFound);
    }
}
