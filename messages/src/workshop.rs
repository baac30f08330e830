//! The Workshop (`atelier.workshop.<verb>`): each workbench's linear conversation, rewind and
//! regenerate, the per-workbench model, checkpoints, context items and the content review.
//!
//! A conversation is a list of messages with stable ids (`m<n>`, never reused): user messages
//! (one per submitted job), assistant answers (a job's summary) and system events (model
//! switches, checkpoints, rewinds, restores, regenerations, failed jobs).

use serde::{Deserialize, Serialize};

use crate::ErrorBody;
use crate::job::JobState;
use crate::store::ManifestEntry;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    System,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
        }
    }
}

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointReason {
    /// The published state before a publish.
    Publish,
    /// `atelier checkpoint`.
    Manual,
    /// The published state before a restore replaced it.
    BeforeRestore,
}

impl CheckpointReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointReason::Publish => "publish",
            CheckpointReason::Manual => "manual",
            CheckpointReason::BeforeRestore => "before_restore",
        }
    }
}

/// What a system message records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SystemEvent {
    /// The workbench's default model changed (or one message overrode it).
    ModelSwitched {
        model: String,
        /// True when only the next message uses it (`submit --model`).
        #[serde(default)]
        message_only: bool,
    },
    CheckpointCreated {
        checkpoint_id: String,
        reason: CheckpointReason,
    },
    CheckpointRestored {
        checkpoint_id: String,
        /// The checkpoint of the published state the restore replaced.
        safety_checkpoint_id: String,
    },
    /// Every message after `to_message_id` was discarded and the draft restored.
    Rewound {
        to_message_id: String,
        removed: Vec<String>,
    },
    /// A fresh answer to `from_message_id` was asked; `replaced` were discarded.
    Regenerated {
        from_message_id: String,
        job_id: String,
        #[serde(default)]
        replaced: Vec<String>,
    },
    /// A job ended without an answer (failed or cancelled); regenerate retries it.
    JobEnded {
        job_id: String,
        state: JobState,
        #[serde(default)]
        error: Option<ErrorBody>,
    },
    /// The draft became the published state; `checkpoint_id` holds the state it replaced.
    DraftPublished {
        checkpoint_id: String,
    },
    DraftDiscarded,
    /// The message's text is the model's summary of the conversation through
    /// `through_message_id` (`summarized`: the messages it covers beyond an earlier summary);
    /// later jobs carry it instead of them.
    ContextCompressed {
        through_message_id: String,
        #[serde(default)]
        summarized: Vec<String>,
    },
}

/// A change to a workbench, pushed to the JetStream stream `ATELIER_WORKSHOP_EVENTS` on
/// `atelier.workshop.evt.<workbench>.<kind>` ([`crate::subjects::workshop::event`]) once the
/// change is durable, so clients follow a workbench without asking for its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkshopEvent {
    pub v: u16,
    pub workbench: String,
    pub at_ms: u64,
    pub kind: WorkshopEventKind,
    /// The message added: every kind but `draft_revision_created` and `context_changed`.
    #[serde(default)]
    pub message: Option<ConversationMessage>,
    /// `draft_revision_created`: the draft as recorded with a message.
    #[serde(default)]
    pub revision: Option<RevisionCreated>,
    /// `context_changed`: the context item added, replaced or removed.
    #[serde(default)]
    pub context: Option<ContextChange>,
    /// `published`, `discarded`, `checkpoint_restored`: what became of the draft and the
    /// published files.
    #[serde(default)]
    pub change: Option<StateChange>,
}

/// What a workshop event tells (the last token of its subject).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkshopEventKind {
    /// A user message, an answer, or a system event without a kind of its own (a checkpoint
    /// taken by hand, a job that ended without an answer).
    MessageAdded,
    /// The draft revision recorded with a message (every message records one).
    DraftRevisionCreated,
    Rewound,
    Regenerated,
    ModelChanged,
    /// The draft became the published state (`change`: the checkpoint of the state it
    /// replaced, the files now published and how many of them changed).
    Published,
    /// The draft was thrown away (`change`: its files and how many it changed).
    Discarded,
    /// A checkpoint became the published state (`change`: the checkpoint, the one taken of the
    /// state it replaced, the files now published and how many of them changed).
    CheckpointRestored,
    ContextChanged,
    /// The model summarized older conversation (the `message` holds the summary).
    ContextCompressed,
}

impl WorkshopEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MessageAdded => "message_added",
            Self::DraftRevisionCreated => "draft_revision_created",
            Self::Rewound => "rewound",
            Self::Regenerated => "regenerated",
            Self::ModelChanged => "model_changed",
            Self::Published => "published",
            Self::Discarded => "discarded",
            Self::CheckpointRestored => "checkpoint_restored",
            Self::ContextChanged => "context_changed",
            Self::ContextCompressed => "context_compressed",
        }
    }

    /// The kind of the event telling that `message` was added.
    pub fn of(message: &ConversationMessage) -> Self {
        match &message.event {
            Some(SystemEvent::Rewound { .. }) => Self::Rewound,
            Some(SystemEvent::Regenerated { .. }) => Self::Regenerated,
            Some(SystemEvent::ModelSwitched { .. }) => Self::ModelChanged,
            Some(SystemEvent::DraftPublished { .. }) => Self::Published,
            Some(SystemEvent::DraftDiscarded) => Self::Discarded,
            Some(SystemEvent::CheckpointRestored { .. }) => Self::CheckpointRestored,
            Some(SystemEvent::ContextCompressed { .. }) => Self::ContextCompressed,
            Some(SystemEvent::CheckpointCreated { .. } | SystemEvent::JobEnded { .. }) | None => {
                Self::MessageAdded
            }
        }
    }
}

