//! The system prompts of each phase, and the marker a model answers with when an item fails.

use atelier_messages::job::PlanItem;
use atelier_messages::store::{DraftDiff, ManifestEntry};

use super::types::WorkbenchContext;

/// The marker a model writes to declare a plan item failed.
const ITEM_FAILED_MARKER: &str = "ITEM_FAILED:";

/// The marker a model writes when nothing needs to change: a plan without items, or an item
/// done without a write.
pub(super) const NO_CHANGE_MARKER: &str = "NO_CHANGE_NEEDED:";

/// The kind of file whose content no tool reads (the manifest marks it opaque).
const OPAQUE_KIND: &str = "binary";

/// The kinds of file the tabular tools read as table `data`.
const TABLE_KINDS: &[&str] = &["csv", "tsv"];

/// What every prompt says about tables when the workbench has one (the seed's CSV
/// instructions; not in a compact prompt, whose steering reads tables by SQL anyway).
const TABLE_INSTRUCTIONS: &str = "Tables: count first (`SELECT count(*) FROM data`), then \
    prefer table_describe, table_stats, table_query and table_export over reading lines; page \
    long results with window_offset instead of pulling them whole. Each table's delimiter, \
    header and types were inferred: check them before a write or export that depends on them.";

/// The file manifest every prompt carries: each file's path, kind and size (no sizes in a
/// compact prompt: a small model reports a file's byte count as the answer to "how many"),
/// a file whose content the tools cannot read marked opaque; then, when a table is present,
/// how to work with tables.
fn manifest(files: &[ManifestEntry], compact: bool) -> String {
    if files.is_empty() {
        return "The workbench has no files.".to_string();
    }
    let mut out = String::from(
        "Files already in the workbench (do not ask the user to upload them; read them with the tools):\n",
    );
    for file in files {
        let opaque = if file.kind == OPAQUE_KIND {
            ", opaque: its content cannot be read"
        } else {
            ""
        };
        if compact {
            out.push_str(&format!("- {} ({}{opaque})\n", file.path, file.kind));
        } else {
            out.push_str(&format!(
                "- {} ({}, {} bytes{opaque})\n",
                file.path, file.kind, file.size
            ));
        }
    }
    let tables = files
        .iter()
        .any(|file| TABLE_KINDS.contains(&file.kind.as_str()));
    if tables && !compact {
        out.push_str(TABLE_INSTRUCTIONS);
        out.push('\n');
    }
    out
}

/// The workbench section every prompt ends with: the file manifest, then the structural maps,
/// the context items (situation, skills) and the earlier conversation, each clearly delimited.
/// A compact prompt shows a table's map as one line ([`compact_map`]).
pub(super) fn workbench(
    files: &[ManifestEntry],
    context: &WorkbenchContext,
    compact: bool,
) -> String {
    let mut out = manifest(files, compact);
    if !context.maps.is_empty() || context.maps_note.is_some() {
        out.push_str(
            "\n## Structural maps\nThe layout of each file; read content on demand with the tools \
             and specific selectors (sheet+range, section, slide, row ranges, queries).\n",
        );
        for file in &context.maps {
            let map = if compact {
                compact_map(&file.map)
            } else {
                file.map.clone()
            };
            out.push_str(&crate::window::map_block(&file.path, &map));
        }
        if let Some(note) = &context.maps_note {
            out.push_str(&format!("({note})\n"));
        }
    }
    if let Some(situation) = &context.situation {
        out.push_str(&format!(
            "\n## Situation context (follow it)\n<situation>\n{situation}\n</situation>\n"
        ));
    }
    for skill in &context.skills {
        out.push_str(&format!("\n## Skill: {}\n", skill.name));
        for (path, text) in &skill.files {
            out.push_str(&format!(
                "<skill-file path=\"{path}\">\n{text}\n</skill-file>\n"
            ));
        }
    }
    if !context.earlier.is_empty() || !context.recent.is_empty() {
        out.push_str(&format!(
            "\n{}\n## Earlier conversation on this workbench (oldest first)\n",
            crate::window::CONVERSATION_OPEN
        ));
        if !context.earlier.is_empty() {
            out.push_str("Summary of older messages:\n");
            for line in &context.earlier {
                out.push_str(&format!("- {line}\n"));
            }
        }
        for message in &context.recent {
            out.push_str(&format!(
                "[{} {}]\n{}\n",
                message.id, message.role, message.text
            ));
        }
        out.push_str(crate::window::CONVERSATION_CLOSE);
        out.push('\n');
    }
    out
}

