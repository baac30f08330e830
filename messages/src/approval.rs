//! Approvals: how consequential a tool call is, which classes a person must approve, and the
//! decision on a pending call.

use serde::{Deserialize, Serialize};

/// How consequential a call is. Decided per call from the tool and its arguments: a write that
/// removes or replaces content (deleting a file, sheet, slide or paragraph, replacing a sheet,
/// overwriting an existing file) is destructive even when the tool usually only adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionClass {
    /// Reads; changes nothing.
    Navigational,
    /// Adds or edits without removing anything that was there.
    Additive,
    /// Removes or replaces content.
    Destructive,
}

impl ActionClass {
    pub const ALL: [ActionClass; 3] = [
        ActionClass::Navigational,
        ActionClass::Additive,
        ActionClass::Destructive,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionClass::Navigational => "navigational",
            ActionClass::Additive => "additive",
            ActionClass::Destructive => "destructive",
        }
    }

    pub fn parse(name: &str) -> Option<ActionClass> {
        ActionClass::ALL
            .into_iter()
            .find(|class| class.as_str() == name)
    }
}

impl std::fmt::Display for ActionClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to a call of one action class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// The job waits in `awaiting_approval` until a person decides.
    Ask,
    /// The call runs at once.
    Auto,
}

impl ApprovalMode {
    pub fn parse(name: &str) -> Option<ApprovalMode> {
        match name {
            "ask" => Some(ApprovalMode::Ask),
            "auto" => Some(ApprovalMode::Auto),
            _ => None,
        }
    }
}

fn auto() -> ApprovalMode {
    ApprovalMode::Auto
}

fn ask() -> ApprovalMode {
    ApprovalMode::Ask
}

/// Which action classes need a person's approval. Navigational calls never wait; by default
/// additive calls run and destructive ones ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalPolicy {
    #[serde(default = "auto")]
    pub additive: ApprovalMode,
    #[serde(default = "ask")]
    pub destructive: ApprovalMode,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self {
            additive: ApprovalMode::Auto,
            destructive: ApprovalMode::Ask,
        }
    }
}

impl ApprovalPolicy {
    /// Every call runs at once (`--auto-approve`).
    pub const AUTO: ApprovalPolicy = ApprovalPolicy {
        additive: ApprovalMode::Auto,
        destructive: ApprovalMode::Auto,
    };

    /// The mode for calls of `class`.
    pub fn mode(&self, class: ActionClass) -> ApprovalMode {
        match class {
            ActionClass::Navigational => ApprovalMode::Auto,
            ActionClass::Additive => self.additive,
            ActionClass::Destructive => self.destructive,
        }
    }

    /// This policy with `class` set to `mode` (navigational calls always run).
    pub fn with(mut self, class: ActionClass, mode: ApprovalMode) -> Self {
        match class {
            ActionClass::Navigational => {}
            ActionClass::Additive => self.additive = mode,
            ActionClass::Destructive => self.destructive = mode,
        }
        self
    }
}

/// A person's decision on a pending call, as journaled and shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    pub approved: bool,
    #[serde(default)]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_asks_only_for_destructive_calls() {
        let policy = ApprovalPolicy::default();
        assert_eq!(policy.mode(ActionClass::Navigational), ApprovalMode::Auto);
        assert_eq!(policy.mode(ActionClass::Additive), ApprovalMode::Auto);
        assert_eq!(policy.mode(ActionClass::Destructive), ApprovalMode::Ask);
        let strict = policy.with(ActionClass::Additive, ApprovalMode::Ask);
        assert_eq!(strict.mode(ActionClass::Additive), ApprovalMode::Ask);
        let empty: ApprovalPolicy = serde_json::from_str("{}").unwrap_or(ApprovalPolicy::AUTO);
        assert_eq!(empty, ApprovalPolicy::default());
    }
}
