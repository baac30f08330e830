//! Open Packaging Conventions over a [`Package`]: relationships (`_rels/*.rels`) with their
//! targets resolved to part names, content type overrides, and part naming.

use std::collections::BTreeSet;

use atelier_messages::ErrorBody;

use super::{Package, read_failed};
use crate::office::xml::{Document, Element, Node};

const CONTENT_TYPES: &str = "[Content_Types].xml";

/// One relationship of a part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rel {
    pub(crate) id: String,
    pub(crate) kind: String,
    /// The target resolved to a part name (external targets as given).
    pub(crate) target: String,
    pub(crate) external: bool,
}

/// `word/document.xml` → `word/_rels/document.xml.rels`.
pub(crate) fn rels_name(part: &str) -> String {
    match part.rsplit_once('/') {
        Some((dir, file)) => format!("{dir}/_rels/{file}.rels"),
        None => format!("_rels/{part}.rels"),
    }
}

/// Resolves a relationship target against the part that holds it.
pub(crate) fn resolve(part: &str, target: &str) -> String {
    let mut segments: Vec<&str> = if let Some(absolute) = target.strip_prefix('/') {
        return normalize_segments(absolute.split('/').collect());
    } else {
        part.rsplit_once('/')
            .map(|(dir, _)| dir.split('/').collect())
            .unwrap_or_default()
    };
    segments.extend(target.split('/'));
    normalize_segments(segments)
}

fn normalize_segments(segments: Vec<&str>) -> String {
    let mut out: Vec<&str> = Vec::new();
    for segment in segments {
        match segment {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out.join("/")
}

/// The target of `to` as written in the relationships of `from` (relative).
pub(crate) fn relative_target(from: &str, to: &str) -> String {
    let from_dir: Vec<&str> = from
        .rsplit_once('/')
        .map(|(dir, _)| dir.split('/').collect())
        .unwrap_or_default();
    let to_parts: Vec<&str> = to.split('/').collect();
    let common = from_dir
        .iter()
        .zip(to_parts.iter())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out: Vec<&str> = vec![".."; from_dir.len() - common];
    out.extend(&to_parts[common..]);
    out.join("/")
}

impl Package {
    /// The relationships of `part` (none when it has no rels part).
    pub(crate) fn rels(&mut self, part: &str) -> Result<Vec<Rel>, ErrorBody> {
        let name = rels_name(part);
        if !self.exists(&name) {
            return Ok(Vec::new());
        }
        let doc = self.doc(&name)?;
        Ok(doc
            .root
            .elements()
            .map(|rel| {
                let external = rel.attr("TargetMode").as_deref() == Some("External");
                let target = rel.attr("Target").unwrap_or_default();
                Rel {
                    id: rel.attr("Id").unwrap_or_default(),
                    kind: rel.attr("Type").unwrap_or_default(),
                    target: if external {
                        target
                    } else {
                        resolve(part, &target)
                    },
                    external,
                }
            })
            .collect())
    }

    /// The first relationship of `part` whose type ends with `/kind` (e.g. `officeDocument`).
    pub(crate) fn rel_of_kind(&mut self, part: &str, kind: &str) -> Result<Option<Rel>, ErrorBody> {
        let suffix = format!("/{kind}");
        Ok(self
            .rels(part)?
            .into_iter()
            .find(|rel| rel.kind.ends_with(&suffix)))
    }

    /// The package's main part (e.g. `word/document.xml`).
    pub(crate) fn main_part(&mut self, what: &str) -> Result<String, ErrorBody> {
        self.rel_of_kind("", "officeDocument")?
            .map(|rel| rel.target)
            .ok_or_else(|| {
                read_failed(format!(
                    "this {what} package has no main document part; it is damaged or not a {what}"
                ))
            })
    }

    /// Adds a relationship from `part` to `target` (a part name); returns its new id.
    pub(crate) fn add_rel(
        &mut self,
        part: &str,
        kind: &str,
        target: &str,
    ) -> Result<String, ErrorBody> {
        let name = rels_name(part);
        if !self.exists(&name) {
            let root = Element::new(
                "Relationships",
                &[(
                    "xmlns",
                    "http://schemas.openxmlformats.org/package/2006/relationships",
                )],
            );
            self.put(&name, Document::new(root));
        }
        let relative = relative_target(part, target);
        let doc = self.doc_mut(&name)?;
        let taken: BTreeSet<String> = doc.root.elements().filter_map(|r| r.attr("Id")).collect();
        let id = (1..)
            .map(|n| format!("rId{n}"))
            .find(|id| !taken.contains(id))
            .unwrap_or_default();
        doc.root.children.push(Node::Element(Element::new(
            "Relationship",
            &[("Id", &id), ("Type", kind), ("Target", &relative)],
        )));
        Ok(id)
    }

    /// Removes relationship `id` of `part`.
    pub(crate) fn remove_rel(&mut self, part: &str, id: &str) -> Result<(), ErrorBody> {
        let name = rels_name(part);
        if self.exists(&name) {
            self.doc_mut(&name)?
                .root
                .retain_elements(|rel| rel.attr("Id").as_deref() != Some(id));
        }
        Ok(())
    }

    /// Declares `part`'s content type.
    pub(crate) fn add_override(&mut self, part: &str, content_type: &str) -> Result<(), ErrorBody> {
        let part_name = format!("/{part}");
        let types = self.doc_mut(CONTENT_TYPES)?;
        types
            .root
            .retain_elements(|o| o.attr("PartName").as_deref() != Some(&part_name));
        types.root.children.push(Node::Element(Element::new(
            "Override",
            &[("PartName", &part_name), ("ContentType", content_type)],
        )));
        Ok(())
    }

    /// Removes a part together with its content type override and its relationships part.
    pub(crate) fn remove_part(&mut self, part: &str) -> Result<(), ErrorBody> {
        let part_name = format!("/{part}");
        self.doc_mut(CONTENT_TYPES)?
            .root
            .retain_elements(|o| o.attr("PartName").as_deref() != Some(&part_name));
        self.remove(part);
        self.remove(&rels_name(part));
        Ok(())
    }

    /// A part name `prefix{n}{suffix}` not yet used (n from 1).
    pub(crate) fn free_name(&self, prefix: &str, suffix: &str) -> String {
        let names = self.part_names();
        (1..)
            .map(|n| format!("{prefix}{n}{suffix}"))
            .find(|candidate| !names.contains(candidate))
            .unwrap_or_default()
    }
}
