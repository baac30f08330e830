//! Tool calls to worker pools (`atelier.tool.<pool>`).

use serde::{Deserialize, Serialize};

use crate::store::{FileContent, ManifestEntry};

/// What [`ToolName::runs_on`] says of a local tool.
pub const LOCAL: &str = "local";

/// A pool of interchangeable workers serving one family of tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pool {
    Tabular,
    Office,
}

impl Pool {
    pub const ALL: [Pool; 2] = [Pool::Tabular, Pool::Office];

    pub fn as_str(self) -> &'static str {
        match self {
            Pool::Tabular => "tabular",
            Pool::Office => "office",
        }
    }

    pub fn parse(name: &str) -> Option<Pool> {
        Pool::ALL.into_iter().find(|pool| pool.as_str() == name)
    }
}

impl Pool {
    /// The request subject of this pool's queue group: `atelier.tool.<pool>`.
    pub fn subject(self) -> String {
        crate::subjects::tool(self.as_str())
    }

    /// The tools this pool serves, in catalog order.
    pub fn tools(self) -> impl Iterator<Item = ToolName> {
        ToolName::ALL
            .into_iter()
            .filter(move |tool| tool.pool() == Some(self))
    }
}

impl std::fmt::Display for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One tool call, sent to a pool's queue group.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolRequest {
    pub v: u16,
    /// Unique per call; write tools are idempotent per call id.
    pub call_id: String,
    #[serde(default)]
    pub job_id: Option<String>,
    pub workbench: String,
    pub tool: String,
    /// The tool's arguments, as the model gave them (a JSON object).
    pub args: serde_json::Value,
    /// The files the agent sees (the draft when one exists, else published).
    pub files: Vec<ManifestEntry>,
}

/// What a write tool changes in the draft: files written, then paths removed (a rename is the
/// new path in `files` and the old one in `delete`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraftChanges {
    #[serde(default)]
    pub files: Vec<FileContent>,
    #[serde(default)]
    pub delete: Vec<String>,
}

impl DraftChanges {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.delete.is_empty()
    }
}

/// A successful tool call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolOutput {
    pub call_id: String,
    pub tool: String,
    /// The tool's response object (shapes documented in docs/tools.md).
    pub output: serde_json::Value,
    /// Which worker ran it (`<pool>-<host>-<pid>`).
    pub worker: String,
    pub elapsed_ms: u64,
    /// The draft changes of a write tool. Workers never write the draft: the caller applies
    /// these once per call id (the coordinator does, in-process; another client through
    /// `atelier.store.write`).
    #[serde(default)]
    pub changes: Option<DraftChanges>,
}

/// Every tool a model (or a workflow) may call: the one spelling of each name, and the pool that
/// serves it — or none for a local tool, which the agent driver answers itself and never sends
/// to a worker (`recall_tool_result`). The wire carries the name as a string (`ToolRequest::tool`), so an unknown name
/// reaches the worker and is answered with `VALIDATION_FAILED` listing the pool's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolName {
    ListFiles,
    GetFileInfo,
    GetFileMap,
    ReadFile,
    WriteTextFile,
    XlsxOperations,
    DocxOperations,
    PptxOperations,
    XlsxGetStyles,
    DocxGetStyles,
    PptxGetStyles,
    DeleteFile,
    RenameFile,
    TableGetMap,
    TableDescribe,
    TableStats,
    TableReadRows,
    TableQuery,
    TableExport,
    TableUpdateFromExport,
    /// Local: a slice of an earlier call's full result, from the job's journal.
    RecallToolResult,
}

impl ToolName {
    /// Every tool, office pool first, then tabular, then local tools, in catalog order.
    pub const ALL: [ToolName; 21] = [
        ToolName::ListFiles,
        ToolName::GetFileInfo,
        ToolName::GetFileMap,
        ToolName::ReadFile,
        ToolName::WriteTextFile,
        ToolName::XlsxOperations,
        ToolName::DocxOperations,
        ToolName::PptxOperations,
        ToolName::XlsxGetStyles,
        ToolName::DocxGetStyles,
        ToolName::PptxGetStyles,
        ToolName::DeleteFile,
        ToolName::RenameFile,
        ToolName::TableGetMap,
        ToolName::TableDescribe,
        ToolName::TableStats,
        ToolName::TableReadRows,
        ToolName::TableQuery,
        ToolName::TableExport,
        ToolName::TableUpdateFromExport,
        ToolName::RecallToolResult,
    ];

