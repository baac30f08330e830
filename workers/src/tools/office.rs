//! The office pool's tools: listing, reading (text, CSV, spreadsheets, Word, PowerPoint, PDF),
//! maps and styles, document operations, text writes, and file deletes and renames in the draft.

use atelier_messages::store::ManifestEntry;
use atelier_messages::tool::Pool;
use atelier_messages::{ErrorBody, ErrorCode, path};
use serde_json::{Value, json};

use super::{Toolbox, blocking, count_arg, to_value, unknown_tool};
use crate::args::Args;
use crate::files::{self, ToolCall, sha256_hex};
use crate::office::{
    self, DEFAULT_LINE_COUNT, Format, MAX_LINE_COUNT, Operations, Selector, StylesOf, TextWritten,
};

/// A tool of the office pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OfficeTool {
    ListFiles,
    GetFileInfo,
    GetFileMap,
    ReadFile,
    WriteTextFile,
    XlsxOperations,
    DocxOperations,
    PptxOperations,
    XlsxGetStyles,
    DocxGetStyles,
    PptxGetStyles,
    DeleteFile,
    RenameFile,
}

impl OfficeTool {
    const ALL: [OfficeTool; 13] = [
        OfficeTool::ListFiles,
        OfficeTool::GetFileInfo,
        OfficeTool::GetFileMap,
        OfficeTool::ReadFile,
        OfficeTool::WriteTextFile,
        OfficeTool::XlsxOperations,
        OfficeTool::DocxOperations,
        OfficeTool::PptxOperations,
        OfficeTool::XlsxGetStyles,
        OfficeTool::DocxGetStyles,
        OfficeTool::PptxGetStyles,
        OfficeTool::DeleteFile,
        OfficeTool::RenameFile,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            OfficeTool::ListFiles => "list_files",
            OfficeTool::GetFileInfo => "get_file_info",
            OfficeTool::GetFileMap => "get_file_map",
            OfficeTool::ReadFile => "read_file",
            OfficeTool::WriteTextFile => "write_text_file",
            OfficeTool::XlsxOperations => "xlsx_operations",
            OfficeTool::DocxOperations => "docx_operations",
            OfficeTool::PptxOperations => "pptx_operations",
            OfficeTool::XlsxGetStyles => "xlsx_get_styles",
            OfficeTool::DocxGetStyles => "docx_get_styles",
            OfficeTool::PptxGetStyles => "pptx_get_styles",
            OfficeTool::DeleteFile => "delete_file",
            OfficeTool::RenameFile => "rename_file",
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

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// An optional boolean argument (absent or `null` is `false`).
fn flag(tool: &str, args: &Value, name: &str) -> Result<bool, ErrorBody> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(invalid(format!(
            "{tool}: argument `{name}` must be a boolean"
        ))),
    }
}

/// An optional argument given as a string or an integer, as text.
fn text_or_number(tool: &str, args: &Value, name: &str) -> Result<Option<String>, ErrorBody> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(_) => Err(invalid(format!(
            "{tool}: argument `{name}` must be a string or an integer"
        ))),
    }
}

impl Toolbox {
    pub(super) async fn run_office(
        &self,
        tool: OfficeTool,
        request: &ToolCall,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        match tool {
            OfficeTool::ListFiles => to_value(&office::list_files(&request.files)),
            OfficeTool::GetFileInfo => self.get_file_info(request, args).await,
            OfficeTool::GetFileMap => {
                let (entry, bytes) = self.entry_and_bytes(request, args).await?;
                blocking(move || office::map(&entry, bytes)).await
            }
            OfficeTool::ReadFile => self.read_file(request, args).await,
            OfficeTool::WriteTextFile => self.write_text_file(request, args).await,
            OfficeTool::XlsxOperations
            | OfficeTool::DocxOperations
            | OfficeTool::PptxOperations => self.operations(tool, request, args).await,
            OfficeTool::XlsxGetStyles => self.get_styles(request, args, StylesOf::Xlsx).await,
            OfficeTool::DocxGetStyles => self.get_styles(request, args, StylesOf::Docx).await,
            OfficeTool::PptxGetStyles => self.get_styles(request, args, StylesOf::Pptx).await,
            OfficeTool::DeleteFile => self.delete_file(request, args).await,
            OfficeTool::RenameFile => self.rename_file(request, args).await,
        }
    }

    async fn entry_and_bytes(
        &self,
        request: &ToolCall,
        args: &Args<'_>,
    ) -> Result<(ManifestEntry, Vec<u8>), ErrorBody> {
        let entry = files::find(&request.files, args.string("path")?)?.clone();
        Format::of(&entry.path)?;
        let bytes = self.files.read(&entry).await?;
        Ok((entry, bytes))
    }

    async fn get_file_info(&self, request: &ToolCall, args: &Args<'_>) -> Result<Value, ErrorBody> {
        let entry = files::find(&request.files, args.string("path")?)?.clone();
        let bytes = match office::info_needs_content(&entry) {
            true => Some(self.files.read(&entry).await?),
            false => None,
        };
        blocking(move || office::describe(&entry, bytes)).await
    }

