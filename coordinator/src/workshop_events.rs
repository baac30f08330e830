//! Workshop events from the outbox into the `ATELIER_WORKSHOP_EVENTS` stream.
//!
//! A workshop change writes the events that tell of it into the outbox tree in the same
//! transaction (see `workbench::tx`), so an event exists exactly when its change does, also
//! across a crash. This task publishes them in the order they were written, each with
//! `Nats-Msg-Id: wb-evt-<shard>-<id>` (a re-publish after a crash between JetStream's ack and
//! the removal is dropped by the stream's duplicate window; ids are counted per shard, so two
//! shards' events of one id are different messages) and its `Content-Type`, and removes
//! each once JetStream has acknowledged it. It wakes when the DraftStore finishes a change, and
//! every second otherwise.

use std::sync::Arc;
use std::time::Duration;

use atelier_messages::codec::CONTENT_TYPE_HEADER;
use atelier_messages::workshop::WorkshopEvent;
use atelier_messages::{Format, encode, subjects};
use tokio::sync::Notify;

use crate::error::CoordinatorError;
use crate::storage::{self, Storage, blocking, trees};

/// Events read from the outbox at a time.
const BATCH: usize = 256;
/// How often the outbox is looked at without a wake-up (and after a failed publish).
const IDLE: Duration = Duration::from_secs(1);

/// Publishes the outbox until the coordinator stops.
pub(crate) fn spawn(
    jetstream: async_nats::jetstream::Context,
    shard: u32,
    storage: Storage,
    wake: Arc<Notify>,
    format: Format,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(error) = drain(&jetstream, shard, &storage, format).await {
                tracing::warn!(%error, "workshop events not published yet; retrying");
            }
            let _ = tokio::time::timeout(IDLE, wake.notified()).await;
        }
    })
}

/// Publishes every event in the outbox, oldest first. The events a pass published are removed
/// with the next pass's reading, in one storage call (or at once when a publish fails, so that
/// none is published twice after a long outage outlasting the stream's duplicate window).
async fn drain(
    jetstream: &async_nats::jetstream::Context,
    shard: u32,
    storage: &Storage,
    format: Format,
) -> Result<(), String> {
    let mut published = Vec::new();
    loop {
        let reading = storage.clone();
        let done = std::mem::take(&mut published);
        let pending = blocking(move || {
            remove(&reading, &done)?;
            oldest(&reading)
        })
        .await
        .map_err(|error| error.to_string())?;
        if pending.is_empty() {
            return Ok(());
        }
        for (id, event) in pending {
            let sent = publish(jetstream, &format!("wb-evt-{shard}-{id}"), &event, format).await;
            if let Err(error) = sent {
                let removing = storage.clone();
                if let Err(unremoved) = blocking(move || remove(&removing, &published)).await {
                    tracing::warn!(%unremoved, "published workshop events left in the outbox");
                }
                return Err(error);
            }
            published.push(id);
        }
    }
}

fn oldest(storage: &Storage) -> Result<Vec<(u64, WorkshopEvent)>, CoordinatorError> {
    let outbox = storage.tree(trees::WORKSHOP_OUTBOX)?;
    let mut pending = Vec::new();
    for entry in outbox.iter().take(BATCH) {
        let (key, bytes) = entry?;
        let id = <[u8; 8]>::try_from(key.as_ref()).map(u64::from_be_bytes);
        let Ok(id) = id else {
            tracing::warn!("a malformed key in the workshop outbox; removed");
            outbox.remove(key)?;
            continue;
        };
        pending.push((id, storage::decode(&bytes)?));
    }
    Ok(pending)
}

fn remove(storage: &Storage, ids: &[u64]) -> Result<(), CoordinatorError> {
    if ids.is_empty() {
        return Ok(());
    }
    let outbox = storage.tree(trees::WORKSHOP_OUTBOX)?;
    for id in ids {
        outbox.remove(id.to_be_bytes())?;
    }
    Ok(())
}

async fn publish(
    jetstream: &async_nats::jetstream::Context,
    message_id: &str,
    event: &WorkshopEvent,
    format: Format,
) -> Result<(), String> {
    let subject = subjects::workshop::event(&event.workbench, event.kind.as_str());
    let payload = encode(event, format).map_err(|error| error.to_string())?;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", message_id);
    headers.insert(CONTENT_TYPE_HEADER, format.content_type());
    let ack = jetstream
        .publish_with_headers(subject, headers, payload.into())
        .await
        .map_err(|error| error.to_string())?;
    ack.await.map(|_| ()).map_err(|error| error.to_string())
}