/// The draft revision recorded with a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionCreated {
    pub message_id: String,
    /// A draft exists at that message.
    pub has_draft: bool,
    /// Files in the draft then (0 without one).
    pub files: u64,
}

/// What a publish, discard or restore did to the workbench's files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateChange {
    /// `published`: the checkpoint of the published state the publish replaced;
    /// `checkpoint_restored`: the checkpoint restored; none for `discarded`.
    #[serde(default)]
    pub checkpoint_id: Option<String>,
    /// `checkpoint_restored`: the checkpoint of the published state the restore replaced.
    #[serde(default)]
    pub safety_checkpoint_id: Option<String>,
    /// Files published now (`published`, `checkpoint_restored`); files of the thrown-away
    /// draft (`discarded`).
    pub files: u64,
    /// Paths added, modified or deleted: against the published state before the publish or
    /// restore; by the thrown-away draft against the published state, which stays as it was
    /// (`discarded`).
    pub files_changed: u64,
}

/// A context item added, replaced or removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextChange {
    pub name: String,
    pub removed: bool,
}

/// One message of a workbench's conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationMessage {
    /// Stable id, `m<n>`; ids are never reused, also after a rewind.
    pub id: String,
    pub role: Role,
    pub text: String,
    pub at_ms: u64,
    /// The job that this user message started or that wrote this answer.
    #[serde(default)]
    pub job_id: Option<String>,
    /// The model that answered (assistant) or is asked (user).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub event: Option<SystemEvent>,
}

/// `atelier.workshop.history`: the conversation and the workbench's workshop state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GetHistory {
    pub v: u16,
    pub workbench: String,
}

/// A workbench's conversation and state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub workbench: String,
    /// The default model of the workbench (`atelier wb set-model`), if set.
    #[serde(default)]
    pub model: Option<String>,
    pub has_draft: bool,
    /// When and by what the draft was started (with a draft).
    #[serde(default)]
    pub draft: Option<crate::store::DraftOrigin>,
    /// The job answering the head message, while one runs.
    #[serde(default)]
    pub running_job: Option<String>,
    /// The id of the last message.
    #[serde(default)]
    pub head: Option<String>,
    pub messages: Vec<ConversationMessage>,
}

/// `atelier.workshop.check`: would a new message be accepted now? Answers `DRAFT_EXISTS`
/// (unless `continue_draft`), `WORKBENCH_BUSY` or `NOT_FOUND` as the submission would.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckMessage {
    pub v: u16,
    pub workbench: String,
    #[serde(default)]
    pub continue_draft: bool,
    /// The model the message names, checked against the operator's settings
    /// (`MODEL_NOT_ALLOWED`, `PROVIDER_NOT_CONFIGURED`).
    #[serde(default)]
    pub model: Option<String>,
}

/// `atelier.workshop.rewind`: discard every message after `message_id` and restore the draft
/// to its state at that message (`chat_only`: leave the draft as it is).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rewind {
    pub v: u16,
    pub workbench: String,
    pub message_id: String,
    /// Rewind the conversation only; the draft stays as it is.
    #[serde(default)]
    pub chat_only: bool,
    /// When the draft's state at the message is gone (`REVISION_PRUNED`), discard the draft
    /// and rewind.
    #[serde(default)]
    pub discard_draft: bool,
}

/// Result of a rewind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rewound {
    pub workbench: String,
    pub head: String,
    /// Ids of the discarded messages.
    pub removed: Vec<String>,
    /// Whether a draft exists after the rewind.
    pub has_draft: bool,
    /// The id of the system message recording the rewind.
    pub event_id: String,
}

/// `atelier.workshop.regenerate`: a fresh answer to a user message (the last one unless
/// `from_message_id` names another), as a new job; whatever followed it is discarded first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Regenerate {
    pub v: u16,
    pub workbench: String,
    /// The user message to answer again (default: the last one).
    #[serde(default)]
    pub from_message_id: Option<String>,
    /// Only say what would be discarded (`replaced`); change nothing, start no job.
    #[serde(default)]
    pub dry_run: bool,
    /// Job id (default: chosen by the coordinator).
    #[serde(default)]
    pub job_id: Option<String>,
    /// Model for this answer only (default: the workbench's).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub auto_approve: bool,
}

/// Result of a regenerate: the job that answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Regenerated {
    /// Empty for a dry run.
    pub job_id: String,
    pub from_message_id: String,
    /// The messages discarded (would be, for a dry run).
    pub replaced: Vec<String>,
    /// Nothing was changed: this is what a regenerate would discard.
    #[serde(default)]
    pub dry_run: bool,
}

