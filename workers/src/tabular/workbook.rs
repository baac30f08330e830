//! `table_update_from_export`: a query result written into an existing (or new) xlsx workbook.
//!
//! The workbook is edited as the OOXML package it is, not re-generated: only the target sheet's
//! XML changes (plus `styles.xml` when date formats are needed, and `workbook.xml`, its
//! relationships and `[Content_Types].xml` when a sheet is added); every other part is copied
//! byte for byte, so other sheets keep their values, formulas, styles and charts. `calcChain.xml`
//! is dropped (Excel rebuilds it). Values are written as in `table_export`: numbers as numbers,
//! booleans as booleans, dates and timestamps as dates with a date format, text as inline
//! strings. Modes:
//! - `replace_sheet`: the sheet's content becomes the result, from A1 (the sheet is created if
//!   missing);
//! - `append_rows`: rows go below the sheet's last used row, from its first used column;
//! - `write_range`: the result overwrites the rectangle at `start_cell`; cells outside it stay.

use std::collections::BTreeMap;
use std::io::{Cursor, Read, Write};

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::Connection;
use quick_xml::events::{BytesStart, Event};
use rust_xlsxwriter::{Workbook, Worksheet};
use serde::Serialize;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::cells::{Cell, Column};
use super::export::{ExcelValue, Notes, check_sheet_size, excel_value, invalid_sheet, xlsx_failed};
use super::query::{CheckedQuery, scan};

const WORKSHEET_TYPE: &str =
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet";
const WORKSHEET_CONTENT_TYPE: &str =
    "application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml";
const RELATIONSHIPS_NS: &str =
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const BLANK_SHEET: &str = concat!(
    r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>"#,
    "\n",
    r#"<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" "#,
    r#"xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">"#,
    r#"<dimension ref="A1"/><sheetData/></worksheet>"#
);
/// Excel's last column (0-based) and row (0-based).
const MAX_COL: u32 = 16_383;
const MAX_ROW: u32 = 1_048_575;

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

fn broken(message: impl std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::FileReadFailed,
        format!("the target workbook cannot be edited: {message}"),
    )
}

/// A cell position, 0-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CellRef {
    pub(crate) row: u32,
    pub(crate) col: u32,
}

impl CellRef {
    /// Parses `B3` (or `$B$3`).
    pub(crate) fn parse(text: &str) -> Result<Self, ErrorBody> {
        Self::parse_opt(text).ok_or_else(|| {
            invalid(format!(
                "`start_cell` must be a cell like \"A1\" or \"C5\" within XFD1048576, got {text:?}"
            ))
        })
    }

    fn parse_opt(text: &str) -> Option<Self> {
        let text = text.trim().replace('$', "");
        let split = text.find(|c: char| c.is_ascii_digit())?;
        let (letters, digits) = text.split_at(split);
        if letters.is_empty()
            || letters.len() > 3
            || !letters.bytes().all(|b| b.is_ascii_alphabetic())
        {
            return None;
        }
        let col = letters.bytes().fold(0u32, |acc, b| {
            acc * 26 + u32::from(b.to_ascii_uppercase() - b'A' + 1)
        }) - 1;
        let row = digits.parse::<u32>().ok()?.checked_sub(1)?;
        (col <= MAX_COL && row <= MAX_ROW && digits.bytes().all(|b| b.is_ascii_digit()))
            .then_some(Self { row, col })
    }

