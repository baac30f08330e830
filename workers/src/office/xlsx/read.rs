//! Reading spreadsheets (xlsx, xlsm, xls, ods) with calamine: sheets, typed ranges, maps.

use std::collections::BTreeMap;
use std::io::Cursor;

use atelier_messages::{ErrorBody, ErrorCode};
use calamine::{Data, DataRef, ExcelDateTime, Ods, Range, Reader, Sheets, Xls, Xlsx};
use serde::Serialize;
use serde_json::{Value, json};

use super::cellref::{CellRange, cell_name};
use crate::office::guard;
use crate::office::package::{CFB_MAGIC, Package, read_failed};

/// Rows per chunk in a sheet map.
pub(crate) const CHUNK_ROWS: u32 = 500;
/// Rows read when `range` is omitted.
pub(crate) const DEFAULT_READ_ROWS: u32 = 100;
/// The most cells one read returns.
pub(crate) const MAX_READ_CELLS: u64 = 1_000_000;

type Book = Sheets<Cursor<Vec<u8>>>;

/// A sheet's name and its values, rows of JSON cells.
pub(crate) type SheetValues = (String, Vec<Vec<Value>>);

/// The `mimetype` entry of an ODS package.
const ODS_MIMETYPE: &[u8] = b"application/vnd.oasis.opendocument.spreadsheet";

/// An opened workbook.
pub(crate) struct Workbook {
    book: Book,
}

fn calamine_failed(e: impl std::fmt::Display) -> ErrorBody {
    read_failed(format!("cannot read the spreadsheet: {e}"))
}

impl Workbook {
    /// Opens a workbook: a legacy binary workbook (an OLE file where `zip_based` is false) with
    /// calamine's xls reader after its own checks, anything else as a package, checked, then
    /// with the one reader its content calls for (ODS when its `mimetype` says so, else xlsx):
    /// never a reader the checks did not prepare for.
    pub(crate) fn open(bytes: Vec<u8>, zip_based: bool) -> Result<Workbook, ErrorBody> {
        if !zip_based && bytes.starts_with(&CFB_MAGIC) {
            super::xls::check(&bytes)?;
            let book = guard(|| Xls::new(Cursor::new(bytes)))?.map_err(calamine_failed)?;
            return Ok(Workbook {
                book: Sheets::Xls(book),
            });
        }
        let mut package = Package::open(bytes, "spreadsheet")?;
        let ods = package
            .bytes("mimetype")
            .is_ok_and(|m| m.starts_with(ODS_MIMETYPE));
        let bytes = Cursor::new(package.into_bytes());
        let book = if ods {
            Sheets::Ods(guard(|| Ods::new(bytes))?.map_err(calamine_failed)?)
        } else {
            Sheets::Xlsx(guard(|| Xlsx::new(bytes))?.map_err(calamine_failed)?)
        };
        Ok(Workbook { book })
    }

    pub(crate) fn sheet_names(&self) -> Vec<String> {
        self.book.sheet_names()
    }

