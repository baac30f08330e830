//! `pptx_operations`: slides added from layouts, text set in placeholders, bullets, notes,
//! deletions. Untouched parts are copied byte-for-byte.

use serde::Deserialize;
use serde_json::{Value, json};

use atelier_messages::{ErrorBody, ErrorCode};

use super::{Pptx, Role, placeholder_role};
use crate::office::ordered::apply_in_order;
use crate::office::xml::{Document, Element, Node};

const NS_A: &str = "http://schemas.openxmlformats.org/drawingml/2006/main";
const NS_R: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const NS_P: &str = "http://schemas.openxmlformats.org/presentationml/2006/main";
const REL: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const CT_SLIDE: &str = "application/vnd.openxmlformats-officedocument.presentationml.slide+xml";
const CT_NOTES: &str =
    "application/vnd.openxmlformats-officedocument.presentationml.notesSlide+xml";
const CT_NOTES_MASTER: &str =
    "application/vnd.openxmlformats-officedocument.presentationml.notesMaster+xml";
const CT_THEME: &str = "application/vnd.openxmlformats-officedocument.theme+xml";
/// Child order of `p:presentation`.
const PRESENTATION_ORDER: &[&str] = &[
    "p:sldMasterIdLst",
    "p:notesMasterIdLst",
    "p:handoutMasterIdLst",
    "p:sldIdLst",
    "p:sldSz",
    "p:notesSz",
];

/// One operation of a `pptx_operations` call. Slide indexes are 0-based.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum PptxOp {
    AddSlide {
        layout: Option<String>,
        title: Option<String>,
        body: Option<String>,
        bullets: Option<Vec<String>>,
        /// Where the new slide goes (default: last).
        position: Option<usize>,
        notes: Option<String>,
    },
    SetSlideText {
        #[serde(alias = "slide_index")]
        index: usize,
        title: Option<String>,
        body: Option<String>,
        bullets: Option<Vec<String>>,
    },
    AppendBullets {
        #[serde(alias = "slide_index")]
        index: usize,
        bullets: Vec<String>,
    },
    DeleteSlide {
        #[serde(alias = "slide_index")]
        index: usize,
    },
    SetNotes {
        #[serde(alias = "slide_index")]
        index: usize,
        text: String,
    },
}

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// Applies `ops` in order; returns the new presentation and one result per operation.
pub(crate) fn apply(bytes: Vec<u8>, ops: &[PptxOp]) -> Result<(Vec<u8>, Vec<Value>), ErrorBody> {
    let mut pptx = Pptx::open(bytes)?;
    let results = apply_in_order(&mut pptx, ops, Pptx::apply_one)?;
    Ok((pptx.package.finish()?, results))
}

/// Body text as paragraphs: `bullets`, else `body` split on line breaks.
fn body_lines(body: Option<&str>, bullets: Option<&[String]>) -> Option<Vec<String>> {
    match (bullets, body) {
        (Some(bullets), _) => Some(bullets.to_vec()),
        (None, Some(body)) => Some(body.split('\n').map(str::to_string).collect()),
        (None, None) => None,
    }
}

impl Pptx {
    fn apply_one(&mut self, op: &PptxOp) -> Result<Value, ErrorBody> {
        match op {
            PptxOp::AddSlide {
                layout,
                title,
                body,
                bullets,
                position,
                notes,
            } => {
                let index = self.add_slide(layout.as_deref(), *position)?;
                self.set_text(
                    index,
                    title.as_deref(),
                    body_lines(body.as_deref(), bullets.as_deref()),
                )?;
                if let Some(notes) = notes {
                    self.set_notes(index, notes)?;
                }
                Ok(json!({"op": "add_slide", "index": index, "slide_count": self.slides.len()}))
            }
            PptxOp::SetSlideText {
                index,
                title,
                body,
                bullets,
            } => {
                self.set_text(
                    *index,
                    title.as_deref(),
                    body_lines(body.as_deref(), bullets.as_deref()),
                )?;
                Ok(json!({"op": "set_slide_text", "index": index}))
            }
            PptxOp::AppendBullets { index, bullets } => {
                let shape = self.placeholder(*index, Role::Body)?;
                append_paragraphs(shape, bullets);
                Ok(json!({"op": "append_bullets", "index": index, "added": bullets.len()}))
            }
            PptxOp::DeleteSlide { index } => {
                self.delete_slide(*index)?;
                Ok(json!({"op": "delete_slide", "index": index, "slide_count": self.slides.len()}))
            }
            PptxOp::SetNotes { index, text } => {
                self.set_notes(*index, text)?;
                Ok(json!({"op": "set_notes", "index": index}))
            }
        }
    }

