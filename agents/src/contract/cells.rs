//! An `edit` contract on a workbook: the cells it names (`touches`) against the cells the item
//! changed. A touch is a cell (`B2`, `Summary!B2`), a range (`A1:C3`, `Summary!A1:C3`) or a
//! whole sheet (`Summary`); a cell or range without a sheet is on the workbook's first sheet.

use std::collections::BTreeMap;

use serde_json::Value;

/// A workbook's cells as read: sheet → cell (`B2`) → its value or formula, as text.
pub type Cells = BTreeMap<String, BTreeMap<String, String>>;

/// The cells of one `read_file` result of a sheet range (`{"sheet", "range", "rows",
/// "formulas"}`): its sheet name and each non-empty cell by reference.
pub fn read_cells(result: &Value) -> Option<(String, BTreeMap<String, String>)> {
    let sheet = result.get("sheet")?.as_str()?.to_string();
    let range = result.get("range").and_then(Value::as_str).unwrap_or("A1");
    let (top_column, top_row) = cell(range.split(':').next().unwrap_or("A1"))?;
    let mut cells = BTreeMap::new();
    let rows = result.get("rows").and_then(Value::as_array);
    for (row_offset, row) in rows.into_iter().flatten().enumerate() {
        for (column_offset, value) in row.as_array().into_iter().flatten().enumerate() {
            let text = cell_text(value);
            if text.is_empty() {
                continue;
            }
            let reference = name(
                top_column + column_offset as u32,
                top_row + row_offset as u32,
            );
            cells.insert(reference, text);
        }
    }
    let formulas = result.get("formulas").and_then(Value::as_object);
    for (reference, formula) in formulas.into_iter().flatten() {
        if let Some(formula) = formula.as_str() {
            cells.insert(reference.clone(), formula.to_string());
        }
    }
    Some((sheet, cells))
}

/// A sheet as rows of its cells' values (text; an empty cell is empty), from its range's
/// corner, its empty rows left out; `complete` when `read_file` read all of it.
#[derive(Debug, Clone, PartialEq)]
pub struct SheetRows {
    pub name: String,
    pub rows: Vec<Vec<String>>,
    pub complete: bool,
}

/// The values of one `read_file` result of a sheet (`{"sheet", "rows", "has_more"}`), as rows.
pub fn sheet_rows(result: &Value) -> Option<SheetRows> {
    let name = result.get("sheet")?.as_str()?.to_string();
    let rows = result
        .get("rows")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|row| {
            let mut cells: Vec<String> = row
                .as_array()
                .into_iter()
                .flatten()
                .map(cell_text)
                .collect();
            while cells.last().is_some_and(String::is_empty) {
                cells.pop();
            }
            cells
        })
        .filter(|cells| !cells.is_empty())
        .collect();
    Some(SheetRows {
        name,
        rows,
        complete: super::read_whole(result),
    })
}

/// A cell's value as `read_file` gives it, as text (an empty cell is empty).
fn cell_text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The cells that differ between `before` and `after`, as `Sheet!B2`, sorted.
pub fn changed_cells(before: &Cells, after: &Cells) -> Vec<String> {
    let empty = BTreeMap::new();
    let mut changed = Vec::new();
    let sheets: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for sheet in sheets {
        let old = before.get(sheet).unwrap_or(&empty);
        let new = after.get(sheet).unwrap_or(&empty);
        let references: std::collections::BTreeSet<&String> =
            old.keys().chain(new.keys()).collect();
        changed.extend(
            references
                .into_iter()
                .filter(|reference| old.get(*reference) != new.get(*reference))
                .map(|reference| format!("{sheet}!{reference}")),
        );
    }
    changed
}

/// Why the `changed` cells are not exactly what `touches` names (on a workbook whose first
/// sheet is `first_sheet`); `Ok` when every touched cell changed and nothing else did.
pub fn check_touches(
    touches: &[String],
    changed: &[String],
    first_sheet: &str,
) -> Result<(), String> {
    let touches: Vec<Touch> = touches
        .iter()
        .filter_map(|touch| Touch::parse(touch, first_sheet))
        .collect();
    let untouched: Vec<&Touch> = touches
        .iter()
        .filter(|touch| !changed.iter().any(|cell| touch.covers(cell)))
        .collect();
    let outside: Vec<&str> = changed
        .iter()
        .filter(|cell| !touches.iter().any(|touch| touch.covers(cell)))
        .map(String::as_str)
        .collect();
    let untouched: Vec<&str> = untouched.iter().map(|touch| touch.text.as_str()).collect();
    touches_report(&untouched, &outside)
}

/// The most changed parts a broken edit contract names.
const NAMED_CHANGES: usize = 8;

/// Why an edit is not what its contract names: the named parts it did not change (`untouched`)
/// and the parts it changed that the contract does not name (`outside`); `Ok` with neither.
pub(super) fn touches_report(untouched: &[&str], outside: &[&str]) -> Result<(), String> {
    let mut why = Vec::new();
    if !untouched.is_empty() {
        why.push(format!("it did not change {}", untouched.join(", ")));
    }
    if !outside.is_empty() {
        let mut named: Vec<&str> = outside.iter().take(NAMED_CHANGES).copied().collect();
        let more = outside.len().saturating_sub(named.len());
        let tail = format!("and {more} more");
        if more > 0 {
            named.push(&tail);
        }
        why.push(format!(
            "it also changed {}, which the contract does not name",
            named.join(", ")
        ));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why.join("; "))
    }
}