    /// The sheet called `name` (exact, then case-insensitive), or the first sheet.
    fn resolve_sheet(&self, name: Option<&str>) -> Result<String, ErrorBody> {
        let names = self.sheet_names();
        let Some(wanted) = name else {
            return names
                .into_iter()
                .next()
                .ok_or_else(|| read_failed("the workbook has no sheets"));
        };
        names
            .iter()
            .find(|n| n.as_str() == wanted)
            .or_else(|| names.iter().find(|n| n.eq_ignore_ascii_case(wanted)))
            .cloned()
            .ok_or_else(|| {
                ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!("no sheet {wanted:?}; the sheets are: {}", names.join(", ")),
                )
            })
    }

    fn range(&mut self, sheet: &str) -> Result<Range<Data>, ErrorBody> {
        guard(|| self.book.worksheet_range(sheet))?.map_err(calamine_failed)
    }

    /// A sheet's formulas (absolute positions, without the leading `=`).
    pub(crate) fn formulas(&mut self, sheet: &str) -> Result<Range<String>, ErrorBody> {
        guard(|| self.book.worksheet_formula(sheet))?.map_err(calamine_failed)
    }

    fn merged(&mut self, sheet: &str) -> Vec<CellRange> {
        let Sheets::Xlsx(xlsx) = &mut self.book else {
            return Vec::new();
        };
        guard(|| xlsx.merge_cells_by_sheet_name(sheet))
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
            .into_iter()
            .map(|d| CellRange {
                start: d.start,
                end: d.end,
            })
            .collect()
    }

    /// Every sheet's values as JSON cells ([`cell_json`]), in order, each from its used
    /// range's first row and column: what the table tools read as a sheet's table.
    pub(crate) fn sheet_rows(&mut self) -> Result<Vec<SheetValues>, ErrorBody> {
        self.sheet_names()
            .into_iter()
            .map(|name| {
                let range = self.range(&name)?;
                let rows = range
                    .rows()
                    .map(|row| row.iter().map(cell_json).collect())
                    .collect();
                Ok((name, rows))
            })
            .collect()
    }

    /// A sheet's values (absolute positions), for a review.
    pub(crate) fn values(&mut self, sheet: &str) -> Result<Range<Data>, ErrorBody> {
        self.range(sheet)
    }

    /// Sheet summaries for `get_file_info`.
    pub(crate) fn sheets_info(&mut self) -> Result<Vec<SheetInfo>, ErrorBody> {
        let mut out = Vec::new();
        for (index, name) in self.sheet_names().into_iter().enumerate() {
            let range = self.range(&name)?;
            out.push(SheetInfo::of(index, name, &range));
        }
        Ok(out)
    }

    /// Sheet maps for `get_file_map`: extent, header guess, row chunks.
    pub(crate) fn map(&mut self) -> Result<Vec<SheetMap>, ErrorBody> {
        let mut out = Vec::new();
        for (index, name) in self.sheet_names().into_iter().enumerate() {
            let range = self.range(&name)?;
            let merged = self.merged(&name);
            out.push(SheetMap::of(index, name, &range, merged));
        }
        Ok(out)
    }

    /// `read_file` on a sheet: typed values of `range` (default: the first rows of the used range).
    pub(crate) fn read(
        &mut self,
        sheet: Option<&str>,
        range: Option<&str>,
    ) -> Result<RangeRead, ErrorBody> {
        let sheet = self.resolve_sheet(sheet)?;
        if let (Sheets::Xlsx(_), Some(text)) = (&self.book, range) {
            let wanted = checked_range(text)?;
            return self.read_streaming(sheet, wanted);
        }
        let data = self.range(&sheet)?;
        let formulas = self.formulas(&sheet)?;
        let used = union(used_range(&data), used_range(&formulas));
        let wanted = match range {
            Some(text) => checked_range(text)?,
            None => default_window(used),
        };
        let cells = Cells {
            rows: match used {
                Some(used) => values_in(&data, &wanted, used.end.0),
                None => Vec::new(),
            },
            formulas: formulas_in(&formulas, &wanted),
            has_more: used.is_some_and(|u| u.end.0 > wanted.end.0),
        };
        let merged = self.merged(&sheet);
        Ok(RangeRead::new(
            sheet,
            wanted,
            used,
            cells,
            &merged,
            self.sheet_names(),
        ))
    }
}

/// A range no larger than [`MAX_READ_CELLS`].
fn checked_range(text: &str) -> Result<CellRange, ErrorBody> {
    let wanted = CellRange::parse(text)?;
    if wanted.cells() > MAX_READ_CELLS {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "range {wanted} has {} cells; read at most {MAX_READ_CELLS} per call (see get_file_map for chunks)",
                wanted.cells()
            ),
        ));
    }
    Ok(wanted)
}

