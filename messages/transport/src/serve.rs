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
    pub fn route<V, F, Fut>(self, handler: F) -> Self
    where
        V: Verb,
        F: Fn(S, V) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<V::Reply, ErrorBody>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.route_partial(move |state, request: V| {
            let handler = Arc::clone(&handler);
            async move { handler(state, request).await.map(|reply| (reply, None)) }
        })
    }

    /// Answers verb `V` with `handler`, whose answer may leave part of what was asked out: its
    /// value and, when it does, what it leaves out ([`Reply::partial`]).
    pub fn route_partial<V, F, Fut>(mut self, handler: F) -> Self
    where
        V: Verb,
        F: Fn(S, V) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(V::Reply, Option<ErrorBody>), ErrorBody>> + Send + 'static,
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
                    let reply = match result {
                        Ok((value, left_out)) => Reply::partial(value, left_out),
                        Err(error) => {
                            tracing::debug!(subject = V::SUBJECT, code = %error.code, "request refused");
                            Reply::error(error)
                        }
                    };
                    encode_reply(&reply, format)
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
        self.into_routes()
            .serve(client, wildcard.to_string(), Some(queue.to_string()), "")
            .await
    }

    /// The routes with their state, type-erased, so that several services' routes join in one
    /// table that answers in process or is served under a prefix.
    pub fn into_routes(self) -> Routes {
        let state = self.state;
        let table = self
            .routes
            .into_iter()
            .map(|(subject, handler)| {
                let state = state.clone();
                let erased: ErasedHandler =
                    Arc::new(move |payload, format| handler(state.clone(), payload, format));
                (subject, erased)
            })
            .collect();
        Routes {
            table: Arc::new(table),
        }
    }
}

/// A handler with its state.
type ErasedHandler = Arc<dyn Fn(Bytes, Format) -> BoxFuture<'static, Vec<u8>> + Send + Sync>;

/// Verbs by subject, answered in process ([`Routes::answer`]) or over NATS ([`Routes::serve`]).
#[derive(Clone, Default)]
pub struct Routes {
    table: Arc<BTreeMap<&'static str, ErasedHandler>>,
}

impl Routes {
    /// These routes and `other`'s (`other`'s win for a subject both answer).
    pub fn join(self, other: Routes) -> Routes {
        let mut table: BTreeMap<_, _> = self.table.as_ref().clone();
        table.extend(other.table.iter().map(|(k, v)| (*k, Arc::clone(v))));
        Routes {
            table: Arc::new(table),
        }
    }

    /// Subscribes `{prefix}{wildcard}` (in `queue`, if any) and answers every request on the
    /// verb its subject names after `prefix`, one task each, until the returned task is
    /// aborted. A request asking for progress gets it while its answer is worked on.
    pub async fn serve(
        self,
        client: async_nats::Client,
        wildcard: String,
        queue: Option<String>,
        prefix: &str,
    ) -> Result<tokio::task::JoinHandle<()>, TransportError> {
        let subject = format!("{prefix}{wildcard}");
        let subscribed = match queue {
            Some(queue) => client.queue_subscribe(subject.clone(), queue).await,
            None => client.subscribe(subject.clone()).await,
        };
        let mut subscriber = subscribed.map_err(|error| TransportError::Subscribe {
            subject,
            reason: error.to_string(),
        })?;
        let prefix = prefix.to_string();
        Ok(tokio::spawn(async move {
            while let Some(message) = subscriber.next().await {
                let Some(reply_to) = message.reply.clone() else {
                    tracing::debug!(subject = %message.subject, "request without reply subject ignored");
                    continue;
                };
                let routes = self.clone();
                let client = client.clone();
                let prefix_len = prefix.len();
                tokio::spawn(async move {
                    let headers = message.headers.as_ref();
                    let format = format_of(headers);
                    let progress = match crate::headers::has_progress_mark(headers) {
                        true => Some(keep_alive(client.clone(), reply_to.clone()).await),
                        false => None,
                    };
                    let span = tracing::debug_span!("request", subject = %message.subject);
                    join_trace(&span, headers);
                    let verb = message.subject.get(prefix_len..).unwrap_or_default();
                    let body = routes.answer(verb, message.payload, format).await;
                    if let Some(progress) = progress {
                        progress.abort();
                    }
                    respond(&client, reply_to, body, format).await;
                });
            }
        }))
    }

    /// Whether `subject` is one of these routes.
    pub fn answers(&self, subject: &str) -> bool {
        self.table.contains_key(subject)
    }

    /// The encoded reply to `payload` (in `format`) on verb `subject`; a subject with no route
    /// gets `VALIDATION_FAILED`.
    pub async fn answer(&self, subject: &str, payload: Bytes, format: Format) -> Vec<u8> {
        match self.table.get(subject) {
            Some(handler) => handler(payload, format).await,
            None => {
                let known: Vec<&str> = self.table.keys().copied().collect();
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

/// Publishes a progress message to `reply` at once (the call is taken), before it returns, and
/// then every [`PROGRESS_EVERY`] from a task until that task is aborted, so the caller's idle
/// deadline stays open while this responder is alive and closes soon after it dies, and the
/// caller knows a silence came after a responder took the call (it died holding it) rather than
/// before. The first message is sent from the caller's task: no task hand-off precedes it.
pub async fn keep_alive(client: async_nats::Client, reply: Subject) -> tokio::task::JoinHandle<()> {
    let publish = |client: async_nats::Client, reply: Subject| async move {
        let mut headers = HeaderMap::new();
        headers.insert(PROGRESS_HEADER, "1");
        client
            .publish_with_headers(reply, headers, Bytes::new())
            .await
            .is_ok()
    };
    let taken = publish(client.clone(), reply.clone()).await;
    tokio::spawn(async move {
        if !taken {
            return;
        }
        let start = tokio::time::Instant::now() + PROGRESS_EVERY;
        let mut ticks = tokio::time::interval_at(start, PROGRESS_EVERY);
        loop {
            ticks.tick().await;
            if !publish(client.clone(), reply.clone()).await {
                return;
            }
        }
    })
}
