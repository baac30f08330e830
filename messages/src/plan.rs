//! A plan's checklist items as the job view carries them: status, targets, contracts, what
//! each changed.

use serde::{Deserialize, Serialize};

/// Status of one plan item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    Pending,
    Done,
    Failed,
}

/// One checklist item of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanItem {
    pub index: u32,
    pub label: String,
    #[serde(default)]
    pub description: String,
    pub status: ItemStatus,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub failure: Option<String>,
    /// The stable code of the failure, when it has one (e.g. `AGENT_LOOP_DETECTED`).
    #[serde(default)]
    pub failure_code: Option<crate::ErrorCode>,
    /// Why a done item changed nothing, as the model stated it.
    #[serde(default)]
    pub no_change: Option<String>,
    /// The workbench paths the item says it writes (`→ path[, path]` in the checklist): it is
    /// done only when the draft changed each of them during the item.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// What the targets must hold when the item is done ([`crate::contract`]), one per target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contracts: Vec<crate::contract::Contract>,
    /// The paths the draft changed (added, modified or deleted) during the item, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// True when a call of the item that writes (not only reads) succeeded, even if the draft
    /// ended the same (a file written again with the content it had).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wrote: bool,
    /// True for an item an earlier item's final answer appended to the plan (an amendment).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub amended: bool,
}

impl PlanItem {
    /// A pending item.
    pub fn pending(index: u32, label: String, description: String) -> Self {
        Self {
            index,
            label,
            description,
            status: ItemStatus::Pending,
            attempts: 0,
            failure: None,
            failure_code: None,
            no_change: None,
            targets: Vec::new(),
            contracts: Vec::new(),
            changed: Vec::new(),
            wrote: false,
            amended: false,
        }
    }

    /// The paths the item changed without naming them as targets.
    pub fn unnamed_changes(&self) -> Vec<&str> {
        self.changed
            .iter()
            .filter(|path| !self.targets.contains(path))
            .map(String::as_str)
            .collect()
    }
}