    fn find_layout(&mut self, wanted: Option<&str>) -> Result<String, ErrorBody> {
        let layouts = self.layouts()?;
        let pick = match wanted {
            Some(name) => layouts
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name.trim())),
            None => layouts
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("Title and Content"))
                .or_else(|| layouts.first()),
        };
        pick.map(|(_, part)| part.clone()).ok_or_else(|| {
            let names: Vec<&str> = layouts.iter().map(|(n, _)| n.as_str()).collect();
            invalid(format!(
                "no layout {:?}; the layouts are: {}",
                wanted.unwrap_or(""),
                names.join(", ")
            ))
        })
    }

    fn add_slide(
        &mut self,
        layout: Option<&str>,
        position: Option<usize>,
    ) -> Result<usize, ErrorBody> {
        let layout_part = self.find_layout(layout)?;
        let layout_tree = self
            .package
            .doc(&layout_part)?
            .root
            .path(&["p:cSld", "p:spTree"])
            .cloned()
            .unwrap_or_default();
        let mut tree = empty_tree();
        let mut next_id = 2;
        for shape in super::shapes(&layout_tree) {
            if matches!(placeholder_role(shape), Some(Role::Title | Role::Body)) {
                tree.children
                    .push(Node::Element(placeholder_from(shape, next_id)));
                next_id += 1;
            }
        }
        let slide = Element::new(
            "p:sld",
            &[("xmlns:a", NS_A), ("xmlns:r", NS_R), ("xmlns:p", NS_P)],
        )
        .with(Element::new("p:cSld", &[]).with(tree))
        .with(Element::new("p:clrMapOvr", &[]).with(Element::new("a:masterClrMapping", &[])));
        let part = self.package.free_name("ppt/slides/slide", ".xml");
        self.package.put(&part, Document::new(slide));
        self.package.add_override(&part, CT_SLIDE)?;
        self.package
            .add_rel(&part, &format!("{REL}/slideLayout"), &layout_part)?;
        let rel_id = self
            .package
            .add_rel(&self.main.clone(), &format!("{REL}/slide"), &part)?;
        let position = position.unwrap_or(self.slides.len()).min(self.slides.len());
        let presentation = &mut self.package.doc_mut(&self.main)?.root;
        let list = presentation.ensure_child("p:sldIdLst", PRESENTATION_ORDER);
        let id = list
            .children_named("p:sldId")
            .filter_map(|s| s.attr("id")?.parse::<u32>().ok())
            .max()
            .map_or(256, |max| max + 1);
        let entry = Element::new(
            "p:sldId",
            &[
                ("xmlns:r", NS_R),
                ("id", &id.to_string()),
                ("r:id", &rel_id),
            ],
        );
        let at = nth_element_index(list, "p:sldId", position);
        list.children.insert(at, Node::Element(entry));
        self.slides.insert(position, part);
        Ok(position)
    }

    fn delete_slide(&mut self, index: usize) -> Result<(), ErrorBody> {
        let part = self.slide_part(index)?;
        let main = self.main.clone();
        let rel = self
            .package
            .rels(&main)?
            .into_iter()
            .find(|r| r.target == part);
        if let Some(rel) = rel {
            self.package.remove_rel(&main, &rel.id)?;
            let list = self.package.doc_mut(&main)?.root.child_mut("p:sldIdLst");
            if let Some(list) = list {
                list.retain_elements(|s| s.attr("r:id").as_deref() != Some(rel.id.as_str()));
            }
        }
        if let Some(notes) = self.related(&part, "notesSlide")? {
            self.package.remove_part(&notes)?;
        }
        self.package.remove_part(&part)?;
        self.slides.remove(index);
        Ok(())
    }

    /// The slide's placeholder shape with `role`, created from the layout when missing.
    fn placeholder(&mut self, index: usize, role: Role) -> Result<&mut Element, ErrorBody> {
        let part = self.slide_part(index)?;
        let has = |tree: &Element| {
            super::shapes(tree)
                .iter()
                .any(|s| placeholder_role(s) == Some(role))
        };
        let tree = self.tree(&part)?;
        if !has(&tree) {
            let layout = self.related(&part, "slideLayout")?;
            let layout_tree = match layout {
                Some(layout) => self.tree(&layout)?,
                None => Element::default(),
            };
            let template = super::shapes(&layout_tree)
                .into_iter()
                .find(|s| placeholder_role(s) == Some(role))
                .cloned()
                .ok_or_else(|| {
                    invalid(format!(
                        "slide {index}'s layout has no {} placeholder",
                        role_name(role)
                    ))
                })?;
            let next_id = max_shape_id(&tree) + 1;
            let shape = placeholder_from(&template, next_id);
            let tree = tree_mut(&mut self.package.doc_mut(&part)?.root)?;
            tree.children.push(Node::Element(shape));
        }
        let tree = tree_mut(&mut self.package.doc_mut(&part)?.root)?;
        find_shape_mut(tree, role).ok_or_else(|| {
            invalid(format!(
                "slide {index} has no {} placeholder",
                role_name(role)
            ))
        })
    }

    fn set_text(
        &mut self,
        index: usize,
        title: Option<&str>,
        body: Option<Vec<String>>,
    ) -> Result<(), ErrorBody> {
        if let Some(title) = title {
            let lines: Vec<String> = title.split('\n').map(str::to_string).collect();
            set_paragraphs(self.placeholder(index, Role::Title)?, &lines);
        }
        if let Some(lines) = body {
            set_paragraphs(self.placeholder(index, Role::Body)?, &lines);
        }
        Ok(())
    }

    fn set_notes(&mut self, index: usize, text: &str) -> Result<(), ErrorBody> {
        let slide = self.slide_part(index)?;
        let notes = match self.related(&slide, "notesSlide")? {
            Some(notes) => notes,
            None => self.create_notes(&slide)?,
        };
        let lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        let tree = tree_mut(&mut self.package.doc_mut(&notes)?.root)?;
        let shape = find_notes_body(tree).ok_or_else(|| {
            invalid(format!(
                "the notes of slide {index} have no body placeholder"
            ))
        })?;
        set_paragraphs(shape, &lines);
        Ok(())
    }

    fn create_notes(&mut self, slide: &str) -> Result<String, ErrorBody> {
        let master = match self.related(&self.main.clone(), "notesMaster")? {
            Some(master) => master,
            None => self.create_notes_master()?,
        };
        let mut tree = empty_tree();
        tree.children.push(Node::Element(notes_body_shape(2)));
        let notes = Element::new(
            "p:notes",
            &[("xmlns:a", NS_A), ("xmlns:r", NS_R), ("xmlns:p", NS_P)],
        )
        .with(Element::new("p:cSld", &[]).with(tree))
        .with(Element::new("p:clrMapOvr", &[]).with(Element::new("a:masterClrMapping", &[])));
        let part = self.package.free_name("ppt/notesSlides/notesSlide", ".xml");
        self.package.put(&part, Document::new(notes));
        self.package.add_override(&part, CT_NOTES)?;
        self.package
            .add_rel(&part, &format!("{REL}/notesMaster"), &master)?;
        self.package
            .add_rel(&part, &format!("{REL}/slide"), slide)?;
        self.package
            .add_rel(slide, &format!("{REL}/notesSlide"), &part)?;
        Ok(part)
    }

    /// A minimal notes master (a body placeholder) with a copy of the slide master's theme.
    fn create_notes_master(&mut self) -> Result<String, ErrorBody> {
        let main = self.main.clone();
        let slide_master = self
            .related(&main, "slideMaster")?
            .ok_or_else(|| invalid("the presentation has no slide master".into()))?;
        let theme = self
            .related(&slide_master, "theme")?
            .ok_or_else(|| invalid("the slide master has no theme".into()))?;
        let theme_doc = self.package.doc(&theme)?.clone();
        let theme_part = self.package.free_name("ppt/theme/theme", ".xml");
        self.package.put(&theme_part, theme_doc);
        self.package.add_override(&theme_part, CT_THEME)?;
        let mut tree = empty_tree();
        tree.children.push(Node::Element(notes_body_shape(2)));
        let master = Element::new(
            "p:notesMaster",
            &[("xmlns:a", NS_A), ("xmlns:r", NS_R), ("xmlns:p", NS_P)],
        )
        .with(Element::new("p:cSld", &[]).with(tree))
        .with(Element::new(
            "p:clrMap",
            &[
                ("bg1", "lt1"),
                ("tx1", "dk1"),
                ("bg2", "lt2"),
                ("tx2", "dk2"),
                ("accent1", "accent1"),
                ("accent2", "accent2"),
                ("accent3", "accent3"),
                ("accent4", "accent4"),
                ("accent5", "accent5"),
                ("accent6", "accent6"),
                ("hlink", "hlink"),
                ("folHlink", "folHlink"),
            ],
        ));
        let part = self
            .package
            .free_name("ppt/notesMasters/notesMaster", ".xml");
        self.package.put(&part, Document::new(master));
        self.package.add_override(&part, CT_NOTES_MASTER)?;
        self.package
            .add_rel(&part, &format!("{REL}/theme"), &theme_part)?;
        let rel_id = self
            .package
            .add_rel(&main, &format!("{REL}/notesMaster"), &part)?;
        let presentation = &mut self.package.doc_mut(&main)?.root;
        presentation
            .ensure_child("p:notesMasterIdLst", PRESENTATION_ORDER)
            .children
            .push(Node::Element(Element::new(
                "p:notesMasterId",
                &[("xmlns:r", NS_R), ("r:id", &rel_id)],
            )));
        Ok(part)
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Title => "title",
        Role::Body => "body",
        Role::Other => "other",
    }
}

