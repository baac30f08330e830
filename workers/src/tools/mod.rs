//! The tools of each pool and the dispatch from a [`ToolCall`] to an engine.
//!
//! Arguments are checked here (types, ranges, paths) before any file is touched; engine work
//! runs on Tokio's blocking threads. Each pool's tools live in their own module.

mod office;
mod tabular;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use atelier_messages::tool::{Pool, ToolName};
use atelier_messages::{ErrorBody, ErrorCode};
use serde::Serialize;
use serde_json::Value;

use crate::args::Args;
use crate::files::{FileAccess, ToolCall};
use crate::tabular::TabularEngine;

/// The tool `name` if `pool` serves it, or its [`refusal`].
pub(crate) fn resolve(pool: Pool, name: &str) -> Result<ToolName, ErrorBody> {
    ToolName::parse(name)
        .filter(|tool| tool.pool() == Some(pool))
        .ok_or_else(|| refusal(pool, name))
}

/// `VALIDATION_FAILED` for a tool `pool` does not serve, listing the ones it does.
fn refusal(pool: Pool, name: &str) -> ErrorBody {
    let served: Vec<&str> = pool.tools().map(ToolName::as_str).collect();
    ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!(
            "unknown tool {name:?} for the {pool} pool; it serves: {}",
            served.join(", ")
        ),
    )
}

/// Runs blocking engine work on Tokio's blocking threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ErrorBody> + Send + 'static,
) -> Result<T, ErrorBody> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ErrorBody::new(ErrorCode::Internal, format!("tool task failed: {e}")))?
}

fn to_value<T: Serialize>(value: &T) -> Result<Value, ErrorBody> {
    serde_json::to_value(value).map_err(|e| {
        ErrorBody::new(
            ErrorCode::Internal,
            format!("cannot encode the tool result: {e}"),
        )
    })
}

/// An optional non-negative count argument with a default.
fn count_arg(
    args: &Args<'_>,
    name: &str,
    range: std::ops::RangeInclusive<i64>,
    default: i64,
) -> Result<u64, ErrorBody> {
    let value = args.optional_integer(name, range)?.unwrap_or(default);
    Ok(u64::try_from(value).unwrap_or(0))
}

/// Everything a worker needs to run its pool's tools.
pub(crate) struct Toolbox {
    pool: Pool,
    files: Arc<FileAccess>,
    tabular: Arc<TabularEngine>,
    office_timeout: Duration,
}

impl Toolbox {
    pub(crate) fn new(
        pool: Pool,
        files: Arc<FileAccess>,
        cache_dir: &Path,
        table_cache_bytes: u64,
        office_timeout: Duration,
    ) -> Self {
        Self {
            pool,
            files,
            tabular: Arc::new(TabularEngine::new(cache_dir, table_cache_bytes)),
            office_timeout,
        }
    }

    /// Runs one tool call and returns the tool's response object.
    pub(crate) async fn run(&self, request: &ToolCall) -> Result<Value, ErrorBody> {
        let tool = resolve(self.pool, &request.tool)?;
        let args = Args::new(tool.as_str(), &request.args)?;
        match self.pool {
            Pool::Tabular => self.run_tabular(tool, request, &args).await,
            Pool::Office => {
                let run = self.run_office(tool, request, &args);
                match tokio::time::timeout(self.office_timeout, run).await {
                    Ok(answered) => answered,
                    Err(_) => Err(office_timeout(tool, self.office_timeout)),
                }
            }
        }
    }
}

/// `TOOL_TIMEOUT` for an office call that ran past its limit (its blocking work runs to its end
/// on its thread; what it computed is dropped).
fn office_timeout(tool: ToolName, limit: Duration) -> ErrorBody {
    tracing::warn!(%tool, limit_ms = limit.as_millis(), "office tool call ran past its time limit");
    ErrorBody::new(
        ErrorCode::ToolTimeout,
        format!(
            "{tool} took longer than {} ms and was stopped; nothing of it was applied. Work on a              smaller part (a sheet, a range, fewer operations per call), or the operator raises              office_tool_timeout_ms",
            limit.as_millis()
        ),
    )
}
