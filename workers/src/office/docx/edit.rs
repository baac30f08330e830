//! `docx_operations`: edits to `word/document.xml` (and headers/footers for `replace_text`).
//! Every other part is copied byte-for-byte; edited parts keep every element they do not touch.

use serde::Deserialize;
use serde_json::{Value, json};

use atelier_messages::{ErrorBody, ErrorCode};

use super::{Docx, W_P, W_TBL, paragraph_text};
use crate::office::package;
use crate::office::xml::{Element, Node};

/// One operation of a `docx_operations` call.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum DocxOp {
    /// Replaces every occurrence of `search` (also across runs), keeping the formatting of the
    /// run where each match starts.
    ReplaceText {
        #[serde(alias = "find")]
        search: String,
        replace: String,
    },
    AppendParagraph {
        style: Option<String>,
        text: Option<String>,
        runs: Option<Vec<RunSpec>>,
    },
    InsertParagraph {
        after_heading: Option<String>,
        after_index: Option<usize>,
        style: Option<String>,
        text: Option<String>,
        runs: Option<Vec<RunSpec>>,
    },
    AppendTable {
        rows: Vec<Vec<Value>>,
        #[serde(default)]
        header: bool,
        style: Option<String>,
    },
    SetTableCell {
        table_index: usize,
        row: usize,
        col: usize,
        text: String,
    },
    AppendTableRow {
        table_index: usize,
        values: Vec<Value>,
    },
    DeleteParagraph {
        index: usize,
    },
}

/// A run of new text with direct formatting.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunSpec {
    text: String,
    bold: Option<bool>,
    italic: Option<bool>,
    underline: Option<bool>,
    /// Points.
    size: Option<f64>,
    /// Hex RGB, e.g. `1F4E79`.
    color: Option<String>,
    font: Option<String>,
}

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// Applies `ops` in order; returns the new document and one result per operation.
pub(crate) fn apply(bytes: Vec<u8>, ops: &[DocxOp]) -> Result<(Vec<u8>, Vec<Value>), ErrorBody> {
    let mut docx = Docx::open(bytes)?;
    let mut results = Vec::with_capacity(ops.len());
    for (n, op) in ops.iter().enumerate() {
        let result = docx
            .apply_one(op)
            .map_err(|e| ErrorBody::new(e.code, format!("operation {n}: {}", e.message)))?;
        results.push(result);
    }
    Ok((docx.package.finish()?, results))
}

impl Docx {
    fn body_mut(&mut self) -> Result<&mut Element, ErrorBody> {
        self.package
            .doc_mut(&self.main)?
            .root
            .child_mut("w:body")
            .ok_or_else(|| package::read_failed("the document has no body (w:body)"))
    }

    fn apply_one(&mut self, op: &DocxOp) -> Result<Value, ErrorBody> {
        match op {
            DocxOp::ReplaceText { search, replace } => self.replace_text(search, replace),
            DocxOp::AppendParagraph { style, text, runs } => {
                let paragraph =
                    self.new_paragraph(style.as_deref(), text.as_deref(), runs.as_deref())?;
                let index = append_block(self.body_mut()?, paragraph);
                Ok(json!({"op": "append_paragraph", "body_position": index}))
            }
            DocxOp::InsertParagraph {
                after_heading,
                after_index,
                style,
                text,
                runs,
            } => {
                let paragraph =
                    self.new_paragraph(style.as_deref(), text.as_deref(), runs.as_deref())?;
                let anchor = self.anchor_index(after_heading.as_deref(), *after_index)?;
                let path = paragraph_path(self.body_mut()?, anchor)?;
                insert_after(self.body_mut()?, &path, paragraph);
                Ok(json!({"op": "insert_paragraph", "paragraph_index": anchor + 1}))
            }
            DocxOp::AppendTable {
                rows,
                header,
                style,
            } => {
                let style_id = style
                    .as_deref()
                    .map(|s| self.styles.resolve(s, "table"))
                    .transpose()?;
                let table = new_table(rows, *header, style_id.as_deref())?;
                let body = self.body_mut()?;
                append_block(body, table);
                append_block(body, Element::new(W_P, &[]));
                Ok(json!({"op": "append_table", "rows": rows.len()}))
            }
            DocxOp::SetTableCell {
                table_index,
                row,
                col,
                text,
            } => {
                let cell = table_cell(table_mut(self.body_mut()?, *table_index)?, *row, *col)?;
                set_cell_text(cell, text);
                Ok(
                    json!({"op": "set_table_cell", "table_index": table_index, "row": row, "col": col}),
                )
            }
            DocxOp::AppendTableRow {
                table_index,
                values,
            } => {
                let table = table_mut(self.body_mut()?, *table_index)?;
                append_table_row(table, values)?;
                Ok(json!({"op": "append_table_row", "table_index": table_index}))
            }
            DocxOp::DeleteParagraph { index } => {
                let body = self.body_mut()?;
                let path = paragraph_path(body, *index)?;
                remove_at(body, &path);
                Ok(json!({"op": "delete_paragraph", "index": index}))
            }
        }
    }