impl Workbook {
    /// An xlsx range in one streaming pass (values and formulas together), stopping at the
    /// range's last row.
    fn read_streaming(&mut self, sheet: String, wanted: CellRange) -> Result<RangeRead, ErrorBody> {
        let merged = self.merged(&sheet);
        let names = self.sheet_names();
        let Sheets::Xlsx(xlsx) = &mut self.book else {
            return Err(read_failed("not an xlsx workbook"));
        };
        let width = wanted.columns() as usize;
        let mut rows: Vec<Vec<Value>> = Vec::new();
        let mut formulas = BTreeMap::new();
        let mut seen: Option<CellRange> = None;
        let mut has_more = false;
        let declared = guard(|| -> Result<Option<CellRange>, calamine::XlsxError> {
            let mut reader = xlsx.worksheet_cells_reader(&sheet)?;
            let dims = reader.dimensions();
            while let Some(cell) = reader.next_cell_with_formula()? {
                let (row, col) = cell.pos;
                if row > wanted.end.0 {
                    has_more = true;
                    break;
                }
                if matches!(cell.value, DataRef::Empty) && cell.formula.is_none() {
                    continue;
                }
                seen = union(
                    seen,
                    Some(CellRange {
                        start: (row, col),
                        end: (row, col),
                    }),
                );
                if !contains(&wanted, row, col) {
                    continue;
                }
                let index = (row - wanted.start.0) as usize;
                if rows.len() <= index {
                    rows.resize_with(index + 1, || vec![Value::Null; width]);
                }
                rows[index][(col - wanted.start.1) as usize] = data_ref_json(&cell.value);
                if let Some(formula) = cell.formula.filter(|f| !f.is_empty()) {
                    formulas.insert(cell_name(row, col), format!("={formula}"));
                }
            }
            Ok((dims.len() > 1).then_some(CellRange {
                start: dims.start,
                end: dims.end,
            }))
        })?
        .map_err(calamine_failed)?;
        let used = if has_more { declared.or(seen) } else { seen };
        let cells = Cells {
            rows,
            formulas,
            has_more,
        };
        Ok(RangeRead::new(sheet, wanted, used, cells, &merged, names))
    }
}

fn data_ref_json(data: &DataRef<'_>) -> Value {
    match data {
        DataRef::SharedString(s) => Value::String((*s).to_string()),
        DataRef::Int(n) => json!(n),
        DataRef::Float(f) => number_json(*f),
        DataRef::String(s) => Value::String(s.clone()),
        DataRef::Bool(b) => Value::Bool(*b),
        DataRef::DateTime(dt) => Value::String(iso_datetime(dt)),
        DataRef::DateTimeIso(s) | DataRef::DurationIso(s) => Value::String(s.clone()),
        DataRef::Error(e) => Value::String(e.to_string()),
        DataRef::Empty => Value::Null,
    }
}

fn formulas_in(formulas: &Range<String>, wanted: &CellRange) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (row, col, formula) in formulas.used_cells() {
        let (row, col) = offset(formulas.start(), row, col);
        if !formula.is_empty() && contains(wanted, row, col) {
            out.insert(cell_name(row, col), format!("={formula}"));
        }
    }
    out
}

fn union(a: Option<CellRange>, b: Option<CellRange>) -> Option<CellRange> {
    match (a, b) {
        (Some(a), Some(b)) => Some(CellRange {
            start: (a.start.0.min(b.start.0), a.start.1.min(b.start.1)),
            end: (a.end.0.max(b.end.0), a.end.1.max(b.end.1)),
        }),
        (a, b) => a.or(b),
    }
}

fn offset(start: Option<(u32, u32)>, row: usize, col: usize) -> (u32, u32) {
    let (r0, c0) = start.unwrap_or((0, 0));
    (r0 + row as u32, c0 + col as u32)
}

fn contains(range: &CellRange, row: u32, col: u32) -> bool {
    row >= range.start.0 && row <= range.end.0 && col >= range.start.1 && col <= range.end.1
}

/// The used range of a sheet's data, if any cell is set.
pub(crate) fn used_range<T: calamine::CellType>(data: &Range<T>) -> Option<CellRange> {
    Some(CellRange {
        start: data.start()?,
        end: data.end()?,
    })
}

