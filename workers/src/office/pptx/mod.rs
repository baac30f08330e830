//! PowerPoint presentations (.pptx): slides (title, body, other text, tables, notes), theme
//! styles, and XML-level edits.

mod edit;
mod template;

use std::collections::{HashMap, HashSet};

use atelier_messages::{ErrorBody, ErrorCode};
use serde::Serialize;
use serde_json::{Value, json};

use super::docx::count_by;
use super::limits::too_complex;
use super::package::{Package, read_failed};
use super::xml::Element;

pub(crate) use edit::{PptxOp, apply as apply_operations};
pub(crate) use template::blank as blank_presentation;

/// An opened presentation.
pub(crate) struct Pptx {
    pub(crate) package: Package,
    pub(crate) main: String,
    /// Slide part names in presentation order.
    pub(crate) slides: Vec<String>,
}

/// What a placeholder holds, as far as reading and editing care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Title,
    Body,
    Other,
}

/// A shape's placeholder role (`None` for shapes that are not placeholders).
pub(crate) fn placeholder_role(shape: &Element) -> Option<Role> {
    let ph = shape.path(&["p:nvSpPr", "p:nvPr", "p:ph"])?;
    Some(match ph.attr("type").as_deref() {
        Some("title" | "ctrTitle") => Role::Title,
        None | Some("body" | "subTitle" | "obj") => Role::Body,
        Some(_) => Role::Other,
    })
}

