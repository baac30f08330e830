//! The formats the office pool understands and the dispatch of each tool to its engine.

use atelier_messages::store::ManifestEntry;
use atelier_messages::tool::ToolName;
use atelier_messages::{ErrorBody, ErrorCode};
use serde_json::{Value, json};

use super::docx::{self, Docx};
use super::pdf::Pdf;
use super::pptx::{self, Pptx};
use super::xlsx::{self, Workbook};
use super::{DocxOp, PptxOp, XlsxOp, file_info, read_lines};

/// Lines per chunk in a text map.
pub(crate) const TEXT_CHUNK_LINES: usize = 200;

/// A file format, from the path's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Text,
    Csv,
    /// `.xlsx`, `.xlsm`: readable and editable.
    Xlsx,
    /// `.xls`, `.ods`: readable (calamine), not editable.
    SheetReadOnly,
    Docx,
    Pptx,
    Pdf,
    Binary,
}

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

pub(crate) fn extension(path: &str) -> String {
    path.rsplit_once('.')
        .filter(|(stem, _)| !stem.is_empty() || path.starts_with('.'))
        .map(|(_, ext)| ext.to_ascii_lowercase())
        .unwrap_or_default()
}

/// Legacy and foreign formats we recognize but do not read, with what to do instead.
fn unsupported(ext: &str) -> Option<&'static str> {
    Some(match ext {
        "doc" | "dot" => {
            "legacy Word (.doc) files are not supported; save it as .docx and add it again"
        }
        "ppt" | "pps" | "pot" => {
            "legacy PowerPoint (.ppt) files are not supported; save it as .pptx and add it again"
        }
        "odt" | "rtf" => {
            "OpenDocument text and RTF files are not supported; save it as .docx and add it again"
        }
        "odp" => "OpenDocument presentations are not supported; save it as .pptx and add it again",
        "xlsb" => "binary Excel (.xlsb) files are not supported; save it as .xlsx and add it again",
        _ => return None,
    })
}

impl Format {
    /// The format of a workbench path; known but unsupported formats are `VALIDATION_FAILED`.
    pub(crate) fn of(path: &str) -> Result<Format, ErrorBody> {
        let ext = extension(path);
        if let Some(why) = unsupported(&ext) {
            return Err(invalid(format!("{path}: {why}")));
        }
        Ok(match ext.as_str() {
            "xlsx" | "xlsm" => Format::Xlsx,
            "xls" | "ods" => Format::SheetReadOnly,
            "docx" => Format::Docx,
            "pptx" => Format::Pptx,
            "pdf" => Format::Pdf,
            _ => match atelier_messages::path::kind_of(path) {
                "csv" => Format::Csv,
                "text" => Format::Text,
                _ => Format::Binary,
            },
        })
    }

    fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Csv => "csv",
            Format::Xlsx | Format::SheetReadOnly => "spreadsheet",
            Format::Docx => "docx",
            Format::Pptx => "pptx",
            Format::Pdf => "pdf",
            Format::Binary => "binary",
        }
    }
}

/// Runs parser code, turning a panic into `FILE_READ_FAILED` (a damaged file must never take
/// the worker down).
pub(crate) fn guard<T>(work: impl FnOnce() -> T) -> Result<T, ErrorBody> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).map_err(|_| {
        ErrorBody::new(
            ErrorCode::FileReadFailed,
            "the file could not be parsed (the parser gave up on damaged content)",
        )
    })
}

fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}

/// `get_file_info`: common fields plus the format's metadata.
pub(crate) fn describe(entry: &ManifestEntry, bytes: Option<Vec<u8>>) -> Result<Value, ErrorBody> {
    let base =
        json!({"path": entry.path, "kind": entry.kind, "size": entry.size, "digest": entry.digest});
    let format = match Format::of(&entry.path) {
        Ok(format) => format,
        Err(e) => return Ok(merge(base, json!({"readable": false, "note": e.message}))),
    };
    let Some(bytes) = bytes else { return Ok(base) };
    let extra = match format {
        Format::Text | Format::Csv => {
            serde_json::to_value(file_info(entry, Some(&bytes))).unwrap_or_default()
        }
        Format::Xlsx | Format::SheetReadOnly => {
            let mut book = Workbook::open(
                bytes,
                format == Format::Xlsx || extension(&entry.path) == "ods",
            )?;
            json!({"format": extension(&entry.path), "sheets": book.sheets_info()?, "editable": format == Format::Xlsx})
        }
        Format::Docx => merge(json!({"format": "docx"}), Docx::open(bytes)?.info()?),
        Format::Pptx => merge(json!({"format": "pptx"}), Pptx::open(bytes)?.info()?),
        Format::Pdf => merge(json!({"format": "pdf"}), Pdf::open(&bytes)?.info()),
        Format::Binary => json!({}),
    };
    Ok(merge(base, extra))
}

