//! The office pool's tools: listing, reading (text, CSV, spreadsheets, Word, PowerPoint, PDF),
//! maps and styles, document operations, text writes, and file deletes and renames in the draft.

use atelier_messages::store::ManifestEntry;
use atelier_messages::tool::{Pool, ToolName};
use atelier_messages::{ErrorBody, ErrorCode, path};
use serde_json::{Value, json};

use super::{Toolbox, blocking, count_arg, refusal, to_value};
use crate::args::Args;
use crate::files::{self, ToolCall, sha256_hex};
use crate::office::{
    self, DEFAULT_LINE_COUNT, Format, MAX_LINE_COUNT, Operations, Selector, StylesOf, TextWritten,
};

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
        tool: ToolName,
        request: &ToolCall,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        match tool {
            ToolName::ListFiles => to_value(&office::list_files(&request.files)),
            ToolName::GetFileInfo => self.get_file_info(request, args).await,
            ToolName::GetFileMap => self.on_content(request, args, office::map).await,
            ToolName::ReadFile => self.read_file(request, args).await,
            ToolName::WriteTextFile => self.write_text_file(request, args).await,
            ToolName::XlsxOperations | ToolName::DocxOperations | ToolName::PptxOperations => {
                self.operations(tool, request, args).await
            }
            ToolName::XlsxGetStyles => self.get_styles(request, args, StylesOf::Xlsx).await,
            ToolName::DocxGetStyles => self.get_styles(request, args, StylesOf::Docx).await,
            ToolName::PptxGetStyles => self.get_styles(request, args, StylesOf::Pptx).await,
            ToolName::DeleteFile => self.delete_file(request, args).await,
            ToolName::RenameFile => self.rename_file(request, args).await,
            other => Err(refusal(Pool::Office, other.as_str())),
        }
    }

    /// Runs `work` on the office file the call's `path` names and its content
    /// ([`Self::read_content`]).
    async fn on_content<T: Send + 'static>(
        &self,
        request: &ToolCall,
        args: &Args<'_>,
        work: impl FnOnce(&ManifestEntry, Vec<u8>) -> Result<T, ErrorBody> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        let entry = files::find(&request.files, args.string("path")?)?.clone();
        let format = Format::of(&entry.path)?;
        let worked = entry.clone();
        self.read_content(request, &entry, format, move |bytes| work(&worked, bytes))
            .await
    }

    /// Runs `work` on `entry`'s content: a text's through the held texts (on this thread when
    /// held), any other format's on a blocking thread.
    async fn read_content<T: Send + 'static>(
        &self,
        request: &ToolCall,
        entry: &ManifestEntry,
        format: Format,
        work: impl FnOnce(Vec<u8>) -> Result<T, ErrorBody> + Send + 'static,
    ) -> Result<T, ErrorBody> {
        let workbench = Some(request.workbench.as_str());
        match format {
            Format::Text | Format::Csv => self.files.text_then(workbench, entry, work).await,
            _ => self.files.read_then(workbench, entry, work).await,
        }
    }

    async fn get_file_info(&self, request: &ToolCall, args: &Args<'_>) -> Result<Value, ErrorBody> {
        let entry = files::find(&request.files, args.string("path")?)?.clone();
        let format = match Format::of(&entry.path) {
            Ok(Format::Binary) | Err(_) => return office::describe(&entry, None),
            Ok(format) => format,
        };
        let described = entry.clone();
        self.read_content(request, &entry, format, move |bytes| {
            office::describe(&described, Some(bytes))
        })
        .await
    }

    async fn read_file(&self, request: &ToolCall, args: &Args<'_>) -> Result<Value, ErrorBody> {
        let tool = ToolName::ReadFile.as_str();
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
        self.on_content(request, args, move |entry, bytes| {
            office::read(entry, bytes, &selector)
        })
        .await
    }

    async fn get_styles(
        &self,
        request: &ToolCall,
        args: &Args<'_>,
        of: StylesOf,
    ) -> Result<Value, ErrorBody> {
        self.on_content(request, args, move |entry, bytes| {
            office::styles(entry, bytes, of)
        })
        .await
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
    /// blank document (`create_new`; `create_if_missing` when the file does not exist, the file
    /// itself when it does).
    async fn base_document(
        &self,
        tool: ToolName,
        request: &ToolCall,
        target: &str,
        format: Format,
    ) -> Result<(Vec<u8>, bool), ErrorBody> {
        let name = tool.as_str();
        let create_new = flag(name, &request.args, "create_new")?;
        let create_if_missing = flag(name, &request.args, "create_if_missing")?;
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
        if create_if_missing && (create_new || copy_from.is_some()) {
            return Err(invalid(format!(
                "{name}: give one of `create_if_missing`, `create_new` and `copy_from`"
            )));
        }
        // A missing file is created blank; an existing one is edited in place, never replaced.
        let create_new = create_new || (create_if_missing && existing.is_none());
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
                office::editable(tool, &entry.path)?;
                Ok((
                    self.files.read(Some(&request.workbench), entry).await?,
                    true,
                ))
            }
            (false, None, Some(entry)) => Ok((
                self.files.read(Some(&request.workbench), entry).await?,
                false,
            )),
            (false, None, None) => Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!(
                    "{name}: no such file in the workbench: {target}; pass create_if_missing: true, create_new: true or copy_from to create it"
                ),
            )),
        }
    }

    async fn operations(
        &self,
        tool: ToolName,
        request: &ToolCall,
        args: &Args<'_>,
    ) -> Result<Value, ErrorBody> {
        let target = path::normalize(args.string("path")?)?;
        let format = office::editable(tool, &target)?;
        let operations = Operations::parse(
            format,
            tool.as_str(),
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
        let content = self.files.read(Some(&request.workbench), &entry).await?;
        request.change(vec![(new_path.clone(), content)], vec![entry.path.clone()]);
        Ok(json!({"path": entry.path, "new_path": new_path, "digest": entry.digest}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::resolve;

    #[test]
    fn pools_serve_their_own_tools_only() {
        assert_eq!(
            resolve(Pool::Tabular, "table_query").unwrap(),
            ToolName::TableQuery
        );
        assert_eq!(
            resolve(Pool::Office, "read_file").unwrap(),
            ToolName::ReadFile
        );
        let err = resolve(Pool::Office, "table_query").unwrap_err();
        assert_eq!(err.code, ErrorCode::ValidationFailed);
        assert!(
            err.message.contains(
                "list_files, get_file_info, get_file_map, read_file, write_text_file, xlsx_operations"
            ),
            "{}",
            err.message
        );
        for pool in Pool::ALL {
            for tool in pool.tools() {
                assert_eq!(resolve(pool, tool.as_str()).unwrap(), tool);
            }
        }
    }
}
