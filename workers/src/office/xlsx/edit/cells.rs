//! The rows and cells of edited sheets. A sheet's rows are moved out of its `sheetData` on the
//! first edit and put back by [`XlsxEditor::finish`]: cells not written stay as read (formulas,
//! shared-string indices, attributes and all); written cells are rendered from their typed value
//! and keep the cell's style. The sheet's `dimension` is recomputed.

use std::collections::BTreeMap;

use atelier_messages::ErrorBody;

use super::schema::{WORKSHEET_ORDER, ensure_child, prefix_of};
use super::values::CellValue;
use super::{XlsxEditor, invalid};
use crate::office::package::read_failed;
use crate::office::xlsx::cellref::{CellRange, CellRef, MAX_COLUMNS, MAX_ROWS, cell_name};
use crate::office::xlsx::styles::{StyleSheet, StyleSpec};
use crate::office::xml::{Element, Node, escape_text};

/// A loaded `sheetData`: rows by 1-based number, cells by 0-based column.
#[derive(Debug, Default)]
pub(super) struct SheetData {
    prefix: String,
    pub(super) rows: BTreeMap<u32, Row>,
}

#[derive(Debug)]
pub(super) struct Row {
    pub(super) element: Element,
    pub(super) cells: BTreeMap<u32, Cell>,
}

/// A cell of an edited sheet: kept as read, or written by an edit (rendered on finish).
#[derive(Debug)]
pub(super) enum Cell {
    Kept(Element),
    Written {
        style: Option<String>,
        value: CellValue,
    },
}

impl Cell {
    fn style(&self) -> Option<String> {
        match self {
            Cell::Kept(element) => element.attr("s"),
            Cell::Written { style, .. } => style.clone(),
        }
    }

    fn set_style(&mut self, id: u32) {
        match self {
            Cell::Kept(element) => element.set_attr("s", &id.to_string()),
            Cell::Written { style, .. } => *style = Some(id.to_string()),
        }
    }

    fn is_formula(&self) -> bool {
        match self {
            Cell::Kept(element) => element.elements().any(|e| e.local_name() == "f"),
            Cell::Written { value, .. } => matches!(value, CellValue::Formula(_)),
        }
    }
}

/// What [`XlsxEditor::write_rows`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Written {
    /// The rectangle written; `None` when there was nothing to write.
    pub(crate) range: Option<CellRange>,
    /// Formula cells that now hold a value.
    pub(crate) replaced_formulas: u64,
}

impl XlsxEditor {
    /// The loaded rows of a sheet (moved out of its `sheetData` until [`XlsxEditor::finish`]).
    fn data(&mut self, part: &str) -> Result<&mut SheetData, ErrorBody> {
        if !self.data.contains_key(part) {
            let root = &mut self.package.doc_mut(part)?.root;
            let prefix = prefix_of(&root.name);
            let sheet_data = ensure_child(root, "sheetData", WORKSHEET_ORDER);
            let children = std::mem::take(&mut sheet_data.children);
            let data = load_rows(children, prefix)?;
            self.data.insert(part.to_string(), data);
        }
        self.data
            .get_mut(part)
            .ok_or_else(|| read_failed(format!("cannot load {part}")))
    }

    /// Row `number` (1-based) of a sheet, created empty if missing.
    pub(super) fn row_mut(&mut self, part: &str, number: u32) -> Result<&mut Row, ErrorBody> {
        let data = self.data(part)?;
        let prefix = data.prefix.clone();
        Ok(data.rows.entry(number).or_insert_with(|| Row {
            element: Element::new(&format!("{prefix}row"), &[("r", &number.to_string())]),
            cells: BTreeMap::new(),
        }))
    }

    /// The smallest rectangle holding every cell of a sheet; `None` when it has none.
    pub(crate) fn used_range(&mut self, part: &str) -> Result<Option<CellRange>, ErrorBody> {
        Ok(bounds(self.data(part)?))
    }

