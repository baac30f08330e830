//! What a run works with: the job's input, its budgets, the resumable state, and the
//! [`AgentHost`] that executes tools, journals steps and publishes events.

use atelier_messages::ErrorBody;
use atelier_messages::approval::{ActionClass, ApprovalDecision, ApprovalMode};
use atelier_messages::budget::{Budget, Prices};
use atelier_messages::job::PendingApproval;
use atelier_messages::job::{EventKind, Phase, PlanItem};
use atelier_messages::store::{DraftDiff, ManifestEntry};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::ToolSpec;

/// Turn budgets per phase (seed: research 30, plan 10, 30 per item), per-job limits and the
/// loop detector's thresholds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Budgets {
    pub research_turns: u32,
    pub plan_turns: u32,
    pub item_turns: u32,
    /// Attempts per plan item (the first try plus one retry).
    pub item_attempts: u32,
    /// Model turns per job before `BUDGET_EXCEEDED`.
    pub max_model_turns: u64,
    /// Tool calls per job before `BUDGET_EXCEEDED`.
    pub max_tool_calls: u64,
    /// Prompt + completion tokens per job before `BUDGET_EXCEEDED`.
    pub max_tokens: u64,
    /// Identical calls within the window that earn the model a warning.
    pub loop_warning: u32,
    /// Identical calls within the window that fail the item with `AGENT_LOOP_DETECTED`.
    pub loop_hard_stop: u32,
    /// How many recent calls the loop detector remembers.
    pub loop_window: usize,
    /// Tool results longer than this many characters reach the model as a receipt (the full
    /// result stays in the journal; `recall_tool_result` reads it back).
    #[serde(default = "default_receipt_over_chars")]
    pub receipt_over_chars: usize,
    /// Workers that may die holding one tool call before it fails with `TOOL_CRASHED`.
    #[serde(default = "default_tool_crash_attempts")]
    pub tool_crash_attempts: u32,
    /// What this job may spend on model calls (its own budget, else the operator's default):
    /// reached, its next model call stops it with `BUDGET_EXCEEDED`.
    #[serde(default)]
    pub spend: Budget,
    /// Its model profile's prices (none: the cost is unknown).
    #[serde(default)]
    pub prices: Option<Prices>,
}

fn default_receipt_over_chars() -> usize {
    16_000
}

fn default_tool_crash_attempts() -> u32 {
    2
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            research_turns: 30,
            plan_turns: 10,
            item_turns: 30,
            item_attempts: 2,
            max_model_turns: 400,
            max_tool_calls: 1_000,
            max_tokens: 4_000_000,
            loop_warning: 3,
            loop_hard_stop: 5,
            loop_window: 12,
            receipt_over_chars: default_receipt_over_chars(),
            tool_crash_attempts: default_tool_crash_attempts(),
            spend: Budget::default(),
            prices: None,
        }
    }
}

/// What the job asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobInput {
    pub job_id: String,
    pub workbench: String,
    pub message: String,
    /// What every model call carries besides the file manifest (built by the coordinator).
    #[serde(default)]
    pub context: WorkbenchContext,
}

/// The workbench context of every model call, in the seed's order after the file manifest:
/// structural maps, context items (situation, then skills), then the earlier conversation.
/// Each part is already bounded by whoever built it; the prompts only render it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkbenchContext {
    /// One structural map per file, as compact text.
    #[serde(default)]
    pub maps: Vec<FileMapText>,
    /// A note when maps were left out to stay within their budget.
    #[serde(default)]
    pub maps_note: Option<String>,
    /// The workbench's situation text.
    #[serde(default)]
    pub situation: Option<String>,
    #[serde(default)]
    pub skills: Vec<SkillText>,
    /// One line per older message, summarized.
    #[serde(default)]
    pub earlier: Vec<String>,
    /// The most recent messages, verbatim.
    #[serde(default)]
    pub recent: Vec<PriorMessage>,
}

/// A file's structural map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMapText {
    pub path: String,
    pub map: String,
}

/// A skill: its `SKILL.md` and the files it references.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillText {
    pub name: String,
    /// `(path, content)`, `SKILL.md` first.
    pub files: Vec<(String, String)>,
}

/// One earlier message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorMessage {
    pub id: String,
    /// `user`, `assistant` or `system`.
    pub role: String,
    pub text: String,
}

/// The resumable state of one job's RPI run (saved after every phase and plan item, and when
/// a run ends early, so that a failed job still shows what it used).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RpiState {
    pub phase: Phase,
    #[serde(default)]
    pub research: Option<String>,
    #[serde(default)]
    pub plan_md: Option<String>,
    #[serde(default)]
    pub items: Vec<PlanItem>,
    #[serde(default)]
    pub original_count: usize,
    /// Why the request asks for an artefact (a file written, changed or removed), when it
    /// does; read once, from the request and the files, when the plan phase starts
    /// ([`crate::request`]). Such a job cannot succeed without a change.
    #[serde(default)]
    pub asks_for: Option<String>,
    /// The files the request names that the workbench did not have when the plan phase
    /// started: the plan must name each as a target, and the job succeeds only when its items
    /// wrote each of them.
    #[serde(default)]
    pub requested_files: Vec<String>,
    /// With a compact prompt, the texts the request quotes to be added that no call has
    /// written yet ([`crate::request::quoted_additions`]); the job succeeds only when none is
    /// left.
    #[serde(default)]
    pub unwritten_quotes: Vec<String>,
    /// With a compact prompt, the placeholders the request names that no call has replaced
    /// yet ([`crate::request::named_placeholders`]); the job succeeds only when none is left.
    #[serde(default)]
    pub unreplaced_placeholders: Vec<String>,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub model_turns: u64,
    #[serde(default)]
    pub tool_calls: u64,
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// The totals at the last phase or plan item saved. A run that ended between two such
    /// boundaries saved its live totals as well; the next run starts again from these and
    /// counts the journaled steps it walks again, so nothing is counted twice.
    #[serde(default)]
    pub settled: Option<Totals>,
}

