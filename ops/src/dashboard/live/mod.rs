//! What the dashboard knows from the EVENTS stream: a trace of each recent job (phases, items,
//! the tool I/O log), the last hour of throughput and tool latency, and the event-derived
//! metrics. Fed one event at a time by [`crate::dashboard::feed`]; read by the HTTP handlers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use atelier_messages::ErrorBody;
use atelier_messages::job::{EventKind, ItemStatus, JobEvent, JobState};
use atelier_messages::tool::ToolName;
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

#[cfg(test)]
mod tests;
mod trace;

pub use trace::{Current, JobTrace};

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
                let pool = ToolName::parse(tool)
                    .map(|name| name.runs_on().to_string())
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
            EventKind::ProviderWaiting {
                profile, reason, ..
            } => registry.add(
                metrics::PROVIDER_WAITS,
                vec![
                    ("profile", profile.clone()),
                    ("reason", reason.as_str().to_string()),
                ],
                1.0,
            ),
            EventKind::JobFinished { state, error, .. } => {
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