/// The text of a `p:txBody`, one string per paragraph.
pub(crate) fn paragraphs(text_body: &Element) -> Vec<String> {
    text_body
        .children_named("a:p")
        .map(|p| {
            p.descendants()
                .into_iter()
                .filter_map(|e| match e.name.as_str() {
                    "a:t" => Some(e.text()),
                    "a:br" => Some("\n".to_string()),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// Every `p:sp` of a shape tree, groups included, in order.
pub(crate) fn shapes(tree: &Element) -> Vec<&Element> {
    let mut out = Vec::new();
    for element in tree.elements() {
        match element.name.as_str() {
            "p:sp" => out.push(element),
            "p:grpSp" => out.extend(shapes(element)),
            _ => {}
        }
    }
    out
}

fn tables(tree: &Element) -> Vec<Vec<Vec<String>>> {
    tree.descendants()
        .into_iter()
        .filter(|e| e.name == "a:tbl")
        .map(|table| {
            table
                .children_named("a:tr")
                .map(|row| {
                    row.children_named("a:tc")
                        .map(|cell| {
                            cell.child("a:txBody")
                                .map(|b| paragraphs(b).join("\n"))
                                .unwrap_or_default()
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// One slide as read.
#[derive(Debug, Serialize)]
pub(crate) struct Slide {
    index: usize,
    layout: Option<String>,
    title: Option<String>,
    /// Body placeholder paragraphs (bullets), in order.
    body: Vec<String>,
    /// Text of other shapes (text boxes, other placeholders), one entry per shape.
    other_text: Vec<String>,
    tables: Vec<Vec<Vec<String>>>,
    notes: Option<String>,
}

impl Slide {
    /// The slide's text for a review: title, body, other shapes, table rows, notes.
    pub(crate) fn text_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.title.iter().cloned().collect();
        lines.extend(self.body.iter().cloned());
        lines.extend(self.other_text.iter().cloned());
        for table in &self.tables {
            lines.extend(table.iter().map(|row| row.join(" | ")));
        }
        lines.extend(
            self.notes
                .iter()
                .filter(|n| !n.is_empty())
                .map(|n| format!("notes: {n}")),
        );
        lines
    }
}

impl Pptx {
    /// Opens a presentation. Its slide list may name each slide part once, and no more slides
    /// than the package has parts (a list is otherwise read and reread without end).
    pub(crate) fn open(bytes: Vec<u8>) -> Result<Pptx, ErrorBody> {
        let mut package = Package::open_document(bytes, "PPTX")?;
        let main = package.main_part("PPTX")?;
        let rels: HashMap<String, String> = package
            .rels(&main)?
            .into_iter()
            .map(|rel| (rel.id, rel.target))
            .collect();
        let ids: Vec<String> = package
            .doc(&main)?
            .root
            .path(&["p:sldIdLst"])
            .map(|list| {
                list.children_named("p:sldId")
                    .filter_map(|s| s.attr("r:id"))
                    .collect()
            })
            .unwrap_or_default();
        let parts = package.part_names().len();
        let mut listed = HashSet::new();
        let mut slides = Vec::new();
        for target in ids.iter().filter_map(|id| rels.get(id)) {
            if !listed.insert(target) {
                return Err(too_complex(format!(
                    "the presentation lists slide {target} more than once"
                )));
            }
            if listed.len() > parts {
                return Err(too_complex(format!(
                    "the presentation lists more slides than its {parts} parts"
                )));
            }
            slides.push(target.clone());
        }
        Ok(Pptx {
            package,
            main,
            slides,
        })
    }

    pub(crate) fn slide_part(&self, index: usize) -> Result<String, ErrorBody> {
        self.slides.get(index).cloned().ok_or_else(|| {
            ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "no slide {index}; the presentation has {} slides (0-based)",
                    self.slides.len()
                ),
            )
        })
    }

    fn tree(&mut self, part: &str) -> Result<Element, ErrorBody> {
        self.package
            .doc(part)?
            .root
            .path(&["p:cSld", "p:spTree"])
            .cloned()
            .ok_or_else(|| read_failed(format!("{part} has no shape tree")))
    }

    fn related(&mut self, part: &str, kind: &str) -> Result<Option<String>, ErrorBody> {
        Ok(self
            .package
            .rel_of_kind(part, kind)?
            .map(|r| r.target)
            .filter(|t| self.package.exists(t)))
    }

    /// The layout's name (`p:cSld/@name`).
    fn layout_name(&mut self, slide: &str) -> Result<Option<String>, ErrorBody> {
        let Some(layout) = self.related(slide, "slideLayout")? else {
            return Ok(None);
        };
        Ok(self
            .package
            .doc(&layout)?
            .root
            .child("p:cSld")
            .and_then(|c| c.attr("name")))
    }

    /// One slide's content.
    pub(crate) fn slide(&mut self, index: usize) -> Result<Slide, ErrorBody> {
        let part = self.slide_part(index)?;
        let tree = self.tree(&part)?;
        let mut slide = Slide {
            index,
            layout: self.layout_name(&part)?,
            title: None,
            body: Vec::new(),
            other_text: Vec::new(),
            tables: tables(&tree),
            notes: self.notes(&part)?,
        };
        for shape in shapes(&tree) {
            let Some(text_body) = shape.child("p:txBody") else {
                continue;
            };
            let text = paragraphs(text_body);
            match placeholder_role(shape) {
                Some(Role::Title) if slide.title.is_none() => slide.title = Some(text.join("\n")),
                Some(Role::Body) => slide.body.extend(text),
                _ => {
                    let joined = text.join("\n");
                    if !joined.trim().is_empty() {
                        slide.other_text.push(joined);
                    }
                }
            }
        }
        Ok(slide)
    }

    fn notes(&mut self, slide: &str) -> Result<Option<String>, ErrorBody> {
        let Some(notes) = self.related(slide, "notesSlide")? else {
            return Ok(None);
        };
        let tree = self.tree(&notes)?;
        let text: Vec<String> = shapes(&tree)
            .into_iter()
            .filter(|s| {
                s.path(&["p:nvSpPr", "p:nvPr", "p:ph"])
                    .and_then(|ph| ph.attr("type"))
                    .as_deref()
                    == Some("body")
            })
            .filter_map(|s| s.child("p:txBody"))
            .flat_map(paragraphs)
            .collect();
        Ok(Some(text.join("\n")))
    }

    /// Layout names of the presentation's masters, in order.
    pub(crate) fn layouts(&mut self) -> Result<Vec<(String, String)>, ErrorBody> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let masters: Vec<String> = self
            .package
            .rels(&self.main)?
            .into_iter()
            .filter(|r| r.kind.ends_with("/slideMaster") && seen.insert(r.target.clone()))
            .map(|r| r.target)
            .collect();
        for master in masters {
            for rel in self.package.rels(&master)? {
                if rel.kind.ends_with("/slideLayout") && self.package.exists(&rel.target) {
                    let name = self
                        .package
                        .doc(&rel.target)?
                        .root
                        .child("p:cSld")
                        .and_then(|c| c.attr("name"));
                    out.push((name.unwrap_or_default(), rel.target));
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn info(&mut self) -> Result<Value, ErrorBody> {
        let mut slides = Vec::new();
        for index in 0..self.slides.len() {
            let slide = self.slide(index)?;
            slides.push(json!({"index": index, "title": slide.title}));
        }
        let layouts: Vec<String> = self.layouts()?.into_iter().map(|(name, _)| name).collect();
        Ok(json!({"slide_count": self.slides.len(), "slides": slides, "layouts": layouts}))
    }

    pub(crate) fn map(&mut self) -> Result<Value, ErrorBody> {
        let mut slides = Vec::new();
        for index in 0..self.slides.len() {
            let slide = self.slide(index)?;
            let words: usize = slide
                .body
                .iter()
                .chain(slide.other_text.iter())
                .chain(slide.title.iter())
                .map(|t| t.split_whitespace().count())
                .sum();
            slides.push(json!({
                "index": index, "title": slide.title, "layout": slide.layout,
                "bullets": slide.body.len(), "tables": slide.tables.len(),
                "has_notes": slide.notes.as_deref().is_some_and(|n| !n.is_empty()), "words": words,
            }));
        }
        Ok(json!({"slides": slides}))
    }

    /// `pptx_get_styles`: theme fonts and colors, layouts, fonts and sizes used on slides.
    pub(crate) fn styles(&mut self) -> Result<Value, ErrorBody> {
        let theme = self.theme()?;
        let font = |kind: &str| {
            theme
                .as_ref()
                .and_then(|t| {
                    t.descendants()
                        .into_iter()
                        .find(|e| e.name == kind)
                        .cloned()
                })
                .and_then(|f| f.child("a:latin").and_then(|l| l.attr("typeface")))
        };
        let colors: serde_json::Map<String, Value> = theme
            .as_ref()
            .and_then(|t| {
                t.descendants()
                    .into_iter()
                    .find(|e| e.name == "a:clrScheme")
                    .cloned()
            })
            .map(|scheme| {
                scheme
                    .elements()
                    .map(|c| {
                        let value = c
                            .elements()
                            .next()
                            .and_then(|v| v.attr("val").or_else(|| v.attr("lastClr")));
                        (c.local_name().to_string(), json!(value))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut runs = Vec::new();
        for part in self.slides.clone() {
            runs.extend(
                self.tree(&part)?
                    .descendants()
                    .into_iter()
                    .filter(|e| e.name == "a:rPr" || e.name == "a:endParaRPr")
                    .cloned(),
            );
        }
        let fonts = count_by(
            runs.iter()
                .filter_map(|r| r.child("a:latin").and_then(|l| l.attr("typeface"))),
        );
        let sizes = count_by(
            runs.iter()
                .filter_map(|r| r.attr("sz"))
                .filter_map(|s| s.parse::<u32>().ok())
                .map(|s| format!("{}", f64::from(s) / 100.0)),
        );
        let layouts: Vec<String> = self.layouts()?.into_iter().map(|(name, _)| name).collect();
        Ok(json!({
            "theme_fonts": {"major": font("a:majorFont"), "minor": font("a:minorFont")},
            "theme_colors": colors,
            "layouts": layouts,
            "fonts_in_use": fonts,
            "sizes_pt_in_use": sizes,
        }))
    }

    fn theme(&mut self) -> Result<Option<Element>, ErrorBody> {
        let Some(master) = self.related(&self.main.clone(), "slideMaster")? else {
            return Ok(None);
        };
        let Some(theme) = self.related(&master, "theme")? else {
            return Ok(None);
        };
        Ok(Some(self.package.doc(&theme)?.root.clone()))
    }
}
