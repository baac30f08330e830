//! Tables: new tables from rows of values, cells set in place keeping their formatting, rows
//! appended in the style of the last row.

use serde_json::Value;

use atelier_messages::ErrorBody;

use super::blocks::{at_path_mut, find_block};
use super::runs::{add_text, new_run};
use super::{RunSpec, invalid};
use crate::office::docx::{W_P, W_TBL};
use crate::office::xml::{Element, Node};

pub(super) fn table_mut(body: &mut Element, index: usize) -> Result<&mut Element, ErrorBody> {
    let mut seen = 0;
    let path = find_block(body, W_TBL, index, &mut seen, &mut Vec::new())
        .ok_or_else(|| invalid(format!("no table {index}; the body has {seen} tables")))?;
    at_path_mut(body, &path).ok_or_else(|| invalid(format!("no table {index}")))
}

pub(super) fn table_cell(
    table: &mut Element,
    row: usize,
    col: usize,
) -> Result<&mut Element, ErrorBody> {
    let rows = table.children_named("w:tr").count();
    let tr = table
        .elements_mut()
        .filter(|e| e.name == "w:tr")
        .nth(row)
        .ok_or_else(|| invalid(format!("no row {row}; the table has {rows} rows")))?;
    let cols = tr.children_named("w:tc").count();
    tr.elements_mut()
        .filter(|e| e.name == "w:tc")
        .nth(col)
        .ok_or_else(|| invalid(format!("no column {col} in row {row}; it has {cols} cells")))
}

/// Sets a cell's text, keeping its first paragraph's properties and first run's formatting.
pub(super) fn set_cell_text(cell: &mut Element, text: &str) {
    let template = cell
        .child(W_P)
        .cloned()
        .unwrap_or_else(|| Element::new(W_P, &[]));
    let run_props = template
        .descendants()
        .into_iter()
        .find(|e| e.name == "w:rPr" && is_run_props(&template, e))
        .cloned();
    let mut paragraph = Element::new(W_P, &[]);
    paragraph.attrs = template.attrs.clone();
    if let Some(props) = template.child("w:pPr") {
        paragraph = paragraph.with(props.clone());
    }
    let mut run = Element::new("w:r", &[]);
    if let Some(props) = run_props {
        run = run.with(props);
    }
    paragraph = paragraph.with(add_text(run, text));
    let first = cell
        .children
        .iter()
        .position(|n| matches!(n, Node::Element(e) if e.name == W_P));
    cell.retain_elements(|e| e.name != W_P);
    let at = first
        .unwrap_or(cell.children.len())
        .min(cell.children.len());
    cell.children.insert(at, Node::Element(paragraph));
}

/// Whether `props` is a run's `w:rPr` (not the paragraph mark's, inside `w:pPr`).
fn is_run_props(paragraph: &Element, props: &Element) -> bool {
    paragraph
        .children_named("w:r")
        .any(|run| run.child("w:rPr").is_some_and(|p| std::ptr::eq(p, props)))
}

pub(super) fn append_table_row(table: &mut Element, values: &[Value]) -> Result<(), ErrorBody> {
    let mut row = table
        .children_named("w:tr")
        .last()
        .cloned()
        .ok_or_else(|| invalid("the table has no rows to copy".into()))?;
    let cells = row.children_named("w:tc").count();
    if values.len() > cells {
        return Err(invalid(format!(
            "{} values for a row of {cells} cells",
            values.len()
        )));
    }
    for (i, cell) in row.elements_mut().filter(|e| e.name == "w:tc").enumerate() {
        let text = values.get(i).map(value_text).unwrap_or_default();
        set_cell_text(cell, &text);
    }
    let at = table
        .children
        .iter()
        .rposition(|n| matches!(n, Node::Element(e) if e.name == "w:tr"))
        .map_or(table.children.len(), |i| i + 1);
    table.children.insert(at, Node::Element(row));
    Ok(())
}

/// A JSON value as cell text (numbers as written, null empty).
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub(super) fn new_table(
    rows: &[Vec<Value>],
    header: bool,
    style: Option<&str>,
) -> Result<Element, ErrorBody> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    if rows.is_empty() || columns == 0 {
        return Err(invalid(
            "append_table needs at least one row with one cell".into(),
        ));
    }
    let width = (9000 / columns).to_string();
    let mut props = Element::new("w:tblPr", &[]);
    if let Some(style) = style {
        props = props.with(Element::new("w:tblStyle", &[("w:val", style)]));
    }
    props = props.with(Element::new("w:tblW", &[("w:w", "0"), ("w:type", "auto")]));
    let mut borders = Element::new("w:tblBorders", &[]);
    for side in [
        "w:top",
        "w:left",
        "w:bottom",
        "w:right",
        "w:insideH",
        "w:insideV",
    ] {
        borders = borders.with(Element::new(
            side,
            &[
                ("w:val", "single"),
                ("w:sz", "4"),
                ("w:space", "0"),
                ("w:color", "auto"),
            ],
        ));
    }
    props = props.with(borders);
    let mut grid = Element::new("w:tblGrid", &[]);
    for _ in 0..columns {
        grid = grid.with(Element::new("w:gridCol", &[("w:w", &width)]));
    }
    let mut table = Element::new(W_TBL, &[]).with(props).with(grid);
    for (r, values) in rows.iter().enumerate() {
        let mut row = Element::new("w:tr", &[]);
        for c in 0..columns {
            let text = values.get(c).map(value_text).unwrap_or_default();
            let spec = RunSpec {
                text,
                bold: (header && r == 0).then_some(true),
                ..RunSpec::default()
            };
            let cell = Element::new("w:tc", &[])
                .with(
                    Element::new("w:tcPr", &[])
                        .with(Element::new("w:tcW", &[("w:w", &width), ("w:type", "dxa")])),
                )
                .with(Element::new(W_P, &[]).with(new_run(&spec)?));
            row = row.with(cell);
        }
        table = table.with(row);
    }
    Ok(table)
}
