//! Word documents (.docx): reading by section, styles in use, and XML-level edits.
//!
//! The body is read as a sequence of blocks (paragraphs and tables, content controls flattened).
//! Sections start at headings (paragraph styles with an outline level, `Heading N` or `Title`).

mod blank;
mod edit;
mod styles;

use std::collections::BTreeMap;

use atelier_messages::{ErrorBody, ErrorCode};
use serde::Serialize;
use serde_json::{Value, json};

use super::package::Package;
use super::xml::Element;

pub(crate) use blank::blank as blank_document;
pub(crate) use edit::{DocxOp, apply as apply_operations};

pub(crate) const W_P: &str = "w:p";
pub(crate) const W_TBL: &str = "w:tbl";
const SECTIONS_PER_MAP_LIMIT: usize = 2000;

/// An opened document.
pub(crate) struct Docx {
    pub(crate) package: Package,
    pub(crate) main: String,
    /// The style definitions, parsed on first use ([`Docx::styles`]): a styles part can be
    /// larger than the rest of the document, and most edits never look at it.
    styles: Option<styles::StyleBook>,
}

/// One body block.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block {
    Paragraph {
        /// Index among body paragraphs (table cells excluded), as used by the operations.
        index: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        style: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        heading_level: Option<u8>,
        text: String,
    },
    Table {
        /// Index among body tables.
        index: usize,
        rows: Vec<Vec<String>>,
    },
}

impl Block {
    /// The block's text for a review: a paragraph's text, or a table's rows joined by ` | `.
    pub(crate) fn review_lines(&self) -> Vec<String> {
        match self {
            Block::Paragraph { text, .. } => vec![text.clone()],
            Block::Table { rows, .. } => rows.iter().map(|row| row.join(" | ")).collect(),
        }
    }

    fn heading(&self) -> Option<(u8, &str)> {
        match self {
            Block::Paragraph {
                heading_level: Some(level),
                text,
                ..
            } => Some((*level, text)),
            _ => None,
        }
    }

    fn words(&self) -> usize {
        match self {
            Block::Paragraph { text, .. } => text.split_whitespace().count(),
            Block::Table { rows, .. } => rows
                .iter()
                .flatten()
                .map(|cell| cell.split_whitespace().count())
                .sum(),
        }
    }
}

/// A section: a heading and the blocks up to the next heading.
#[derive(Debug, Serialize)]
pub(crate) struct Section {
    index: usize,
    /// The heading text (`null` for content before the first heading).
    heading: Option<String>,
    level: u8,
    paragraphs: usize,
    tables: usize,
    words: usize,
    #[serde(skip)]
    blocks: std::ops::Range<usize>,
}

impl Docx {
    pub(crate) fn open(bytes: Vec<u8>) -> Result<Docx, ErrorBody> {
        let mut package = Package::open_document(bytes, "DOCX")?;
        let main = package.main_part("DOCX")?;
        Ok(Docx {
            package,
            main,
            styles: None,
        })
    }

    /// The style definitions, loaded the first time they are asked for.
    pub(crate) fn styles(&mut self) -> Result<&styles::StyleBook, ErrorBody> {
        let styles = match self.styles.take() {
            Some(styles) => styles,
            None => styles::StyleBook::load(&mut self.package, &self.main)?,
        };
        Ok(self.styles.insert(styles))
    }

    pub(crate) fn body(&mut self) -> Result<&Element, ErrorBody> {
        self.package
            .doc(&self.main)?
            .root
            .child("w:body")
            .ok_or_else(|| super::package::read_failed("the document has no body (w:body)"))
    }

    /// The body as blocks, in order.
    pub(crate) fn blocks(&mut self) -> Result<Vec<Block>, ErrorBody> {
        let styles = self.styles()?.clone();
        let body = self.body()?;
        let mut blocks = Vec::new();
        let (mut paragraphs, mut tables) = (0, 0);
        for element in body_blocks(body) {
            if element.name == W_P {
                let style_id = paragraph_style(element);
                blocks.push(Block::Paragraph {
                    index: paragraphs,
                    heading_level: styles.heading_level(style_id.as_deref(), element),
                    style: style_id.map(|id| styles.display_name(&id)),
                    text: paragraph_text(element),
                });
                paragraphs += 1;
            } else {
                blocks.push(Block::Table {
                    index: tables,
                    rows: table_text(element),
                });
                tables += 1;
            }
        }
        Ok(blocks)
    }

    /// Sections by heading.
    pub(crate) fn sections(&mut self) -> Result<(Vec<Block>, Vec<Section>), ErrorBody> {
        let blocks = self.blocks()?;
        let sections = sections_of(&blocks);
        Ok((blocks, sections))
    }

    /// `get_file_info` fields.
    pub(crate) fn info(&mut self) -> Result<Value, ErrorBody> {
        let (blocks, sections) = self.sections()?;
        let headings: Vec<Value> = blocks
            .iter()
            .filter_map(|block| match block {
                Block::Paragraph {
                    index,
                    heading_level: Some(level),
                    text,
                    ..
                } => Some(json!({"level": level, "text": text, "paragraph_index": index})),
                _ => None,
            })
            .collect();
        let parts = self.package.part_names();
        Ok(json!({
            "paragraphs": blocks.iter().filter(|b| matches!(b, Block::Paragraph { .. })).count(),
            "tables": blocks.iter().filter(|b| matches!(b, Block::Table { .. })).count(),
            "words": blocks.iter().map(Block::words).sum::<usize>(),
            "sections": sections.len(),
            "headings": headings,
            "headers": parts.iter().filter(|p| p.starts_with("word/header")).count(),
            "footers": parts.iter().filter(|p| p.starts_with("word/footer")).count(),
            "images": parts.iter().filter(|p| p.starts_with("word/media/")).count(),
        }))
    }

