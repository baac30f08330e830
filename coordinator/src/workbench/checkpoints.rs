//! Publish, discard, checkpoints (list, by hand, restore), their retention, and garbage
//! collection of blobs that nothing references any more.
//!
//! A checkpoint is a saved published state: its manifest in the manifests tree
//! (`<wb>\0ckpt\0<id>`) and its metadata in the workshop tree. Each change is one transaction
//! that also records its system event in the conversation; the DraftStore commits it before it
//! answers.

use std::collections::BTreeSet;

use atelier_messages::store::Published;
use atelier_messages::workshop::{
    CheckpointInfo, CheckpointReason, Collected, Restored, StateChange, SystemEvent,
};
use atelier_messages::{ErrorBody, ErrorCode, now_ms};
use serde::{Deserialize, Serialize};

use super::refusals::ensure_idle;
use super::tx::{NewMessage, Tx, TxResult, WorkshopState, get, put};
use super::{Manifest, WorkbenchRecord, Workbenches, abort, checkpoint_slot, key, not_found};
use crate::error::CoordinatorError;
use crate::storage::{self, trees};
use atelier_transport::failpoint;

/// How many checkpoints a workbench keeps unless configured otherwise.
pub const DEFAULT_CHECKPOINTS_KEPT: u64 = 50;

/// What is kept of a checkpoint besides its manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CheckpointMeta {
    at_ms: u64,
    reason: CheckpointReason,
    #[serde(default)]
    note: Option<String>,
}

fn meta_key(workbench: &str, id: u64) -> Vec<u8> {
    key(workbench, &checkpoint_slot(id))
}

fn no_draft(workbench: &str, action: &str) -> CoordinatorError {
    ErrorBody::new(
        ErrorCode::NoDraft,
        format!("workbench `{workbench}` has no draft to {action}"),
    )
    .into()
}

impl Tx<'_> {
    fn workbench_record(&self, workbench: &str) -> TxResult<WorkbenchRecord> {
        get(self.records, workbench.as_bytes())?.ok_or_else(|| abort(not_found(workbench)))
    }

    /// Saves `manifest` as the workbench's next checkpoint and prunes the ones beyond `kept`.
    fn checkpoint(
        &self,
        workbench: &str,
        manifest: &Manifest,
        reason: CheckpointReason,
        note: Option<String>,
        kept: u64,
    ) -> TxResult<CheckpointInfo> {
        let mut record = self.workbench_record(workbench)?;
        record.checkpoints += 1;
        let id = record.checkpoints;
        put(self.records, workbench.as_bytes(), &record)?;
        put(
            self.manifests,
            &key(workbench, &checkpoint_slot(id)),
            manifest,
        )?;
        let meta = CheckpointMeta {
            at_ms: now_ms(),
            reason,
            note,
        };
        put(self.workshop, &meta_key(workbench, id), &meta)?;
        let mut old = id.saturating_sub(kept.max(1));
        while old > 0
            && self
                .manifests
                .get(key(workbench, &checkpoint_slot(old)))?
                .is_some()
        {
            self.manifests
                .remove(key(workbench, &checkpoint_slot(old)))?;
            self.workshop.remove(meta_key(workbench, old))?;
            old -= 1;
        }
        Ok(info(id, meta, manifest))
    }

    /// Records `event` in the conversation; its workshop event carries `change`.
    fn record_event(
        &self,
        workbench: &str,
        state: &mut WorkshopState,
        event: SystemEvent,
        text: String,
        change: Option<StateChange>,
    ) -> TxResult<()> {
        let message = NewMessage::system(event, text);
        self.append_telling(workbench, state, message, change)
            .map(|_| ())
    }
}

/// How many paths `after` adds, modifies or deletes against `before`.
fn files_changed(before: &Manifest, after: &Manifest) -> u64 {
    let added_or_modified = after
        .iter()
        .filter(|(path, entry)| {
            before
                .get(*path)
                .is_none_or(|old| old.digest != entry.digest)
        })
        .count();
    let deleted = before
        .keys()
        .filter(|path| !after.contains_key(*path))
        .count();
    (added_or_modified + deleted) as u64
}

fn info(id: u64, meta: CheckpointMeta, manifest: &Manifest) -> CheckpointInfo {
    CheckpointInfo {
        id: id.to_string(),
        at_ms: meta.at_ms,
        reason: meta.reason,
        note: meta.note,
        files: manifest.values().cloned().collect(),
    }
}

