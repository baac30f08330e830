//! What the dashboard knows from the EVENTS stream: a trace of each recent job (phases, items,
//! the tool I/O log), the last hour of throughput and tool latency, and the event-derived
//! metrics. Fed one event at a time by [`crate::dashboard::feed`]; read by the HTTP handlers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use atelier_messages::ErrorBody;
use atelier_messages::job::{EventKind, ItemStatus, JobEvent, JobState, Phase};
use serde::Serialize;
use tokio::sync::broadcast;

use crate::metrics::{self, Registry};

/// Jobs whose trace stays in memory (older ones are rebuilt from the stream on demand).
const MAX_JOBS: usize = 500;
/// Log entries kept per job.
const MAX_LOG_ENTRIES: usize = 5_000;
/// The throughput window.
const HOUR_MS: u64 = 60 * 60 * 1000;
const MINUTE_MS: u64 = 60 * 1000;
/// Tool latency samples kept for the window.
const MAX_SAMPLES: usize = 100_000;

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
            EventKind::ToolComplete {
                call_id,
                tool,
                ok,
                error,
                elapsed_ms,
                worker,
            } => {
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
            EventKind::ToolIo {
                call_id,
                tool,
                pool,
                phase,
                item,
                arguments,
                result,
                result_bytes,
            } => {
                if let Some(record) = self.call_mut(at, call_id, tool) {
                    record.pool = pool.clone().or(record.pool.take());
                    record.phase = phase.or(record.phase);
                    record.item = item.or(record.item);
                    record.arguments = Some(arguments.clone());
                    record.result = Some(result.clone());
                    record.result_bytes = Some(*result_bytes);
                }
            }
            EventKind::ModelTurn {
                phase,
                item,
                turn,
                model,
                text,
                tool_calls,
                prompt_tokens,
                completion_tokens,
                elapsed_ms,
            } => self.push(IoEntry::Turn {
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
            }),
            EventKind::AssistantDelta { text } => self.summary.push_str(text),
            EventKind::ApprovalRequested {
                call_id,
                tool,
                arguments,
            } => {
                self.state = Some(JobState::AwaitingApproval);
                if let Some(record) = self.call_mut(at, call_id, tool) {
                    record.status = CallStatus::AwaitingApproval;
                    record.arguments = Some(arguments.clone());
                }
                self.push(IoEntry::Approval {
                    at_ms: at,
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                    approved: None,
                });
            }
            EventKind::ApprovalResolved { call_id, approved } => {
                self.state = Some(JobState::Running);
                self.resolve_approval(call_id, *approved);
            }
            EventKind::LoopWarning { tool, repeats } => self.push(IoEntry::Warning {
                at_ms: at,
                text: format!("the model repeated `{tool}` {repeats} times; it was told so"),
            }),
            EventKind::JobFinished { state, error } => {
                self.state = Some(*state);
                self.finished_ms = Some(at);
                self.error.clone_from(error);
                self.current = Current::default();
                if let Some(span) = self.phases.last_mut() {
                    span.ended_ms.get_or_insert(at);
                }
            }
        }
        if self.state.is_none() && !matches!(event.kind, EventKind::JobFinished { .. }) {
            self.state = Some(JobState::Running);
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
                    pool: atelier_agents::catalog::find(tool).map(|s| s.pool().to_string()),
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

/// Job ends and tool-call latency over some span of time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub tool_calls: u64,
    pub p50_ms: Option<u64>,
    pub p90_ms: Option<u64>,
    pub p99_ms: Option<u64>,
}

impl Counts {
    fn count_job(&mut self, state: JobState) {
        match state {
            JobState::Succeeded => self.succeeded += 1,
            JobState::Failed => self.failed += 1,
            _ => self.cancelled += 1,
        }
    }

    /// Records tool-call latencies (`samples` sorted ascending).
    fn set_latencies(&mut self, samples: &[u64]) {
        self.tool_calls = samples.len() as u64;
        (self.p50_ms, self.p90_ms, self.p99_ms) = percentiles(samples);
    }
}

