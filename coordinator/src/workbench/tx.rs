//! One sled transaction over every tree a workshop change touches (manifests, workbench
//! records, the workshop tree, jobs), with typed access to what is in them.
//!
//! The workshop tree holds, per workbench `<wb>`:
//! - `<wb>\0state`: [`WorkshopState`] (next message number, head, default model, running job);
//! - `<wb>\0msg\0<n>`: the conversation's messages;
//! - `<wb>\0rev\0<n>`: the draft revision at message `n` (the draft manifest, or none);
//! - `<wb>\0ckpt\0<id>`: checkpoint metadata (the manifest is in the manifests tree);
//! - `<wb>\0ctx\0<name>`: context items;
//! - `<wb>\0draft-origin`: when and by what the draft was started;
//!
//! and, for all workbenches, `\0next-event`: the next workshop event's outbox id.

use atelier_messages::PROTOCOL_VERSION;
use atelier_messages::approval::ApprovalPolicy;
use atelier_messages::now_ms;
use atelier_messages::store::DraftOrigin;
use atelier_messages::workshop::{
    ConversationMessage, RevisionCreated, Role, StateChange, SystemEvent, WorkshopEvent,
    WorkshopEventKind,
};
use serde::{Deserialize, Serialize};

use super::{Manifest, WorkbenchRecord, Workbenches, key};
use crate::error::CoordinatorError;
use crate::storage::txn::flatten;
use crate::storage::{self, TxTree, trees};

/// The workshop tree's key of the next outbox id: no workbench name is empty, so no
/// workbench's key starts with `\0`.
const NEXT_EVENT_KEY: &[u8] = b"\0next-event";

/// How many draft revisions a workbench keeps (the seed's default).
pub const DRAFT_REVISIONS_KEPT: u64 = 200;

pub(crate) use crate::storage::txn::{TxResult, get, put};

/// The workshop state of one workbench.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkshopState {
    /// The number the next message gets (ids are `m<n>`, from 1, never reused).
    #[serde(default)]
    pub next_seq: u64,
    /// The last message.
    #[serde(default)]
    pub head: Option<u64>,
    /// The default model (`atelier wb set-model`).
    #[serde(default)]
    pub model: Option<String>,
    /// The model the last user message was asked with.
    #[serde(default)]
    pub last_model: Option<String>,
    /// The job answering the head, while one runs.
    #[serde(default)]
    pub running_job: Option<String>,
}

/// A draft revision: the draft manifest at a message (none: no draft then).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Revision {
    #[serde(default)]
    pub draft: Option<Manifest>,
}

pub(crate) fn message_id(seq: u64) -> String {
    format!("m{seq}")
}

/// The number of a message id, if it is one.
pub(crate) fn parse_message_id(id: &str) -> Option<u64> {
    id.strip_prefix('m')?.parse().ok().filter(|seq| *seq > 0)
}

pub(crate) fn seq_slot(kind: &str, seq: u64) -> String {
    format!("{kind}\u{0}{seq:012}")
}

pub(crate) fn state_key(workbench: &str) -> Vec<u8> {
    key(workbench, "state")
}

pub(crate) fn message_key(workbench: &str, seq: u64) -> Vec<u8> {
    key(workbench, &seq_slot("msg", seq))
}

pub(crate) fn revision_key(workbench: &str, seq: u64) -> Vec<u8> {
    key(workbench, &seq_slot("rev", seq))
}

/// The trees of one transaction.
pub(crate) struct Tx<'a> {
    pub manifests: &'a TxTree<'a>,
    pub records: &'a TxTree<'a>,
    pub workshop: &'a TxTree<'a>,
    pub jobs: &'a TxTree<'a>,
    pub outbox: &'a TxTree<'a>,
}

/// A message about to be appended.
pub(crate) struct NewMessage {
    pub role: Role,
    pub text: String,
    pub job_id: Option<String>,
    pub model: Option<String>,
    pub event: Option<SystemEvent>,
}

impl NewMessage {
    pub fn system(event: SystemEvent, text: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            text: text.into(),
            job_id: None,
            model: None,
            event: Some(event),
        }
    }
}

/// An event of `kind` about `workbench`, now, telling nothing more yet.
pub(crate) fn event(workbench: &str, kind: WorkshopEventKind) -> WorkshopEvent {
    WorkshopEvent {
        v: PROTOCOL_VERSION,
        workbench: workbench.to_string(),
        at_ms: now_ms(),
        kind,
        message: None,
        revision: None,
        context: None,
        change: None,
    }
}

