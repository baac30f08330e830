//! Job state transitions: the one place that decides how a job's state may change.
//!
//! Intake, the control verbs and the orchestrator all change a job through
//! [`Jobs::transition`](crate::jobs::Jobs::transition), which applies [`apply`] to the stored
//! record in a compare-and-swap loop and commits. A transition that does not fit the job's
//! state is refused with `VALIDATION_FAILED` and a sentence saying why.
//!
//! ```text
//! queued ──start──▶ running ──await_approval──▶ awaiting_approval
//!   │                 ▲  │                           │
//!   │                 └──┼────approval_resolved──────┘
//!   │                    └──finish──▶ succeeded | failed | cancelled ──resume──▶ queued
//!   └──cancel_unstarted──▶ cancelled
//! ```

use atelier_messages::budget::Budget;
use atelier_messages::job::{JobOutcome, JobState, PendingApproval};
use atelier_messages::{ErrorBody, ErrorCode};

use crate::jobs::record::JobRecord;

/// A change to a job's lifecycle.
#[derive(Debug, Clone)]
pub enum Transition {
    /// An orchestrator runs (or continues) the job.
    Start,
    /// A destructive call waits for a person.
    AwaitApproval(PendingApproval),
    /// The decision on the pending call is in; the job runs on.
    ApprovalResolved,
    /// The run ended with `state` (terminal) and, unless it succeeded, an error; a succeeded
    /// run with its outcome.
    Finish {
        state: JobState,
        error: Option<ErrorBody>,
        outcome: Option<JobOutcome>,
    },
    /// `atelier cancel`: honoured at the job's next step boundary, also after a restart.
    RequestCancel,
    /// A cancelled job that no orchestrator runs ends at once.
    CancelUnstarted,
    /// `atelier resume`: a failed or cancelled job is queued to continue from its journal,
    /// with the limits `budget` sets replacing its own (its spending so far included).
    Resume { budget: Budget },
}

/// The refusal of a budget in dollars for a job whose cost is unknown.
pub fn unpriced(job_id: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!(
            "job `{job_id}` runs on a model without prices, so a budget in dollars cannot be \
             kept: give --budget-tokens"
        ),
    )
}

fn refuse(record: &JobRecord, why: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!("job `{}` is {}: {why}", record.job_id, record.state),
    )
}