/// One minute of the throughput chart.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MinuteBucket {
    pub start_ms: u64,
    #[serde(flatten)]
    pub counts: Counts,
}

/// `/api/throughput`: the last 60 minutes, oldest first.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Throughput {
    pub now_ms: u64,
    pub minutes: Vec<MinuteBucket>,
    /// Totals of the last hour.
    pub hour: Counts,
}

#[derive(Default)]
struct Inner {
    jobs: HashMap<String, JobTrace>,
    order: VecDeque<String>,
    finished: VecDeque<(u64, JobState)>,
    tool_samples: VecDeque<(u64, u64)>,
    metrics: Registry,
    last_sequence: u64,
}

/// The shared live state.
pub struct Live {
    inner: Mutex<Inner>,
    updates: broadcast::Sender<Arc<str>>,
}

impl Default for Live {
    fn default() -> Self {
        Self::new()
    }
}

impl Live {
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            updates: broadcast::channel(1024).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Live updates: every event as JSON, for the browsers' event stream.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.updates.subscribe()
    }

    pub fn live_clients(&self) -> usize {
        self.updates.receiver_count()
    }

    /// The stream sequence after which the feed resumes.
    pub fn last_sequence(&self) -> u64 {
        self.lock().last_sequence
    }

    /// Folds one event (stream sequence `sequence`) into every view and tells the browsers.
    pub fn apply(&self, sequence: u64, event: &JobEvent) {
        {
            let mut inner = self.lock();
            if sequence <= inner.last_sequence {
                return;
            }
            inner.last_sequence = sequence;
            inner.count(event);
            inner.trace_mut(&event.job_id).apply(event);
        }
        if let Ok(json) = serde_json::to_string(event) {
            let _ = self.updates.send(json.into());
        }
    }

    /// The in-memory trace of a job, if it is recent enough to be kept.
    pub fn trace(&self, job_id: &str) -> Option<JobTrace> {
        self.lock().jobs.get(job_id).cloned()
    }

    /// What each job is doing now (for the job list).
    pub fn current(&self) -> HashMap<String, Current> {
        self.lock()
            .jobs
            .iter()
            .map(|(id, trace)| (id.clone(), trace.current.clone()))
            .collect()
    }

    /// The event-derived metrics.
    pub fn metrics(&self) -> Registry {
        self.lock().metrics.clone()
    }

    pub fn throughput(&self, now_ms: u64) -> Throughput {
        let mut inner = self.lock();
        inner.prune(now_ms);
        let first = (now_ms / MINUTE_MS).saturating_sub(59) * MINUTE_MS;
        let mut minutes: Vec<MinuteBucket> = (0..60)
            .map(|k| MinuteBucket {
                start_ms: first + k * MINUTE_MS,
                ..MinuteBucket::default()
            })
            .collect();
        let slot = |at: u64| {
            at.checked_sub(first)
                .map(|offset| usize::try_from(offset / MINUTE_MS).unwrap_or(usize::MAX))
                .filter(|slot| *slot < 60)
        };
        let mut hour = Counts::default();
        for (at, state) in &inner.finished {
            let Some(bucket) = slot(*at).map(|k| &mut minutes[k]) else {
                continue;
            };
            bucket.counts.count_job(*state);
            hour.count_job(*state);
        }
        let mut per_minute: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut all = Vec::with_capacity(inner.tool_samples.len());
        for (at, elapsed) in &inner.tool_samples {
            if let Some(k) = slot(*at) {
                per_minute.entry(k).or_default().push(*elapsed);
                all.push(*elapsed);
            }
        }
        for (k, mut samples) in per_minute {
            samples.sort_unstable();
            minutes[k].counts.set_latencies(&samples);
        }
        all.sort_unstable();
        hour.set_latencies(&all);
        Throughput {
            now_ms,
            minutes,
            hour,
        }
    }
}