fn default_window(used: Option<CellRange>) -> CellRange {
    let used = used.unwrap_or(CellRange {
        start: (0, 0),
        end: (0, 0),
    });
    CellRange {
        start: (0, 0),
        end: (used.end.0.min(DEFAULT_READ_ROWS - 1), used.end.1),
    }
}

fn values_in(data: &Range<Data>, wanted: &CellRange, last_row: u32) -> Vec<Vec<Value>> {
    let last_row = last_row.min(wanted.end.0);
    (wanted.start.0..=last_row.max(wanted.start.0))
        .filter(|row| *row <= last_row)
        .map(|row| {
            (wanted.start.1..=wanted.end.1)
                .map(|col| data.get_value((row, col)).map_or(Value::Null, cell_json))
                .collect()
        })
        .collect()
}

/// A cell value as JSON: numbers stay numbers (integral floats as integers), dates ISO 8601.
pub(crate) fn cell_json(data: &Data) -> Value {
    match data {
        Data::Int(n) => json!(n),
        Data::Float(f) => number_json(*f),
        Data::String(s) => json!(s),
        Data::Bool(b) => json!(b),
        Data::DateTime(dt) => json!(iso_datetime(dt)),
        Data::DateTimeIso(s) | Data::DurationIso(s) => json!(s),
        Data::Error(e) => json!(e.to_string()),
        Data::Empty => Value::Null,
    }
}

/// A number as JSON, integral values within 2^53 as integers.
pub(crate) fn number_json(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        json!(f as i64)
    } else {
        json!(f)
    }
}

/// `2026-01-05`, `2026-01-05T13:42:17`, or `13:42:17` for a time of day.
pub(crate) fn iso_datetime(dt: &ExcelDateTime) -> String {
    let (y, mo, d, h, mi, s, _) = dt.to_ymd_hms_milli();
    let value = dt.as_f64();
    if (0.0..1.0).contains(&value) {
        return format!("{h:02}:{mi:02}:{s:02}");
    }
    if h == 0 && mi == 0 && s == 0 {
        format!("{y:04}-{mo:02}-{d:02}")
    } else {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}")
    }
}

/// Whether a value is text (for header detection).
fn is_text(data: &Data) -> bool {
    matches!(data, Data::String(_))
}

/// The row that looks like a header: among the first 30 rows, the first whose cells are all
/// text and as many as the widest row's (metadata rows above it are usually narrower).
fn guess_header(data: &Range<Data>) -> Option<u32> {
    let start = data.start()?;
    let rows: Vec<(u32, usize, bool)> = data
        .rows()
        .take(30)
        .enumerate()
        .map(|(i, cells)| {
            let filled: Vec<&Data> = cells.iter().filter(|c| !matches!(c, Data::Empty)).collect();
            (
                start.0 + i as u32,
                filled.len(),
                filled.iter().all(|c| is_text(c)),
            )
        })
        .collect();
    let widest = rows.iter().map(|(_, n, _)| *n).max()?;
    rows.iter()
        .find(|(_, n, all_text)| *n == widest && *all_text && widest > 0)
        .or_else(|| rows.iter().find(|(_, n, _)| *n > 0))
        .map(|(row, _, _)| *row)
}

/// A sheet in `get_file_info`.
#[derive(Debug, Serialize)]
pub(crate) struct SheetInfo {
    index: usize,
    name: String,
    /// The used range, e.g. `A1:D13` (absent when the sheet is empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<String>,
    rows: u32,
    columns: u32,
}

impl SheetInfo {
    fn of(index: usize, name: String, data: &Range<Data>) -> SheetInfo {
        let used = used_range(data);
        SheetInfo {
            index,
            name,
            dimensions: used.map(|u| u.to_string()),
            rows: used.map_or(0, |u| u.end.0 + 1),
            columns: used.map_or(0, |u| u.end.1 + 1),
        }
    }
}