    fn replace_text(&mut self, search: &str, replace: &str) -> Result<Value, ErrorBody> {
        if search.is_empty() {
            return Err(invalid("replace_text: `search` is empty".into()));
        }
        let mut parts = vec![self.main.clone()];
        for rel in self.package.rels(&self.main)? {
            if (rel.kind.ends_with("/header") || rel.kind.ends_with("/footer")) && !rel.external {
                parts.push(rel.target);
            }
        }
        let mut count = 0;
        for part in parts {
            let root = &mut self.package.doc_mut(&part)?.root;
            visit_paragraphs(root, &mut |p| {
                count += replace_in_paragraph(p, search, replace)
            });
        }
        let mut result = json!({"op": "replace_text", "replacements": count});
        if count == 0 {
            result["warning"] = json!(format!("no occurrence of {search:?}; nothing replaced"));
        }
        Ok(result)
    }

    fn new_paragraph(
        &self,
        style: Option<&str>,
        text: Option<&str>,
        runs: Option<&[RunSpec]>,
    ) -> Result<Element, ErrorBody> {
        let mut paragraph = Element::new(W_P, &[]);
        if let Some(style) = style {
            let id = self.styles.resolve(style, "paragraph")?;
            paragraph = paragraph
                .with(Element::new("w:pPr", &[]).with(Element::new("w:pStyle", &[("w:val", &id)])));
        }
        let runs = match (text, runs) {
            (_, Some(runs)) => runs.to_vec(),
            (Some(text), None) => vec![RunSpec {
                text: text.to_string(),
                ..RunSpec::default()
            }],
            (None, None) => Vec::new(),
        };
        for run in &runs {
            paragraph = paragraph.with(new_run(run)?);
        }
        Ok(paragraph)
    }

    /// The paragraph index to insert after: a heading by text, or an explicit index.
    fn anchor_index(
        &mut self,
        heading: Option<&str>,
        index: Option<usize>,
    ) -> Result<usize, ErrorBody> {
        match (heading, index) {
            (Some(heading), _) => {
                let wanted = heading.trim().to_lowercase();
                let blocks = self.blocks()?;
                let headings: Vec<(usize, String)> = blocks
                    .iter()
                    .filter_map(|b| match b {
                        super::Block::Paragraph {
                            index,
                            heading_level: Some(_),
                            text,
                            ..
                        } => Some((*index, text.clone())),
                        _ => None,
                    })
                    .collect();
                headings
                    .iter()
                    .find(|(_, text)| text.trim().to_lowercase() == wanted)
                    .or_else(|| {
                        headings
                            .iter()
                            .find(|(_, text)| text.to_lowercase().contains(&wanted))
                    })
                    .map(|(index, _)| *index)
                    .ok_or_else(|| {
                        let names: Vec<&str> = headings.iter().map(|(_, t)| t.as_str()).collect();
                        invalid(format!(
                            "no heading {heading:?}; the headings are: {}",
                            names.join(", ")
                        ))
                    })
            }
            (None, Some(index)) => Ok(index),
            (None, None) => Err(invalid(
                "insert_paragraph needs `after_heading` or `after_index`".into(),
            )),
        }
    }
}

/// Calls `f` on every paragraph (body, tables, content controls; not nested text boxes twice).
fn visit_paragraphs(element: &mut Element, f: &mut impl FnMut(&mut Element)) {
    for child in element.elements_mut() {
        if child.name == W_P {
            f(child);
        } else {
            visit_paragraphs(child, f);
        }
    }
}

