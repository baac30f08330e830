//! A model profile's shared limiter: the record every coordinator of a deployment reads and
//! updates by compare-and-set before it calls the profile's provider (NATS KV bucket
//! [`LIMITS_BUCKET`], one key per profile).
//!
//! Requests and tokens are paced by the generic cell rate algorithm (GCRA): each kind keeps
//! its *theoretical arrival time*, the moment the next call may start; admitting a call
//! moves it on by the call's share of a minute. Calls in flight are leases that lapse by
//! themselves, so a coordinator killed mid-call frees its slots.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::PROTOCOL_VERSION;

/// The KV bucket of the limiters, one key per model profile.
pub const LIMITS_BUCKET: &str = "atelier-provider-limits";

/// How soon a job's model calls go when its profile's limits are saturated: every waiting
/// call of a higher priority before any of a lower one.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    High,
    #[default]
    Normal,
    Low,
}

impl Priority {
    /// Its name (`high`, `normal`, `low`).
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }

    /// The priority named `name` (any case).
    pub fn parse(name: &str) -> Option<Priority> {
        [Priority::High, Priority::Normal, Priority::Low]
            .into_iter()
            .find(|priority| priority.as_str().eq_ignore_ascii_case(name.trim()))
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One call in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// When the lease lapses if it is not given back (ms since the epoch).
    pub expires_ms: u64,
    /// The tokens the call was estimated at when it was admitted.
    pub tokens: u64,
    /// Whose call it is: the batch, else the workbench (calls share fairly between them).
    #[serde(default)]
    pub group: String,
}

/// A call waiting to be admitted: its place in the line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    pub priority: Priority,
    /// The batch, else the workbench.
    pub group: String,
    /// When it started waiting (ms since the epoch).
    pub since_ms: u64,
    /// When the ticket lapses unless its caller looks again (a caller that died).
    pub expires_ms: u64,
}

/// A profile's limiter state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimiterState {
    pub v: u16,
    /// When the next request may start (ms since the epoch, fractional).
    #[serde(default)]
    pub requests_at_ms: f64,
    /// When the next tokens may be spent (ms since the epoch, fractional).
    #[serde(default)]
    pub tokens_at_ms: f64,
    /// No call starts before this (a provider's `Retry-After`).
    #[serde(default)]
    pub paused_until_ms: u64,
    /// Calls in flight, by lease id.
    #[serde(default)]
    pub leases: BTreeMap<String, Lease>,
    /// Calls waiting, by the lease id they will hold.
    #[serde(default)]
    pub waiting: BTreeMap<String, Ticket>,
}

impl Default for LimiterState {
    fn default() -> Self {
        Self {
            v: PROTOCOL_VERSION,
            requests_at_ms: 0.0,
            tokens_at_ms: 0.0,
            paused_until_ms: 0,
            leases: BTreeMap::new(),
            waiting: BTreeMap::new(),
        }
    }
}

/// Why a call waits before it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// `max_concurrent_requests` calls are in flight.
    Concurrency,
    /// `requests_per_minute` is spent for now.
    Requests,
    /// `tokens_per_minute` is spent for now.
    Tokens,
    /// The provider answered 429 with `Retry-After`.
    RetryAfter,
    /// Calls of a higher priority, or of a group with fewer calls in flight, go first.
    Queue,
}

impl WaitReason {
    /// What a person is told (`waiting for the provider's rate`).
    pub fn describe(self) -> &'static str {
        match self {
            WaitReason::Concurrency => "waiting for a free request slot of the provider",
            WaitReason::Requests => "waiting for the provider's rate (requests per minute)",
            WaitReason::Tokens => "waiting for the provider's rate (tokens per minute)",
            WaitReason::RetryAfter => "waiting for the provider's rate (it asked to retry later)",
            WaitReason::Queue => "waiting behind calls that go first (priority, fair share)",
        }
    }

    /// Its stable name (`requests`, `tokens`, …), as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Concurrency => "concurrency",
            WaitReason::Requests => "requests",
            WaitReason::Tokens => "tokens",
            WaitReason::RetryAfter => "retry_after",
            WaitReason::Queue => "queue",
        }
    }
}
