//! What a job gets that its submission leaves out — the operator's model, time limit and
//! budget, its profile's prices — and the deadline a run keeps.
//!
//! A run's clock starts when it first leaves `queued` (time waiting for a slot or for the
//! workbench does not count) and keeps running through approval waits and coordinator
//! restarts (the start is in the job's record); time its model calls wait for their profile's
//! limits (`max_concurrent_requests`, `requests_per_minute`, …) moves the deadline on by as
//! much (waits before a coordinator restart are not carried over). At the deadline the run is
//! dropped wherever it is — a model that does not answer, a tool that does not return, a
//! person who does not decide — and the job ends `failed` with `JOB_TIME_LIMIT`. The draft stays consistent: each
//! draft write is one DraftStore transaction, applied whole or not at all, and the journal is
//! what a crash would leave. `atelier resume` starts a new run with the full limit.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use atelier_agents::spec::{ProfileSpending, profile_name};
use atelier_messages::budget::{Budget, Prices};
use atelier_messages::{ErrorBody, ErrorCode, now_ms};

use crate::templates::glob_matches;

/// The operator's limit for jobs that name none.
pub const DEFAULT_JOB_TIME_LIMIT_SECS: u64 = 3600;
/// The most a submission may ask for.
pub const MAX_JOB_TIME_LIMIT_SECS: u64 = 7 * 24 * 3600;

/// The operator's settings for what a submission leaves out.
#[derive(Debug, Clone, Default)]
pub struct JobDefaults {
    /// The model spec of jobs that name none (and whose workbench chose none).
    pub model: Option<String>,
    pub time_limits: TimeLimits,
    pub spending: SpendingDefaults,
}

/// What a job may spend when it names no budget, and what its calls cost. A job's budget is
/// its own, else the longest of `workbenches`' globs that matches its workbench, else its model
/// profile's `job_budget_*`, else `budget` — limit by limit; a default in dollars applies only
/// where the profile has prices (a job's own is refused without them).
#[derive(Debug, Clone, Default)]
pub struct SpendingDefaults {
    /// The operator's `job_budget_tokens` and `job_budget_usd`.
    pub budget: Budget,
    /// `[workbench_budgets]`: (workbench glob, budget).
    pub workbenches: Vec<(String, Budget)>,
    /// Each model profile's prices and default budget, by profile name.
    pub profiles: BTreeMap<String, ProfileSpending>,
}

/// What a job may spend and at which prices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobSpending {
    pub budget: Budget,
    pub prices: Option<Prices>,
}

impl SpendingDefaults {
    /// The budget and prices of a job on `workbench` with `model` that asked for `asked`, or
    /// `VALIDATION_FAILED` for a budget in dollars on a model without prices.
    pub fn of(
        &self,
        workbench: &str,
        model: &str,
        asked: Budget,
    ) -> Result<JobSpending, ErrorBody> {
        let profile = self.profile(model);
        if asked.usd.is_some() && profile.prices.is_none() {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "a budget in dollars needs the model's prices, and `{model}` has none: set \
                     input_usd_per_mtok and output_usd_per_mtok in its profile, or give \
                     --budget-tokens instead"
                ),
            ));
        }
        let for_workbench = (self.workbenches.iter())
            .filter(|(glob, _)| glob_matches(glob, workbench))
            .max_by_key(|(glob, _)| glob.len())
            .map(|(_, budget)| *budget)
            .unwrap_or_default();
        let mut budget = asked.or(for_workbench).or(profile.budget).or(self.budget);
        if profile.prices.is_none() {
            budget.usd = None;
        }
        Ok(JobSpending {
            budget,
            prices: profile.prices,
        })
    }

    fn profile(&self, model: &str) -> ProfileSpending {
        (profile_name(model))
            .and_then(|name| self.profiles.get(&name).copied())
            .unwrap_or_default()
    }
}

/// The operator's time limits of jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeLimits {
    /// The limit of a job that names none.
    pub default_secs: u64,
    /// The most a job may ask for.
    pub max_secs: u64,
}

impl Default for TimeLimits {
    fn default() -> Self {
        Self {
            default_secs: DEFAULT_JOB_TIME_LIMIT_SECS,
            max_secs: MAX_JOB_TIME_LIMIT_SECS,
        }
    }
}

