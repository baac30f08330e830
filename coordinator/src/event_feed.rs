//! `atelier.ctl.events`: the event streams read a page at a time for those who have no
//! JetStream rights (clients, docs/adr/0016). A page is read with the stream's own next-by-
//! subject lookup from the sequence asked; when nothing is there yet the request waits on the
//! stream's subjects for the next event, up to the time it asked.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use atelier_messages::feed::{EventPage, MAX_WAIT_MS, ReadEvents, StoredEvent};
use atelier_messages::{ErrorBody, ErrorCode, decode};
use atelier_transport::headers::format_of;
use futures::StreamExt;

fn unavailable(what: &str, error: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Internal,
        format!("cannot read the events ({what}): {error}"),
    )
}

/// The page `request` asks for, waiting for its first event when there is none yet.
pub(crate) async fn read(
    client: &async_nats::Client,
    request: ReadEvents,
) -> Result<EventPage, ErrorBody> {
    let filter = request.filter()?;
    let js = jetstream::new(client.clone());
    let page = scan(&js, &request, &filter, request.after).await?;
    if !page.events.is_empty() || request.wait_ms == 0 {
        return Ok(page);
    }
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(request.wait_ms.min(MAX_WAIT_MS));
    let mut arrivals = client
        .subscribe(filter.clone())
        .await
        .map_err(|error| unavailable("subscribe", error))?;
    client
        .flush()
        .await
        .map_err(|error| unavailable("flush", error))?;
    // What came before the subscription took effect is in the stream.
    let mut page = scan(&js, &request, &filter, page.scanned_to).await?;
    let mut arrived = false;
    while page.events.is_empty() && tokio::time::Instant::now() < deadline {
        // An event is seen here as the stream receives it, a moment before the stream has
        // stored it: once one came, look again shortly until it is there.
        let until = match arrived {
            true => (tokio::time::Instant::now() + STORED_SOON).min(deadline),
            false => deadline,
        };
        arrived |= tokio::time::timeout_at(until, arrivals.next())
            .await
            .is_ok();
        page = scan(&js, &request, &filter, page.scanned_to).await?;
    }
    Ok(page)
}

/// How often a page that saw an event arrive looks for it in the stream.
const STORED_SOON: Duration = Duration::from_millis(20);

/// The events matching `filter` after `after`, up to the page size; `scanned_to` is the last
/// sequence looked at.
async fn scan(
    js: &jetstream::Context,
    request: &ReadEvents,
    filter: &str,
    after: u64,
) -> Result<EventPage, ErrorBody> {
    let name = request.stream.stream();
    // Looking the stream up reads its info: its last sequence as of now.
    let stream = js
        .get_stream(name)
        .await
        .map_err(|error| unavailable(name, error))?;
    let last = stream.cached_info().state.last_sequence;
    let mut page = EventPage {
        events: Vec::new(),
        scanned_to: after,
    };
    while page.events.len() < request.page() as usize && page.scanned_to < last {
        let next = stream
            .raw_message_builder()
            .sequence(page.scanned_to + 1)
            .next_by_subject(filter.to_string())
            .send()
            .await;
        let message = match next {
            Ok(message) => message,
            Err(error) if error.kind() == stream::RawMessageErrorKind::NoMessageFound => {
                page.scanned_to = last;
                break;
            }
            Err(error) => return Err(unavailable(name, error)),
        };
        page.scanned_to = message.sequence;
        match decode::<serde_json::Value>(&message.payload, format_of(Some(&message.headers))) {
            Ok(event) => page.events.push(StoredEvent {
                seq: message.sequence,
                subject: message.subject.to_string(),
                event,
            }),
            Err(error) => {
                tracing::debug!(%error, sequence = message.sequence, "skipping an undecodable event")
            }
        }
    }
    Ok(page)
}