/// What a job used: model turns, tool calls and tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub model_turns: u64,
    pub tool_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl RpiState {
    /// The live totals.
    pub fn totals(&self) -> Totals {
        Totals {
            model_turns: self.model_turns,
            tool_calls: self.tool_calls,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
        }
    }

    /// Counts tokens a call outside the phases used (the summary of older conversation made
    /// before research): in the live totals and the settled ones, so a run that goes back to
    /// the settled totals keeps them. Not a model turn: turn budgets count the phases' turns.
    pub fn count_tokens(&mut self, usage: crate::provider::Usage) {
        self.prompt_tokens += usage.prompt_tokens;
        self.completion_tokens += usage.completion_tokens;
        if let Some(settled) = &mut self.settled {
            settled.prompt_tokens += usage.prompt_tokens;
            settled.completion_tokens += usage.completion_tokens;
        }
    }

    /// Marks the live totals as settled: the state is saved at a phase or item boundary.
    pub(super) fn settle(&mut self) {
        self.settled = Some(self.totals());
    }

    /// Goes back to the settled totals, before a run walks the journal from the last boundary.
    /// A state without them (a new job, or one saved before they were kept) was saved at a
    /// boundary: its live totals are the settled ones.
    pub(super) fn restore_settled(&mut self) {
        let Some(settled) = self.settled else {
            self.settle();
            return;
        };
        self.model_turns = settled.model_turns;
        self.tool_calls = settled.tool_calls;
        self.prompt_tokens = settled.prompt_tokens;
        self.completion_tokens = settled.completion_tokens;
    }
}

impl Default for RpiState {
    fn default() -> Self {
        Self {
            phase: Phase::Research,
            research: None,
            plan_md: None,
            items: Vec::new(),
            original_count: 0,
            asks_for: None,
            requested_files: Vec::new(),
            unwritten_quotes: Vec::new(),
            unreplaced_placeholders: Vec::new(),
            summary: None,
            model_turns: 0,
            tool_calls: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            settled: None,
        }
    }
}

/// What the driver needs from its environment.
#[async_trait::async_trait]
pub trait AgentHost: Send + Sync {
    /// Runs one tool call (the call id is deterministic per job step, so a re-sent call can be
    /// recognized by idempotent write tools).
    async fn call_tool(
        &self,
        call_id: &str,
        tool: &ToolSpec,
        args: Value,
    ) -> Result<Value, ErrorBody>;
    /// The files the agent currently sees.
    async fn files(&self) -> Result<Vec<ManifestEntry>, ErrorBody>;
    /// What the workbench's draft changes against its published files.
    async fn draft_changes(&self) -> Result<DraftDiff, ErrorBody>;
    /// Durably records the phase/item state.
    async fn save(&self, state: &RpiState) -> Result<(), ErrorBody>;
    /// Records a phase/item state that a replay rebuilds from the journal (a workflow's plan
    /// and item marks): it becomes durable with the next durable write instead of costing a
    /// flush of its own. By default, as [`AgentHost::save`].
    async fn save_rebuildable(&self, state: &RpiState) -> Result<(), ErrorBody> {
        self.save(state).await
    }
    /// A journaled entry, if this step already happened.
    async fn recall(&self, key: &str) -> Result<Option<Value>, ErrorBody>;
    /// Durably journals an entry; returns only once it would survive a crash.
    async fn record(&self, key: &str, value: &Value) -> Result<(), ErrorBody>;
    /// A step boundary: `Err(USER_CANCELED)` when the job was cancelled.
    async fn checkpoint(&self) -> Result<(), ErrorBody>;
    /// Whether calls of `class` wait for a person in this job (its approval policy).
    fn approval_mode(&self, class: ActionClass) -> ApprovalMode;
    /// True when this call's changes are already in the draft (the process died before its
    /// result was journaled): it ran, so it is not asked about again, whatever the files now
    /// make it look like.
    async fn already_applied(&self, call_id: &str) -> Result<bool, ErrorBody>;
    /// Waits for the decision on a call that needs approval; the decision is journaled under
    /// [`journal::approval`](atelier_messages::journal::approval) of the call id, so a
    /// restarted job finds it.
    async fn approval(&self, pending: PendingApproval) -> Result<ApprovalDecision, ErrorBody>;
    /// Publishes a progress event.
    fn emit(&self, kind: EventKind);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Usage;

    #[test]
    fn tokens_counted_outside_the_phases_survive_going_back_to_the_settled_totals() {
        let summarizing = Usage {
            prompt_tokens: 100,
            completion_tokens: 20,
        };
        // A new job: no settled totals yet; the first run settles what it starts with.
        let mut new = RpiState::default();
        new.count_tokens(summarizing);
        new.restore_settled();
        assert_eq!((new.prompt_tokens, new.completion_tokens), (100, 20));
        // A resumed job: its settled totals gain them too, and no turn is counted.
        let mut resumed = RpiState {
            model_turns: 3,
            prompt_tokens: 300,
            completion_tokens: 60,
            ..RpiState::default()
        };
        resumed.settle();
        resumed.model_turns = 4;
        resumed.prompt_tokens = 400;
        resumed.count_tokens(summarizing);
        resumed.restore_settled();
        assert_eq!(resumed.model_turns, 3);
        assert_eq!(
            (resumed.prompt_tokens, resumed.completion_tokens),
            (400, 80)
        );
    }
}
