//! The trace of one job as the dashboard shows it: phases, plan items and the tool I/O log,
//! built from the job's events in order.

use std::collections::HashMap;

use atelier_messages::ErrorBody;
use atelier_messages::job::{EventKind, ItemStatus, JobEvent, JobState, Phase};
use atelier_messages::tool::ToolName;
use serde::Serialize;

use super::MAX_LOG_ENTRIES;

/// A phase with its start and end.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseSpan {
    pub phase: Phase,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
}

/// A plan item as the events tell it.
#[derive(Debug, Clone, Serialize)]
pub struct ItemTrace {
    pub index: u32,
    pub label: String,
    pub attempts: u32,
    pub status: Option<ItemStatus>,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
}

/// Where a tool call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    Running,
    AwaitingApproval,
    Ok,
    Failed,
}

/// One tool call of the I/O log.
#[derive(Debug, Clone, Serialize)]
pub struct CallRecord {
    pub call_id: String,
    pub tool: String,
    pub pool: Option<String>,
    pub path: Option<String>,
    pub phase: Option<Phase>,
    pub item: Option<u32>,
    pub status: CallStatus,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub elapsed_ms: Option<u64>,
    pub worker: Option<String>,
    pub error: Option<ErrorBody>,
    pub arguments: Option<String>,
    pub result: Option<String>,
    pub result_bytes: Option<u64>,
}

/// One entry of a job's I/O log, in event order.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum IoEntry {
    Phase {
        at_ms: u64,
        phase: Phase,
    },
    Item {
        at_ms: u64,
        index: u32,
        total: u32,
        label: String,
        attempt: u32,
    },
    Turn {
        at_ms: u64,
        phase: Phase,
        item: Option<u32>,
        turn: u32,
        model: String,
        text: String,
        tool_calls: Vec<String>,
        prompt_tokens: u64,
        completion_tokens: u64,
        elapsed_ms: u64,
    },
    Call(Box<CallRecord>),
    Approval {
        at_ms: u64,
        call_id: String,
        tool: String,
        arguments: String,
        approved: Option<bool>,
    },
    Warning {
        at_ms: u64,
        text: String,
    },
}

/// What the job is doing now.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Current {
    pub phase: Option<Phase>,
    pub item: Option<u32>,
    pub total: Option<u32>,
    pub tool: Option<String>,
}

/// Everything the events tell about one job.
#[derive(Debug, Clone, Default, Serialize)]
pub struct JobTrace {
    pub job_id: String,
    pub state: Option<JobState>,
    pub accepted_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub error: Option<ErrorBody>,
    pub phases: Vec<PhaseSpan>,
    pub items: Vec<ItemTrace>,
    pub log: Vec<IoEntry>,
    pub summary: String,
    pub current: Current,
    pub events: u64,
    #[serde(skip)]
    calls: HashMap<String, usize>,
}

impl JobTrace {
    pub fn new(job_id: &str) -> Self {
        Self {
            job_id: job_id.to_string(),
            ..Self::default()
        }
    }

    /// Builds a trace from a job's events.
    pub fn from_events(job_id: &str, events: &[JobEvent]) -> Self {
        let mut trace = Self::new(job_id);
        for event in events {
            trace.apply(event);
        }
        trace
    }

