//! The DraftStore actor: the only writer of workbench manifests and blobs, and its handle.
//!
//! Changes (create, add, publish, discard, draft writes) are serialized through the actor's
//! mailbox, so a publish never interleaves with a draft write; each runs on a storage thread,
//! since sled and file I/O block, and is committed before it answers. Reads (listings, file
//! contents, diffs) are snapshots of manifests that changes swap atomically, so the handle runs
//! them on a storage thread directly instead of queueing them behind writes.
//!
//! Files too large to travel inline arrive in pieces (`atelier.store.upload`, [`crate::pieces`]):
//! the handle takes each into the blob directory once its digest checks, and a change that
//! names one (`FileContent::staged`) finds it there, or in a replicated store's bucket.
//!
//! The orchestrator reaches the store through a [`DraftStoreHandle`] in the same process; the
//! `atelier.store.*` verbs (see `store_service`) are the same handle behind NATS for clients
//! and for workers.

use std::sync::Arc;

use atelier_messages::approval::ApprovalPolicy;
use atelier_messages::job::JobSubmit;
use atelier_messages::shard::References;
use atelier_messages::store::{
    DraftDiff, FileContent, Listing, ManifestEntry, Published, UploadBlob, Uploaded, View,
    WorkbenchInfo, Written,
};
use atelier_messages::tool::DraftChanges;
use atelier_messages::workshop::{
    CheckpointInfo, Collected, ContextItem, ConversationMessage, History, ModelSet, Regenerate,
    Regenerated, Restored, Rewound,
};
use atelier_messages::{ErrorBody, ErrorCode};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{Notify, oneshot};

use crate::JobDefaults;
use crate::blobs::is_digest;
use crate::error::CoordinatorError;
use crate::jobs::JobRecord;
use crate::storage::{Durability, Store, blocking};
use crate::workbench::{Accepted, AppliedCall, RewindDraft, TurnEnd, Workbenches};

/// A change to run against the workbenches, serialized by the actor.
type Change = Box<dyn FnOnce(&Store<Workbenches>) + Send>;

/// Configuration of the DraftStore actor.
#[derive(Debug, Clone)]
pub struct DraftStoreConfig {
    pub workbenches: Workbenches,
    /// Told after every change (the workshop events' publisher waits on it).
    pub changed: Arc<Notify>,
}

/// The actor's state, built in `pre_start`.
pub struct DraftStoreState {
    workbenches: Store<Workbenches>,
    changed: Arc<Notify>,
}

/// The actor's messages.
pub enum DraftStoreMsg {
    /// Run one change on a storage thread; the next waits until it is done.
    Change(Change),
}

/// The DraftStore actor.
pub struct DraftStore;

impl Actor for DraftStore {
    type Msg = DraftStoreMsg;
    type State = DraftStoreState;
    type Arguments = DraftStoreConfig;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        config: DraftStoreConfig,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(DraftStoreState {
            workbenches: Store::new(config.workbenches),
            changed: config.changed,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            DraftStoreMsg::Change(change) => {
                let workbenches = state.workbenches.clone();
                // The change reports its own result; a panic in it is already logged by Tokio.
                let _ = crate::storage::run_blocking(move || {
                    change(&workbenches);
                    Ok(())
                })
                .await;
                state.changed.notify_one();
            }
        }
        Ok(())
    }
}

/// A cheap, cloneable handle to the DraftStore.
#[derive(Clone)]
pub struct DraftStoreHandle {
    actor: ActorRef<DraftStoreMsg>,
    workbenches: Store<Workbenches>,
}

impl DraftStoreHandle {
    pub async fn spawn(
        config: DraftStoreConfig,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), CoordinatorError> {
        let workbenches = Store::new(config.workbenches.clone());
        let (actor, join) = Actor::spawn(None, DraftStore, config)
            .await
            .map_err(|error| CoordinatorError::Actor(error.to_string()))?;
        Ok((Self { actor, workbenches }, join))
    }

    pub fn stop(&self) {
        self.actor.stop(None);
    }

