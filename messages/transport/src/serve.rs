//! The responder side: verbs routed on one wildcard subscription, answered in the request's
//! format, each request in its own task; and progress keep-alives for long calls.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{HeaderMap, Subject};
use atelier_messages::codec::PROGRESS_HEADER;
use atelier_messages::verb::Verb;
use atelier_messages::{ErrorBody, ErrorCode, Format, Reply, decode, encode_reply};
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;

use crate::error::TransportError;
use crate::headers::{format_of, join_trace, with_format};

/// Decodes a request, runs its handler, encodes the reply in the request's format.
type Handler<S> = Box<dyn Fn(S, Bytes, Format) -> BoxFuture<'static, Vec<u8>> + Send + Sync>;

/// The verbs one service answers, by subject, each handler given a clone of the service's
/// state `S` (typically a cheap handle).
pub struct Router<S> {
    state: S,
    routes: BTreeMap<&'static str, Handler<S>>,
}

impl<S: Clone + Send + Sync + 'static> Router<S> {
    pub fn new(state: S) -> Self {
        Self {
            state,
            routes: BTreeMap::new(),
        }
    }

    /// Answers verb `V` with `handler`.
    pub fn route<V, F, Fut>(mut self, handler: F) -> Self
    where
        V: Verb,
        F: Fn(S, V) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<V::Reply, ErrorBody>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.routes.insert(
            V::SUBJECT,
            Box::new(move |state, payload, format| {
                let handler = Arc::clone(&handler);
                Box::pin(async move {
                    let result = match decode::<V>(&payload, format) {
                        Ok(request) => handler(state, request).await,
                        Err(error) => Err(error),
                    };
                    if let Err(error) = &result {
                        tracing::debug!(subject = V::SUBJECT, code = %error.code, "request refused");
                    }
                    encode_reply(&Reply::from_result(result), format)
                })
            }),
        );
        self
    }

    /// Subscribes `wildcard` in `queue` and answers every request, one task each, until the
    /// returned task is aborted. A subject with no route gets `VALIDATION_FAILED`.
    pub async fn serve(
        self,
        client: async_nats::Client,
        wildcard: &'static str,
        queue: &'static str,
    ) -> Result<tokio::task::JoinHandle<()>, TransportError> {
        let mut subscriber = client
            .queue_subscribe(wildcard, queue.to_string())
            .await
            .map_err(|error| TransportError::Subscribe {
                subject: wildcard.to_string(),
                reason: error.to_string(),
            })?;
        let router = Arc::new(self);
        Ok(tokio::spawn(async move {
            while let Some(message) = subscriber.next().await {
                let Some(reply_to) = message.reply.clone() else {
                    tracing::debug!(subject = %message.subject, "request without reply subject ignored");
                    continue;
                };
                let router = Arc::clone(&router);
                let client = client.clone();
                tokio::spawn(async move {
                    let format = format_of(message.headers.as_ref());
                    let span = tracing::debug_span!("request", subject = %message.subject);
                    join_trace(&span, message.headers.as_ref());
                    let body = router
                        .answer(&message.subject, message.payload, format)
                        .await;
                    respond(&client, reply_to, body, format).await;
                });
            }
        }))
    }

    async fn answer(&self, subject: &str, payload: Bytes, format: Format) -> Vec<u8> {
        match self.routes.get(subject) {
            Some(handler) => handler(self.state.clone(), payload, format).await,
            None => {
                let known: Vec<&str> = self.routes.keys().copied().collect();
                let error = ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!("unknown verb `{subject}`; known: {}", known.join(", ")),
                );
                encode_reply(&Reply::<()>::error(error), format)
            }
        }
    }
}

/// Publishes an encoded reply in `format`.
pub async fn respond(
    client: &async_nats::Client,
    reply_to: Subject,
    body: Vec<u8>,
    format: Format,
) {
    if let Err(error) = client
        .publish_with_headers(reply_to, with_format(format), body.into())
        .await
    {
        tracing::warn!(%error, "could not send reply");
    }
}

/// How often a running call tells its caller it is still alive.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// Publishes progress messages to `reply` at once (the call is taken) and then every
/// [`PROGRESS_EVERY`] until aborted, so the caller's idle deadline stays open while this
/// responder is alive and closes soon after it dies, and the caller knows a silence came after a
/// responder took the call (it died holding it) rather than before.
pub fn keep_alive(client: async_nats::Client, reply: Subject) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(PROGRESS_EVERY);
        loop {
            ticks.tick().await;
            let mut headers = HeaderMap::new();
            headers.insert(PROGRESS_HEADER, "1");
            if client
                .publish_with_headers(reply.clone(), headers, Bytes::new())
                .await
                .is_err()
            {
                return;
            }
        }
    })
}
