//! Which tools a loop's next turn offers, and whether it must call one: with a compact prompt
//! an item is steered from reading to writing its targets to answering.

use atelier_messages::job::Phase;
use atelier_messages::tool::ToolName;
use serde_json::Value;

use crate::catalog::{self, ToolSpec};
use crate::provider::ToolChoice;

/// How far a loop has come, for the tools its next turn offers.
pub(super) struct Stage<'a> {
    pub(super) phase: Phase,
    pub(super) turn: u32,
    pub(super) compact: bool,
    /// Successful calls of reading tools so far.
    pub(super) reads: u32,
    /// Successful calls of writing tools so far.
    pub(super) writes: u32,
    /// A write was refused for made-up numbers since the last successful read.
    pub(super) refused: bool,
    /// The item's targets.
    pub(super) targets: &'a [String],
    /// The workbench's files when the item started: what its reading turns may read.
    pub(super) sources: &'a [String],
    /// Its writes so far named every one of them.
    pub(super) targets_written: bool,
    /// The user's request: what it asks to remove and which office operations it names.
    pub(super) request: &'a str,
    /// The texts the request quotes to be added that no call wrote yet.
    pub(super) unwritten_quotes: &'a [String],
    /// The pattern the request's stated form gives a written text, if any.
    pub(super) content_pattern: Option<&'a str>,
}

/// The most turns a compact item spends on reading before it is offered only writing tools.
const COMPACT_READING_TURNS: u32 = 2;

impl Stage<'_> {
    /// The tools offered on this turn and whether a call is required. The first turn of a
    /// tool phase (research, and each attempt at an item; not the plan, which may read but
    /// answers with its checklist) must call a tool, later ones may
    /// (the request profile of the seed design: a model otherwise answers from the prompt
    /// before it looked at anything). With a compact prompt an item goes read → write → answer: its first
    /// turns offer only the reading tools, their `path` bound to the workbench's files they
    /// can read and without `recall_tool_result` (nothing is there to recall yet), until one
    /// read succeeded (a small model otherwise writes a number it never looked up, reads the
    /// file it is to write, or recalls results that do not exist), then, for an item with targets, only the writing
    /// tools until one write succeeded (it otherwise reads the same rows again and again;
    /// a write refused for made-up numbers sends it back to reading, to compute them),
    /// then every tool — or, once its writes named every target, none: the item's result is
    /// all that is left (a small model otherwise rewrites the file until it is wrong).
    pub(super) fn tools(&self, tools: &[ToolSpec]) -> (Vec<ToolSpec>, ToolChoice) {
        if tools.is_empty() || (self.compact && self.targets_written) {
            return (Vec::new(), ToolChoice::None);
        }
        let tool_phase = matches!(self.phase, Phase::Research | Phase::Implement);
        let any = if self.turn == 0 && tool_phase {
            ToolChoice::Required
        } else {
            ToolChoice::Auto
        };
        if !(self.compact && self.phase == Phase::Implement) || self.writes > 0 {
            return (tools.to_vec(), any);
        }
        let reading = (self.reads == 0 && self.turn < COMPACT_READING_TURNS) || self.refused;
        let removes = crate::request::asks_to_remove(self.request);
        let subset: Vec<ToolSpec> = tools
            .iter()
            .filter(|spec| spec.is_read_only() == reading)
            .filter_map(|spec| {
                if reading {
                    reading_from(spec, self.sources)
                } else {
                    catalog::writes_any(spec, self.targets, removes).then(|| self.writing_to(spec))
                }
            })
            .collect();
        if subset.is_empty() || (!reading && self.targets.is_empty()) {
            return (tools.to_vec(), any);
        }
        (subset, ToolChoice::Required)
    }
}

