//! Worker pools as NATS micro services: the service and endpoint names `$SRV` lists them under,
//! the live numbers a worker adds to its endpoint's `$SRV.STATS` answer (its slots, the calls
//! waiting for one, the dispatch-to-start latency), and the autoscaler's decisions.
//!
//! Core NATS queue groups keep no backlog of their own: a call is handed to one worker at once,
//! and waits there for a free slot. So a pool's demand is read from its workers: busy and total
//! slots, and the calls waiting for a slot.

use serde::{Deserialize, Serialize};

use crate::tool::Pool;

/// The endpoint name inside a pool's service.
pub const TOOL_ENDPOINT: &str = "tools";

/// The NATS micro service name of a pool's workers: `atelier-<pool>`.
pub fn service_name(pool: Pool) -> String {
    format!("atelier-{pool}")
}

/// The pool a service name belongs to (the inverse of [`service_name`]).
pub fn pool_of_service(name: &str) -> Option<Pool> {
    name.strip_prefix("atelier-").and_then(Pool::parse)
}

/// What a worker adds to its endpoint's `$SRV.STATS` (`data`): live numbers the service API
/// does not have. Tool errors are answered in the reply envelope (the format is fixed), so the
/// service's own `num_errors` stays 0; `tool_errors` counts them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatsData {
    pub worker: String,
    pub pool: String,
    pub in_flight: u64,
    pub max_concurrency: u64,
    pub tool_errors: u64,
    #[serde(default)]
    pub last_error_code: Option<String>,
    /// Calls received and waiting for a free slot (the worker's dispatch backlog).
    #[serde(default)]
    pub pending: u64,
    /// True once the worker is retiring: it takes no new calls and finishes those it has.
    #[serde(default)]
    pub draining: bool,
    /// Time from a call's arrival at the worker to the start of its tool, since the start.
    #[serde(default)]
    pub dispatch_wait: WaitHistogram,
    /// The process's async threads (taking requests, sending replies; tools run on blocking
    /// threads); 0 from a worker too old to say.
    #[serde(default)]
    pub async_threads: u64,
}

/// Upper bounds (seconds) of latency histogram buckets: tool calls, model turns, dispatch waits.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// A cumulative histogram over [`LATENCY_BUCKETS`]: `counts[i]` observations were at most
/// `LATENCY_BUCKETS[i]` seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitHistogram {
    pub counts: Vec<u64>,
    pub sum_secs: f64,
    pub count: u64,
}

impl WaitHistogram {
    pub fn observe(&mut self, seconds: f64) {
        if self.counts.len() != LATENCY_BUCKETS.len() {
            self.counts = vec![0; LATENCY_BUCKETS.len()];
        }
        for (bound, count) in LATENCY_BUCKETS.iter().zip(self.counts.iter_mut()) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.sum_secs += seconds;
        self.count += 1;
    }

    /// Adds another worker's histogram (same buckets) to this one.
    pub fn merge(&mut self, other: &WaitHistogram) {
        if other.counts.len() != LATENCY_BUCKETS.len() {
            return;
        }
        if self.counts.len() != LATENCY_BUCKETS.len() {
            self.counts = vec![0; LATENCY_BUCKETS.len()];
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.sum_secs += other.sum_secs;
        self.count += other.count;
    }
}

/// Where an autoscaler publishes each decision: `atelier.pool.<pool>.scaled`.
pub fn scale_subject(pool: Pool) -> String {
    format!("atelier.pool.{pool}.scaled")
}

/// The NATS micro service an autoscaler registers (its `$SRV.STATS` data is [`AutoscaleStats`]).
pub const AUTOSCALER_SERVICE: &str = "atelier-autoscaler";

/// Which way a decision went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleDirection {
    Up,
    Down,
}

impl ScaleDirection {
    pub fn as_str(self) -> &'static str {
        match self {
            ScaleDirection::Up => "up",
            ScaleDirection::Down => "down",
        }
    }
}

/// One autoscaling decision, with the demand it was made on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleDecision {
    pub pool: String,
    pub direction: ScaleDirection,
    /// Workers the supervisor runs before and after the decision.
    pub from: u64,
    pub to: u64,
    pub reason: String,
    pub busy_slots: u64,
    pub slots: u64,
    pub pending_calls: u64,
    pub at_ms: u64,
}

/// What an autoscaler adds to its `$SRV.STATS` answer: per pool, its bounds and decisions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AutoscaleStats {
    pub pools: Vec<AutoscalePool>,
}

/// One pool an autoscaler supervises.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AutoscalePool {
    pub pool: String,
    pub min: u64,
    pub max: u64,
    /// Worker processes it runs now (retiring ones included until they exit).
    pub workers: u64,
    pub scale_ups: u64,
    pub scale_downs: u64,
    #[serde(default)]
    pub last_decision: Option<ScaleDecision>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_histograms_are_cumulative_and_merge() {
        let mut first = WaitHistogram::default();
        first.observe(0.003);
        first.observe(2.0);
        let mut second = WaitHistogram::default();
        second.observe(200.0);
        first.merge(&second);
        assert_eq!(first.count, 3);
        assert_eq!(first.counts[0], 1);
        assert_eq!(first.counts[LATENCY_BUCKETS.len() - 1], 2);
        assert_eq!(first.counts[8], 2, "2.5 s bucket");
        assert!((first.sum_secs - 202.003).abs() < 1e-9);
    }

    #[test]
    fn service_names_map_back_to_pools() {
        for pool in Pool::ALL {
            assert_eq!(pool_of_service(&service_name(pool)), Some(pool));
        }
        assert_eq!(pool_of_service("atelier-nope"), None);
    }
}
