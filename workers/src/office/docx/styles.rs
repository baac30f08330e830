//! The styles of a Word document (`word/styles.xml`): names, heading levels, styles in use.

use std::collections::BTreeMap;

use atelier_messages::{ErrorBody, ErrorCode};
use serde_json::{Value, json};

use super::{W_P, count_by, paragraph_style};
use crate::office::package::Package;
use crate::office::xml::Element;

/// Most available styles listed by `docx_get_styles`.
const LISTED_STYLES: usize = 60;

#[derive(Debug, Clone, Default)]
struct StyleDef {
    name: String,
    kind: String,
    based_on: Option<String>,
    outline_level: Option<u8>,
    hidden: bool,
}

/// The document's style definitions.
#[derive(Debug, Clone, Default)]
pub(crate) struct StyleBook {
    by_id: BTreeMap<String, StyleDef>,
    default_font: Option<String>,
    default_size_pt: Option<f64>,
}

impl StyleBook {
    /// Loads the styles part related to `main` (none is an empty book).
    pub(crate) fn load(package: &mut Package, main: &str) -> Result<StyleBook, ErrorBody> {
        let Some(rel) = package.rel_of_kind(main, "styles")? else {
            return Ok(StyleBook::default());
        };
        if !package.exists(&rel.target) {
            return Ok(StyleBook::default());
        }
        let root = &package.doc(&rel.target)?.root;
        let mut book = StyleBook::default();
        for style in root.children_named("w:style") {
            let Some(id) = style.attr("w:styleId") else {
                continue;
            };
            let val = |name: &str| style.child(name).and_then(|e| e.attr("w:val"));
            book.by_id.insert(
                id.clone(),
                StyleDef {
                    name: val("w:name").unwrap_or(id),
                    kind: style.attr("w:type").unwrap_or_default(),
                    based_on: val("w:basedOn"),
                    outline_level: style
                        .path(&["w:pPr", "w:outlineLvl"])
                        .and_then(|e| e.attr("w:val"))
                        .and_then(|v| v.parse::<u8>().ok()),
                    hidden: style.child("w:semiHidden").is_some()
                        || style.child("w:hidden").is_some(),
                },
            );
        }
        let run_defaults = root.path(&["w:docDefaults", "w:rPrDefault", "w:rPr"]);
        book.default_font = run_defaults
            .and_then(|r| r.child("w:rFonts"))
            .and_then(|f| f.attr("w:ascii"));
        book.default_size_pt = run_defaults
            .and_then(|r| r.child("w:sz"))
            .and_then(|s| s.attr("w:val"))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|half_points| half_points / 2.0);
        Ok(book)
    }

    /// The style's name (`Heading 1`), or the id when unknown.
    pub(crate) fn display_name(&self, id: &str) -> String {
        self.by_id
            .get(id)
            .map(|style| capitalize(&style.name))
            .unwrap_or_else(|| id.to_string())
    }

    /// The heading level (1-based) of a paragraph, from its own outline level, its style chain's,
    /// or its style name (`heading N`, `Title`).
    pub(crate) fn heading_level(&self, style_id: Option<&str>, paragraph: &Element) -> Option<u8> {
        if let Some(level) = paragraph
            .path(&["w:pPr", "w:outlineLvl"])
            .and_then(|e| e.attr("w:val"))
            .and_then(|v| v.parse::<u8>().ok())
        {
            return (level < 9).then_some(level + 1);
        }
        let mut current = style_id.map(str::to_string);
        for _ in 0..10 {
            let id = current?;
            let Some(style) = self.by_id.get(&id) else {
                return level_from_name(&id);
            };
            if let Some(level) = style.outline_level {
                return (level < 9).then_some(level + 1);
            }
            if let Some(level) = level_from_name(&style.name) {
                return Some(level);
            }
            current = style.based_on.clone();
        }
        None
    }

    /// The id of a paragraph or table style given by id or name (case and spaces ignored).
    pub(crate) fn resolve(&self, wanted: &str, kind: &str) -> Result<String, ErrorBody> {
        let squash = |s: &str| s.to_lowercase().replace(' ', "");
        let key = squash(wanted);
        let found = self
            .by_id
            .iter()
            .filter(|(_, style)| style.kind == kind)
            .find(|(id, style)| {
                id.as_str() == wanted || squash(&style.name) == key || squash(id) == key
            });
        if let Some((id, _)) = found {
            return Ok(id.clone());
        }
        let available: Vec<String> = self
            .by_id
            .values()
            .filter(|style| style.kind == kind && !style.hidden)
            .take(LISTED_STYLES)
            .map(|style| capitalize(&style.name))
            .collect();
        Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "the document has no {kind} style {wanted:?}; available: {}",
                available.join(", ")
            ),
        ))
    }

    /// `docx_get_styles`: defaults, styles and run formatting in use, available styles.
    pub(crate) fn in_use(&self, body: &Element) -> Value {
        let all = body.descendants();
        let paragraphs = count_by(all.iter().filter(|e| e.name == W_P).map(|p| {
            paragraph_style(p).map_or_else(|| "Normal".to_string(), |id| self.display_name(&id))
        }));
        let character = count_by(
            all.iter()
                .filter(|e| e.name == "w:rStyle")
                .filter_map(|e| e.attr("w:val"))
                .map(|id| self.display_name(&id)),
        );
        let tables = count_by(
            all.iter()
                .filter(|e| e.name == "w:tblStyle")
                .filter_map(|e| e.attr("w:val"))
                .map(|id| self.display_name(&id)),
        );
        let fonts = count_by(
            all.iter()
                .filter(|e| e.name == "w:rFonts")
                .filter_map(|e| e.attr("w:ascii")),
        );
        let sizes = count_by(
            all.iter()
                .filter(|e| e.name == "w:sz")
                .filter_map(|e| e.attr("w:val"))
                .filter_map(|v| v.parse::<u32>().ok())
                .map(|half| format!("{}", f64::from(half) / 2.0)),
        );
        let colors = count_by(
            all.iter()
                .filter(|e| e.name == "w:color")
                .filter_map(|e| e.attr("w:val")),
        );
        let bold_runs = all.iter().filter(|e| e.name == "w:b").count();
        let italic_runs = all.iter().filter(|e| e.name == "w:i").count();
        let available: Vec<String> = self
            .by_id
            .values()
            .filter(|style| style.kind == "paragraph" && !style.hidden)
            .take(LISTED_STYLES)
            .map(|style| capitalize(&style.name))
            .collect();
        json!({
            "defaults": {"font": self.default_font, "size_pt": self.default_size_pt},
            "paragraph_styles_in_use": paragraphs,
            "character_styles_in_use": character,
            "table_styles_in_use": tables,
            "run_formatting_in_use": {
                "fonts": fonts, "sizes_pt": sizes, "colors": colors,
                "bold_runs": bold_runs, "italic_runs": italic_runs,
            },
            "available_paragraph_styles": available,
        })
    }
}

fn level_from_name(name: &str) -> Option<u8> {
    let lower = name.to_lowercase();
    if lower == "title" {
        return Some(1);
    }
    let digits = lower.strip_prefix("heading").map(|rest| rest.trim())?;
    digits.parse::<u8>().ok().filter(|n| (1..=9).contains(n))
}

/// `heading 1` → `Heading 1` (Word stores built-in names in lower case).
fn capitalize(name: &str) -> String {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