/// Why `call` may not run as the turn offered its tool: the file it writes is not one of the
/// `enum` the stage bound its path to (a model outside constrained decoding is not held to
/// the schema by the server, so the engine holds it).
pub(super) fn outside_offered_paths(
    call: &crate::provider::ToolCall,
    offered: &[ToolSpec],
) -> Option<String> {
    let spec = offered
        .iter()
        .find(|spec| spec.name.as_str() == call.name)?;
    let arguments: Value = serde_json::from_str(&call.arguments).ok()?;
    WRITTEN_PATH_PARAMETERS.iter().find_map(|key| {
        let allowed = spec.parameters["properties"][*key]["enum"].as_array()?;
        let path = arguments.get(*key)?.as_str()?;
        if allowed.iter().any(|allowed| allowed.as_str() == Some(path)) {
            return None;
        }
        let names: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
        Some(super::not_written(format!(
            "not written: this item writes {} only, not {path}; call {} with {key} {}",
            names.join(", "),
            call.name,
            names.first().copied().unwrap_or_default()
        )))
    })
}

/// `spec` for a reading turn: `None` for `recall_tool_result` and for a tool that reads none
/// of `sources`; else its `path` bound to the ones it reads (an `enum`), tables by
/// `table_query` only.
fn reading_from(spec: &ToolSpec, sources: &[String]) -> Option<ToolSpec> {
    if spec.name == ToolName::RecallToolResult {
        return None;
    }
    // A table is read by SQL: a small model shown its rows copies them into the file it
    // writes, where a query hands it only the values asked for.
    let readable: Vec<&String> = sources
        .iter()
        .filter(|source| catalog::reads(spec, source))
        .filter(|source| spec.name == ToolName::TableQuery || !catalog::is_table(source))
        .collect();
    let mut spec = spec.clone();
    let Some(path) = spec
        .parameters
        .get_mut("properties")
        .and_then(|properties| properties.get_mut("path"))
    else {
        return Some(spec);
    };
    if sources.is_empty() {
        return Some(spec);
    }
    if readable.is_empty() {
        return None;
    }
    *path = serde_json::json!({"type": "string", "enum": readable});
    Some(spec)
}

/// The parameters naming the file a writing tool writes.
const WRITTEN_PATH_PARAMETERS: &[&str] = &["path", "target_path"];

/// What a replacement text may hold on a small model's writing turn: letters, digits, spaces
/// and punctuation, but no brace, angle bracket, dollar or square bracket, so no placeholder
/// (`{{company}}`, `<new text>`, `${total}`) can be put back in place of the one it replaces.
/// A positive class only, as [`super::super::form::pattern`] explains.
pub(super) const REPLACEMENT_PATTERN: &str = "^[A-Za-z0-9À-ÿ .,:;!?%&@#'()/*+=_€£-]*$";

impl Stage<'_> {
    /// `spec` for a writing turn: the file it writes bound to one of the targets (an `enum` on
    /// `path`, or on `target_path` where the tool has one: `path` is then what it reads), a
    /// text it writes (`content`) to the request's form, its operations to those the request
    /// names (all when it names none), and their replacement texts to [`REPLACEMENT_PATTERN`].
    fn writing_to(&self, spec: &ToolSpec) -> ToolSpec {
        let mut spec = spec.clone();
        let Some(properties) = spec
            .parameters
            .get_mut("properties")
            .and_then(Value::as_object_mut)
        else {
            return spec;
        };
        let key = WRITTEN_PATH_PARAMETERS
            .iter()
            .rev()
            .find(|key| properties.contains_key(**key));
        if let Some(key) = key {
            properties.insert(
                (*key).to_string(),
                serde_json::json!({"type": "string", "enum": self.targets}),
            );
        }
        if let (Some(pattern), true) = (self.content_pattern, properties.contains_key("content")) {
            properties.insert(
                "content".to_string(),
                serde_json::json!({"type": "string", "pattern": pattern}),
            );
        }
        if let Some(items) = properties
            .get_mut("operations")
            .and_then(|operations| operations.get_mut("items"))
            .and_then(|items| items.get_mut("properties"))
        {
            narrow_operations(items, self.request, self.unwritten_quotes);
        }
        spec
    }
}