/// Paths (child indices from the paragraph) of the `w:t` elements, in order; nested paragraphs
/// (text boxes) are left to their own visit.
fn text_paths(element: &Element, prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    for (i, node) in element.children.iter().enumerate() {
        let Node::Element(child) = node else { continue };
        prefix.push(i);
        match child.name.as_str() {
            "w:t" => out.push(prefix.clone()),
            W_P | "w:pPr" | "w:rPr" | "w:drawing" | "w:pict" => {}
            _ => text_paths(child, prefix, out),
        }
        prefix.pop();
    }
}

fn at_path_mut<'a>(element: &'a mut Element, path: &[usize]) -> Option<&'a mut Element> {
    let mut current = element;
    for i in path {
        current = match current.children.get_mut(*i)? {
            Node::Element(child) => child,
            _ => return None,
        };
    }
    Some(current)
}

/// Replaces every match in one paragraph; returns the count.
fn replace_in_paragraph(paragraph: &mut Element, search: &str, replace: &str) -> usize {
    if !paragraph_text(paragraph).contains(search) {
        return 0;
    }
    let mut paths = Vec::new();
    text_paths(paragraph, &mut Vec::new(), &mut paths);
    let mut texts: Vec<String> = paths
        .iter()
        .map(|p| {
            at_path_mut(paragraph, p)
                .map(|t| t.text())
                .unwrap_or_default()
        })
        .collect();
    let joined: String = texts.concat();
    let matches: Vec<usize> = joined.match_indices(search).map(|(at, _)| at).collect();
    for start in matches.iter().rev() {
        splice(&mut texts, *start, start + search.len(), replace);
    }
    for (path, text) in paths.iter().zip(&texts) {
        if let Some(t) = at_path_mut(paragraph, path)
            && t.text() != *text
        {
            t.set_text(text);
            t.set_attr("xml:space", "preserve");
        }
    }
    matches.len()
}

/// Replaces bytes `start..end` of the concatenation of `texts` with `replace`, putting the new
/// text in the segment where the match starts and trimming the following segments.
fn splice(texts: &mut [String], start: usize, end: usize, replace: &str) {
    let mut offset = 0;
    let mut placed = false;
    for text in texts.iter_mut() {
        let (seg_start, seg_end) = (offset, offset + text.len());
        offset = seg_end;
        let holds_start = !placed && (seg_start..seg_end).contains(&start);
        let overlaps = seg_start < end && seg_end > start;
        if !(holds_start || placed && overlaps) {
            if placed && seg_start >= end {
                break;
            }
            continue;
        }
        let cut_from = start.saturating_sub(seg_start);
        let cut_to = (end - seg_start).min(text.len());
        let mut updated = String::with_capacity(text.len() + replace.len());
        updated.push_str(&text[..cut_from]);
        if !placed {
            updated.push_str(replace);
            placed = true;
        }
        updated.push_str(&text[cut_to..]);
        *text = updated;
    }
}

fn new_run(spec: &RunSpec) -> Result<Element, ErrorBody> {
    let mut props = Element::new("w:rPr", &[]);
    if let Some(font) = &spec.font {
        props = props.with(Element::new(
            "w:rFonts",
            &[("w:ascii", font), ("w:hAnsi", font), ("w:cs", font)],
        ));
    }
    if spec.bold == Some(true) {
        props = props.with(Element::new("w:b", &[]));
    }
    if spec.italic == Some(true) {
        props = props.with(Element::new("w:i", &[]));
    }
    if let Some(color) = &spec.color {
        props = props.with(Element::new("w:color", &[("w:val", &hex_color(color)?)]));
    }
    if let Some(size) = spec.size {
        if !(1.0..=1638.0).contains(&size) {
            return Err(invalid(format!(
                "run size {size} must be between 1 and 1638 points"
            )));
        }
        let half = format!("{}", (size * 2.0).round() as u32);
        props = props.with(Element::new("w:sz", &[("w:val", &half)]));
        props = props.with(Element::new("w:szCs", &[("w:val", &half)]));
    }
    if spec.underline == Some(true) {
        props = props.with(Element::new("w:u", &[("w:val", "single")]));
    }
    let mut run = Element::new("w:r", &[]);
    if !props.children.is_empty() {
        run = run.with(props);
    }
    Ok(add_text(run, &spec.text))
}

