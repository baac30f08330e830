//! Following an event stream without JetStream rights: `atelier.ctl.events` answers a page of
//! one stream's events after a sequence, waiting a while for the next one when there is none
//! yet. A reader keeps the page's `scanned_to` and asks again after it, so it sees every
//! event once, in order, and may stop and come back at any sequence.

use serde::{Deserialize, Serialize};

use crate::{ErrorBody, ErrorCode, subjects};

/// One of the deployment's event streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventStream {
    /// Job events (`atelier.evt.<job>.<kind>`).
    Jobs,
    /// Workshop events (`atelier.workshop.evt.<workbench>.<kind>`).
    Workshop,
    /// Batch events (`atelier.batch.evt.<batch>.<kind>`).
    Batches,
}

impl EventStream {
    /// The JetStream stream's name.
    pub fn stream(self) -> &'static str {
        match self {
            EventStream::Jobs => subjects::EVENTS_STREAM,
            EventStream::Workshop => subjects::workshop::EVENTS_STREAM,
            EventStream::Batches => subjects::batch::EVENTS_STREAM,
        }
    }

    /// Every subject of the stream.
    pub fn all(self) -> &'static str {
        match self {
            EventStream::Jobs => subjects::EVENTS_ALL,
            EventStream::Workshop => subjects::workshop::EVENTS_ALL,
            EventStream::Batches => subjects::batch::EVENTS_ALL,
        }
    }

    /// `filter` when it names subjects of this stream (its prefix, then tokens), else
    /// `VALIDATION_FAILED`.
    pub fn check_filter(self, filter: &str) -> Result<(), ErrorBody> {
        let prefix = self.all().trim_end_matches('>');
        let tokens_ok = filter
            .split('.')
            .all(|token| !token.is_empty() && !token.chars().any(char::is_whitespace));
        let wildcard_last = !filter.trim_end_matches('>').contains('>');
        if filter.starts_with(prefix) && filter.len() > prefix.len() && tokens_ok && wildcard_last {
            return Ok(());
        }
        Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "filter {filter:?} is not a subject of the {} stream (it starts with `{prefix}`)",
                self.stream()
            ),
        ))
    }
}

/// Most events one page holds.
pub const MAX_PAGE: u32 = 500;
/// Longest wait for a first event a request may ask.
pub const MAX_WAIT_MS: u64 = 10_000;

/// `atelier.ctl.events`: the events of `stream` matching `filter` with a sequence above
/// `after`, at most `max`; when there is none, waits up to `wait_ms` for one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadEvents {
    pub v: u16,
    pub stream: EventStream,
    /// Subjects of the stream to read (default: all of them).
    #[serde(default)]
    pub filter: Option<String>,
    /// Read events after this stream sequence (0: from the first).
    #[serde(default)]
    pub after: u64,
    /// Most events to answer (default 100, at most [`MAX_PAGE`]).
    #[serde(default)]
    pub max: Option<u32>,
    /// How long to wait for an event when there is none yet, in milliseconds (default 0, at
    /// most [`MAX_WAIT_MS`]).
    #[serde(default)]
    pub wait_ms: u64,
}

impl ReadEvents {
    /// The subjects asked for, checked.
    pub fn filter(&self) -> Result<String, ErrorBody> {
        match &self.filter {
            Some(filter) => {
                self.stream.check_filter(filter)?;
                Ok(filter.clone())
            }
            None => Ok(self.stream.all().to_string()),
        }
    }

    /// The page size asked for, bounded.
    pub fn page(&self) -> u32 {
        self.max.unwrap_or(100).clamp(1, MAX_PAGE)
    }
}

/// One stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Its stream sequence.
    pub seq: u64,
    pub subject: String,
    /// The event as published (a `JobEvent`, `WorkshopEvent` or `BatchEvent`).
    pub event: serde_json::Value,
}

impl StoredEvent {
    /// The event as the type its stream holds (`VALIDATION_FAILED` when it is not one).
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, ErrorBody> {
        serde_json::from_value(self.event.clone()).map_err(|error| {
            ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "event {} ({}) is not readable: {error}",
                    self.seq, self.subject
                ),
            )
        })
    }
}

/// A page of events.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventPage {
    pub events: Vec<StoredEvent>,
    /// Every sequence up to this one was looked at: ask again after it.
    pub scanned_to: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_must_name_subjects_of_its_stream() {
        let jobs = EventStream::Jobs;
        assert!(jobs.check_filter("atelier.evt.job-1.>").is_ok());
        assert!(jobs.check_filter("atelier.evt.*.finished").is_ok());
        for bad in [
            "atelier.evt.",
            "atelier.evt",
            ">",
            "atelier.store.ls",
            "atelier.workshop.evt.wb.>",
            "atelier.evt.>.x",
            "atelier.evt..x",
            "atelier.evt.a b",
        ] {
            let refused = jobs.check_filter(bad).map_err(|error| error.code);
            assert_eq!(refused, Err(ErrorCode::ValidationFailed), "{bad}");
        }
        assert!(
            EventStream::Workshop
                .check_filter("atelier.workshop.evt.wb.>")
                .is_ok()
        );
    }
}