/// `get_file_map`: deterministic regions to read one at a time.
pub(crate) fn map(entry: &ManifestEntry, bytes: Vec<u8>) -> Result<Value, ErrorBody> {
    let format = Format::of(&entry.path)?;
    let base = json!({"path": entry.path, "kind": entry.kind});
    let extra = match format {
        Format::Text | Format::Csv => {
            let decoded = super::text::decode(&bytes);
            let total = decoded.text.lines().count();
            let chunks: Vec<Value> = (0..total.div_ceil(TEXT_CHUNK_LINES))
                .map(|i| {
                    let first = i * TEXT_CHUNK_LINES + 1;
                    let last = ((i + 1) * TEXT_CHUNK_LINES).min(total);
                    json!({"index": i, "line_start": first, "line_count": last + 1 - first})
                })
                .collect();
            json!({"format": format.name(), "line_count": total, "chunks": chunks})
        }
        Format::Xlsx | Format::SheetReadOnly => {
            let mut book = Workbook::open(
                bytes,
                format == Format::Xlsx || extension(&entry.path) == "ods",
            )?;
            json!({"format": extension(&entry.path), "sheets": book.map()?})
        }
        Format::Docx => merge(json!({"format": "docx"}), Docx::open(bytes)?.map()?),
        Format::Pptx => merge(json!({"format": "pptx"}), Pptx::open(bytes)?.map()?),
        Format::Pdf => merge(json!({"format": "pdf"}), Pdf::open(&bytes)?.map()),
        Format::Binary => return Err(binary(entry)),
    };
    Ok(merge(base, extra))
}

fn binary(entry: &ManifestEntry) -> ErrorBody {
    invalid(format!(
        "{} is a binary file ({}); only its metadata is available through get_file_info",
        entry.path, entry.kind
    ))
}

/// The format selectors of `read_file`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Selector {
    pub(crate) sheet: Option<String>,
    pub(crate) range: Option<String>,
    pub(crate) section: Option<String>,
    pub(crate) slide_index: Option<usize>,
    pub(crate) pages: Option<String>,
    pub(crate) line_start: usize,
    pub(crate) line_count: usize,
}

impl Selector {
    /// Refuses selectors meant for another format.
    fn check(&self, format: Format, path: &str) -> Result<(), ErrorBody> {
        let given = [
            (
                "sheet",
                self.sheet.is_some(),
                matches!(format, Format::Xlsx | Format::SheetReadOnly),
            ),
            (
                "range",
                self.range.is_some(),
                matches!(format, Format::Xlsx | Format::SheetReadOnly),
            ),
            ("section", self.section.is_some(), format == Format::Docx),
            (
                "slide_index",
                self.slide_index.is_some(),
                format == Format::Pptx,
            ),
            ("pages", self.pages.is_some(), format == Format::Pdf),
        ];
        match given.iter().find(|(_, present, fits)| *present && !*fits) {
            Some((name, _, _)) => Err(invalid(format!(
                "read_file: `{name}` does not apply to {path} ({})",
                format.name()
            ))),
            None => Ok(()),
        }
    }
}

/// `read_file`: one region of a file, chosen by the format's selector.
pub(crate) fn read(
    entry: &ManifestEntry,
    bytes: Vec<u8>,
    selector: &Selector,
) -> Result<Value, ErrorBody> {
    let format = Format::of(&entry.path)?;
    selector.check(format, &entry.path)?;
    let base = json!({"path": entry.path});
    let extra = match format {
        Format::Text | Format::Csv => {
            return serde_json::to_value(read_lines(
                entry,
                &bytes,
                selector.line_start,
                selector.line_count,
            ))
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()));
        }
        Format::Xlsx | Format::SheetReadOnly => {
            let mut book = Workbook::open(
                bytes,
                format == Format::Xlsx || extension(&entry.path) == "ods",
            )?;
            book.read(selector.sheet.as_deref(), selector.range.as_deref())?
                .into_value()
        }
        Format::Docx => Docx::open(bytes)?.read_section(selector.section.as_deref())?,
        Format::Pptx => {
            let mut pptx = Pptx::open(bytes)?;
            let count = pptx.slides.len();
            match selector.slide_index {
                Some(index) => json!({"slide_count": count, "slide": pptx.slide(index)?}),
                None => {
                    let slides = (0..count)
                        .map(|i| pptx.slide(i))
                        .collect::<Result<Vec<_>, _>>()?;
                    json!({"slide_count": count, "slides": slides})
                }
            }
        }
        Format::Pdf => Pdf::open(&bytes)?.read(selector.pages.as_deref())?,
        Format::Binary => return Err(binary(entry)),
    };
    Ok(merge(base, extra))
}