impl Workbenches {
    /// Checkpoints the published state, then makes the draft published, records the
    /// publish (naming that checkpoint) in the conversation and forgets the draft's revisions:
    /// one transaction.
    pub fn publish(&self, workbench: &str) -> Result<Published, CoordinatorError> {
        self.record(workbench)?;
        let kept = self.checkpoints_kept;
        let published = self.transact(|tx| {
            let mut state = tx.state(workbench)?;
            ensure_idle(&state, workbench)?;
            let Some(draft) = tx.draft(workbench)? else {
                return Err(abort(no_draft(workbench, "publish")));
            };
            let before = tx.published(workbench)?;
            let checkpoint =
                tx.checkpoint(workbench, &before, CheckpointReason::Publish, None, kept)?;
            put(tx.manifests, &key(workbench, "published"), &draft)?;
            tx.set_draft(workbench, None)?;
            tx.prune_revisions(workbench, &state)?;
            let event = SystemEvent::DraftPublished {
                checkpoint_id: checkpoint.id.clone(),
            };
            let text = format!(
                "published the draft; the previous state is checkpoint {} (`atelier restore {workbench} {}`)",
                checkpoint.id, checkpoint.id
            );
            let change = StateChange {
                checkpoint_id: Some(checkpoint.id.clone()),
                safety_checkpoint_id: None,
                files: draft.len() as u64,
                files_changed: files_changed(&before, &draft),
            };
            tx.record_event(workbench, &mut state, event, text, Some(change))?;
            Ok(Published {
                workbench: workbench.to_string(),
                checkpoint_id: checkpoint.id,
                files: draft.into_values().collect(),
            })
        })?;
        failpoint::hit("store_before_flush");
        Ok(published)
    }

    /// Drops the draft and its revisions, recording the discard in the conversation.
    pub fn discard(&self, workbench: &str) -> Result<(), CoordinatorError> {
        self.record(workbench)?;
        self.transact(|tx| {
            let mut state = tx.state(workbench)?;
            ensure_idle(&state, workbench)?;
            let Some(draft) = tx.draft(workbench)? else {
                return Err(abort(no_draft(workbench, "discard")));
            };
            let change = StateChange {
                files: draft.len() as u64,
                files_changed: files_changed(&tx.published(workbench)?, &draft),
                ..StateChange::default()
            };
            tx.set_draft(workbench, None)?;
            tx.prune_revisions(workbench, &state)?;
            let text = "discarded the draft".to_string();
            let event = SystemEvent::DraftDiscarded;
            tx.record_event(workbench, &mut state, event, text, Some(change))
        })?;
        Ok(())
    }

    /// Every kept checkpoint, oldest first.
    pub fn checkpoints(&self, workbench: &str) -> Result<Vec<CheckpointInfo>, CoordinatorError> {
        self.record(workbench)?;
        let manifests = self.storage.tree(trees::MANIFESTS)?;
        let workshop = self.storage.tree(trees::WORKSHOP)?;
        let prefix = key(workbench, "ckpt\u{0}");
        let mut out = Vec::new();
        for entry in manifests.scan_prefix(&prefix) {
            let (slot, bytes) = entry?;
            let Some(id) = slot[prefix.len()..]
                .iter()
                .map(|b| char::from(*b))
                .collect::<String>()
                .parse::<u64>()
                .ok()
            else {
                continue;
            };
            let manifest: Manifest = storage::decode(&bytes)?;
            // Checkpoints taken before their metadata was kept count as publishes.
            let meta =
                storage::get(&workshop, &meta_key(workbench, id))?.unwrap_or(CheckpointMeta {
                    at_ms: 0,
                    reason: CheckpointReason::Publish,
                    note: None,
                });
            out.push(info(id, meta, &manifest));
        }
        Ok(out)
    }

    /// Checkpoints the published state by hand.
    pub fn create_checkpoint(
        &self,
        workbench: &str,
        note: Option<String>,
    ) -> Result<CheckpointInfo, CoordinatorError> {
        self.record(workbench)?;
        let kept = self.checkpoints_kept;
        let created = self.transact(|tx| {
            let mut state = tx.state(workbench)?;
            let published = tx.published(workbench)?;
            let reason = CheckpointReason::Manual;
            let checkpoint = tx.checkpoint(workbench, &published, reason, note.clone(), kept)?;
            let event = SystemEvent::CheckpointCreated {
                checkpoint_id: checkpoint.id.clone(),
                reason,
            };
            let text = format!("checkpoint {} of the published state", checkpoint.id);
            tx.record_event(workbench, &mut state, event, text, None)?;
            Ok(checkpoint)
        })?;
        Ok(created)
    }

