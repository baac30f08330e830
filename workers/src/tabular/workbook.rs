//! `table_update_from_export`: a query result written into an existing (or new) xlsx workbook.
//!
//! The workbook is edited with the office pool's spreadsheet editor, so it passes the same
//! package checks (zip bombs, DTDs, encryption, damage) and gets the same part-level edits: the
//! target sheet's XML changes, `styles.xml` gains date formats when dates are written, and
//! `workbook.xml` with its relationships and `[Content_Types].xml` change when a sheet is added
//! or the stale `calcChain.xml` is dropped (the workbook then recalculates on open). Every other
//! part is copied byte for byte, so other sheets keep their values, formulas, styles and charts.
//! Values are written as in `table_export`: numbers as numbers, booleans as booleans, dates and
//! timestamps as dates with a date format, text as inline strings. Modes:
//! - `replace_sheet`: the sheet's content becomes the result, from A1 (the sheet is created if
//!   missing);
//! - `append_rows`: rows go below the sheet's last used row, from its first used column;
//! - `write_range`: the result overwrites the rectangle at `start_cell`; cells outside it stay.

use std::ops::ControlFlow;

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::Connection;
use serde::Serialize;

use super::cells::{Cell, Column};
use super::export::{
    EXCEL_TEXT, ExcelValue, Notes, check_sheet_size, excel_cost, excel_value, header_cost,
    over_limit,
};
use super::query::{CheckedQuery, scan};
pub(crate) use crate::office::CellRef;
use crate::office::{CellValue, XlsxEditor, blank_workbook, validate_sheet_name};

/// The first cell of a sheet.
const A1: CellRef = CellRef { row: 0, col: 0 };

/// How the result goes into the sheet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum UpdateMode {
    ReplaceSheet,
    AppendRows,
    WriteRange,
}

impl UpdateMode {
    pub(crate) const NAMES: [&'static str; 3] = ["replace_sheet", "append_rows", "write_range"];

    pub(crate) fn parse(mode: &str) -> Result<Self, ErrorBody> {
        match mode {
            "replace_sheet" => Ok(UpdateMode::ReplaceSheet),
            "append_rows" => Ok(UpdateMode::AppendRows),
            "write_range" => Ok(UpdateMode::WriteRange),
            other => Err(invalid(format!(
                "`mode` must be one of {}, got {other:?}",
                Self::NAMES.join(", ")
            ))),
        }
    }
}

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!("table_update_from_export: {message}"),
    )
}

/// What `table_update_from_export` should do.
#[derive(Debug, Clone)]
pub(crate) struct UpdateRequest<'a> {
    pub(crate) query: Option<&'a str>,
    pub(crate) target_path: &'a str,
    pub(crate) sheet: &'a str,
    pub(crate) mode: UpdateMode,
    pub(crate) start_cell: Option<CellRef>,
    pub(crate) include_header: Option<bool>,
}