/// p50, p90, p99 of sorted samples (nearest rank).
pub fn percentiles(sorted: &[u64]) -> (Option<u64>, Option<u64>, Option<u64>) {
    let rank = |p: f64| {
        if sorted.is_empty() {
            return None;
        }
        let position = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        Some(sorted[position - 1])
    };
    (rank(0.5), rank(0.9), rank(0.99))
}

impl Inner {
    fn trace_mut(&mut self, job_id: &str) -> &mut JobTrace {
        if !self.jobs.contains_key(job_id) {
            if self.jobs.len() >= MAX_JOBS {
                self.evict_one();
            }
            self.order.push_back(job_id.to_string());
            self.jobs.insert(job_id.to_string(), JobTrace::new(job_id));
        }
        self.jobs
            .entry(job_id.to_string())
            .or_insert_with(|| JobTrace::new(job_id))
    }

    /// Drops the oldest finished job (or the oldest job when none has finished).
    fn evict_one(&mut self) {
        let finished = self.order.iter().position(|id| {
            self.jobs
                .get(id)
                .and_then(|trace| trace.state)
                .is_some_and(JobState::is_terminal)
        });
        if let Some(id) = self.order.remove(finished.unwrap_or(0)) {
            self.jobs.remove(&id);
        }
    }

    fn count(&mut self, event: &JobEvent) {
        let registry = &mut self.metrics;
        registry.add(
            metrics::EVENTS,
            vec![("kind", event.kind.subject_token().to_string())],
            1.0,
        );
        match &event.kind {
            EventKind::PhaseCompleted { phase } => registry.add(
                metrics::STEPS,
                vec![("kind", "phase".into()), ("name", phase.to_string())],
                1.0,
            ),
            EventKind::ItemFinished { status, .. } => registry.add(
                metrics::STEPS,
                vec![
                    ("kind", "item".into()),
                    ("name", item_status(*status).into()),
                ],
                1.0,
            ),
            EventKind::ToolComplete {
                tool,
                ok,
                error,
                elapsed_ms,
                ..
            } => {
                let pool = atelier_agents::catalog::find(tool)
                    .map(|spec| spec.pool().to_string())
                    .unwrap_or_else(|| "unknown".into());
                let outcome = if *ok { "ok" } else { "error" };
                registry.add(
                    metrics::TOOL_CALLS,
                    vec![
                        ("tool", tool.clone()),
                        ("pool", pool.clone()),
                        ("outcome", outcome.into()),
                    ],
                    1.0,
                );
                registry.observe(
                    metrics::TOOL_CALL_DURATION,
                    vec![("tool", tool.clone()), ("pool", pool)],
                    *elapsed_ms as f64 / 1000.0,
                );
                if let Some(error) = error {
                    count_error(registry, error, "tool");
                }
                self.tool_samples.push_back((event.at_ms, *elapsed_ms));
                if self.tool_samples.len() > MAX_SAMPLES {
                    self.tool_samples.pop_front();
                }
            }
            EventKind::ModelTurn {
                model, elapsed_ms, ..
            } => {
                registry.add(metrics::MODEL_TURNS, vec![("model", model.clone())], 1.0);
                registry.observe(
                    metrics::MODEL_TURN_DURATION,
                    vec![("model", model.clone())],
                    *elapsed_ms as f64 / 1000.0,
                );
            }
            EventKind::JobFinished { state, error } => {
                registry.add(
                    metrics::JOBS_FINISHED,
                    vec![("state", state.to_string())],
                    1.0,
                );
                if let Some(error) = error {
                    count_error(registry, error, "job");
                }
                self.finished.push_back((event.at_ms, *state));
            }
            _ => {}
        }
    }

    fn prune(&mut self, now_ms: u64) {
        let since = now_ms.saturating_sub(HOUR_MS);
        while self.finished.front().is_some_and(|(at, _)| *at < since) {
            self.finished.pop_front();
        }
        while self.tool_samples.front().is_some_and(|(at, _)| *at < since) {
            self.tool_samples.pop_front();
        }
    }
}

