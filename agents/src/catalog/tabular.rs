//! Tools served by the tabular pool (DuckDB over delimited text tables); contracts in docs/tools.md
//! (schemas exactly as the seed `tabular-text-csv.md`, plus `table_update_from_export`).

use atelier_messages::approval::ActionClass;
use atelier_messages::tool::ToolName;
use serde_json::json;

use super::tool_spec::{Capability, ToolSpec, object, path_only, path_param};

/// The tabular pool's tools, in a stable order.
pub(super) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::read_only(
            ToolName::TableGetMap,
            "Get a structural map of a tabular text file (CSV). Returns column names, inferred types, row count, chunk boundaries, and encoding metadata. Use this to understand the table structure before reading or querying.",
            path_only(),
        ),
        ToolSpec::read_only(
            ToolName::TableDescribe,
            "Get detailed column descriptions for a tabular text file. Returns per-column inferred type, nullability, and distinct-value estimates. More detailed than the map's column list.",
            path_only(),
        ),
        ToolSpec::read_only(
            ToolName::TableStats,
            "Get summary statistics for columns in a tabular file. Numeric columns: min, max, mean, sum, stddev. String columns: min/max length, most common values. Date columns: min, max. Specify columns to limit scope, or omit for all columns.",
            object(
                json!({
                    "path": path_param(),
                    "columns": {"type": "array", "items": {"type": "string"}, "description": "Column names to get stats for. Omit for all columns."}
                }),
                &["path"],
            ),
        ),
        ToolSpec::read_only(
            ToolName::TableReadRows,
            "Read a range of rows from a tabular file by position. Use for browsing data without writing SQL. Returns rows with column headers and types.",
            object(
                json!({
                    "path": path_param(),
                    "row_start": {"type": "integer", "description": "First row to read (1-based, excluding header)"},
                    "row_count": {"type": "integer", "description": "Number of rows to read"},
                    "columns": {"type": "array", "items": {"type": "string"}, "description": "Column names to include. Omit for all columns."}
                }),
                &["path", "row_start", "row_count"],
            ),
        ),
        ToolSpec::read_only(
            ToolName::TableQuery,
            "Run a read-only SQL query against a tabular file. The table is available as 'data' in the query (e.g., SELECT * FROM data WHERE amount > 100). Only SELECT statements are allowed. For large results, use window_rows and window_offset to paginate. Run a COUNT(*) first to estimate result size before fetching rows. A workbook's first sheet is 'data' and each sheet is also a table by its name (SELECT * FROM \"Sheet2\"). A text file's (.txt, .md) numbers are table 'figures' (line, label, value, unit), one row per number in its text.",
            object(
                json!({
                    "path": path_param(),
                    "query": {"type": "string", "description": "SQL SELECT query. Reference the table as 'data'."},
                    "window_rows": {"type": "integer", "description": "Maximum rows to return in this response. Omit for engine default."},
                    "window_offset": {"type": "integer", "description": "Row offset for pagination. Omit or 0 for the first window."}
                }),
                &["path", "query"],
            ),
        ),
        ToolSpec::new(
            ToolName::TableExport,
            "Export tabular data to a file in Draft. Can export the full table or a query result subset. Target must be a .csv or .xlsx file path in Draft.",
            object(
                json!({
                    "path": {"type": "string", "description": "Source workbench file path"},
                    "query": {"type": "string", "description": "Optional SQL query to filter/transform data before export. If omitted, exports the full table."},
                    "target_path": {"type": "string", "description": "Destination file path in Draft"},
                    "format": {"type": "string", "enum": ["csv", "xlsx"], "description": "Output format"},
                    "sheet": {"type": "string", "description": "Sheet name for xlsx output. Defaults to 'Sheet1'."}
                }),
                &["path", "target_path", "format"],
            ),
            Capability::Create,
            ActionClass::Additive,
        ),
        ToolSpec::new(
            ToolName::TableUpdateFromExport,
            "Write tabular data (the full table or a query result) into an .xlsx workbook in Draft, creating it if needed and keeping its other sheets. Modes: replace_sheet (the sheet's content becomes the result), append_rows (rows go below the sheet's last used row), write_range (the result overwrites the cells from start_cell). Numbers stay numbers and dates stay dates.",
            object(
                json!({
                    "path": {"type": "string", "description": "Source workbench file path"},
                    "query": {"type": "string", "description": "Optional SQL query to filter/transform data before writing. If omitted, writes the full table."},
                    "target_path": {"type": "string", "description": "Destination .xlsx file path in Draft (existing or new)"},
                    "sheet": {"type": "string", "description": "Sheet to write. Defaults to 'Sheet1'; created if missing."},
                    "mode": {"type": "string", "enum": ["replace_sheet", "append_rows", "write_range"], "description": "How the data goes into the sheet"},
                    "start_cell": {"type": "string", "description": "Top-left cell for write_range, e.g. 'B3'. Defaults to 'A1'."},
                    "include_header": {"type": "boolean", "description": "Write the column names as the first row. Defaults to true, except append_rows onto a sheet that already has rows."}
                }),
                &["path", "target_path", "mode"],
            ),
            Capability::Write,
            ActionClass::Additive,
        ),
    ]
}
