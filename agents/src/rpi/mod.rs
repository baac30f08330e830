//! Research → Plan → Implement → Summary, independent of transport.
//!
//! The driver owns the phase logic and the agent loop; an [`AgentHost`] supplies tool
//! execution, the journal, checkpoints, approvals and events.
//!
//! Durability: every model answer and every tool result is recorded in the host's journal
//! (which makes it durable) under a key that names its exact position — phase, plan item,
//! attempt, turn, call — before the driver moves on. A restarted driver walks the same
//! positions and takes journaled answers instead of asking again, so it continues from the
//! exact turn inside the exact plan item. The phase/item state is also saved after every step.
//!
//! # Layout
//! - this file: public types ([`RpiState`], [`Budgets`], [`AgentHost`]) and [`run`].
//! - `phases`: what each phase asks and how it advances the state.
//! - `steps`: journaled model turns and tool calls, loop detection, budgets.
//! - `prompts`: the system prompts.

mod phases;
mod prompts;
mod steps;

use atelier_messages::ErrorBody;
use atelier_messages::job::{EventKind, Phase, PlanItem};
use atelier_messages::store::ManifestEntry;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{Instrument, info_span};

use crate::AgentError;
use crate::catalog::ToolSpec;
use crate::provider::ModelProvider;

pub use steps::{ITEM_FAILED_MARKER, MAX_TOOL_RESULT_CHARS};

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
        }
    }
}

/// What the job asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobInput {
    pub job_id: String,
    pub workbench: String,
    pub message: String,
}

/// The resumable state of one job's RPI run (saved after every phase and plan item).
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
}

impl Default for RpiState {
    fn default() -> Self {
        Self {
            phase: Phase::Research,
            research: None,
            plan_md: None,
            items: Vec::new(),
            original_count: 0,
            summary: None,
            model_turns: 0,
            tool_calls: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
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
    /// Durably records the phase/item state.
    async fn save(&self, state: &RpiState) -> Result<(), ErrorBody>;
    /// A journaled entry, if this step already happened.
    async fn recall(&self, key: &str) -> Result<Option<Value>, ErrorBody>;
    /// Durably journals an entry; returns only once it would survive a crash.
    async fn record(&self, key: &str, value: &Value) -> Result<(), ErrorBody>;
    /// A step boundary: `Err(USER_CANCELED)` when the job was cancelled.
    async fn checkpoint(&self) -> Result<(), ErrorBody>;
    /// Waits for the decision on a destructive call (`true`: approved). Auto-approving
    /// policies answer at once.
    async fn approval(
        &self,
        call_id: &str,
        tool: &str,
        arguments: &Value,
    ) -> Result<bool, ErrorBody>;
    /// Publishes a progress event.
    fn emit(&self, kind: EventKind);
}

/// Runs the job from `state.phase` to the end, saving after every step.
pub async fn run(
    job: &JobInput,
    state: &mut RpiState,
    provider: &dyn ModelProvider,
    host: &dyn AgentHost,
    budgets: Budgets,
) -> Result<(), AgentError> {
    let driver = phases::Driver {
        job,
        provider,
        host,
        budgets,
    };
    while state.phase != Phase::Done {
        let phase = state.phase;
        let span = info_span!("phase", job_id = %job.job_id, phase = %phase);
        host.emit(EventKind::PhaseStarted { phase });
        driver.run_phase(phase, state).instrument(span).await?;
        host.emit(EventKind::PhaseCompleted { phase });
    }
    Ok(())
}
