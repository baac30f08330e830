//! `xlsx_operations`: XML-level edits of a workbook package. Only the parts an operation touches
//! are rewritten (the workbook, edited sheets, styles, content types, relationships); every other
//! part (untouched sheets, shared strings, drawings, charts, themes…) is copied byte-for-byte.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use serde_json::{Value, json};

use atelier_messages::{ErrorBody, ErrorCode};

use super::cellref::{CellRange, cell_name, parse_cell};
use super::styles::{StyleSheet, StyleSpec};
use crate::office::package::{Package, read_failed};
use crate::office::xml::{Document, Element, Node, escape_text};

const REL_WORKSHEET: &str =
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet";
const CT_WORKSHEET: &str =
    "application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml";
const NS_MAIN: &str = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";
const NS_REL: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
/// Longest text Excel keeps in a cell.
const MAX_TEXT: usize = 32_767;
/// Schema order of `worksheet` children.
const WORKSHEET_ORDER: &[&str] = &[
    "sheetPr",
    "dimension",
    "sheetViews",
    "sheetFormatPr",
    "cols",
    "sheetData",
    "sheetCalcPr",
    "sheetProtection",
    "protectedRanges",
    "scenarios",
    "autoFilter",
    "sortState",
    "dataConsolidate",
    "customSheetViews",
    "mergeCells",
    "phoneticPr",
    "conditionalFormatting",
    "dataValidations",
    "hyperlinks",
    "printOptions",
    "pageMargins",
    "pageSetup",
    "headerFooter",
    "rowBreaks",
    "colBreaks",
    "customProperties",
    "cellWatches",
    "ignoredErrors",
    "smartTags",
    "drawing",
    "legacyDrawing",
    "legacyDrawingHF",
    "picture",
    "oleObjects",
    "controls",
    "webPublishItems",
    "tableParts",
    "extLst",
];
/// Schema order of `workbook` children.
const WORKBOOK_ORDER: &[&str] = &[
    "fileVersion",
    "fileSharing",
    "workbookPr",
    "workbookProtection",
    "bookViews",
    "sheets",
    "functionGroups",
    "externalReferences",
    "definedNames",
    "calcPr",
    "oleSize",
    "customWorkbookViews",
    "pivotCaches",
    "smartTagPr",
    "smartTagTypes",
    "webPublishing",
    "fileRecoveryPr",
    "webPublishObjects",
    "extLst",
];

/// One operation of an `xlsx_operations` call.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum XlsxOp {
    EnsureSheet {
        sheet: String,
    },
    DeleteSheet {
        sheet: String,
    },
    RenameSheet {
        sheet: String,
        new_name: String,
    },
    SetCells {
        sheet: String,
        cells: Vec<CellSpec>,
    },
    SetRange {
        sheet: String,
        start: String,
        values: Vec<Vec<Value>>,
    },
    SetColumnWidths {
        sheet: String,
        widths: BTreeMap<String, f64>,
    },
    SetRowHeights {
        sheet: String,
        heights: BTreeMap<String, f64>,
    },
    FreezePanes {
        sheet: String,
        cell: String,
    },
    SetStyle {
        sheet: String,
        range: String,
        style: StyleSpec,
    },
}

/// One cell of `set_cells`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CellSpec {
    cell: String,
    value: Value,
    /// `number`, `text`, `bool`, `date` or `formula`; inferred from the JSON type when absent.
    #[serde(rename = "type")]
    kind: Option<String>,
    style: Option<StyleSpec>,
}

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// A value to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CellValue {
    Number(f64),
    Text(String),
    Bool(bool),
    /// Excel serial date; `true` when it has a time of day.
    Date(f64, bool),
    Formula(String),
    Clear,
}

