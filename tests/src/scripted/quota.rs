//! A provider's limits, as the scripted server enforces them: at most so many requests
//! accepted in any window of time, the others answered 429 with `Retry-After`; and how many
//! were in flight at once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The server's limit and what it saw.
#[derive(Debug, Default)]
pub(super) struct Quota {
    /// At most `.0` requests accepted in any `.1`; a refusal says `Retry-After: .2` seconds.
    limit: Option<(usize, Duration, u64)>,
    accepted: VecDeque<Instant>,
    refused: usize,
    in_flight: usize,
    most_in_flight: usize,
}

/// A request in flight, counted until it is dropped.
pub(super) struct InFlight(Arc<Mutex<Quota>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut quota) = self.0.lock() {
            quota.in_flight = quota.in_flight.saturating_sub(1);
        }
    }
}

/// The shared quota of one server.
pub(super) type Shared = Arc<Mutex<Quota>>;

/// Sets the limit: `requests` in any `window`, refused ones told to retry after
/// `retry_after_secs`.
pub(super) fn limit(quota: &Shared, requests: usize, window: Duration, retry_after_secs: u64) {
    if let Ok(mut quota) = quota.lock() {
        quota.limit = Some((requests, window, retry_after_secs));
    }
}

/// Admits a request now, counted in flight until the guard drops; `Err(retry_after_secs)`
/// when the limit refuses it.
pub(super) fn admit(shared: &Shared) -> Result<InFlight, u64> {
    let Ok(mut quota) = shared.lock() else {
        return Err(1);
    };
    let now = Instant::now();
    if let Some((requests, window, retry_after)) = quota.limit {
        while quota
            .accepted
            .front()
            .is_some_and(|at| now.duration_since(*at) >= window)
        {
            quota.accepted.pop_front();
        }
        if quota.accepted.len() >= requests {
            quota.refused += 1;
            return Err(retry_after);
        }
    }
    quota.accepted.push_back(now);
    quota.in_flight += 1;
    quota.most_in_flight = quota.most_in_flight.max(quota.in_flight);
    Ok(InFlight(Arc::clone(shared)))
}

/// How many requests the limit refused.
pub(super) fn refused(quota: &Shared) -> usize {
    quota.lock().map(|quota| quota.refused).unwrap_or_default()
}

/// The most requests in flight at once.
pub(super) fn most_in_flight(quota: &Shared) -> usize {
    quota
        .lock()
        .map(|quota| quota.most_in_flight)
        .unwrap_or_default()
}
