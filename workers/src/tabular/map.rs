//! `table_get_map`: the structure of an ingested CSV.

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::Connection;
use serde::Serialize;

use super::cells::ColumnType;
use super::query::{CheckedQuery, count, describe};

/// Rows per chunk in the map.
pub(crate) const CHUNK_ROWS: u64 = 500;
/// Below this encoding confidence the map carries a warning.
const CONFIDENT: f64 = 0.9;

/// The `table_get_map` response.
#[derive(Debug, Serialize)]
pub(crate) struct TableMap {
    pub(crate) format: &'static str,
    pub(crate) delimiter: String,
    pub(crate) quote_char: String,
    pub(crate) encoding_detected: String,
    pub(crate) encoding_confidence: f64,
    pub(crate) has_header: bool,
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

/// The dialect and encoding recorded at ingest (table `atelier_source`).
struct Source {
    delimiter: String,
    quote: String,
    has_header: bool,
    encoding: String,
    confidence: f64,
}

fn cache_failed(e: duckdb::Error) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Internal,
        format!("table cache is unreadable: {e}"),
    )
}

fn read_source(conn: &Connection) -> Result<Source, ErrorBody> {
    conn.query_row(
        "SELECT delimiter, quote, has_header, encoding, encoding_confidence FROM atelier_source",
        [],
        |row| {
            Ok(Source {
                delimiter: row.get(0)?,
                quote: row.get(1)?,
                has_header: row.get(2)?,
                encoding: row.get(3)?,
                confidence: row.get(4)?,
            })
        },
    )
    .map_err(cache_failed)
}

/// Builds the map of table `data`.
pub(crate) fn read_map(conn: &Connection) -> Result<TableMap, ErrorBody> {
    let source = read_source(conn)?;
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
    let mut warnings = Vec::new();
    if source.confidence < CONFIDENT {
        warnings.push(format!(
            "the file is not valid UTF-8; it was read as {} (confidence {}): check accented text",
            source.encoding, source.confidence
        ));
    }
    Ok(TableMap {
        format: "csv",
        delimiter: source.delimiter,
        quote_char: quote_char(&source.quote),
        encoding_detected: source.encoding,
        encoding_confidence: source.confidence,
        has_header: source.has_header,
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
