//! DraftStore requests and results (`atelier.store.<verb>`).

use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

/// One file of a manifest: a path bound to a content-addressed blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    pub path: String,
    /// Lower-case hex sha256 of the content.
    pub digest: String,
    pub size: u64,
    /// Coarse file kind from the extension (`csv`, `xlsx`, `docx`, `pptx`, `pdf`, `text`, `binary`).
    pub kind: String,
}

/// File content inside a request or reply: inline in `content`, or, for a large file, uploaded
/// to the store in pieces (`atelier.store.upload`) and named by `blob` (then `content` is
/// empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileContent {
    pub path: String,
    pub content: ByteBuf,
    #[serde(default)]
    pub blob: Option<BlobRef>,
}

impl FileContent {
    /// A file carried inline.
    pub fn inline(path: impl Into<String>, content: Vec<u8>) -> Self {
        Self {
            path: path.into(),
            content: ByteBuf::from(content),
            blob: None,
        }
    }

    /// A file staged in the blob bucket.
    pub fn staged(path: impl Into<String>, blob: BlobRef) -> Self {
        Self {
            path: path.into(),
            content: ByteBuf::new(),
            blob: Some(blob),
        }
    }
}

/// A blob in the blob bucket: the object named `digest` (lower-case hex sha256) of `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    pub digest: String,
    pub size: u64,
}

/// Which state of a workbench a read addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    #[default]
    Published,
    Draft,
    /// The draft when one exists, else published: what an agent sees.
    Current,
}

/// `atelier.store.create`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateWorkbench {
    pub v: u16,
    pub workbench: String,
}

/// `atelier.store.workbenches`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListWorkbenches {
    pub v: u16,
}

/// `atelier.store.add`: the user adds files to the published state (refused while a draft exists).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddFiles {
    pub v: u16,
    pub workbench: String,
    pub files: Vec<FileContent>,
}

/// `atelier.store.ls`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListFiles {
    pub v: u16,
    pub workbench: String,
    #[serde(default)]
    pub view: View,
}

/// `atelier.store.cat`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadFile {
    pub v: u16,
    pub workbench: String,
    pub path: String,
    #[serde(default)]
    pub view: View,
}

/// `atelier.store.diff`: the draft's differences against published.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiffDraft {
    pub v: u16,
    pub workbench: String,
}

/// `atelier.store.publish`: the draft becomes published (the old state is checkpointed).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PublishDraft {
    pub v: u16,
    pub workbench: String,
}

/// `atelier.store.discard`: the draft is dropped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiscardDraft {
    pub v: u16,
    pub workbench: String,
}

/// `atelier.store.write`: an agent's change to the draft, applied atomically and once per
/// `call_id` (a repeat returns the original result with `replayed: true`). `delete` paths are
/// removed after `files` are written, so a rename is one call: the new path in `files`, the
/// old one in `delete`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WriteDraft {
    pub v: u16,
    pub workbench: String,
    pub call_id: String,
    #[serde(default)]
    pub files: Vec<FileContent>,
    #[serde(default)]
    pub delete: Vec<String>,
}

/// `atelier.store.approvals`: which action classes wait for approval in the workbench's jobs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetApprovals {
    pub v: u16,
    pub workbench: String,
    pub approvals: crate::approval::ApprovalPolicy,
}

/// Blobs up to this size are kept in the store's database (durable with their manifest) and
/// served whole by `atelier.store.blob`; larger ones travel through the blob bucket.
pub const INLINE_BLOB_BYTES: usize = 64 * 1024;

/// Most bytes one `atelier.store.blob` or `atelier.store.upload` carries; a larger blob moves
/// in pieces.
pub const BLOB_PIECE_BYTES: u64 = 1024 * 1024;

/// `atelier.store.blob`: a blob's content, whole (a blob of at most [`BLOB_PIECE_BYTES`]), or
/// the piece `length` bytes long at `offset`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GetBlob {
    pub v: u16,
    pub digest: String,
    /// The workbench whose file it is: its shard answers at once (without it every shard is
    /// asked).
    #[serde(default)]
    pub workbench: Option<String>,
    /// Where the piece starts.
    #[serde(default)]
    pub offset: u64,
    /// How long the piece is (none: the whole blob); at most [`BLOB_PIECE_BYTES`].
    #[serde(default)]
    pub length: Option<u64>,
}

