//! `replace_text`: every occurrence of a string in the body, headers and footers, also when
//! it spans several runs; the replacement takes the formatting of the run where a match starts.

use serde_json::{Value, json};

use atelier_messages::ErrorBody;

use super::blocks::at_path_mut;
use super::invalid;
use crate::office::docx::{Docx, W_P, paragraph_text};
use crate::office::xml::{Element, Node};

impl Docx {
    pub(super) fn replace_text(&mut self, search: &str, replace: &str) -> Result<Value, ErrorBody> {
        if search.is_empty() {
            return Err(invalid("replace_text: `search` is empty".into()));
        }
        if search == replace {
            return Err(invalid(format!(
                "replace_text: `replace` is `search` itself ({search:?}), which changes nothing; \
                 put the new text in `replace`"
            )));
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
pub(super) fn splice(texts: &mut [String], start: usize, end: usize, replace: &str) {
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
