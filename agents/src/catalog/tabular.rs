//! Tools served by the tabular pool (DuckDB over CSV); contracts in docs/tools.md.

use atelier_messages::tool::Pool;
use serde_json::json;

use super::{ActionClass, Capability, ToolSpec, object, path_param};

/// The tabular pool's tools, in a stable order.
pub(super) fn tools() -> Vec<ToolSpec> {
    vec![
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