impl TimeLimits {
    /// The limit of a job that asked for `asked` seconds, or `VALIDATION_FAILED` when it asked
    /// for more than the maximum (or for none at all: 0).
    pub fn of(&self, asked: Option<u64>) -> Result<u64, ErrorBody> {
        let Some(secs) = asked else {
            return Ok(self.default_secs.min(self.max_secs));
        };
        if secs == 0 || secs > self.max_secs {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "a time limit of {secs} s is outside 1..={} s, the most this coordinator \
                     allows (`max_job_time_limit_secs`); ask for less",
                    self.max_secs
                ),
            ));
        }
        Ok(secs)
    }
}

/// A run's clock: its limit and when it started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunClock {
    /// 0: no limit.
    pub(crate) limit_secs: u64,
    /// None: not started.
    pub(crate) started_at_ms: Option<u64>,
}

/// How long a run's model calls waited for their profile's limits (ms), shared by the calls
/// and the run's clock.
#[derive(Debug, Clone, Default)]
pub(crate) struct Waited(Arc<AtomicU64>);

impl Waited {
    /// Adds a wait.
    pub(crate) fn add(&self, waited: Duration) {
        let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(ms, Ordering::Relaxed);
    }

    fn ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl RunClock {
    /// How long the run has left, its waits for a provider's limits not counted (none: no
    /// limit, or not started).
    fn remaining(self, waited: &Waited) -> Option<Duration> {
        if self.limit_secs == 0 {
            return None;
        }
        let started = self.started_at_ms?;
        let deadline = started
            .saturating_add(self.limit_secs.saturating_mul(1000))
            .saturating_add(waited.ms());
        Some(Duration::from_millis(deadline.saturating_sub(now_ms())))
    }

    /// Runs `work` until the deadline, moved on by every wait for a provider's limits; past
    /// it, `JOB_TIME_LIMIT` (and `work` is dropped).
    pub(crate) async fn within<T>(
        self,
        waited: &Waited,
        work: impl Future<Output = Result<T, ErrorBody>>,
    ) -> Result<T, ErrorBody> {
        if self.remaining(waited).is_none() {
            return work.await;
        }
        tokio::pin!(work);
        loop {
            let left = self.remaining(waited).unwrap_or_default();
            match tokio::time::timeout(left, &mut work).await {
                Ok(ended) => return ended,
                // The calls waited meanwhile: the deadline moved on.
                Err(_) if self.remaining(waited).is_some_and(|left| !left.is_zero()) => {}
                Err(_) => {
                    tracing::warn!(limit_secs = self.limit_secs, "job ran past its time limit");
                    return Err(exceeded(self.limit_secs));
                }
            }
        }
    }
}

fn exceeded(limit_secs: u64) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::JobTimeLimit,
        format!(
            "the job ran past its time limit of {limit_secs} s and was stopped; the draft holds \
             what it wrote until then. `atelier resume JOB` continues it with the limit again, \
             or submit with a larger `--time-limit`"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd(micros: u64) -> Option<atelier_messages::budget::Usd> {
        Some(atelier_messages::budget::Usd::from_micros(micros))
    }

    #[test]
    fn a_jobs_budget_is_its_own_else_its_workbenchs_else_its_profiles_else_the_operators() {
        let prices = Prices {
            input_usd_per_mtok: atelier_messages::budget::Usd::from_micros(1_000_000),
            output_usd_per_mtok: atelier_messages::budget::Usd::from_micros(2_000_000),
        };
        let defaults = SpendingDefaults {
            budget: Budget {
                tokens: Some(9_000),
                usd: usd(900_000),
            },
            workbenches: vec![
                (
                    "reports-*".into(),
                    Budget {
                        tokens: Some(5_000),
                        usd: None,
                    },
                ),
                (
                    "reports-q*".into(),
                    Budget {
                        tokens: Some(4_000),
                        usd: None,
                    },
                ),
            ],
            profiles: BTreeMap::from([
                (
                    "priced".to_string(),
                    ProfileSpending {
                        prices: Some(prices),
                        budget: Budget {
                            tokens: Some(7_000),
                            usd: usd(700_000),
                        },
                    },
                ),
                ("free".to_string(), ProfileSpending::default()),
            ]),
        };
        let of = |workbench: &str, model: &str, asked: Budget| defaults.of(workbench, model, asked);
        let own = Budget {
            tokens: Some(100),
            usd: None,
        };
        let spending = of("reports-q3", "priced", own).expect("priced");
        // Limit by limit: its own tokens, the profile's dollars (the longest glob has none).
        assert_eq!(
            spending.budget,
            Budget {
                tokens: Some(100),
                usd: usd(700_000)
            }
        );
        assert_eq!(spending.prices, Some(prices));
        let spending = of("reports-q3", "priced", Budget::default()).expect("priced");
        assert_eq!(
            spending.budget.tokens,
            Some(4_000),
            "the longest matching glob"
        );
        let spending = of("notes", "priced", Budget::default()).expect("priced");
        assert_eq!(spending.budget.tokens, Some(7_000), "the profile's");
        // Without prices: the operator's tokens, and no default in dollars that could not be kept.
        let spending = of("notes", "free", Budget::default()).expect("free");
        assert_eq!(
            spending.budget,
            Budget {
                tokens: Some(9_000),
                usd: None
            }
        );
        assert_eq!(spending.prices, None);
        // …and a job's own dollars are refused there.
        let asked = Budget {
            tokens: None,
            usd: usd(1),
        };
        let refused = of("notes", "free", asked).map_err(|error| error.code);
        assert_eq!(refused, Err(ErrorCode::ValidationFailed));
        let refused = of("notes", "openai:gpt-4.1-mini", asked).map_err(|error| error.code);
        assert_eq!(refused, Err(ErrorCode::ValidationFailed));
    }

    #[test]
    fn a_submission_gets_the_default_or_its_own_limit_within_the_maximum() {
        let limits = TimeLimits {
            default_secs: 60,
            max_secs: 600,
        };
        assert_eq!(limits.of(None), Ok(60));
        assert_eq!(limits.of(Some(600)), Ok(600));
        for refused in [0, 601] {
            let error = limits.of(Some(refused)).unwrap_err();
            assert_eq!(error.code, ErrorCode::ValidationFailed);
        }
        // A default above the maximum is the maximum.
        let odd = TimeLimits {
            default_secs: 900,
            max_secs: 600,
        };
        assert_eq!(odd.of(None), Ok(600));
    }

    #[test]
    fn a_run_has_what_is_left_of_its_limit() {
        let clock = |limit_secs, started_at_ms| RunClock {
            limit_secs,
            started_at_ms,
        };
        let none = Waited::default();
        assert_eq!(clock(0, Some(now_ms())).remaining(&none), None);
        assert_eq!(clock(60, None).remaining(&none), None);
        let left = clock(60, Some(now_ms() - 20_000)).remaining(&none);
        assert!(
            left.is_some_and(|left| left <= Duration::from_secs(40)),
            "{left:?}"
        );
        let past = clock(60, Some(now_ms() - 120_000)).remaining(&none);
        assert_eq!(past, Some(Duration::ZERO));
        // A minute spent waiting for a provider's limits moves the deadline on by a minute.
        let waited = Waited::default();
        waited.add(Duration::from_secs(60));
        let moved = clock(60, Some(now_ms() - 90_000)).remaining(&waited);
        assert!(
            moved.is_some_and(|left| left > Duration::from_secs(25)),
            "{moved:?}"
        );
    }

    #[tokio::test]
    async fn a_wait_during_the_run_moves_its_deadline_on() {
        // A 1 s limit; the work waits 1.5 s for a provider, counted, and ends after 2 s.
        let clock = RunClock {
            limit_secs: 1,
            started_at_ms: Some(now_ms()),
        };
        let waited = Waited::default();
        let work = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            waited.add(Duration::from_millis(1500));
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Ok::<_, ErrorBody>("done")
        };
        assert_eq!(clock.within(&waited, work).await, Ok("done"));
        let none = Waited::default();
        let stuck = clock.within(&none, std::future::pending::<Result<(), _>>());
        let refused = stuck.await.map_err(|error| error.code);
        assert_eq!(refused, Err(ErrorCode::JobTimeLimit));
    }
}
