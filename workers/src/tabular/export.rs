//! `table_export`: a query result (or the whole table) as CSV or XLSX bytes.
//!
//! XLSX cells keep their types: numbers are numbers, booleans booleans, dates and timestamps real
//! Excel dates with a date format, text text, NULL an empty cell. Anything Excel cannot hold
//! exactly is written as well as it can be and reported in `warnings`.
//!
//! An export holds at most the worker's export limit ([`super::Limits::export_bytes`]), checked
//! row by row while it is written: CSV counts its bytes, XLSX its cells' content
//! ([`excel_cost`]). Past the limit the call is `RESULT_TOO_LARGE` and nothing is written. A CSV
//! value larger than the whole limit never leaves DuckDB (only its size does); XLSX reads at
//! most the characters a cell can hold.

use std::borrow::Cow;
use std::ops::ControlFlow;

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::Connection;
use rust_xlsxwriter::{Format, Workbook, Worksheet, XlsxError};
use serde::Serialize;

use super::cells::{Cell, Column, TextRead, days_of_micros, excel_serial_of_days};
use super::query::{CheckedQuery, scan};

/// The sheet name when the caller gives none.
pub(crate) const DEFAULT_SHEET: &str = "Sheet1";
/// Excel's last row (1-based), header included.
const EXCEL_MAX_ROWS: u64 = 1_048_576;
/// Excel's last column.
const EXCEL_MAX_COLUMNS: usize = 16_384;
/// Excel's longest cell text, in characters.
const EXCEL_MAX_TEXT: usize = 32_767;
/// How XLSX exports read text: one character more than a cell holds, to see what is cut.
pub(crate) const EXCEL_TEXT: TextRead = TextRead::Prefix(EXCEL_MAX_TEXT + 1);
/// What a non-empty cell counts towards the export limit besides its text (its XML markup).
const EXCEL_CELL_BYTES: u64 = 48;
/// Integers beyond this lose precision as Excel numbers (2^53).
const EXACT_INTEGER: i64 = 9_007_199_254_740_992;
/// Excel's serial of 1900-03-01: earlier dates fall into its 1900 leap-year bug.
const FIRST_SAFE_SERIAL: f64 = 61.0;

/// An export target format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExportFormat {
    Csv,
    Xlsx,
}

impl ExportFormat {
    /// The format named by `format`, which must match `target_path`'s extension.
    pub(crate) fn parse(format: &str, target_path: &str) -> Result<Self, ErrorBody> {
        let parsed = match format {
            "csv" => ExportFormat::Csv,
            "xlsx" => ExportFormat::Xlsx,
            other => {
                return Err(ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!("table_export: `format` must be \"csv\" or \"xlsx\", got {other:?}"),
                ));
            }
        };
        let extension = target_path
            .rsplit_once('.')
            .map(|(_, ext)| ext.to_ascii_lowercase());
        if extension.as_deref() != Some(parsed.as_str()) {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "table_export: `target_path` {target_path:?} must end in .{} to match format {:?}",
                    parsed.as_str(),
                    parsed.as_str()
                ),
            ));
        }
        Ok(parsed)
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ExportFormat::Csv => "csv",
            ExportFormat::Xlsx => "xlsx",
        }
    }
}

/// The `table_export` response.
#[derive(Debug, Serialize)]
pub(crate) struct ExportSummary {
    pub(crate) target_path: String,
    pub(crate) format: &'static str,
    pub(crate) sheet: Option<String>,
    pub(crate) row_count: u64,
    pub(crate) column_count: usize,
    pub(crate) warnings: Vec<String>,
}

/// An export's file content and summary.
#[derive(Debug)]
pub(crate) struct Exported {
    pub(crate) content: Vec<u8>,
    pub(crate) summary: ExportSummary,
}

/// What an export is to write and how much it may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExportTarget<'a> {
    pub(crate) format: ExportFormat,
    pub(crate) sheet: Option<&'a str>,
    pub(crate) target_path: &'a str,
    /// The export limit in bytes (see the module docs).
    pub(crate) max_bytes: u64,
}

