//! NATS front ends: the store verbs (`atelier.store.*`) and the control plane (`atelier.ctl.*`).
//! Each request is decoded in the format it arrived in and answered in kind.

use std::future::Future;
use std::sync::Arc;

use atelier_messages::codec::CONTENT_TYPE_HEADER;
use atelier_messages::job::{
    ApproveCall, CancelJob, CoordinatorStats, GetJob, GetStats, JobState, JobView, ListJobs, Ping,
    Pong, ResumeJob,
};
use atelier_messages::store::{
    AddFiles, CreateWorkbench, DiffDraft, DiscardDraft, GetBlob, ListFiles, ListWorkbenches,
    PublishDraft, ReadFile, WriteDraft,
};
use atelier_messages::subjects::{ctl, store};
use atelier_messages::{ErrorBody, ErrorCode, Format, Reply, decode, encode_reply};
use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;

use crate::draft_store::{DraftStoreHandle, StoreCall};
use crate::error::CoordinatorError;
use crate::intake::JobStarter;
use crate::jobs::Jobs;
use crate::registry::Registry;

fn format_of(message: &async_nats::Message) -> Format {
    let content_type = message
        .headers
        .as_ref()
        .and_then(|headers| headers.get(CONTENT_TYPE_HEADER))
        .map(|value| value.as_str());
    Format::from_content_type(content_type)
}

/// Subscribes `subject` in `queue` and answers every request with `handler`, one task each.
pub(crate) async fn serve<H, F, T>(
    client: async_nats::Client,
    subject: &'static str,
    queue: &'static str,
    handler: H,
) -> Result<tokio::task::JoinHandle<()>, CoordinatorError>
where
    H: Fn(String, Bytes, Format) -> F + Send + Sync + 'static,
    F: Future<Output = Result<T, ErrorBody>> + Send + 'static,
    T: Serialize + Send + 'static,
{
    let mut subscriber = client
        .queue_subscribe(subject, queue.to_string())
        .await
        .map_err(|error| CoordinatorError::Nats(error.to_string()))?;
    let handler = Arc::new(handler);
    Ok(tokio::spawn(async move {
        while let Some(message) = subscriber.next().await {
            let Some(reply_to) = message.reply.clone() else {
                tracing::debug!(subject = %message.subject, "request without reply subject ignored");
                continue;
            };
            let handler = Arc::clone(&handler);
            let client = client.clone();
            tokio::spawn(async move {
                let format = format_of(&message);
                let result = handler(message.subject.to_string(), message.payload, format).await;
                if let Err(error) = &result {
                    tracing::debug!(subject = %message.subject, code = %error.code, "request refused");
                }
                let body = encode_reply(&Reply::from_result(result), format);
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(CONTENT_TYPE_HEADER, format.content_type());
                if let Err(error) = client
                    .publish_with_headers(reply_to, headers, body.into())
                    .await
                {
                    tracing::warn!(%error, "could not send reply");
                }
            });
        }
    }))
}

