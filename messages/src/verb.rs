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

/// A request/reply verb: the request type, its subject, who answers it and its reply type.
pub trait Verb: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The subject requests of this verb are sent to.
    const SUBJECT: &'static str;
    /// Which coordinator shard answers it, as the front door routes it.
    const ROUTE: Route;
    /// What a successful request answers.
    type Reply: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// What its route reads: the workbench, job id or batch id the request names.
    fn key(&self) -> Option<&str>;
}

/// Who answers a verb. The front door routes the keyed ones by their key alone; the rest it
/// answers by a rule of its own, named here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The shard of the workbench the request names.
    Workbench,
    /// The shard holding the job the request names (the one its id carries, else the one that
    /// has it).
    Job,
    /// The shard of the batch id the request names.
    Batch,
    /// Any shard held by the coordinator asked: the answer is the same everywhere.
    Anywhere,
    /// Every owned shard, the answers gathered and the shards without an owner named.
    Gathered,
    /// The front door, by a rule of its own (a blob by its workbench or digest, garbage
    /// collection over every shard, ping); the shards answer what it forwards.
    FrontDoor,
    /// The front door alone, from the EVENTS stream.
    Events,
    /// A shard's owner only, asked by another coordinator (never through the front door).
    Shard,
    /// Every coordinator, each for its own host (no queue group).
    EveryCoordinator,
    /// A worker pool.
    Worker,
}

impl Route {
    /// Whether the front door answers the verb on its public subject.
    pub fn is_public(self) -> bool {
        !matches!(self, Route::Shard | Route::EveryCoordinator | Route::Worker)
    }

    /// Whether a shard's owner answers the verb on the shard's own subject
    /// ([`crate::subjects::shard::verb`]).
    pub fn answered_by_shard(self) -> bool {
        !matches!(
            self,
            Route::Events | Route::EveryCoordinator | Route::Worker
        )
    }
}

/// A verb as the protocol table lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared {
    /// The request type's name.
    pub request: &'static str,
    pub subject: &'static str,
    pub route: Route,
}

macro_rules! verbs {
    ($($request:ty => $reply:ty, $subject:expr, $route:ident $(($key:ident))?;)*) => {
        $(impl Verb for $request {
            const SUBJECT: &'static str = $subject;
            const ROUTE: Route = Route::$route;
            type Reply = $reply;

            fn key(&self) -> Option<&str> {
                verbs!(@key self $($key)?)
            }
        })*

        /// Every verb of the protocol, declared once: its subject and who answers it.
        pub const DECLARED: &[Declared] = &[
            $(Declared {
                request: stringify!($request),
                subject: $subject,
                route: Route::$route,
            },)*
        ];
    };
    (@key $self:ident $key:ident) => { Some(&$self.$key) };
    (@key $self:ident) => { None };
}

verbs! {
    CreateWorkbench => WorkbenchInfo, store::CREATE, Workbench(workbench);
    ListWorkbenches => Vec<WorkbenchInfo>, store::LIST_WORKBENCHES, Gathered;
    AddFiles => Listing, store::ADD, Workbench(workbench);
    ListFiles => Listing, store::LS, Workbench(workbench);
    ReadFile => FileBytes, store::CAT, Workbench(workbench);
    DiffDraft => DraftDiff, store::DIFF, Workbench(workbench);
    PublishDraft => Published, store::PUBLISH, Workbench(workbench);
    DiscardDraft => Done, store::DISCARD, Workbench(workbench);
    WriteDraft => Written, store::WRITE, Workbench(workbench);
    GetBlob => BlobBytes, store::BLOB, FrontDoor;
    UploadBlob => Uploaded, store::UPLOAD, Workbench(workbench);
    SetApprovals => WorkbenchInfo, store::APPROVALS, Workbench(workbench);
    ListJobs => Vec<JobView>, ctl::JOBS, Gathered;
    GetJob => JobView, ctl::JOB, Job(job_id);
    Ping => Pong, ctl::PING, FrontDoor;
    CancelJob => JobView, ctl::CANCEL, Job(job_id);
    ApproveCall => JobView, ctl::APPROVE, Job(job_id);
    ResumeJob => JobView, ctl::RESUME, Job(job_id);
    GetStats => CoordinatorStats, ctl::STATS, Gathered;
    crate::feed::ReadEvents => crate::feed::EventPage, ctl::EVENTS, Events;
    GetHistory => History, workshop::HISTORY, Workbench(workbench);
    CheckMessage => Done, workshop::CHECK, Workbench(workbench);
    crate::shard::RecordSubmission => Done, crate::subjects::shard::RECORD_SUBMISSION, Shard;
    crate::shard::ListReferences => crate::shard::References, crate::subjects::shard::REFERENCES, Shard;
    crate::shard::SweepHost => crate::shard::HostSwept, crate::subjects::shard::SWEEP_HOST, EveryCoordinator;
    ListModels => ModelChoices, workshop::MODELS, Anywhere;
    Rewind => Rewound, workshop::REWIND, Workbench(workbench);
    Regenerate => Regenerated, workshop::REGENERATE, Workbench(workbench);
    SetModel => ModelSet, workshop::SET_MODEL, Workbench(workbench);
    ListCheckpoints => Vec<CheckpointInfo>, workshop::CHECKPOINTS, Workbench(workbench);
    CreateCheckpoint => CheckpointInfo, workshop::CHECKPOINT, Workbench(workbench);
    RestoreCheckpoint => Restored, workshop::RESTORE, Workbench(workbench);
    CollectGarbage => Collected, workshop::GC, FrontDoor;
    ReviewDraft => Review, workshop::REVIEW, Workbench(workbench);
    AddContextItem => ContextItem, workshop::CONTEXT_ADD, Workbench(workbench);
    ListContextItems => Vec<ContextItem>, workshop::CONTEXT_LIST, Workbench(workbench);
    RemoveContextItem => Done, workshop::CONTEXT_REMOVE, Workbench(workbench);
    DiffFile => FileDiff, review::FILE, Worker;
    SubmitBatch => BatchView, batch::SUBMIT, Batch(batch_id);
    GetBatch => BatchView, batch::STATUS, Batch(batch_id);
    ListBatches => Vec<BatchView>, batch::LIST, Gathered;
    ListTargets => Vec<TargetView>, batch::TARGETS, Batch(batch_id);
    CancelBatch => BatchView, batch::CANCEL, Batch(batch_id);
    RetryBatch => BatchView, batch::RETRY, Batch(batch_id);
    UpdateBatch => BatchView, batch::UPDATE, Batch(batch_id);
    SettleBatch => BatchSettled, batch::SETTLE, Batch(batch_id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_is_declared_once_with_its_own_subject() {
        let mut subjects: Vec<&str> = DECLARED.iter().map(|verb| verb.subject).collect();
        let count = subjects.len();
        subjects.sort_unstable();
        subjects.dedup();
        assert_eq!(subjects.len(), count, "a subject declared twice");
        let keyed = |route| DECLARED.iter().filter(|verb| verb.route == route).count();
        assert_eq!(keyed(Route::Job), 4);
        assert_eq!(keyed(Route::Gathered), 4);
        assert_eq!(<crate::store::ListFiles as Verb>::ROUTE, Route::Workbench);
        let listing = crate::store::ListFiles {
            v: crate::PROTOCOL_VERSION,
            workbench: "w".into(),
            view: crate::store::View::Draft,
        };
        assert_eq!(listing.key(), Some("w"));
        assert_eq!(crate::job::Ping { v: 1 }.key(), None);
    }
}