    /// `A1` notation.
    pub(crate) fn name(self) -> String {
        let mut letters = Vec::new();
        let mut n = self.col + 1;
        while n > 0 {
            let rem = (n - 1) % 26;
            letters.push(b'A' + rem as u8);
            n = (n - 1) / 26;
        }
        letters.reverse();
        format!("{}{}", String::from_utf8_lossy(&letters), self.row + 1)
    }
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

/// A whole query result, read before the workbook is touched.
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
    ) -> Result<Self, ErrorBody> {
        check_sheet_size(0, columns.len())?;
        let mut rows = Vec::new();
        scan(conn, query, columns, None, |cells| {
            check_sheet_size(rows.len() as u64 + 1, cells.len())?;
            rows.push(cells);
            Ok(())
        })?;
        Ok(Self {
            header: columns.iter().map(|c| c.name.clone()).collect(),
            rows,
        })
    }

    #[cfg(test)]
    pub(crate) fn new(header: Vec<String>, rows: Vec<Vec<Cell>>) -> Self {
        Self { header, rows }
    }

    fn has_dates(&self) -> bool {
        self.rows
            .iter()
            .flatten()
            .any(|c| matches!(c, Cell::Date(_) | Cell::Timestamp(_)))
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
    grid: &Grid,
) -> Result<Updated, ErrorBody> {
    Worksheet::new()
        .set_name(request.sheet)
        .map_err(|e| invalid_sheet(request.sheet, e))?;
    if request.start_cell.is_some() && request.mode != UpdateMode::WriteRange {
        return Err(invalid(
            "`start_cell` applies to mode \"write_range\" only".to_string(),
        ));
    }
    let (bytes, created_workbook) = match existing {
        Some(bytes) => (bytes.to_vec(), false),
        None => (blank_workbook(request.sheet)?, true),
    };
    let mut package = Package::read(&bytes)?;
    let found = package.find_sheet(request.sheet)?;
    let created_sheet = found.is_none();
    let (part, xml) = match (&found, request.mode) {
        (Some(part), UpdateMode::ReplaceSheet) => (part.clone(), BLANK_SHEET.to_string()),
        (Some(part), _) => (part.clone(), package.text(part)?),
        (None, _) => (package.add_sheet(request.sheet)?, BLANK_SHEET.to_string()),
    };
    let mut sheet = SheetXml::parse(&xml)?;
    let (origin, include_header) = placement(request, &sheet);
    let mut warnings = Vec::new();
    let styles = match grid.has_dates() {
        true => package.date_styles(&mut warnings)?,
        false => None,
    };
    let mut notes = Notes::default();
    let written = sheet.write(grid, origin, include_header, styles, &mut notes)?;
    warnings.extend(notes.messages());
    if sheet.overwrote_formulas > 0 {
        warnings.push(format!(
            "{} formula cell(s) in the range were replaced by values",
            sheet.overwrote_formulas
        ));
    }
    package.replace(&part, sheet.render());
    let content = package.write()?;
    Ok(Updated {
        content,
        summary: UpdateSummary {
            target_path: request.target_path.to_string(),
            sheet: request.sheet.to_string(),
            mode: request.mode,
            range: written,
            include_header,
            row_count: grid.rows.len() as u64,
            column_count: grid.header.len(),
            created_workbook,
            created_sheet,
            warnings,
        },
    })
}

/// Where the result starts and whether the header row is written.
fn placement(request: &UpdateRequest<'_>, sheet: &SheetXml) -> (CellRef, bool) {
    match request.mode {
        UpdateMode::ReplaceSheet => (
            CellRef { row: 0, col: 0 },
            request.include_header.unwrap_or(true),
        ),
        UpdateMode::WriteRange => (
            request.start_cell.unwrap_or(CellRef { row: 0, col: 0 }),
            request.include_header.unwrap_or(true),
        ),
        UpdateMode::AppendRows => match sheet.used() {
            Some((last_row, first_col)) => (
                CellRef {
                    row: last_row + 1,
                    col: first_col,
                },
                request.include_header.unwrap_or(false),
            ),
            None => (
                CellRef { row: 0, col: 0 },
                request.include_header.unwrap_or(true),
            ),
        },
    }
}

/// A new workbook with one empty sheet.
fn blank_workbook(sheet: &str) -> Result<Vec<u8>, ErrorBody> {
    let mut workbook = Workbook::new();
    workbook
        .add_worksheet()
        .set_name(sheet)
        .map_err(|e| invalid_sheet(sheet, e))?;
    workbook.save_to_buffer().map_err(xlsx_failed)
}