impl CellValue {
    /// Converts JSON with an optional declared type. Without one, JSON types are kept: numbers
    /// are numbers, booleans booleans, `null` clears, text starting with `=` is a formula.
    pub(crate) fn from_json(
        value: &Value,
        kind: Option<&str>,
        date1904: bool,
    ) -> Result<CellValue, ErrorBody> {
        let wrong = |what: &str| invalid(format!("{value} is not a valid {what}"));
        Ok(match (kind, value) {
            (None, Value::Null) => CellValue::Clear,
            (None | Some("number"), Value::Number(n)) => {
                CellValue::Number(finite(n.as_f64().unwrap_or(f64::NAN))?)
            }
            (Some("number"), Value::String(s)) => {
                CellValue::Number(finite(s.trim().parse().map_err(|_| wrong("number"))?)?)
            }
            (None | Some("bool" | "boolean"), Value::Bool(b)) => CellValue::Bool(*b),
            (Some("bool" | "boolean"), Value::String(s)) => {
                CellValue::Bool(match s.to_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(wrong("boolean")),
                })
            }
            (None, Value::String(s)) if s.starts_with('=') && s.len() > 1 => {
                CellValue::Formula(s[1..].to_string())
            }
            (Some("formula"), Value::String(s)) => {
                CellValue::Formula(s.trim_start_matches('=').to_string())
            }
            (None | Some("text" | "string"), Value::String(s)) => CellValue::Text(checked_text(s)?),
            (Some("text" | "string"), other) => CellValue::Text(checked_text(&other.to_string())?),
            (Some("date"), Value::String(s)) => {
                let (serial, time) = excel_date(s, date1904)
                    .ok_or_else(|| wrong("date (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS)"))?;
                CellValue::Date(serial, time)
            }
            (Some("date"), Value::Number(n)) => {
                CellValue::Date(finite(n.as_f64().unwrap_or(f64::NAN))?, false)
            }
            (Some(kind @ ("number" | "bool" | "boolean" | "date" | "formula")), _) => {
                return Err(wrong(kind));
            }
            (Some(other), _) => {
                return Err(invalid(format!(
                    "unknown cell type {other:?}; use number, text, bool, date or formula"
                )));
            }
            (None, other) => {
                return Err(invalid(format!(
                    "{other} cannot be written to a cell; use a number, text, boolean or null"
                )));
            }
        })
    }
}

fn finite(f: f64) -> Result<f64, ErrorBody> {
    if f.is_finite() {
        Ok(f)
    } else {
        Err(invalid("cells cannot hold NaN or infinity".into()))
    }
}

