//! Atelier's tool workers: the engines behind the model's file tools, and the actor that serves
//! them to a pool over NATS.
//!
//! A worker process runs one [`ToolExecutor`](executor) per pool. It joins the pool's queue
//! group on `atelier.tool.<pool>`, decodes each [`ToolRequest`](atelier_messages::tool::ToolRequest),
//! runs the tool with bounded concurrency (blocking work on Tokio's blocking threads) and replies
//! with a [`ToolOutput`](atelier_messages::tool::ToolOutput) or an
//! [`ErrorBody`](atelier_messages::ErrorBody) in the request's format. Workers never write files:
//! reads come from the shared blob directory or, on another host, from the store in pieces
//! (`atelier.store.blob`), cached by digest under a size bound; draft changes go back in the
//! reply, files larger than 256 KiB uploaded to the store in pieces (`atelier.store.upload`).
//!
//! # Layout
//! - [`executor`]: the ToolExecutor actor (subscription, concurrency, replies).
//! - [`error`]: [`WorkerError`], the crate's start-up error.
//! - `review`: the office pool's `atelier.review.file` verb (content diffs of two file versions).
//! - `tools`: the tool names of each pool and the dispatch from a request to an engine.
//! - `args`: typed access to a tool's JSON arguments (`VALIDATION_FAILED` naming the field).
//! - `files`: the request's manifest, local blob paths, blob fetches through the bucket, the
//!   bounded blob cache, large draft writes staged in the bucket.
//! - `tabular`: DuckDB engine for delimited text tables (every `table_*` tool): `encoding`
//!   (detection, transcoding), `dialect` (number formats), `ingest` (one cached database per
//!   digest, shared by the host's workers), `map`, `profile` (describe, stats, rows), `query`
//!   (guardrails, windows, limits), `names` (the table and its columns as a query may spell
//!   them), `matched` (the rows an aggregate's filter matched), `ast` (walking DuckDB's serialized
//!   statements), `cells` (DuckDB values to JSON and cells), `export` (CSV and
//!   XLSX writers), `workbook` (query results into existing xlsx packages).
//! - `office`: the office pool's engines: text and CSV lines, spreadsheets (calamine reads, XML-level
//!   xlsx edits), docx and pptx (XML-level reads and edits), PDF text (lopdf); `package` opens
//!   zip packages safely (bomb, DTD, encryption, truncation checks) and copies untouched parts
//!   byte-for-byte on write. Tools: `list_files`, `get_file_info`, `get_file_map`, `read_file`,
//!   `*_get_styles`, `*_operations`, `write_text_file`, `delete_file`, `rename_file`.

pub mod error;
pub mod executor;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;

mod args;
mod files;
mod office;
mod review;
mod tabular;
mod tools;

use std::path::PathBuf;

use atelier_messages::tool::Pool;

pub use error::WorkerError;
pub use executor::WorkerHandle;

/// How one worker process serves one pool.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The pool this worker serves (its tools and queue group).
    pub pool: Pool,
    /// This worker's name in replies and traces, e.g. `tabular-host-1234`.
    pub worker_id: String,
    /// The shared blob directory on this host (`<blob_dir>/<digest[0..2]>/<digest>`), if any.
    pub blob_dir: Option<PathBuf>,
    /// Worker-local cache: DuckDB databases by CSV digest and fetched blobs.
    pub cache_dir: PathBuf,
    /// Concurrent tool calls in this process.
    pub max_concurrency: usize,
    /// Most bytes of fetched blobs kept in `cache_dir` (least recently used go first).
    pub blob_cache_bytes: u64,
    /// Most bytes of DuckDB databases kept in `cache_dir/tabular` (least recently opened go
    /// first).
    pub table_cache_bytes: u64,
    /// How long one office tool call may take; past it the call is `TOOL_TIMEOUT` (its work
    /// finishes on a blocking thread and is dropped, nothing of it applied).
    pub office_timeout: std::time::Duration,
}

/// The default bound of a worker's fetched-blob cache (8 GiB).
pub const DEFAULT_BLOB_CACHE_BYTES: u64 = 8 << 30;
/// The default bound of a tabular worker's DuckDB databases (4 GiB).
pub const DEFAULT_TABLE_CACHE_BYTES: u64 = 4 << 30;
/// The default time limit of one office tool call (30 s, as the tool loop's design has it).
pub const DEFAULT_OFFICE_TIMEOUT_MS: u64 = 30_000;

/// Starts a worker: subscribes to the pool's queue group and serves calls until shut down.
pub async fn start_worker(
    client: async_nats::Client,
    config: WorkerConfig,
) -> Result<WorkerHandle, WorkerError> {
    executor::start(client, config).await
}