    /// Folds one event into the trace.
    pub fn apply(&mut self, event: &JobEvent) {
        self.events += 1;
        let at = event.at_ms;
        match &event.kind {
            EventKind::JobAccepted => self.accepted_ms = Some(at),
            EventKind::PhaseStarted { phase } => self.phase_started(*phase, at),
            EventKind::PhaseCompleted { phase } => {
                if let Some(span) = self.phases.iter_mut().rev().find(|s| s.phase == *phase) {
                    span.ended_ms = Some(at);
                }
            }
            EventKind::ItemStarted {
                index,
                total,
                label,
                attempt,
            } => self.item_started(at, *index, *total, label, *attempt),
            EventKind::ItemFinished { index, status } => {
                if let Some(item) = self.items.iter_mut().find(|i| i.index == *index) {
                    item.status = Some(*status);
                    item.ended_ms = Some(at);
                }
            }
            EventKind::ToolExecuting {
                call_id,
                tool,
                path,
            } => self.call_started(at, call_id, tool, path.clone()),
            EventKind::ToolComplete { .. } => self.call_completed(at, &event.kind),
            EventKind::ToolIo { .. } => self.call_io(at, &event.kind),
            EventKind::ModelTurn { .. } => self.model_turn(at, &event.kind),
            EventKind::AssistantDelta { text } => self.summary.push_str(text),
            EventKind::ApprovalRequested {
                call_id,
                tool,
                arguments,
                ..
            } => self.approval_requested(at, call_id, tool, arguments),
            EventKind::ApprovalResolved {
                call_id, approved, ..
            } => {
                self.state = Some(JobState::Running);
                self.resolve_approval(call_id, *approved);
            }
            EventKind::LoopWarning { tool, repeats } => self.push(IoEntry::Warning {
                at_ms: at,
                text: format!("the model repeated `{tool}` {repeats} times; it was told so"),
            }),
            EventKind::ProviderWaiting {
                profile,
                reason,
                expected_ms,
            } => self.push(IoEntry::Warning {
                at_ms: at,
                text: provider_waiting(profile, *reason, *expected_ms),
            }),
            EventKind::JobFinished { state, error, .. } => self.finished(at, *state, error.clone()),
        }
        if self.state.is_none() && !matches!(event.kind, EventKind::JobFinished { .. }) {
            self.state = Some(JobState::Running);
        }
    }

    fn call_completed(&mut self, at: u64, kind: &EventKind) {
        let EventKind::ToolComplete {
            call_id,
            tool,
            ok,
            error,
            elapsed_ms,
            worker,
            ..
        } = kind
        else {
            return;
        };
        if let Some(record) = self.call_mut(at, call_id, tool) {
            record.status = if *ok {
                CallStatus::Ok
            } else {
                CallStatus::Failed
            };
            record.ended_ms = Some(at);
            record.elapsed_ms = Some(*elapsed_ms);
            record.worker.clone_from(worker);
            record.error.clone_from(error);
        }
        self.current.tool = None;
    }

    fn call_io(&mut self, at: u64, kind: &EventKind) {
        let EventKind::ToolIo {
            call_id,
            tool,
            pool,
            phase,
            item,
            arguments,
            result,
            result_bytes,
        } = kind
        else {
            return;
        };
        if let Some(record) = self.call_mut(at, call_id, tool) {
            record.pool = pool.clone().or(record.pool.take());
            record.phase = phase.or(record.phase);
            record.item = item.or(record.item);
            record.arguments = Some(arguments.clone());
            record.result = Some(result.clone());
            record.result_bytes = Some(*result_bytes);
        }
    }

    fn model_turn(&mut self, at: u64, kind: &EventKind) {
        let EventKind::ModelTurn {
            phase,
            item,
            turn,
            model,
            text,
            tool_calls,
            prompt_tokens,
            completion_tokens,
            elapsed_ms,
            ..
        } = kind
        else {
            return;
        };
        self.push(IoEntry::Turn {
            at_ms: at,
            phase: *phase,
            item: *item,
            turn: *turn,
            model: model.clone(),
            text: text.clone(),
            tool_calls: tool_calls.clone(),
            prompt_tokens: *prompt_tokens,
            completion_tokens: *completion_tokens,
            elapsed_ms: *elapsed_ms,
        });
    }

    fn approval_requested(&mut self, at: u64, call_id: &str, tool: &str, arguments: &str) {
        self.state = Some(JobState::AwaitingApproval);
        if let Some(record) = self.call_mut(at, call_id, tool) {
            record.status = CallStatus::AwaitingApproval;
            record.arguments = Some(arguments.to_string());
        }
        self.push(IoEntry::Approval {
            at_ms: at,
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            arguments: arguments.to_string(),
            approved: None,
        });
    }

    fn finished(&mut self, at: u64, state: JobState, error: Option<ErrorBody>) {
        self.state = Some(state);
        self.finished_ms = Some(at);
        self.error = error;
        self.current = Current::default();
        if let Some(span) = self.phases.last_mut() {
            span.ended_ms.get_or_insert(at);
        }
    }

