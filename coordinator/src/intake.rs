//! Job intake: the JetStream work queue of submitted jobs.
//!
//! A job is recorded in sled (fsynced) before its message is acknowledged, so a crash before
//! the record leaves the message to be redelivered, and a duplicate submit is a no-op. The
//! record goes with the user message in the workbench's conversation, in one transaction of the
//! DraftStore; a message the workbench cannot take now (a draft exists without
//! `continue_draft`: `DRAFT_EXISTS`; a job runs: `WORKBENCH_BUSY`) is recorded as a failed job
//! with that code and announced as its `job_finished` event. So is a submission refused as it
//! is read (nested too deep, a message over the limit: `VALIDATION_FAILED`) when its job id and
//! workbench can be read ([`salvage`]); one without them is logged and counted
//! ([`unreadable_submissions`]), then dropped.

mod salvage;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer, stream};
use atelier_messages::job::{JobSubmit, validate_job_id};
use atelier_messages::shard::RecordSubmission;
use atelier_messages::{ErrorBody, ErrorCode, subjects};
use atelier_transport::failpoint;
use atelier_transport::headers::format_of;
use futures::StreamExt;

use crate::JobDefaults;
use crate::error::CoordinatorError;
use crate::front_door::FrontDoor;
use crate::jobs::JobRecord;
use crate::orchestrator::Orchestrators;
use crate::workbench::Accepted;
use salvage::Submission;

/// Creates the JOBS, EVENTS, workshop events and batch events streams when missing, each with
/// `replicas` copies (a replicated deployment's count, so that losing a server loses none of
/// them); a stream made before with fewer is raised at start ([`crate::copies`]).
///
/// The three event streams are notifications of what records hold (docs/adr/0015): with one
/// copy they are written without waiting for the disk (`persist_mode: async`), so a server
/// that fsyncs every write for the changelog and the submissions (`sync_interval: always`)
/// does not also fsync each event. A server crash can then lose the last events it
/// acknowledged, and every reader falls back to the records. With more copies the server
/// refuses that mode; those streams are replicated and written as the server syncs.
pub async fn ensure_streams(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<(), CoordinatorError> {
    let jobs = stream::Config {
        name: subjects::JOBS_STREAM.to_string(),
        subjects: vec![subjects::JOB_SUBMIT.to_string()],
        retention: stream::RetentionPolicy::WorkQueue,
        duplicate_window: Duration::from_secs(600),
        storage: stream::StorageType::File,
        ..Default::default()
    };
    // The window in which a re-announced `finished` event (same run) is dropped.
    let events = stream::Config {
        duplicate_window: Duration::from_secs(600),
        ..event_stream(
            subjects::EVENTS_STREAM,
            subjects::EVENTS_ALL,
            1 << 30,
            replicas,
        )
    };
    // The window in which a workshop event published again after a crash is dropped.
    let workshop = stream::Config {
        duplicate_window: Duration::from_secs(600),
        ..event_stream(
            subjects::workshop::EVENTS_STREAM,
            subjects::workshop::EVENTS_ALL,
            256 << 20,
            replicas,
        )
    };
    let batches = event_stream(
        subjects::batch::EVENTS_STREAM,
        subjects::batch::EVENTS_ALL,
        256 << 20,
        replicas,
    );
    for config in [jobs, events, workshop, batches] {
        js.get_or_create_stream(stream::Config {
            num_replicas: replicas,
            ..config
        })
        .await
        .map_err(|error| CoordinatorError::Nats(error.to_string()))?;
    }
    Ok(())
}

/// An event stream kept for seven days, up to `max_bytes`, on disk; with one copy, written
/// without waiting for the disk.
fn event_stream(name: &str, subjects: &str, max_bytes: i64, replicas: usize) -> stream::Config {
    stream::Config {
        name: name.to_string(),
        subjects: vec![subjects.to_string()],
        retention: stream::RetentionPolicy::Limits,
        max_age: Duration::from_secs(7 * 24 * 3600),
        max_bytes,
        storage: stream::StorageType::File,
        persist_mode: (replicas <= 1).then_some(stream::PersistenceMode::Async),
        ..Default::default()
    }
}

/// How long a submission delivered to a coordinator waits for its acknowledgement before it is
/// delivered again: recording takes milliseconds, so this is mostly how long submissions taken
/// by a coordinator that was killed wait for another (a repeat is found recorded and changes
/// nothing).
const INTAKE_ACK_WAIT: Duration = Duration::from_secs(5);

/// Consumes submitted jobs, handing each to its workbench's shard ([`record`] there) and
/// acknowledging it once recorded; attaches to the stream (again after NATS outages, or while
/// it elects a leader) every second until it can.
pub fn run_intake(js: jetstream::Context, front: FrontDoor) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let mut messages = match attach(&js).await {
                Ok(messages) => messages,
                Err(error) => {
                    tracing::warn!(%error, "cannot attach to the job stream yet");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            while let Some(next) = messages.next().await {
                match next {
                    Ok(message) => hand_over(&front, message).await,
                    Err(error) => tracing::warn!(%error, "job intake stream error"),
                }
            }
            tracing::warn!("job intake stream ended; re-attaching");
        }
    })
}

