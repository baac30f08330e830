//! What an added sheet holds, for a reviewer to see the values they approve: the values and
//! formulas of its used range, row-major from the range's top-left cell, cut at
//! [`ADDED_SHEET_ROWS`] × [`ADDED_SHEET_COLUMNS`] and at a budget of [`ADDED_BYTES`] that the
//! added sheets of one file share (whole rows: a row that does not fit ends the sheet).

use std::collections::BTreeMap;

use atelier_messages::review::{ADDED_BYTES, ADDED_SHEET_COLUMNS, ADDED_SHEET_ROWS, AddedSheet};
use calamine::{CellType, Data, Range};
use serde_json::Value;

use crate::office::xlsx::cellref::CellRange;
use crate::office::xlsx::{cell_json, cell_name};

/// The bytes of added values (as JSON) a file's review may still carry.
pub(super) struct Budget {
    left: usize,
}

impl Budget {
    /// A file's whole budget, [`ADDED_BYTES`].
    pub(super) fn new() -> Self {
        Self::of(ADDED_BYTES)
    }

    fn of(bytes: usize) -> Self {
        Self { left: bytes }
    }

    /// Takes `bytes` when they fit, else nothing.
    fn take(&mut self, bytes: usize) -> bool {
        let fits = bytes <= self.left;
        if fits {
            self.left -= bytes;
        }
        fits
    }
}

fn extent<T: CellType>(range: &Range<T>) -> Option<CellRange> {
    Some(CellRange {
        start: range.start()?,
        end: range.end()?,
    })
}

/// The cells either range uses: a formula without a cached value is a used cell too.
fn used_range(values: &Range<Data>, formulas: &Range<String>) -> Option<CellRange> {
    match (extent(values), extent(formulas)) {
        (Some(a), Some(b)) => Some(CellRange {
            start: (a.start.0.min(b.start.0), a.start.1.min(b.start.1)),
            end: (a.end.0.max(b.end.0), a.end.1.max(b.end.1)),
        }),
        (a, b) => a.or(b),
    }
}

/// One shown row: its values and the formulas among them (`B5` → `=SUM(B2:B4)`).
fn row_of(
    values: &Range<Data>,
    formulas: &Range<String>,
    row: u32,
    columns: std::ops::Range<u32>,
) -> (Vec<Value>, Vec<(String, String)>) {
    let cells = columns
        .clone()
        .map(|col| values.get_value((row, col)).map_or(Value::Null, cell_json))
        .collect();
    let formulas = columns
        .filter_map(|col| {
            let formula = formulas.get_value((row, col)).filter(|f| !f.is_empty())?;
            Some((cell_name(row, col), format!("={formula}")))
        })
        .collect();
    (cells, formulas)
}

/// The bytes a row adds to the review's JSON (values, separators, formulas).
fn row_bytes(cells: &[Value], formulas: &[(String, String)]) -> usize {
    let values: usize = cells.iter().map(|value| value.to_string().len() + 1).sum();
    let formulas: usize = formulas
        .iter()
        .map(|(cell, formula)| cell.len() + formula.len() + 6)
        .sum();
    values + formulas + 2
}

