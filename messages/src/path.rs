//! Workbench paths: the one rule for what a path on the wire may be.
//!
//! A path is relative, UTF-8, `/`-separated, with folders allowed. Empty segments and `.` are
//! dropped; `..`, absolute paths, backslashes, drive prefixes, NUL and control characters are
//! refused with `SANDBOX_VIOLATION`.

use crate::{ErrorBody, ErrorCode};

/// Longest accepted path, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;

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
    if raw.contains('\\') {
        return Err(violation("contains a backslash"));
    }
    if raw.starts_with('/') {
        return Err(violation("is absolute"));
    }
    if raw.len() >= 2 && raw.as_bytes()[1] == b':' {
        return Err(violation("has a drive prefix"));
    }
    let mut segments = Vec::new();
    for segment in raw.split('/') {
        match segment {
            "" | "." => continue,
            ".." => return Err(violation("leaves the workbench with `..`")),
            other => segments.push(other),
        }
    }
    if segments.is_empty() {
        return Err(ErrorBody::new(ErrorCode::ValidationFailed, "path is empty"));
    }
    Ok(segments.join("/"))
}

/// The coarse kind of a file, from its extension.
pub fn kind_of(path: &str) -> &'static str {
    let extension = path
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
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