    /// The name the model and the wire use, e.g. `table_query`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::ListFiles => "list_files",
            ToolName::GetFileInfo => "get_file_info",
            ToolName::GetFileMap => "get_file_map",
            ToolName::ReadFile => "read_file",
            ToolName::WriteTextFile => "write_text_file",
            ToolName::XlsxOperations => "xlsx_operations",
            ToolName::DocxOperations => "docx_operations",
            ToolName::PptxOperations => "pptx_operations",
            ToolName::XlsxGetStyles => "xlsx_get_styles",
            ToolName::DocxGetStyles => "docx_get_styles",
            ToolName::PptxGetStyles => "pptx_get_styles",
            ToolName::DeleteFile => "delete_file",
            ToolName::RenameFile => "rename_file",
            ToolName::TableGetMap => "table_get_map",
            ToolName::TableDescribe => "table_describe",
            ToolName::TableStats => "table_stats",
            ToolName::TableReadRows => "table_read_rows",
            ToolName::TableQuery => "table_query",
            ToolName::TableExport => "table_export",
            ToolName::TableUpdateFromExport => "table_update_from_export",
            ToolName::RecallToolResult => "recall_tool_result",
        }
    }

    /// The pool whose workers run this tool; `None` for a local tool, which the agent driver
    /// answers itself.
    pub fn pool(self) -> Option<Pool> {
        match self {
            ToolName::TableGetMap
            | ToolName::TableDescribe
            | ToolName::TableStats
            | ToolName::TableReadRows
            | ToolName::TableQuery
            | ToolName::TableExport
            | ToolName::TableUpdateFromExport => Some(Pool::Tabular),
            ToolName::RecallToolResult => None,
            ToolName::ListFiles
            | ToolName::GetFileInfo
            | ToolName::GetFileMap
            | ToolName::ReadFile
            | ToolName::WriteTextFile
            | ToolName::XlsxOperations
            | ToolName::DocxOperations
            | ToolName::PptxOperations
            | ToolName::XlsxGetStyles
            | ToolName::DocxGetStyles
            | ToolName::PptxGetStyles
            | ToolName::DeleteFile
            | ToolName::RenameFile => Some(Pool::Office),
        }
    }

    /// True for a tool no worker serves: the agent driver answers it itself.
    pub fn is_local(self) -> bool {
        self.pool().is_none()
    }

    /// Where the tool runs, for logs, events and metrics: its pool's name, or `local`.
    pub fn runs_on(self) -> &'static str {
        self.pool().map_or(LOCAL, Pool::as_str)
    }

    /// The tool called `name`, if there is one.
    pub fn parse(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|tool| tool.as_str() == name)
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a JSON value is named in an error about a tool argument ("a string", "an array", …).
pub fn json_kind(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_serde_matches_as_str() {
        for tool in ToolName::ALL {
            assert_eq!(ToolName::parse(tool.as_str()), Some(tool));
            let json = serde_json::to_string(&tool).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", tool.as_str()));
        }
        assert_eq!(ToolName::parse("rm_rf"), None);
    }

    #[test]
    fn every_tool_belongs_to_exactly_its_pool() {
        let tabular: Vec<_> = Pool::Tabular.tools().collect();
        assert_eq!(tabular.len(), 7);
        assert!(
            tabular
                .iter()
                .all(|tool| tool.as_str().starts_with("table_"))
        );
        assert_eq!(Pool::Office.tools().count(), 13);
        assert_eq!(Pool::Office.subject(), "atelier.tool.office");
        let local: Vec<_> = ToolName::ALL
            .into_iter()
            .filter(|tool| tool.is_local())
            .collect();
        assert_eq!(local, [ToolName::RecallToolResult]);
        assert_eq!(ToolName::RecallToolResult.runs_on(), LOCAL);
        assert_eq!(ToolName::TableQuery.runs_on(), "tabular");
    }
}