/// What `sheet` holds as a review shows it; `budget` is what the file's review has left.
pub(super) fn added_sheet(
    sheet: &str,
    values: &Range<Data>,
    formulas: &Range<String>,
    budget: &mut Budget,
) -> AddedSheet {
    let mut added = AddedSheet {
        sheet: sheet.to_string(),
        range: None,
        rows: 0,
        columns: 0,
        cells: Vec::new(),
        formulas: BTreeMap::new(),
        truncated: false,
    };
    let Some(used) = used_range(values, formulas) else {
        return added;
    };
    added.range = Some(used.to_string());
    (added.rows, added.columns) = (u64::from(used.rows()), u64::from(used.columns()));
    let shown_rows = added.rows.min(ADDED_SHEET_ROWS) as u32;
    let shown_columns = added.columns.min(ADDED_SHEET_COLUMNS) as u32;
    added.truncated = added.rows > ADDED_SHEET_ROWS || added.columns > ADDED_SHEET_COLUMNS;
    let columns = used.start.1..used.start.1 + shown_columns;
    for row in used.start.0..used.start.0 + shown_rows {
        let (cells, row_formulas) = row_of(values, formulas, row, columns.clone());
        if !budget.take(row_bytes(&cells, &row_formulas)) {
            added.truncated = true;
            break;
        }
        added.cells.push(cells);
        added.formulas.extend(row_formulas);
    }
    added
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A sheet of `rows` × `columns` numbers from `start` (0-based), `r * 1000 + c` each.
    fn numbers(start: (u32, u32), rows: u32, columns: u32) -> Range<Data> {
        let end = (start.0 + rows - 1, start.1 + columns - 1);
        let mut range = Range::new(start, end);
        for r in 0..rows {
            for c in 0..columns {
                let value = Data::Int(i64::from(r * 1000 + c));
                range.set_value((start.0 + r, start.1 + c), value);
            }
        }
        range
    }

    #[test]
    fn a_small_sheet_is_shown_whole_from_its_used_ranges_corner() {
        let mut values = Range::new((2, 1), (3, 2));
        values.set_value((2, 1), Data::String("Total".into()));
        values.set_value((2, 2), Data::Float(3500.0));
        let mut formulas = Range::new((3, 2), (3, 2));
        formulas.set_value((3, 2), "SUM(C3:C3)".to_string());
        let added = added_sheet("Summary", &values, &formulas, &mut Budget::new());
        assert_eq!(added.range.as_deref(), Some("B3:C4"));
        assert_eq!((added.rows, added.columns, added.truncated), (2, 2, false));
        assert_eq!(
            added.cells,
            [
                vec![json!("Total"), json!(3500)],
                vec![Value::Null, Value::Null]
            ]
        );
        assert_eq!(added.formulas["C4"], "=SUM(C3:C3)");
    }

    #[test]
    fn a_large_sheet_is_cut_at_the_documented_rows_and_columns_with_its_full_size() {
        let values = numbers((0, 0), 120, 30);
        let added = added_sheet("Big", &values, &Range::default(), &mut Budget::new());
        assert_eq!(added.range.as_deref(), Some("A1:AD120"));
        assert_eq!((added.rows, added.columns), (120, 30));
        assert!(added.truncated);
        assert_eq!(added.cells.len() as u64, ADDED_SHEET_ROWS);
        assert!(
            added
                .cells
                .iter()
                .all(|row| row.len() as u64 == ADDED_SHEET_COLUMNS)
        );
        assert_eq!(added.cells[49][19], json!(49_019));
    }

    #[test]
    fn the_byte_budget_ends_a_sheet_at_a_whole_row_and_is_shared_by_the_files_sheets() {
        let values = numbers((0, 0), 10, 4);
        let none = Range::default();
        let three_rows: usize = (0..3)
            .map(|row| {
                let (cells, formulas) = row_of(&values, &none, row, 0..4);
                row_bytes(&cells, &formulas)
            })
            .sum();
        let mut budget = Budget::of(three_rows + 5);
        let first = added_sheet("One", &values, &none, &mut budget);
        assert_eq!(first.cells.len(), 3);
        assert!(first.truncated);
        assert_eq!((first.rows, first.columns), (10, 4));
        let second = added_sheet("Two", &values, &none, &mut budget);
        assert!(second.cells.is_empty() && second.truncated);
        assert_eq!(second.range.as_deref(), Some("A1:D10"));
    }

    #[test]
    fn an_empty_sheet_has_no_range_and_is_not_cut() {
        let added = added_sheet(
            "Empty",
            &Range::default(),
            &Range::default(),
            &mut Budget::new(),
        );
        assert_eq!(added.range, None);
        assert_eq!((added.rows, added.columns, added.truncated), (0, 0, false));
        assert!(added.cells.is_empty());
    }
}