/// `RESULT_TOO_LARGE`: the export passed its limit at `row` (1-based; 0 is the header).
pub(crate) fn over_limit(row: u64, max_bytes: u64) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ResultTooLarge,
        format!(
            "the export passed the worker's export limit of {} at row {row}; nothing was \
             written. Filter or aggregate the rows, select fewer columns, or export in parts \
             (ORDER BY with LIMIT and OFFSET)",
            describe_bytes(max_bytes)
        ),
    )
}

/// `1 GiB`, `256 MiB`, or a plain byte count.
pub(crate) fn describe_bytes(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    match bytes {
        0 => "0 bytes".to_string(),
        b if b % (1024 * MIB) == 0 => format!("{} GiB ({bytes} bytes)", b / (1024 * MIB)),
        b if b % MIB == 0 => format!("{} MiB ({bytes} bytes)", b / MIB),
        b => format!("{b} bytes"),
    }
}

/// Exports a checked query's full result.
pub(crate) fn export(
    conn: &Connection,
    query: &CheckedQuery,
    columns: &[Column],
    target: ExportTarget<'_>,
) -> Result<Exported, ErrorBody> {
    let ExportTarget {
        format,
        sheet,
        target_path,
        max_bytes,
    } = target;
    let mut warnings = Vec::new();
    if !query.ordered {
        warnings.push(
            "the query has no ORDER BY: rows are in DuckDB's order (file order for plain scans, \
             unspecified after GROUP BY, DISTINCT or joins); add ORDER BY for a stable export"
                .to_string(),
        );
    }
    let (content, row_count, sheet) = match format {
        ExportFormat::Csv => {
            if sheet.is_some() {
                warnings.push("`sheet` applies to xlsx only and was ignored".to_string());
            }
            let (content, rows) = csv_bytes(conn, query, columns, max_bytes)?;
            (content, rows, None)
        }
        ExportFormat::Xlsx => {
            let sheet = sheet.unwrap_or(DEFAULT_SHEET);
            let (content, rows) =
                xlsx_bytes(conn, query, columns, sheet, max_bytes, &mut warnings)?;
            (content, rows, Some(sheet.to_string()))
        }
    };
    Ok(Exported {
        content,
        summary: ExportSummary {
            target_path: target_path.to_string(),
            format: format.as_str(),
            sheet,
            row_count,
            column_count: columns.len(),
            warnings,
        },
    })
}

fn csv_bytes(
    conn: &Connection,
    query: &CheckedQuery,
    columns: &[Column],
    max_bytes: u64,
) -> Result<(Vec<u8>, u64), ErrorBody> {
    let mut out = Vec::new();
    let limit = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    let header = columns.iter().map(|c| Some(Cow::Borrowed(c.name.as_str())));
    if !push_csv_record(&mut out, header, limit) {
        return Err(over_limit(0, max_bytes));
    }
    let mut rows = 0u64;
    scan(
        conn,
        query,
        columns,
        None,
        TextRead::Whole(max_bytes),
        |cells| {
            rows += 1;
            if let Some((column, Cell::Cut { bytes, .. })) = columns
                .iter()
                .zip(&cells)
                .find(|(_, cell)| matches!(cell, Cell::Cut { .. }))
            {
                return Err(value_over_limit(rows, &column.name, *bytes, max_bytes));
            }
            match push_csv_record(&mut out, cells.iter().map(Cell::to_text), limit) {
                true => Ok(ControlFlow::Continue(())),
                false => Err(over_limit(rows, max_bytes)),
            }
        },
    )?;
    Ok((out, rows))
}