    async fn read_file(&self, request: &ToolCall, args: &Args<'_>) -> Result<Value, ErrorBody> {
        let tool = OfficeTool::ReadFile.name();
        let start = count_arg(args, "line_start", 1..=i64::MAX, 1)?;
        let count = count_arg(args, "line_count", 1..=MAX_LINE_COUNT, DEFAULT_LINE_COUNT)?;
        let slide_index = args.optional_integer("slide_index", 0..=100_000)?;
        let selector = Selector {
            sheet: args.optional_string("sheet")?.map(str::to_string),
            range: args.optional_string("range")?.map(str::to_string),
            section: text_or_number(tool, &request.args, "section")?,
            slide_index: slide_index.and_then(|i| usize::try_from(i).ok()),
            pages: text_or_number(tool, &request.args, "pages")?,
            line_start: usize::try_from(start).unwrap_or(usize::MAX),
            line_count: usize::try_from(count).unwrap_or(usize::MAX),
        };
        let (entry, bytes) = self.entry_and_bytes(request, args).await?;
        blocking(move || office::read(&entry, bytes, &selector)).await
    }

    async fn get_styles(
        &self,
        request: &ToolCall,
        args: &Args<'_>,
        of: StylesOf,
    ) -> Result<Value, ErrorBody> {
        let (entry, bytes) = self.entry_and_bytes(request, args).await?;
        blocking(move || office::styles(&entry, bytes, of)).await
    }

    async fn write_text_file(
        &self,
        request: &ToolCall,
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
        request.write(&target, bytes);
        to_value(&written)
    }

    /// The document an operation list starts from: the file itself, a copy of `copy_from`, or a
    /// blank document (`create_new`).
    async fn base_document(
        &self,
        tool: OfficeTool,
        request: &ToolCall,
        target: &str,
        format: Format,
    ) -> Result<(Vec<u8>, bool), ErrorBody> {
        let name = tool.name();
        let create_new = flag(name, &request.args, "create_new")?;
        let copy_from = match request.args.get("copy_from") {
            None | Some(Value::Null) => None,
            Some(Value::String(source)) => Some(source.clone()),
            Some(_) => {
                return Err(invalid(format!(
                    "{name}: argument `copy_from` must be a string"
                )));
            }
        };
        let existing = request.files.iter().find(|entry| entry.path == target);
        match (create_new, copy_from, existing) {
            (true, Some(_), _) => Err(invalid(format!(
                "{name}: give `create_new` or `copy_from`, not both"
            ))),
            (true, None, Some(_)) | (false, Some(_), Some(_)) => Err(invalid(format!(
                "{name}: {target} already exists; omit create_new/copy_from to edit it, or choose a new path"
            ))),
            (true, None, None) => Ok((blocking(move || office::blank(format)).await?, true)),
            (false, Some(source), None) => {
                let entry = files::find(&request.files, &source)?;
                office::editable(name, &entry.path)?;
                Ok((self.files.read(entry).await?, true))
            }
            (false, None, Some(entry)) => Ok((self.files.read(entry).await?, false)),
            (false, None, None) => Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!(
                    "{name}: no such file in the workbench: {target}; pass create_new: true or copy_from to create it"
                ),
            )),
        }
    }

    async fn operations(
        &self,
        tool: OfficeTool,
        request: &ToolCall,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        let target = path::normalize(args.string("path")?)?;
        let format = office::editable(tool.name(), &target)?;
        let operations = Operations::parse(
            format,
            tool.name(),
            request.args.get("operations").unwrap_or(&Value::Null),
        )?;
        let (base, created) = self.base_document(tool, request, &target, format).await?;
        let (bytes, results, digest) = blocking(move || {
            let (bytes, results) = operations.apply(base)?;
            let digest = sha256_hex(&bytes);
            Ok((bytes, results, digest))
        })
        .await?;
        let size = bytes.len();
        request.write(&target, bytes);
        Ok(
            json!({"path": target, "created": created, "operations": results, "size": size, "digest": digest}),
        )
    }

    async fn delete_file(&self, request: &ToolCall, args: &Args<'_>) -> Result<Value, ErrorBody> {
        let entry = files::find(&request.files, args.string("path")?)?;
        request.change(Vec::new(), vec![entry.path.clone()]);
        Ok(json!({"path": entry.path, "deleted": true}))
    }

    async fn rename_file(&self, request: &ToolCall, args: &Args<'_>) -> Result<Value, ErrorBody> {
        let entry = files::find(&request.files, args.string("path")?)?.clone();
        let new_path = path::normalize(args.string("new_path")?)?;
        if new_path == entry.path {
            return Err(invalid(format!(
                "rename_file: {new_path} is already the file's path"
            )));
        }
        if request.files.iter().any(|e| e.path == new_path) {
            return Err(invalid(format!(
                "rename_file: {new_path} already exists; delete it first or choose another name"
            )));
        }
        if path::kind_of(&new_path) != entry.kind {
            return Err(invalid(format!(
                "rename_file: {} is {} but {new_path} would be {}; keep the extension's kind",
                entry.path,
                entry.kind,
                path::kind_of(&new_path)
            )));
        }
        let content = self.files.read(&entry).await?;
        request.change(vec![(new_path.clone(), content)], vec![entry.path.clone()]);
        Ok(json!({"path": entry.path, "new_path": new_path, "digest": entry.digest}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::TabularTool;

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
            err.message.contains(
                "list_files, get_file_info, get_file_map, read_file, write_text_file, xlsx_operations"
            ),
            "{}",
            err.message
        );
        for tool in OfficeTool::ALL {
            assert_eq!(OfficeTool::resolve(tool.name()).unwrap(), tool);
        }
    }
}
