//! The tools of each pool and the dispatch from a [`ToolRequest`] to an engine.
//!
//! Arguments are checked here (types, ranges, paths) before any file is touched; engine work
//! runs on Tokio's blocking threads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use atelier_messages::store::ManifestEntry;
use atelier_messages::tool::{Pool, ToolRequest};
use atelier_messages::{ErrorBody, ErrorCode, path};
use serde::Serialize;
use serde_json::Value;

use crate::args::Args;
use crate::files::{self, FileAccess, sha256_hex};
use crate::office::{self, DEFAULT_LINE_COUNT, MAX_LINE_COUNT, TextWritten};
use crate::tabular::{
    CsvFile, DEFAULT_WINDOW_ROWS, ExportFormat, ExportRequest, MAX_WINDOW_ROWS, TabularEngine,
    Window,
};

/// A tool a worker can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tool {
    TableGetMap,
    TableQuery,
    TableExport,
    ListFiles,
    GetFileInfo,
    ReadFile,
    WriteTextFile,
}

impl Tool {
    const TABULAR: [Tool; 3] = [Tool::TableGetMap, Tool::TableQuery, Tool::TableExport];
    const OFFICE: [Tool; 4] = [
        Tool::ListFiles,
        Tool::GetFileInfo,
        Tool::ReadFile,
        Tool::WriteTextFile,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Tool::TableGetMap => "table_get_map",
            Tool::TableQuery => "table_query",
            Tool::TableExport => "table_export",
            Tool::ListFiles => "list_files",
            Tool::GetFileInfo => "get_file_info",
            Tool::ReadFile => "read_file",
            Tool::WriteTextFile => "write_text_file",
        }
    }

    fn of_pool(pool: Pool) -> &'static [Tool] {
        match pool {
            Pool::Tabular => &Self::TABULAR,
            Pool::Office => &Self::OFFICE,
        }
    }

    /// The tool `name` if `pool` serves it.
    pub(crate) fn resolve(pool: Pool, name: &str) -> Result<Tool, ErrorBody> {
        let tools = Self::of_pool(pool);
        tools
            .iter()
            .copied()
            .find(|tool| tool.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
                ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!(
                        "unknown tool {name:?} for the {pool} pool; it serves: {}",
                        names.join(", ")
                    ),
                )
            })
    }
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
    files: FileAccess,
    tabular: Arc<TabularEngine>,
}

impl Toolbox {
    pub(crate) fn new(
        pool: Pool,
        client: async_nats::Client,
        blob_dir: Option<PathBuf>,
        cache_dir: &Path,
    ) -> Self {
        Self {
            pool,
            files: FileAccess::new(client, blob_dir, cache_dir),
            tabular: Arc::new(TabularEngine::new(cache_dir)),
        }
    }

    /// Runs one tool call and returns the tool's response object.
    pub(crate) async fn run(&self, request: &ToolRequest) -> Result<Value, ErrorBody> {
        let tool = Tool::resolve(self.pool, &request.tool)?;
        let args = Args::new(tool.name(), &request.args)?;
        match tool {
            Tool::TableGetMap => self.table_get_map(request, &args).await,
            Tool::TableQuery => self.table_query(request, &args).await,
            Tool::TableExport => self.table_export(request, &args).await,
            Tool::ListFiles => to_value(&office::list_files(&request.files)),
            Tool::GetFileInfo => self.get_file_info(request, &args).await,
            Tool::ReadFile => self.read_file(request, &args).await,
            Tool::WriteTextFile => self.write_text_file(request, &args).await,
        }
    }

