//! Workbench paths: the one rule for what a path on the wire may be.
//!
//! A path is relative, UTF-8 in NFC, `/`-separated, with folders allowed. Empty segments and `.`
//! are dropped; `..`, absolute paths, backslashes, drive prefixes, NUL and control characters,
//! bidirectional controls and zero-width characters (which make one name look like another) are
//! refused with `SANDBOX_VIOLATION`; a segment may have at most 255 bytes. Within a workbench a
//! name is a file or a folder, never both ([`clash`]).

use unicode_normalization::UnicodeNormalization;

use crate::{ErrorBody, ErrorCode};

/// Longest accepted path, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// Longest accepted path segment (a file or folder name), in bytes, as most file systems allow.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// Longest workbench name.
pub const MAX_WORKBENCH_NAME_LEN: usize = 64;

/// Whether `name` can name a workbench: 1 to [`MAX_WORKBENCH_NAME_LEN`] characters of
/// `A-Z a-z 0-9 . _ -`, not starting with a dot (so it is one subject token and one file name).
pub fn is_workbench_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_WORKBENCH_NAME_LEN
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Characters that reorder or hide text: bidirectional embeddings, overrides, isolates and
/// marks, and zero-width characters.
fn is_deceptive(c: char) -> bool {
    matches!(
        c,
        '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{061C}'
            | '\u{FEFF}'
    )
}

/// Normalizes a workbench path or refuses it.
pub fn normalize(raw: &str) -> Result<String, ErrorBody> {
    let violation = |why: &str| {
        ErrorBody::new(
            ErrorCode::SandboxViolation,
            format!(
                "path {raw:?} {why}; use a relative path inside the workbench such as `reports/q3.xlsx`"
            ),
        )
    };
    if raw.len() > MAX_PATH_BYTES {
        return Err(violation("is too long"));
    }
    if raw.chars().any(char::is_control) {
        return Err(violation("contains control characters"));
    }
    if raw.chars().any(is_deceptive) {
        return Err(violation("contains bidirectional or zero-width characters"));
    }
    if raw.contains('\\') {
        return Err(violation("contains a backslash"));
    }
    if raw.starts_with('/') {
        return Err(violation("is absolute"));
    }
    let composed: String = raw.nfc().collect();
    let mut segments = Vec::new();
    for segment in composed.split('/') {
        match segment {
            "" | "." => continue,
            ".." => return Err(violation("leaves the workbench with `..`")),
            other if other.len() > MAX_SEGMENT_BYTES => {
                return Err(violation("has a name over 255 bytes"));
            }
            other => segments.push(other),
        }
    }
    if segments.is_empty() {
        return Err(ErrorBody::new(ErrorCode::ValidationFailed, "path is empty"));
    }
    let path = segments.join("/");
    // Checked on the result, so `./C:/x` cannot become `C:/x`.
    if path.len() >= 2 && path.as_bytes()[1] == b':' {
        return Err(violation("has a drive prefix"));
    }
    Ok(path)
}

/// The existing path that `new` cannot stand beside: one that is a folder of `new` (`a` when
/// `new` is `a/b`) or has `new` as its folder (`a/b` when `new` is `a`). Both paths normalized.
pub fn clash<'a>(existing: impl IntoIterator<Item = &'a str>, new: &str) -> Option<&'a str> {
    existing.into_iter().find(|path| {
        let under = |outer: &str, inner: &str| {
            inner.len() > outer.len()
                && inner.starts_with(outer)
                && inner.as_bytes()[outer.len()] == b'/'
        };
        under(path, new) || under(new, path)
    })
}

/// The `VALIDATION_FAILED` error for a path that clashes with a file or folder.
pub fn clash_error(new: &str, existing: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!(
            "{new} cannot be added beside {existing}: a name is either a file or a folder; choose \
             another path"
        ),
    )
}

/// A file's extension, lower-cased (empty without one).
fn extension_of(path: &str) -> String {
    path.rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase())
        .unwrap_or_default()
}

/// A file's media type, from its extension (`application/octet-stream` for one unknown).
pub fn media_type(path: &str) -> &'static str {
    match extension_of(path).as_str() {
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "md" => "text/markdown",
        "txt" | "log" => "text/plain",
        "json" => "application/json",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "pdf" => "application/pdf",
        _ => "application/octet-stream",
    }
}

/// How the table tools read a file (see [`table_shape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableShape {
    /// A delimited file (csv, tsv, psv): its rows are table `data`.
    Delimited,
    /// A text file (txt, md): its figures are table `figures`.
    Prose,
    /// A workbook (xlsx, xlsm, xls, ods): its first sheet is `data`, every sheet a table.
    Workbook,
}

