//! A workbench file's preview in the page: one bounded page of what the read-only tools show
//! of it, run on the worker pools over the published or draft files, with their codes.
//!
//! `GET /api/workbenches/{name}/preview/{path}?view=&sheet=&offset=` answers by the file's kind:
//! a CSV/TSV as a grid of its rows (`table_read_rows`, header named), a workbook sheet as a
//! grid of its used range (`read_file` with a range; column letters, row numbers and the
//! sheet tabs), a docx as its blocks (paragraphs and tables), a pptx as its slides, a PDF as its
//! pages' text, a text file as its lines (markdown rendered by the page). `offset` pages on
//! (`next_offset` while there is more); a file no tool reads is `kind: "none"`, to download. A
//! crafted or broken file is refused as its read is (`FILE_TOO_COMPLEX`, `FILE_READ_FAILED`).

use atelier_messages::path::kind_of;
use atelier_messages::store::Listing;
use atelier_messages::tool::ToolName;
use atelier_messages::{ErrorBody, ErrorCode};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::requests::{Shared, coded, view_named};

/// Rows of a grid a page shows.
const GRID_ROWS: u64 = 50;
/// Columns of a sheet a page shows (a wider sheet is cut, and says so).
const GRID_COLUMNS: u64 = 40;
/// Blocks of a document a page shows.
const BLOCKS: u64 = 100;
/// Slides a page shows.
const SLIDES: u64 = 20;
/// PDF pages a page shows.
const PDF_PAGES: u64 = 5;
/// Lines of a text file a page shows.
const TEXT_LINES: u64 = 200;

/// `?view=published|draft|current&sheet=NAME&offset=N`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct PreviewQuery {
    #[serde(default)]
    view: Option<String>,
    #[serde(default)]
    sheet: Option<String>,
    #[serde(default)]
    offset: Option<u64>,
}

/// One page of a file's preview.
#[derive(Debug, Serialize)]
struct Preview {
    path: String,
    /// `grid`, `document`, `slides`, `pages`, `text` or `none`.
    kind: &'static str,
    /// Where this page starts: a row, block, slide, page or line, counted from 0.
    offset: u64,
    /// Where the next page starts, while there is more.
    next_offset: Option<u64>,
    /// How many rows, blocks, slides, pages or lines there are, when the tool says.
    total: Option<u64>,
    /// The kind's own fields.
    #[serde(flatten)]
    content: Value,
}

/// `GET /api/workbenches/{name}/preview/{path}`.
pub(super) async fn preview(
    State(state): State<Shared>,
    Path((name, path)): Path<(String, String)>,
    Query(query): Query<PreviewQuery>,
) -> Response {
    let view = match view_named(query.view.as_deref()) {
        Ok(view) => view,
        Err(error) => return coded(error),
    };
    let listing = match crate::read_tool::files(&state.nats, &name, view).await {
        Ok(listing) => listing,
        Err(error) => return coded(error),
    };
    if !listing.files.iter().any(|file| file.path == path) {
        return coded(ErrorBody::new(
            ErrorCode::NotFound,
            format!(
                "{name} has no file {path} in its {} files",
                query.view.as_deref().unwrap_or("published")
            ),
        ));
    }
    let reader = Reader {
        state: &state,
        listing: &listing,
        path: &path,
    };
    let offset = query.offset.unwrap_or(0);
    let page = match kind_of(&path) {
        "csv" => reader.table(offset).await,
        "xlsx" => reader.sheet(query.sheet.as_deref(), offset).await,
        "docx" => reader.listed("blocks", BLOCKS, offset).await,
        "pptx" => reader.listed("slides", SLIDES, offset).await,
        "pdf" => reader.pdf(offset).await,
        "text" => reader.text(offset).await,
        _ => Ok(nothing(&path)),
    };
    match page {
        Ok(page) => Json(page).into_response(),
        Err(error) => coded(error),
    }
}

/// A binary file: nothing to show but its download.
fn nothing(path: &str) -> Preview {
    Preview {
        path: path.to_string(),
        kind: "none",
        offset: 0,
        next_offset: None,
        total: None,
        content: json!({"reason": "no preview for this kind of file: download it"}),
    }
}

/// One file of one view, read through the pools.
struct Reader<'a> {
    state: &'a Shared,
    listing: &'a Listing,
    path: &'a str,
}

