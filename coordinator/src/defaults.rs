//! What a job gets that its submission leaves out — the operator's model and time limit — and
//! the deadline a run keeps.
//!
//! A run's clock starts when it first leaves `queued` (time waiting for a slot or for the
//! workbench does not count) and keeps running through approval waits and coordinator
//! restarts (the start is in the job's record). At the deadline the run is dropped wherever it
//! is — a model that does not answer, a tool that does not return, a person who does not
//! decide — and the job ends `failed` with `JOB_TIME_LIMIT`. The draft stays consistent: each
//! draft write is one DraftStore transaction, applied whole or not at all, and the journal is
//! what a crash would leave. `atelier resume` starts a new run with the full limit.

use std::time::Duration;

use atelier_messages::{ErrorBody, ErrorCode, now_ms};

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

impl RunClock {
    /// How long the run has left (none: no limit, or not started).
    fn remaining(self) -> Option<Duration> {
        if self.limit_secs == 0 {
            return None;
        }
        let started = self.started_at_ms?;
        let deadline = started.saturating_add(self.limit_secs.saturating_mul(1000));
        Some(Duration::from_millis(deadline.saturating_sub(now_ms())))
    }

    /// Runs `work` until the deadline; past it, `JOB_TIME_LIMIT` (and `work` is dropped).
    pub(crate) async fn within<T>(
        self,
        work: impl Future<Output = Result<T, ErrorBody>>,
    ) -> Result<T, ErrorBody> {
        let Some(left) = self.remaining() else {
            return work.await;
        };
        match tokio::time::timeout(left, work).await {
            Ok(ended) => ended,
            Err(_) => {
                tracing::warn!(limit_secs = self.limit_secs, "job ran past its time limit");
                Err(exceeded(self.limit_secs))
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
        assert_eq!(clock(0, Some(now_ms())).remaining(), None);
        assert_eq!(clock(60, None).remaining(), None);
        let left = clock(60, Some(now_ms() - 20_000)).remaining();
        assert!(
            left.is_some_and(|left| left <= Duration::from_secs(40)),
            "{left:?}"
        );
        let past = clock(60, Some(now_ms() - 120_000)).remaining();
        assert_eq!(past, Some(Duration::ZERO));
    }
}