/// How the table tools (and a contract's source query) read the file at `path`, from its
/// extension; `None` for a file they do not read. The one rule the agents (what a plan may
/// name as a source, which tools a model is offered) and the workers (what the tools read)
/// share.
pub fn table_shape(path: &str) -> Option<TableShape> {
    let extension = extension_of(path);
    match kind_of_extension(&extension) {
        "csv" => Some(TableShape::Delimited),
        "xlsx" => Some(TableShape::Workbook),
        _ if matches!(extension.as_str(), "txt" | "md") => Some(TableShape::Prose),
        _ => None,
    }
}

/// The coarse kind of a file, from its extension.
pub fn kind_of(path: &str) -> &'static str {
    kind_of_extension(&extension_of(path))
}

/// The coarse kind of a file whose extension (lower case, without the dot) is `extension`.
pub fn kind_of_extension(extension: &str) -> &'static str {
    match extension {
        "csv" | "tsv" | "psv" => "csv",
        "xlsx" | "xlsm" | "xls" | "ods" => "xlsx",
        "docx" => "docx",
        "pptx" => "pptx",
        "pdf" => "pdf",
        "txt" | "md" | "json" | "xml" | "html" | "htm" | "yaml" | "yml" | "toml" | "log"
        | "ini" => "text",
        _ => "binary",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shapes_follow_the_extension() {
        let shape = |path| table_shape(path);
        assert_eq!(shape("a/b.CSV"), Some(TableShape::Delimited));
        assert_eq!(shape("b.psv"), Some(TableShape::Delimited));
        assert_eq!(shape("notes.md"), Some(TableShape::Prose));
        assert_eq!(shape("book.xls"), Some(TableShape::Workbook));
        assert_eq!(shape("data.json"), None);
        assert_eq!(shape("deck.pptx"), None);
        assert_eq!(shape("README"), None);
    }

    #[test]
    fn normalizes_harmless_forms() {
        assert_eq!(normalize("a/./b//c.csv").ok().as_deref(), Some("a/b/c.csv"));
        assert_eq!(
            normalize("report.xlsx").ok().as_deref(),
            Some("report.xlsx")
        );
    }

    #[test]
    fn refuses_escapes_with_sandbox_violation() {
        for bad in [
            "../x",
            "a/../../x",
            "/etc/passwd",
            "C:/x",
            "./C:/x",
            "./::X",
            "a\\b",
            "a\u{0}b",
            "a\nb",
            "..",
            "x/..",
        ] {
            let code = normalize(bad).err().map(|e| e.code);
            assert_eq!(code, Some(ErrorCode::SandboxViolation), "{bad:?}");
        }
    }

    #[test]
    fn refuses_names_that_look_like_others() {
        for bad in [
            "invoice\u{202E}fdp.exe",
            "a\u{200B}b.csv",
            "\u{FEFF}data.csv",
            "x\u{2066}y",
            &format!("{}.csv", "a".repeat(252)),
        ] {
            let code = normalize(bad).err().map(|e| e.code);
            assert_eq!(code, Some(ErrorCode::SandboxViolation), "{bad:?}");
        }
        assert!(normalize(&format!("{}.csv", "a".repeat(251))).is_ok());
    }

    #[test]
    fn composes_to_nfc() {
        let decomposed = "cafe\u{301}.csv";
        assert_eq!(normalize(decomposed).ok().as_deref(), Some("caf\u{e9}.csv"));
    }

    #[test]
    fn a_name_is_a_file_or_a_folder() {
        let existing = ["a", "reports/q3.xlsx", "ab/c"];
        assert_eq!(clash(existing, "a/b"), Some("a"));
        assert_eq!(clash(existing, "reports"), Some("reports/q3.xlsx"));
        assert_eq!(clash(existing, "reports/q4.xlsx"), None);
        assert_eq!(clash(existing, "ab"), Some("ab/c"));
        assert_eq!(clash(existing, "a.csv"), None);
    }

    #[test]
    fn empty_is_validation_failed() {
        assert_eq!(
            normalize("./").err().map(|e| e.code),
            Some(ErrorCode::ValidationFailed)
        );
    }

    #[test]
    fn kinds_follow_extensions() {
        assert_eq!(kind_of("a/B.CSV"), "csv");
        assert_eq!(kind_of("notes.md"), "text");
        assert_eq!(kind_of("x"), "binary");
    }
}