async fn attach(js: &jetstream::Context) -> Result<consumer::pull::Stream, CoordinatorError> {
    let nats = |error: String| CoordinatorError::Nats(error);
    let stream = js
        .get_stream(subjects::JOBS_STREAM)
        .await
        .map_err(|e| nats(e.to_string()))?;
    // Created or updated: a deployment started before keeps its consumer with today's settings.
    let consumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(subjects::JOBS_CONSUMER.to_string()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: INTAKE_ACK_WAIT,
            ..Default::default()
        })
        .await
        .map_err(|e| nats(e.to_string()))?;
    consumer.messages().await.map_err(|e| nats(e.to_string()))
}

/// How long a submission its shard could not record waits before it is delivered again.
const REDELIVERY_DELAY: Duration = Duration::from_secs(1);

/// Submissions dropped since the process started because not even their job id and workbench
/// could be read.
static UNREADABLE: AtomicU64 = AtomicU64::new(0);

/// How many submissions this process dropped because not even their job id and workbench could
/// be read (each is also logged).
pub fn unreadable_submissions() -> u64 {
    UNREADABLE.load(Ordering::Relaxed)
}

/// Hands a submission to its shard and acknowledges it once recorded there (a refused one as a
/// failed job); one whose job id or workbench cannot be read is logged, counted and dropped, one
/// its shard could not record now is delivered again. A shard without an owner is not waited
/// for: submissions are handed over one at a time, so waiting would hold up every other shard's
/// behind it; the submission comes back after [`REDELIVERY_DELAY`] instead, until an owner
/// records it.
async fn hand_over(front: &FrontDoor, message: jetstream::Message) {
    let format = format_of(message.headers.as_ref());
    let (submit, refused) = match salvage::read(&message.payload, format) {
        Submission::Valid(submit) => (submit, None),
        Submission::Refused(submit, error) => {
            tracing::warn!(code = %error.code, %error, job_id = %submit.job_id, "refused job submission; recording it as failed");
            (*submit, Some(error))
        }
        Submission::Unreadable(error) => {
            let dropped = UNREADABLE.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(code = %error.code, %error, unreadable_total = dropped, "dropped a job submission whose job id or workbench cannot be read");
            let _ = message.ack_with(AckKind::Term).await;
            return;
        }
    };
    let job_id = submit.job_id.clone();
    let request = RecordSubmission {
        v: atelier_messages::PROTOCOL_VERSION,
        submit,
        only_if_idle: false,
        refused,
    };
    let recorded = front
        .to_workbench_now(&request.submit.workbench, &request)
        .await;
    if let Err(error) = recorded {
        match error.code {
            ErrorCode::ShardUnavailable => {
                tracing::debug!(%error, %job_id, "no owner for the job's shard now; delivered again later");
            }
            _ => {
                tracing::error!(%error, %job_id, "could not record job; leaving it for redelivery")
            }
        }
        let _ = message.ack_with(AckKind::Nak(Some(REDELIVERY_DELAY))).await;
        return;
    }
    if let Err(error) = message.double_ack().await {
        tracing::warn!(%error, %job_id, "job ack not confirmed; a redelivery will be a no-op");
    }
}

/// Records a submission in its shard (with its user message, or as a refused job) and starts
/// it; a submission recorded before changes nothing.
pub(crate) async fn record(
    orchestrators: &Orchestrators,
    defaults: &JobDefaults,
    request: RecordSubmission,
) -> Result<(), ErrorBody> {
    let store = orchestrators.store().clone();
    let RecordSubmission {
        submit,
        only_if_idle,
        refused,
        ..
    } = request;
    if let Some(error) = refused {
        return record_refused(orchestrators, &submit, error).await;
    }
    let accepted = store
        .accept_message(submit, defaults.clone(), only_if_idle)
        .await?;
    let record = match accepted {
        Accepted::New(record) | Accepted::Existing(record) => record,
        Accepted::Refused(record) => {
            tracing::info!(job_id = %record.job_id, code = ?record.error.as_ref().map(|e| e.code), "refused job submission");
            record
        }
    };
    failpoint::hit("after_submit_record");
    if record.state.is_terminal() && record.error.is_some() && record.message_id.is_none() {
        announce_refusal(orchestrators, &record).await;
    }
    let orchestrators = orchestrators.clone();
    tokio::spawn(async move {
        if let Err(error) = orchestrators.start(record).await {
            tracing::error!(%error, "could not start job");
        }
    });
    Ok(())
}

/// Records a submission the intake refused as it read it as a failed job (never run), unless
/// its id is recorded already, and announces its end.
async fn record_refused(
    orchestrators: &Orchestrators,
    submit: &JobSubmit,
    error: ErrorBody,
) -> Result<(), ErrorBody> {
    validate_job_id(&submit.job_id)?;
    let refused = JobRecord::refused(submit, error);
    let record = orchestrators
        .jobs()
        .commit(move |jobs| jobs.record_refused(&refused))
        .await?;
    tracing::info!(job_id = %record.job_id, code = ?record.error.as_ref().map(|e| e.code), "recorded a refused job submission");
    if record.state.is_terminal() && record.error.is_some() && record.message_id.is_none() {
        announce_refusal(orchestrators, &record).await;
    }
    Ok(())
}

/// Tells the submitter of a refused job why, as the job's `job_finished` event (de-duplicated,
/// so a redelivered refusal announces once).
async fn announce_refusal(orchestrators: &Orchestrators, record: &JobRecord) {
    crate::events::announce(
        orchestrators.jetstream(),
        &record.job_id,
        orchestrators.events_format(),
        record.end_event(),
    )
    .await;
}
