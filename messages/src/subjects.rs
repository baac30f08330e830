//! NATS subject names, streams and queue groups. The single source of truth for addressing.

/// Job submissions (captured by the `JOBS` work-queue stream).
pub const JOB_SUBMIT: &str = "atelier.job.submit";
/// The JetStream stream holding submitted jobs.
pub const JOBS_STREAM: &str = "ATELIER_JOBS";
/// The durable consumer the coordinators share on [`JOBS_STREAM`].
pub const JOBS_CONSUMER: &str = "atelier-coordinators";
/// The JetStream stream holding job events (`atelier.evt.>`).
pub const EVENTS_STREAM: &str = "ATELIER_EVENTS";
/// Wildcard over every job event.
pub const EVENTS_ALL: &str = "atelier.evt.>";

/// Every job's end (`job_finished`): `atelier.evt.*.finished`.
pub const EVENTS_FINISHED: &str = "atelier.evt.*.finished";

/// The subject of one event of one job: `atelier.evt.<job>.<kind>`.
pub fn event(job_id: &str, kind: &str) -> String {
    format!("atelier.evt.{job_id}.{kind}")
}

/// Every event of one job: `atelier.evt.<job>.>`.
pub fn job_events(job_id: &str) -> String {
    format!("atelier.evt.{job_id}.>")
}

/// Reply inboxes: one prefix per role, so a server's permissions can let each role subscribe to
/// its own replies only. No role may subscribe to another's inboxes (or to `_INBOX.>`), so no
/// one reads or answers a call that another role made. A connection sets its role's prefix as
/// its client library's custom inbox prefix (`nats --inbox-prefix _INBOX_client` for the CLI).
pub mod inbox {
    /// The coordinator's replies (tool calls, store and stage requests, JetStream acks).
    pub const COORDINATOR: &str = "_INBOX_coordinator";
    /// A worker's or pool supervisor's replies (blob fetches, `$SRV` stats).
    pub const WORKER: &str = "_INBOX_worker";
    /// A client's replies (CLI, dashboard, scripts).
    pub const CLIENT: &str = "_INBOX_client";
}

/// The object store bucket that keeps a replicated store's large blobs for good (docs/adr/0014).
pub const BLOB_STORE_BUCKET: &str = "atelier-blob-store";

/// Control-plane verbs (request/reply, served by coordinators).
pub mod ctl {
    pub const JOBS: &str = "atelier.ctl.jobs";
    pub const JOB: &str = "atelier.ctl.job";
    pub const PING: &str = "atelier.ctl.ping";
    pub const CANCEL: &str = "atelier.ctl.cancel";
    pub const APPROVE: &str = "atelier.ctl.approve";
    pub const RESUME: &str = "atelier.ctl.resume";
    pub const STATS: &str = "atelier.ctl.stats";
    /// A page of an event stream's events (`ReadEvents`): how clients follow events.
    pub const EVENTS: &str = "atelier.ctl.events";
    /// Wildcard the control plane subscribes to.
    pub const WILDCARD: &str = "atelier.ctl.*";
    /// Queue group shared by coordinators answering control requests.
    pub const QUEUE: &str = "atelier-ctl";
}

/// DraftStore verbs (request/reply).
pub mod store {
    pub const CREATE: &str = "atelier.store.create";
    pub const LIST_WORKBENCHES: &str = "atelier.store.workbenches";
    pub const ADD: &str = "atelier.store.add";
    pub const LS: &str = "atelier.store.ls";
    pub const CAT: &str = "atelier.store.cat";
    pub const DIFF: &str = "atelier.store.diff";
    pub const PUBLISH: &str = "atelier.store.publish";
    pub const DISCARD: &str = "atelier.store.discard";
    pub const WRITE: &str = "atelier.store.write";
    pub const BLOB: &str = "atelier.store.blob";
    pub const APPROVALS: &str = "atelier.store.approvals";
    /// A piece of a blob sent to the store (`UploadBlob`).
    pub const UPLOAD: &str = "atelier.store.upload";
    /// Every store verb, for subscription and for bad-input tests.
    pub const ALL: [&str; 12] = [
        CREATE,
        LIST_WORKBENCHES,
        ADD,
        LS,
        CAT,
        DIFF,
        PUBLISH,
        DISCARD,
        WRITE,
        BLOB,
        APPROVALS,
        UPLOAD,
    ];
    /// Wildcard the DraftStore subscribes to.
    pub const WILDCARD: &str = "atelier.store.*";
    /// Queue group of DraftStore instances.
    pub const QUEUE: &str = "atelier-store";
}