    /// `get_file_map`: the sections.
    pub(crate) fn map(&mut self) -> Result<Value, ErrorBody> {
        let (_, mut sections) = self.sections()?;
        sections.truncate(SECTIONS_PER_MAP_LIMIT);
        Ok(json!({"sections": sections}))
    }

    /// `read_file` with `section` (index or heading text); all blocks when `None`.
    pub(crate) fn read_section(&mut self, selector: Option<&str>) -> Result<Value, ErrorBody> {
        let (blocks, sections) = self.sections()?;
        let Some(selector) = selector else {
            return Ok(
                json!({"section": Value::Null, "section_count": sections.len(), "blocks": blocks}),
            );
        };
        let section = find_section(&sections, selector)?;
        Ok(json!({
            "section": section.index,
            "heading": section.heading,
            "section_count": sections.len(),
            "blocks": &blocks[section.blocks.clone()],
        }))
    }

    /// `docx_get_styles`.
    pub(crate) fn styles_in_use(&mut self) -> Result<Value, ErrorBody> {
        let body = self.body()?.clone();
        Ok(self.styles()?.in_use(&body))
    }
}

fn find_section<'a>(sections: &'a [Section], selector: &str) -> Result<&'a Section, ErrorBody> {
    let wanted = selector.trim();
    let by_index = wanted.parse::<usize>().ok().and_then(|i| sections.get(i));
    let by_heading = || {
        let lower = wanted.to_lowercase();
        let heading = |s: &&Section| s.heading.as_deref().map(str::to_lowercase);
        sections
            .iter()
            .find(|s| heading(s).as_deref() == Some(lower.as_str()))
            .or_else(|| {
                sections
                    .iter()
                    .find(|s| heading(s).is_some_and(|h| h.contains(&lower)))
            })
    };
    by_index.or_else(by_heading).ok_or_else(|| {
        let names: Vec<String> = sections
            .iter()
            .map(|s| {
                format!(
                    "{}: {}",
                    s.index,
                    s.heading.as_deref().unwrap_or("(before first heading)")
                )
            })
            .collect();
        ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "no section {selector:?}; the sections are: {}",
                names.join("; ")
            ),
        )
    })
}

fn sections_of(blocks: &[Block]) -> Vec<Section> {
    let mut starts: Vec<usize> = blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.heading().is_some())
        .map(|(i, _)| i)
        .collect();
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    let mut sections = Vec::new();
    for (n, start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(blocks.len());
        let slice = &blocks[*start..end];
        let heading = slice.first().and_then(Block::heading);
        sections.push(Section {
            index: n,
            heading: heading.map(|(_, text)| text.to_string()),
            level: heading.map_or(0, |(level, _)| level),
            paragraphs: slice
                .iter()
                .filter(|b| matches!(b, Block::Paragraph { .. }))
                .count(),
            tables: slice
                .iter()
                .filter(|b| matches!(b, Block::Table { .. }))
                .count(),
            words: slice.iter().map(Block::words).sum(),
            blocks: *start..end,
        });
    }
    if blocks.is_empty() {
        sections.clear();
    }
    sections
}

/// Body-level paragraphs and tables in order (content controls' content flattened).
pub(crate) fn body_blocks(body: &Element) -> Vec<&Element> {
    let mut out = Vec::new();
    for element in body.elements() {
        match element.name.as_str() {
            W_P | W_TBL => out.push(element),
            "w:sdt" => {
                if let Some(content) = element.child("w:sdtContent") {
                    out.extend(body_blocks(content));
                }
            }
            _ => {}
        }
    }
    out
}

/// The paragraph's style id (`w:pPr/w:pStyle/@w:val`).
pub(crate) fn paragraph_style(paragraph: &Element) -> Option<String> {
    paragraph.path(&["w:pPr", "w:pStyle"])?.attr("w:val")
}

/// A paragraph's visible text (tabs as `\t`, breaks as `\n`; deleted revisions excluded).
pub(crate) fn paragraph_text(paragraph: &Element) -> String {
    let mut out = String::new();
    for element in paragraph.descendants() {
        match element.name.as_str() {
            "w:t" => out.push_str(&element.text()),
            "w:tab" if !is_in_ppr(element) => out.push('\t'),
            "w:br" | "w:cr" => out.push('\n'),
            _ => {}
        }
    }
    out
}

/// `w:tab` also appears as a tab stop inside `w:tabs` (no text); those have a `w:pos`.
fn is_in_ppr(tab: &Element) -> bool {
    tab.attr("w:pos").is_some()
}

/// A table's cell texts, row by row (paragraphs of a cell joined with `\n`).
pub(crate) fn table_text(table: &Element) -> Vec<Vec<String>> {
    table
        .children_named("w:tr")
        .map(|row| {
            row.children_named("w:tc")
                .map(|cell| {
                    cell.children_named(W_P)
                        .map(paragraph_text)
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .collect()
        })
        .collect()
}

/// Word counts per style (for styles in use).
pub(crate) fn count_by<K: Ord>(items: impl Iterator<Item = K>) -> BTreeMap<K, usize> {
    let mut out = BTreeMap::new();
    for item in items {
        *out.entry(item).or_insert(0) += 1;
    }
    out
}
