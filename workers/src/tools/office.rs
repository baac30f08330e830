//! The office pool's tools (text and CSV files for now).

use atelier_messages::ErrorBody;
use atelier_messages::store::ManifestEntry;
use atelier_messages::tool::{Pool, ToolRequest};
use serde_json::Value;

use super::{Toolbox, blocking, count_arg, to_value, unknown_tool};
use crate::args::Args;
use crate::files::{self, sha256_hex};
use crate::office::{self, DEFAULT_LINE_COUNT, MAX_LINE_COUNT, TextWritten};

/// A tool of the office pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OfficeTool {
    ListFiles,
    GetFileInfo,
    ReadFile,
    WriteTextFile,
}

impl OfficeTool {
    const ALL: [OfficeTool; 4] = [
        OfficeTool::ListFiles,
        OfficeTool::GetFileInfo,
        OfficeTool::ReadFile,
        OfficeTool::WriteTextFile,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            OfficeTool::ListFiles => "list_files",
            OfficeTool::GetFileInfo => "get_file_info",
            OfficeTool::ReadFile => "read_file",
            OfficeTool::WriteTextFile => "write_text_file",
        }
    }

    /// The tool called `name`, or `VALIDATION_FAILED` listing the pool's tools.
    pub(crate) fn resolve(name: &str) -> Result<OfficeTool, ErrorBody> {
        Self::ALL
            .into_iter()
            .find(|tool| tool.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|tool| tool.name()).collect();
                unknown_tool(Pool::Office, name, &names)
            })
    }
}

impl Toolbox {
    pub(super) async fn run_office(
        &self,
        tool: OfficeTool,
        request: &ToolRequest,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        match tool {
            OfficeTool::ListFiles => to_value(&office::list_files(&request.files)),
            OfficeTool::GetFileInfo => self.get_file_info(request, args).await,
            OfficeTool::ReadFile => self.read_file(request, args).await,
            OfficeTool::WriteTextFile => self.write_text_file(request, args).await,
        }
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
    use crate::tools::TabularTool;
    use atelier_messages::ErrorCode;

    #[test]
    fn pools_serve_their_own_tools_only() {
        assert_eq!(
            TabularTool::resolve("table_query").unwrap(),
            TabularTool::Query
        );
        assert_eq!(
            OfficeTool::resolve("read_file").unwrap(),
            OfficeTool::ReadFile
        );
        let err = OfficeTool::resolve("table_query").unwrap_err();
        assert_eq!(err.code, ErrorCode::ValidationFailed);
        assert!(
            err.message
                .contains("list_files, get_file_info, read_file, write_text_file"),
            "{}",
            err.message
        );
    }
}
