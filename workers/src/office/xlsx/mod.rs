//! Spreadsheets: reading with calamine (xlsx, xlsm, xls, ods), editing xlsx at the XML level,
//! new workbooks from a minimal template, and the styles in use.

pub(crate) mod cellref;
mod edit;
mod read;
mod styles;
mod xls;

use std::collections::BTreeMap;

use atelier_messages::ErrorBody;
use serde_json::Value;

use super::package::{self, Package};

pub(crate) use cellref::CellRef;
pub(crate) use cellref::cell_name;
pub(crate) use edit::{
    CellValue, XlsxEditor, XlsxOp, apply as apply_operations, validate_sheet_name,
};
pub(crate) use read::{SheetValues, Workbook, cell_json};

const CONTENT_TYPES: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/><Override PartName="/xl/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml"/></Types>"#;
const ROOT_RELS: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>"#;
const WORKBOOK_RELS: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/><Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" Target="styles.xml"/></Relationships>"#;
const WORKBOOK: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><bookViews><workbookView activeTab="0"/></bookViews><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets><calcPr calcId="191029" fullCalcOnLoad="1"/></workbook>"#;
const SHEET: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><dimension ref="A1"/><sheetViews><sheetView tabSelected="1" workbookViewId="0"/></sheetViews><sheetFormatPr defaultRowHeight="15"/><sheetData/><pageMargins left="0.7" right="0.7" top="0.75" bottom="0.75" header="0.3" footer="0.3"/></worksheet>"#;
const STYLES: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<styleSheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><fonts count="1"><font><sz val="11"/><color theme="1"/><name val="Calibri"/><family val="2"/><scheme val="minor"/></font></fonts><fills count="2"><fill><patternFill patternType="none"/></fill><fill><patternFill patternType="gray125"/></fill></fills><borders count="1"><border><left/><right/><top/><bottom/><diagonal/></border></borders><cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/></cellStyleXfs><cellXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0" xfId="0"/></cellXfs><cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles></styleSheet>"#;

/// A new workbook with one empty sheet, `Sheet1` (the first operations usually rename or fill it).
pub(crate) fn blank_workbook() -> Result<Vec<u8>, ErrorBody> {
    package::build(&[
        ("[Content_Types].xml", CONTENT_TYPES),
        ("_rels/.rels", ROOT_RELS),
        ("xl/workbook.xml", WORKBOOK),
        ("xl/_rels/workbook.xml.rels", WORKBOOK_RELS),
        ("xl/worksheets/sheet1.xml", SHEET),
        ("xl/styles.xml", STYLES),
    ])
}

/// `xlsx_get_styles`: the cell formats in use per sheet.
pub(crate) fn styles_in_use(bytes: Vec<u8>) -> Result<Value, ErrorBody> {
    let mut package = Package::open(bytes, "XLSX")?;
    let workbook = package.main_part("XLSX")?;
    let rels: std::collections::HashMap<String, String> = package
        .rels(&workbook)?
        .into_iter()
        .map(|rel| (rel.id, rel.target))
        .collect();
    let sheets: Vec<(String, String)> = package
        .doc(&workbook)?
        .root
        .child_local("sheets")
        .map(|list| {
            list.elements()
                .filter_map(|s| {
                    let id = s.attr_local("id")?;
                    Some((s.attr("name")?, rels.get(&id)?.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut usage: BTreeMap<String, BTreeMap<u32, usize>> = BTreeMap::new();
    for (name, part) in sheets {
        let counts = usage.entry(name).or_default();
        if !package.exists(&part) {
            continue;
        }
        for cell in package.doc(&part)?.root.descendants() {
            if cell.local_name() == "c" {
                let id = cell.attr("s").and_then(|s| s.parse().ok()).unwrap_or(0);
                *counts.entry(id).or_insert(0) += 1;
            }
        }
    }
    let styles = match package.rel_of_kind(&workbook, "styles")? {
        Some(rel) if package.exists(&rel.target) => package.doc(&rel.target)?.root.clone(),
        _ => crate::office::xml::Element::new("styleSheet", &[]),
    };
    Ok(styles::describe(&styles, &usage))
}