/// The format each styles tool reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StylesOf {
    Xlsx,
    Docx,
    Pptx,
}

/// `xlsx_get_styles`, `docx_get_styles`, `pptx_get_styles`.
pub(crate) fn styles(
    entry: &ManifestEntry,
    bytes: Vec<u8>,
    of: StylesOf,
) -> Result<Value, ErrorBody> {
    let format = Format::of(&entry.path)?;
    let styles = match (of, format) {
        (StylesOf::Xlsx, Format::Xlsx) => xlsx::styles_in_use(bytes)?,
        (StylesOf::Docx, Format::Docx) => Docx::open(bytes)?.styles_in_use()?,
        (StylesOf::Pptx, Format::Pptx) => Pptx::open(bytes)?.styles()?,
        _ => {
            return Err(invalid(
                format!(
                    "{} is {}; this tool reads {:?} files",
                    entry.path,
                    format.name(),
                    of
                )
                .to_lowercase(),
            ));
        }
    };
    Ok(merge(json!({"path": entry.path}), styles))
}

/// A parsed operation list for one of the `*_operations` tools.
#[derive(Debug)]
pub(crate) enum Operations {
    Xlsx(Vec<XlsxOp>),
    Docx(Vec<DocxOp>),
    Pptx(Vec<PptxOp>),
}

impl Operations {
    /// Parses `operations` for the tool's format (each item names its `op`).
    pub(crate) fn parse(
        format: Format,
        tool: &str,
        operations: &Value,
    ) -> Result<Operations, ErrorBody> {
        let items = operations
            .as_array()
            .filter(|items| !items.is_empty())
            .ok_or_else(|| {
                invalid(format!(
                    "{tool}: `operations` must be a non-empty array of objects with an `op`"
                ))
            })?;
        fn each<T: serde::de::DeserializeOwned>(
            tool: &str,
            items: &[Value],
        ) -> Result<Vec<T>, ErrorBody> {
            items
                .iter()
                .enumerate()
                .map(|(n, item)| {
                    T::deserialize(item).map_err(|e| {
                        let op = item.get("op").and_then(Value::as_str).unwrap_or("?");
                        invalid(format!("{tool}: operation {n} ({op}): {e}"))
                    })
                })
                .collect()
        }
        Ok(match format {
            Format::Xlsx => Operations::Xlsx(each(tool, items)?),
            Format::Docx => Operations::Docx(each(tool, items)?),
            Format::Pptx => Operations::Pptx(each(tool, items)?),
            other => {
                return Err(invalid(format!(
                    "{tool} cannot edit {} files",
                    other.name()
                )));
            }
        })
    }

    /// Applies the operations to `bytes`, all or nothing. When every operation found nothing
    /// to change (each a `replace_text` that replaced nothing), the file comes back as it was,
    /// byte for byte: its digest then says that nothing changed.
    pub(crate) fn apply(&self, bytes: Vec<u8>) -> Result<(Vec<u8>, Vec<Value>), ErrorBody> {
        let original = bytes.clone();
        let (edited, results) = match self {
            Operations::Xlsx(ops) => xlsx::apply_operations(bytes, ops),
            Operations::Docx(ops) => docx::apply_operations(bytes, ops),
            Operations::Pptx(ops) => pptx::apply_operations(bytes, ops),
        }?;
        let changed_nothing = !results.is_empty()
            && results
                .iter()
                .all(|result| result.get("replacements").and_then(Value::as_u64) == Some(0));
        Ok((if changed_nothing { original } else { edited }, results))
    }
}

/// The format a `*_operations` tool edits, checked against the target path.
pub(crate) fn editable(tool: ToolName, path: &str) -> Result<Format, ErrorBody> {
    let wanted = match tool {
        ToolName::XlsxOperations => Format::Xlsx,
        ToolName::DocxOperations => Format::Docx,
        _ => Format::Pptx,
    };
    let format = Format::of(path)?;
    if format != wanted {
        return Err(invalid(format!(
            "{tool} edits {} files; {path} is {}",
            wanted.name(),
            format.name()
        )));
    }
    Ok(format)
}

/// A new, empty document of `format`.
pub(crate) fn blank(format: Format) -> Result<Vec<u8>, ErrorBody> {
    match format {
        Format::Xlsx => xlsx::blank_workbook(),
        Format::Docx => docx::blank_document(),
        Format::Pptx => pptx::blank_presentation(),
        other => Err(invalid(format!("cannot create {} files", other.name()))),
    }
}
