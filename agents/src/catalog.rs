//! The tool catalog: what the model may call, where it runs, and what it may touch.
//!
//! Names, parameters and descriptions follow the seed contracts (docs/tools.md).

use atelier_messages::tool::Pool;
use serde::Serialize;
use serde_json::{Value, json};

/// What a tool may do to the workbench.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    Read,
    Write,
    Create,
}

/// How consequential a call is (destructive calls need approval).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionClass {
    Navigational,
    Additive,
    Destructive,
}

/// One tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// JSON schema of the arguments object.
    pub parameters: Value,
    pub pool: Pool,
    pub capability: Capability,
    pub action_class: ActionClass,
}

impl ToolSpec {
    pub fn is_read_only(&self) -> bool {
        self.capability == Capability::Read
    }
}

fn path_param() -> Value {
    json!({"type": "string", "description": "Workbench file path"})
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

/// Every tool, in a stable order.
pub fn catalog() -> Vec<ToolSpec> {
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
        ToolSpec {
            name: "table_get_map",
            description: "Get a structural map of a tabular text file (CSV). Returns column names, inferred types, row count, chunk boundaries, and encoding metadata. Use this to understand the table structure before reading or querying.",
            parameters: object(json!({"path": path_param()}), &["path"]),
            pool: Pool::Tabular,
            capability: Capability::Read,
            action_class: ActionClass::Navigational,
        },
        ToolSpec {
            name: "table_query",
            description: "Run a read-only SQL query against a tabular file. The table is available as 'data' in the query (e.g., SELECT * FROM data WHERE amount > 100). Only SELECT statements are allowed. For large results, use window_rows and window_offset to paginate. Run a COUNT(*) first to estimate result size before fetching rows.",
            parameters: object(
                json!({
                    "path": path_param(),
                    "query": {"type": "string", "description": "SQL SELECT query. Reference the table as 'data'."},
                    "window_rows": {"type": "integer", "description": "Maximum rows to return in this response. Omit for engine default."},
                    "window_offset": {"type": "integer", "description": "Row offset for pagination. Omit or 0 for the first window."}
                }),
                &["path", "query"],
            ),
            pool: Pool::Tabular,
            capability: Capability::Read,
            action_class: ActionClass::Navigational,
        },
        ToolSpec {
            name: "table_export",
            description: "Export tabular data to a file in Draft. Can export the full table or a query result subset. Target must be a .csv or .xlsx file path in Draft.",
            parameters: object(
                json!({
                    "path": {"type": "string", "description": "Source workbench file path"},
                    "query": {"type": "string", "description": "Optional SQL query to filter/transform data before export. If omitted, exports the full table."},
                    "target_path": {"type": "string", "description": "Destination file path in Draft"},
                    "format": {"type": "string", "enum": ["csv", "xlsx"], "description": "Output format"},
                    "sheet": {"type": "string", "description": "Sheet name for xlsx output. Defaults to 'Sheet1'."}
                }),
                &["path", "target_path", "format"],
            ),
            pool: Pool::Tabular,
            capability: Capability::Create,
            action_class: ActionClass::Additive,
        },
    ]
}

/// Looks a tool up by name.
pub fn find(name: &str) -> Option<ToolSpec> {
    catalog().into_iter().find(|spec| spec.name == name)
}

/// Tools the Research phase may use (read-only).
pub fn research_tools() -> Vec<ToolSpec> {
    catalog()
        .into_iter()
        .filter(ToolSpec::is_read_only)
        .collect()
}

/// Tools the Plan phase may use.
pub fn plan_tools() -> Vec<ToolSpec> {
    catalog()
        .into_iter()
        .filter(|spec| spec.name == "read_file")
        .collect()
}

/// Tools the Implement phase may use (all of them).
pub fn implement_tools() -> Vec<ToolSpec> {
    catalog()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn research_tools_are_read_only_and_include_table_map() {
        let names: Vec<_> = research_tools().iter().map(|spec| spec.name).collect();
        assert!(names.contains(&"table_get_map"));
        assert!(!names.contains(&"table_export"));
        assert!(!names.contains(&"write_text_file"));
    }

    #[test]
    fn every_schema_is_an_object_with_known_required_fields() {
        for spec in catalog() {
            let properties = spec.parameters["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for required in spec.parameters["required"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let key = required.as_str().unwrap_or_default();
                assert!(properties.contains_key(key), "{}: {key}", spec.name);
            }
        }
    }
}