/// A table's map (`row_count` and `columns`, as `table_get_map` gives it) as one line a small
/// model can read the numbers off; any other map as it is.
pub(super) fn compact_map(map: &str) -> String {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(map) else {
        return map.to_string();
    };
    let rows = value.get("row_count").and_then(serde_json::Value::as_u64);
    let columns = value.get("columns").and_then(serde_json::Value::as_array);
    let (Some(rows), Some(columns)) = (rows, columns) else {
        return map.to_string();
    };
    let names: Vec<String> = columns
        .iter()
        .filter_map(|column| {
            let name = sql_name(column.get("name")?.as_str()?);
            Some(
                match column
                    .get("inferred_type")
                    .and_then(serde_json::Value::as_str)
                {
                    Some(kind) if kind != "string" => format!("{name} ({kind})"),
                    _ => name.to_string(),
                },
            )
        })
        .collect();
    format!(
        "{rows} data rows (the header row not counted); {} columns: {}",
        names.len(),
        names.join(", ")
    )
}

/// A column's name as SQL reads it: double-quoted when it is not a plain identifier
/// (`"Unit Price"`), so a model that copies it into a query copies the quotes too.
fn sql_name(name: &str) -> String {
    let plain = name
        .chars()
        .enumerate()
        .all(|(index, c)| c == '_' || c.is_ascii_alphabetic() || (index > 0 && c.is_ascii_digit()));
    if plain && !name.is_empty() {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

pub(super) fn research(workbench: &str, manifest: &str) -> String {
    format!(
        "You are in the Research phase of a job on the workbench `{workbench}`. Use the read-only tools to \
         learn what the files contain that matters for the request. Do not change anything. When \
         you know enough, answer with concise research notes (facts, file structure, numbers) and \
         no tool calls.\n\n{manifest}"
    )
}

/// The checklist line's form, with its optional targets.
const CHECKLIST_FORM: &str = "`- [ ] N. label — description → file`";
/// The form of a target's contract line under its item ([`crate::contract`]).
const CONTRACT_FORM: &str = "`  - file: KIND`";

/// The plan prompt. `asks_for`: why the request asks for an artefact, when it does; then the
/// prompt offers no way to answer that nothing needs to change (a small model copies such a
/// way out, reason and all), and says the plan must write what the request asks for. The way
/// out is offered only to a request that asks a question (`asks_question`,
/// [`crate::request::asks_a_question`]). `texts`: the workbench has text files, whose figures
/// a source query reads ([`crate::contract::review::Sources`]).
pub(super) fn plan(
    research: &str,
    manifest: &str,
    asks_for: Option<&str>,
    asks_question: bool,
    texts: bool,
) -> String {
    let from_text = if texts {
        "; one whose values come from a text file (.txt, .md) ends it with `from`, that file's \
         path, `=` and a SELECT over `figures`, the text's numbers one row each (line, label, \
         value, unit)"
    } else {
        ""
    };
    let ending = match asks_for {
        Some(why) => format!(
            "The request asks for a file to be written or changed ({why}): the plan must hold \
             the items that do it."
        ),
        None if asks_question => format!(
            "If the request is only a question and no file needs to change, answer only \
             `{NO_CHANGE_MARKER}` followed by the answer to the question in your own words."
        ),
        None => "Plan the steps that do what the request asks: an item that changes, adds or \
                 removes a file names it as its target."
            .to_string(),
    };
    format!(
        "You are in the Plan phase. Write a checklist of the steps that fulfil the request, one per \
         line, exactly in the form {CHECKLIST_FORM}, where `→ file` names the workbench file (or \
         files, comma-separated) the item writes, changes or deletes — a path inside the workbench; \
         leave it out for an item that only reads. Under an item, say what each file it writes \
         must hold, one line per file: {CONTRACT_FORM}, KIND one of number (one number alone), \
         list (one value per line; `of N` when the count is known), table (a CSV; its columns in \
         parentheses), text, edit (an existing file changed in place; `at B2, Summary!C3` for \
         the cells it sets, `at slide 2` or `at paragraph 5` for the slides or paragraphs it \
         changes, numbered as read_file numbers them), absent (an existing file the item \
         deletes or moves away); a number, list or table whose values come from a workbench table ends its line with \
         `from`, that table's path, `=` and the SELECT that gives them (the table is \
         `data`){from_text}. The engine runs those queries and checks the written files against these lines. Keep it short (1 to 8 \
         items); each item must be doable with the workbench tools. {ending}\n\n\
         Research notes:\n{research}\n\n{manifest}"
    )
}

/// What the model is told when its plan said nothing needs to change for a request that asks
/// for an artefact.
pub(super) fn refuse_no_change_plan(why: &str) -> String {
    format!(
        "That answer was refused: the request asks for a file to be written or changed ({why}), \
         so the job cannot end without a change. Write the checklist of the steps that do it, one \
         per line, in the form {CHECKLIST_FORM}."
    )
}

pub(super) struct ItemContext<'a> {
    pub item: &'a PlanItem,
    pub total: u32,
    pub request: &'a str,
    pub research: &'a str,
    pub plan_md: &'a str,
    pub manifest: &'a str,
    pub previous_failure: Option<&'a str>,
    /// Why the request asks for an artefact, when it does.
    pub asks_for: Option<&'a str>,
    /// A compact prompt: one filled-in call that writes the item's first target.
    pub compact: bool,
    /// What the item's contract sources give (the values its targets must hold).
    pub sources: Option<&'a str>,
}

/// The item's contracts as the implement prompt states them: ` (the engine checks: …)`.
fn contracts(item: &PlanItem) -> String {
    if item.contracts.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = item.contracts.iter().map(crate::contract::render).collect();
    format!(
        ", and the engine checks what they hold: {}",
        lines.join("; ")
    )
}

pub(super) fn implement(context: &ItemContext<'_>) -> String {
    let item = context.item;
    let targets = if item.targets.is_empty() {
        String::new()
    } else {
        format!(
            " This item is done only when it has written {}{}.",
            item.targets.join(", "),
            contracts(item)
        )
    };
    // The way out only where the engine may take it: an item that names no file, for a
    // request that asks for none.
    let no_change = if item.targets.is_empty() && context.asks_for.is_none() {
        format!(
            " If the workbench already satisfies it and no tool call is needed, answer \
             `{NO_CHANGE_MARKER}` followed by why, in your own words."
        )
    } else {
        String::new()
    };
    let mut prompt = format!(
        "You are in the Implement phase, working on plan item {} of {}: {} — {}.{targets}\n\
         Use the tools to do exactly this item. Every write lands in the draft, never in the \
         published files. When the item is done, answer with a one-line result and no tool calls. \
         If it cannot be done, answer `{ITEM_FAILED_MARKER} <reason>`.{no_change} If the work \
         shows a step the plan lacks, add it at the end of your answer as a new checklist line \
         numbered after the plan's last item.\n\nUser request:\n{}\n\n\
         Research notes:\n{}\n\nPlan:\n{}\n\n{}",
        item.index,
        context.total,
        item.label,
        item.description,
        context.request,
        context.research,
        context.plan_md,
        context.manifest
    );
    if let Some(example) = context
        .compact
        .then(|| {
            item.targets
                .first()
                .and_then(|target| write_example(target, context.request))
        })
        .flatten()
    {
        prompt.push_str(&format!(
            "\n\nFor example, to write {}:\n{example}",
            item.targets[0]
        ));
    }
    if let Some(sources) = context.sources {
        prompt.push_str(&format!(
            "\n\nThe engine ran the plan's source queries; the targets must hold:\n{sources}"
        ));
    }
    if let Some(reason) = context.previous_failure {
        prompt.push_str(&format!(
            "\n\nThe previous attempt failed: {reason}. Try another way."
        ));
    }
    prompt
}

/// The placeholders of the filled-in write calls: a write carrying one copied the example.
pub(super) const EXAMPLE_TEXT: &str = "<the text the request asks for>";
pub(super) const EXAMPLE_SEARCH: &str = "<text to find>";
pub(super) const EXAMPLE_REPLACE: &str = "<new text>";
pub(super) const EXAMPLE_SHEET: &str = "<sheet>";
pub(super) const EXAMPLE_VALUE: &str = "<value>";
pub(super) const EXAMPLE_PLACEHOLDERS: &[&str] = &[
    EXAMPLE_TEXT,
    EXAMPLE_SEARCH,
    EXAMPLE_REPLACE,
    EXAMPLE_SHEET,
    EXAMPLE_VALUE,
];

/// A filled-in call that writes `target`, by its kind (none for kinds without a simple write);
/// a document's edit is the operation `request` names: appending a paragraph, else replacing
/// text.
fn write_example(target: &str, request: &str) -> Option<String> {
    let appends = crate::request::names_operation(request, "append_paragraph")
        && !crate::request::names_operation(request, "replace_text");
    let (_, extension) = target.rsplit_once('.')?;
    let parameters = match extension.to_lowercase().as_str() {
        "txt" | "md" | "csv" | "tsv" | "json" | "html" | "xml" | "yaml" | "yml" => {
            format!(r#"{{"path": "{target}", "content": "{}"}}"#, EXAMPLE_TEXT)
        }
        "docx" if appends => format!(
            r#"{{"path": "{target}", "operations": [{{"op": "append_paragraph", "text": "{}"}}]}}"#,
            EXAMPLE_TEXT
        ),
        "docx" => format!(
            r#"{{"path": "{target}", "operations": [{{"op": "replace_text", "search": "{}", "replace": "{}"}}]}}"#,
            EXAMPLE_SEARCH, EXAMPLE_REPLACE
        ),
        "xlsx" => format!(
            r#"{{"path": "{target}", "operations": [{{"op": "set_cells", "sheet": "{}", "cells": [{{"cell": "B2", "value": "{}"}}]}}]}}"#,
            EXAMPLE_SHEET, EXAMPLE_VALUE
        ),
        _ => return None,
    };
    let tool = match extension.to_lowercase().as_str() {
        "docx" => "docx_operations",
        "xlsx" => "xlsx_operations",
        _ => "write_text_file",
    };
    Some(format!(
        r#"{{"tool": "{tool}", "parameters": {parameters}, "terminate": false}}"#
    ))
}

pub(super) fn summary(plan_md: &str, manifest: &str) -> String {
    format!(
        "You are in the Summary phase. Tell the user, briefly and concretely, what was done and \
         what is in the draft for them to review (publish or discard). Mention failed items.\n\n\
         Plan with results:\n{plan_md}\n\n{manifest}"
    )
}

/// The draft's real changes as the store reports them, appended to the model's summary so the
/// user reads what happened next to what the model says happened.
pub(super) fn draft_changes(diff: &DraftDiff) -> String {
    if diff.added.is_empty() && diff.modified.is_empty() && diff.deleted.is_empty() {
        return "Draft changes: none (no file differs from the published state).".to_string();
    }
    let mut out = String::from("Draft changes (review, then publish or discard):\n");
    for (label, paths) in [
        ("added", &diff.added),
        ("modified", &diff.modified),
        ("deleted", &diff.deleted),
    ] {
        for path in paths {
            out.push_str(&format!("- {label}: {path}\n"));
        }
    }
    out.trim_end().to_string()
}

/// The reason a model gave for failing an item, if its answer carries the marker.
pub(super) fn item_failure(answer: &str) -> Option<String> {
    marked(answer, ITEM_FAILED_MARKER)
}

/// The reason a model gave that nothing needs to change, if its answer carries the marker
/// followed by a reason (the marker alone is no answer).
pub(super) fn no_change(answer: &str) -> Option<String> {
    marked(answer, NO_CHANGE_MARKER).filter(|reason| !reason.is_empty())
}

/// The files plan items changed without naming them, a line per item (empty when none did).
pub(super) fn unnamed_changes(items: &[PlanItem]) -> String {
    items
        .iter()
        .filter(|item| !item.targets.is_empty())
        .filter_map(|item| {
            let unnamed = item.unnamed_changes();
            (!unnamed.is_empty()).then(|| {
                format!(
                    "Item {} ({}) also changed files it did not name: {}.",
                    item.index,
                    item.label,
                    unnamed.join(", ")
                )
            })
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text after `marker` on the first line that starts with it.
fn marked(answer: &str, marker: &str) -> Option<String> {
    answer
        .lines()
        .find_map(|line| line.trim().strip_prefix(marker))
        .map(|reason| reason.trim().to_string())
}

/// What the model is told when a phase's answer is not acceptable yet.
pub(super) fn nudge_empty() -> String {
    "Your answer was empty. Use the tools to look at the files, then answer with your findings \
     as text."
        .to_string()
}

pub(super) fn nudge_plan(asks_for: Option<&str>) -> String {
    let or_no_change = match asks_for {
        Some(_) => String::new(),
        None => format!(
            ", or answer only `{NO_CHANGE_MARKER}` and the answer to the question if the request is \
             only a question"
        ),
    };
    format!(
        "Your answer is not a checklist. Write the plan again, one item per line, exactly in the \
         form `- [ ] N. label — description`, with your own steps for the user's request and \
         its files (for example `- [ ] 1. <what to do> — <how> → <file it writes>`){or_no_change}."
    )
}

/// What the model is told when its plan names none of the files the request asks for.
pub(super) fn nudge_targets(unplanned: &[String]) -> String {
    let list = unplanned.join(", ");
    format!(
        "The request names {list}, which the workbench does not have, and no item of the plan \
         writes it. Write the plan again so that the item that writes each file names it as \
         its target (`→ {}`).",
        unplanned.first().map(String::as_str).unwrap_or_default()
    )
}

pub(super) fn nudge_no_tool_call(asks_for: Option<&str>) -> String {
    let or_no_change = match asks_for {
        Some(_) => String::new(),
        None => format!(
            ", or answer `{NO_CHANGE_MARKER}` and why if the workbench already satisfies it"
        ),
    };
    format!(
        "You made no successful tool call, so nothing was done for this item. Carry out the item \
         with the tools now{or_no_change}, or `{ITEM_FAILED_MARKER} <reason>` if it cannot be done."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workbench_section_orders_manifest_maps_context_and_conversation() {
        use super::super::types::{FileMapText, PriorMessage, SkillText};
        let files = vec![ManifestEntry {
            path: "plan.csv".into(),
            digest: "d".into(),
            size: 10,
            kind: "csv".into(),
        }];
        let context = WorkbenchContext {
            maps: vec![FileMapText {
                path: "plan.csv".into(),
                map: "columns: a, b; 5 rows".into(),
            }],
            maps_note: None,
            situation: Some("Q3 close".into()),
            skills: vec![SkillText {
                name: "finance".into(),
                files: vec![("SKILL.md".into(), "Round to cents".into())],
            }],
            earlier: vec!["m1 user: hello".into()],
            recent: vec![PriorMessage {
                id: "m2".into(),
                role: "assistant".into(),
                text: "Hi there".into(),
            }],
        };
        let text = workbench(&files, &context, false);
        let order = [
            "plan.csv (csv",
            "columns: a, b",
            "Q3 close",
            "Round to cents",
            "m1 user: hello",
            "Hi there",
        ]
        .map(|needle| text.find(needle).unwrap_or(usize::MAX));
        assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{text}");
        let bare = workbench(&files, &WorkbenchContext::default(), false);
        assert!(!bare.contains("##"), "{bare}");
        // A table brings the table instructions; an opaque file is marked.
        assert!(
            bare.contains("count first (`SELECT count(*) FROM data`)"),
            "{bare}"
        );
        let mut more = files.clone();
        more.push(ManifestEntry {
            path: "logo.bin".into(),
            digest: "e".into(),
            size: 3,
            kind: OPAQUE_KIND.into(),
        });
        let listed = workbench(&more, &WorkbenchContext::default(), false);
        assert!(
            listed.contains("- logo.bin (binary, 3 bytes, opaque: its content cannot be read)"),
            "{listed}"
        );
        let compact = workbench(&more, &WorkbenchContext::default(), true);
        assert!(
            !compact.contains("count first") && compact.contains("(binary, opaque"),
            "{compact}"
        );
    }

    #[test]
    fn a_compact_prompt_shows_a_tables_map_as_one_line() {
        let map = r#"{"chunks":1,"column_count":3,"columns":[{"index":0,"inferred_type":"string","name":"Milestone"},{"index":1,"inferred_type":"date","name":"Due"},{"index":2,"inferred_type":"string","name":"Status"}],"has_header":true,"row_count":5}"#;
        assert_eq!(
            compact_map(map),
            "5 data rows (the header row not counted); 3 columns: Milestone, Due (date), Status"
        );
        // Names SQL reads only in double quotes are shown quoted.
        let spaced = r#"{"columns":[{"name":"Quantity","inferred_type":"integer"},{"name":"Unit Price","inferred_type":"float"}],"row_count":1}"#;
        assert_eq!(
            compact_map(spaced),
            r#"1 data rows (the header row not counted); 2 columns: Quantity (integer), "Unit Price" (float)"#
        );
        assert_eq!(
            compact_map("sections: Intro, Terms"),
            "sections: Intro, Terms"
        );
        assert_eq!(compact_map(r#"{"sheets": []}"#), r#"{"sheets": []}"#);
    }

    #[test]
    fn item_failure_marker_is_found_on_any_line() {
        assert_eq!(
            item_failure("tried\nITEM_FAILED: no such column").as_deref(),
            Some("no such column")
        );
        assert_eq!(item_failure("All done."), None);
    }
}