fn tree_mut(root: &mut Element) -> Result<&mut Element, ErrorBody> {
    root.path_mut(&["p:cSld", "p:spTree"])
        .ok_or_else(|| invalid("the slide has no shape tree".into()))
}

fn find_shape_mut(tree: &mut Element, role: Role) -> Option<&mut Element> {
    for child in tree.elements_mut() {
        if child.name == "p:sp" && placeholder_role(child) == Some(role) {
            return Some(child);
        }
        if child.name == "p:grpSp"
            && let Some(found) = find_shape_mut(child, role)
        {
            return Some(found);
        }
    }
    None
}

fn find_notes_body(tree: &mut Element) -> Option<&mut Element> {
    tree.elements_mut().find(|s| {
        s.name == "p:sp"
            && s.path(&["p:nvSpPr", "p:nvPr", "p:ph"])
                .and_then(|ph| ph.attr("type"))
                .as_deref()
                == Some("body")
    })
}

fn max_shape_id(tree: &Element) -> u32 {
    tree.descendants()
        .into_iter()
        .filter(|e| e.name == "p:cNvPr")
        .filter_map(|e| e.attr("id")?.parse().ok())
        .max()
        .unwrap_or(1)
}

/// The index in `parent.children` before which the `n`-th `name` child sits (or after the last).
fn nth_element_index(parent: &Element, name: &str, n: usize) -> usize {
    let positions: Vec<usize> = parent
        .children
        .iter()
        .enumerate()
        .filter(|(_, node)| matches!(node, Node::Element(e) if e.name == name))
        .map(|(i, _)| i)
        .collect();
    positions.get(n).copied().unwrap_or_else(|| {
        positions
            .last()
            .map_or(parent.children.len(), |last| last + 1)
    })
}