impl Tx<'_> {
    /// Queues `event` for its stream, durable with the change it tells of. Its id (the
    /// outbox key, and the stream's de-duplication id) grows across coordinators taking a
    /// replicated store over: the next one is kept in the store, not only in sled's generator.
    pub fn emit(&self, event: &WorkshopEvent) -> TxResult<()> {
        let stored: u64 = get(self.workshop, NEXT_EVENT_KEY)?.unwrap_or(0);
        let id = stored.max(self.outbox.generate_id()?);
        put(self.workshop, NEXT_EVENT_KEY, &(id + 1))?;
        put(self.outbox, &id.to_be_bytes(), event)
    }

    pub fn draft(&self, workbench: &str) -> TxResult<Option<Manifest>> {
        get(self.manifests, &key(workbench, "draft"))
    }

    pub fn published(&self, workbench: &str) -> TxResult<Manifest> {
        Ok(get(self.manifests, &key(workbench, "published"))?.unwrap_or_default())
    }

    /// Replaces the draft (none: removes it).
    pub fn set_draft(&self, workbench: &str, draft: Option<&Manifest>) -> TxResult<()> {
        match draft {
            Some(draft) => {
                if self.draft(workbench)?.is_none() {
                    let brought_back = DraftOrigin {
                        started_at_ms: now_ms(),
                        job_id: None,
                        message_id: None,
                        batch_id: None,
                        stale: false,
                    };
                    super::draft_origin::begin(self.workshop, workbench, &brought_back)?;
                }
                put(self.manifests, &key(workbench, "draft"), draft)
            }
            None => {
                self.manifests.remove(key(workbench, "draft"))?;
                super::draft_origin::end(self.workshop, workbench)
            }
        }
    }

    /// The approval policy the workbench gives jobs that name none (`atelier wb approvals`).
    pub fn approvals(&self, workbench: &str) -> TxResult<Option<ApprovalPolicy>> {
        let record: Option<WorkbenchRecord> = get(self.records, workbench.as_bytes())?;
        Ok(record.and_then(|record| record.approvals))
    }

    pub fn state(&self, workbench: &str) -> TxResult<WorkshopState> {
        let mut state: WorkshopState =
            get(self.workshop, &state_key(workbench))?.unwrap_or_default();
        state.next_seq = state.next_seq.max(1);
        Ok(state)
    }

    pub fn set_state(&self, workbench: &str, state: &WorkshopState) -> TxResult<()> {
        put(self.workshop, &state_key(workbench), state)
    }

    pub fn message(&self, workbench: &str, seq: u64) -> TxResult<Option<ConversationMessage>> {
        get(self.workshop, &message_key(workbench, seq))
    }

    pub fn revision(&self, workbench: &str, seq: u64) -> TxResult<Option<Revision>> {
        get(self.workshop, &revision_key(workbench, seq))
    }

    /// Appends a message at the head, with the draft as it is now in this transaction as its
    /// revision; prunes the revision that falls out of [`DRAFT_REVISIONS_KEPT`].
    pub fn append(
        &self,
        workbench: &str,
        state: &mut WorkshopState,
        message: NewMessage,
    ) -> TxResult<ConversationMessage> {
        self.append_telling(workbench, state, message, None)
    }

    /// [`Tx::append`], the event telling of the message also carrying `change` (what a
    /// publish, discard or restore did to the files).
    pub fn append_telling(
        &self,
        workbench: &str,
        state: &mut WorkshopState,
        message: NewMessage,
        change: Option<StateChange>,
    ) -> TxResult<ConversationMessage> {
        let seq = state.next_seq.max(1);
        let stored = ConversationMessage {
            id: message_id(seq),
            role: message.role,
            text: message.text,
            at_ms: now_ms(),
            job_id: message.job_id,
            model: message.model,
            event: message.event,
        };
        put(self.workshop, &message_key(workbench, seq), &stored)?;
        let revision = Revision {
            draft: self.draft(workbench)?,
        };
        put(self.workshop, &revision_key(workbench, seq), &revision)?;
        let told = WorkshopEvent {
            message: Some(stored.clone()),
            change,
            ..event(workbench, WorkshopEventKind::of(&stored))
        };
        self.emit(&told)?;
        let recorded = RevisionCreated {
            message_id: stored.id.clone(),
            has_draft: revision.draft.is_some(),
            files: revision
                .draft
                .as_ref()
                .map_or(0, |draft| draft.len() as u64),
        };
        self.emit(&WorkshopEvent {
            revision: Some(recorded),
            ..event(workbench, WorkshopEventKind::DraftRevisionCreated)
        })?;
        if seq > DRAFT_REVISIONS_KEPT {
            self.workshop
                .remove(revision_key(workbench, seq - DRAFT_REVISIONS_KEPT))?;
        }
        state.next_seq = seq + 1;
        state.head = Some(seq);
        self.set_state(workbench, state)?;
        Ok(stored)
    }

    /// Removes every message (and revision) after `seq`; returns their ids.
    pub fn truncate_after(
        &self,
        workbench: &str,
        state: &mut WorkshopState,
        seq: u64,
    ) -> TxResult<Vec<String>> {
        let mut removed = Vec::new();
        for later in seq + 1..state.next_seq {
            if self
                .workshop
                .remove(message_key(workbench, later))?
                .is_some()
            {
                removed.push(message_id(later));
            }
            self.workshop.remove(revision_key(workbench, later))?;
        }
        state.head = Some(seq);
        Ok(removed)
    }

    /// Forgets every draft revision up to the head (the draft they belong to is gone).
    pub fn prune_revisions(&self, workbench: &str, state: &WorkshopState) -> TxResult<()> {
        let first = state.next_seq.saturating_sub(DRAFT_REVISIONS_KEPT).max(1);
        for seq in first..state.next_seq {
            self.workshop.remove(revision_key(workbench, seq))?;
        }
        Ok(())
    }
}

impl Workbenches {
    /// Runs `work` in one transaction over manifests, workbench records, workshop and jobs.
    pub(crate) fn transact<T>(
        &self,
        work: impl Fn(&Tx<'_>) -> TxResult<T>,
    ) -> Result<T, CoordinatorError> {
        let manifests = self.storage.tree(trees::MANIFESTS)?;
        let records = self.storage.tree(trees::WORKBENCHES)?;
        let workshop = self.storage.tree(trees::WORKSHOP)?;
        let jobs = self.storage.tree(trees::JOBS)?;
        let outbox = self.storage.tree(trees::WORKSHOP_OUTBOX)?;
        storage::transaction(
            [&manifests, &records, &workshop, &jobs, &outbox],
            |[manifests, records, workshop, jobs, outbox]| {
                work(&Tx {
                    manifests: &manifests,
                    records: &records,
                    workshop: &workshop,
                    jobs: &jobs,
                    outbox: &outbox,
                })
            },
        )
        .map_err(flatten)
    }
}
