//! Following an event stream without JetStream rights: [`EventFeed`] asks
//! `atelier.ctl.events` for a page after the last sequence it saw, waiting at the coordinator
//! for the next event when there is none, and hands the events out one at a time, in order,
//! each once.

use std::collections::VecDeque;
use std::time::Duration;

use atelier_messages::feed::{EventStream, ReadEvents, StoredEvent};
use atelier_messages::{ErrorBody, PROTOCOL_VERSION};

use crate::{Policy, request};

/// How long one request waits at the coordinator for a first event.
const WAIT: Duration = Duration::from_secs(5);

/// A reader of one event stream's events matching a filter.
#[derive(Debug)]
pub struct EventFeed {
    client: async_nats::Client,
    stream: EventStream,
    filter: Option<String>,
    /// The last sequence looked at.
    after: u64,
    buffered: VecDeque<StoredEvent>,
}

impl EventFeed {
    /// Reads `stream`'s events matching `filter` (none: all) after the sequence `after` (0:
    /// from the first).
    pub fn new(
        client: async_nats::Client,
        stream: EventStream,
        filter: Option<String>,
        after: u64,
    ) -> Self {
        Self {
            client,
            stream,
            filter,
            after,
            buffered: VecDeque::new(),
        }
    }

    /// The next event, waiting for it as long as it takes.
    pub async fn next(&mut self) -> Result<StoredEvent, ErrorBody> {
        loop {
            if let Some(event) = self.next_within(WAIT).await? {
                return Ok(event);
            }
        }
    }

    /// The next event, or none when none came within `wait` (at most the coordinator's
    /// longest wait, 10 s).
    pub async fn next_within(&mut self, wait: Duration) -> Result<Option<StoredEvent>, ErrorBody> {
        if let Some(event) = self.buffered.pop_front() {
            return Ok(Some(event));
        }
        self.fill(wait).await?;
        Ok(self.buffered.pop_front())
    }

    /// Every event already in the stream after the last one seen (none waited for).
    pub async fn drain(&mut self) -> Result<Vec<StoredEvent>, ErrorBody> {
        let mut events: Vec<StoredEvent> = self.buffered.drain(..).collect();
        loop {
            let before = self.after;
            self.fill(Duration::ZERO).await?;
            let filled = !self.buffered.is_empty();
            events.extend(self.buffered.drain(..));
            if !filled && self.after == before {
                return Ok(events);
            }
        }
    }

    async fn fill(&mut self, wait: Duration) -> Result<(), ErrorBody> {
        let ask = ReadEvents {
            v: PROTOCOL_VERSION,
            stream: self.stream,
            filter: self.filter.clone(),
            after: self.after,
            max: None,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        };
        let page = request(
            &self.client,
            &ask,
            Policy::once(wait + Duration::from_secs(30)),
        )
        .await?;
        self.after = self.after.max(page.scanned_to);
        self.buffered.extend(page.events);
        Ok(())
    }
}
