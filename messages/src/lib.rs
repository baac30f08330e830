//! Wire types of Atelier: everything that crosses NATS, and nothing else.
//!
//! Every payload is a struct with a protocol version field `v`; new fields are added with
//! `#[serde(default)]` so older peers keep working. Payloads are MessagePack (with field names)
//! by default and JSON when the `Content-Type: application/json` header is set; replies come
//! back in the request's format as a [`Reply`] holding either `ok` or an [`ErrorBody`] with a
//! stable [`ErrorCode`].
//!
//! # Layout
//! - [`subjects`]: subject names, streams, queue groups.
//! - [`access`]: the NATS accounts and the services that cross them.
//! - [`feed`]: reading an event stream a page at a time (`atelier.ctl.events`).
//! - [`approval`]: action classes, approval policies and decisions.
//! - [`verb`]: the [`Verb`](verb::Verb) trait: each request type with its subject and reply.
//! - [`codec`]: formats, versioned decoding, the reply envelope.
//! - [`error`]: stable error codes.
//! - [`job`]: job submission, state, events, control-plane views.
//! - [`contract`]: what a plan item's targets must hold ([`Contract`](contract::Contract)).
//! - [`outcome`]: what a succeeded job did: the files it changed, or it answered.
//! - [`tool`]: tool names and pools ([`ToolName`](tool::ToolName)), tool requests and results.
//! - [`store`]: DraftStore requests and results.
//! - [`plan`]: plan items as the job view carries them ([`PlanItem`](plan::PlanItem)).
//! - [`path`]: workbench path normalization and file kinds.
//! - [`worker`]: pool service names and worker stats payloads (`$SRV.STATS`).
//! - [`journal`]: the keys job steps are journaled under.
//! - [`workshop`]: conversations, rewind/regenerate, models, checkpoints.
//! - [`review`]: content diffs of a draft's files.
//! - [`shard`]: which shard a workbench is in, shard leases and changelog entries.
//! - [`shard_key`]: a workbench's shard key and the job ids that carry it.
//! - [`workflow`]: tool calls run without a model (`atelier run`).
//! - [`batch`]: one action over many targets, its views, verbs and events.
//! - [`limits`]: nesting and size limits every entry point applies.
//! - [`provider`]: a model profile's shared limiter record (requests, tokens, calls in flight).
//! - [`budget`]: what model calls cost ([`Usd`](budget::Usd), [`Prices`](budget::Prices)) and
//!   what a job or batch may spend ([`Budget`](budget::Budget)).

pub mod access;
pub mod approval;
pub mod batch;
pub mod budget;
pub mod codec;
pub mod contract;
pub mod error;
pub mod feed;
pub mod job;
pub mod journal;
pub mod limits;
pub mod outcome;
pub mod path;
pub mod plan;
pub mod provider;
pub mod review;
pub mod shard;
pub mod shard_key;
pub mod store;
pub mod subjects;
pub mod tool;
pub mod verb;
pub mod worker;
pub mod workflow;
pub mod workshop;

pub use codec::{Format, Reply, decode, decode_partial_reply, decode_reply, encode, encode_reply};
pub use error::{ErrorBody, ErrorCode};

/// The protocol version every payload carries in its `v` field.
pub const PROTOCOL_VERSION: u16 = 1;

/// A duration for people, in its largest whole unit: `40 s`, `12 min`, `26 h`, `3 d`.
pub fn describe_age(elapsed_ms: u64) -> String {
    let secs = elapsed_ms / 1000;
    match secs {
        0..120 => format!("{secs} s"),
        120..7_200 => format!("{} min", secs / 60),
        7_200..172_800 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
