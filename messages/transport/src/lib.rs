//! Atelier's one NATS transport: how every side — CLI, dashboard, coordinator, workers — sends
//! and serves the typed verbs of [`atelier_messages`].
//!
//! Requests are MessagePack by default and JSON when a `Content-Type: application/json` header
//! says so; replies come back in the request's format. Every request carries the W3C trace
//! context of the current span, so the responder's span joins the caller's trace. A caller that
//! asks for progress (`Atelier-Progress` header) gets progress messages from a long-running
//! responder, each restarting its idle deadline; transport failures map to stable codes
//! (`TOOL_WORKER_UNAVAILABLE`, `TOOL_TIMEOUT`, `VALIDATION_FAILED` for an oversized payload).
//!
//! # Layout
//! - [`blobs`]: large files through JetStream's object store (chunked, digest-verified), for
//!   coordinators. [`pieces`]: blobs through the store in pieces, for clients and workers.
//! - [`feed`]: following an event stream a page at a time (`atelier.ctl.events`).
//! - [`connect`]: connect options with the credentials a URL or a credentials file carries.
//! - [`headers`]: the payload format of a message, trace-context propagation, progress marks.
//! - [`request`]: typed request/reply with a [`Policy`] (timeouts, retries, progress).
//! - [`serve`]: the responder side: a [`Router`] of verbs on one wildcard subscription, replies
//!   in the request's format, progress keep-alives.
//! - [`failpoint`]: named kill points for crash tests (`ATELIER_FAILPOINTS`).
//! - [`error`]: [`TransportError`], for failures to start serving.

pub mod blobs;
pub mod connect;
pub mod error;
pub mod failpoint;
pub mod feed;
pub mod headers;
pub mod pieces;
pub mod request;
pub mod serve;

pub use blobs::BlobBucket;
pub use error::TransportError;
pub use request::{Policy, request, request_bytes, request_partial, request_to};
pub use serve::{Router, Routes, keep_alive, respond};