    fn phase_started(&mut self, phase: Phase, at: u64) {
        self.phases.push(PhaseSpan {
            phase,
            started_ms: at,
            ended_ms: None,
        });
        self.current = Current {
            phase: Some(phase),
            ..Current::default()
        };
        self.push(IoEntry::Phase { at_ms: at, phase });
    }

    fn item_started(&mut self, at: u64, index: u32, total: u32, label: &str, attempt: u32) {
        match self.items.iter_mut().find(|i| i.index == index) {
            Some(item) => {
                item.attempts = attempt;
                item.status = None;
                item.ended_ms = None;
            }
            None => self.items.push(ItemTrace {
                index,
                label: label.to_string(),
                attempts: attempt,
                status: None,
                started_ms: at,
                ended_ms: None,
            }),
        }
        self.items.sort_by_key(|item| item.index);
        self.current.item = Some(index);
        self.current.total = Some(total);
        self.push(IoEntry::Item {
            at_ms: at,
            index,
            total,
            label: label.to_string(),
            attempt,
        });
    }

    fn call_started(&mut self, at: u64, call_id: &str, tool: &str, path: Option<String>) {
        let phase = self.current.phase;
        let item = self
            .current
            .item
            .filter(|_| phase == Some(Phase::Implement));
        if let Some(record) = self.call_mut(at, call_id, tool) {
            record.path = path;
            record.phase = record.phase.or(phase);
            record.item = record.item.or(item);
        }
        self.current.tool = Some(tool.to_string());
    }

    /// The record of `call_id`, created (running) when the log has none yet.
    fn call_mut(&mut self, at: u64, call_id: &str, tool: &str) -> Option<&mut CallRecord> {
        let position = match self.calls.get(call_id) {
            Some(position) => *position,
            None => {
                self.push(IoEntry::Call(Box::new(CallRecord {
                    call_id: call_id.to_string(),
                    tool: tool.to_string(),
                    pool: ToolName::parse(tool).map(|name| name.runs_on().to_string()),
                    path: None,
                    phase: None,
                    item: None,
                    status: CallStatus::Running,
                    started_ms: at,
                    ended_ms: None,
                    elapsed_ms: None,
                    worker: None,
                    error: None,
                    arguments: None,
                    result: None,
                    result_bytes: None,
                })));
                let position = self.log.len() - 1;
                self.calls.insert(call_id.to_string(), position);
                position
            }
        };
        match self.log.get_mut(position) {
            Some(IoEntry::Call(record)) => Some(record),
            _ => None,
        }
    }

    fn resolve_approval(&mut self, call_id: &str, decision: bool) {
        for entry in self.log.iter_mut().rev() {
            if let IoEntry::Approval {
                call_id: id,
                approved,
                ..
            } = entry
                && id == call_id
            {
                *approved = Some(decision);
                break;
            }
        }
        if let Some(position) = self.calls.get(call_id).copied()
            && let IoEntry::Call(record) = &mut self.log[position]
            && record.status == CallStatus::AwaitingApproval
        {
            record.status = if decision {
                CallStatus::Running
            } else {
                CallStatus::Failed
            };
        }
    }

    fn push(&mut self, entry: IoEntry) {
        if self.log.len() >= MAX_LOG_ENTRIES {
            // Keep the head (how it started) and drop the oldest of the tail.
            let drop_at = MAX_LOG_ENTRIES / 2;
            self.log.remove(drop_at);
            self.calls.retain(|_, position| *position != drop_at);
            for position in self.calls.values_mut() {
                if *position > drop_at {
                    *position -= 1;
                }
            }
        }
        self.log.push(entry);
    }
}

/// The trace's line for a model call waiting on its profile's limits.
fn provider_waiting(
    profile: &str,
    reason: atelier_messages::provider::WaitReason,
    expected_ms: u64,
) -> String {
    let about = if expected_ms == 0 {
        String::new()
    } else {
        format!(" (about {:.1} s)", expected_ms as f64 / 1000.0)
    };
    format!("model `{profile}`: {}{about}", reason.describe())
}
