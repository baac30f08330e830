//! The workbook's sheet list: looking sheets up by name, creating, clearing, deleting and
//! renaming them (with the relationships, content types, defined names and views that follow).

use atelier_messages::ErrorBody;

use super::formulas::{fix_defined_names, sheet_ref};
use super::schema::{WORKBOOK_ORDER, ensure_child, prefix_of};
use super::{XlsxEditor, invalid};
use crate::office::xml::{Document, Element, Node};

const REL_WORKSHEET: &str =
    "http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet";
const CT_WORKSHEET: &str =
    "application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml";
const NS_MAIN: &str = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";
const NS_REL: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";

/// A sheet of the workbook.
#[derive(Debug, Clone)]
pub(super) struct SheetRef {
    pub(super) name: String,
    pub(super) rel_id: String,
    pub(super) part: String,
}

/// Refuses a name Excel would refuse: empty, over 31 characters, `[ ] : * ? / \`, a leading or
/// trailing apostrophe, or the reserved `History`.
pub(crate) fn validate_sheet_name(name: &str) -> Result<(), ErrorBody> {
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
    Ok(())
}

/// An empty worksheet with Excel's default view, row height and margins.
fn blank_worksheet() -> Document {
    let margins = [
        ("left", "0.7"),
        ("right", "0.7"),
        ("top", "0.75"),
        ("bottom", "0.75"),
        ("header", "0.3"),
        ("footer", "0.3"),
    ];
    let worksheet = Element::new("worksheet", &[("xmlns", NS_MAIN), ("xmlns:r", NS_REL)])
        .with(Element::new("dimension", &[("ref", "A1")]))
        .with(
            Element::new("sheetViews", &[])
                .with(Element::new("sheetView", &[("workbookViewId", "0")])),
        )
        .with(Element::new("sheetFormatPr", &[("defaultRowHeight", "15")]))
        .with(Element::new("sheetData", &[]))
        .with(Element::new("pageMargins", &margins));
    Document::new(worksheet)
}

impl XlsxEditor {
    /// The sheets in workbook order.
    pub(super) fn sheets(&mut self) -> Result<Vec<SheetRef>, ErrorBody> {
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

    /// The sheet called `name`: an exact match first, then one ignoring case (as Excel does).
    pub(super) fn sheet(&mut self, name: &str) -> Result<SheetRef, ErrorBody> {
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

    /// The part holding sheet `name` (see [`XlsxEditor::sheet`]).
    pub(crate) fn sheet_part(&mut self, name: &str) -> Result<String, ErrorBody> {
        Ok(self.sheet(name)?.part)
    }

    /// Adds an empty sheet called `name` at the end unless one exists (ignoring case); returns
    /// whether it was added.
    pub(crate) fn ensure_sheet(&mut self, name: &str) -> Result<bool, ErrorBody> {
        if self
            .sheets()?
            .iter()
            .any(|s| s.name.eq_ignore_ascii_case(name))
        {
            return Ok(false);
        }
        validate_sheet_name(name)?;
        let part = self.package.free_name("xl/worksheets/sheet", ".xml");
        self.package.put(&part, blank_worksheet());
        self.package.add_override(&part, CT_WORKSHEET)?;
        let rel_id = self
            .package
            .add_rel(&self.workbook.clone(), REL_WORKSHEET, &part)?;
        let root = &mut self.package.doc_mut(&self.workbook)?.root;
        let prefix = prefix_of(&root.name);
        let list = ensure_child(root, "sheets", WORKBOOK_ORDER);
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

    /// Replaces the worksheet in `part` by an empty one: cells, merged cells, column widths,
    /// views and every other sheet-level setting go. Its relationships part stays as it is.
    pub(crate) fn clear_sheet(&mut self, part: &str) {
        self.data.remove(part);
        self.package.put(part, blank_worksheet());
        self.recalc = true;
    }

    pub(super) fn delete_sheet(&mut self, name: &str) -> Result<(), ErrorBody> {
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
                "bookViews" => shift_views(child, index),
                _ => {}
            }
        }
        root.retain_elements(|e| e.local_name() != "definedNames" || e.elements().next().is_some());
        self.recalc = true;
        Ok(())
    }

    /// Renames sheet `name`, rewriting `Old!` references in defined names and formulas.
    pub(crate) fn rename_sheet(&mut self, name: &str, new_name: &str) -> Result<(), ErrorBody> {
        let sheet = self.sheet(name)?;
        let taken = self
            .sheets()?
            .iter()
            .any(|s| s.part != sheet.part && s.name.eq_ignore_ascii_case(new_name));
        if taken {
            return Err(invalid(format!(
                "a sheet named {new_name:?} already exists"
            )));
        }
        validate_sheet_name(new_name)?;
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
}

/// Moves the active and first visible tab of each book view back past a deleted sheet `index`.
fn shift_views(book_views: &mut Element, index: usize) {
    for view in book_views.elements_mut() {
        for attr in ["activeTab", "firstSheet"] {
            let value: usize = view.attr(attr).and_then(|v| v.parse().ok()).unwrap_or(0);
            if value >= index && value > 0 {
                view.set_attr(attr, &(value - 1).to_string());
            }
        }
    }
}