/// A sheet in `get_file_map`.
#[derive(Debug, Serialize)]
pub(crate) struct SheetMap {
    #[serde(flatten)]
    info: SheetInfo,
    /// 1-based row that looks like the header (metadata rows may sit above it).
    #[serde(skip_serializing_if = "Option::is_none")]
    header_row: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    header: Option<Vec<Value>>,
    merged: Vec<String>,
    chunks: Vec<Value>,
}

impl SheetMap {
    fn of(index: usize, name: String, data: &Range<Data>, merged: Vec<CellRange>) -> SheetMap {
        let info = SheetInfo::of(index, name, data);
        let header_row = guess_header(data);
        let header = header_row.and_then(|row| {
            let used = used_range(data)?;
            let window = CellRange {
                start: (row, 0),
                end: (row, used.end.1),
            };
            values_in(data, &window, row).into_iter().next()
        });
        let chunks = used_range(data).map_or_else(Vec::new, |used| chunks_of(&used));
        SheetMap {
            info,
            header_row: header_row.map(|r| r + 1),
            header,
            merged: merged.iter().map(CellRange::to_string).collect(),
            chunks,
        }
    }
}

fn chunks_of(used: &CellRange) -> Vec<Value> {
    let last = used.end.0;
    (0..=last / CHUNK_ROWS)
        .map(|i| {
            let start = i * CHUNK_ROWS;
            let end = (start + CHUNK_ROWS - 1).min(last);
            let range = CellRange { start: (start, 0), end: (end, used.end.1) };
            json!({"index": i, "range": range.to_string(), "rows": format!("{}-{}", start + 1, end + 1)})
        })
        .collect()
}

impl RangeRead {
    /// The response as JSON, moving the values (a million cells are not copied).
    pub(crate) fn into_value(self) -> Value {
        let mut map = serde_json::Map::new();
        map.insert("sheet".into(), Value::String(self.sheet));
        map.insert("range".into(), Value::String(self.range));
        if let Some(used) = self.used_range {
            map.insert("used_range".into(), Value::String(used));
        }
        map.insert("row_count".into(), json!(self.row_count));
        map.insert("column_count".into(), json!(self.column_count));
        map.insert(
            "rows".into(),
            Value::Array(self.rows.into_iter().map(Value::Array).collect()),
        );
        map.insert("formulas".into(), json!(self.formulas));
        map.insert("merged".into(), json!(self.merged));
        map.insert("has_more".into(), Value::Bool(self.has_more));
        map.insert("sheets".into(), json!(self.sheets));
        Value::Object(map)
    }
}

/// The `read_file` response for a sheet range.
#[derive(Debug)]
pub(crate) struct RangeRead {
    sheet: String,
    range: String,
    used_range: Option<String>,
    row_count: usize,
    column_count: u32,
    /// Row-major values of `range` (rows past the used range are omitted).
    rows: Vec<Vec<Value>>,
    /// Formulas by cell (`"B5": "=SUM(B2:B4)"`); `rows` holds their cached values.
    formulas: BTreeMap<String, String>,
    /// Merged regions that intersect `range`.
    merged: Vec<String>,
    /// Whether the used range continues below `range`.
    has_more: bool,
    sheets: Vec<String>,
}

/// What was read of a range: its values, formulas, and whether the sheet goes on below it.
struct Cells {
    rows: Vec<Vec<Value>>,
    formulas: BTreeMap<String, String>,
    has_more: bool,
}

impl RangeRead {
    /// The response for `wanted`, with the merged regions that intersect it.
    fn new(
        sheet: String,
        wanted: CellRange,
        used: Option<CellRange>,
        cells: Cells,
        merged: &[CellRange],
        sheets: Vec<String>,
    ) -> RangeRead {
        RangeRead {
            sheet,
            range: wanted.to_string(),
            used_range: used.map(|u| u.to_string()),
            row_count: cells.rows.len(),
            column_count: wanted.columns(),
            rows: cells.rows,
            formulas: cells.formulas,
            merged: merged
                .iter()
                .filter(|m| m.intersects(&wanted))
                .map(|m| m.to_string())
                .collect(),
            has_more: cells.has_more,
            sheets,
        }
    }
}