/// Decodes a store request by its subject.
pub(crate) fn store_call(
    subject: &str,
    payload: &[u8],
    format: Format,
) -> Result<StoreCall, ErrorBody> {
    Ok(match subject {
        store::CREATE => {
            let request: CreateWorkbench = decode(payload, format)?;
            StoreCall::Create {
                workbench: request.workbench,
            }
        }
        store::LIST_WORKBENCHES => {
            let _: ListWorkbenches = decode(payload, format)?;
            StoreCall::ListWorkbenches
        }
        store::ADD => {
            let request: AddFiles = decode(payload, format)?;
            StoreCall::Add {
                workbench: request.workbench,
                files: request.files,
            }
        }
        store::LS => {
            let request: ListFiles = decode(payload, format)?;
            StoreCall::List {
                workbench: request.workbench,
                view: request.view,
            }
        }
        store::CAT => {
            let request: ReadFile = decode(payload, format)?;
            StoreCall::Read {
                workbench: request.workbench,
                path: request.path,
                view: request.view,
            }
        }
        store::DIFF => {
            let DiffDraft { workbench, .. } = decode(payload, format)?;
            StoreCall::Diff { workbench }
        }
        store::PUBLISH => {
            let PublishDraft { workbench, .. } = decode(payload, format)?;
            StoreCall::Publish { workbench }
        }
        store::DISCARD => {
            let DiscardDraft { workbench, .. } = decode(payload, format)?;
            StoreCall::Discard { workbench }
        }
        store::WRITE => {
            let request: WriteDraft = decode(payload, format)?;
            StoreCall::Write {
                workbench: request.workbench,
                call_id: request.call_id,
                files: request.files,
                delete: request.delete,
            }
        }
        store::BLOB => {
            let request: GetBlob = decode(payload, format)?;
            StoreCall::Blob {
                digest: request.digest,
            }
        }
        other => {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "unknown store verb `{other}`; known: {}",
                    store::ALL.join(", ")
                ),
            ));
        }
    })
}

/// Serves the store verbs through the DraftStore actor.
pub(crate) async fn serve_store(
    client: async_nats::Client,
    store_handle: DraftStoreHandle,
) -> Result<tokio::task::JoinHandle<()>, CoordinatorError> {
    serve(
        client,
        store::WILDCARD,
        store::QUEUE,
        move |subject, payload, format| {
            let store_handle = store_handle.clone();
            async move {
                let call = store_call(&subject, &payload, format)?;
                store_handle.call(call).await
            }
        },
    )
    .await
}

/// Answers of the control plane, serialized as the inner value.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum ControlAnswer {
    Jobs(Vec<JobView>),
    Job(Box<JobView>),
    Pong(Pong),
    Stats(CoordinatorStats),
}

/// What the control plane acts on.
#[derive(Clone)]
pub(crate) struct Control {
    pub jobs: Jobs,
    pub coordinator_id: String,
    pub registry: Registry,
    pub starter: JobStarter,
}

/// Serves `atelier.ctl.*`.
pub(crate) async fn serve_control(
    client: async_nats::Client,
    control: Control,
) -> Result<tokio::task::JoinHandle<()>, CoordinatorError> {
    serve(
        client,
        "atelier.ctl.*",
        ctl::QUEUE,
        move |subject, payload, format| {
            let control = control.clone();
            async move { control.handle(&subject, &payload, format).await }
        },
    )
    .await
}

