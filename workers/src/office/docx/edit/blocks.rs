//! Body blocks by position: paragraphs and tables found by index (through content controls),
//! and inserted or removed by their child-index path from the body.

use atelier_messages::ErrorBody;

use super::invalid;
use crate::office::docx::W_P;
use crate::office::xml::{Element, Node};

/// Appends a block before the body's final `w:sectPr`; returns its child index.
pub(super) fn append_block(body: &mut Element, block: Element) -> usize {
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
pub(super) fn paragraph_path(body: &Element, index: usize) -> Result<Vec<usize>, ErrorBody> {
    let mut seen = 0;
    find_block(body, W_P, index, &mut seen, &mut Vec::new()).ok_or_else(|| {
        invalid(format!(
            "no paragraph {index}; the body has {seen} paragraphs"
        ))
    })
}

pub(super) fn find_block(
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

pub(super) fn insert_after(body: &mut Element, path: &[usize], block: Element) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    if let Some(parent) = at_path_mut(body, parent_path) {
        parent.children.insert(last + 1, Node::Element(block));
    }
}

pub(super) fn remove_at(body: &mut Element, path: &[usize]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    if let Some(parent) = at_path_mut(body, parent_path) {
        parent.children.remove(*last);
    }
}

/// The element at a child-index path.
pub(super) fn at_path_mut<'a>(element: &'a mut Element, path: &[usize]) -> Option<&'a mut Element> {
    let mut current = element;
    for i in path {
        current = match current.children.get_mut(*i)? {
            Node::Element(child) => child,
            _ => return None,
        };
    }
    Some(current)
}
