//! The office pool's file engines: text and CSV lines, spreadsheets (calamine to read, XML-level
//! edits), Word and PowerPoint documents (XML-level reads and edits), PDF text. Functions here
//! are pure and blocking: the caller fetches content, runs them on a blocking thread (a small
//! text held in memory on the async thread: `files/held.rs`), and writes drafts.
//!
//! # Layout
//! - `xml`: a small XML tree that writes untouched elements back as read; refuses DTDs.
//! - `package`: safe zip packages (bomb, DTD, encryption and truncation checks, then one pass
//!   over the parts against the `limits`), part overlays, relationships and content types;
//!   untouched entries are copied raw.
//! - `limits`: the budgets that bound what a file's own numbers make the readers allocate
//!   (`FILE_TOO_COMPLEX` past them).
//! - `xlsx`, `docx`, `pptx`, `pdf`: one module per format; the xlsx editor also writes the
//!   tabular pool's `table_update_from_export`.
//! - `formats`: file formats by extension and the dispatch of each tool to its engine.
//! - `ordered`: operations applied in order, a failure naming its operation (every editor).
//! - `text`: text and CSV decoding, line windows, CSV dialect sniffing.

mod docx;
mod formats;
#[cfg(feature = "fuzzing")]
mod fuzz;
mod limits;
mod ordered;
mod package;
mod pdf;
mod pptx;
mod review;
mod text;
mod xlsx;
mod xml;

use atelier_messages::store::ManifestEntry;
use atelier_messages::{ErrorBody, ErrorCode, path};
use serde::Serialize;

use text::{LineWindow, decode, line_window, sniff_delimiter, split_record};

pub(crate) use docx::DocxOp;
pub(crate) use formats::{
    Format, Operations, Selector, StylesOf, blank, describe, editable, extension, guard, map, read,
    styles,
};
pub(crate) use pptx::PptxOp;

/// Every sheet of the workbook `bytes` (an OOXML or ODS package when `zip_based`, else a
/// legacy `.xls`) as rows of JSON cells, opened with the same checks as every office read.
pub(crate) fn sheet_rows(
    bytes: Vec<u8>,
    zip_based: bool,
) -> Result<Vec<xlsx::SheetValues>, ErrorBody> {
    xlsx::Workbook::open(bytes, zip_based)?.sheet_rows()
}
pub(crate) use review::diff as review_diff;
pub(crate) use xlsx::XlsxOp;
/// The spreadsheet editor, which also serves the tabular pool's `table_update_from_export`.
pub(crate) use xlsx::{CellRef, CellValue, XlsxEditor, blank_workbook, validate_sheet_name};

#[cfg(test)]
pub(crate) use package::tests::{changed_parts, hostile_xlsx_files, parts, xlsx_with_calc_chain};

/// Lines returned by `read_file` when the caller does not say.
pub(crate) const DEFAULT_LINE_COUNT: i64 = 200;
/// The most lines one `read_file` call returns.
pub(crate) const MAX_LINE_COUNT: i64 = 2000;
/// The largest `write_text_file` content.
pub(crate) const MAX_WRITE_BYTES: usize = 10 * 1024 * 1024;

/// Whether a file kind is read and written as lines of text.
pub(crate) fn is_text_kind(kind: &str) -> bool {
    matches!(kind, "text" | "csv")
}

/// The `list_files` response.
#[derive(Debug, Serialize)]
pub(crate) struct FileList {
    files: Vec<ListedFile>,
}

#[derive(Debug, Serialize)]
struct ListedFile {
    path: String,
    kind: String,
    size: u64,
}

/// `list_files`: every file of the workbench as the agent sees it.
pub(crate) fn list_files(files: &[ManifestEntry]) -> FileList {
    FileList {
        files: files
            .iter()
            .map(|entry| ListedFile {
                path: entry.path.clone(),
                kind: entry.kind.clone(),
                size: entry.size,
            })
            .collect(),
    }
}

/// The `get_file_info` response; the text fields are present for text and CSV files only.
#[derive(Debug, Serialize)]
pub(crate) struct FileInfo {
    path: String,
    kind: String,
    size: u64,
    digest: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    line_count: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    encoding: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delimiter: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    columns: Option<Vec<String>>,
}

