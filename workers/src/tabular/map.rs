//! `table_get_map`: the structure of an ingested CSV.

use atelier_messages::ErrorBody;
use duckdb::Connection;
use serde::Serialize;

use super::cells::ColumnType;
use super::ingest::read_meta;
use super::query::{CheckedQuery, count, describe};

/// Rows per chunk in the map.
pub(crate) const CHUNK_ROWS: u64 = 500;

/// The `table_get_map` response.
#[derive(Debug, Serialize)]
pub(crate) struct TableMap {
    /// `csv`, `tsv`, `psv` or `txt`: from the file name.
    pub(crate) format: &'static str,
    /// Whether the table structure was inferred from content rather than stated by the file
    /// name (delimited `.txt`, or a delimiter other than the extension's).
    pub(crate) format_inferred: bool,
    pub(crate) delimiter: String,
    pub(crate) quote_char: String,
    pub(crate) encoding_detected: String,
    pub(crate) encoding_confidence: f64,
    pub(crate) has_header: bool,
    /// Lines above the header skipped as metadata, and their text (at most 20 lines).
    pub(crate) skipped_rows: u64,
    pub(crate) preamble: Vec<String>,
    pub(crate) decimal_separator: String,
    pub(crate) thousands_separator: Option<String>,
    /// Spellings read as NULL besides the empty field (e.g. `NA`).
    pub(crate) null_values: Vec<String>,
    pub(crate) row_count: u64,
    pub(crate) column_count: usize,
    pub(crate) columns: Vec<MapColumn>,
    pub(crate) chunks: Vec<Chunk>,
    pub(crate) warnings: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct MapColumn {
    pub(crate) name: String,
    pub(crate) index: usize,
    pub(crate) inferred_type: ColumnType,
}

#[derive(Debug, Serialize)]
pub(crate) struct Chunk {
    pub(crate) index: u64,
    pub(crate) rows: String,
}

/// The format named by a file's extension and the delimiter it implies, if any.
fn format_of(name: &str) -> (&'static str, Option<&'static str>) {
    let extension = name
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "tsv" => ("tsv", Some("\t")),
        "psv" => ("psv", Some("|")),
        "txt" => ("txt", None),
        _ => ("csv", None),
    }
}

/// Builds the map of table `data`; `name` is the file's workbench path.
pub(crate) fn read_map(conn: &Connection, name: &str) -> Result<TableMap, ErrorBody> {
    let source = read_meta(conn)?;
    let whole = CheckedQuery::whole_table();
    let columns: Vec<MapColumn> = describe(conn, &whole)?
        .into_iter()
        .enumerate()
        .map(|(index, column)| MapColumn {
            name: column.name,
            index,
            inferred_type: column.kind,
        })
        .collect();
    let row_count = count(conn, &whole)?;
    let (format, implied) = format_of(name);
    let delimiter = source.delimiter.clone();
    let format_inferred = format == "txt" || implied.is_some_and(|d| d != delimiter);
    let mut warnings = source.warnings.clone();
    if format_inferred {
        warnings.push(format!(
            "the table structure of {name} was inferred from its content (delimiter {delimiter:?}); treat column types as best-effort and check key assumptions before transforming"
        ));
    }
    if !source.has_header {
        warnings
            .push("no header row was detected: columns are named column0, column1, …".to_string());
    }
    if source.skipped_rows > 0 {
        warnings.push(format!(
            "{} line(s) above the header were skipped as metadata (see `preamble`)",
            source.skipped_rows
        ));
    }
    Ok(TableMap {
        format,
        format_inferred,
        delimiter,
        quote_char: quote_char(&source.quote),
        encoding_detected: source.encoding,
        encoding_confidence: source.encoding_confidence,
        has_header: source.has_header,
        skipped_rows: source.skipped_rows,
        preamble: source.preamble,
        decimal_separator: source.decimal_separator,
        thousands_separator: source.thousands_separator,
        null_values: source.null_values,
        row_count,
        column_count: columns.len(),
        columns,
        chunks: chunks(row_count),
        warnings,
    })
}

/// DuckDB's sniffer reports `(empty)` when the file has no quoted field; the reader's quote is
/// then the standard `"`.
fn quote_char(sniffed: &str) -> String {
    match sniffed {
        "" | "(empty)" => "\"".to_string(),
        other => other.to_string(),
    }
}

/// Row-based chunks of [`CHUNK_ROWS`], 1-based and inclusive.
pub(crate) fn chunks(row_count: u64) -> Vec<Chunk> {
    (0..row_count.div_ceil(CHUNK_ROWS))
        .map(|index| {
            let first = index * CHUNK_ROWS + 1;
            let last = ((index + 1) * CHUNK_ROWS).min(row_count);
            Chunk {
                index,
                rows: format!("{first}-{last}"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_row_once() {
        let rows: Vec<String> = chunks(1001).into_iter().map(|c| c.rows).collect();
        assert_eq!(rows, vec!["1-500", "501-1000", "1001-1001"]);
        assert!(chunks(0).is_empty());
        assert_eq!(chunks(500).len(), 1);
    }
}