    /// Makes a checkpoint the published state; the replaced state is checkpointed first.
    /// Refused while a draft exists or a job runs.
    pub fn restore(
        &self,
        workbench: &str,
        checkpoint_id: &str,
    ) -> Result<Restored, CoordinatorError> {
        self.record(workbench)?;
        let kept = self.checkpoints_kept;
        let missing = || -> CoordinatorError {
            ErrorBody::new(
                ErrorCode::NotFound,
                format!("no checkpoint `{checkpoint_id}` in `{workbench}`; list them with `atelier checkpoints {workbench}`"),
            )
            .into()
        };
        let id: u64 = checkpoint_id.parse().map_err(|_| missing())?;
        let restored = self.transact(|tx| {
            let mut state = tx.state(workbench)?;
            ensure_idle(&state, workbench)?;
            if tx.draft(workbench)?.is_some() {
                return Err(abort(
                    ErrorBody::new(
                        ErrorCode::DraftExists,
                        format!("workbench `{workbench}` has a draft; publish or discard it before restoring a checkpoint"),
                    )
                    .into(),
                ));
            }
            let Some(target) = get::<Manifest>(tx.manifests, &key(workbench, &checkpoint_slot(id)))?
            else {
                return Err(abort(missing()));
            };
            let before = tx.published(workbench)?;
            let reason = CheckpointReason::BeforeRestore;
            let safety = tx.checkpoint(workbench, &before, reason, None, kept)?;
            put(tx.manifests, &key(workbench, "published"), &target)?;
            tx.prune_revisions(workbench, &state)?;
            let event = SystemEvent::CheckpointRestored {
                checkpoint_id: checkpoint_id.to_string(),
                safety_checkpoint_id: safety.id.clone(),
            };
            let text = format!(
                "restored checkpoint {checkpoint_id}; the replaced state is checkpoint {}",
                safety.id
            );
            let change = StateChange {
                checkpoint_id: Some(checkpoint_id.to_string()),
                safety_checkpoint_id: Some(safety.id.clone()),
                files: target.len() as u64,
                files_changed: files_changed(&before, &target),
            };
            tx.record_event(workbench, &mut state, event, text, Some(change))?;
            Ok(Restored {
                workbench: workbench.to_string(),
                checkpoint_id: checkpoint_id.to_string(),
                safety_checkpoint_id: safety.id,
                files: target.into_values().collect(),
            })
        })?;
        Ok(restored)
    }

    /// Removes every blob that no manifest (published, draft, checkpoint) and no draft revision
    /// references. Runs in the DraftStore's order, so no write is between storing its blobs
    /// and referencing them.
    pub fn collect_garbage(&self) -> Result<Collected, CoordinatorError> {
        let referenced = self.referenced()?;
        let swept = self.blobs.sweep(|digest| referenced.contains(digest))?;
        let tables = match &self.table_cache {
            Some(dir) => crate::blobs::sweep_tables(dir, |digest| referenced.contains(digest))?,
            None => crate::blobs::Swept::default(),
        };
        Ok(swept.with_tables(tables))
    }

    /// At most `limit` of the digests this store references, in order, from just after `after`;
    /// and whether more follow.
    pub fn references(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<String>, bool), CoordinatorError> {
        let referenced = self.referenced()?;
        let mut from = match after {
            Some(after) => referenced
                .range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)),
            None => referenced.range::<str, _>(..),
        };
        let page: Vec<String> = from.by_ref().take(limit).cloned().collect();
        Ok((page, from.next().is_some()))
    }

    /// Every digest a manifest (published, draft, checkpoint) or a draft revision references.
    fn referenced(&self) -> Result<BTreeSet<String>, CoordinatorError> {
        let mut referenced = BTreeSet::new();
        for entry in self.storage.tree(trees::MANIFESTS)?.iter() {
            let manifest: Manifest = storage::decode(&entry?.1)?;
            referenced.extend(manifest.into_values().map(|file| file.digest));
        }
        for entry in self.storage.tree(trees::WORKSHOP)?.iter() {
            let (slot, bytes) = entry?;
            if slot.windows(5).any(|window| window == b"\0rev\0") {
                let revision: super::tx::Revision = storage::decode(&bytes)?;
                referenced.extend(
                    revision
                        .draft
                        .unwrap_or_default()
                        .into_values()
                        .map(|f| f.digest),
                );
            }
        }
        Ok(referenced)
    }
}
