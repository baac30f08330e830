//! The tabular pool's tools (DuckDB over CSV).

use std::path::PathBuf;

use atelier_messages::tool::{Pool, ToolRequest};
use atelier_messages::{ErrorBody, ErrorCode, path};
use serde_json::Value;

use super::{Toolbox, blocking, count_arg, to_value, unknown_tool};
use crate::args::Args;
use crate::files;
use crate::tabular::{
    CsvFile, DEFAULT_WINDOW_ROWS, ExportFormat, ExportRequest, MAX_WINDOW_ROWS, Window,
};

/// A tool of the tabular pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TabularTool {
    GetMap,
    Query,
    Export,
}

impl TabularTool {
    const ALL: [TabularTool; 3] = [TabularTool::GetMap, TabularTool::Query, TabularTool::Export];

    pub(crate) fn name(self) -> &'static str {
        match self {
            TabularTool::GetMap => "table_get_map",
            TabularTool::Query => "table_query",
            TabularTool::Export => "table_export",
        }
    }

    /// The tool called `name`, or `VALIDATION_FAILED` listing the pool's tools.
    pub(crate) fn resolve(name: &str) -> Result<TabularTool, ErrorBody> {
        Self::ALL
            .into_iter()
            .find(|tool| tool.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|tool| tool.name()).collect();
                unknown_tool(Pool::Tabular, name, &names)
            })
    }
}

impl Toolbox {
    pub(super) async fn run_tabular(
        &self,
        tool: TabularTool,
        request: &ToolRequest,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        match tool {
            TabularTool::GetMap => self.table_get_map(request, args).await,
            TabularTool::Query => self.table_query(request, args).await,
            TabularTool::Export => self.table_export(request, args).await,
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
}