    /// Writes `rows` with their first cell at `start`; cells outside the rectangle stay.
    pub(crate) fn write_rows(
        &mut self,
        part: &str,
        start: CellRef,
        rows: &[Vec<CellValue>],
    ) -> Result<Written, ErrorBody> {
        let height = rows.len() as u64;
        let width = rows.iter().map(Vec::len).max().unwrap_or(0) as u64;
        if height == 0 || width == 0 {
            return Ok(Written {
                range: None,
                replaced_formulas: 0,
            });
        }
        let end_row = u64::from(start.row) + height - 1;
        let end_col = u64::from(start.col) + width - 1;
        let (Ok(end_row), Ok(end_col)) = (u32::try_from(end_row), u32::try_from(end_col)) else {
            return Err(does_not_fit(height, width, start));
        };
        if end_row >= MAX_ROWS || end_col >= MAX_COLUMNS {
            return Err(does_not_fit(height, width, start));
        }
        let mut replaced_formulas = 0;
        for (row, values) in (start.row..).zip(rows) {
            for (col, value) in (start.col..).zip(values) {
                replaced_formulas += u64::from(self.write_cell(part, row, col, value)?);
            }
        }
        Ok(Written {
            range: Some(CellRange {
                start: (start.row, start.col),
                end: (end_row, end_col),
            }),
            replaced_formulas,
        })
    }

    /// Writes one cell (0-based), keeping its style; dates get a date format. Returns whether
    /// the cell held a formula before.
    pub(super) fn write_cell(
        &mut self,
        part: &str,
        row: u32,
        col: u32,
        value: &CellValue,
    ) -> Result<bool, ErrorBody> {
        self.recalc = true;
        let replaced_formula = self
            .row_mut(part, row + 1)?
            .cells
            .get(&col)
            .is_some_and(Cell::is_formula);
        if let CellValue::Date(_, with_time) = value {
            let format = if *with_time {
                "yyyy-mm-dd hh:mm:ss"
            } else {
                "yyyy-mm-dd"
            };
            self.style_cell(part, row, col, &StyleSpec::number_format(format))?;
        }
        let cells = &mut self.row_mut(part, row + 1)?.cells;
        let style = cells.get(&col).and_then(Cell::style);
        if *value == CellValue::Clear && style.is_none() {
            cells.remove(&col);
        } else {
            let value = value.clone();
            cells.insert(col, Cell::Written { style, value });
        }
        Ok(replaced_formula)
    }

    /// Applies `spec` over the cell's current style (0-based cell; created empty if missing).
    pub(super) fn style_cell(
        &mut self,
        part: &str,
        row: u32,
        col: u32,
        spec: &StyleSpec,
    ) -> Result<(), ErrorBody> {
        let base: u32 = self
            .cell_mut(part, row, col)?
            .style()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let id = self.derived_style(base, spec)?;
        self.cell_mut(part, row, col)?.set_style(id);
        Ok(())
    }

    fn cell_mut(&mut self, part: &str, row: u32, col: u32) -> Result<&mut Cell, ErrorBody> {
        Ok(self
            .row_mut(part, row + 1)?
            .cells
            .entry(col)
            .or_insert(Cell::Written {
                style: None,
                value: CellValue::Clear,
            }))
    }

    /// The cell format `base` with `spec` applied, added to the styles once per combination.
    fn derived_style(&mut self, base: u32, spec: &StyleSpec) -> Result<u32, ErrorBody> {
        let key = (base, serde_json::to_string(spec).unwrap_or_default());
        if let Some(id) = self.style_cache.get(&key) {
            return Ok(*id);
        }
        let styles = self
            .styles_part
            .clone()
            .ok_or_else(|| invalid("the workbook has no styles part".into()))?;
        let id = StyleSheet::new(&mut self.package.doc_mut(&styles)?.root).derive(base, spec)?;
        self.style_cache.insert(key, id);
        Ok(id)
    }

    /// Puts the loaded rows back into their sheets, with each sheet's `dimension` updated.
    pub(super) fn store_rows(&mut self) -> Result<(), ErrorBody> {
        for (part, data) in std::mem::take(&mut self.data) {
            let root = &mut self.package.doc_mut(&part)?.root;
            let dimension = match bounds(&data) {
                Some(b) if b.cells() == 1 => cell_name(b.start.0, b.start.1),
                Some(b) => b.to_string(),
                None => "A1".to_string(),
            };
            if let Some(sheet_data) = root.child_mut(&format!("{}sheetData", data.prefix)) {
                sheet_data.children = rows_to_nodes(data);
            }
            ensure_child(root, "dimension", WORKSHEET_ORDER).set_attr("ref", &dimension);
        }
        Ok(())
    }
}

fn does_not_fit(height: u64, width: u64, start: CellRef) -> ErrorBody {
    invalid(format!(
        "{height} row(s) × {width} column(s) from {} do not fit in a sheet (XFD1048576)",
        cell_name(start.row, start.col)
    ))
}

