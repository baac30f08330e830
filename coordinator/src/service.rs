//! NATS front ends: the store verbs (`atelier.store.*`) and the control plane (`atelier.ctl.*`).
//! Each request is decoded in the format it arrived in and answered in kind.

use std::future::Future;
use std::sync::Arc;

use atelier_messages::codec::CONTENT_TYPE_HEADER;
use atelier_messages::job::{GetJob, ListJobs, Ping, Pong};
use atelier_messages::store::{
    AddFiles, CreateWorkbench, DraftAction, GetBlob, ListFiles, ListWorkbenches, ReadFile,
    WriteDraft,
};
use atelier_messages::subjects::{ctl, store};
use atelier_messages::{ErrorBody, ErrorCode, Format, Reply, decode, encode_reply};
use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;

use crate::draft_store::{DraftStoreHandle, StoreCall};
use crate::error::CoordinatorError;
use crate::jobs::Jobs;

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
        store::DIFF | store::PUBLISH | store::DISCARD => {
            let DraftAction { workbench, .. } = decode(payload, format)?;
            match subject {
                store::DIFF => StoreCall::Diff { workbench },
                store::PUBLISH => StoreCall::Publish { workbench },
                _ => StoreCall::Discard { workbench },
            }
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
    Jobs(Vec<atelier_messages::job::JobView>),
    Job(Box<atelier_messages::job::JobView>),
    Pong(Pong),
}

/// Serves `atelier.ctl.*`.
pub(crate) async fn serve_control(
    client: async_nats::Client,
    jobs: Jobs,
    coordinator_id: String,
    running: Arc<std::sync::atomic::AtomicU64>,
) -> Result<tokio::task::JoinHandle<()>, CoordinatorError> {
    serve(
        client,
        "atelier.ctl.*",
        ctl::QUEUE,
        move |subject, payload, format| {
            let jobs = jobs.clone();
            let coordinator_id = coordinator_id.clone();
            let running = Arc::clone(&running);
            async move {
                match subject.as_str() {
                    ctl::JOBS => {
                        let request: ListJobs = decode(&payload, format)?;
                        let list = blocking(move || {
                            jobs.list(request.state, request.workbench.as_deref())
                        })
                        .await?;
                        Ok(ControlAnswer::Jobs(list))
                    }
                    ctl::JOB => {
                        let request: GetJob = decode(&payload, format)?;
                        let job_id = request.job_id.clone();
                        let view = blocking(move || jobs.view(&request.job_id)).await?;
                        view.map(|view| ControlAnswer::Job(Box::new(view)))
                            .ok_or_else(|| {
                                ErrorBody::new(
                                    ErrorCode::NotFound,
                                    format!("no job `{job_id}`; list jobs with `atelier jobs`"),
                                )
                            })
                    }
                    ctl::PING => {
                        let _: Ping = decode(&payload, format)?;
                        Ok(ControlAnswer::Pong(Pong {
                            coordinator: coordinator_id,
                            protocol_version: atelier_messages::PROTOCOL_VERSION,
                            running_jobs: running.load(std::sync::atomic::Ordering::Relaxed),
                        }))
                    }
                    other => Err(ErrorBody::new(
                        ErrorCode::ValidationFailed,
                        format!("unknown control verb `{other}`"),
                    )),
                }
            }
        },
    )
    .await
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
