//! Workbench state as manifests in sled over content-addressed blobs, and the workshop around
//! it: the conversation, draft revisions, checkpoints.
//!
//! Published, draft and checkpoints are manifests (`path → entry`). Publish, discard, draft
//! writes and every workshop change are single sled transactions, each committed by the
//! DraftStore (through its [`Store`](crate::storage::Store)) before it answers, so each is
//! atomic and durable. Nothing here commits of its own.
//!
//! - `tx`: the transaction over manifests, records, workshop and jobs, and the workshop keys.
//! - `conversation`: messages, one job at a time, rewind, regenerate, model switches.
//! - `checkpoints`: publish, discard, checkpoints, restore, retention, blob collection.
//! - `context_items`: the situation and skills injected into every model call.
//! - `current_files`: the files an agent sees, kept in memory between writes.

mod checkpoints;
mod context_items;
mod conversation;
mod current_files;
mod draft_origin;
mod refusals;
mod tx;

pub use checkpoints::DEFAULT_CHECKPOINTS_KEPT;
pub use conversation::{Accepted, RewindDraft, TurnEnd};
pub use draft_origin::DEFAULT_STALE_DRAFT_SECS;
pub use tx::DRAFT_REVISIONS_KEPT;

use std::collections::BTreeMap;

use atelier_messages::approval::ApprovalPolicy;
use atelier_messages::path::{self, kind_of, normalize};
use atelier_messages::store::{
    BlobRef, DraftDiff, FileContent, Listing, ManifestEntry, View, WorkbenchInfo, Written,
};
use atelier_messages::tool::DraftChanges;
use atelier_messages::{ErrorBody, ErrorCode, now_ms};
use serde::{Deserialize, Serialize};

use crate::blobs::BlobDir;
use crate::error::CoordinatorError;
use crate::storage::txn::{abort, flatten};
use crate::storage::{self, Records, Storage, trees};
use atelier_transport::failpoint;
use current_files::CurrentFiles;

/// A manifest: path → entry, ordered by path.
pub type Manifest = BTreeMap<String, ManifestEntry>;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkbenchRecord {
    name: String,
    created_at_ms: u64,
    #[serde(default)]
    checkpoints: u64,
    /// The approval policy of jobs on this workbench that set none.
    #[serde(default)]
    approvals: Option<ApprovalPolicy>,
}

/// What the store keeps of an applied call: the write, and the tool's answer so that a re-sent
/// call gets the same answer instead of one recomputed against the changed draft.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppliedCall {
    #[serde(flatten)]
    pub written: Written,
    #[serde(default)]
    pub output: Option<serde_json::Value>,
}

/// Blobs up to this size are kept in sled (durable with their manifest, one commit for both)
/// rather than fsynced as files of their own.
pub use atelier_messages::store::INLINE_BLOB_BYTES;

/// Where a stored blob's content is: small blobs in sled, large ones as files.
#[derive(Debug)]
pub enum BlobSource {
    Bytes(Vec<u8>),
    File(std::path::PathBuf, u64),
}

/// Longest workbench name.
pub const MAX_NAME_LEN: usize = atelier_messages::path::MAX_WORKBENCH_NAME_LEN;

/// The workbench and draft operations behind the DraftStore actor (all blocking).
#[derive(Debug, Clone)]
pub struct Workbenches {
    storage: Storage,
    blobs: BlobDir,
    /// Checkpoints kept per workbench (older ones are pruned).
    checkpoints_kept: u64,
    /// The table databases of the workers sharing the data directory, swept by `gc`.
    table_cache: Option<std::path::PathBuf>,
    /// How old a draft is before it is pointed out.
    stale_draft_after: std::time::Duration,
    /// Each workbench's current files as last read, while no write moved them.
    current: std::sync::Arc<CurrentFiles>,
}

fn key(workbench: &str, slot: &str) -> Vec<u8> {
    format!("{workbench}\u{0}{slot}").into_bytes()
}

fn checkpoint_slot(id: u64) -> String {
    format!("ckpt\u{0}{id:012}")
}

