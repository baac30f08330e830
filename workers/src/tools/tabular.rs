//! The tabular pool's tools (DuckDB over delimited text tables).

use std::path::PathBuf;
use std::sync::Arc;

use atelier_messages::store::ManifestEntry;
use atelier_messages::tool::{Pool, ToolName};
use atelier_messages::{ErrorBody, ErrorCode, path};
use serde::Serialize;
use serde_json::Value;

use super::{Toolbox, blocking, count_arg, refusal, to_value};
use crate::args::Args;
use crate::files::{self, ToolCall};
use crate::tabular::{
    CellRef, CsvFile, DEFAULT_WINDOW_ROWS, ExportFormat, ExportRequest, MAX_WINDOW_ROWS,
    TabularEngine, UpdateMode, UpdateRequest, Window,
};

/// The most rows `table_read_rows` returns at once.
const MAX_READ_ROWS: i64 = 10_000;

fn invalid(tool: &str, message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, format!("{tool}: {message}"))
}

/// An optional array-of-strings argument (`Args` covers scalars only).
fn string_list(
    request: &ToolCall,
    tool: &str,
    name: &str,
) -> Result<Option<Vec<String>>, ErrorBody> {
    match request.args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Ok(text.clone()),
                _ => Err(invalid(
                    tool,
                    format!("argument `{name}` must be an array of column names (strings)"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(invalid(
            tool,
            format!("argument `{name}` must be an array of column names (strings)"),
        )),
    }
}

/// A required integer argument within `range`, as a count.
fn required_integer(
    args: &Args<'_>,
    tool: &str,
    name: &str,
    range: std::ops::RangeInclusive<i64>,
) -> Result<u64, ErrorBody> {
    let value = args.optional_integer(name, range)?.ok_or_else(|| {
        invalid(
            tool,
            format!("missing required argument `{name}` (an integer)"),
        )
    })?;
    Ok(u64::try_from(value).unwrap_or(0))
}

/// An optional boolean argument.
fn optional_bool(request: &ToolCall, tool: &str, name: &str) -> Result<Option<bool>, ErrorBody> {
    match request.args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(invalid(
            tool,
            format!("argument `{name}` must be a boolean"),
        )),
    }
}

/// Whether the table tools read this file: CSV kinds (`.csv`, `.tsv`, `.psv`), workbooks
/// (their sheets), and the text files whose figures are a table (`.txt`, `.md`), whose table
/// structure is then inferred (with caution metadata in the map).
fn is_table(entry: &ManifestEntry) -> bool {
    path::table_shape(&entry.path).is_some()
}

/// The table file a call reads, on local disk.
struct Source {
    name: String,
    local: PathBuf,
    digest: String,
}

impl Source {
    fn file(&self) -> CsvFile<'_> {
        CsvFile {
            name: &self.name,
            path: &self.local,
            digest: &self.digest,
        }
    }
}

impl Toolbox {
    pub(super) async fn run_tabular(
        &self,
        tool: ToolName,
        request: &ToolCall,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        let name = tool.as_str();
        match tool {
            ToolName::TableGetMap => self.on_table(request, args, |e, f| e.map(f)).await,
            ToolName::TableDescribe => self.on_table(request, args, |e, f| e.describe(f)).await,
            ToolName::TableStats => {
                let columns = string_list(request, name, "columns")?;
                self.on_table(request, args, move |e, f| e.stats(f, columns.as_deref()))
                    .await
            }
            ToolName::TableReadRows => {
                let start = required_integer(args, name, "row_start", 1..=i64::MAX)?;
                let count = required_integer(args, name, "row_count", 1..=MAX_READ_ROWS)?;
                let columns = string_list(request, name, "columns")?;
                self.on_table(request, args, move |e, f| {
                    e.read_rows(f, start, count, columns.as_deref())
                })
                .await
            }
            ToolName::TableQuery => {
                let query = args.string("query")?.to_string();
                let max_rows = i64::try_from(MAX_WINDOW_ROWS).unwrap_or(i64::MAX);
                let default_rows = i64::try_from(DEFAULT_WINDOW_ROWS).unwrap_or(max_rows);
                let window = Window {
                    rows: count_arg(args, "window_rows", 1..=max_rows, default_rows)?,
                    offset: count_arg(args, "window_offset", 0..=i64::MAX, 0)?,
                };
                self.on_table(request, args, move |e, f| e.query(f, &query, window))
                    .await
            }
            ToolName::TableExport => self.table_export(request, args).await,
            ToolName::TableUpdateFromExport => self.table_update_from_export(request, args).await,
            other => Err(refusal(Pool::Tabular, other.as_str())),
        }
    }

