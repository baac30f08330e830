//! A batch's child jobs, reached the way any client reaches jobs: submitted to the JOBS intake
//! (message id = job id, so a second submission of one child is dropped), followed from their
//! `finished` events, looked at and cancelled with the `atelier.ctl.*` verbs. Nothing here
//! assumes a child runs in this process, so a batch's targets may live in any shard
//! (docs/adr/0014).

use async_nats::HeaderMap;
use atelier_messages::job::{
    CancelJob, EventKind, GetJob, JobEvent, JobOutcome, JobState, JobSubmit, JobView,
};
use atelier_messages::workshop::CheckMessage;
use atelier_messages::{ErrorBody, ErrorCode, Format, PROTOCOL_VERSION, decode, encode, subjects};
use atelier_transport::Policy;
use atelier_transport::headers::format_of;
use futures::{Stream, StreamExt};

/// How long one look at a child may take before the runner tries again at its next reconcile.
const LOOK: Policy = Policy::once(std::time::Duration::from_secs(10));

/// A child's end, as its `finished` event or its record tells it.
#[derive(Debug, Clone)]
pub struct ChildEnd {
    pub job_id: String,
    pub state: JobState,
    pub error: Option<ErrorBody>,
    pub outcome: Option<JobOutcome>,
}

impl ChildEnd {
    /// The end a record shows; `None` while the job has not ended.
    fn of(view: JobView) -> Option<Self> {
        view.state.is_terminal().then_some(Self {
            job_id: view.job_id,
            state: view.state,
            error: view.error,
            outcome: view.outcome,
        })
    }
}

/// Reaches child jobs over NATS.
#[derive(Clone)]
pub struct Children {
    client: async_nats::Client,
    jetstream: async_nats::jetstream::Context,
}

fn unavailable(what: &str, error: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ToolWorkerUnavailable,
        format!("could not {what}: {error}"),
    )
}

impl Children {
    pub(crate) fn new(
        client: async_nats::Client,
        jetstream: async_nats::jetstream::Context,
    ) -> Self {
        Self { client, jetstream }
    }

    /// Submits a child; a second submission of the same job id is dropped by the stream (or,
    /// later, found already recorded by the intake).
    pub(crate) async fn submit(&self, submit: &JobSubmit) -> Result<(), ErrorBody> {
        let payload = encode(submit, Format::MessagePack)?;
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", submit.job_id.as_str());
        self.jetstream
            .publish_with_headers(subjects::JOB_SUBMIT, headers, payload.into())
            .await
            .map_err(|error| unavailable("submit a child job", error))?
            .await
            .map_err(|error| unavailable("submit a child job", error))?;
        Ok(())
    }

    /// The child's record; `None` when no job has that id (yet).
    pub(crate) async fn get(&self, job_id: &str) -> Result<Option<JobView>, ErrorBody> {
        let request = GetJob {
            v: PROTOCOL_VERSION,
            job_id: job_id.to_string(),
        };
        match atelier_transport::request(&self.client, &request, LOOK).await {
            Ok(view) => Ok(Some(view)),
            Err(error) if error.code == ErrorCode::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The child's end, when its record shows one.
    pub(crate) async fn end(&self, job_id: &str) -> Result<Option<ChildEnd>, ErrorBody> {
        Ok(self.get(job_id).await?.and_then(ChildEnd::of))
    }

    /// Whether the workbench takes a message now (`WORKBENCH_BUSY` while a job runs on it).
    pub(crate) async fn check(
        &self,
        workbench: &str,
        continue_draft: bool,
    ) -> Result<(), ErrorBody> {
        let request = CheckMessage {
            v: PROTOCOL_VERSION,
            workbench: workbench.to_string(),
            continue_draft,
            model: None,
        };
        atelier_transport::request(&self.client, &request, LOOK)
            .await
            .map(|_| ())
    }

    pub(crate) async fn cancel(&self, job_id: &str) -> Result<(), ErrorBody> {
        let request = CancelJob {
            v: PROTOCOL_VERSION,
            job_id: job_id.to_string(),
        };
        atelier_transport::request(&self.client, &request, LOOK)
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
                    ..
                } => Some(ChildEnd {
                    job_id: event.job_id,
                    state,
                    error,
                    outcome,
                }),
                _ => None,
            }
        }))
    }
}