fn not_found(workbench: &str) -> CoordinatorError {
    ErrorBody::new(
        ErrorCode::NotFound,
        format!("no workbench named `{workbench}`; create it with `atelier wb create {workbench}`"),
    )
    .into()
}

fn validate_name(name: &str) -> Result<(), CoordinatorError> {
    if atelier_messages::path::is_workbench_name(name) {
        return Ok(());
    }
    Err(ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!("workbench name {name:?} must be 1-{MAX_NAME_LEN} characters of A-Z a-z 0-9 . _ - and not start with a dot"),
    )
    .into())
}

/// Refuses a manifest where one of `added` is a file beside a folder of the same name.
fn refuse_clashes(manifest: &Manifest, added: &[ManifestEntry]) -> Result<(), CoordinatorError> {
    for entry in added {
        if let Some(existing) = path::clash(manifest.keys().map(String::as_str), &entry.path) {
            return Err(path::clash_error(&entry.path, existing).into());
        }
    }
    Ok(())
}

impl Records for Workbenches {
    fn storage(&self) -> &Storage {
        &self.storage
    }
}

impl Workbenches {
    pub fn new(storage: Storage, blobs: BlobDir) -> Self {
        Self {
            current: std::sync::Arc::new(CurrentFiles::new(&storage)),
            storage,
            blobs,
            checkpoints_kept: DEFAULT_CHECKPOINTS_KEPT,
            table_cache: None,
            stale_draft_after: std::time::Duration::from_secs(DEFAULT_STALE_DRAFT_SECS),
        }
    }

    /// Points out drafts older than `after`.
    pub fn with_stale_draft_after(mut self, after: std::time::Duration) -> Self {
        self.stale_draft_after = after;
        self
    }

    /// Lets garbage collection also remove the table databases under `dir` whose file (by
    /// digest) no blob is left of.
    pub fn with_table_cache(mut self, dir: std::path::PathBuf) -> Self {
        self.table_cache = Some(dir);
        self
    }

    /// Keeps the last `kept` checkpoints of each workbench (at least one).
    pub fn with_checkpoints_kept(mut self, kept: u64) -> Self {
        self.checkpoints_kept = kept.max(1);
        self
    }

    fn record(&self, name: &str) -> Result<WorkbenchRecord, CoordinatorError> {
        validate_name(name)?;
        storage::get(&self.storage.tree(trees::WORKBENCHES)?, name.as_bytes())?
            .ok_or_else(|| not_found(name))
    }

    fn manifest(&self, workbench: &str, slot: &str) -> Result<Option<Manifest>, CoordinatorError> {
        storage::get(&self.storage.tree(trees::MANIFESTS)?, &key(workbench, slot))
    }

