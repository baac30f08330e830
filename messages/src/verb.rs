//! Typed verbs: each request/reply pair of the protocol as one type that knows its subject and
//! its reply, so a caller cannot send a request to the wrong subject or decode the wrong answer.
//!
//! ```
//! use atelier_messages::verb::Verb;
//! use atelier_messages::store::{ListFiles, Listing};
//! fn reply_of<V: Verb>() -> &'static str { V::SUBJECT }
//! assert_eq!(reply_of::<ListFiles>(), "atelier.store.ls");
//! ```
//!
//! Tool calls are the one request whose subject depends on its content (the pool of the tool),
//! so [`ToolRequest`](crate::tool::ToolRequest) is sent with
//! [`Pool::subject`](crate::tool::Pool::subject) instead.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::batch::{
    BatchSettled, BatchView, CancelBatch, GetBatch, ListBatches, ListTargets, RetryBatch,
    SettleBatch, SubmitBatch, TargetView, UpdateBatch,
};
use crate::job::{
    ApproveCall, CancelJob, CoordinatorStats, GetJob, GetStats, JobView, ListJobs, Ping, Pong,
    ResumeJob,
};
use crate::review::{DiffFile, FileDiff, Review, ReviewDraft};
use crate::store::{
    AddFiles, BlobBytes, CreateWorkbench, DiffDraft, DiscardDraft, Done, DraftDiff, FileBytes,
    GetBlob, ListFiles, ListWorkbenches, Listing, PublishDraft, Published, ReadFile, SetApprovals,
    UploadBlob, Uploaded, WorkbenchInfo, WriteDraft, Written,
};
use crate::subjects::{batch, ctl, review, store, workshop};
use crate::workshop::{AddContextItem, ContextItem, ListContextItems, RemoveContextItem};
use crate::workshop::{
    CheckMessage, CheckpointInfo, CollectGarbage, Collected, CreateCheckpoint, GetHistory, History,
    ListCheckpoints, ListModels, ModelChoices, ModelSet, Regenerate, Regenerated,
    RestoreCheckpoint, Restored, Rewind, Rewound, SetModel,
};

/// A request/reply verb: the request type, its subject and its reply type.
pub trait Verb: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The subject requests of this verb are sent to.
    const SUBJECT: &'static str;
    /// What a successful request answers.
    type Reply: Serialize + DeserializeOwned + Send + Sync + 'static;
}

macro_rules! verbs {
    ($($request:ty => $reply:ty, $subject:expr;)*) => {
        $(impl Verb for $request {
            const SUBJECT: &'static str = $subject;
            type Reply = $reply;
        })*
    };
}

verbs! {
    CreateWorkbench => WorkbenchInfo, store::CREATE;
    ListWorkbenches => Vec<WorkbenchInfo>, store::LIST_WORKBENCHES;
    AddFiles => Listing, store::ADD;
    ListFiles => Listing, store::LS;
    ReadFile => FileBytes, store::CAT;
    DiffDraft => DraftDiff, store::DIFF;
    PublishDraft => Published, store::PUBLISH;
    DiscardDraft => Done, store::DISCARD;
    WriteDraft => Written, store::WRITE;
    GetBlob => BlobBytes, store::BLOB;
    UploadBlob => Uploaded, store::UPLOAD;
    SetApprovals => WorkbenchInfo, store::APPROVALS;
    ListJobs => Vec<JobView>, ctl::JOBS;
    GetJob => JobView, ctl::JOB;
    Ping => Pong, ctl::PING;
    CancelJob => JobView, ctl::CANCEL;
    ApproveCall => JobView, ctl::APPROVE;
    ResumeJob => JobView, ctl::RESUME;
    GetStats => CoordinatorStats, ctl::STATS;
    crate::feed::ReadEvents => crate::feed::EventPage, ctl::EVENTS;
    GetHistory => History, workshop::HISTORY;
    CheckMessage => Done, workshop::CHECK;
    crate::shard::RecordSubmission => Done, crate::subjects::shard::RECORD_SUBMISSION;
    crate::shard::ListReferences => crate::shard::References, crate::subjects::shard::REFERENCES;
    crate::shard::SweepHost => crate::shard::HostSwept, crate::subjects::shard::SWEEP_HOST;
    ListModels => ModelChoices, workshop::MODELS;
    Rewind => Rewound, workshop::REWIND;
    Regenerate => Regenerated, workshop::REGENERATE;
    SetModel => ModelSet, workshop::SET_MODEL;
    ListCheckpoints => Vec<CheckpointInfo>, workshop::CHECKPOINTS;
    CreateCheckpoint => CheckpointInfo, workshop::CHECKPOINT;
    RestoreCheckpoint => Restored, workshop::RESTORE;
    CollectGarbage => Collected, workshop::GC;
    ReviewDraft => Review, workshop::REVIEW;
    AddContextItem => ContextItem, workshop::CONTEXT_ADD;
    ListContextItems => Vec<ContextItem>, workshop::CONTEXT_LIST;
    RemoveContextItem => Done, workshop::CONTEXT_REMOVE;
    DiffFile => FileDiff, review::FILE;
    SubmitBatch => BatchView, batch::SUBMIT;
    GetBatch => BatchView, batch::STATUS;
    ListBatches => Vec<BatchView>, batch::LIST;
    ListTargets => Vec<TargetView>, batch::TARGETS;
    CancelBatch => BatchView, batch::CANCEL;
    RetryBatch => BatchView, batch::RETRY;
    UpdateBatch => BatchView, batch::UPDATE;
    SettleBatch => BatchSettled, batch::SETTLE;
}
