//! Tool calls to worker pools (`atelier.tool.<pool>`).

use serde::{Deserialize, Serialize};

use crate::store::ManifestEntry;

/// A pool of interchangeable workers serving one family of tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
}