fn count_error(registry: &mut Registry, error: &ErrorBody, source: &str) {
    registry.add(
        metrics::ERRORS,
        vec![
            ("code", error.code.as_str().to_string()),
            ("source", source.to_string()),
        ],
        1.0,
    );
}

fn item_status(status: ItemStatus) -> &'static str {
    match status {
        ItemStatus::Pending => "pending",
        ItemStatus::Done => "done",
        ItemStatus::Failed => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atelier_messages::{ErrorCode, PROTOCOL_VERSION};

    fn event(at_ms: u64, kind: EventKind) -> JobEvent {
        JobEvent {
            v: PROTOCOL_VERSION,
            job_id: "j1".into(),
            at_ms,
            kind,
        }
    }

    fn script() -> Vec<JobEvent> {
        vec![
            event(1, EventKind::JobAccepted),
            event(
                2,
                EventKind::PhaseStarted {
                    phase: Phase::Implement,
                },
            ),
            event(
                3,
                EventKind::ItemStarted {
                    index: 1,
                    total: 2,
                    label: "Export".into(),
                    attempt: 1,
                },
            ),
            event(
                4,
                EventKind::ToolExecuting {
                    call_id: "c1".into(),
                    tool: "table_export".into(),
                    path: Some("a.csv".into()),
                },
            ),
            event(
                9,
                EventKind::ToolComplete {
                    call_id: "c1".into(),
                    tool: "table_export".into(),
                    ok: false,
                    error: Some(ErrorBody::new(ErrorCode::SandboxViolation, "no")),
                    elapsed_ms: 5,
                    worker: Some("tabular-h-1".into()),
                },
            ),
            event(
                10,
                EventKind::ItemFinished {
                    index: 1,
                    status: ItemStatus::Failed,
                },
            ),
            event(
                11,
                EventKind::JobFinished {
                    state: JobState::Failed,
                    error: None,
                },
            ),
        ]
    }

    #[test]
    fn trace_joins_calls_with_their_phase_item_and_outcome() {
        let trace = JobTrace::from_events("j1", &script());
        assert_eq!(trace.state, Some(JobState::Failed));
        assert_eq!(trace.phases.len(), 1);
        assert_eq!(trace.phases[0].ended_ms, Some(11));
        assert_eq!(trace.items[0].status, Some(ItemStatus::Failed));
        let calls: Vec<&CallRecord> = trace
            .log
            .iter()
            .filter_map(|entry| match entry {
                IoEntry::Call(record) => Some(record.as_ref()),
                _ => None,
            })
            .collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].status, CallStatus::Failed);
        assert_eq!(calls[0].item, Some(1));
        assert_eq!(calls[0].pool.as_deref(), Some("tabular"));
        assert_eq!(calls[0].worker.as_deref(), Some("tabular-h-1"));
    }

    #[test]
    fn live_counts_errors_and_ignores_replayed_sequences() {
        let live = Live::new();
        for (sequence, event) in script().iter().enumerate() {
            live.apply(sequence as u64 + 1, event);
        }
        live.apply(5, &script()[4]);
        let text = live.metrics().render();
        assert!(
            text.contains("atelier_errors_total{code=\"SANDBOX_VIOLATION\",source=\"tool\"} 1\n")
        );
        assert!(text.contains(
            "atelier_tool_calls_total{tool=\"table_export\",pool=\"tabular\",outcome=\"error\"} 1\n"
        ));
        let throughput = live.throughput(60_000);
        assert_eq!(throughput.hour.failed, 1);
        assert_eq!(throughput.hour.tool_calls, 1);
        assert_eq!(throughput.hour.p50_ms, Some(5));
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(percentiles(&samples), (Some(50), Some(90), Some(99)));
        assert_eq!(percentiles(&[]), (None, None, None));
    }
}