/// `atelier.workshop.set_model`: the workbench's default model (recorded in the conversation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetModel {
    pub v: u16,
    pub workbench: String,
    pub model: String,
}

/// Result of a model switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSet {
    pub workbench: String,
    pub model: String,
    /// The system message recording the switch.
    pub event_id: String,
}

/// `atelier.workshop.models`: the models a message may name (`submit --model`, the dashboard's
/// composer): the operator's profiles that can run, and the default of messages naming none.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListModels {
    pub v: u16,
}

/// The models a message may name. Other specs (`openai:MODEL`, `openai-compat:URL#MODEL`) are
/// allowed as the operator's settings say; these are the ones to offer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ModelChoices {
    /// The model of messages that name none on a workbench without its own (`wb set-model`).
    #[serde(default)]
    pub default_model: Option<String>,
    /// The operator's profiles (`[models.NAME]`), by name; a misconfigured one is left out.
    #[serde(default)]
    pub profiles: Vec<ModelChoice>,
}

/// One profile a message may name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelChoice {
    /// What a message names (`--model NAME`).
    pub name: String,
    /// `openai`, `openai-compat` or `anthropic`.
    pub kind: String,
    /// The model the server knows.
    pub model: String,
}

/// `atelier.workshop.checkpoints`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListCheckpoints {
    pub v: u16,
    pub workbench: String,
}

/// A saved published state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    pub id: String,
    pub at_ms: u64,
    pub reason: CheckpointReason,
    #[serde(default)]
    pub note: Option<String>,
    pub files: Vec<ManifestEntry>,
}

/// `atelier.workshop.checkpoint`: checkpoint the published state by hand.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateCheckpoint {
    pub v: u16,
    pub workbench: String,
    #[serde(default)]
    pub note: Option<String>,
}

/// `atelier.workshop.restore`: the checkpoint becomes the published state (refused while a
/// draft exists or a job runs; the replaced state is checkpointed first).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestoreCheckpoint {
    pub v: u16,
    pub workbench: String,
    pub checkpoint_id: String,
}

/// Result of a restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    pub workbench: String,
    pub checkpoint_id: String,
    pub safety_checkpoint_id: String,
    pub files: Vec<ManifestEntry>,
}

/// `atelier.workshop.gc`: remove blobs that no manifest, checkpoint or draft revision uses, and
/// the cached table databases of this host's workers whose file is gone with them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CollectGarbage {
    pub v: u16,
}

/// Result of a garbage collection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collected {
    pub removed_blobs: u64,
    /// Bytes of the removed blobs and table databases.
    pub freed_bytes: u64,
    pub kept_blobs: u64,
    /// Cached table databases (of this host's workers) whose file no blob is left of.
    #[serde(default)]
    pub removed_tables: u64,
    /// Hosts whose caches were swept: every coordinator of a replicated deployment that
    /// answered, 1 otherwise.
    #[serde(default)]
    pub hosts: u64,
    /// Coordinators of a replicated deployment alive when the collection started that did not
    /// answer in time (their hosts were not swept).
    #[serde(default)]
    pub hosts_unanswered: u64,
    /// Blobs removed from a replicated store's bucket (`atelier-blob-store`), where no shard
    /// references them and the grace period has passed, and their bytes.
    #[serde(default)]
    pub removed_stored_blobs: u64,
    #[serde(default)]
    pub freed_stored_bytes: u64,
    /// Blobs the bucket keeps.
    #[serde(default)]
    pub kept_stored_blobs: u64,
}

impl Collected {
    /// This collection and `other`'s (of another host) together.
    pub fn add(&mut self, other: &Collected) {
        self.removed_blobs += other.removed_blobs;
        self.freed_bytes += other.freed_bytes;
        self.kept_blobs += other.kept_blobs;
        self.removed_tables += other.removed_tables;
        self.hosts += other.hosts;
        self.hosts_unanswered += other.hosts_unanswered;
        self.removed_stored_blobs += other.removed_stored_blobs;
        self.freed_stored_bytes += other.freed_stored_bytes;
        self.kept_stored_blobs += other.kept_stored_blobs;
    }
}

/// What a context item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextKind {
    /// The workbench's situation: project-specific state (one per workbench).
    Situation,
    /// A skill: a `SKILL.md` and the files it references.
    Skill,
}

/// One file of a context item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextFile {
    pub path: String,
    pub text: String,
}

/// A context item, injected into every model call of the workbench's jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextItem {
    /// `situation` for the situation; a skill's name otherwise.
    pub name: String,
    pub kind: ContextKind,
    /// A situation has one file; a skill `SKILL.md` first, then its references.
    pub files: Vec<ContextFile>,
}

/// `atelier.workshop.context_add`: add (or replace, by name) a context item.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddContextItem {
    pub v: u16,
    pub workbench: String,
    pub item: ContextItem,
}

/// `atelier.workshop.context_list`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListContextItems {
    pub v: u16,
    pub workbench: String,
}

/// `atelier.workshop.context_remove`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoveContextItem {
    pub v: u16,
    pub workbench: String,
    pub name: String,
}