/// Applies `transition` to `record`, or refuses it.
pub fn apply(record: &mut JobRecord, transition: Transition) -> Result<(), ErrorBody> {
    match transition {
        Transition::Start => {
            if record.state.is_terminal() {
                return Err(refuse(record, "a finished job does not run again"));
            }
            if record.state == JobState::Queued {
                record.state = JobState::Running;
                // The run's clock: kept when a restart adopts it, new for a resumed run.
                record
                    .started_at_ms
                    .get_or_insert_with(atelier_messages::now_ms);
            }
        }
        Transition::AwaitApproval(pending) => {
            // An adopted job that was waiting asks again for the same call.
            if !matches!(record.state, JobState::Running | JobState::AwaitingApproval) {
                return Err(refuse(record, "only a running job waits for approval"));
            }
            record.state = JobState::AwaitingApproval;
            record.pending_approval = Some(pending);
        }
        Transition::ApprovalResolved => {
            if record.state != JobState::AwaitingApproval {
                return Err(refuse(record, "it has no call awaiting approval"));
            }
            record.state = JobState::Running;
            record.pending_approval = None;
        }
        Transition::Finish {
            state,
            error,
            outcome,
        } => {
            if !state.is_terminal() {
                return Err(refuse(record, "a run ends in a terminal state"));
            }
            record.state = state;
            record.error = error;
            record.outcome = outcome.filter(|_| state == JobState::Succeeded);
            record.pending_approval = None;
        }
        Transition::RequestCancel => {
            if record.state.is_terminal() {
                return Err(refuse(record, "it already finished"));
            }
            record.cancel_requested = true;
        }
        Transition::CancelUnstarted => {
            if record.state.is_terminal() {
                return Err(refuse(record, "it already finished"));
            }
            record.cancel_requested = true;
            record.state = JobState::Cancelled;
            record.error = Some(ErrorBody::new(
                ErrorCode::UserCanceled,
                "the job was cancelled before it ran",
            ));
            record.pending_approval = None;
        }
        Transition::Resume { budget } => {
            if !matches!(record.state, JobState::Failed | JobState::Cancelled) {
                return Err(refuse(
                    record,
                    "only failed or cancelled jobs can be resumed",
                ));
            }
            if budget.usd.is_some() && record.prices.is_none() {
                return Err(unpriced(&record.job_id));
            }
            record.budget = budget.or(record.budget);
            record.state = JobState::Queued;
            record.error = None;
            record.outcome = None;
            record.cancel_requested = false;
            record.started_at_ms = None;
            record.run += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: JobState) -> JobRecord {
        JobRecord {
            job_id: "j".into(),
            workbench: "w".into(),
            message: "m".into(),
            model: "replay:x".into(),
            state,
            error: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            auto_approve: false,
            cancel_requested: false,
            pending_approval: None,
            run: 0,
            approvals: Default::default(),
            message_id: None,
            workflow: None,
            batch_id: None,
            outcome: None,
            time_limit_secs: 0,
            started_at_ms: None,
            priority: None,
            budget: Budget::default(),
            prices: None,
        }
    }

    fn pending() -> PendingApproval {
        PendingApproval {
            call_id: "c".into(),
            tool: "delete_file".into(),
            arguments: "{}".into(),
            requested_at_ms: 1,
            action_class: atelier_messages::approval::ActionClass::Destructive,
            why: None,
        }
    }

    #[test]
    fn a_job_runs_waits_for_approval_and_finishes() {
        let mut job = record(JobState::Queued);
        apply(&mut job, Transition::Start).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(job.state, JobState::Running);
        apply(&mut job, Transition::AwaitApproval(pending())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(job.state, JobState::AwaitingApproval);
        assert_eq!(job.pending_approval, Some(pending()));
        apply(&mut job, Transition::ApprovalResolved).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (job.state, job.pending_approval.clone()),
            (JobState::Running, None)
        );
        let answered = Some(atelier_messages::job::JobOutcome::Answered);
        let finish = Transition::Finish {
            state: JobState::Succeeded,
            error: None,
            outcome: answered.clone(),
        };
        apply(&mut job, finish).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((job.state, &job.outcome), (JobState::Succeeded, &answered));
    }

    #[test]
    fn a_run_clock_starts_when_it_leaves_the_queue_and_a_resume_restarts_it() {
        let mut job = record(JobState::Queued);
        apply(&mut job, Transition::Start).unwrap_or_else(|e| panic!("{e}"));
        let started = job.started_at_ms;
        assert!(started.is_some_and(|at| at > 0));
        // Adopted after a restart: the same run, the same clock.
        job.started_at_ms = Some(7);
        apply(&mut job, Transition::Start).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(job.started_at_ms, Some(7));
        job.state = JobState::Failed;
        apply(
            &mut job,
            Transition::Resume {
                budget: Budget::default(),
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((job.state, job.started_at_ms), (JobState::Queued, None));
        apply(&mut job, Transition::Start).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            job.started_at_ms
                .is_some_and(|at| at >= started.unwrap_or_default())
        );
    }

    #[test]
    fn an_adopted_job_keeps_waiting_for_its_approval() {
        let mut job = record(JobState::AwaitingApproval);
        job.pending_approval = Some(pending());
        apply(&mut job, Transition::Start).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(job.state, JobState::AwaitingApproval);
        assert!(job.pending_approval.is_some());
    }

    #[test]
    fn finished_jobs_refuse_everything_but_resume() {
        for state in [JobState::Succeeded, JobState::Failed, JobState::Cancelled] {
            for transition in [
                Transition::Start,
                Transition::RequestCancel,
                Transition::CancelUnstarted,
                Transition::ApprovalResolved,
                Transition::AwaitApproval(pending()),
            ] {
                let refused = apply(&mut record(state), transition.clone()).err();
                assert_eq!(
                    refused.map(|e| e.code),
                    Some(ErrorCode::ValidationFailed),
                    "{state} {transition:?}"
                );
            }
        }
        let resumed = apply(
            &mut record(JobState::Succeeded),
            Transition::Resume {
                budget: Budget::default(),
            },
        )
        .err();
        assert_eq!(resumed.map(|e| e.code), Some(ErrorCode::ValidationFailed));
        let mut failed = record(JobState::Failed);
        let ended = Transition::Finish {
            state: JobState::Failed,
            error: Some(ErrorBody::new(ErrorCode::Internal, "x")),
            outcome: Some(atelier_messages::job::JobOutcome::Answered),
        };
        apply(&mut failed, ended).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(failed.outcome, None, "only a succeeded run has an outcome");
        failed.cancel_requested = true;
        apply(
            &mut failed,
            Transition::Resume {
                budget: Budget::default(),
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((failed.state, failed.run), (JobState::Queued, 1));
        assert_eq!((failed.error, failed.cancel_requested), (None, false));
    }

    #[test]
    fn cancel_before_running_ends_the_job_with_user_canceled() {
        let mut job = record(JobState::Queued);
        apply(&mut job, Transition::CancelUnstarted).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(job.state, JobState::Cancelled);
        assert_eq!(job.error.map(|e| e.code), Some(ErrorCode::UserCanceled));
    }
}