/// Workshop verbs (request/reply, served by coordinators).
pub mod workshop {
    pub const HISTORY: &str = "atelier.workshop.history";
    pub const CHECK: &str = "atelier.workshop.check";
    pub const REWIND: &str = "atelier.workshop.rewind";
    pub const REGENERATE: &str = "atelier.workshop.regenerate";
    pub const SET_MODEL: &str = "atelier.workshop.set_model";
    pub const CHECKPOINTS: &str = "atelier.workshop.checkpoints";
    pub const CHECKPOINT: &str = "atelier.workshop.checkpoint";
    pub const RESTORE: &str = "atelier.workshop.restore";
    pub const GC: &str = "atelier.workshop.gc";
    pub const REVIEW: &str = "atelier.workshop.review";
    pub const CONTEXT_ADD: &str = "atelier.workshop.context_add";
    pub const CONTEXT_LIST: &str = "atelier.workshop.context_list";
    pub const CONTEXT_REMOVE: &str = "atelier.workshop.context_remove";
    pub const MODELS: &str = "atelier.workshop.models";
    /// Every workshop verb, for bad-input tests.
    pub const ALL: [&str; 14] = [
        HISTORY,
        CHECK,
        REWIND,
        REGENERATE,
        SET_MODEL,
        CHECKPOINTS,
        CHECKPOINT,
        RESTORE,
        GC,
        REVIEW,
        CONTEXT_ADD,
        CONTEXT_LIST,
        CONTEXT_REMOVE,
        MODELS,
    ];
    /// Wildcard the workshop service subscribes to (one token: events are not matched).
    pub const WILDCARD: &str = "atelier.workshop.*";
    /// Queue group shared by coordinators answering workshop requests.
    pub const QUEUE: &str = "atelier-workshop";
    /// The JetStream stream holding workshop events.
    pub const EVENTS_STREAM: &str = "ATELIER_WORKSHOP_EVENTS";
    /// Wildcard over every workshop event.
    pub const EVENTS_ALL: &str = "atelier.workshop.evt.>";

    /// A workbench name as one subject token: `.` (allowed in names, a separator in subjects)
    /// is written `~` (never in a name).
    pub fn token(workbench: &str) -> String {
        workbench.replace('.', "~")
    }

    /// The subject of one event of one workbench: `atelier.workshop.evt.<workbench>.<kind>`.
    pub fn event(workbench: &str, kind: &str) -> String {
        format!("atelier.workshop.evt.{}.{kind}", token(workbench))
    }

    /// Every event of one workbench.
    pub fn workbench_events(workbench: &str) -> String {
        format!("atelier.workshop.evt.{}.>", token(workbench))
    }
}

/// Batch verbs (request/reply, served by coordinators).
pub mod batch {
    pub const SUBMIT: &str = "atelier.batch.submit";
    pub const STATUS: &str = "atelier.batch.status";
    pub const LIST: &str = "atelier.batch.list";
    pub const TARGETS: &str = "atelier.batch.targets";
    pub const CANCEL: &str = "atelier.batch.cancel";
    pub const RETRY: &str = "atelier.batch.retry";
    pub const UPDATE: &str = "atelier.batch.update";
    pub const SETTLE: &str = "atelier.batch.settle";
    /// Every batch verb, for bad-input tests.
    pub const ALL: [&str; 8] = [SUBMIT, STATUS, LIST, TARGETS, CANCEL, RETRY, UPDATE, SETTLE];
    /// Wildcard the batch service subscribes to (one token: events are not matched).
    pub const WILDCARD: &str = "atelier.batch.*";
    /// Queue group shared by coordinators answering batch requests.
    pub const QUEUE: &str = "atelier-batch";
    /// The JetStream stream holding batch events.
    pub const EVENTS_STREAM: &str = "ATELIER_BATCH_EVENTS";
    /// Wildcard over every batch event.
    pub const EVENTS_ALL: &str = "atelier.batch.evt.>";