/// `get_file_info`; `content` is the file's bytes for text and CSV kinds.
pub(crate) fn file_info(entry: &ManifestEntry, content: Option<&[u8]>) -> FileInfo {
    let mut info = FileInfo {
        path: entry.path.clone(),
        kind: entry.kind.clone(),
        size: entry.size,
        digest: entry.digest.clone(),
        line_count: None,
        encoding: None,
        delimiter: None,
        columns: None,
    };
    if let Some(bytes) = content {
        let decoded = decode(bytes);
        info.line_count = Some(decoded.text.lines().count());
        info.encoding = Some(decoded.encoding);
        if entry.kind == "csv" {
            let header = decoded.text.lines().next().unwrap_or_default();
            let delimiter = sniff_delimiter(header);
            info.delimiter = Some(delimiter.to_string());
            info.columns = Some(split_record(header, delimiter));
        }
    }
    info
}

/// The `read_file` response.
#[derive(Debug, Serialize)]
pub(crate) struct FileRead {
    path: String,
    #[serde(flatten)]
    window: LineWindow,
    encoding: &'static str,
    warnings: Vec<String>,
}

/// `read_file`: lines `line_start..line_start+line_count` (1-based) of a text or CSV file.
pub(crate) fn read_lines(
    entry: &ManifestEntry,
    bytes: &[u8],
    line_start: usize,
    line_count: usize,
) -> FileRead {
    let decoded = decode(bytes);
    let window = line_window(&decoded.text, line_start, line_count);
    let mut warnings = Vec::new();
    if decoded.lossy {
        warnings.push(
            "the file is not valid UTF-8; invalid bytes were replaced with U+FFFD".to_string(),
        );
    }
    if window.line_count == 0 && window.total_lines > 0 {
        warnings.push(format!(
            "line_start {line_start} is past the end of the file ({} lines)",
            window.total_lines
        ));
    }
    if entry.kind == "csv" {
        warnings.push(
            "for CSV analysis prefer table_get_map and table_query over line reads".to_string(),
        );
    }
    FileRead {
        path: entry.path.clone(),
        window,
        encoding: decoded.encoding,
        warnings,
    }
}

/// Checks a `write_text_file` call; returns the normalized path.
pub(crate) fn check_text_write(raw_path: &str, content: &str) -> Result<String, ErrorBody> {
    let target = path::normalize(raw_path)?;
    let kind = path::kind_of(&target);
    if !is_text_kind(kind) {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "write_text_file writes text and CSV files (.txt, .md, .csv, .json…); {target} is {kind}"
            ),
        ));
    }
    if content.len() > MAX_WRITE_BYTES {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "write_text_file: `content` is {} bytes; the limit is {MAX_WRITE_BYTES}",
                content.len()
            ),
        ));
    }
    Ok(target)
}

/// The `write_text_file` response.
#[derive(Debug, Serialize)]
pub(crate) struct TextWritten {
    pub(crate) path: String,
    pub(crate) bytes_written: usize,
    pub(crate) digest: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::sha256_hex;
    use serde_json::json;

    fn entry(path: &str, content: &[u8]) -> ManifestEntry {
        ManifestEntry {
            path: path.into(),
            digest: sha256_hex(content),
            size: content.len() as u64,
            kind: path::kind_of(path).into(),
        }
    }

    fn numbered(lines: usize) -> String {
        (1..=lines).map(|n| format!("line {n}\n")).collect()
    }

    #[test]
    fn reads_line_windows_of_text_files() {
        let content = numbered(450);
        let notes = entry("notes/log.txt", content.as_bytes());
        let read = serde_json::to_value(read_lines(&notes, content.as_bytes(), 201, 200)).unwrap();
        assert_eq!(read["path"], "notes/log.txt");
        assert_eq!(read["line_start"], 201);
        assert_eq!(read["line_count"], 200);
        assert_eq!(read["total_lines"], 450);
        assert_eq!(read["has_more"], true);
        let text = read["content"].as_str().unwrap();
        assert!(text.starts_with("line 201\nline 202\n"));
        assert!(text.ends_with("\nline 400"));
        assert_eq!(read["warnings"], json!([]));
        let tail = serde_json::to_value(read_lines(&notes, content.as_bytes(), 401, 200)).unwrap();
        assert_eq!(
            (tail["line_count"].as_u64(), tail["has_more"].as_bool()),
            (Some(50), Some(false))
        );
    }

