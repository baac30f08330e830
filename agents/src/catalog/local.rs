//! Tools the agent driver answers itself, from the job's journal; no worker serves them.

use atelier_messages::tool::ToolName;
use serde_json::json;

use super::tool_spec::{ToolSpec, object};

/// The most characters one `recall_tool_result` call returns (also its default `length`).
pub const RECALL_MAX_CHARS: usize = 16_000;

/// The local tools, in a stable order.
pub(super) fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec::read_only(
        ToolName::RecallToolResult,
        "Read part of an earlier tool call's full result. Results too large for the conversation are shown as a receipt ({\"receipt\": {\"call_id\", \"tool\", \"chars\", \"preview\", \"how_to_read\"}}); pass the receipt's call_id with an offset and a length (in characters, at most 16000) to read the next part. Returns text from offset, total_chars, and next_offset (null at the end).",
        object(
            json!({
                "call_id": {"type": "string", "description": "The call_id of a receipt"},
                "offset": {"type": "integer", "minimum": 0, "description": "First character to return (0-based). Default 0."},
                "length": {"type": "integer", "minimum": 1, "maximum": RECALL_MAX_CHARS, "description": "How many characters to return (at most 16000). Default 16000."}
            }),
            &["call_id"],
        ),
    )]
}