    pub fn create(&self, name: &str) -> Result<WorkbenchInfo, CoordinatorError> {
        validate_name(name)?;
        let tree = self.storage.tree(trees::WORKBENCHES)?;
        let record = WorkbenchRecord {
            name: name.to_string(),
            created_at_ms: now_ms(),
            checkpoints: 0,
            approvals: None,
        };
        let inserted = tree.compare_and_swap(
            name.as_bytes(),
            None as Option<&[u8]>,
            Some(storage::encode(&record)?),
        )?;
        if !inserted {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("workbench `{name}` already exists"),
            )
            .into());
        }
        self.storage
            .tree(trees::MANIFESTS)?
            .insert(key(name, "published"), storage::encode(&Manifest::new())?)?;
        self.info(name)
    }

    pub fn info(&self, name: &str) -> Result<WorkbenchInfo, CoordinatorError> {
        let record = self.record(name)?;
        let published = self.manifest(name, "published")?.unwrap_or_default();
        Ok(WorkbenchInfo {
            name: record.name,
            created_at_ms: record.created_at_ms,
            file_count: published.len() as u64,
            has_draft: self.manifest(name, "draft")?.is_some(),
            checkpoints: record.checkpoints,
            approvals: record.approvals,
            draft: self.draft_origin(name)?,
        })
    }

    /// Sets the approval policy of the workbench's future jobs.
    pub fn set_approvals(
        &self,
        name: &str,
        approvals: ApprovalPolicy,
    ) -> Result<WorkbenchInfo, CoordinatorError> {
        let mut record = self.record(name)?;
        record.approvals = Some(approvals);
        self.storage
            .tree(trees::WORKBENCHES)?
            .insert(name.as_bytes(), storage::encode(&record)?)?;
        self.info(name)
    }

    pub fn list(&self) -> Result<Vec<WorkbenchInfo>, CoordinatorError> {
        let tree = self.storage.tree(trees::WORKBENCHES)?;
        let mut out = Vec::new();
        for entry in tree.iter() {
            let (name, _) = entry?;
            out.push(self.info(&String::from_utf8_lossy(&name))?);
        }
        Ok(out)
    }

    /// Adds files to the published state (a user action; refused while a draft exists).
    pub fn add(
        &self,
        workbench: &str,
        files: Vec<FileContent>,
    ) -> Result<Listing, CoordinatorError> {
        self.record(workbench)?;
        if self.manifest(workbench, "draft")?.is_some() {
            return Err(ErrorBody::new(
                ErrorCode::DraftExists,
                format!(
                    "workbench `{workbench}` has a draft; publish or discard it before adding files"
                ),
            )
            .into());
        }
        let entries = self.store_files(files, true)?;
        let manifests = self.storage.tree(trees::MANIFESTS)?;
        storage::transaction([&manifests], |[tree]| {
            let mut published =
                tx::get::<Manifest>(&tree, &key(workbench, "published"))?.unwrap_or_default();
            for entry in &entries {
                published.insert(entry.path.clone(), entry.clone());
            }
            refuse_clashes(&published, &entries).map_err(abort)?;
            tx::put(&tree, &key(workbench, "published"), &published)
        })
        .map_err(flatten)?;
        self.list_files(workbench, View::Published)
    }

    /// Validates paths and stores contents as blobs; small ones are also written to the blob
    /// directory for this host's workers when `for_host_workers` (files added by users, which
    /// every job reads), not for a tool call's writes (most are never read back; a worker that
    /// does read one asks the store for it, `atelier.store.blob`).
    fn store_files(
        &self,
        files: Vec<FileContent>,
        for_host_workers: bool,
    ) -> Result<Vec<ManifestEntry>, CoordinatorError> {
        if files.is_empty() {
            return Err(ErrorBody::new(ErrorCode::ValidationFailed, "no files given").into());
        }
        let mut entries = Vec::with_capacity(files.len());
        for file in files {
            let path = normalize(&file.path)?;
            let (digest, size) = match &file.blob {
                Some(blob) => (self.staged_blob(blob)?, blob.size),
                None => (
                    self.put_blob(&file.content, for_host_workers)?,
                    file.content.len() as u64,
                ),
            };
            entries.push(ManifestEntry {
                kind: kind_of(&path).to_string(),
                size,
                path,
                digest,
            });
        }
        Ok(entries)
    }

    /// A blob the store already imported from the bucket into the blob directory (durably).
    fn staged_blob(&self, blob: &BlobRef) -> Result<String, CoordinatorError> {
        if self.blobs.has(&blob.digest, blob.size) {
            return Ok(blob.digest.clone());
        }
        Err(ErrorBody::new(
            ErrorCode::NotFound,
            format!(
                "blob {} ({} bytes) was not imported from the blob bucket; send it again",
                blob.digest, blob.size
            ),
        )
        .into())
    }

    /// Where a file with the blob `digest` can be read for staging in the bucket.
    pub fn blob_source(&self, digest: &str) -> Result<BlobSource, CoordinatorError> {
        if let Some(bytes) = self.storage.tree(trees::BLOBS)?.get(digest.as_bytes())? {
            return Ok(BlobSource::Bytes(bytes.to_vec()));
        }
        let here = self.blobs.fetch(digest)?;
        let path = self.blobs.path_for(digest).filter(|_| here);
        let Some(path) = path else {
            return Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!("no blob with digest `{digest}`"),
            )
            .into());
        };
        let size = std::fs::metadata(&path)
            .map_err(crate::error::io_error(&path))?
            .len();
        Ok(BlobSource::File(path, size))
    }

    /// The blob directory.
    pub fn blob_dir(&self) -> &BlobDir {
        &self.blobs
    }

    fn resolve(&self, workbench: &str, view: View) -> Result<(View, Manifest), CoordinatorError> {
        self.record(workbench)?;
        let draft = self.manifest(workbench, "draft")?;
        match (view, draft) {
            (View::Draft | View::Current, Some(draft)) => Ok((View::Draft, draft)),
            (View::Draft, None) => Err(ErrorBody::new(
                ErrorCode::NoDraft,
                format!("workbench `{workbench}` has no draft"),
            )
            .into()),
            _ => Ok((
                View::Published,
                self.manifest(workbench, "published")?.unwrap_or_default(),
            )),
        }
    }

    pub fn list_files(&self, workbench: &str, view: View) -> Result<Listing, CoordinatorError> {
        let (resolved, manifest) = self.resolve(workbench, view)?;
        Ok(Listing {
            workbench: workbench.to_string(),
            view: resolved,
            has_draft: self.manifest(workbench, "draft")?.is_some(),
            files: manifest.into_values().collect(),
            draft: self.draft_origin(workbench)?,
        })
    }

    pub fn read(
        &self,
        workbench: &str,
        path: &str,
        view: View,
    ) -> Result<(ManifestEntry, Vec<u8>), CoordinatorError> {
        let entry = self.entry(workbench, path, view)?;
        let bytes = self.blob(&entry.digest)?;
        Ok((entry, bytes))
    }

    /// A file's manifest entry in a view.
    pub fn entry(
        &self,
        workbench: &str,
        path: &str,
        view: View,
    ) -> Result<ManifestEntry, CoordinatorError> {
        let path = normalize(path)?;
        let (_, manifest) = self.resolve(workbench, view)?;
        manifest.get(&path).cloned().ok_or_else(|| {
            CoordinatorError::from(ErrorBody::new(
                ErrorCode::NotFound,
                format!("no file `{path}` in workbench `{workbench}`"),
            ))
        })
    }

    /// Stores a blob. A small one goes into sled, where the commit of its manifest
    /// makes it durable too (no fsync of its own), and, `for_host_workers`, into the blob
    /// directory as a cache for workers on this host; a large one is written to the blob
    /// directory durably.
    fn put_blob(&self, bytes: &[u8], for_host_workers: bool) -> Result<String, CoordinatorError> {
        if bytes.len() > INLINE_BLOB_BYTES {
            return self.blobs.put(bytes);
        }
        let digest = match for_host_workers {
            true => self.blobs.put_cached(bytes)?,
            false => crate::blobs::digest_of(bytes),
        };
        self.storage
            .tree(trees::BLOBS)?
            .insert(digest.as_bytes(), bytes)?;
        Ok(digest)
    }

    pub fn blob(&self, digest: &str) -> Result<Vec<u8>, CoordinatorError> {
        if let Some(bytes) = self.storage.tree(trees::BLOBS)?.get(digest.as_bytes())? {
            return Ok(bytes.to_vec());
        }
        self.blobs.get(digest)?.ok_or_else(|| {
            ErrorBody::new(
                ErrorCode::NotFound,
                format!("no blob with digest `{digest}`"),
            )
            .into()
        })
    }

    pub fn diff(&self, workbench: &str) -> Result<DraftDiff, CoordinatorError> {
        self.record(workbench)?;
        let published = self.manifest(workbench, "published")?.unwrap_or_default();
        let Some(draft) = self.manifest(workbench, "draft")? else {
            return Ok(DraftDiff {
                workbench: workbench.to_string(),
                ..DraftDiff::default()
            });
        };
        let mut diff = DraftDiff {
            workbench: workbench.to_string(),
            has_draft: true,
            ..DraftDiff::default()
        };
        for (path, entry) in &draft {
            match published.get(path) {
                None => diff.added.push(path.clone()),
                Some(old) if old.digest != entry.digest => diff.modified.push(path.clone()),
                Some(_) => {}
            }
        }
        diff.deleted = published
            .keys()
            .filter(|path| !draft.contains_key(*path))
            .cloned()
            .collect();
        Ok(diff)
    }

    /// The recorded outcome of a call id already applied to the workbench's draft.
    pub fn applied(
        &self,
        workbench: &str,
        call_id: &str,
    ) -> Result<Option<AppliedCall>, CoordinatorError> {
        let applied = self.storage.tree(trees::APPLIED_CALLS)?;
        let Some(mut previous) = storage::get::<AppliedCall>(&applied, &key(workbench, call_id))?
        else {
            return Ok(None);
        };
        previous.written.replayed = true;
        Ok(Some(previous))
    }

    /// Applies an agent's change to the draft (creating it from published), once per call id:
    /// `files` are written, then `delete` paths removed, in one transaction that also records
    /// the call's `output` for replays.
    pub fn write(
        &self,
        workbench: &str,
        call_id: &str,
        changes: DraftChanges,
        output: Option<serde_json::Value>,
    ) -> Result<Written, CoordinatorError> {
        self.record(workbench)?;
        if call_id.is_empty() {
            return Err(ErrorBody::new(ErrorCode::ValidationFailed, "call_id is required").into());
        }
        if let Some(previous) = self.applied(workbench, call_id)? {
            tracing::info!(workbench, call_id, replayed = true, "draft write");
            return Ok(previous.written);
        }
        let DraftChanges { files, delete } = changes;
        let applied_key = key(workbench, call_id);
        let applied = self.storage.tree(trees::APPLIED_CALLS)?;
        if files.is_empty() && delete.is_empty() {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                "a draft write needs files or paths to delete",
            )
            .into());
        }
        let entries = if files.is_empty() {
            Vec::new()
        } else {
            self.store_files(files, false)?
        };
        let deleted = delete
            .iter()
            .map(|path| normalize(path))
            .collect::<Result<Vec<_>, _>>()?;
        // Only a write that creates the draft records where it came from (the DraftStore runs
        // one change at a time, so the draft cannot appear in between).
        let origin = match self.manifest(workbench, "draft")? {
            Some(_) => None,
            None => Some(self.new_draft_origin(workbench)?),
        };
        let manifests = self.storage.tree(trees::MANIFESTS)?;
        let workshop = self.storage.tree(trees::WORKSHOP)?;
        let written = storage::transaction(
            [&manifests, &applied, &workshop],
            |[manifests, applied, workshop]| {
                if let Some(bytes) = applied.get(&applied_key)? {
                    let mut previous: AppliedCall = storage::decode(&bytes).map_err(abort)?;
                    previous.written.replayed = true;
                    return Ok(previous.written);
                }
                let mut draft = match tx::get::<Manifest>(&manifests, &key(workbench, "draft"))? {
                    Some(draft) => draft,
                    None => {
                        if let Some(origin) = &origin {
                            draft_origin::begin(&workshop, workbench, origin)?;
                        }
                        tx::get::<Manifest>(&manifests, &key(workbench, "published"))?
                            .unwrap_or_default()
                    }
                };
                change_draft(&mut draft, &entries, &deleted).map_err(abort)?;
                tx::put(&manifests, &key(workbench, "draft"), &draft)?;
                let written = Written {
                    files: entries.clone(),
                    deleted: deleted.clone(),
                    replayed: false,
                };
                let record = AppliedCall {
                    written: written.clone(),
                    output: output.clone(),
                };
                tx::put(&applied, &applied_key, &record)?;
                Ok(written)
            },
        )
        .map_err(flatten)?;
        failpoint::hit("store_before_flush");
        tracing::info!(
            workbench,
            call_id,
            replayed = written.replayed,
            files = written.files.len(),
            "draft write"
        );
        Ok(written)
    }
}

/// Puts `entries` into the draft's manifest and removes `deleted` from it; a path to delete
/// that the draft lacks is `NOT_FOUND`, a file over a folder (or under a file) a clash.
fn change_draft(
    draft: &mut Manifest,
    entries: &[ManifestEntry],
    deleted: &[String],
) -> Result<(), CoordinatorError> {
    for entry in entries {
        draft.insert(entry.path.clone(), entry.clone());
    }
    for path in deleted {
        if draft.remove(path).is_none() {
            return Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!("cannot delete `{path}`: no such file in the draft"),
            )
            .into());
        }
    }
    refuse_clashes(draft, entries)
}

#[cfg(test)]
mod tests;