    #[test]
    fn reads_the_real_budget_notes() {
        let bytes = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/keenbench/synthetic/budget_notes.txt"
        ))
        .unwrap();
        let notes = entry("budget_notes.txt", &bytes);
        let read = read_lines(&notes, &bytes, 1, 2);
        let text = String::from_utf8(bytes.clone()).unwrap();
        let expected: Vec<&str> = text.lines().take(2).collect();
        assert_eq!(read.window.content, expected.join("\n"));
        assert_eq!(read.window.total_lines, text.lines().count());
    }

    #[test]
    fn invalid_utf8_is_read_lossily_with_a_warning() {
        let bytes = b"caf\xE9\nok\n";
        let read = read_lines(&entry("a.txt", bytes), bytes, 1, 10);
        assert_eq!(read.window.content, "caf\u{FFFD}\nok");
        assert_eq!(read.warnings.len(), 1);
        assert!(read.warnings[0].contains("not valid UTF-8"));
    }

    #[test]
    fn unsupported_and_binary_files_are_refused_with_a_hint() {
        let selector = Selector {
            line_start: 1,
            line_count: 10,
            ..Selector::default()
        };
        for (path, hint) in [
            ("old.doc", "save it as .docx"),
            ("deck.ppt", "save it as .pptx"),
            ("x.bin", "binary file"),
        ] {
            let err = read(&entry(path, b"\xD0\xCF"), b"\xD0\xCF".to_vec(), &selector).unwrap_err();
            assert_eq!(err.code, ErrorCode::ValidationFailed);
            assert!(err.message.contains(hint), "{}", err.message);
        }
        let wrong = Selector {
            sheet: Some("S".into()),
            ..selector
        };
        let err = read(&entry("a.txt", b"a"), b"a".to_vec(), &wrong).unwrap_err();
        assert!(
            err.message.contains("`sheet` does not apply"),
            "{}",
            err.message
        );
    }

    #[test]
    fn file_info_describes_csv_headers() {
        let bytes = b"\xEF\xBB\xBFid;\"Name; full\"\n1;x\n";
        let info = serde_json::to_value(file_info(&entry("d/p.csv", bytes), Some(bytes))).unwrap();
        assert_eq!(
            info,
            json!({"path": "d/p.csv", "kind": "csv", "size": bytes.len(), "digest": sha256_hex(bytes),
                   "line_count": 2, "encoding": "utf-8", "delimiter": ";", "columns": ["id", "Name; full"]})
        );
        let binary = serde_json::to_value(file_info(&entry("a.pdf", b"%PDF"), None)).unwrap();
        assert_eq!(binary.get("line_count"), None);
    }

    #[test]
    fn lists_files() {
        let files = vec![entry("a.csv", b"a"), entry("b/c.md", b"bc")];
        assert_eq!(
            serde_json::to_value(list_files(&files)).unwrap(),
            json!({"files": [{"path": "a.csv", "kind": "csv", "size": 1}, {"path": "b/c.md", "kind": "text", "size": 2}]})
        );
    }

    #[test]
    fn text_writes_are_checked() {
        assert_eq!(
            check_text_write("./out//notes.md", "hi").unwrap(),
            "out/notes.md"
        );
        assert_eq!(
            check_text_write("../x.txt", "hi").unwrap_err().code,
            ErrorCode::SandboxViolation
        );
        assert_eq!(
            check_text_write("r.xlsx", "hi").unwrap_err().code,
            ErrorCode::ValidationFailed
        );
        let big = "x".repeat(MAX_WRITE_BYTES + 1);
        assert_eq!(
            check_text_write("big.txt", &big).unwrap_err().code,
            ErrorCode::ValidationFailed
        );
    }
}
#[cfg(test)]
mod tests_fixtures;
#[cfg(test)]
mod tests_limits;

/// The guarded package reader, for the fuzz targets.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_open(bytes: Vec<u8>) -> Result<(), ErrorBody> {
    package::Package::open(bytes, "fuzz input").map(|_| ())
}

/// The package a fuzz input stands for (see `fuzz::package`), for the fuzz targets.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_package(format: Format, input: &[u8]) -> Vec<u8> {
    fuzz::package(format, input)
}

/// Every tool that reads `format`, on a package, for the fuzz targets.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_read(format: Format, bytes: &[u8]) -> Vec<Result<(), ErrorBody>> {
    fuzz::read_all(format, bytes)
}