fn empty_tree() -> Element {
    Element::new("p:spTree", &[])
        .with(
            Element::new("p:nvGrpSpPr", &[])
                .with(Element::new("p:cNvPr", &[("id", "1"), ("name", "")]))
                .with(Element::new("p:cNvGrpSpPr", &[]))
                .with(Element::new("p:nvPr", &[])),
        )
        .with(
            Element::new("p:grpSpPr", &[]).with(
                Element::new("a:xfrm", &[])
                    .with(Element::new("a:off", &[("x", "0"), ("y", "0")]))
                    .with(Element::new("a:ext", &[("cx", "0"), ("cy", "0")]))
                    .with(Element::new("a:chOff", &[("x", "0"), ("y", "0")]))
                    .with(Element::new("a:chExt", &[("cx", "0"), ("cy", "0")])),
            ),
        )
}

/// A slide shape for a layout placeholder: same `p:ph`, geometry inherited, one empty paragraph.
fn placeholder_from(layout_shape: &Element, id: u32) -> Element {
    let ph = layout_shape
        .path(&["p:nvSpPr", "p:nvPr", "p:ph"])
        .cloned()
        .unwrap_or_else(|| Element::new("p:ph", &[]));
    let name = layout_shape
        .path(&["p:nvSpPr", "p:cNvPr"])
        .and_then(|c| c.attr("name"))
        .unwrap_or_else(|| "Placeholder".to_string());
    placeholder_shape(id, &name, ph)
}