    /// The local copy of the CSV named by the `path` argument.
    async fn csv_source(
        &self,
        request: &ToolRequest,
        args: &Args<'_>,
    ) -> Result<(PathBuf, String), ErrorBody> {
        let entry = files::find(&request.files, args.string("path")?)?;
        if entry.kind != "csv" {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "table tools read CSV files; {} is {}: use get_file_info or read_file instead",
                    entry.path, entry.kind
                ),
            ));
        }
        let local = self.files.local_path(entry).await?;
        Ok((local, entry.digest.clone()))
    }

    async fn table_get_map(
        &self,
        request: &ToolRequest,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        let (local, digest) = self.csv_source(request, args).await?;
        let engine = self.tabular.clone();
        let map = blocking(move || {
            engine.map(CsvFile {
                path: &local,
                digest: &digest,
            })
        })
        .await?;
        to_value(&map)
    }

    async fn table_query(
        &self,
        request: &ToolRequest,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        let query = args.string("query")?.to_string();
        let max_rows = i64::try_from(MAX_WINDOW_ROWS).unwrap_or(i64::MAX);
        let default_rows = i64::try_from(DEFAULT_WINDOW_ROWS).unwrap_or(max_rows);
        let window = Window {
            rows: count_arg(args, "window_rows", 1..=max_rows, default_rows)?,
            offset: count_arg(args, "window_offset", 0..=i64::MAX, 0)?,
        };
        let (local, digest) = self.csv_source(request, args).await?;
        let engine = self.tabular.clone();
        let result = blocking(move || {
            engine.query(
                CsvFile {
                    path: &local,
                    digest: &digest,
                },
                &query,
                window,
            )
        })
        .await?;
        to_value(&result)
    }

    async fn table_export(
        &self,
        request: &ToolRequest,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        let query = args.optional_string("query")?.map(str::to_string);
        let target = path::normalize(args.string("target_path")?)?;
        let format = ExportFormat::parse(args.string("format")?, &target)?;
        let sheet = args.optional_string("sheet")?.map(str::to_string);
        let (local, digest) = self.csv_source(request, args).await?;
        let engine = self.tabular.clone();
        let target_path = target.clone();
        let exported = blocking(move || {
            let export = ExportRequest {
                query: query.as_deref(),
                target_path: &target_path,
                format,
                sheet: sheet.as_deref(),
            };
            engine.export(
                CsvFile {
                    path: &local,
                    digest: &digest,
                },
                export,
            )
        })
        .await?;
        self.files
            .write_draft(request, &target, exported.content)
            .await?;
        to_value(&exported.summary)
    }

    async fn get_file_info(
        &self,
        request: &ToolRequest,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        let entry = files::find(&request.files, args.string("path")?)?.clone();
        if !office::is_text_kind(&entry.kind) {
            return to_value(&office::file_info(&entry, None));
        }
        let bytes = self.files.read(&entry).await?;
        let info = blocking(move || Ok(office::file_info(&entry, Some(&bytes)))).await?;
        to_value(&info)
    }

    async fn read_file(&self, request: &ToolRequest, args: &Args<'_>) -> Result<Value, ErrorBody> {
        let entry: ManifestEntry = files::find(&request.files, args.string("path")?)?.clone();
        let start = count_arg(args, "line_start", 1..=i64::MAX, 1)?;
        let count = count_arg(args, "line_count", 1..=MAX_LINE_COUNT, DEFAULT_LINE_COUNT)?;
        office::check_readable(&entry)?;
        let bytes = self.files.read(&entry).await?;
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        let read = blocking(move || Ok(office::read_lines(&entry, &bytes, start, count))).await?;
        to_value(&read)
    }

    async fn write_text_file(
        &self,
        request: &ToolRequest,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        let content = args.string("content")?;
        let target = office::check_text_write(args.string("path")?, content)?;
        let bytes = content.as_bytes().to_vec();
        let (bytes, digest) = blocking(move || {
            let digest = sha256_hex(&bytes);
            Ok((bytes, digest))
        })
        .await?;
        let written = TextWritten {
            path: target.clone(),
            bytes_written: bytes.len(),
            digest,
        };
        self.files.write_draft(request, &target, bytes).await?;
        to_value(&written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_serve_their_own_tools_only() {
        assert_eq!(
            Tool::resolve(Pool::Tabular, "table_query").unwrap(),
            Tool::TableQuery
        );
        assert_eq!(
            Tool::resolve(Pool::Office, "read_file").unwrap(),
            Tool::ReadFile
        );
        let err = Tool::resolve(Pool::Office, "table_query").unwrap_err();
        assert_eq!(err.code, ErrorCode::ValidationFailed);
        assert!(
            err.message
                .contains("list_files, get_file_info, read_file, write_text_file"),
            "{}",
            err.message
        );
    }
}
