//! New runs of text with direct formatting (bold, italic, underline, size, color, font), tabs
//! and line breaks as Word writes them.

use atelier_messages::ErrorBody;

use super::{RunSpec, invalid};
use crate::office::xml::Element;

/// A `w:r` for `spec`.
pub(super) fn new_run(spec: &RunSpec) -> Result<Element, ErrorBody> {
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
pub(super) fn add_text(mut run: Element, text: &str) -> Element {
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
fn hex_color(color: &str) -> Result<String, ErrorBody> {
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