    /// The subject of one event of one batch: `atelier.batch.evt.<batch>.<kind>`.
    pub fn event(batch_id: &str, kind: &str) -> String {
        format!("atelier.batch.evt.{batch_id}.{kind}")
    }

    /// Every event of one batch.
    pub fn batch_events(batch_id: &str) -> String {
        format!("atelier.batch.evt.{batch_id}.>")
    }
}

/// Content review verbs served by the office pool's workers (request/reply).
pub mod review {
    pub const FILE: &str = "atelier.review.file";
    /// Wildcard the office workers subscribe to.
    pub const WILDCARD: &str = "atelier.review.*";
    /// Queue group shared by the office workers.
    pub const QUEUE: &str = "atelier-review";
}

/// Every tool pool's request subject (what workers serve).
pub const TOOL_WILDCARD: &str = "atelier.tool.*";

/// Every pool supervisor's scaling decisions: `atelier.pool.<pool>.scaled`.
pub const POOL_SCALED: &str = "atelier.pool.*.scaled";

/// The request subject of a tool pool: `atelier.tool.<pool>`.
pub fn tool(pool: &str) -> String {
    format!("atelier.tool.{pool}")
}

/// The queue group that load-balances a pool's workers.
pub fn tool_queue(pool: &str) -> String {
    format!("atelier-tool-{pool}")
}

/// Shard ownership and changelogs (docs/adr/0014).
pub mod shard {
    /// The KV bucket of shard leases (key `shard-N`).
    pub const LEASES_BUCKET: &str = "atelier-shard-leases";
    /// The JetStream stream of every shard's changelog.
    pub const LOG_STREAM: &str = "ATELIER_SHARDLOG";
    /// Wildcard over every shard's changelog.
    pub const LOG_ALL: &str = "atelier.shardlog.*";
    /// The object store bucket of shard snapshots (objects [`snapshot`]).
    pub const SNAPSHOTS_BUCKET: &str = "atelier-shard-snapshots";

    /// The changelog subject of `shard`.
    pub fn log(shard: u32) -> String {
        format!("atelier.shardlog.{shard}")
    }

    /// The lease key of `shard`.
    pub fn key(shard: u32) -> String {
        format!("shard-{shard}")
    }

    /// The name of `shard`'s snapshot at changelog sequence `seq`: `shard-N.at-` and the
    /// sequence in 20 digits, so names sort as positions do.
    pub fn snapshot(shard: u32, seq: u64) -> String {
        format!("{}{seq:020}", snapshot_prefix(shard))
    }

    /// What the names of `shard`'s snapshots start with.
    pub fn snapshot_prefix(shard: u32) -> String {
        format!("shard-{shard}.at-")
    }

    /// What the subjects `shard`'s owner answers start with: each public verb's subject under
    /// it (`atelier.shard.3.atelier.store.ls`), where the other coordinators forward what
    /// belongs to the shard. Only the coordinator role publishes or subscribes here.
    pub fn prefix(shard: u32) -> String {
        format!("atelier.shard.{shard}.")
    }

    /// The subject of `verb` on `shard`'s owner.
    pub fn verb(shard: u32, verb: &str) -> String {
        format!("{}{verb}", prefix(shard))
    }

    /// A submission handed to its shard's owner ([`crate::shard::RecordSubmission`]), under
    /// [`prefix`] only.
    pub const RECORD_SUBMISSION: &str = "atelier.intake.record";

    /// The blob digests a shard references, a page at a time
    /// ([`crate::shard::ListReferences`]), under [`prefix`] only: a replicated deployment's
    /// garbage collection keeps the union of every shard's.
    pub const REFERENCES: &str = "atelier.gc.references";

    /// Every coordinator of a replicated deployment sweeps its host's caches
    /// ([`crate::shard::SweepHost`]); answered by each, not by a queue group.
    pub const SWEEP_HOST: &str = "atelier.gc.sweep";

    /// The deployment's record (its shard count, [`crate::shard::Deployment`]), written once
    /// in the changelog stream.
    pub const DEPLOYMENT: &str = "atelier.shardlog.deployment";

    /// The KV bucket of live coordinators (key: coordinator id), which shards are balanced over.
    pub const MEMBERS_BUCKET: &str = "atelier-coordinators";
}