/// Adds text to a run: `\t` as `w:tab`, `\n` as `w:br`.
fn add_text(mut run: Element, text: &str) -> Element {
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            run = run.with(Element::new("w:br", &[]));
        }
        for (j, piece) in line.split('\t').enumerate() {
            if j > 0 {
                run = run.with(Element::new("w:tab", &[]));
            }
            if !piece.is_empty() {
                run = run.with(Element::new("w:t", &[("xml:space", "preserve")]).with_text(piece));
            }
        }
    }
    run
}

/// `#1f4e79` / `1F4E79` → `1F4E79`.
pub(crate) fn hex_color(color: &str) -> Result<String, ErrorBody> {
    let hex = color.trim().trim_start_matches('#').to_ascii_uppercase();
    let hex = if hex.len() == 8 {
        hex[2..].to_string()
    } else {
        hex
    };
    if hex.len() == 6 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(hex)
    } else {
        Err(invalid(format!(
            "color {color:?} must be hex RGB like 1F4E79"
        )))
    }
}

/// Appends a block before the body's final `w:sectPr`; returns its child index.
fn append_block(body: &mut Element, block: Element) -> usize {
    let at = match body
        .children
        .iter()
        .rposition(|n| matches!(n, Node::Element(e) if e.name == "w:sectPr"))
    {
        Some(index) => index,
        None => body.children.len(),
    };
    body.children.insert(at, Node::Element(block));
    at
}

/// Child-index path from the body to body paragraph `index` (as numbered by `read_file`).
fn paragraph_path(body: &Element, index: usize) -> Result<Vec<usize>, ErrorBody> {
    let mut seen = 0;
    find_block(body, W_P, index, &mut seen, &mut Vec::new()).ok_or_else(|| {
        invalid(format!(
            "no paragraph {index}; the body has {seen} paragraphs"
        ))
    })
}

fn find_block(
    element: &Element,
    name: &str,
    index: usize,
    seen: &mut usize,
    path: &mut Vec<usize>,
) -> Option<Vec<usize>> {
    for (i, node) in element.children.iter().enumerate() {
        let Node::Element(child) = node else { continue };
        path.push(i);
        if child.name == name {
            if *seen == index {
                return Some(path.clone());
            }
            *seen += 1;
        } else if (child.name == "w:sdt" || child.name == "w:sdtContent")
            && let Some(found) = find_block(child, name, index, seen, path)
        {
            return Some(found);
        }
        path.pop();
    }
    None
}

fn insert_after(body: &mut Element, path: &[usize], block: Element) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    if let Some(parent) = at_path_mut(body, parent_path) {
        parent.children.insert(last + 1, Node::Element(block));
    }
}

fn remove_at(body: &mut Element, path: &[usize]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    if let Some(parent) = at_path_mut(body, parent_path) {
        parent.children.remove(*last);
    }
}

fn table_mut(body: &mut Element, index: usize) -> Result<&mut Element, ErrorBody> {
    let mut seen = 0;
    let path = find_block(body, W_TBL, index, &mut seen, &mut Vec::new())
        .ok_or_else(|| invalid(format!("no table {index}; the body has {seen} tables")))?;
    at_path_mut(body, &path).ok_or_else(|| invalid(format!("no table {index}")))
}