/// One named part of a workbook: a sheet, and a rectangle of it (`None`: the whole sheet).
struct Touch {
    text: String,
    sheet: String,
    area: Option<((u32, u32), (u32, u32))>,
}

impl Touch {
    fn parse(text: &str, first_sheet: &str) -> Option<Touch> {
        let text = text.trim();
        let (sheet, reference) = match text.rsplit_once('!') {
            Some((sheet, reference)) => (sheet.trim_matches('\'').to_string(), reference),
            None if area(text).is_some() => (first_sheet.to_string(), text),
            None => (text.trim_matches('\'').to_string(), ""),
        };
        let area = if reference.is_empty() {
            None
        } else {
            Some(area(reference)?)
        };
        Some(Touch {
            text: text.to_string(),
            sheet,
            area,
        })
    }

    /// True when `cell` (`Sheet!B2`) is in this part.
    fn covers(&self, cell: &str) -> bool {
        let Some((sheet, reference)) = cell.rsplit_once('!') else {
            return false;
        };
        if !sheet.eq_ignore_ascii_case(&self.sheet) {
            return false;
        }
        let Some(((left, top), (right, bottom))) = self.area else {
            return true;
        };
        cell_of(reference).is_some_and(|(column, row)| {
            (left..=right).contains(&column) && (top..=bottom).contains(&row)
        })
    }
}

/// `B2` or `A1:C3` as its corners (column, row), 1-based.
fn area(text: &str) -> Option<((u32, u32), (u32, u32))> {
    let (start, end) = text.split_once(':').unwrap_or((text, text));
    let start = cell_of(start)?;
    let end = cell_of(end)?;
    Some((
        (start.0.min(end.0), start.1.min(end.1)),
        (start.0.max(end.0), start.1.max(end.1)),
    ))
}

fn cell_of(text: &str) -> Option<(u32, u32)> {
    cell(text.trim().trim_start_matches('$'))
}

/// `B2` → (2, 2), 1-based; `None` for anything else.
fn cell(text: &str) -> Option<(u32, u32)> {
    let text = text.replace('$', "").to_ascii_uppercase();
    let letters = text.chars().take_while(char::is_ascii_uppercase).count();
    if letters == 0 || letters > 3 || letters == text.len() {
        return None;
    }
    let column = text[..letters].bytes().fold(0u32, |column, letter| {
        column * 26 + u32::from(letter - b'A' + 1)
    });
    let row: u32 = text[letters..].parse().ok().filter(|row| *row > 0)?;
    Some((column, row))
}

/// (2, 2) → `B2`.
fn name(column: u32, row: u32) -> String {
    let mut letters = Vec::new();
    let mut rest = column;
    while rest > 0 {
        let digit = (rest - 1) % 26;
        letters.push(char::from(b'A' + u8::try_from(digit).unwrap_or(0)));
        rest = (rest - 1) / 26;
    }
    letters.reverse();
    format!("{}{row}", letters.into_iter().collect::<String>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cells_are_named_from_the_ranges_corner() {
        let read = json!({
            "sheet": "Q1", "range": "B2:D3",
            "rows": [[1, null, "x"], ["", 2.5]],
            "formulas": {"D3": "=B2*2"}
        });
        let (sheet, cells) = read_cells(&read).unwrap();
        assert_eq!(sheet, "Q1");
        let named: Vec<(&str, &str)> = cells
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            named,
            [("B2", "1"), ("C3", "2.5"), ("D2", "x"), ("D3", "=B2*2")]
        );
        assert_eq!(name(28, 7), "AB7");
        assert_eq!(cell("ab7"), Some((28, 7)));
        assert_eq!(cell("Summary"), None);
    }

    fn cells(pairs: &[(&str, &str, &str)]) -> Cells {
        let mut cells = Cells::new();
        for (sheet, reference, value) in pairs {
            cells
                .entry(sheet.to_string())
                .or_default()
                .insert(reference.to_string(), value.to_string());
        }
        cells
    }

    #[test]
    fn an_edit_changes_what_it_names_and_nothing_else() {
        let before = cells(&[("Q1", "B2", "610"), ("Q1", "B3", "700")]);
        let after = cells(&[
            ("Q1", "B2", "640"),
            ("Q1", "B3", "700"),
            ("Travel", "A1", "Total"),
            ("Travel", "B1", "5970"),
        ]);
        let changed = changed_cells(&before, &after);
        assert_eq!(changed, ["Q1!B2", "Travel!A1", "Travel!B1"]);
        let touches = |list: &[&str]| list.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(
            check_touches(&touches(&["B2", "Travel"]), &changed, "Q1"),
            Ok(())
        );
        assert_eq!(
            check_touches(&touches(&["Q1!B2", "Travel!A1:B1"]), &changed, "Q1"),
            Ok(())
        );
        let missed = check_touches(&touches(&["B2", "B3", "Travel"]), &changed, "Q1").unwrap_err();
        assert!(missed.contains("did not change B3"), "{missed}");
        let beyond = check_touches(&touches(&["B2"]), &changed, "Q1").unwrap_err();
        assert!(
            beyond.contains("also changed Travel!A1, Travel!B1"),
            "{beyond}"
        );
    }
}