impl Reader<'_> {
    async fn call(&self, tool: ToolName, mut args: Value) -> Result<Value, ErrorBody> {
        args["path"] = json!(self.path);
        let call_id = format!("preview-{}", uuid::Uuid::now_v7().simple());
        crate::read_tool::run_over(&self.state.nats, self.listing, tool, args, call_id).await
    }

    fn page(&self, kind: &'static str, offset: u64, shown: u64, total: Option<u64>) -> Preview {
        let end = offset + shown;
        Preview {
            path: self.path.to_string(),
            kind,
            offset,
            next_offset: total.filter(|total| end < *total).map(|_| end),
            total,
            content: Value::Null,
        }
    }

    /// A CSV/TSV's data rows, its header as the columns.
    async fn table(&self, offset: u64) -> Result<Preview, ErrorBody> {
        let args = json!({"row_start": offset + 1, "row_count": GRID_ROWS});
        let read = self.call(ToolName::TableReadRows, args).await?;
        let rows = array(&read, "rows");
        let total = read.get("total_rows").and_then(Value::as_u64);
        let mut page = self.page("grid", offset, rows.len() as u64, total);
        if total.is_none() && read.get("has_more").and_then(Value::as_bool) == Some(true) {
            page.next_offset = Some(offset + rows.len() as u64);
        }
        page.content = json!({
            "header": true,
            "columns": read.get("columns").cloned().unwrap_or(json!([])),
            "first_row": offset + 1,
            "rows": rows,
        });
        Ok(page)
    }

    /// A page of a workbook sheet's used range (the first sheet unless `sheet` names one).
    async fn sheet(&self, sheet: Option<&str>, offset: u64) -> Result<Preview, ErrorBody> {
        let mut args = json!({"range": "A1"});
        if let Some(sheet) = sheet {
            args["sheet"] = json!(sheet);
        }
        let corner = self.call(ToolName::ReadFile, args.clone()).await?;
        let sheets = corner.get("sheets").cloned().unwrap_or(json!([]));
        let name = corner.get("sheet").cloned().unwrap_or(Value::Null);
        let used = corner
            .get("used_range")
            .and_then(Value::as_str)
            .and_then(UsedRange::parse);
        let Some(used) = used else {
            let mut page = self.page("grid", offset, 0, Some(0));
            page.content = json!({"header": false, "sheets": sheets, "sheet": name,
                "columns": [], "first_row": 1, "rows": []});
            return Ok(page);
        };
        let window = used.window(offset);
        let rows = match &window {
            Some(window) => {
                args["sheet"] = name.clone();
                args["range"] = json!(window.range);
                array(&self.call(ToolName::ReadFile, args).await?, "rows")
            }
            None => Vec::new(),
        };
        let shown = window.as_ref().map_or(0, |window| window.rows);
        let mut page = self.page("grid", offset, shown, Some(used.rows()));
        page.content = json!({
            "header": false,
            "sheets": sheets,
            "sheet": name,
            "used_range": used.text,
            "columns": used.column_names(),
            "columns_cut": used.columns() > GRID_COLUMNS,
            "first_row": used.first_row + offset,
            "rows": rows,
        });
        Ok(page)
    }

    /// A page of the array `key` of the whole file's read (a docx's blocks, a pptx's slides).
    async fn listed(&self, key: &str, per_page: u64, offset: u64) -> Result<Preview, ErrorBody> {
        let read = self.call(ToolName::ReadFile, json!({})).await?;
        let mut all = array(&read, key);
        if all.is_empty()
            && let Some(one) = read.get("slide")
        {
            all.push(one.clone());
        }
        let total = all.len() as u64;
        let shown: Vec<Value> = all
            .into_iter()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .take(usize::try_from(per_page).unwrap_or(usize::MAX))
            .collect();
        let kind = if key == "blocks" {
            "document"
        } else {
            "slides"
        };
        let mut page = self.page(kind, offset, shown.len() as u64, Some(total));
        page.content = json!({ key: shown });
        Ok(page)
    }

    /// A page of a PDF's pages' text: its first page read says how many there are, then the
    /// rest of the page's range is read.
    async fn pdf(&self, offset: u64) -> Result<Preview, ErrorBody> {
        let first = offset + 1;
        let mut read = self
            .call(ToolName::ReadFile, json!({ "pages": first.to_string() }))
            .await?;
        let total = read.get("page_count").and_then(Value::as_u64);
        let last = total.map_or(first, |total| total.min(offset + PDF_PAGES));
        if last > first {
            let pages = format!("{first}-{last}");
            read = self
                .call(ToolName::ReadFile, json!({ "pages": pages }))
                .await?;
        }
        let shown = array(&read, "pages");
        let mut page = self.page("pages", offset, shown.len() as u64, total);
        page.content = json!({ "pages": shown });
        Ok(page)
    }

    /// A page of a text file's lines; markdown says the page may render it.
    async fn text(&self, offset: u64) -> Result<Preview, ErrorBody> {
        let args = json!({"line_start": offset + 1, "line_count": TEXT_LINES});
        let read = self.call(ToolName::ReadFile, args).await?;
        let content = read.get("content").and_then(Value::as_str).unwrap_or("");
        let lines: Vec<&str> = match content.is_empty() {
            true => Vec::new(),
            false => content.split('\n').collect(),
        };
        let total = read.get("total_lines").and_then(Value::as_u64);
        let mut page = self.page("text", offset, lines.len() as u64, total);
        let markdown = self.path.to_ascii_lowercase().ends_with(".md");
        page.content = json!({"first_line": offset + 1, "lines": lines, "markdown": markdown});
        Ok(page)
    }
}

