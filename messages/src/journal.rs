//! Journal keys: where each durable step of a job is recorded.
//!
//! The orchestrator journals every step under a key that names its exact position, so a
//! restarted run finds what already happened; the control plane writes approval decisions
//! under the key the waiting step reads. Both sides build keys here and nowhere else.

use crate::job::Phase;

/// The kind of step a journal key records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// The system prompt of a phase, item and attempt.
    System,
    /// One model answer.
    ModelTurn,
    /// One tool result.
    ToolResult,
    /// A person's decision on a destructive call.
    Approval,
    /// How many workers died holding a tool call.
    Crashes,
    /// The files (path and digest) a job or one of its Implement items started from.
    ItemFiles,
}

impl StepKind {
    const ALL: [StepKind; 6] = [
        StepKind::System,
        StepKind::ModelTurn,
        StepKind::ToolResult,
        StepKind::Approval,
        StepKind::Crashes,
        StepKind::ItemFiles,
    ];

    fn prefix(self) -> &'static str {
        match self {
            StepKind::System => "system/",
            StepKind::ModelTurn => "model/",
            StepKind::ToolResult => "tool/",
            StepKind::Approval => "approval/",
            StepKind::Crashes => "crashes/",
            StepKind::ItemFiles => "files/",
        }
    }

    /// The kind of step `key` records, if it is a journal key.
    pub fn of(key: &str) -> Option<StepKind> {
        StepKind::ALL
            .into_iter()
            .find(|kind| key.starts_with(kind.prefix()))
    }
}

/// `system/<phase>/<item>/<attempt>`
pub fn system_prompt(phase: Phase, item: u32, attempt: u32) -> String {
    format!("{}{phase}/{item}/{attempt}", StepKind::System.prefix())
}

/// `model/<phase>/<item>/<attempt>/<turn>`
pub fn model_turn(phase: Phase, item: u32, attempt: u32, turn: u32) -> String {
    format!(
        "{}{phase}/{item}/{attempt}/{turn}",
        StepKind::ModelTurn.prefix()
    )
}

/// `model/<phase>/<item>/<attempt>/<turn>/failed`: what the failed tries at that turn used
/// (a failed job's resumed run asks the same turn again).
pub fn failed_model_turn(phase: Phase, item: u32, attempt: u32, turn: u32) -> String {
    format!("{}/failed", model_turn(phase, item, attempt, turn))
}

/// `tool/<call id>`
pub fn tool_result(call_id: &str) -> String {
    format!("{}{call_id}", StepKind::ToolResult.prefix())
}

/// `approval/<call id>`
pub fn approval(call_id: &str) -> String {
    format!("{}{call_id}", StepKind::Approval.prefix())
}

/// `crashes/<call id>`
pub fn crashes(call_id: &str) -> String {
    format!("{}{call_id}", StepKind::Crashes.prefix())
}

/// `files/implement/<item>`: the files (path → digest) before the item's first attempt, so
/// that what the item changed is known across attempts and restarts.
pub fn item_files(item: u32) -> String {
    format!("{}implement/{item}", StepKind::ItemFiles.prefix())
}

/// `files/implement/<item>/cells`: the cells of the workbooks the item's `edit` contracts
/// name, before its first attempt, so that which cells the item changed is known across
/// attempts and restarts.
pub fn item_cells(item: u32) -> String {
    format!("{}/cells", item_files(item))
}

/// `files/job`: the files (path → digest) when the job first started, so that what the whole
/// job changed ([`JobOutcome`](crate::outcome::JobOutcome)) is known across restarts and resumes.
pub fn job_files() -> String {
    format!("{}job", StepKind::ItemFiles.prefix())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_released_form_and_kind() {
        assert_eq!(
            model_turn(Phase::Implement, 2, 1, 3),
            "model/implement/2/1/3"
        );
        assert_eq!(system_prompt(Phase::Plan, 0, 1), "system/plan/0/1");
        assert_eq!(
            failed_model_turn(Phase::Research, 0, 1, 0),
            "model/research/0/1/0/failed"
        );
        assert_eq!(tool_result("j.research.0.1.1.0"), "tool/j.research.0.1.1.0");
        assert_eq!(approval("c1"), "approval/c1");
        assert_eq!(StepKind::of(&crashes("c1")), Some(StepKind::Crashes));
        assert_eq!(StepKind::of(&approval("c1")), Some(StepKind::Approval));
        assert_eq!(
            StepKind::of(&model_turn(Phase::Research, 0, 1, 1)),
            Some(StepKind::ModelTurn)
        );
        assert_eq!(item_files(3), "files/implement/3");
        assert_eq!(StepKind::of(&item_files(3)), Some(StepKind::ItemFiles));
        assert_eq!(job_files(), "files/job");
        assert_eq!(StepKind::of(&job_files()), Some(StepKind::ItemFiles));
        assert_eq!(StepKind::of("other"), None);
    }
}
