//! A batch's child jobs, reached through the [`FrontDoor`] as the intake and the public verbs
//! reach jobs: recorded in their workbench's shard (`RecordSubmission`, what the JOBS intake
//! does with a submission; a second one of the same job id changes nothing), followed from
//! their `finished` events, looked at and cancelled with the job verbs in their workbench's
//! shard. The front door answers in this process for a shard held here and forwards to the
//! shard's owner otherwise, so a batch's targets may live in any shard (docs/adr/0014) without
//! a round trip through NATS for those held here.

use atelier_messages::budget::Spent;
use atelier_messages::job::{
    CancelJob, EventKind, GetJob, JobEvent, JobOutcome, JobState, JobSubmit, JobView,
};
use atelier_messages::shard::RecordSubmission;
use atelier_messages::workshop::CheckMessage;
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION, decode, subjects};
use atelier_transport::headers::format_of;
use futures::{Stream, StreamExt};

use crate::error::unavailable;
use crate::front_door::FrontDoor;

/// A child's end, as its `finished` event or its record tells it.
#[derive(Debug, Clone)]
pub struct ChildEnd {
    pub job_id: String,
    pub state: JobState,
    pub error: Option<ErrorBody>,
    pub outcome: Option<JobOutcome>,
    /// What its model calls spent.
    pub spent: Spent,
}

impl ChildEnd {
    /// The end a record shows; `None` while the job has not ended.
    pub(crate) fn of(view: JobView) -> Option<Self> {
        view.state.is_terminal().then_some(Self {
            spent: Spent {
                tokens: view.prompt_tokens.saturating_add(view.completion_tokens),
                cost_usd: view.cost_usd,
            },
            job_id: view.job_id,
            state: view.state,
            error: view.error,
            outcome: view.outcome,
        })
    }
}

/// Reaches child jobs through the front door; follows their ends on NATS.
#[derive(Clone)]
pub struct Children {
    client: async_nats::Client,
    front: FrontDoor,
}

impl Children {
    pub(crate) fn new(client: async_nats::Client, front: FrontDoor) -> Self {
        Self { client, front }
    }

    /// Records a child in its workbench's shard, which starts it (or records it refused and
    /// announces its end); a child recorded before changes nothing. A workbench answering
    /// another job records nothing (`WORKBENCH_BUSY`). A shard with no owner now is not waited
    /// for (`SHARD_UNAVAILABLE`): the runner tries again at its next reconcile.
    pub(crate) async fn submit(&self, submit: JobSubmit) -> Result<(), ErrorBody> {
        let request = RecordSubmission {
            v: PROTOCOL_VERSION,
            submit,
            only_if_idle: true,
            refused: None,
        };
        self.front
            .to_workbench_now(&request.submit.workbench, &request)
            .await
            .map(|_| ())
    }

    /// The child's record, from its workbench's shard (waiting a while for a shard without an
    /// owner now); `None` when no job has that id there (yet).
    pub(crate) async fn get(
        &self,
        job_id: &str,
        workbench: &str,
    ) -> Result<Option<JobView>, ErrorBody> {
        let request = get_job(job_id);
        found(self.front.to_workbench(workbench, &request).await)
    }

    /// The child's end, when its record shows one; `SHARD_UNAVAILABLE` at once while its
    /// workbench's shard has no owner (the runner looks again at its next reconcile).
    pub(crate) async fn end_now(
        &self,
        job_id: &str,
        workbench: &str,
    ) -> Result<Option<ChildEnd>, ErrorBody> {
        let request = get_job(job_id);
        let view = found(self.front.to_workbench_now(workbench, &request).await)?;
        Ok(view.and_then(ChildEnd::of))
    }

    /// Whether the workbench is answering a job now (`WORKBENCH_BUSY`), read without writing
    /// anything; `SHARD_UNAVAILABLE` at once while its shard has no owner.
    pub(crate) async fn check(&self, workbench: &str) -> Result<(), ErrorBody> {
        let request = CheckMessage {
            v: PROTOCOL_VERSION,
            workbench: workbench.to_string(),
            continue_draft: true,
            model: None,
        };
        self.front
            .to_workbench_now(workbench, &request)
            .await
            .map(|_| ())
    }

    /// Asks the child's shard to cancel it (it ends at its next step boundary).
    pub(crate) async fn cancel(&self, job_id: &str, workbench: &str) -> Result<(), ErrorBody> {
        let request = CancelJob {
            v: PROTOCOL_VERSION,
            job_id: job_id.to_string(),
        };
        self.front
            .to_workbench(workbench, &request)
            .await
            .map(|_| ())
    }

    /// The ends of every job from now on, as their `finished` events arrive (a missed one is
    /// caught by looking at the record).
    pub(crate) async fn ends(&self) -> Result<impl Stream<Item = ChildEnd> + use<>, ErrorBody> {
        let subscriber = self
            .client
            .subscribe(subjects::EVENTS_FINISHED)
            .await
            .map_err(|error| unavailable("follow the jobs' ends", error))?;
        Ok(subscriber.filter_map(|message| async move {
            let format = format_of(message.headers.as_ref());
            let event = decode::<JobEvent>(&message.payload, format).ok()?;
            match event.kind {
                EventKind::JobFinished {
                    state,
                    error,
                    outcome,
                    spent,
                    ..
                } => Some(ChildEnd {
                    job_id: event.job_id,
                    state,
                    error,
                    outcome,
                    // An end announced without its spending (a job cancelled before it ran
                    // here) spent nothing in that run.
                    spent: spent.unwrap_or(Spent::NOTHING),
                }),
                _ => None,
            }
        }))
    }
}

fn get_job(job_id: &str) -> GetJob {
    GetJob {
        v: PROTOCOL_VERSION,
        job_id: job_id.to_string(),
    }
}

/// A job's record, or `None` for `NOT_FOUND`.
fn found(answer: Result<JobView, ErrorBody>) -> Result<Option<JobView>, ErrorBody> {
    match answer {
        Ok(view) => Ok(Some(view)),
        Err(error) if error.code == ErrorCode::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}
