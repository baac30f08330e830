//! Prometheus metrics: every metric name in one place, and a small registry that renders the
//! text exposition format (version 0.0.4) served at `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Jobs by state (gauge, from the coordinator's job list at scrape time).
pub const JOBS: &str = "atelier_jobs";
/// Jobs that reached a terminal state (counter, from `job_finished` events).
pub const JOBS_FINISHED: &str = "atelier_jobs_finished_total";
/// RPI steps: completed phases and finished plan items (counter).
pub const STEPS: &str = "atelier_steps_total";
/// Tool calls by tool, pool and outcome (counter).
pub const TOOL_CALLS: &str = "atelier_tool_calls_total";
/// Tool-call latency by tool and pool (histogram, seconds).
pub const TOOL_CALL_DURATION: &str = "atelier_tool_call_duration_seconds";
/// Model turns by model (counter, from `model_turn` events).
pub const MODEL_TURNS: &str = "atelier_model_turns_total";
/// Model turn latency by model (histogram, seconds).
pub const MODEL_TURN_DURATION: &str = "atelier_model_turn_duration_seconds";
/// Model tokens by model and kind (`prompt`, `completion`), summed over the coordinator's jobs.
pub const MODEL_TOKENS: &str = "atelier_model_tokens_total";
/// What model calls cost in US dollars by model (its profile's name), at the profile's prices;
/// jobs on a profile without prices are left out (their cost is unknown, not 0).
pub const MODEL_COST: &str = "atelier_model_cost_usd_total";
/// Model calls that waited for their profile's limits, by profile and reason (counter, from
/// `provider_waiting` events).
pub const PROVIDER_WAITS: &str = "atelier_provider_waits_total";
/// Errors by stable code and source (`tool`, `job`) (counter).
pub const ERRORS: &str = "atelier_errors_total";
/// Job events read from the EVENTS stream (counter).
pub const EVENTS: &str = "atelier_events_total";
/// Reconnects of the dashboard's NATS connection (counter).
pub const NATS_RECONNECTS: &str = "atelier_nats_reconnects_total";
/// Whether the dashboard's NATS connection is up (gauge, 0 or 1).
pub const NATS_CONNECTED: &str = "atelier_nats_connected";
/// Worker instances per pool, from `$SRV.INFO` (gauge).
pub const WORKERS: &str = "atelier_workers";
/// Tool calls in flight per pool, from `$SRV.STATS` (gauge).
pub const WORKER_IN_FLIGHT: &str = "atelier_worker_in_flight";
/// Batches by state (gauge, from the coordinator's batch list at scrape time).
pub const BATCHES: &str = "atelier_batches";
/// Batch targets by state, summed over every batch (gauge, at scrape time).
pub const BATCH_TARGETS: &str = "atelier_batch_targets";
/// Worker processes per pool, from `$SRV.STATS` (gauge).
pub const POOL_WORKERS: &str = "atelier_pool_workers";
/// Busy tool slots per pool (gauge).
pub const POOL_BUSY_SLOTS: &str = "atelier_pool_busy_slots";
/// Tool slots per pool (gauge: workers × concurrency).
pub const POOL_SLOTS: &str = "atelier_pool_slots";
/// Calls waiting for a free slot per pool: the dispatch backlog (gauge).
pub const POOL_PENDING_CALLS: &str = "atelier_pool_pending_calls";
/// Time from a call's arrival at a worker to its start, per pool (histogram, seconds).
pub const POOL_DISPATCH_WAIT: &str = "atelier_pool_dispatch_wait_seconds";
/// Autoscaling decisions by pool and direction (counter, from the autoscalers' `$SRV.STATS`).
pub const POOL_SCALE_DECISIONS: &str = "atelier_pool_scale_decisions_total";
/// Browsers following the live stream (gauge).
pub const LIVE_CLIENTS: &str = "atelier_dashboard_live_clients";

/// Metric families: name, type, help. `/metrics` writes HELP and TYPE from here.
pub const FAMILIES: &[(&str, Kind, &str)] = &[
    (JOBS, Kind::Gauge, "Jobs by state."),
    (
        JOBS_FINISHED,
        Kind::Counter,
        "Jobs that finished, by final state.",
    ),
    (
        STEPS,
        Kind::Counter,
        "Completed RPI steps (phases and plan items).",
    ),
    (
        TOOL_CALLS,
        Kind::Counter,
        "Tool calls by tool, pool and outcome.",
    ),
    (
        TOOL_CALL_DURATION,
        Kind::Histogram,
        "Tool-call latency in seconds.",
    ),
    (MODEL_TURNS, Kind::Counter, "Model turns by model."),
    (
        MODEL_TURN_DURATION,
        Kind::Histogram,
        "Model turn latency in seconds.",
    ),
    (
        MODEL_TOKENS,
        Kind::Counter,
        "Model tokens by model and kind.",
    ),
    (
        MODEL_COST,
        Kind::Counter,
        "What model calls cost in US dollars, by model, at its profile's prices.",
    ),
    (
        PROVIDER_WAITS,
        Kind::Counter,
        "Model calls that waited for their profile's limits, by profile and reason.",
    ),
    (ERRORS, Kind::Counter, "Errors by stable code and source."),
    (
        EVENTS,
        Kind::Counter,
        "Job events read from the EVENTS stream.",
    ),
    (NATS_RECONNECTS, Kind::Counter, "Reconnects to NATS."),
    (NATS_CONNECTED, Kind::Gauge, "1 when connected to NATS."),
    (WORKERS, Kind::Gauge, "Worker instances per pool."),
    (
        WORKER_IN_FLIGHT,
        Kind::Gauge,
        "Tool calls in flight per pool.",
    ),
    (BATCHES, Kind::Gauge, "Batches by state."),
    (
        BATCH_TARGETS,
        Kind::Gauge,
        "Batch targets by state, over every batch.",
    ),
    (
        POOL_WORKERS,
        Kind::Gauge,
        "Worker processes per pool (retiring ones included).",
    ),
    (POOL_BUSY_SLOTS, Kind::Gauge, "Busy tool slots per pool."),
    (POOL_SLOTS, Kind::Gauge, "Tool slots per pool."),
    (
        POOL_PENDING_CALLS,
        Kind::Gauge,
        "Calls waiting for a free slot per pool.",
    ),
    (
        POOL_DISPATCH_WAIT,
        Kind::Histogram,
        "Time from a call's arrival at a worker to its start, in seconds.",
    ),
    (
        POOL_SCALE_DECISIONS,
        Kind::Counter,
        "Autoscaling decisions by pool and direction.",
    ),
    (
        LIVE_CLIENTS,
        Kind::Gauge,
        "Browsers following the live stream.",
    ),
];