/// An operation item's `properties` with `op` bound to the operations `request` names (when
/// it names any), `replace` to [`REPLACEMENT_PATTERN`], and a paragraph's `text` to the
/// quoted texts still to add (`unwritten`), else to all the request quotes, when it quotes any
/// (a small model otherwise appends a sentence it read in the document, or the same one twice).
fn narrow_operations(properties: &mut Value, request: &str, unwritten: &[String]) {
    if let Some(ops) = properties
        .get_mut("op")
        .and_then(|op| op.get_mut("enum"))
        .and_then(Value::as_array_mut)
    {
        let named = |op: &Value| {
            op.as_str()
                .is_some_and(|op| crate::request::names_operation(request, op))
        };
        if ops.iter().any(named) {
            ops.retain(named);
        }
    }
    if let Some(replace) = properties.get_mut("replace").and_then(Value::as_object_mut) {
        replace.insert("pattern".into(), REPLACEMENT_PATTERN.into());
    }
    let quoted = if unwritten.is_empty() {
        crate::request::quoted_texts(request)
    } else {
        unwritten.to_vec()
    };
    if let (Some(text), false) = (
        properties.get_mut("text").and_then(Value::as_object_mut),
        quoted.is_empty(),
    ) {
        text.insert("enum".into(), quoted.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::implement_tools;

    fn stage<'a>(targets: &'a [String], reads: u32, writes: u32, turn: u32) -> Stage<'a> {
        Stage {
            phase: Phase::Implement,
            turn,
            compact: true,
            reads,
            writes,
            refused: false,
            targets,
            sources: &[],
            targets_written: false,
            request: "",
            unwritten_quotes: &[],
            content_pattern: None,
        }
    }

    fn names(offered: &(Vec<ToolSpec>, ToolChoice)) -> Vec<&'static str> {
        offered.0.iter().map(|spec| spec.name.as_str()).collect()
    }

    #[test]
    fn a_compact_item_goes_from_reading_to_writing_its_targets_to_answering() {
        let tools = implement_tools();
        let targets = vec!["count.txt".to_string()];
        // First: reading only, a call required.
        let first = stage(&targets, 0, 0, 0).tools(&tools);
        assert_eq!(first.1, ToolChoice::Required);
        assert!(first.0.iter().all(ToolSpec::is_read_only));
        // Reading reads the workbench's files, each tool those it can read, and recalls
        // nothing.
        let sources = vec!["launch_plan.csv".to_string(), "notes.txt".to_string()];
        let reading = Stage {
            sources: &sources,
            ..stage(&targets, 0, 0, 0)
        }
        .tools(&tools);
        assert!(!names(&reading).contains(&"recall_tool_result"));
        let path_of = |name: &str| {
            let spec = reading.0.iter().find(|spec| spec.name.as_str() == name);
            spec.map(|spec| spec.parameters["properties"]["path"]["enum"].clone())
        };
        assert_eq!(
            path_of("table_query"),
            Some(serde_json::json!(["launch_plan.csv"]))
        );
        assert_eq!(path_of("read_file"), Some(serde_json::json!(["notes.txt"])));
        assert!(!names(&reading).contains(&"table_read_rows"));
        // After a read: only what writes a text file, its path bound to the target.
        let writing = stage(&targets, 1, 0, 1).tools(&tools);
        assert_eq!(writing.1, ToolChoice::Required);
        assert_eq!(names(&writing), ["write_text_file"]);
        assert_eq!(
            writing.0[0].parameters["properties"]["path"]["enum"],
            serde_json::json!(["count.txt"])
        );
        // A text's stated form binds its content.
        let formed = Stage {
            content_pattern: Some("^[0-9]+$"),
            ..stage(&targets, 1, 0, 1)
        }
        .tools(&tools);
        assert_eq!(
            formed.0[0].parameters["properties"]["content"],
            serde_json::json!({"type": "string", "pattern": "^[0-9]+$"})
        );
        // A write refused for made-up numbers sends it back to reading.
        let refused = Stage {
            refused: true,
            ..stage(&targets, 1, 0, 2)
        };
        assert!(refused.tools(&tools).0.iter().all(ToolSpec::is_read_only));
        // Every target written: no tool, only the result.
        let done = Stage {
            targets_written: true,
            ..stage(&targets, 1, 1, 2)
        };
        assert_eq!(done.tools(&tools), (Vec::new(), ToolChoice::None));
        // After a write that did not cover the targets: every tool.
        assert_eq!(stage(&targets, 1, 1, 2).tools(&tools).0.len(), tools.len());
        // A docx target gets docx_operations; deleting only for a request that asks it.
        let docx = vec!["invoice.docx".to_string()];
        assert_eq!(
            names(&stage(&docx, 1, 0, 1).tools(&tools)),
            ["docx_operations"]
        );
        let removing = Stage {
            request: "Remove the draft notes",
            ..stage(&docx, 1, 0, 1)
        };
        assert!(names(&removing.tools(&tools)).contains(&"delete_file"));
        // A document's operations are those the request names, replacements without
        // placeholders.
        let operations = |request| {
            let offered = Stage {
                request,
                ..stage(&docx, 1, 0, 1)
            }
            .tools(&tools);
            offered.0[0].parameters["properties"]["operations"]["items"]["properties"].clone()
        };
        let append = operations("Append to invoice.docx a paragraph \"Conclusion\"");
        assert_eq!(
            append["op"]["enum"],
            serde_json::json!(["append_paragraph", "append_table", "append_table_row"])
        );
        assert_eq!(append["text"]["enum"], serde_json::json!(["Conclusion"]));
        let unwritten = ["Summary".to_string()];
        let next = Stage {
            request: "Append \"Conclusion\" and \"Summary\" to invoice.docx",
            unwritten_quotes: &unwritten,
            ..stage(&docx, 1, 0, 1)
        }
        .tools(&tools);
        let properties = &next.0[0].parameters["properties"]["operations"]["items"]["properties"];
        assert_eq!(properties["text"]["enum"], serde_json::json!(["Summary"]));
        let fill = operations("Fill invoice.docx: company Acme Ltd");
        assert_eq!(
            fill["op"]["enum"],
            serde_json::json!(["replace_text", "set_table_cell"])
        );
        assert_eq!(fill["replace"]["pattern"], REPLACEMENT_PATTERN);
        let pattern = regex::Regex::new(REPLACEMENT_PATTERN).expect("pattern");
        assert!(pattern.is_match("Acme Ltd, 1,249.50 EUR (2026-03-01) Zoë & Søn 15%"));
        for placeholder in ["{{company}}", "<new text>", "${total}", "[name]", "a\"b"] {
            assert!(!pattern.is_match(placeholder), "{placeholder}");
        }
        assert_eq!(
            operations("Summarize invoice.docx")["op"]["enum"]
                .as_array()
                .map(Vec::len),
            Some(7)
        );
        // Outside constrained decoding the engine holds a write to the bound path.
        let call = |path: &str| crate::provider::ToolCall {
            id: "call_t1".into(),
            name: "write_text_file".into(),
            arguments: serde_json::json!({"path": path, "content": "5"}).to_string(),
        };
        let refused = outside_offered_paths(&call("launch_plan.csv"), &writing.0);
        assert!(
            refused.is_some_and(|why| why.contains("writes count.txt only, not launch_plan.csv"))
        );
        assert_eq!(outside_offered_paths(&call("count.txt"), &writing.0), None);
        assert_eq!(
            outside_offered_paths(&call("launch_plan.csv"), &tools),
            None
        );
        // Full prompts are never steered: every tool, a call required on the first turn only.
        let full = |turn| Stage {
            compact: false,
            ..stage(&targets, 0, 0, turn)
        };
        assert_eq!(full(0).tools(&tools), (tools.clone(), ToolChoice::Required));
        assert_eq!(full(1).tools(&tools), (tools.clone(), ToolChoice::Auto));
        // The plan may read, but answers with its checklist.
        let plan = Stage {
            phase: Phase::Plan,
            ..full(0)
        };
        assert_eq!(plan.tools(&tools), (tools.clone(), ToolChoice::Auto));
    }
}