/// `RESULT_TOO_LARGE`: one value is larger than a whole export may be.
fn value_over_limit(row: u64, column: &str, bytes: u64, max_bytes: u64) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ResultTooLarge,
        format!(
            "row {row}, column {column:?} holds {bytes} bytes, more than the worker's export \
             limit of {}; nothing was written. Leave it out or shorten it (e.g. left({column:?}, n))",
            describe_bytes(max_bytes)
        ),
    )
}

/// Appends one RFC 4180 record — fields quoted when they hold a comma, quote or line break;
/// NULL empty — unless it would take `out` past `limit` bytes: then nothing is appended and
/// the answer is false.
fn push_csv_record<'a>(
    out: &mut Vec<u8>,
    fields: impl Iterator<Item = Option<Cow<'a, str>>>,
    limit: usize,
) -> bool {
    let fields: Vec<Option<Cow<'a, str>>> = fields.collect();
    let quoted = |field: &str| field.contains([',', '"', '\n', '\r']);
    let size: usize = fields
        .iter()
        .map(|field| match field.as_deref() {
            Some(f) if quoted(f) => f.len() + f.matches('"').count() + 2,
            Some(f) => f.len(),
            None => 0,
        })
        .sum::<usize>()
        + fields.len().max(1);
    if out.len().saturating_add(size) > limit {
        return false;
    }
    for (index, field) in fields.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        let field = field.as_deref().unwrap_or_default();
        if quoted(field) {
            out.push(b'"');
            for (n, piece) in field.split('"').enumerate() {
                if n > 0 {
                    out.extend_from_slice(b"\"\"");
                }
                out.extend_from_slice(piece.as_bytes());
            }
            out.push(b'"');
        } else {
            out.extend_from_slice(field.as_bytes());
        }
    }
    out.push(b'\n');
    true
}

fn xlsx_failed(e: XlsxError) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::FileWriteFailed,
        format!("cannot write the workbook: {e}"),
    )
}

fn xlsx_bytes(
    conn: &Connection,
    query: &CheckedQuery,
    columns: &[Column],
    sheet: &str,
    max_bytes: u64,
    warnings: &mut Vec<String>,
) -> Result<(Vec<u8>, u64), ErrorBody> {
    check_sheet_size(0, columns.len())?;
    let mut writer = SheetWriter::new(sheet)?;
    writer.header(columns)?;
    let mut cost = header_cost(columns);
    scan(conn, query, columns, None, EXCEL_TEXT, |cells| {
        cost += cells.iter().map(excel_cost).sum::<u64>();
        if cost > max_bytes {
            return Err(over_limit(writer.rows + 1, max_bytes));
        }
        writer.row(&cells).map(|()| ControlFlow::Continue(()))
    })?;
    let rows = writer.rows;
    warnings.extend(writer.notes.messages());
    let mut workbook = Workbook::new();
    workbook.push_worksheet(writer.worksheet);
    let content = workbook.save_to_buffer().map_err(xlsx_failed)?;
    if content.len() as u64 > max_bytes {
        return Err(over_limit(rows, max_bytes));
    }
    Ok((content, rows))
}

/// What a sheet's header row counts towards the export limit.
pub(crate) fn header_cost(columns: &[Column]) -> u64 {
    columns
        .iter()
        .map(|c| EXCEL_CELL_BYTES + c.name.len() as u64)
        .sum()
}

/// What a cell counts towards the export limit: the text it will hold (at most a cell's
/// characters) plus [`EXCEL_CELL_BYTES`]; an empty cell nothing.
pub(crate) fn excel_cost(cell: &Cell) -> u64 {
    match cell {
        Cell::Null => 0,
        Cell::Text(text) | Cell::Cut { prefix: text, .. } => {
            EXCEL_CELL_BYTES + truncate_chars(text, EXCEL_MAX_TEXT).len() as u64
        }
        _ => EXCEL_CELL_BYTES,
    }
}

/// Counts of values Excel could not hold exactly.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    truncated_text: u64,
    non_finite: u64,
    inexact_integers: u64,
    early_dates: u64,
}