    /// The local copy of the table file named by the `path` argument.
    async fn table_source(&self, request: &ToolCall, args: &Args<'_>) -> Result<Source, ErrorBody> {
        let entry = files::find(&request.files, args.string("path")?)?;
        if !is_table(entry) {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "table tools read delimited text tables (.csv, .tsv, .psv, .txt), workbooks' sheets and the figures of text files (.txt, .md); {} is {}: use get_file_info or read_file instead",
                    entry.path, entry.kind
                ),
            ));
        }
        Ok(Source {
            name: entry.path.clone(),
            local: self
                .files
                .local_path(Some(&request.workbench), entry)
                .await?,
            digest: entry.digest.clone(),
        })
    }

    /// Runs `work` on the table named by `path`, on a blocking thread.
    async fn on_table<T: Serialize + Send + 'static>(
        &self,
        request: &ToolCall,
        args: &Args<'_>,
        work: impl FnOnce(&TabularEngine, CsvFile<'_>) -> Result<T, ErrorBody> + Send + 'static,
    ) -> Result<Value, ErrorBody> {
        let source = self.table_source(request, args).await?;
        let engine = Arc::clone(&self.tabular);
        let result = blocking(move || work(&engine, source.file())).await?;
        to_value(&result)
    }

    async fn table_export(&self, request: &ToolCall, args: &Args<'_>) -> Result<Value, ErrorBody> {
        let query = args.optional_string("query")?.map(str::to_string);
        let target = path::normalize(args.string("target_path")?)?;
        let format = ExportFormat::parse(args.string("format")?, &target)?;
        let sheet = args.optional_string("sheet")?.map(str::to_string);
        let source = self.table_source(request, args).await?;
        let engine = Arc::clone(&self.tabular);
        let target_path = target.clone();
        let exported = blocking(move || {
            let export = ExportRequest {
                query: query.as_deref(),
                target_path: &target_path,
                format,
                sheet: sheet.as_deref(),
            };
            engine.export(source.file(), export)
        })
        .await?;
        request.write(&target, exported.content);
        to_value(&exported.summary)
    }

    async fn table_update_from_export(
        &self,
        request: &ToolCall,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        let name = ToolName::TableUpdateFromExport.as_str();
        let query = args.optional_string("query")?.map(str::to_string);
        let target = path::normalize(args.string("target_path")?)?;
        if !target.to_ascii_lowercase().ends_with(".xlsx") {
            return Err(invalid(
                name,
                format!("`target_path` {target:?} must be an .xlsx workbook"),
            ));
        }
        let sheet = args
            .optional_string("sheet")?
            .unwrap_or("Sheet1")
            .to_string();
        let mode = UpdateMode::parse(args.string("mode")?)?;
        let start_cell = args
            .optional_string("start_cell")?
            .map(CellRef::parse)
            .transpose()?;
        let include_header = optional_bool(request, name, "include_header")?;
        let existing = match request.files.iter().find(|entry| entry.path == target) {
            Some(entry) if entry.kind != "xlsx" => {
                return Err(invalid(
                    name,
                    format!("{target} is {}, not an xlsx workbook", entry.kind),
                ));
            }
            Some(entry) => Some(self.files.read(Some(&request.workbench), entry).await?),
            None => None,
        };
        let source = self.table_source(request, args).await?;
        let engine = Arc::clone(&self.tabular);
        let target_path = target.clone();
        let updated = blocking(move || {
            let update = UpdateRequest {
                query: query.as_deref(),
                target_path: &target_path,
                sheet: &sheet,
                mode,
                start_cell,
                include_header,
            };
            engine.update_workbook(source.file(), &update, existing.as_deref())
        })
        .await?;
        request.write(&target, updated.content);
        to_value(&updated.summary)
    }
}
