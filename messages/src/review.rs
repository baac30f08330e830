//! The content review of a draft: per changed file, what changed inside it.
//!
//! `atelier.workshop.review` (coordinator) answers a [`Review`] of the whole draft; it asks the
//! office pool for each changed file with `atelier.review.file` ([`DiffFile`] → [`FileDiff`]),
//! where the file readers are. Large diffs are summarized: exact counts and a bounded sample.
//! What a sheet new in the draft holds is shown too ([`AddedSheet`]), cut at
//! [`ADDED_SHEET_ROWS`] × [`ADDED_SHEET_COLUMNS`] and [`ADDED_BYTES`] per file.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::ManifestEntry;

/// The most changes a sample carries unless the request asks for fewer.
pub const DEFAULT_SAMPLE: u32 = 50;

/// The most rows of an added sheet a review shows, from the top of its used range.
pub const ADDED_SHEET_ROWS: u64 = 50;

/// The most columns of an added sheet a review shows, from the left of its used range.
pub const ADDED_SHEET_COLUMNS: u64 = 20;

/// The most bytes of added sheets' values (as JSON) one file's review carries; the rows past it
/// are cut (`truncated`).
pub const ADDED_BYTES: usize = 64 * 1024;

/// How a file changed in the draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

/// What happened to one unit (a line, row, paragraph, slide).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnitOp {
    Added,
    Removed,
    Changed,
}

/// One changed unit: its 1-based position (in the new file; in the old one when removed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitChange<T> {
    pub op: UnitOp,
    pub position: u64,
    /// Absent for added units (a missing `Option` field reads as none).
    pub old: Option<T>,
    /// Absent for removed units.
    pub new: Option<T>,
}

/// Counts of a sequence diff and a bounded sample of its changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes<T> {
    pub added: u64,
    pub removed: u64,
    pub changed: u64,
    pub sample: Vec<UnitChange<T>>,
    /// True when the sample holds fewer changes than there are.
    pub truncated: bool,
}

impl<T> Default for Changes<T> {
    fn default() -> Self {
        Self {
            added: 0,
            removed: 0,
            changed: 0,
            sample: Vec::new(),
            truncated: false,
        }
    }
}

/// A changed cell of a sheet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellChange {
    /// A1 reference.
    pub cell: String,
    /// The value before (null: empty).
    pub old: Value,
    /// The value after (null: empty).
    pub new: Value,
}

/// The changed cells of one sheet present before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SheetDiff {
    pub sheet: String,
    pub cells_changed: u64,
    pub sample: Vec<CellChange>,
    pub truncated: bool,
}

/// What a sheet new in the draft (or in a new workbook) holds: the values of its used range,
/// row-major from the range's top-left cell, cut at [`ADDED_SHEET_ROWS`] rows of
/// [`ADDED_SHEET_COLUMNS`] columns and at [`ADDED_BYTES`] per file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AddedSheet {
    pub sheet: String,
    /// The whole used range (`A1:D12`); absent when the sheet has no cells.
    #[serde(default)]
    pub range: Option<String>,
    /// The used range's rows and columns (all of them, also when cut).
    pub rows: u64,
    pub columns: u64,
    /// The shown values, one array per row from the range's top-left cell (null: empty).
    pub cells: Vec<Vec<Value>>,
    /// The formulas of the shown cells by A1 reference (`B5` → `=SUM(B2:B4)`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub formulas: BTreeMap<String, String>,
    /// True when the cells shown are fewer than the range holds.
    pub truncated: bool,
}

/// What changed inside a file, by format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub enum ContentDiff {
    /// A unified diff (cut at a bound) and line counts.
    Text {
        unified: String,
        lines_added: u64,
        lines_removed: u64,
        truncated: bool,
    },
    /// Rows by position after the header; columns by header name.
    Table {
        columns_added: Vec<String>,
        columns_removed: Vec<String>,
        rows: Changes<Vec<String>>,
    },
    /// Sheets added and removed, the changed cells of the others, and what each added sheet
    /// holds (in the order of `sheets_added`).
    Workbook {
        sheets_added: Vec<String>,
        sheets_removed: Vec<String>,
        sheets: Vec<SheetDiff>,
        #[serde(default)]
        added_sheets: Vec<AddedSheet>,
    },
    /// Paragraphs (and table rows as text) in body order.
    Document { paragraphs: Changes<String> },
    /// The text of each slide (title, body, other shapes).
    Slides { slides: Changes<Vec<String>> },
    /// Sizes only (no reader for the format).
    Binary { old_size: u64, new_size: u64 },
    /// The content could not be compared; the reason says why.
    Unavailable { reason: String },
}

/// One changed file of the draft.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileDiff {
    pub path: String,
    pub change: Change,
    pub content: ContentDiff,
}

/// `atelier.review.file` (office pool): compare two versions of a file (either may be absent).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiffFile {
    pub v: u16,
    pub path: String,
    #[serde(default)]
    pub old: Option<ManifestEntry>,
    #[serde(default)]
    pub new: Option<ManifestEntry>,
    /// The most changes a sample carries (default [`DEFAULT_SAMPLE`]).
    #[serde(default)]
    pub sample: Option<u32>,
}

/// `atelier.workshop.review`: the draft's changed files with their content diffs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReviewDraft {
    pub v: u16,
    pub workbench: String,
    #[serde(default)]
    pub sample: Option<u32>,
}

/// The draft's content review: the paths of `atelier.store.diff`, and per changed file what
/// changed inside it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Review {
    pub workbench: String,
    pub has_draft: bool,
    pub added: Vec<String>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
    pub files: Vec<FileDiff>,
}