impl Notes {
    pub(crate) fn messages(&self) -> Vec<String> {
        let mut messages = Vec::new();
        let mut note = |count: u64, what: &str| {
            if count > 0 {
                messages.push(format!("{count} {what}"));
            }
        };
        note(
            self.truncated_text,
            "text cell(s) longer than 32767 characters were truncated",
        );
        note(
            self.non_finite,
            "NaN or infinite number(s) were written as empty cells",
        );
        note(
            self.inexact_integers,
            "integer(s) beyond 2^53 lost precision as Excel numbers",
        );
        note(
            self.early_dates,
            "date(s) before 1900-03-01 were written as text",
        );
        messages
    }
}

/// A cell as Excel will hold it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ExcelValue<'a> {
    Empty,
    Bool(bool),
    Number(f64),
    Text(std::borrow::Cow<'a, str>),
    /// An Excel serial date; `with_time` picks the date-time format.
    Date {
        serial: f64,
        with_time: bool,
    },
}

/// How `cell` is written to Excel, counting in `notes` what cannot be held exactly.
pub(crate) fn excel_value<'a>(cell: &'a Cell, notes: &mut Notes) -> ExcelValue<'a> {
    match cell {
        Cell::Null => ExcelValue::Empty,
        Cell::Bool(b) => ExcelValue::Bool(*b),
        Cell::Int(i) => {
            if i.unsigned_abs() > EXACT_INTEGER.unsigned_abs() {
                notes.inexact_integers += 1;
            }
            ExcelValue::Number(*i as f64)
        }
        Cell::Float(f) if !f.is_finite() => {
            notes.non_finite += 1;
            ExcelValue::Empty
        }
        Cell::Float(f) => ExcelValue::Number(*f),
        Cell::Text(text) | Cell::Cut { prefix: text, .. } => {
            let kept = truncate_chars(text, EXCEL_MAX_TEXT);
            if kept.len() < text.len() || matches!(cell, Cell::Cut { .. }) {
                notes.truncated_text += 1;
            }
            ExcelValue::Text(kept.into())
        }
        Cell::Date(days) => date_value(cell, f64::from(*days), false, notes),
        Cell::Timestamp(micros) => date_value(cell, days_of_micros(*micros), true, notes),
    }
}

fn date_value<'a>(cell: &Cell, days: f64, with_time: bool, notes: &mut Notes) -> ExcelValue<'a> {
    let serial = excel_serial_of_days(days);
    if serial < FIRST_SAFE_SERIAL {
        notes.early_dates += 1;
        return ExcelValue::Text(
            cell.to_text()
                .map(Cow::into_owned)
                .unwrap_or_default()
                .into(),
        );
    }
    ExcelValue::Date { serial, with_time }
}

/// Refuses results wider or longer than a sheet.
pub(crate) fn check_sheet_size(rows: u64, columns: usize) -> Result<(), ErrorBody> {
    if columns > EXCEL_MAX_COLUMNS {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!("the result has {columns} columns; Excel holds at most {EXCEL_MAX_COLUMNS}"),
        ));
    }
    if rows >= EXCEL_MAX_ROWS {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "the result has more rows than an Excel sheet holds ({}); filter it or export csv",
                EXCEL_MAX_ROWS - 1
            ),
        ));
    }
    Ok(())
}

/// Writes one worksheet, row by row.
struct SheetWriter {
    worksheet: Worksheet,
    date: Format,
    timestamp: Format,
    rows: u64,
    notes: Notes,
}

impl SheetWriter {
    fn new(sheet: &str) -> Result<Self, ErrorBody> {
        let mut worksheet = Worksheet::new();
        worksheet
            .set_name(sheet)
            .map_err(|e| invalid_sheet(sheet, e))?;
        Ok(Self {
            worksheet,
            date: Format::new().set_num_format("yyyy-mm-dd"),
            timestamp: Format::new().set_num_format("yyyy-mm-dd hh:mm:ss"),
            rows: 0,
            notes: Notes::default(),
        })
    }