/// A whole query result, read before the workbook is touched: at most the characters a cell
/// holds of each text, and at most the export limit in all (see [`super::export`]).
#[derive(Debug)]
pub(crate) struct Grid {
    header: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

impl Grid {
    pub(crate) fn collect(
        conn: &Connection,
        query: &CheckedQuery,
        columns: &[Column],
        max_bytes: u64,
    ) -> Result<Self, ErrorBody> {
        check_sheet_size(0, columns.len())?;
        let mut rows = Vec::new();
        let mut cost = header_cost(columns);
        scan(conn, query, columns, None, EXCEL_TEXT, |cells| {
            check_sheet_size(rows.len() as u64 + 1, cells.len())?;
            cost += cells.iter().map(excel_cost).sum::<u64>();
            if cost > max_bytes {
                return Err(over_limit(rows.len() as u64 + 1, max_bytes));
            }
            rows.push(cells);
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(Self {
            header: columns.iter().map(|c| c.name.clone()).collect(),
            rows,
        })
    }

    fn has_dates(&self) -> bool {
        self.rows
            .iter()
            .flatten()
            .any(|c| matches!(c, Cell::Date(_) | Cell::Timestamp(_)))
    }

    /// The cells to write, the header first when asked; dates become plain serial numbers
    /// unless `date_formats`. What Excel cannot hold exactly is counted in `notes`.
    fn into_values(
        self,
        include_header: bool,
        date_formats: bool,
        notes: &mut Notes,
    ) -> Vec<Vec<CellValue>> {
        let mut values = Vec::with_capacity(self.rows.len() + 1);
        if include_header {
            values.push(self.header.into_iter().map(CellValue::Text).collect());
        }
        for cells in &self.rows {
            let row = cells
                .iter()
                .map(|cell| cell_value(excel_value(cell, notes), date_formats))
                .collect();
            values.push(row);
        }
        values
    }
}

fn cell_value(value: ExcelValue<'_>, date_formats: bool) -> CellValue {
    match value {
        ExcelValue::Empty => CellValue::Clear,
        ExcelValue::Bool(b) => CellValue::Bool(b),
        ExcelValue::Number(n) => CellValue::Number(n),
        ExcelValue::Text(text) => CellValue::Text(text.into_owned()),
        ExcelValue::Date { serial, with_time } if date_formats => {
            CellValue::Date(serial, with_time)
        }
        ExcelValue::Date { serial, .. } => CellValue::Number(serial),
    }
}

/// The `table_update_from_export` response.
#[derive(Debug, Serialize)]
pub(crate) struct UpdateSummary {
    pub(crate) target_path: String,
    pub(crate) sheet: String,
    pub(crate) mode: UpdateMode,
    /// The written rectangle, header included (`A1:C4`); `null` when nothing was written.
    pub(crate) range: Option<String>,
    pub(crate) include_header: bool,
    pub(crate) row_count: u64,
    pub(crate) column_count: usize,
    pub(crate) created_workbook: bool,
    pub(crate) created_sheet: bool,
    pub(crate) warnings: Vec<String>,
}

/// The updated workbook and the response.
#[derive(Debug)]
pub(crate) struct Updated {
    pub(crate) content: Vec<u8>,
    pub(crate) summary: UpdateSummary,
}

/// Writes `grid` into the workbook `existing` (or a new one) as `request` says.
pub(crate) fn update(
    request: &UpdateRequest<'_>,
    existing: Option<&[u8]>,
    grid: Grid,
) -> Result<Updated, ErrorBody> {
    validate_sheet_name(request.sheet)
        .map_err(|e| invalid(format!("invalid `sheet`: {}", e.message)))?;
    if request.start_cell.is_some() && request.mode != UpdateMode::WriteRange {
        return Err(invalid(
            "`start_cell` applies to mode \"write_range\" only".to_string(),
        ));
    }
    let mut editor = match existing {
        Some(bytes) => XlsxEditor::open(bytes.to_vec())?,
        None => new_workbook(request.sheet)?,
    };
    let created_sheet = editor.ensure_sheet(request.sheet)?;
    let part = editor.sheet_part(request.sheet)?;
    if request.mode == UpdateMode::ReplaceSheet {
        editor.clear_sheet(&part);
    }
    let (origin, include_header) = placement(request, &mut editor, &part)?;
    let (row_count, column_count) = (grid.rows.len() as u64, grid.header.len());
    let mut warnings = Vec::new();
    let date_formats = editor.has_styles();
    if !date_formats && grid.has_dates() {
        warnings.push("the workbook's styles could not be extended: dates were written as serial numbers without a date format".to_string());
    }
    let mut notes = Notes::default();
    let values = grid.into_values(include_header, date_formats, &mut notes);
    let written = editor.write_rows(&part, origin, &values)?;
    warnings.extend(notes.messages());
    if written.replaced_formulas > 0 {
        warnings.push(format!(
            "{} formula cell(s) in the range were replaced by values",
            written.replaced_formulas
        ));
    }
    Ok(Updated {
        content: editor.finish()?,
        summary: UpdateSummary {
            target_path: request.target_path.to_string(),
            sheet: request.sheet.to_string(),
            mode: request.mode,
            range: written.range.map(|range| range.to_string()),
            include_header,
            row_count,
            column_count,
            created_workbook: existing.is_none(),
            created_sheet,
            warnings,
        },
    })
}

/// A new workbook whose only sheet is called `sheet`.
fn new_workbook(sheet: &str) -> Result<XlsxEditor, ErrorBody> {
    let mut editor = XlsxEditor::open(blank_workbook()?)?;
    editor.rename_sheet("Sheet1", sheet)?;
    Ok(editor)
}

/// Where the result starts and whether the header row is written.
fn placement(
    request: &UpdateRequest<'_>,
    editor: &mut XlsxEditor,
    part: &str,
) -> Result<(CellRef, bool), ErrorBody> {
    let header_or = |default: bool| request.include_header.unwrap_or(default);
    Ok(match request.mode {
        UpdateMode::ReplaceSheet => (A1, header_or(true)),
        UpdateMode::WriteRange => (request.start_cell.unwrap_or(A1), header_or(true)),
        UpdateMode::AppendRows => match editor.used_range(part)? {
            Some(used) => {
                let below = CellRef {
                    row: used.end.0 + 1,
                    col: used.start.1,
                };
                (below, header_or(false))
            }
            None => (A1, header_or(true)),
        },
    })
}
