//! Tools served by the office pool (files, text, office documents); contracts in docs/tools.md.

use atelier_messages::tool::Pool;
use serde_json::json;

use super::{ActionClass, Capability, ToolSpec, object, path_param};

/// The office pool's tools, in a stable order.
pub(super) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "list_files",
            description: "List all files in the workbench with their metadata (path, kind, size).",
            parameters: object(json!({}), &[]),
            pool: Pool::Office,
            capability: Capability::Read,
            action_class: ActionClass::Navigational,
        },
        ToolSpec {
            name: "get_file_info",
            description: "Get detailed metadata for a file: kind, size, line count for text, columns for CSV.",
            parameters: object(json!({"path": path_param()}), &["path"]),
            pool: Pool::Office,
            capability: Capability::Read,
            action_class: ActionClass::Navigational,
        },
        ToolSpec {
            name: "read_file",
            description: "Read content from a text or CSV file by line range. Use get_file_info first, then read specific regions.",
            parameters: object(
                json!({
                    "path": path_param(),
                    "line_start": {"type": "integer", "description": "Starting line, 1-indexed (text only)"},
                    "line_count": {"type": "integer", "description": "Number of lines to read (text only)"}
                }),
                &["path"],
            ),
            pool: Pool::Office,
            capability: Capability::Read,
            action_class: ActionClass::Navigational,
        },
        ToolSpec {
            name: "write_text_file",
            description: "Write or create a text file (md, txt, csv, json, etc.) in the draft. Folders are allowed in the path.",
            parameters: object(
                json!({
                    "path": path_param(),
                    "content": {"type": "string", "description": "File content"}
                }),
                &["path", "content"],
            ),
            pool: Pool::Office,
            capability: Capability::Create,
            action_class: ActionClass::Additive,
        },
    ]
}