    fn header(&mut self, columns: &[Column]) -> Result<(), ErrorBody> {
        let bold = Format::new().set_bold();
        for (col, column) in (0u16..).zip(columns) {
            self.worksheet
                .write_string_with_format(0, col, &column.name, &bold)
                .map_err(xlsx_failed)?;
        }
        Ok(())
    }

    fn row(&mut self, cells: &[Cell]) -> Result<(), ErrorBody> {
        check_sheet_size(self.rows + 1, cells.len())?;
        self.rows += 1;
        let row = u32::try_from(self.rows)
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
        for (col, cell) in (0u16..).zip(cells) {
            self.cell(row, col, cell)?;
        }
        Ok(())
    }

    fn cell(&mut self, row: u32, col: u16, cell: &Cell) -> Result<(), ErrorBody> {
        let sheet = &mut self.worksheet;
        let written = match excel_value(cell, &mut self.notes) {
            ExcelValue::Empty => return Ok(()),
            ExcelValue::Bool(b) => sheet.write_boolean(row, col, b),
            ExcelValue::Number(n) => sheet.write_number(row, col, n),
            ExcelValue::Text(text) => sheet.write_string(row, col, text),
            ExcelValue::Date { serial, with_time } => {
                let format = if with_time {
                    &self.timestamp
                } else {
                    &self.date
                };
                sheet.write_number_with_format(row, col, serial, format)
            }
        };
        written.map(|_| ()).map_err(xlsx_failed)
    }
}

/// `VALIDATION_FAILED` for a sheet name Excel refuses.
fn invalid_sheet(sheet: &str, e: XlsxError) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!("invalid `sheet` {sheet:?}: {e}"),
    )
}

/// The longest prefix of `text` with at most `max` characters.
fn truncate_chars(text: &str, max: usize) -> &str {
    text.char_indices()
        .nth(max)
        .map_or(text, |(end, _)| &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_must_match_target_extension() {
        assert_eq!(
            ExportFormat::parse("xlsx", "out/r.XLSX").unwrap(),
            ExportFormat::Xlsx
        );
        assert_eq!(
            ExportFormat::parse("csv", "r.csv").unwrap(),
            ExportFormat::Csv
        );
        for (format, target) in [("xlsx", "r.csv"), ("csv", "r"), ("parquet", "r.parquet")] {
            let err = ExportFormat::parse(format, target).unwrap_err();
            assert_eq!(err.code, ErrorCode::ValidationFailed, "{format} {target}");
        }
    }

    #[test]
    fn csv_records_quote_only_when_needed() {
        let mut out = Vec::new();
        let fields = ["plain", "a,b", "say \"hi\"", "two\nlines"].map(|s| Some(Cow::Borrowed(s)));
        assert!(push_csv_record(
            &mut out,
            fields.into_iter().chain([None]),
            usize::MAX
        ));
        let expected = "plain,\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\",\n";
        assert_eq!(String::from_utf8(out.clone()).unwrap(), expected);
        // A record that would pass the limit is not appended; one that just fits is.
        let record = || ["a\"b", "c"].map(|s| Some(Cow::Borrowed(s))).into_iter();
        assert!(!push_csv_record(&mut out, record(), expected.len() + 8));
        assert_eq!(out.len(), expected.len());
        assert!(push_csv_record(&mut out, record(), expected.len() + 9));
        assert!(String::from_utf8(out).unwrap().ends_with("\"a\"\"b\",c\n"));
    }

    #[test]
    fn limits_read_as_units() {
        assert_eq!(
            describe_bytes(256 * 1024 * 1024),
            "256 MiB (268435456 bytes)"
        );
        assert_eq!(describe_bytes(1 << 30), "1 GiB (1073741824 bytes)");
        assert_eq!(describe_bytes(1000), "1000 bytes");
    }

    #[test]
    fn truncates_on_character_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("hi", 5), "hi");
    }
}
