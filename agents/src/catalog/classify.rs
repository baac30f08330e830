//! The action class of one call: what it would do to the workbench given its arguments and the
//! files there now. A write that removes or replaces content is destructive even when its tool
//! usually only adds: deleting a sheet, slide or paragraph, replacing a sheet, or writing over
//! an existing file.

use atelier_messages::approval::ActionClass;
use atelier_messages::path;
use atelier_messages::store::ManifestEntry;
use atelier_messages::tool::ToolName;
use serde_json::Value;

use super::ToolSpec;

/// A call's class and, when it is destructive, what makes it so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub class: ActionClass,
    pub why: Option<String>,
}

impl Classified {
    fn of(class: ActionClass) -> Self {
        Self { class, why: None }
    }

    fn destructive(why: String) -> Self {
        Self {
            class: ActionClass::Destructive,
            why: Some(why),
        }
    }
}

/// Document operations that remove content.
const REMOVING_OPERATIONS: [&str; 3] = ["delete_sheet", "delete_paragraph", "delete_slide"];

/// The class of calling `spec` with `args` on a workbench whose content that a job must not
/// lose without asking is `files`: the files that were there before the job started. A file
/// the job itself created is its own work: writing over it, deleting or renaming it, or
/// removing a part of it loses nothing anyone else had, so it is not destructive.
pub fn classify(spec: &ToolSpec, args: &Value, files: &[ManifestEntry]) -> Classified {
    let text = |name: &str| args.get(name).and_then(Value::as_str);
    let existing = |name: &str| {
        text(name)
            .and_then(|raw| path::normalize(raw).ok())
            .filter(|wanted| files.iter().any(|entry| &entry.path == wanted))
    };
    match spec.name {
        ToolName::DeleteFile => existing("path")
            .map(|path| Classified::destructive(format!("deletes {path}")))
            .unwrap_or_else(|| Classified::of(ActionClass::Additive)),
        ToolName::RenameFile => existing("path")
            .map(|path| Classified::destructive(format!("renames {path}")))
            .unwrap_or_else(|| Classified::of(ActionClass::Additive)),
        ToolName::WriteTextFile => existing("path")
            .map(|path| Classified::destructive(format!("overwrites {path}")))
            .unwrap_or_else(|| Classified::of(spec.action_class)),
        ToolName::TableExport => existing("target_path")
            .map(|path| Classified::destructive(format!("overwrites {path}")))
            .unwrap_or_else(|| Classified::of(spec.action_class)),
        ToolName::TableUpdateFromExport if text("mode") == Some("replace_sheet") => {
            existing("target_path")
                .map(|path| {
                    let sheet = text("sheet").unwrap_or("a sheet");
                    Classified::destructive(format!("replaces sheet {sheet} of {path}"))
                })
                .unwrap_or_else(|| Classified::of(spec.action_class))
        }
        ToolName::XlsxOperations | ToolName::DocxOperations | ToolName::PptxOperations => {
            let removing = removing_operation(args).zip(existing("path"));
            removing
                .map(|(op, path)| Classified::destructive(format!("{op} in {path}")))
                .unwrap_or_else(|| Classified::of(spec.action_class))
        }
        _ => Classified::of(spec.action_class),
    }
}

/// The first operation of a `*_operations` call that removes content.
fn removing_operation(args: &Value) -> Option<&str> {
    args.get("operations")?
        .as_array()?
        .iter()
        .filter_map(|operation| operation.get("op").and_then(Value::as_str))
        .find(|op| REMOVING_OPERATIONS.contains(op))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::find;
    use serde_json::json;

    fn files() -> Vec<ManifestEntry> {
        ["plan.csv", "out/q3.xlsx", "a.docx", "a.pptx"]
            .into_iter()
            .map(|path| ManifestEntry {
                path: path.into(),
                digest: "ab".repeat(32),
                size: 1,
                kind: path::kind_of(path).into(),
            })
            .collect()
    }

    fn class_of(tool: &str, args: serde_json::Value) -> ActionClass {
        let spec = find(tool).unwrap_or_else(|| panic!("{tool} is in the catalog"));
        classify(&spec, &args, &files()).class
    }

    #[test]
    fn removing_or_replacing_content_is_destructive() {
        use ActionClass::{Additive, Destructive, Navigational};
        let cases = [
            ("read_file", json!({"path": "plan.csv"}), Navigational),
            ("delete_file", json!({"path": "plan.csv"}), Destructive),
            (
                "rename_file",
                json!({"path": "plan.csv", "new_path": "a.csv"}),
                Destructive,
            ),
            (
                "write_text_file",
                json!({"path": "notes.md", "content": "x"}),
                Additive,
            ),
            (
                "write_text_file",
                json!({"path": "./plan.csv", "content": "x"}),
                Destructive,
            ),
            (
                "table_export",
                json!({"path": "plan.csv", "target_path": "new.csv"}),
                Additive,
            ),
            (
                "table_export",
                json!({"path": "plan.csv", "target_path": "out/q3.xlsx"}),
                Destructive,
            ),
            (
                "table_update_from_export",
                json!({"target_path": "out/q3.xlsx", "mode": "append_rows"}),
                Additive,
            ),
            (
                "table_update_from_export",
                json!({"target_path": "out/q3.xlsx", "mode": "replace_sheet"}),
                Destructive,
            ),
            (
                "table_update_from_export",
                json!({"target_path": "new.xlsx", "mode": "replace_sheet"}),
                Additive,
            ),
            (
                "xlsx_operations",
                json!({"path": "out/q3.xlsx", "operations": [{"op": "set_cells"}]}),
                Additive,
            ),
            (
                "xlsx_operations",
                json!({"path": "out/q3.xlsx", "operations": [{"op": "set_cells"}, {"op": "delete_sheet"}]}),
                Destructive,
            ),
            (
                "docx_operations",
                json!({"path": "a.docx", "operations": [{"op": "delete_paragraph"}]}),
                Destructive,
            ),
            (
                "pptx_operations",
                json!({"path": "a.pptx", "operations": [{"op": "delete_slide"}]}),
                Destructive,
            ),
            // A file the job created (not among the files before it) is its own work.
            ("delete_file", json!({"path": "mine.txt"}), Additive),
            (
                "write_text_file",
                json!({"path": "islands.csv", "content": "x"}),
                Additive,
            ),
            (
                "xlsx_operations",
                json!({"path": "mine.xlsx", "operations": [{"op": "delete_sheet"}]}),
                Additive,
            ),
        ];
        for (tool, args, expected) in cases {
            assert_eq!(class_of(tool, args.clone()), expected, "{tool} {args}");
        }
    }

    #[test]
    fn a_destructive_call_says_why() {
        let spec = find("write_text_file").unwrap_or_else(|| panic!("in the catalog"));
        let classified = classify(&spec, &json!({"path": "plan.csv"}), &files());
        assert_eq!(classified.why.as_deref(), Some("overwrites plan.csv"));
    }
}