/// Histogram buckets (seconds) for tool calls, model turns and dispatch waits.
pub const LATENCY_BUCKETS: &[f64] = atelier_messages::worker::LATENCY_BUCKETS;

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Label pairs, in a fixed order.
pub type Labels = Vec<(&'static str, String)>;

/// Cumulative histogram over [`LATENCY_BUCKETS`].
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// A histogram measured elsewhere (a worker's dispatch waits).
    pub fn from_waits(waits: &atelier_messages::worker::WaitHistogram) -> Self {
        Self {
            counts: waits.counts.clone(),
            sum: waits.sum_secs,
            count: waits.count,
        }
    }

    pub fn observe(&mut self, value: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; LATENCY_BUCKETS.len()];
        }
        for (bound, count) in LATENCY_BUCKETS.iter().zip(self.counts.iter_mut()) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }
}

/// Counters, gauges and histograms keyed by (name, labels).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    values: BTreeMap<(&'static str, Labels), f64>,
    histograms: BTreeMap<(&'static str, Labels), Histogram>,
}

impl Registry {
    pub fn add(&mut self, name: &'static str, labels: Labels, delta: f64) {
        *self.values.entry((name, labels)).or_insert(0.0) += delta;
    }

    pub fn set(&mut self, name: &'static str, labels: Labels, value: f64) {
        self.values.insert((name, labels), value);
    }

    pub fn set_histogram(&mut self, name: &'static str, labels: Labels, histogram: Histogram) {
        self.histograms.insert((name, labels), histogram);
    }

    pub fn observe(&mut self, name: &'static str, labels: Labels, value: f64) {
        self.histograms
            .entry((name, labels))
            .or_default()
            .observe(value);
    }

    /// Adds every sample of `other` (used to merge scrape-time gauges into the counters).
    pub fn merge(&mut self, other: Registry) {
        self.values.extend(other.values);
        self.histograms.extend(other.histograms);
    }

    /// The text exposition format, families in [`FAMILIES`] order.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, kind, help) in FAMILIES {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {}", kind.as_str());
            if *kind == Kind::Histogram {
                self.render_histograms(&mut out, name);
            } else {
                for ((_, labels), value) in self.values.iter().filter(|((n, _), _)| n == name) {
                    let _ = writeln!(out, "{name}{} {}", label_text(labels), number(*value));
                }
            }
        }
        out
    }

    fn render_histograms(&self, out: &mut String, name: &str) {
        for ((_, labels), histogram) in self.histograms.iter().filter(|((n, _), _)| *n == name) {
            for (bound, count) in LATENCY_BUCKETS.iter().zip(&histogram.counts) {
                let mut with_le = labels.clone();
                with_le.push(("le", number(*bound)));
                let _ = writeln!(out, "{name}_bucket{} {count}", label_text(&with_le));
            }
            let mut inf = labels.clone();
            inf.push(("le", "+Inf".to_string()));
            let _ = writeln!(out, "{name}_bucket{} {}", label_text(&inf), histogram.count);
            let labels = label_text(labels);
            let _ = writeln!(out, "{name}_sum{labels} {}", number(histogram.sum));
            let _ = writeln!(out, "{name}_count{labels} {}", histogram.count);
        }
    }
}

fn label_text(labels: &[(&'static str, String)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = labels
        .iter()
        .map(|(key, value)| format!("{key}=\"{}\"", escape(value)))
        .collect();
    format!("{{{}}}", pairs.join(","))
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_histograms() {
        let mut registry = Registry::default();
        registry.add(TOOL_CALLS, vec![("tool", "read_file".into())], 2.0);
        registry.observe(TOOL_CALL_DURATION, vec![("tool", "a\"b".into())], 0.02);
        registry.observe(TOOL_CALL_DURATION, vec![("tool", "a\"b".into())], 3.0);
        let text = registry.render();
        assert!(text.contains("atelier_tool_calls_total{tool=\"read_file\"} 2\n"));
        assert!(text.contains(
            "atelier_tool_call_duration_seconds_bucket{tool=\"a\\\"b\",le=\"0.025\"} 1\n"
        ));
        assert!(
            text.contains(
                "atelier_tool_call_duration_seconds_bucket{tool=\"a\\\"b\",le=\"5\"} 2\n"
            )
        );
        assert!(text.contains(
            "atelier_tool_call_duration_seconds_bucket{tool=\"a\\\"b\",le=\"+Inf\"} 2\n"
        ));
        assert!(text.contains("atelier_tool_call_duration_seconds_count{tool=\"a\\\"b\"} 2\n"));
        assert!(text.contains("# TYPE atelier_tool_call_duration_seconds histogram\n"));
    }
}