/// `atelier.store.upload`: the piece of the blob `digest` (of `size` bytes) at `offset`, sent
/// in order; `upload` names one upload (letters, digits, `-`, at most 64), so two uploads of one
/// blob never mix. The piece that completes the blob has it checked against its digest and
/// kept for `atelier.store.add` and draft writes (as `FileContent::staged`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UploadBlob {
    pub v: u16,
    /// The workbench the blob is for (its shard's owner receives the pieces).
    pub workbench: String,
    pub upload: String,
    pub digest: String,
    pub size: u64,
    pub offset: u64,
    pub content: ByteBuf,
}

/// What the store holds of an upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uploaded {
    /// Bytes received so far: the next piece starts here.
    pub received: u64,
    /// Whether the blob is whole, checked and staged.
    pub complete: bool,
}

/// A workbench as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkbenchInfo {
    pub name: String,
    pub created_at_ms: u64,
    pub file_count: u64,
    pub has_draft: bool,
    #[serde(default)]
    pub checkpoints: u64,
    /// The approval policy of jobs that set none (`None`: destructive calls ask).
    #[serde(default)]
    pub approvals: Option<crate::approval::ApprovalPolicy>,
    /// When and by what the draft was started (with a draft).
    #[serde(default)]
    pub draft: Option<DraftOrigin>,
}

/// When and by what a workbench's draft was started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraftOrigin {
    pub started_at_ms: u64,
    /// The job whose first write started it (none: a write outside any job, or a draft a
    /// rewind brought back).
    #[serde(default)]
    pub job_id: Option<String>,
    /// The conversation message that job answers.
    #[serde(default)]
    pub message_id: Option<String>,
    /// The batch that job is a target of.
    #[serde(default)]
    pub batch_id: Option<String>,
    /// Older than the coordinator's `stale_draft_secs` (default 24 h) when it was read.
    #[serde(default)]
    pub stale: bool,
}

impl DraftOrigin {
    /// `started 2 h ago by message m3 (job J)`, as of `now_ms`.
    pub fn describe(&self, now_ms: u64) -> String {
        let age = crate::describe_age(now_ms.saturating_sub(self.started_at_ms));
        let by = match (&self.message_id, &self.batch_id, &self.job_id) {
            (_, Some(batch), Some(job)) => format!(" by batch {batch} (job {job})"),
            (Some(message), None, Some(job)) => format!(" by message {message} (job {job})"),
            (None, None, Some(job)) => format!(" by job {job}"),
            _ => String::new(),
        };
        format!("started {age} ago{by}")
    }
}

/// The files of one view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub workbench: String,
    pub view: View,
    pub has_draft: bool,
    pub files: Vec<ManifestEntry>,
    /// When and by what the draft was started (with a draft).
    #[serde(default)]
    pub draft: Option<DraftOrigin>,
}

/// A file's content: inline, or for a large file staged in the blob bucket and named by
/// `blob` (then `content` is empty).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileBytes {
    pub path: String,
    pub digest: String,
    pub content: ByteBuf,
    #[serde(default)]
    pub blob: Option<BlobRef>,
}

/// A blob's content.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlobBytes {
    pub digest: String,
    pub content: ByteBuf,
    /// The whole blob's size.
    #[serde(default)]
    pub size: u64,
}

/// Differences of the draft against published.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraftDiff {
    pub workbench: String,
    pub has_draft: bool,
    pub added: Vec<String>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
}

/// Result of a publish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    pub workbench: String,
    /// The checkpoint holding the published state from before this publish.
    pub checkpoint_id: String,
    pub files: Vec<ManifestEntry>,
}

/// Result of a draft write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    pub files: Vec<ManifestEntry>,
    /// Paths removed from the draft.
    #[serde(default)]
    pub deleted: Vec<String>,
    /// True when this call id had already been applied and the original result is returned.
    #[serde(default)]
    pub replayed: bool,
}

/// An empty success.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {}