fn load_rows(children: Vec<Node>, prefix: String) -> Result<SheetData, ErrorBody> {
    let mut data = SheetData {
        prefix,
        rows: BTreeMap::new(),
    };
    let mut next_row = 1;
    for node in children {
        let Node::Element(mut row) = node else {
            continue;
        };
        let number = row
            .attr("r")
            .and_then(|r| r.parse().ok())
            .unwrap_or(next_row);
        next_row = number + 1;
        let mut cells = BTreeMap::new();
        let mut next_col = 0;
        for cell in std::mem::take(&mut row.children) {
            let Node::Element(cell) = cell else { continue };
            let col = match cell.attr("r") {
                Some(r) => {
                    CellRef::parse(&r)
                        .map_err(|_| {
                            read_failed(format!("the sheet has a bad cell reference {r:?}"))
                        })?
                        .col
                }
                None => next_col,
            };
            next_col = col + 1;
            cells.insert(col, Cell::Kept(cell));
        }
        row.set_attr("r", &number.to_string());
        row.remove_attr("spans");
        data.rows.insert(
            number,
            Row {
                element: row,
                cells,
            },
        );
    }
    Ok(data)
}

fn rows_to_nodes(data: SheetData) -> Vec<Node> {
    let prefix = data.prefix;
    data.rows
        .into_iter()
        .filter(|(_, row)| !row.cells.is_empty() || row.element.attrs.len() > 1)
        .map(|(number, mut row)| {
            row.element.children = row
                .cells
                .into_iter()
                .map(|(col, cell)| match cell {
                    Cell::Kept(element) => Node::Element(element),
                    Cell::Written { style, value } => Node::Other(render_cell(
                        &prefix,
                        number - 1,
                        col,
                        style.as_deref(),
                        &value,
                    )),
                })
                .collect();
            Node::Element(row.element)
        })
        .collect()
}

fn bounds(data: &SheetData) -> Option<CellRange> {
    let mut range: Option<CellRange> = None;
    for (number, row) in &data.rows {
        for col in row.cells.keys() {
            let (r, c) = (number - 1, *col);
            range = Some(match range {
                None => CellRange {
                    start: (r, c),
                    end: (r, c),
                },
                Some(b) => CellRange {
                    start: (b.start.0.min(r), b.start.1.min(c)),
                    end: (b.end.0.max(r), b.end.1.max(c)),
                },
            });
        }
    }
    range
}

/// A written cell as XML text (one allocation per cell; references and style ids need no
/// escaping).
fn render_cell(prefix: &str, row: u32, col: u32, style: Option<&str>, value: &CellValue) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(48);
    let _ = write!(out, "<{prefix}c r=\"{}\"", cell_name(row, col));
    if let Some(style) = style {
        let _ = write!(out, " s=\"{style}\"");
    }
    let _ = match value {
        CellValue::Number(n) | CellValue::Date(n, _) => {
            write!(out, "><{prefix}v>{n}</{prefix}v></{prefix}c>")
        }
        CellValue::Bool(b) => write!(
            out,
            " t=\"b\"><{prefix}v>{}</{prefix}v></{prefix}c>",
            u8::from(*b)
        ),
        CellValue::Text(text) => write!(
            out,
            " t=\"inlineStr\"><{prefix}is><{prefix}t xml:space=\"preserve\">{}</{prefix}t></{prefix}is></{prefix}c>",
            escape_cell_text(text)
        ),
        CellValue::Formula(formula) => write!(
            out,
            "><{prefix}f>{}</{prefix}f></{prefix}c>",
            escape_text(formula)
        ),
        CellValue::Clear => write!(out, "/>"),
    };
    out
}

/// Cell text as SpreadsheetML holds it: XML-escaped, with the characters XML 1.0 cannot carry
/// (control characters other than tab and line breaks, U+FFFE, U+FFFF) written as `_xHHHH_`.
pub(super) fn escape_cell_text(text: &str) -> String {
    let not_xml = |c: char| {
        (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || matches!(c, '\u{FFFE}' | '\u{FFFF}')
    };
    if !text.contains(not_xml) {
        return escape_text(text);
    }
    let mut encoded = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if not_xml(c) {
            encoded.push_str(&format!("_x{:04X}_", u32::from(c)));
        } else {
            encoded.push(c);
        }
    }
    escape_text(&encoded)
}
