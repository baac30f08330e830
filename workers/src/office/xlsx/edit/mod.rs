//! XML-level edits of a workbook package, for `xlsx_operations` and `table_update_from_export`.
//!
//! Only the parts an edit touches are rewritten (the workbook, edited sheets, styles, content
//! types, relationships); every other part (untouched sheets, shared strings, drawings, charts,
//! themes…) is copied byte-for-byte. Writing a cell makes the calculation chain stale: it is
//! dropped and the workbook asks for a full recalculation on open.
//!
//! - `ops`: the `xlsx_operations` operations and their dispatch;
//! - `values`: typed cell values (from JSON, with ISO dates as Excel serials);
//! - `sheets`: the sheet list: lookup, creation, clearing, deletion, renaming;
//! - `formulas`: sheet references in formulas and defined names;
//! - `cells`: the rows and cells of edited sheets: writing, styling, rendering;
//! - `layout`: column widths, row heights, frozen panes;
//! - `schema`: where new elements go, in the part's namespace prefix.

mod cells;
mod formulas;
mod layout;
mod ops;
mod schema;
mod sheets;
#[cfg(test)]
mod tests;
mod values;

use std::collections::{BTreeMap, HashMap};

use atelier_messages::{ErrorBody, ErrorCode};

use crate::office::package::Package;
use cells::SheetData;
use schema::{WORKBOOK_ORDER, ensure_child};

pub(crate) use ops::{XlsxOp, apply};
pub(crate) use sheets::validate_sheet_name;
pub(crate) use values::CellValue;

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// A workbook being edited.
pub(crate) struct XlsxEditor {
    package: Package,
    /// The workbook part, usually `xl/workbook.xml`.
    workbook: String,
    /// The rows of the sheets edited so far, by part.
    data: BTreeMap<String, SheetData>,
    styles_part: Option<String>,
    /// Derived cell formats by (base format, style spec as JSON).
    style_cache: HashMap<(u32, String), u32>,
    /// Whether dates count from 1904 (old Mac workbooks).
    date1904: bool,
    /// Whether cached formula results may be stale.
    recalc: bool,
}

impl XlsxEditor {
    /// Opens a workbook through the package checks (zip bombs, DTDs, encryption, damage).
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

    /// Whether the workbook has a styles part (needed to give dates a date format).
    pub(crate) fn has_styles(&self) -> bool {
        self.styles_part.is_some()
    }

    /// Writes the loaded rows back, drops the stale calculation chain, asks for a recalculation
    /// on open, and writes the package.
    pub(crate) fn finish(mut self) -> Result<Vec<u8>, ErrorBody> {
        self.store_rows()?;
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
        ensure_child(root, "calcPr", WORKBOOK_ORDER).set_attr("fullCalcOnLoad", "1");
        Ok(())
    }
}
