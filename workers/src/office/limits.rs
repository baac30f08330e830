//! The budgets that bound what a file's own numbers can make a reader allocate or repeat.
//!
//! Every office package passes [`package`](super::package)'s checks before any reader sees it:
//! the zip checks (entries, sizes, ratios, DTDs) and then one streaming pass over its parts
//! (`package::scan`) that refuses, with [`ErrorCode::FileTooComplex`], a spreadsheet whose cells
//! lie outside Excel's grid, whose sheets need more than these budgets as calamine reads them
//! (calamine's ranges are dense: a sheet costs its used rectangle, not its cells), or whose
//! counts claim more than their part can hold. The XML trees of docx, pptx and xlsx edits are
//! bounded in nodes and depth as they are built (`xml::Document`), and a presentation may list
//! each slide part once. Whatever passes is read in memory and time proportional to the file.

use atelier_messages::{ErrorBody, ErrorCode};

/// Excel's grid: the last row and column (1-based, `XFD1048576`).
pub(crate) const GRID_ROWS: u64 = 1_048_576;
pub(crate) const GRID_COLUMNS: u64 = 16_384;

/// Bytes of one cell of a dense sheet range as calamine holds it.
pub(crate) const CELL_BYTES: u64 = std::mem::size_of::<calamine::Data>() as u64;
/// The most memory one sheet's dense range may take: 256 MiB.
pub(crate) const SHEET_BYTES: u64 = 256 << 20;
/// The most cells of one sheet's used rectangle (8,388,608 at 32 bytes a cell): e.g. 1,048,576
/// rows of 8 columns, or 65,536 rows of 128. `A1` and `XFD1048576` together are 2^34.
pub(crate) const SHEET_CELLS: u64 = SHEET_BYTES / CELL_BYTES;
/// The most cells of all the sheets of a workbook together (4 full sheets, 1 GiB).
pub(crate) const WORKBOOK_CELLS: u64 = 4 * SHEET_CELLS;
/// The most text a sheet's cells may copy when read: shared formulas expanded into each cell of
/// their group, and an ODS value repeated over columns and rows.
pub(crate) const SHEET_TEXT_BYTES: u64 = 256 << 20;
/// The most such text of a whole workbook.
pub(crate) const WORKBOOK_TEXT_BYTES: u64 = 1 << 30;
/// The fewest bytes one shared string takes in `sharedStrings.xml` (`<si/>`): a `uniqueCount`
/// larger than the part's size over this is a lie (calamine reserves room for it up front).
pub(crate) const MIN_SHARED_STRING_BYTES: u64 = 5;
/// Shared-formula group indices (`si`) a sheet may use beyond its count of formula elements
/// (calamine keeps a table indexed by them; producers number groups from 0).
pub(crate) const SHARED_FORMULA_SLACK: u64 = 1024;

/// The most relationships one `.rels` part may declare.
pub(crate) const MAX_RELATIONSHIPS: u64 = 65_536;
/// The deepest element nesting of a parsed XML part (trees are dropped and written recursively).
pub(crate) const MAX_XML_DEPTH: usize = 256;
/// The most XML nodes (elements, text runs, comments) a package's parsed parts may hold
/// together: about 600 MiB of trees at their measured cost (some 157 bytes a node in a typical
/// document part), e.g. a 500-page document ten times over, or a sheet of a million cells.
pub(crate) const MAX_XML_NODES: usize = 4_000_000;

/// The refusal of a file over a budget.
pub(crate) fn too_complex(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::FileTooComplex, message)
}