    /// Runs `change` in the actor's order, commits it, and returns its result.
    async fn change<T: Send + 'static>(
        &self,
        change: impl FnOnce(&Workbenches) -> Result<T, CoordinatorError> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        let (sender, receiver) = oneshot::channel();
        let job: Change = Box::new(move |workbenches| {
            let _ = sender.send(workbenches.write_here(Durability::Commit, change));
        });
        self.actor
            .cast(DraftStoreMsg::Change(job))
            .map_err(|error| {
                CoordinatorError::Actor(format!("draft store unavailable: {error}"))
            })?;
        receiver
            .await
            .map_err(|_| CoordinatorError::Actor("draft store stopped mid-change".into()))?
            .map_err(ErrorBody::from)
    }

    /// Runs a read on a storage thread.
    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Workbenches) -> Result<T, CoordinatorError> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        self.workbenches.read(read).await
    }

    pub async fn create(&self, workbench: String) -> Result<WorkbenchInfo, ErrorBody> {
        self.change(move |wb| wb.create(&workbench)).await
    }

    pub async fn add(
        &self,
        workbench: String,
        files: Vec<FileContent>,
    ) -> Result<Listing, ErrorBody> {
        self.import(&files).await?;
        self.change(move |wb| wb.add(&workbench, files)).await
    }

    /// Checks that every staged file a change names is here (uploaded to this coordinator) or
    /// in a replicated store's bucket (brought here, durably): `NOT_FOUND` otherwise.
    async fn import(&self, files: &[FileContent]) -> Result<(), ErrorBody> {
        for blob in files.iter().filter_map(|file| file.blob.as_ref()) {
            let blobs = self.workbenches.records().blob_dir().clone();
            let (digest, size) = (blob.digest.clone(), blob.size);
            if !is_digest(&digest) {
                return Err(ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!("blob digest {digest:?} is not a lower-case hex sha256"),
                ));
            }
            let here = blocking(move || Ok(blobs.fetch(&digest)? && blobs.has(&digest, size)));
            if !here.await? {
                return Err(ErrorBody::new(
                    ErrorCode::NotFound,
                    format!(
                        "blob {} ({} bytes) is not in the store: upload it first \
                         (atelier.store.upload)",
                        blob.digest, blob.size
                    ),
                ));
            }
        }
        Ok(())
    }

    pub async fn publish(&self, workbench: String) -> Result<Published, ErrorBody> {
        self.change(move |wb| wb.publish(&workbench)).await
    }

    pub async fn discard(&self, workbench: String) -> Result<(), ErrorBody> {
        self.change(move |wb| wb.discard(&workbench)).await
    }

    /// Applies a tool call's changes to the draft once per call id, recording its `output`.
    pub async fn write(
        &self,
        workbench: String,
        call_id: String,
        changes: DraftChanges,
        output: Option<serde_json::Value>,
    ) -> Result<Written, ErrorBody> {
        self.import(&changes.files).await?;
        self.change(move |wb| wb.write(&workbench, &call_id, changes, output))
            .await
    }

    pub async fn set_approvals(
        &self,
        workbench: String,
        approvals: ApprovalPolicy,
    ) -> Result<WorkbenchInfo, ErrorBody> {
        self.change(move |wb| wb.set_approvals(&workbench, approvals))
            .await
    }

    /// The workbench as listed.
    pub async fn workbench(&self, workbench: String) -> Result<WorkbenchInfo, ErrorBody> {
        self.read(move |wb| wb.info(&workbench)).await
    }

    pub async fn list_workbenches(&self) -> Result<Vec<WorkbenchInfo>, ErrorBody> {
        self.read(|wb| wb.list()).await
    }

    pub async fn list_files(&self, workbench: String, view: View) -> Result<Listing, ErrorBody> {
        self.read(move |wb| wb.list_files(&workbench, view)).await
    }

    pub async fn read_file(
        &self,
        workbench: String,
        path: String,
        view: View,
    ) -> Result<(ManifestEntry, Vec<u8>), ErrorBody> {
        self.read(move |wb| wb.read(&workbench, &path, view)).await
    }

    /// A file's manifest entry, without its content.
    pub async fn file_entry(
        &self,
        workbench: String,
        path: String,
        view: View,
    ) -> Result<ManifestEntry, ErrorBody> {
        self.read(move |wb| wb.entry(&workbench, &path, view)).await
    }

    pub async fn diff(&self, workbench: String) -> Result<DraftDiff, ErrorBody> {
        self.read(move |wb| wb.diff(&workbench)).await
    }

    /// The piece of the blob `digest` at `offset`, `length` bytes long (none: the whole blob,
    /// when it is at most one piece), and the blob's size.
    pub async fn blob_piece(
        &self,
        digest: String,
        offset: u64,
        length: Option<u64>,
    ) -> Result<(Vec<u8>, u64), ErrorBody> {
        self.read(move |wb| {
            let source = wb.blob_source(&digest)?;
            crate::pieces::read_piece(source, &digest, offset, length)
        })
        .await
    }

    /// Receives a piece of an upload; the piece that completes it has the blob checked and
    /// taken into the blob directory (and a replicated store's bucket), where `add` and draft
    /// writes find it.
    pub async fn upload(&self, request: UploadBlob) -> Result<Uploaded, ErrorBody> {
        let blob = crate::pieces::check(&request).map_err(ErrorBody::from)?;
        let whole = Uploaded {
            received: blob.size,
            complete: true,
        };
        let blobs = self.workbenches.records().blob_dir().clone();
        if blobs.has(&blob.digest, blob.size) {
            return Ok(whole);
        }
        let dir = blobs.uploads_dir();
        let received = blocking(move || crate::pieces::receive(&dir, &request)).await?;
        let part = match received {
            crate::pieces::Received::Partial(received) => {
                return Ok(Uploaded {
                    received,
                    complete: false,
                });
            }
            crate::pieces::Received::Whole(part) => part,
        };
        let (adopting, digest) = (blobs.clone(), blob.digest.clone());
        let target = blocking(move || adopting.adopt(&part, &digest)).await?;
        blobs.replicate(&target, &blob).await?;
        tracing::info!(digest = %blob.digest, size = blob.size, "upload received");
        Ok(whole)
    }

    /// The recorded outcome of a call id already applied to `workbench`'s draft.
    pub async fn applied(
        &self,
        workbench: String,
        call_id: String,
    ) -> Result<Option<AppliedCall>, ErrorBody> {
        self.read(move |wb| wb.applied(&workbench, &call_id)).await
    }

    /// What a tool call about to be sent needs, read at once: the recorded outcome of
    /// `call_id` if its changes were already applied (asked only for a call that writes), and
    /// the workbench's current files — for a call that only reads, from memory when no write
    /// touched them since they were last read (no storage thread).
    pub async fn before_call(
        &self,
        workbench: String,
        call_id: String,
        writes: bool,
    ) -> Result<(Option<AppliedCall>, Arc<Vec<ManifestEntry>>), ErrorBody> {
        if !writes && let Some(files) = self.workbenches.records().kept_current_files(&workbench) {
            return Ok((None, files));
        }
        self.read(move |wb| {
            let applied = if writes {
                wb.applied(&workbench, &call_id)?
            } else {
                None
            };
            Ok((applied, wb.current_files(&workbench)?))
        })
        .await
    }

    /// Records a submitted message and its job, or refuses it (see [`Accepted`]); with
    /// `only_if_idle`, a workbench answering another job records nothing (`WORKBENCH_BUSY`).
    pub async fn accept_message(
        &self,
        mut submit: JobSubmit,
        defaults: JobDefaults,
        only_if_idle: bool,
    ) -> Result<Accepted, ErrorBody> {
        // A workflow that only reads changes no draft, so a draft does not refuse it.
        submit.continue_draft |= submit
            .workflow
            .as_ref()
            .is_some_and(atelier_agents::catalog::only_reads);
        self.change(move |wb| match only_if_idle {
            true => wb.accept_message_if_idle(&submit, &defaults),
            false => wb.accept_message(&submit, &defaults),
        })
        .await
    }

    /// Records the end of a job's turn in its workbench's conversation.
    pub async fn finish_turn(
        &self,
        workbench: String,
        end: TurnEnd,
    ) -> Result<Option<ConversationMessage>, ErrorBody> {
        self.change(move |wb| wb.finish_turn(&workbench, &end))
            .await
    }

    /// A resumed job holds its workbench again.
    pub async fn resume_turn(&self, workbench: String, job_id: String) -> Result<(), ErrorBody> {
        self.change(move |wb| wb.resume_turn(&workbench, &job_id))
            .await
    }

    pub async fn rewind(
        &self,
        workbench: String,
        message_id: String,
        how: RewindDraft,
    ) -> Result<Rewound, ErrorBody> {
        self.change(move |wb| wb.rewind(&workbench, &message_id, how))
            .await
    }

    /// What a regenerate would discard (nothing changes).
    pub async fn regenerate_preview(&self, request: Regenerate) -> Result<Regenerated, ErrorBody> {
        self.read(move |wb| wb.regenerate_preview(&request)).await
    }

    /// Prepares a regenerate: the job to start and what it replaced.
    pub async fn regenerate(
        &self,
        request: Regenerate,
        job_id: String,
        defaults: JobDefaults,
    ) -> Result<(JobRecord, Regenerated), ErrorBody> {
        self.change(move |wb| wb.regenerate(&request, &job_id, &defaults))
            .await
    }

    pub async fn set_model(&self, workbench: String, model: String) -> Result<ModelSet, ErrorBody> {
        self.change(move |wb| wb.set_model(&workbench, &model))
            .await
    }

    pub async fn create_checkpoint(
        &self,
        workbench: String,
        note: Option<String>,
    ) -> Result<CheckpointInfo, ErrorBody> {
        self.change(move |wb| wb.create_checkpoint(&workbench, note))
            .await
    }

    pub async fn restore(
        &self,
        workbench: String,
        checkpoint_id: String,
    ) -> Result<Restored, ErrorBody> {
        self.change(move |wb| wb.restore(&workbench, &checkpoint_id))
            .await
    }

    /// Collects unreferenced blobs, in the actor's order (never between a write's blobs and
    /// the manifest that references them).
    pub async fn collect_garbage(&self) -> Result<Collected, ErrorBody> {
        self.change(|wb| wb.collect_garbage()).await
    }

    /// A page of the digests this store references (in digest order, after `after`).
    pub async fn references(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> Result<References, ErrorBody> {
        let (digests, more) = self
            .read(move |wb| wb.references(after.as_deref(), limit))
            .await?;
        Ok(References { digests, more })
    }

    pub async fn history(&self, workbench: String) -> Result<History, ErrorBody> {
        self.read(move |wb| wb.history(&workbench)).await
    }

    pub async fn check_message(
        &self,
        workbench: String,
        continue_draft: bool,
    ) -> Result<(), ErrorBody> {
        self.read(move |wb| wb.check_message(&workbench, continue_draft))
            .await
    }

    pub async fn checkpoints(&self, workbench: String) -> Result<Vec<CheckpointInfo>, ErrorBody> {
        self.read(move |wb| wb.checkpoints(&workbench)).await
    }

    pub async fn add_context_item(
        &self,
        workbench: String,
        item: ContextItem,
    ) -> Result<ContextItem, ErrorBody> {
        self.change(move |wb| wb.add_context_item(&workbench, item))
            .await
    }

    pub async fn remove_context_item(
        &self,
        workbench: String,
        name: String,
    ) -> Result<(), ErrorBody> {
        self.change(move |wb| wb.remove_context_item(&workbench, &name))
            .await
    }

    pub async fn context_items(&self, workbench: String) -> Result<Vec<ContextItem>, ErrorBody> {
        self.read(move |wb| wb.context_items(&workbench)).await
    }

    /// The conversation before `message_id`.
    /// Keeps the model's summary of the conversation (see `compression`).
    pub async fn record_summary(
        &self,
        workbench: String,
        through: String,
        summarized: Vec<String>,
        summary: String,
    ) -> Result<ConversationMessage, ErrorBody> {
        self.change(move |wb| wb.record_summary(&workbench, &through, summarized, &summary))
            .await
    }

    pub async fn messages_before(
        &self,
        workbench: String,
        message_id: Option<String>,
    ) -> Result<Vec<ConversationMessage>, ErrorBody> {
        self.read(move |wb| wb.messages_before(&workbench, message_id.as_deref()))
            .await
    }
}
