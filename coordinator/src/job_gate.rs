//! A job's gate on its model profile's limits: each attempt of its model calls is admitted by
//! the deployment's limiter of the profile ([`crate::provider_limits`]); a call that must wait
//! says so in the job's events (`provider_waiting`), and the time it waited moves the job's
//! deadline on ([`Waited`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use atelier_agents::AgentError;
use atelier_agents::http::{Gate, Permit, ProviderGate};
use atelier_messages::job::EventKind;

use crate::defaults::Waited;
use crate::events::EventSink;
use crate::provider_limits::{Place, ProfileLimiter};

/// One job's gate on one profile.
pub(crate) struct JobGate {
    limiter: ProfileLimiter,
    /// The job's place in the profile's line.
    place: Place,
    events: EventSink,
    waited: Waited,
}

impl JobGate {
    /// The gate a job's provider is built with.
    pub(crate) fn gate(
        limiter: ProfileLimiter,
        place: Place,
        events: EventSink,
        waited: Waited,
    ) -> Gate {
        Gate(Arc::new(Self {
            limiter,
            place,
            events,
            waited,
        }))
    }
}

#[async_trait::async_trait]
impl ProviderGate for JobGate {
    async fn acquire(&self, estimate: u64) -> Result<Permit, AgentError> {
        let started = Instant::now();
        let mut waited = false;
        let profile = self.limiter.profile().to_string();
        let lease = self
            .limiter
            .acquire(estimate, &self.place, |reason, expected_ms| {
                waited = true;
                self.events.emit(EventKind::ProviderWaiting {
                    profile: profile.clone(),
                    reason,
                    expected_ms,
                });
            })
            .await
            .map_err(|error| {
                AgentError::Unavailable(format!(
                    "the limiter of model profile `{profile}` cannot be reached: {error}"
                ))
            })?;
        if waited {
            self.waited.add(started.elapsed());
        }
        Ok(Permit {
            id: lease,
            estimate,
        })
    }

    async fn release(&self, permit: Permit, used: Option<u64>) {
        self.limiter.release(&permit.id, used).await;
    }

    async fn rate_limited(&self, retry_after: Duration) {
        self.limiter.pause(retry_after).await;
    }
}