/// The array `key` of a tool's result (empty when absent).
fn array(read: &Value, key: &str) -> Vec<Value> {
    read.get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A sheet's used range (`B3:H180`, or one cell), 1-based.
#[derive(Debug, PartialEq)]
struct UsedRange {
    text: String,
    first_column: u64,
    first_row: u64,
    last_column: u64,
    last_row: u64,
}

/// The cells a page of a sheet reads: its range (`B53:H102`) and how many rows that is.
#[derive(Debug, PartialEq)]
struct Window {
    range: String,
    rows: u64,
}

impl UsedRange {
    fn parse(text: &str) -> Option<UsedRange> {
        let (start, end) = text.split_once(':').unwrap_or((text, text));
        let (first_column, first_row) = cell(start)?;
        let (last_column, last_row) = cell(end)?;
        (first_column <= last_column && first_row <= last_row).then(|| UsedRange {
            text: text.to_string(),
            first_column,
            first_row,
            last_column,
            last_row,
        })
    }

    fn rows(&self) -> u64 {
        self.last_row - self.first_row + 1
    }

    fn columns(&self) -> u64 {
        self.last_column - self.first_column + 1
    }

    /// The letters of the columns a page shows.
    fn column_names(&self) -> Vec<String> {
        let last = self.last_column.min(self.first_column + GRID_COLUMNS - 1);
        (self.first_column..=last).map(column_name).collect()
    }

    /// The page of [`GRID_ROWS`] rows from `offset` rows below the first, its columns cut at
    /// [`GRID_COLUMNS`]; `None` past the last row.
    fn window(&self, offset: u64) -> Option<Window> {
        let first = self.first_row.checked_add(offset)?;
        if first > self.last_row {
            return None;
        }
        let last = self.last_row.min(first + GRID_ROWS - 1);
        let last_column = self.last_column.min(self.first_column + GRID_COLUMNS - 1);
        Some(Window {
            range: format!(
                "{}{first}:{}{last}",
                column_name(self.first_column),
                column_name(last_column)
            ),
            rows: last - first + 1,
        })
    }
}

/// A cell reference's column and row numbers (`AA10` → 27, 10).
fn cell(reference: &str) -> Option<(u64, u64)> {
    let reference = reference.trim().replace('$', "");
    let split = reference.find(|c: char| c.is_ascii_digit())?;
    let (letters, digits) = reference.split_at(split);
    if letters.is_empty() || !letters.chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    let column = letters.chars().try_fold(0_u64, |n, c| {
        n.checked_mul(26)?
            .checked_add(u64::from(c.to_ascii_uppercase() as u8 - b'A' + 1))
    })?;
    let row = digits.parse::<u64>().ok().filter(|row| *row > 0)?;
    Some((column, row))
}

/// The letters of a 1-based column number (`27` → `AA`).
fn column_name(mut column: u64) -> String {
    let mut letters = Vec::new();
    while column > 0 {
        let rest = (column - 1) % 26;
        letters.push(char::from(b'A' + rest as u8));
        column = (column - 1) / 26;
    }
    letters.iter().rev().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sheets_pages_cover_its_used_range_in_windows() {
        let used = UsedRange::parse("B3:H120").expect("a range");
        assert_eq!((used.rows(), used.columns()), (118, 7));
        assert_eq!(used.column_names(), ["B", "C", "D", "E", "F", "G", "H"]);
        assert_eq!(
            used.window(0),
            Some(Window {
                range: "B3:H52".into(),
                rows: 50
            })
        );
        assert_eq!(
            used.window(100),
            Some(Window {
                range: "B103:H120".into(),
                rows: 18
            })
        );
        assert_eq!(used.window(118), None);
        let one = UsedRange::parse("C7").expect("one cell");
        assert_eq!(
            one.window(0),
            Some(Window {
                range: "C7:C7".into(),
                rows: 1
            })
        );
    }

    #[test]
    fn a_wide_sheet_is_cut_at_the_pages_columns() {
        let used = UsedRange::parse("A1:ZZ10").expect("a range");
        assert_eq!(used.columns(), 702);
        assert_eq!(used.column_names().len(), GRID_COLUMNS as usize);
        assert_eq!(used.column_names().last().map(String::as_str), Some("AN"));
        assert_eq!(
            used.window(0).map(|window| window.range),
            Some("A1:AN10".into())
        );
    }

    #[test]
    fn cell_references_read_and_write_both_ways() {
        assert_eq!(cell("AA10"), Some((27, 10)));
        assert_eq!(cell("$b$2"), Some((2, 2)));
        for bad in ["", "10", "A0", "A", "1A", "A-1", "ÄA1"] {
            assert_eq!(cell(bad), None, "{bad}");
        }
        assert_eq!(column_name(1), "A");
        assert_eq!(column_name(26), "Z");
        assert_eq!(column_name(27), "AA");
        assert_eq!(column_name(702), "ZZ");
        assert_eq!(column_name(703), "AAA");
        assert_eq!(UsedRange::parse("H3:B1"), None);
    }
}
