//! `docx_operations`: edits to `word/document.xml` (and headers/footers for `replace_text`).
//! Every other part is copied byte-for-byte; edited parts keep every element they do not touch.
//!
//! - `replace`: text replacement across runs;
//! - `runs`: new runs with direct formatting;
//! - `blocks`: body paragraphs and tables by index, inserted and removed;
//! - `tables`: new tables, cells and rows.

mod blocks;
mod replace;
mod runs;
mod tables;
#[cfg(test)]
mod tests;

use serde::Deserialize;
use serde_json::{Value, json};

use atelier_messages::{ErrorBody, ErrorCode};

use super::{Docx, W_P};
use crate::office::ordered::apply_in_order;
use crate::office::package;
use crate::office::xml::Element;
use blocks::{append_block, insert_after, paragraph_path, remove_at};
use runs::new_run;
use tables::{append_table_row, new_table, set_cell_text, table_cell, table_mut};

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
    let results = apply_in_order(&mut docx, ops, Docx::apply_one)?;
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
                let style_id = match style.as_deref() {
                    Some(style) => Some(self.styles()?.resolve(style, "table")?),
                    None => None,
                };
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

    fn new_paragraph(
        &mut self,
        style: Option<&str>,
        text: Option<&str>,
        runs: Option<&[RunSpec]>,
    ) -> Result<Element, ErrorBody> {
        let mut paragraph = Element::new(W_P, &[]);
        if let Some(style) = style {
            let id = self.styles()?.resolve(style, "paragraph")?;
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
