//! What an item's writes did to the files, from their results: which files a write changed,
//! and which writes changed nothing (a `replace_text` of a text by itself, a file written with
//! what it already held).
//!
//! A write's result names the file and its digest after the call; a digest equal to the one
//! the file had before the call means nothing changed. With a compact prompt such a write does
//! not count as the item's work: the model is told so, and the item goes on until its targets
//! hold something new. Once they all do, the model is shown what they now hold before it gives
//! the item's result (a small model otherwise answers `failed` after a right write, or `done`
//! after a wrong one, without looking).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::plan::same_file;
use crate::provider::ToolCall;

/// The most characters of a written text shown back to the model.
const SHOWN_CHARS: usize = 300;

/// A digest for a file a write changed without saying its digest (deleted, renamed).
const CHANGED: &str = "";

/// The files as an item's writes left them.
pub(super) struct Changes<'a> {
    /// Path → digest when the item started.
    before: &'a BTreeMap<String, String>,
    /// Path → digest after the last write that named it.
    now: BTreeMap<String, String>,
    /// Path → the text the last `write_text_file` put there.
    texts: BTreeMap<String, String>,
}

impl<'a> Changes<'a> {
    pub(super) fn new(before: &'a BTreeMap<String, String>) -> Self {
        Self {
            before,
            now: BTreeMap::new(),
            texts: BTreeMap::new(),
        }
    }

    /// The workbench's files when the item started.
    pub(super) fn sources(&self) -> Vec<String> {
        self.before.keys().cloned().collect()
    }

    /// Records a successful write: `paths` are the files `call` names, `result` its result.
    /// Returns the file it left as it was, if it changed nothing.
    pub(super) fn record(
        &mut self,
        call: &ToolCall,
        paths: &[String],
        result: &str,
    ) -> Option<String> {
        let result: Value = serde_json::from_str(result).unwrap_or(Value::Null);
        let written = result.get("path").and_then(Value::as_str);
        let digest = result.get("digest").and_then(Value::as_str);
        if let (Some(path), Some(digest)) = (written, digest) {
            let previous = self.now.get(path).or_else(|| self.before.get(path));
            if previous.is_some_and(|previous| previous == digest) {
                return Some(path.to_string());
            }
            self.now.insert(path.to_string(), digest.to_string());
            self.remember_text(call, path);
            return None;
        }
        for path in paths {
            self.now.insert(path.clone(), CHANGED.to_string());
            self.texts.remove(path);
        }
        None
    }

    fn remember_text(&mut self, call: &ToolCall, path: &str) {
        let text = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|arguments| arguments.get("content")?.as_str().map(str::to_string));
        match text {
            Some(text) => self.texts.insert(path.to_string(), text),
            None => self.texts.remove(path),
        };
    }

    /// True when every target differs from what it was when the item started.
    pub(super) fn cover(&self, targets: &[String]) -> bool {
        !targets.is_empty()
            && targets.iter().all(|target| {
                self.now.iter().any(|(path, digest)| {
                    same_file(path, target) && self.before.get(path) != Some(digest)
                })
            })
    }

    /// What the targets now hold, as the model is told before it gives the item's result.
    pub(super) fn report(&self, targets: &[String]) -> String {
        let lines: Vec<String> = targets
            .iter()
            .map(|target| {
                let text = self
                    .texts
                    .iter()
                    .find(|(path, _)| same_file(path, target))
                    .map(|(_, text)| text);
                match text {
                    Some(text) => format!("{target} now holds: «{}»", shown(text)),
                    None => format!("{target} is changed in the draft"),
                }
            })
            .collect();
        format!(
            "{}.\nIf that is what the item asks, its status is done; if not, failed, saying \
             what is wrong.",
            lines.join("; ")
        )
    }
}

/// What the model is told about a write that changed nothing.
pub(super) fn unchanged_note(path: &str) -> String {
    format!(
        "\n[nothing changed: {path} holds exactly what it held before this call; the item needs \
         {path} to hold what the request asks for]"
    )
}

fn shown(text: &str) -> String {
    let mut shown: String = text.chars().take(SHOWN_CHARS).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(content: &str) -> ToolCall {
        ToolCall {
            id: "call_t1".into(),
            name: "write_text_file".into(),
            arguments: serde_json::json!({"path": "count.txt", "content": content}).to_string(),
        }
    }

    fn result(path: &str, digest: &str) -> String {
        serde_json::json!({"path": path, "digest": digest, "bytes_written": 1}).to_string()
    }

    #[test]
    fn a_write_counts_when_it_changes_the_file() {
        let before = BTreeMap::from([
            ("launch_plan.csv".to_string(), "d0".to_string()),
            ("invoice.docx".to_string(), "i0".to_string()),
        ]);
        let mut changes = Changes::new(&before);
        assert_eq!(changes.sources(), ["invoice.docx", "launch_plan.csv"]);
        let targets = ["count.txt".to_string()];
        assert!(!changes.cover(&targets));
        assert_eq!(
            changes.record(&write("5"), &[], &result("count.txt", "c1")),
            None
        );
        assert!(changes.cover(&targets));
        assert_eq!(
            changes.report(&targets),
            "count.txt now holds: «5».\nIf that is what the item asks, its status is done; if \
             not, failed, saying what is wrong."
        );
        // The same content again changes nothing.
        assert_eq!(
            changes.record(&write("5"), &[], &result("count.txt", "c1")),
            Some("count.txt".to_string())
        );
        // A docx edit that left the file as it was (its text replaced by itself).
        let replace = ToolCall {
            name: "docx_operations".into(),
            arguments: r#"{"path":"invoice.docx","operations":[]}"#.into(),
            ..write("")
        };
        let docx = ["invoice.docx".to_string()];
        assert_eq!(
            changes.record(&replace, &[], &result("invoice.docx", "i0")),
            Some("invoice.docx".to_string())
        );
        assert!(!changes.cover(&docx));
        assert_eq!(
            changes.record(&replace, &[], &result("invoice.docx", "i1")),
            None
        );
        assert!(changes.cover(&docx));
        assert!(
            changes
                .report(&docx)
                .starts_with("invoice.docx is changed in the draft.")
        );
        // A write whose result names no digest (a deletion) changes what it names.
        let delete = ToolCall {
            name: "delete_file".into(),
            ..write("")
        };
        let csv = ["launch_plan.csv".to_string()];
        assert_eq!(changes.record(&delete, &csv, r#"{"deleted":true}"#), None);
        assert!(changes.cover(&csv));
        assert!(unchanged_note("count.txt").contains("nothing changed: count.txt holds"));
    }
}