fn table_cell(table: &mut Element, row: usize, col: usize) -> Result<&mut Element, ErrorBody> {
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
fn set_cell_text(cell: &mut Element, text: &str) {
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

fn append_table_row(table: &mut Element, values: &[Value]) -> Result<(), ErrorBody> {
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

fn new_table(rows: &[Vec<Value>], header: bool, style: Option<&str>) -> Result<Element, ErrorBody> {
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

const CONTENT_TYPES: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/><Override PartName="/word/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml"/></Types>"#;
const ROOT_RELS: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#;
const DOCUMENT_RELS: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" Target="styles.xml"/></Relationships>"#;
const DOCUMENT: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><w:body><w:sectPr><w:pgSz w:w="11906" w:h="16838"/><w:pgMar w:top="1440" w:right="1440" w:bottom="1440" w:left="1440" w:header="708" w:footer="708" w:gutter="0"/></w:sectPr></w:body></w:document>"#;
const STYLES: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:styles xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:docDefaults><w:rPrDefault><w:rPr><w:rFonts w:ascii="Calibri" w:hAnsi="Calibri" w:cs="Calibri"/><w:sz w:val="22"/><w:szCs w:val="22"/></w:rPr></w:rPrDefault><w:pPrDefault><w:pPr><w:spacing w:after="160" w:line="259" w:lineRule="auto"/></w:pPr></w:pPrDefault></w:docDefaults><w:style w:type="paragraph" w:default="1" w:styleId="Normal"><w:name w:val="Normal"/><w:qFormat/></w:style><w:style w:type="paragraph" w:styleId="Title"><w:name w:val="Title"/><w:basedOn w:val="Normal"/><w:next w:val="Normal"/><w:qFormat/><w:rPr><w:sz w:val="56"/></w:rPr></w:style><w:style w:type="paragraph" w:styleId="Heading1"><w:name w:val="heading 1"/><w:basedOn w:val="Normal"/><w:next w:val="Normal"/><w:qFormat/><w:pPr><w:keepNext/><w:spacing w:before="240" w:after="0"/><w:outlineLvl w:val="0"/></w:pPr><w:rPr><w:b/><w:sz w:val="32"/></w:rPr></w:style><w:style w:type="paragraph" w:styleId="Heading2"><w:name w:val="heading 2"/><w:basedOn w:val="Normal"/><w:next w:val="Normal"/><w:qFormat/><w:pPr><w:keepNext/><w:spacing w:before="40" w:after="0"/><w:outlineLvl w:val="1"/></w:pPr><w:rPr><w:b/><w:sz w:val="26"/></w:rPr></w:style><w:style w:type="paragraph" w:styleId="Heading3"><w:name w:val="heading 3"/><w:basedOn w:val="Normal"/><w:next w:val="Normal"/><w:qFormat/><w:pPr><w:keepNext/><w:outlineLvl w:val="2"/></w:pPr><w:rPr><w:b/><w:sz w:val="24"/></w:rPr></w:style><w:style w:type="paragraph" w:styleId="ListBullet"><w:name w:val="List Bullet"/><w:basedOn w:val="Normal"/><w:qFormat/><w:pPr><w:ind w:left="360" w:hanging="360"/></w:pPr></w:style><w:style w:type="table" w:default="1" w:styleId="TableNormal"><w:name w:val="Normal Table"/><w:tblPr><w:tblInd w:w="0" w:type="dxa"/><w:tblCellMar><w:top w:w="0" w:type="dxa"/><w:left w:w="108" w:type="dxa"/><w:bottom w:w="0" w:type="dxa"/><w:right w:w="108" w:type="dxa"/></w:tblCellMar></w:tblPr></w:style><w:style w:type="table" w:styleId="TableGrid"><w:name w:val="Table Grid"/><w:basedOn w:val="TableNormal"/><w:tblPr><w:tblBorders><w:top w:val="single" w:sz="4" w:space="0" w:color="auto"/><w:left w:val="single" w:sz="4" w:space="0" w:color="auto"/><w:bottom w:val="single" w:sz="4" w:space="0" w:color="auto"/><w:right w:val="single" w:sz="4" w:space="0" w:color="auto"/><w:insideH w:val="single" w:sz="4" w:space="0" w:color="auto"/><w:insideV w:val="single" w:sz="4" w:space="0" w:color="auto"/></w:tblBorders></w:tblPr></w:style></w:styles>"#;

/// A new, empty document (A4, Calibri 11, Title/Heading 1-3/List Bullet/Table Grid styles).
pub(crate) fn blank() -> Result<Vec<u8>, ErrorBody> {
    package::build(&[
        ("[Content_Types].xml", CONTENT_TYPES),
        ("_rels/.rels", ROOT_RELS),
        ("word/document.xml", DOCUMENT),
        ("word/_rels/document.xml.rels", DOCUMENT_RELS),
        ("word/styles.xml", STYLES),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splices_matches_across_segments() {
        let mut texts = vec![
            "Company: {{com".to_string(),
            "pa".to_string(),
            "ny}} Ltd".to_string(),
        ];
        splice(&mut texts, 9, 20, "Acme");
        assert_eq!(texts, vec!["Company: Acme", "", " Ltd"]);
        let mut whole = vec!["a {{x}} b".to_string()];
        splice(&mut whole, 2, 7, "1");
        assert_eq!(whole, vec!["a 1 b"]);
        let mut edge = vec!["ab".to_string(), "cd".to_string()];
        splice(&mut edge, 2, 4, "X");
        assert_eq!(edge, vec!["ab", "X"]);
    }
}
