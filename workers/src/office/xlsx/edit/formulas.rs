//! Sheet references in formulas and defined names: `Sales!A1` or `'Q1 Sales'!A1`, rewritten
//! when a sheet is renamed and dropped with the names of a deleted sheet.

use atelier_messages::ErrorBody;

use super::XlsxEditor;
use super::cells::Cell;
use super::values::CellValue;
use crate::office::xml::Element;

/// `Sales!` or `'Q1 Sales'!` as used in formulas.
pub(super) fn sheet_ref(name: &str) -> String {
    let plain = name.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        format!("{name}!")
    } else {
        format!("'{}'!", name.replace('\'', "''"))
    }
}

/// Removes defined names scoped to or referring to the deleted sheet and renumbers the scopes.
pub(super) fn fix_defined_names(names: &mut Element, index: usize, sheet: &str) {
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

/// Rewrites `old_ref` to `new_ref` in the formulas (`f` children) of a cell element.
fn rewrite_formula(cell: &mut Element, old_ref: &str, new_ref: &str) {
    for f in cell.elements_mut().filter(|e| e.local_name() == "f") {
        let text = f.text();
        if text.contains(old_ref) {
            f.set_text(&text.replace(old_ref, new_ref));
        }
    }
}

impl XlsxEditor {
    /// Rewrites `Old!` references in every sheet's formulas: in the loaded rows of edited
    /// sheets, and in the parts of the others that use it (the rest stay untouched).
    pub(super) fn rewrite_formula_refs(
        &mut self,
        old_ref: &str,
        new_ref: &str,
    ) -> Result<(), ErrorBody> {
        for sheet in self.sheets()? {
            if let Some(data) = self.data.get_mut(&sheet.part) {
                for cell in data.rows.values_mut().flat_map(|r| r.cells.values_mut()) {
                    match cell {
                        Cell::Kept(element) => rewrite_formula(element, old_ref, new_ref),
                        Cell::Written {
                            value: CellValue::Formula(f),
                            ..
                        } => *f = f.replace(old_ref, new_ref),
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
}
