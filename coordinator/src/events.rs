//! Job events into the EVENTS stream, in order, without blocking the emitter.

use atelier_messages::job::{EventKind, JobEvent};
use atelier_messages::{Format, PROTOCOL_VERSION, encode, now_ms, subjects};
use tokio::sync::mpsc;

/// Publishes one job's events in emission order from a background task.
#[derive(Clone)]
pub struct EventSink {
    job_id: String,
    sender: mpsc::UnboundedSender<JobEvent>,
}

impl EventSink {
    /// Starts the publishing task for `job_id`; it ends when every sink clone is dropped.
    pub fn start(
        jetstream: async_nats::jetstream::Context,
        job_id: &str,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (sender, mut receiver) = mpsc::unbounded_channel::<JobEvent>();
        let task = tokio::spawn(async move {
            while let Some(event) = receiver.recv().await {
                publish(&jetstream, &event).await;
            }
        });
        (
            Self {
                job_id: job_id.to_string(),
                sender,
            },
            task,
        )
    }

    pub fn emit(&self, kind: EventKind) {
        let event = JobEvent {
            v: PROTOCOL_VERSION,
            job_id: self.job_id.clone(),
            at_ms: now_ms(),
            kind,
        };
        if self.sender.send(event).is_err() {
            tracing::warn!(job_id = %self.job_id, "event publisher stopped; event dropped");
        }
    }
}

async fn publish(jetstream: &async_nats::jetstream::Context, event: &JobEvent) {
    let subject = subjects::event(&event.job_id, event.kind.subject_token());
    let Ok(payload) = encode(event, Format::MessagePack) else {
        tracing::warn!(%subject, "event could not be encoded");
        return;
    };
    match jetstream.publish(subject.clone(), payload.into()).await {
        Ok(ack) => {
            if let Err(error) = ack.await {
                tracing::warn!(%subject, %error, "event not acknowledged by JetStream");
            }
        }
        Err(error) => tracing::warn!(%subject, %error, "event publish failed"),
    }
}