fn placeholder_shape(id: u32, name: &str, ph: Element) -> Element {
    Element::new("p:sp", &[])
        .with(
            Element::new("p:nvSpPr", &[])
                .with(Element::new(
                    "p:cNvPr",
                    &[("id", &id.to_string()), ("name", name)],
                ))
                .with(
                    Element::new("p:cNvSpPr", &[])
                        .with(Element::new("a:spLocks", &[("noGrp", "1")])),
                )
                .with(Element::new("p:nvPr", &[]).with(ph)),
        )
        .with(Element::new("p:spPr", &[]))
        .with(
            Element::new("p:txBody", &[])
                .with(Element::new("a:bodyPr", &[]))
                .with(Element::new("a:lstStyle", &[]))
                .with(Element::new("a:p", &[])),
        )
}

fn notes_body_shape(id: u32) -> Element {
    placeholder_shape(
        id,
        "Notes Placeholder",
        Element::new("p:ph", &[("type", "body"), ("idx", "1")]),
    )
}

/// Replaces a shape's paragraphs, keeping `a:bodyPr`/`a:lstStyle` and the first paragraph's
/// paragraph and run properties.
fn set_paragraphs(shape: &mut Element, lines: &[String]) {
    let body = text_body(shape);
    let template = body
        .child("a:p")
        .cloned()
        .unwrap_or_else(|| Element::new("a:p", &[]));
    body.retain_elements(|e| e.name != "a:p");
    for line in lines {
        body.children
            .push(Node::Element(paragraph_like(&template, line)));
    }
    if lines.is_empty() {
        body.children.push(Node::Element(Element::new("a:p", &[])));
    }
}

/// Appends paragraphs formatted like the last one (an empty last paragraph is replaced).
fn append_paragraphs(shape: &mut Element, lines: &[String]) {
    let body = text_body(shape);
    let template = body
        .children_named("a:p")
        .last()
        .cloned()
        .unwrap_or_else(|| Element::new("a:p", &[]));
    let last_is_empty = super::paragraphs(&Element::default().with(template.clone()))
        .first()
        .is_none_or(|t| t.is_empty());
    let last = body
        .children
        .iter()
        .rposition(|n| matches!(n, Node::Element(e) if e.name == "a:p"));
    if last_is_empty && let Some(at) = last {
        body.children.remove(at);
    }
    for line in lines {
        body.children
            .push(Node::Element(paragraph_like(&template, line)));
    }
}

fn text_body(shape: &mut Element) -> &mut Element {
    shape.ensure_child("p:txBody", &["p:nvSpPr", "p:spPr", "p:style", "p:txBody"])
}

fn paragraph_like(template: &Element, text: &str) -> Element {
    let mut paragraph = Element::new("a:p", &[]);
    if let Some(props) = template.child("a:pPr") {
        paragraph = paragraph.with(props.clone());
    }
    let run_props = template
        .child("a:r")
        .and_then(|r| r.child("a:rPr"))
        .cloned();
    if !text.is_empty() {
        let mut run = Element::new("a:r", &[]);
        if let Some(props) = run_props {
            run = run.with(props);
        }
        paragraph = paragraph.with(run.with(Element::new("a:t", &[]).with_text(text)));
    }
    paragraph
}
