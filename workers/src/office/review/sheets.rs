//! Workbooks: sheets added and removed by name, for each sheet on both sides its changed
//! cells (value before and after) over the union of the two used ranges, and what each added
//! sheet holds (`added_sheets`).

use atelier_messages::ErrorBody;
use atelier_messages::review::{AddedSheet, CellChange, ContentDiff, SheetDiff};
use calamine::{Data, Range};
use serde_json::Value;

use super::added::{Budget, added_sheet};
use crate::office::formats::{Format, extension};
use crate::office::xlsx::{Workbook, cell_json, cell_name};

fn open(path: &str, bytes: Option<&[u8]>) -> Result<Option<Workbook>, ErrorBody> {
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    let zip_based = Format::of(path)? == Format::Xlsx || extension(path) == "ods";
    Workbook::open(bytes.to_vec(), zip_based).map(Some)
}

/// A workbook's sheets with their values, in order (none for an absent file).
fn sheets(book: Option<&mut Workbook>) -> Result<Vec<(String, Range<Data>)>, ErrorBody> {
    let Some(book) = book else {
        return Ok(Vec::new());
    };
    book.sheet_names()
        .into_iter()
        .map(|name| book.values(&name).map(|values| (name, values)))
        .collect()
}

/// What the `added` sheets of `book` hold, within one file's budget. A sheet whose formulas
/// cannot be read is shown with its values alone.
fn added_sheets(book: Option<&mut Workbook>, added: &[(String, Range<Data>)]) -> Vec<AddedSheet> {
    let Some(book) = book else {
        return Vec::new();
    };
    let mut budget = Budget::new();
    added
        .iter()
        .map(|(name, values)| {
            let formulas = book.formulas(name).unwrap_or_default();
            added_sheet(name, values, &formulas, &mut budget)
        })
        .collect()
}

fn value_at(range: &Range<Data>, row: u32, col: u32) -> Value {
    range.get_value((row, col)).map_or(Value::Null, cell_json)
}

/// The rows and columns either range uses (absolute, inclusive), if any.
fn union_extent(a: &Range<Data>, b: &Range<Data>) -> Option<((u32, u32), (u32, u32))> {
    let extents: Vec<_> = [a, b]
        .into_iter()
        .filter_map(|range| Some((range.start()?, range.end()?)))
        .collect();
    let start = extents
        .iter()
        .map(|(s, _)| *s)
        .reduce(|x, y| (x.0.min(y.0), x.1.min(y.1)))?;
    let end = extents
        .iter()
        .map(|(_, e)| *e)
        .reduce(|x, y| (x.0.max(y.0), x.1.max(y.1)))?;
    Some((start, end))
}

fn sheet_diff(sheet: &str, old: &Range<Data>, new: &Range<Data>, limit: usize) -> SheetDiff {
    let mut diff = SheetDiff {
        sheet: sheet.to_string(),
        cells_changed: 0,
        sample: Vec::new(),
        truncated: false,
    };
    let Some((start, end)) = union_extent(old, new) else {
        return diff;
    };
    for row in start.0..=end.0 {
        for col in start.1..=end.1 {
            let (before, after) = (value_at(old, row, col), value_at(new, row, col));
            if before == after {
                continue;
            }
            diff.cells_changed += 1;
            if diff.sample.len() < limit {
                diff.sample.push(CellChange {
                    cell: cell_name(row, col),
                    old: before,
                    new: after,
                });
            } else {
                diff.truncated = true;
            }
        }
    }
    diff
}

pub(super) fn diff(
    path: &str,
    old: Option<&[u8]>,
    new: Option<&[u8]>,
    limit: usize,
) -> Result<ContentDiff, ErrorBody> {
    let mut new_book = open(path, new)?;
    let (old, new) = (
        sheets(open(path, old)?.as_mut())?,
        sheets(new_book.as_mut())?,
    );
    let named = |list: &[(String, Range<Data>)], name: &str| {
        list.iter().find(|(n, _)| n == name).map(|(_, r)| r.clone())
    };
    let added: Vec<(String, Range<Data>)> = new
        .iter()
        .filter(|(name, _)| named(&old, name).is_none())
        .cloned()
        .collect();
    let sheets_added = added.iter().map(|(name, _)| name.clone()).collect();
    let sheets_removed = old
        .iter()
        .filter(|(name, _)| named(&new, name).is_none())
        .map(|(name, _)| name.clone())
        .collect();
    let sheets = new
        .iter()
        .filter_map(|(name, after)| Some((name, named(&old, name)?, after)))
        .map(|(name, before, after)| sheet_diff(name, &before, after, limit))
        .filter(|sheet| sheet.cells_changed > 0)
        .collect();
    Ok(ContentDiff::Workbook {
        sheets_added,
        sheets_removed,
        sheets,
        added_sheets: added_sheets(new_book.as_mut(), &added),
    })
}