/// XML text escaping for element content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' | '\n' | '\r' => out.push(ch),
            // Not allowed in XML 1.0: OOXML's `_xHHHH_` escape.
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                out.push_str(&format!("_x{:04X}_", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

fn cell_xml(at: CellRef, value: &ExcelValue<'_>, styles: Option<DateStyles>) -> Option<String> {
    let r = at.name();
    Some(match value {
        ExcelValue::Empty => return None,
        ExcelValue::Bool(b) => format!(r#"<c r="{r}" t="b"><v>{}</v></c>"#, u8::from(*b)),
        ExcelValue::Number(n) => format!(r#"<c r="{r}"><v>{n}</v></c>"#),
        ExcelValue::Text(text) => format!(
            r#"<c r="{r}" t="inlineStr"><is><t xml:space="preserve">{}</t></is></c>"#,
            escape(text)
        ),
        ExcelValue::Date { serial, with_time } => match styles {
            Some(styles) => {
                let s = if *with_time {
                    styles.datetime
                } else {
                    styles.date
                };
                format!(r#"<c r="{r}" s="{s}"><v>{serial}</v></c>"#)
            }
            None => format!(r#"<c r="{r}"><v>{serial}</v></c>"#),
        },
    })
}

/// The `cellXfs` indices of the date and date-time formats.
#[derive(Debug, Clone, Copy)]
struct DateStyles {
    date: usize,
    datetime: usize,
}

/// One `<row>` of a sheet: its attributes (without `r` and `spans`) and its cells by column.
#[derive(Debug, Default)]
struct Row {
    attributes: String,
    cells: BTreeMap<u32, String>,
}

/// A worksheet split around `<sheetData>`, with the rows parsed.
#[derive(Debug)]
struct SheetXml {
    before: String,
    rows: BTreeMap<u32, Row>,
    after: String,
    overwrote_formulas: u64,
}

fn xml_error(e: impl std::fmt::Display) -> ErrorBody {
    broken(format!("malformed sheet XML: {e}"))
}

fn attribute(start: &BytesStart<'_>, name: &str) -> Result<Option<String>, ErrorBody> {
    for attr in start.attributes() {
        let attr = attr.map_err(xml_error)?;
        if attr.key.as_ref() == name {
            return Ok(Some(attr.value.into_owned()));
        }
    }
    Ok(None)
}

/// The attributes of `start` other than `skip`, re-serialized.
fn other_attributes(start: &BytesStart<'_>, skip: &[&str]) -> Result<String, ErrorBody> {
    let mut out = String::new();
    for attr in start.attributes() {
        let attr = attr.map_err(xml_error)?;
        if skip.contains(&attr.key.as_ref()) {
            continue;
        }
        let value = attr.value.replace('"', "&quot;");
        out.push_str(&format!(r#" {}="{value}""#, attr.key.as_ref()));
    }
    Ok(out)
}

impl SheetXml {
    fn parse(xml: &str) -> Result<Self, ErrorBody> {
        if let Some(at) = xml.find("<sheetData/>") {
            return Ok(Self {
                before: xml[..at].to_string(),
                rows: BTreeMap::new(),
                after: xml[at + "<sheetData/>".len()..].to_string(),
                overwrote_formulas: 0,
            });
        }
        let open = xml
            .find("<sheetData>")
            .ok_or_else(|| broken("the sheet has no <sheetData> element this tool can edit"))?;
        let inner_start = open + "<sheetData>".len();
        let inner_end = xml[inner_start..]
            .find("</sheetData>")
            .map(|at| inner_start + at)
            .ok_or_else(|| broken("unterminated <sheetData>"))?;
        Ok(Self {
            before: xml[..open].to_string(),
            rows: parse_rows(&xml[inner_start..inner_end])?,
            after: xml[inner_end + "</sheetData>".len()..].to_string(),
            overwrote_formulas: 0,
        })
    }

    /// The last used row and the first used column, if any cell exists.
    fn used(&self) -> Option<(u32, u32)> {
        let last = self
            .rows
            .iter()
            .rev()
            .find(|(_, row)| !row.cells.is_empty())
            .map(|(r, _)| *r)?;
        let first = self
            .rows
            .values()
            .filter_map(|row| row.cells.keys().next())
            .min()?;
        Some((last, *first))
    }

    fn set(&mut self, at: CellRef, xml: Option<String>) {
        let row = self.rows.entry(at.row).or_default();
        let old = match xml {
            Some(xml) => row.cells.insert(at.col, xml),
            None => row.cells.remove(&at.col),
        };
        if old.is_some_and(|old| old.contains("<f")) {
            self.overwrote_formulas += 1;
        }
    }

    /// Writes the grid from `origin`; returns the written range (`A1:C4`).
    fn write(
        &mut self,
        grid: &Grid,
        origin: CellRef,
        include_header: bool,
        styles: Option<DateStyles>,
        notes: &mut Notes,
    ) -> Result<Option<String>, ErrorBody> {
        let height = grid.rows.len() as u64 + u64::from(include_header);
        let width = grid.header.len() as u64;
        let last_row = u64::from(origin.row) + height;
        let last_col = u64::from(origin.col) + width;
        if height > 0 && (last_row > u64::from(MAX_ROW) + 1 || last_col > u64::from(MAX_COL) + 1) {
            return Err(invalid(format!(
                "{height} row(s) × {width} column(s) from {} do not fit in a sheet (XFD1048576)",
                origin.name()
            )));
        }
        let mut row = origin.row;
        if include_header {
            for (col, name) in (origin.col..).zip(&grid.header) {
                let at = CellRef { row, col };
                let text = ExcelValue::Text(name.as_str().into());
                self.set(at, cell_xml(at, &text, styles));
            }
            row += 1;
        }
        for cells in &grid.rows {
            for (col, cell) in (origin.col..).zip(cells) {
                let at = CellRef { row, col };
                let value = excel_value(cell, notes);
                self.set(at, cell_xml(at, &value, styles));
            }
            row += 1;
        }
        if height == 0 || width == 0 {
            return Ok(None);
        }
        let end = CellRef {
            row: row - 1,
            col: origin.col + grid.header.len() as u32 - 1,
        };
        Ok(Some(format!("{}:{}", origin.name(), end.name())))
    }

    /// The sheet XML with the rows written back and the dimension updated.
    fn render(&self) -> Vec<u8> {
        let mut data = String::from("<sheetData>");
        for (index, row) in &self.rows {
            if row.cells.is_empty() && row.attributes.is_empty() {
                continue;
            }
            data.push_str(&format!(r#"<row r="{}"{}>"#, index + 1, row.attributes));
            for cell in row.cells.values() {
                data.push_str(cell);
            }
            data.push_str("</row>");
        }
        data.push_str("</sheetData>");
        let before = set_dimension(&self.before, self.dimension());
        format!("{before}{data}{}", self.after).into_bytes()
    }

    fn dimension(&self) -> String {
        let rows: Vec<u32> = self
            .rows
            .iter()
            .filter(|(_, row)| !row.cells.is_empty())
            .map(|(r, _)| *r)
            .collect();
        let cols = self.rows.values().flat_map(|row| row.cells.keys().copied());
        let (min_col, max_col) = cols.fold((u32::MAX, 0), |(lo, hi), c| (lo.min(c), hi.max(c)));
        match (rows.first(), rows.last()) {
            (Some(first), Some(last)) => format!(
                "{}:{}",
                CellRef {
                    row: *first,
                    col: min_col
                }
                .name(),
                CellRef {
                    row: *last,
                    col: max_col
                }
                .name()
            ),
            _ => "A1".to_string(),
        }
    }
}

/// Replaces the `ref` of `<dimension>` when the sheet has one.
fn set_dimension(before: &str, dimension: String) -> String {
    let Some(start) = before.find("<dimension ") else {
        return before.to_string();
    };
    let Some(len) = before[start..].find("/>") else {
        return before.to_string();
    };
    format!(
        r#"{}<dimension ref="{dimension}"/>{}"#,
        &before[..start],
        &before[start + len + 2..]
    )
}

/// Column (0-based) of a cell reference like `AB12`.
fn column_of(reference: &str) -> Option<u32> {
    let letters: String = reference
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect();
    CellRef::parse_opt(&format!("{letters}1")).map(|c| c.col)
}

/// Parses the rows inside `<sheetData>`, keeping each cell's XML as written.
fn parse_rows(inner: &str) -> Result<BTreeMap<u32, Row>, ErrorBody> {
    let mut reader = quick_xml::Reader::from_str(inner);
    let mut rows = BTreeMap::new();
    let mut current: Option<(u32, Row)> = None;
    let mut next_row = 0u32;
    let mut next_col = 0u32;
    loop {
        let before = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
        let event = reader.read_event().map_err(xml_error)?;
        match event {
            Event::Start(ref e) | Event::Empty(ref e) if e.name().as_ref() == "row" => {
                let index = match attribute(e, "r")? {
                    Some(r) => r.parse::<u32>().map_err(xml_error)?.saturating_sub(1),
                    None => next_row,
                };
                next_row = index + 1;
                next_col = 0;
                let row = Row {
                    attributes: other_attributes(e, &["r", "spans"])?,
                    cells: BTreeMap::new(),
                };
                match event {
                    Event::Empty(_) => {
                        rows.insert(index, row);
                    }
                    _ => current = Some((index, row)),
                }
            }
            Event::End(ref e) if e.name().as_ref() == "row" => {
                if let Some((index, row)) = current.take() {
                    rows.insert(index, row);
                }
            }
            Event::Start(ref e) | Event::Empty(ref e) if e.name().as_ref() == "c" => {
                let reference = attribute(e, "r")?;
                let col = match reference.as_deref().and_then(column_of) {
                    Some(col) => col,
                    None => next_col,
                };
                next_col = col + 1;
                if matches!(event, Event::Start(_)) {
                    reader.read_to_end(e.name()).map_err(xml_error)?;
                }
                let after = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
                let raw = inner
                    .get(before..after)
                    .ok_or_else(|| xml_error("cell span"))?;
                let (index, row) = current
                    .as_mut()
                    .ok_or_else(|| xml_error("a cell outside a row"))?;
                let raw = match reference {
                    Some(_) => raw.to_string(),
                    None => with_reference(raw, CellRef { row: *index, col }),
                };
                row.cells.insert(col, raw);
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(rows)
}

/// Adds `r="…"` to a cell written without one (its position is implicit in the original).
fn with_reference(raw: &str, at: CellRef) -> String {
    format!(r#"<c r="{}"{}"#, at.name(), &raw[2..])
}

/// An xlsx package: its entries in order, with replacements and additions.
struct Package {
    archive: ZipArchive<Cursor<Vec<u8>>>,
    names: Vec<String>,
    replaced: BTreeMap<String, Vec<u8>>,
    added: Vec<(String, Vec<u8>)>,
    removed: Vec<String>,
}

fn zip_error(e: zip::result::ZipError) -> ErrorBody {
    broken(format!("not a valid xlsx package: {e}"))
}

/// The first `<tag …>` element's span in `xml` whose text contains `needle`.
fn element_containing(xml: &str, tag: &str, needle: &str) -> Option<(usize, usize)> {
    let open = format!("<{tag} ");
    let mut from = 0;
    while let Some(at) = xml[from..].find(&open) {
        let start = from + at;
        let end = start + xml[start..].find("/>")? + 2;
        if xml[start..end].contains(needle) {
            return Some((start, end));
        }
        from = end;
    }
    None
}

fn insert_before(xml: &str, marker: &str, snippet: &str) -> Result<String, ErrorBody> {
    let at = xml
        .rfind(marker)
        .ok_or_else(|| broken(format!("no {marker} in the package")))?;
    Ok(format!("{}{snippet}{}", &xml[..at], &xml[at..]))
}

/// The `<sheet>` entries of `workbook.xml`: (name, sheetId, relationship id).
fn sheets_of(workbook: &str) -> Result<Vec<(String, u32, String)>, ErrorBody> {
    let mut reader = quick_xml::Reader::from_str(workbook);
    let mut sheets = Vec::new();
    loop {
        match reader.read_event().map_err(xml_error)? {
            Event::Start(ref e) | Event::Empty(ref e) if e.local_name().as_ref() == "sheet" => {
                let mut name = String::new();
                let mut id = 0;
                let mut rel = String::new();
                for attr in e.attributes() {
                    let attr = attr.map_err(xml_error)?;
                    let value = quick_xml::escape::unescape(&attr.value)
                        .map_err(xml_error)?
                        .into_owned();
                    match attr.key.as_ref() {
                        "name" => name = value,
                        "sheetId" => id = value.parse().unwrap_or(0),
                        key if key.ends_with(":id") => rel = value,
                        _ => {}
                    }
                }
                sheets.push((name, id, rel));
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(sheets)
}

/// The `<Relationship>` entries of a rels part: (Id, Target, Type).
fn relationships_of(rels: &str) -> Result<Vec<(String, String, String)>, ErrorBody> {
    let mut reader = quick_xml::Reader::from_str(rels);
    let mut out = Vec::new();
    loop {
        match reader.read_event().map_err(xml_error)? {
            Event::Start(ref e) | Event::Empty(ref e)
                if e.local_name().as_ref() == "Relationship" =>
            {
                let get = |name: &str| attribute(e, name).map(Option::unwrap_or_default);
                out.push((get("Id")?, get("Target")?, get("Type")?));
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(out)
}

const WORKBOOK: &str = "xl/workbook.xml";
const WORKBOOK_RELS: &str = "xl/_rels/workbook.xml.rels";
const CONTENT_TYPES: &str = "[Content_Types].xml";
const STYLES: &str = "xl/styles.xml";
const CALC_CHAIN: &str = "xl/calcChain.xml";

impl Package {
    fn read(bytes: &[u8]) -> Result<Self, ErrorBody> {
        let archive = ZipArchive::new(Cursor::new(bytes.to_vec())).map_err(zip_error)?;
        let names = archive
            .file_names()
            .map(|n| n.map(|n| n.into_owned()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(zip_error)?;
        if !names.iter().any(|n| n == WORKBOOK) {
            return Err(broken("it has no xl/workbook.xml (is it an xlsx file?)"));
        }
        Ok(Self {
            archive,
            names,
            replaced: BTreeMap::new(),
            added: Vec::new(),
            removed: vec![CALC_CHAIN.to_string()],
        })
    }

    /// A part's current text (replaced or original).
    fn text(&mut self, name: &str) -> Result<String, ErrorBody> {
        if let Some(bytes) = self.replaced.get(name) {
            return Ok(String::from_utf8_lossy(bytes).into_owned());
        }
        if let Some((_, bytes)) = self.added.iter().find(|(n, _)| n == name) {
            return Ok(String::from_utf8_lossy(bytes).into_owned());
        }
        let mut file = self.archive.by_name(name).map_err(zip_error)?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|e| broken(format!("{name} is not UTF-8 XML: {e}")))?;
        Ok(text)
    }

    fn replace(&mut self, name: &str, content: Vec<u8>) {
        if let Some(entry) = self.added.iter_mut().find(|(n, _)| n == name) {
            entry.1 = content;
        } else {
            self.replaced.insert(name.to_string(), content);
        }
    }

    /// The part of the sheet called `sheet` (Excel compares names case-insensitively).
    fn find_sheet(&mut self, sheet: &str) -> Result<Option<String>, ErrorBody> {
        let sheets = sheets_of(&self.text(WORKBOOK)?)?;
        let Some((_, _, rel)) = sheets
            .iter()
            .find(|(name, _, _)| name.to_lowercase() == sheet.to_lowercase())
        else {
            return Ok(None);
        };
        let rels = relationships_of(&self.text(WORKBOOK_RELS)?)?;
        let target = rels
            .iter()
            .find(|(id, _, _)| id == rel)
            .map(|(_, target, _)| target.clone())
            .ok_or_else(|| broken(format!("sheet {sheet:?} has no part")))?;
        Ok(Some(match target.strip_prefix('/') {
            Some(absolute) => absolute.to_string(),
            None => format!("xl/{target}"),
        }))
    }

    /// Registers a new, empty sheet called `sheet`; returns its part name.
    fn add_sheet(&mut self, sheet: &str) -> Result<String, ErrorBody> {
        let workbook = self.text(WORKBOOK)?;
        let rels = self.text(WORKBOOK_RELS)?;
        let types = self.text(CONTENT_TYPES)?;
        let sheet_id = sheets_of(&workbook)?.iter().map(|s| s.1).max().unwrap_or(0) + 1;
        let ids: Vec<String> = relationships_of(&rels)?.into_iter().map(|r| r.0).collect();
        let rel = (1..)
            .map(|n| format!("rId{n}"))
            .find(|id| !ids.contains(id))
            .unwrap_or_default();
        let number = (1..)
            .find(|n| !self.names.contains(&format!("xl/worksheets/sheet{n}.xml")))
            .unwrap_or(1);
        let part = format!("xl/worksheets/sheet{number}.xml");
        let workbook = insert_before(
            &workbook,
            "</sheets>",
            &format!(
                r#"<sheet xmlns:r="{RELATIONSHIPS_NS}" name="{}" sheetId="{sheet_id}" r:id="{rel}"/>"#,
                escape(sheet)
            ),
        )?;
        let rels = insert_before(
            &rels,
            "</Relationships>",
            &format!(
                r#"<Relationship Id="{rel}" Type="{WORKSHEET_TYPE}" Target="worksheets/sheet{number}.xml"/>"#
            ),
        )?;
        let types = insert_before(
            &types,
            "</Types>",
            &format!(r#"<Override PartName="/{part}" ContentType="{WORKSHEET_CONTENT_TYPE}"/>"#),
        )?;
        self.replace(WORKBOOK, workbook.into_bytes());
        self.replace(WORKBOOK_RELS, rels.into_bytes());
        self.replace(CONTENT_TYPES, types.into_bytes());
        self.added
            .push((part.clone(), BLANK_SHEET.as_bytes().to_vec()));
        Ok(part)
    }

    /// Adds `yyyy-mm-dd` and `yyyy-mm-dd hh:mm:ss` cell formats to `styles.xml`; `None` (with a
    /// warning) when the styles cannot be edited, and dates are then plain serial numbers.
    fn date_styles(&mut self, warnings: &mut Vec<String>) -> Result<Option<DateStyles>, ErrorBody> {
        let patched = match self.names.iter().any(|n| n == STYLES) {
            true => add_date_formats(&self.text(STYLES)?),
            false => None,
        };
        match patched {
            Some((styles, indices)) => {
                self.replace(STYLES, styles.into_bytes());
                Ok(Some(indices))
            }
            None => {
                warnings.push("the workbook's styles could not be extended: dates were written as serial numbers without a date format".to_string());
                Ok(None)
            }
        }
    }

    /// The package with every change applied; untouched parts are copied as they are.
    fn write(mut self) -> Result<Vec<u8>, ErrorBody> {
        if self.names.iter().any(|n| n == CALC_CHAIN) {
            self.drop_calc_chain()?;
        }
        let failed = |e: zip::result::ZipError| {
            ErrorBody::new(
                ErrorCode::FileWriteFailed,
                format!("cannot write the workbook: {e}"),
            )
        };
        let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
        let mut out = ZipWriter::new(Cursor::new(Vec::new()));
        for (index, name) in self.names.iter().enumerate() {
            if self.removed.contains(name) {
                continue;
            }
            match self.replaced.get(name) {
                Some(content) => {
                    out.start_file(name.as_str(), options).map_err(failed)?;
                    out.write_all(content)
                        .map_err(|e| failed(zip::result::ZipError::Io(e)))?;
                }
                None => {
                    let file = self.archive.by_index_raw(index).map_err(zip_error)?;
                    out.raw_copy_file(file).map_err(failed)?;
                }
            }
        }
        for (name, content) in &self.added {
            out.start_file(name.as_str(), options).map_err(failed)?;
            out.write_all(content)
                .map_err(|e| failed(zip::result::ZipError::Io(e)))?;
        }
        Ok(out.finish().map_err(failed)?.into_inner())
    }

    /// Removes `calcChain.xml` and the references to it (Excel rebuilds it on load).
    fn drop_calc_chain(&mut self) -> Result<(), ErrorBody> {
        for (part, tag) in [(WORKBOOK_RELS, "Relationship"), (CONTENT_TYPES, "Override")] {
            let xml = self.text(part)?;
            if let Some((start, end)) = element_containing(&xml, tag, "calcChain") {
                let kept = format!("{}{}", &xml[..start], &xml[end..]);
                self.replace(part, kept.into_bytes());
            }
        }
        Ok(())
    }
}

/// `styles.xml` with two date formats and two cell formats using them, and their indices.
fn add_date_formats(styles: &str) -> Option<(String, DateStyles)> {
    let (styles, date_fmt, datetime_fmt) = add_number_formats(styles)?;
    let open = styles.find("<cellXfs")?;
    let close = open + styles[open..].find("</cellXfs>")?;
    let existing =
        styles[open..close].matches("<xf ").count() + styles[open..close].matches("<xf>").count();
    let xf = |id: u32| {
        format!(
            r#"<xf numFmtId="{id}" fontId="0" fillId="0" borderId="0" xfId="0" applyNumberFormat="1"/>"#
        )
    };
    let start_tag_end = open + styles[open..].find('>')?;
    let start_tag = set_count(&styles[open..=start_tag_end], existing + 2);
    let patched = format!(
        "{}{start_tag}{}{}{}{}",
        &styles[..open],
        &styles[start_tag_end + 1..close],
        xf(date_fmt),
        xf(datetime_fmt),
        &styles[close..]
    );
    Some((
        patched,
        DateStyles {
            date: existing,
            datetime: existing + 1,
        },
    ))
}

/// Adds the two custom number formats; returns the styles and their ids.
fn add_number_formats(styles: &str) -> Option<(String, u32, u32)> {
    let max_id = styles
        .match_indices("numFmtId=\"")
        .filter_map(|(at, m)| {
            let rest = &styles[at + m.len()..];
            rest[..rest.find('"')?].parse::<u32>().ok()
        })
        .max()
        .unwrap_or(0)
        .max(163);
    let (date, datetime) = (max_id + 1, max_id + 2);
    let formats = format!(
        r#"<numFmt numFmtId="{date}" formatCode="yyyy-mm-dd"/><numFmt numFmtId="{datetime}" formatCode="yyyy-mm-dd hh:mm:ss"/>"#
    );
    let patched = if let Some(open) = styles.find("<numFmts") {
        let tag_end = open + styles[open..].find('>')?;
        let self_closing = styles[..tag_end].ends_with('/');
        if self_closing {
            format!(
                r#"{}<numFmts count="2">{formats}</numFmts>{}"#,
                &styles[..open],
                &styles[tag_end + 1..]
            )
        } else {
            let close = open + styles[open..].find("</numFmts>")?;
            let count = styles[open..close].matches("<numFmt ").count() + 2;
            let start_tag = set_count(&styles[open..=tag_end], count);
            format!(
                "{}{start_tag}{}{formats}{}",
                &styles[..open],
                &styles[tag_end + 1..close],
                &styles[close..]
            )
        }
    } else {
        let root = styles.find("<styleSheet")?;
        let root_end = root + styles[root..].find('>')?;
        format!(
            r#"{}<numFmts count="2">{formats}</numFmts>{}"#,
            &styles[..=root_end],
            &styles[root_end + 1..]
        )
    };
    Some((patched, date, datetime))
}

/// A start tag with its `count` attribute set to `count`.
fn set_count(start_tag: &str, count: usize) -> String {
    match start_tag.find("count=\"") {
        Some(at) => {
            let value_start = at + "count=\"".len();
            let value_end = value_start + start_tag[value_start..].find('"').unwrap_or(0);
            format!(
                "{}{count}{}",
                &start_tag[..value_start],
                &start_tag[value_end..]
            )
        }
        None => start_tag.replacen('>', &format!(r#" count="{count}">"#), 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_references_round_trip() {
        for (text, row, col) in [
            ("A1", 0, 0),
            ("b3", 2, 1),
            ("$AA$10", 9, 26),
            ("XFD1048576", 1_048_575, 16_383),
        ] {
            let cell = CellRef::parse(text).unwrap();
            assert_eq!((cell.row, cell.col), (row, col), "{text}");
            assert_eq!(cell.name(), text.replace('$', "").to_uppercase());
        }
        for bad in ["", "A0", "1A", "XFE1", "A1048577", "AAAA1", "A1B"] {
            assert_eq!(
                CellRef::parse(bad).unwrap_err().code,
                ErrorCode::ValidationFailed,
                "{bad}"
            );
        }
    }

    #[test]
    fn rows_keep_other_cells_and_gain_references() {
        let xml = r#"<worksheet><dimension ref="A1:B2"/><sheetData><row r="1" spans="1:2" ht="20"><c r="A1" t="s"><v>0</v></c><c r="B1"><f>1+1</f><v>2</v></c></row><row><c><v>5</v></c><c t="b"><v>1</v></c></row></sheetData><pageMargins/></worksheet>"#;
        let mut sheet = SheetXml::parse(xml).unwrap();
        assert_eq!(sheet.used(), Some((1, 0)));
        assert_eq!(sheet.rows[&1].cells[&1], r#"<c r="B2" t="b"><v>1</v></c>"#);
        let grid = Grid::new(vec!["x".into()], vec![vec![Cell::Int(7)]]);
        let mut notes = Notes::default();
        let range = sheet
            .write(&grid, CellRef { row: 0, col: 1 }, false, None, &mut notes)
            .unwrap();
        assert_eq!(range.as_deref(), Some("B1:B1"));
        assert_eq!(sheet.overwrote_formulas, 1);
        let rendered = String::from_utf8(sheet.render()).unwrap();
        assert_eq!(
            rendered,
            r#"<worksheet><dimension ref="A1:B2"/><sheetData><row r="1" ht="20"><c r="A1" t="s"><v>0</v></c><c r="B1"><v>7</v></c></row><row r="2"><c r="A2"><v>5</v></c><c r="B2" t="b"><v>1</v></c></row></sheetData><pageMargins/></worksheet>"#
        );
    }

    #[test]
    fn styles_gain_date_formats() {
        let styles = r#"<styleSheet xmlns="x"><numFmts count="0"/><fonts count="1"><font/></fonts><cellXfs count="1"><xf numFmtId="0" fontId="0"/></cellXfs></styleSheet>"#;
        let (patched, indices) = add_date_formats(styles).unwrap();
        assert_eq!((indices.date, indices.datetime), (1, 2));
        assert!(
            patched
                .contains(r#"<numFmts count="2"><numFmt numFmtId="164" formatCode="yyyy-mm-dd"/>"#),
            "{patched}"
        );
        assert!(
            patched
                .contains(r#"<cellXfs count="3"><xf numFmtId="0" fontId="0"/><xf numFmtId="164" "#),
            "{patched}"
        );
        assert!(patched.contains(r#"<xf numFmtId="165" "#), "{patched}");
    }

    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(
            escape("a<b & \"c\"\u{1}"),
            "a&lt;b &amp; &quot;c&quot;_x0001_"
        );
    }
}