fn checked_text(text: &str) -> Result<String, ErrorBody> {
    if text.chars().count() > MAX_TEXT {
        return Err(invalid(format!(
            "text of {} characters exceeds Excel's {MAX_TEXT}",
            text.chars().count()
        )));
    }
    Ok(text.to_string())
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-01-05` or `2026-01-05T13:42:17` (also with a space) → Excel serial.
pub(crate) fn excel_date(text: &str, date1904: bool) -> Option<(f64, bool)> {
    let text = text.trim();
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t)),
        None => (text, None),
    };
    let mut parts = date.split('-');
    let (y, m, d): (i64, i64, i64) = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    if parts.next().is_some()
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&d)
        || !(1900..=9999).contains(&y)
    {
        return None;
    }
    let mut serial = (days_from_civil(y, m, d) - days_from_civil(1899, 12, 30)) as f64;
    if date1904 {
        serial -= 1462.0;
    }
    let Some(time) = time else {
        return Some((serial, false));
    };
    let mut hms = time.trim_end_matches('Z').split(':');
    let h: f64 = hms.next()?.parse().ok()?;
    let mi: f64 = hms.next().unwrap_or("0").parse().ok()?;
    let s: f64 = hms.next().unwrap_or("0").parse().ok()?;
    if !(0.0..24.0).contains(&h) || !(0.0..60.0).contains(&mi) || !(0.0..61.0).contains(&s) {
        return None;
    }
    Some((serial + (h * 3600.0 + mi * 60.0 + s) / 86_400.0, true))
}

/// A sheet of the workbook.
#[derive(Debug, Clone)]
struct SheetRef {
    name: String,
    rel_id: String,
    part: String,
}

/// A loaded `sheetData`: rows by 1-based number, cells by 0-based column.
#[derive(Debug, Default)]
struct SheetData {
    prefix: String,
    rows: BTreeMap<u32, Row>,
}

#[derive(Debug)]
struct Row {
    element: Element,
    cells: BTreeMap<u32, Cell>,
}

/// A cell of an edited sheet: kept as read, or written by an operation (rendered on finish).
#[derive(Debug)]
enum Cell {
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
}

/// A workbook being edited.
pub(crate) struct XlsxEditor {
    package: Package,
    workbook: String,
    data: BTreeMap<String, SheetData>,
    styles_part: Option<String>,
    style_cache: HashMap<(u32, String), u32>,
    date1904: bool,
    recalc: bool,
}

/// Applies `ops` in order; returns the new workbook and one result per operation.
pub(crate) fn apply(bytes: Vec<u8>, ops: &[XlsxOp]) -> Result<(Vec<u8>, Vec<Value>), ErrorBody> {
    let mut editor = XlsxEditor::open(bytes)?;
    let mut results = Vec::with_capacity(ops.len());
    for (n, op) in ops.iter().enumerate() {
        let result = editor
            .apply_one(op)
            .map_err(|e| ErrorBody::new(e.code, format!("operation {n}: {}", e.message)))?;
        results.push(result);
    }
    Ok((editor.finish()?, results))
}

impl XlsxEditor {
    pub(crate) fn open(bytes: Vec<u8>) -> Result<XlsxEditor, ErrorBody> {
        let mut package = Package::open(bytes, "XLSX")?;
        let workbook = package.main_part("XLSX")?;
        let styles_part = package.rel_of_kind(&workbook, "styles")?.map(|r| r.target);
        let date1904 = package
            .doc(&workbook)?
            .root
            .child_local("workbookPr")
            .and_then(|p| p.attr("date1904"))
            .is_some_and(|v| v == "1" || v == "true");
        Ok(XlsxEditor {
            package,
            workbook,
            data: BTreeMap::new(),
            styles_part,
            style_cache: HashMap::new(),
            date1904,
            recalc: false,
        })
    }

    fn apply_one(&mut self, op: &XlsxOp) -> Result<Value, ErrorBody> {
        match op {
            XlsxOp::EnsureSheet { sheet } => {
                let created = self.ensure_sheet(sheet)?;
                Ok(json!({"op": "ensure_sheet", "sheet": sheet, "created": created}))
            }
            XlsxOp::DeleteSheet { sheet } => {
                self.delete_sheet(sheet)?;
                Ok(json!({"op": "delete_sheet", "sheet": sheet}))
            }
            XlsxOp::RenameSheet { sheet, new_name } => {
                self.rename_sheet(sheet, new_name)?;
                Ok(json!({"op": "rename_sheet", "sheet": sheet, "new_name": new_name}))
            }
            XlsxOp::SetCells { sheet, cells } => {
                let part = self.sheet(sheet)?.part;
                for spec in cells {
                    let (row, col) = parse_cell(&spec.cell)?;
                    let value =
                        CellValue::from_json(&spec.value, spec.kind.as_deref(), self.date1904)
                            .map_err(|e| invalid(format!("cell {}: {}", spec.cell, e.message)))?;
                    self.write_cell(&part, row, col, &value)?;
                    if let Some(style) = &spec.style {
                        self.style_cell(&part, row, col, style)?;
                    }
                }
                Ok(json!({"op": "set_cells", "sheet": sheet, "cells": cells.len()}))
            }
            XlsxOp::SetRange {
                sheet,
                start,
                values,
            } => {
                let part = self.sheet(sheet)?.part;
                let (row0, col0) = parse_cell(start)?;
                let mut count = 0;
                for (r, row) in values.iter().enumerate() {
                    for (c, value) in row.iter().enumerate() {
                        let (row, col) = (row0 + r as u32, col0 + c as u32);
                        let value =
                            CellValue::from_json(value, None, self.date1904).map_err(|e| {
                                invalid(format!("cell {}: {}", cell_name(row, col), e.message))
                            })?;
                        self.write_cell(&part, row, col, &value)?;
                        count += 1;
                    }
                }
                Ok(json!({"op": "set_range", "sheet": sheet, "cells": count}))
            }
            XlsxOp::SetColumnWidths { sheet, widths } => {
                let part = self.sheet(sheet)?.part;
                for (column, width) in widths {
                    self.set_column_width(&part, column, *width)?;
                }
                Ok(json!({"op": "set_column_widths", "sheet": sheet, "columns": widths.len()}))
            }
            XlsxOp::SetRowHeights { sheet, heights } => {
                let part = self.sheet(sheet)?.part;
                for (row, height) in heights {
                    let number: u32 = row
                        .trim()
                        .parse()
                        .ok()
                        .filter(|r| (1..=1_048_576).contains(r))
                        .ok_or_else(|| {
                            invalid(format!("row {row:?} must be a 1-based row number"))
                        })?;
                    if !(0.0..=409.0).contains(height) {
                        return Err(invalid(format!(
                            "row height {height} must be between 0 and 409 points"
                        )));
                    }
                    let row = self.row_mut(&part, number)?;
                    row.element.set_attr("ht", &height.to_string());
                    row.element.set_attr("customHeight", "1");
                }
                Ok(json!({"op": "set_row_heights", "sheet": sheet, "rows": heights.len()}))
            }
            XlsxOp::FreezePanes { sheet, cell } => {
                let part = self.sheet(sheet)?.part;
                let (row, col) = parse_cell(cell)?;
                self.freeze(&part, row, col)?;
                Ok(json!({"op": "freeze_panes", "sheet": sheet, "cell": cell}))
            }
            XlsxOp::SetStyle {
                sheet,
                range,
                style,
            } => {
                let part = self.sheet(sheet)?.part;
                let range = CellRange::parse(range)?;
                if range.cells() > 1_000_000 {
                    return Err(invalid(format!(
                        "set_style on {} cells; the limit is 1,000,000",
                        range.cells()
                    )));
                }
                for row in range.start.0..=range.end.0 {
                    for col in range.start.1..=range.end.1 {
                        self.style_cell(&part, row, col, style)?;
                    }
                }
                Ok(
                    json!({"op": "set_style", "sheet": sheet, "range": range.to_string(), "cells": range.cells()}),
                )
            }
        }
    }

    // -- sheets ---------------------------------------------------------------------------

    fn sheets(&mut self) -> Result<Vec<SheetRef>, ErrorBody> {
        let rels = self.package.rels(&self.workbook)?;
        let root = &self.package.doc(&self.workbook)?.root;
        let Some(sheets) = root.child_local("sheets") else {
            return Ok(Vec::new());
        };
        Ok(sheets
            .elements()
            .filter_map(|sheet| {
                let rel_id = sheet.attr_local("id")?;
                let part = rels.iter().find(|r| r.id == rel_id)?.target.clone();
                Some(SheetRef {
                    name: sheet.attr("name")?,
                    rel_id,
                    part,
                })
            })
            .collect())
    }

    fn sheet(&mut self, name: &str) -> Result<SheetRef, ErrorBody> {
        let sheets = self.sheets()?;
        sheets
            .iter()
            .find(|s| s.name == name)
            .or_else(|| sheets.iter().find(|s| s.name.eq_ignore_ascii_case(name)))
            .cloned()
            .ok_or_else(|| {
                let names: Vec<&str> = sheets.iter().map(|s| s.name.as_str()).collect();
                invalid(format!(
                    "no sheet {name:?}; the sheets are: {} (ensure_sheet creates one)",
                    names.join(", ")
                ))
            })
    }

    fn ensure_sheet(&mut self, name: &str) -> Result<bool, ErrorBody> {
        let sheets = self.sheets()?;
        if sheets.iter().any(|s| s.name.eq_ignore_ascii_case(name)) {
            return Ok(false);
        }
        check_sheet_name(name, &sheets)?;
        let part = self.package.free_name("xl/worksheets/sheet", ".xml");
        let worksheet = Element::new("worksheet", &[("xmlns", NS_MAIN), ("xmlns:r", NS_REL)])
            .with(Element::new("dimension", &[("ref", "A1")]))
            .with(
                Element::new("sheetViews", &[])
                    .with(Element::new("sheetView", &[("workbookViewId", "0")])),
            )
            .with(Element::new("sheetFormatPr", &[("defaultRowHeight", "15")]))
            .with(Element::new("sheetData", &[]))
            .with(Element::new(
                "pageMargins",
                &[
                    ("left", "0.7"),
                    ("right", "0.7"),
                    ("top", "0.75"),
                    ("bottom", "0.75"),
                    ("header", "0.3"),
                    ("footer", "0.3"),
                ],
            ));
        self.package.put(&part, Document::new(worksheet));
        self.package.add_override(&part, CT_WORKSHEET)?;
        let rel_id = self
            .package
            .add_rel(&self.workbook.clone(), REL_WORKSHEET, &part)?;
        let root = &mut self.package.doc_mut(&self.workbook)?.root;
        let prefix = prefix_of(&root.name);
        let sheets_name = format!("{prefix}sheets");
        let order = prefixed(&prefix, WORKBOOK_ORDER);
        let list = root.ensure_child(&sheets_name, &refs(&order));
        let next_id = list
            .elements()
            .filter_map(|s| s.attr("sheetId")?.parse::<u32>().ok())
            .max()
            .unwrap_or(0)
            + 1;
        list.children.push(Node::Element(Element::new(
            &format!("{prefix}sheet"),
            &[
                ("xmlns:r", NS_REL),
                ("name", name),
                ("sheetId", &next_id.to_string()),
                ("r:id", &rel_id),
            ],
        )));
        Ok(true)
    }

    fn delete_sheet(&mut self, name: &str) -> Result<(), ErrorBody> {
        let sheet = self.sheet(name)?;
        let sheets = self.sheets()?;
        if sheets.len() <= 1 {
            return Err(invalid(format!(
                "{name:?} is the only sheet; a workbook needs at least one"
            )));
        }
        let index = sheets
            .iter()
            .position(|s| s.part == sheet.part)
            .unwrap_or(0);
        self.data.remove(&sheet.part);
        self.package
            .remove_rel(&self.workbook.clone(), &sheet.rel_id)?;
        self.package.remove_part(&sheet.part)?;
        let root = &mut self.package.doc_mut(&self.workbook)?.root;
        for child in root.elements_mut() {
            match child.local_name() {
                "sheets" => {
                    child.retain_elements(|s| {
                        s.attr_local("id").as_deref() != Some(sheet.rel_id.as_str())
                    });
                }
                "definedNames" => fix_defined_names(child, index, &sheet.name),
                "bookViews" => {
                    for view in child.elements_mut() {
                        for attr in ["activeTab", "firstSheet"] {
                            let value: usize =
                                view.attr(attr).and_then(|v| v.parse().ok()).unwrap_or(0);
                            if value >= index && value > 0 {
                                view.set_attr(attr, &(value - 1).to_string());
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        root.retain_elements(|e| e.local_name() != "definedNames" || e.elements().next().is_some());
        self.recalc = true;
        Ok(())
    }

    fn rename_sheet(&mut self, name: &str, new_name: &str) -> Result<(), ErrorBody> {
        let sheet = self.sheet(name)?;
        let others: Vec<SheetRef> = self
            .sheets()?
            .into_iter()
            .filter(|s| s.part != sheet.part)
            .collect();
        if others.iter().any(|s| s.name.eq_ignore_ascii_case(new_name)) {
            return Err(invalid(format!(
                "a sheet named {new_name:?} already exists"
            )));
        }
        check_sheet_name(new_name, &[])?;
        let (old_ref, new_ref) = (sheet_ref(&sheet.name), sheet_ref(new_name));
        let root = &mut self.package.doc_mut(&self.workbook)?.root;
        for child in root.elements_mut() {
            match child.local_name() {
                "sheets" => {
                    for s in child.elements_mut() {
                        if s.attr_local("id").as_deref() == Some(sheet.rel_id.as_str()) {
                            s.set_attr("name", new_name);
                        }
                    }
                }
                "definedNames" => {
                    for defined in child.elements_mut() {
                        let text = defined.text();
                        if text.contains(&old_ref) {
                            defined.set_text(&text.replace(&old_ref, &new_ref));
                        }
                    }
                }
                _ => {}
            }
        }
        self.rewrite_formula_refs(&old_ref, &new_ref)
    }

    /// Rewrites `Old!` references in every sheet's formulas.
    fn rewrite_formula_refs(&mut self, old_ref: &str, new_ref: &str) -> Result<(), ErrorBody> {
        for sheet in self.sheets()? {
            if let Some(data) = self.data.get_mut(&sheet.part) {
                for cell in data.rows.values_mut().flat_map(|r| r.cells.values_mut()) {
                    match cell {
                        Cell::Kept(element) => rewrite_formula(element, old_ref, new_ref),
                        Cell::Written {
                            value: CellValue::Formula(f),
                            ..
                        } => {
                            *f = f.replace(old_ref, new_ref);
                        }
                        Cell::Written { .. } => {}
                    }
                }
                continue;
            }
            let uses = self
                .package
                .doc(&sheet.part)?
                .root
                .descendants()
                .iter()
                .any(|e| e.local_name() == "f" && e.text().contains(old_ref));
            if uses {
                let root = &mut self.package.doc_mut(&sheet.part)?.root;
                for row in root
                    .elements_mut()
                    .filter(|e| e.local_name() == "sheetData")
                    .flat_map(|d| d.elements_mut())
                {
                    for cell in row.elements_mut() {
                        rewrite_formula(cell, old_ref, new_ref);
                    }
                }
            }
        }
        Ok(())
    }

    // -- cells ----------------------------------------------------------------------------

    /// The loaded rows of a sheet (moved out of its `sheetData` until [`XlsxEditor::finish`]).
    fn data(&mut self, part: &str) -> Result<&mut SheetData, ErrorBody> {
        if !self.data.contains_key(part) {
            let root = &mut self.package.doc_mut(part)?.root;
            let prefix = prefix_of(&root.name);
            let order = prefixed(&prefix, WORKSHEET_ORDER);
            let sheet_data = root.ensure_child(&format!("{prefix}sheetData"), &refs(&order));
            let children = std::mem::take(&mut sheet_data.children);
            let data = load_rows(children, prefix)?;
            self.data.insert(part.to_string(), data);
        }
        self.data
            .get_mut(part)
            .ok_or_else(|| read_failed(format!("cannot load {part}")))
    }

    fn row_mut(&mut self, part: &str, number: u32) -> Result<&mut Row, ErrorBody> {
        let data = self.data(part)?;
        let prefix = data.prefix.clone();
        Ok(data.rows.entry(number).or_insert_with(|| Row {
            element: Element::new(&format!("{prefix}row"), &[("r", &number.to_string())]),
            cells: BTreeMap::new(),
        }))
    }

    fn write_cell(
        &mut self,
        part: &str,
        row: u32,
        col: u32,
        value: &CellValue,
    ) -> Result<(), ErrorBody> {
        self.recalc = true;
        if let CellValue::Date(_, time) = value {
            let format = if *time {
                "yyyy-mm-dd hh:mm:ss"
            } else {
                "yyyy-mm-dd"
            };
            self.style_cell(part, row, col, &StyleSpec::number_format(format))?;
        }
        let data = self.data(part)?;
        let prefix = data.prefix.clone();
        let row_entry = data.rows.entry(row + 1).or_insert_with(|| Row {
            element: Element::new(&format!("{prefix}row"), &[("r", &(row + 1).to_string())]),
            cells: BTreeMap::new(),
        });
        let style = row_entry.cells.get(&col).and_then(Cell::style);
        if *value == CellValue::Clear && style.is_none() {
            row_entry.cells.remove(&col);
            return Ok(());
        }
        row_entry.cells.insert(
            col,
            Cell::Written {
                style,
                value: value.clone(),
            },
        );
        Ok(())
    }

    fn style_cell(
        &mut self,
        part: &str,
        row: u32,
        col: u32,
        spec: &StyleSpec,
    ) -> Result<(), ErrorBody> {
        let data = self.data(part)?;
        let prefix = data.prefix.clone();
        let row_entry = data.rows.entry(row + 1).or_insert_with(|| Row {
            element: Element::new(&format!("{prefix}row"), &[("r", &(row + 1).to_string())]),
            cells: BTreeMap::new(),
        });
        let cell = row_entry.cells.entry(col).or_insert(Cell::Written {
            style: None,
            value: CellValue::Clear,
        });
        let base: u32 = cell.style().and_then(|s| s.parse().ok()).unwrap_or(0);
        let key = (base, serde_json::to_string(spec).unwrap_or_default());
        let id = match self.style_cache.get(&key) {
            Some(id) => *id,
            None => {
                let styles = self
                    .styles_part
                    .clone()
                    .ok_or_else(|| invalid("the workbook has no styles part".into()))?;
                let id =
                    StyleSheet::new(&mut self.package.doc_mut(&styles)?.root).derive(base, spec)?;
                self.style_cache.insert(key, id);
                id
            }
        };
        if let Some(cell) = self
            .data
            .get_mut(part)
            .and_then(|d| d.rows.get_mut(&(row + 1)))
            .and_then(|r| r.cells.get_mut(&col))
        {
            cell.set_style(id);
        }
        Ok(())
    }

    fn set_column_width(&mut self, part: &str, column: &str, width: f64) -> Result<(), ErrorBody> {
        let (_, col) = parse_cell(&format!("{}1", column.trim()))
            .map_err(|_| invalid(format!("{column:?} is not a column like B")))?;
        if !(0.0..=255.0).contains(&width) {
            return Err(invalid(format!(
                "column width {width} must be between 0 and 255"
            )));
        }
        let number = col + 1;
        let root = &mut self.package.doc_mut(part)?.root;
        let prefix = prefix_of(&root.name);
        let order = prefixed(&prefix, WORKSHEET_ORDER);
        let cols = root.ensure_child(&format!("{prefix}cols"), &refs(&order));
        let mut pieces: Vec<Element> = Vec::new();
        for existing in cols.elements() {
            let min: u32 = existing
                .attr("min")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let max: u32 = existing
                .attr("max")
                .and_then(|v| v.parse().ok())
                .unwrap_or(min);
            if number < min || number > max {
                pieces.push(existing.clone());
                continue;
            }
            for (lo, hi) in [(min, number.saturating_sub(1)), (number + 1, max)] {
                if lo <= hi && lo >= min && hi <= max {
                    let mut piece = existing.clone();
                    piece.set_attr("min", &lo.to_string());
                    piece.set_attr("max", &hi.to_string());
                    pieces.push(piece);
                }
            }
        }
        let n = number.to_string();
        pieces.push(Element::new(
            &format!("{prefix}col"),
            &[
                ("min", &n),
                ("max", &n),
                ("width", &width.to_string()),
                ("customWidth", "1"),
            ],
        ));
        pieces.sort_by_key(|c| {
            c.attr("min")
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0)
        });
        cols.children = pieces.into_iter().map(Node::Element).collect();
        Ok(())
    }

    fn freeze(&mut self, part: &str, row: u32, col: u32) -> Result<(), ErrorBody> {
        let root = &mut self.package.doc_mut(part)?.root;
        let prefix = prefix_of(&root.name);
        let order = prefixed(&prefix, WORKSHEET_ORDER);
        let views = root.ensure_child(&format!("{prefix}sheetViews"), &refs(&order));
        let view_name = format!("{prefix}sheetView");
        if views.child(&view_name).is_none() {
            views.children.push(Node::Element(Element::new(
                &view_name,
                &[("workbookViewId", "0")],
            )));
        }
        let Some(view) = views.child_mut(&view_name) else {
            return Ok(());
        };
        view.retain_elements(|e| !matches!(e.local_name(), "pane" | "selection"));
        if row == 0 && col == 0 {
            return Ok(());
        }
        let pane = match (row > 0, col > 0) {
            (true, true) => "bottomRight",
            (true, false) => "bottomLeft",
            _ => "topRight",
        };
        let mut attrs: Vec<(&str, String)> = Vec::new();
        if col > 0 {
            attrs.push(("xSplit", col.to_string()));
        }
        if row > 0 {
            attrs.push(("ySplit", row.to_string()));
        }
        attrs.extend([
            ("topLeftCell", cell_name(row, col)),
            ("activePane", pane.to_string()),
            ("state", "frozen".to_string()),
        ]);
        let attrs: Vec<(&str, &str)> = attrs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        view.children.insert(
            0,
            Node::Element(Element::new(&format!("{prefix}pane"), &attrs)),
        );
        view.children.insert(
            1,
            Node::Element(Element::new(
                &format!("{prefix}selection"),
                &[("pane", pane)],
            )),
        );
        Ok(())
    }

    /// Writes the loaded rows back, drops the stale calculation chain, asks for a recalculation
    /// on open, and writes the package.
    pub(crate) fn finish(mut self) -> Result<Vec<u8>, ErrorBody> {
        for (part, data) in std::mem::take(&mut self.data) {
            let root = &mut self.package.doc_mut(&part)?.root;
            let prefix = data.prefix.clone();
            let bounds = bounds(&data);
            if let Some(sheet_data) = root.child_mut(&format!("{prefix}sheetData")) {
                sheet_data.children = rows_to_nodes(data);
            }
            let dimension = bounds.map_or_else(
                || "A1".to_string(),
                |b| {
                    if b.cells() == 1 {
                        cell_name(b.start.0, b.start.1)
                    } else {
                        b.to_string()
                    }
                },
            );
            let order = prefixed(&prefix, WORKSHEET_ORDER);
            root.ensure_child(&format!("{prefix}dimension"), &refs(&order))
                .set_attr("ref", &dimension);
        }
        if self.recalc {
            self.drop_calc_chain()?;
        }
        self.package.finish()
    }

    fn drop_calc_chain(&mut self) -> Result<(), ErrorBody> {
        let workbook = self.workbook.clone();
        if let Some(rel) = self.package.rel_of_kind(&workbook, "calcChain")? {
            self.package.remove_rel(&workbook, &rel.id)?;
            self.package.remove_part(&rel.target)?;
        }
        let root = &mut self.package.doc_mut(&workbook)?.root;
        let prefix = prefix_of(&root.name);
        let order = prefixed(&prefix, WORKBOOK_ORDER);
        root.ensure_child(&format!("{prefix}calcPr"), &refs(&order))
            .set_attr("fullCalcOnLoad", "1");
        Ok(())
    }
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
                    parse_cell(&r)
                        .map_err(|_| {
                            read_failed(format!("the sheet has a bad cell reference {r:?}"))
                        })?
                        .1
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
            escape_text(text)
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

fn rewrite_formula(cell: &mut Element, old_ref: &str, new_ref: &str) {
    for f in cell.elements_mut().filter(|e| e.local_name() == "f") {
        let text = f.text();
        if text.contains(old_ref) {
            f.set_text(&text.replace(old_ref, new_ref));
        }
    }
}

/// `Sales!` or `'Q1 Sales'!` as used in formulas.
fn sheet_ref(name: &str) -> String {
    let plain = name.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        format!("{name}!")
    } else {
        format!("'{}'!", name.replace('\'', "''"))
    }
}

/// Removes defined names scoped to or referring to the deleted sheet and renumbers the scopes.
fn fix_defined_names(names: &mut Element, index: usize, sheet: &str) {
    let reference = sheet_ref(sheet);
    names.retain_elements(|d| {
        let scoped_here =
            d.attr("localSheetId").and_then(|v| v.parse::<usize>().ok()) == Some(index);
        !scoped_here && !d.text().contains(&reference)
    });
    for defined in names.elements_mut() {
        if let Some(scope) = defined
            .attr("localSheetId")
            .and_then(|v| v.parse::<usize>().ok())
            && scope > index
        {
            defined.set_attr("localSheetId", &(scope - 1).to_string());
        }
    }
}

fn check_sheet_name(name: &str, existing: &[SheetRef]) -> Result<(), ErrorBody> {
    let bad = name.is_empty()
        || name.chars().count() > 31
        || name.contains(['[', ']', ':', '*', '?', '/', '\\'])
        || name.starts_with('\'')
        || name.ends_with('\'')
        || name.eq_ignore_ascii_case("history");
    if bad {
        return Err(invalid(format!(
            "{name:?} is not a valid sheet name (1-31 characters, none of [ ] : * ? / \\, no leading or trailing apostrophe)"
        )));
    }
    if existing.iter().any(|s| s.name.eq_ignore_ascii_case(name)) {
        return Err(invalid(format!("a sheet named {name:?} already exists")));
    }
    Ok(())
}

fn prefix_of(name: &str) -> String {
    name.rsplit_once(':')
        .map(|(p, _)| format!("{p}:"))
        .unwrap_or_default()
}

fn prefixed(prefix: &str, locals: &[&str]) -> Vec<String> {
    locals.iter().map(|l| format!("{prefix}{l}")).collect()
}

fn refs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn converts_json_keeping_types() {
        assert_eq!(
            CellValue::from_json(&json!(12.5), None, false).unwrap(),
            CellValue::Number(12.5)
        );
        assert_eq!(
            CellValue::from_json(&json!("12.5"), None, false).unwrap(),
            CellValue::Text("12.5".into())
        );
        assert_eq!(
            CellValue::from_json(&json!("12.5"), Some("number"), false).unwrap(),
            CellValue::Number(12.5)
        );
        assert_eq!(
            CellValue::from_json(&json!("=SUM(A1:A3)"), None, false).unwrap(),
            CellValue::Formula("SUM(A1:A3)".into())
        );
        assert_eq!(
            CellValue::from_json(&json!(true), None, false).unwrap(),
            CellValue::Bool(true)
        );
        assert_eq!(
            CellValue::from_json(&json!(null), None, false).unwrap(),
            CellValue::Clear
        );
        assert_eq!(
            CellValue::from_json(&json!("2026-01-05"), Some("date"), false).unwrap(),
            CellValue::Date(46027.0, false)
        );
        assert_eq!(
            CellValue::from_json(&json!("2024-10-23T12:00:00"), Some("date"), false).unwrap(),
            CellValue::Date(45588.5, true)
        );
        for (value, kind) in [
            (json!("x"), Some("number")),
            (json!("2026-13-01"), Some("date")),
            (json!([1]), None),
            (json!(1), Some("money")),
        ] {
            assert_eq!(
                CellValue::from_json(&value, kind, false).unwrap_err().code,
                ErrorCode::ValidationFailed,
                "{value}"
            );
        }
    }

    #[test]
    fn quotes_sheet_references() {
        assert_eq!(sheet_ref("Q1"), "Q1!");
        assert_eq!(sheet_ref("Q1 Sales"), "'Q1 Sales'!");
        assert_eq!(sheet_ref("it's"), "'it''s'!");
    }
}
