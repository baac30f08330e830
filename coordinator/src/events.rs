//! Job events into the EVENTS stream, in order, without blocking the emitter.
//!
//! Events are notifications of what the job's record holds (docs/adr/0015): those a reader acts
//! on — a run's end, an approval asked for — are published with the stream's acknowledgement
//! and retried across NATS outages; the others (phases, items, tool calls, model turns,
//! streamed text) are sent on the connection, in the same order, without waiting for one. The
//! client holds them while it reconnects; one in flight when a connection breaks is lost, and
//! readers that must not miss an end look at the record when the events go quiet.
//!
//! The queue between the job and its publisher is bounded where it can grow: while NATS is
//! slow or away, streamed text (`assistant_delta`) beyond [`MAX_PENDING`] waiting events is
//! dropped (the summary itself is in the job record); every other event — phases, items, tool
//! calls, approvals, the end — is kept, and those are bounded by the job's steps.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use atelier_messages::job::{EventKind, JobEvent};
use atelier_messages::{Format, PROTOCOL_VERSION, encode, now_ms, subjects};
use tokio::sync::mpsc;

/// Events waiting to be published beyond which streamed text is dropped.
pub const MAX_PENDING: usize = 1024;

/// Publishes one job's events in emission order from a background task.
#[derive(Clone)]
pub struct EventSink {
    job_id: String,
    sender: mpsc::UnboundedSender<JobEvent>,
    pending: Arc<AtomicUsize>,
}

impl EventSink {
    /// Starts the publishing task for `job_id`; it ends when every sink clone is dropped.
    /// Events are encoded in `format`, which each message also states in `Content-Type`.
    pub fn start(
        jetstream: async_nats::jetstream::Context,
        job_id: &str,
        format: Format,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (sender, mut receiver) = mpsc::unbounded_channel::<JobEvent>();
        let pending = Arc::new(AtomicUsize::new(0));
        let published = Arc::clone(&pending);
        let task = tokio::spawn(async move {
            while let Some(event) = receiver.recv().await {
                publish(&jetstream, &event, format).await;
                published.fetch_sub(1, Ordering::Relaxed);
            }
        });
        (
            Self {
                job_id: job_id.to_string(),
                sender,
                pending,
            },
            task,
        )
    }

    pub fn emit(&self, kind: EventKind) {
        let backlog = self.pending.load(Ordering::Relaxed);
        if backlog >= MAX_PENDING && matches!(kind, EventKind::AssistantDelta { .. }) {
            tracing::debug!(job_id = %self.job_id, backlog, "event backlog full; streamed text dropped");
            return;
        }
        self.pending.fetch_add(1, Ordering::Relaxed);
        let event = JobEvent {
            v: PROTOCOL_VERSION,
            job_id: self.job_id.clone(),
            at_ms: now_ms(),
            kind,
        };
        if self.sender.send(event).is_err() {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(job_id = %self.job_id, "event publisher stopped; event dropped");
        }
    }
}

/// Publishes one event of a job no run is emitting for (a refused submission's end, the end of
/// a job cancelled before it started) and waits until it is published.
pub async fn announce(
    jetstream: &async_nats::jetstream::Context,
    job_id: &str,
    format: Format,
    kind: EventKind,
) {
    let (events, publisher) = EventSink::start(jetstream.clone(), job_id, format);
    events.emit(kind);
    drop(events);
    let _ = publisher.await;
}

/// Tries to publish an event for this long across NATS outages before giving up on it.
const PUBLISH_PATIENCE: Duration = Duration::from_secs(60);

async fn publish(jetstream: &async_nats::jetstream::Context, event: &JobEvent, format: Format) {
    let subject = subjects::event(&event.job_id, event.kind.subject_token());
    let Ok(payload) = encode(event, format) else {
        tracing::warn!(%subject, "event could not be encoded");
        return;
    };
    let payload = bytes::Bytes::from(payload);
    let deadline = Instant::now() + PUBLISH_PATIENCE;
    let mut delay = Duration::from_millis(100);
    loop {
        match try_publish(jetstream, &subject, event, format, payload.clone()).await {
            Ok(()) => return,
            Err(error) if Instant::now() < deadline => {
                tracing::debug!(%subject, %error, "event publish failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(error) => {
                tracing::warn!(%subject, %error, "event dropped after retrying");
                return;
            }
        }
    }
}

/// Whether a reader acts on the event, so it is published with the stream's acknowledgement.
fn acknowledged(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::JobFinished { .. } | EventKind::ApprovalRequested { .. }
    )
}

async fn try_publish(
    jetstream: &async_nats::jetstream::Context,
    subject: &str,
    event: &JobEvent,
    format: Format,
    payload: bytes::Bytes,
) -> Result<(), String> {
    let mut headers = atelier_transport::headers::with_format(format);
    if !acknowledged(&event.kind) {
        return jetstream
            .client()
            .publish_with_headers(subject.to_string(), headers, payload)
            .await
            .map_err(|error| error.to_string());
    }
    // A run's end is published at least once; the stream's duplicate window keeps one copy,
    // and a resumed job's next run announces its own.
    if let EventKind::JobFinished { run, .. } = &event.kind {
        headers.insert(
            "Nats-Msg-Id",
            format!("{}.finished.{run}", event.job_id).as_str(),
        );
    }
    let ack = jetstream
        .publish_with_headers(subject.to_string(), headers, payload)
        .await
        .map_err(|error| error.to_string())?;
    ack.await.map(|_| ()).map_err(|error| error.to_string())
}
