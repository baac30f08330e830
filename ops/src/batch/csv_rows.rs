//! `atelier run --rows FILE`: the rows of a CSV file as variables by column name.

use std::path::Path;

use anyhow::{Context, bail};
use atelier_coordinator::templates::Vars;

/// The rows of a CSV file with a header, as variables by column name.
pub(super) fn read_rows(path: &Path) -> anyhow::Result<Vec<Vars>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("FILE_READ_FAILED: cannot read {}", path.display()))?;
    // Spreadsheet programs often start a UTF-8 CSV with a byte order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut records = parse_csv(text).into_iter();
    let Some(header) = records.next() else {
        bail!("VALIDATION_FAILED: {} has no header row", path.display());
    };
    let mut rows = Vec::new();
    for (number, record) in records.enumerate() {
        if record.len() != header.len() {
            bail!(
                "VALIDATION_FAILED: row {} of {} has {} fields; the header has {}",
                number + 2,
                path.display(),
                record.len(),
                header.len()
            );
        }
        rows.push(header.iter().cloned().zip(record).collect());
    }
    if rows.is_empty() {
        bail!("VALIDATION_FAILED: {} has no rows", path.display());
    }
    Ok(rows)
}

/// Splits CSV text (RFC 4180: quoted fields, doubled quotes, CRLF) into records, skipping
/// empty lines.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                if record.iter().any(|field| !field.is_empty()) || record.len() > 1 {
                    records.push(std::mem::take(&mut record));
                }
                record.clear();
            }
            (false, c) => field.push(c),
        }
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_keep_quoted_commas_quotes_and_newlines() {
        let text = "name,total\r\n\"ACME, Inc.\",\"12\"\n\"say \"\"hi\"\"\",\"a\nb\"\n\n";
        let records = parse_csv(text);
        assert_eq!(
            records,
            vec![
                vec!["name".to_string(), "total".to_string()],
                vec!["ACME, Inc.".to_string(), "12".to_string()],
                vec!["say \"hi\"".to_string(), "a\nb".to_string()],
            ]
        );
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_column() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("rows.csv");
        std::fs::write(&path, "\u{feff}customer,total\nACME,1\n")?;
        let rows = read_rows(&path)?;
        assert_eq!(rows[0].get("customer").map(String::as_str), Some("ACME"));
        assert!(read_rows(&dir.path().join("missing.csv")).is_err());
        Ok(())
    }
}