impl Control {
    async fn handle(
        &self,
        subject: &str,
        payload: &[u8],
        format: Format,
    ) -> Result<ControlAnswer, ErrorBody> {
        match subject {
            ctl::JOBS => {
                let request: ListJobs = decode(payload, format)?;
                let jobs = self.jobs.clone();
                let list = blocking(move || jobs.list(request.state, request.workbench.as_deref()))
                    .await?;
                Ok(ControlAnswer::Jobs(list))
            }
            ctl::JOB => {
                let request: GetJob = decode(payload, format)?;
                self.view(&request.job_id)
                    .await
                    .map(|view| ControlAnswer::Job(Box::new(view)))
            }
            ctl::PING => {
                let _: Ping = decode(payload, format)?;
                Ok(ControlAnswer::Pong(Pong {
                    coordinator: self.coordinator_id.clone(),
                    protocol_version: atelier_messages::PROTOCOL_VERSION,
                    running_jobs: self.registry.running(),
                }))
            }
            ctl::STATS => {
                let _: GetStats = decode(payload, format)?;
                let jobs = self.jobs.clone();
                let coordinator = self.coordinator_id.clone();
                Ok(ControlAnswer::Stats(
                    blocking(move || jobs.stats(&coordinator)).await?,
                ))
            }
            ctl::CANCEL => {
                let request: CancelJob = decode(payload, format)?;
                self.cancel(&request.job_id).await
            }
            ctl::APPROVE => {
                let request: ApproveCall = decode(payload, format)?;
                self.approve(request).await
            }
            ctl::RESUME => {
                let request: ResumeJob = decode(payload, format)?;
                self.resume(&request.job_id).await
            }
            other => Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("unknown control verb `{other}`"),
            )),
        }
    }

    async fn view(&self, job_id: &str) -> Result<JobView, ErrorBody> {
        let jobs = self.jobs.clone();
        let id = job_id.to_string();
        blocking(move || jobs.view(&id)).await?.ok_or_else(|| {
            ErrorBody::new(
                ErrorCode::NotFound,
                format!("no job `{job_id}`; list jobs with `atelier jobs`"),
            )
        })
    }

    /// Marks the job cancelled; a running job stops at its next step boundary.
    async fn cancel(&self, job_id: &str) -> Result<ControlAnswer, ErrorBody> {
        let jobs = self.jobs.clone();
        let id = job_id.to_string();
        blocking(move || {
            jobs.update(&id, |record| {
                if record.state.is_terminal() {
                    return Err(ErrorBody::new(
                        ErrorCode::ValidationFailed,
                        format!(
                            "job `{}` already finished ({})",
                            record.job_id, record.state
                        ),
                    ));
                }
                record.cancel_requested = true;
                Ok(())
            })
        })
        .await?;
        match self.registry.get(job_id) {
            Some(control) => control.cancel(),
            None => {
                let jobs = self.jobs.clone();
                let id = job_id.to_string();
                let error = ErrorBody::new(
                    ErrorCode::UserCanceled,
                    "the job was cancelled before it ran",
                );
                blocking(move || jobs.set_state(&id, JobState::Cancelled, Some(error))).await?;
            }
        }
        self.view(job_id)
            .await
            .map(|view| ControlAnswer::Job(Box::new(view)))
    }

    /// Records the decision on the job's pending destructive call and wakes the job.
    async fn approve(&self, request: ApproveCall) -> Result<ControlAnswer, ErrorBody> {
        let view = self.view(&request.job_id).await?;
        let Some(pending) = view
            .pending_approval
            .filter(|_| view.state == JobState::AwaitingApproval)
        else {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "job `{}` is {} and has no call awaiting approval",
                    request.job_id, view.state
                ),
            ));
        };
        let jobs = self.jobs.clone();
        let job_id = request.job_id.clone();
        let key = format!("approval/{}", pending.call_id);
        let approved = !request.reject;
        blocking(move || jobs.record(&job_id, &key, &serde_json::Value::Bool(approved))).await?;
        if let Some(control) = self.registry.get(&request.job_id) {
            control.decided.notify_waiters();
        }
        tracing::info!(job_id = %request.job_id, call_id = %pending.call_id, approved, "approval decided");
        self.view(&request.job_id)
            .await
            .map(|view| ControlAnswer::Job(Box::new(view)))
    }

    /// Continues a failed or cancelled job from its journal.
    async fn resume(&self, job_id: &str) -> Result<ControlAnswer, ErrorBody> {
        let jobs = self.jobs.clone();
        let id = job_id.to_string();
        let record = blocking(move || {
            jobs.update(&id, |record| {
                if !matches!(record.state, JobState::Failed | JobState::Cancelled) {
                    return Err(ErrorBody::new(
                        ErrorCode::ValidationFailed,
                        format!(
                            "job `{}` is {}; only failed or cancelled jobs can be resumed",
                            record.job_id, record.state
                        ),
                    ));
                }
                record.state = JobState::Queued;
                record.error = None;
                record.cancel_requested = false;
                Ok(())
            })
        })
        .await?;
        self.starter.start(record).await.map_err(ErrorBody::from)?;
        self.view(job_id)
            .await
            .map(|view| ControlAnswer::Job(Box::new(view)))
    }
}

/// Runs blocking storage work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, CoordinatorError> + Send + 'static,
) -> Result<T, ErrorBody> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|join| ErrorBody::new(ErrorCode::Internal, join.to_string()))?
        .map_err(ErrorBody::from)
}
