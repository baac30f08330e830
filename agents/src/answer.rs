//! The final answers whose shape the engine needs — a plan, an item's result — as JSON schemas
//! for constrained decoding, and back as the text forms the phases read.
//!
//! A phase says which shape its final answer takes ([`AnswerShape`], on the
//! [`ModelRequest`](crate::provider::ModelRequest)). In `constrained` tool mode the answer
//! object of the `response_format` (`{"tool": null, "answer": …, "terminate": true}`) binds
//! `answer` to the shape's schema, so even a small model cannot write a plan the engine cannot
//! read. Whatever the mode, an answer that is such an object is turned into the text the phase
//! parses ([`AnswerShape::to_text`]): a plan into its checklist lines (`- [ ] 1. label —
//! description → file`), an item's result into its line, `ITEM_FAILED: …` or
//! `NO_CHANGE_NEEDED: …`. The no-change form is in the schema only where the engine may accept
//! it (a request that asks for no artefact; an item that names no file).

use serde_json::{Value, json};

/// The most items a schema-bound plan may hold (the plan prompt asks for 1 to 8).
pub const MAX_PLAN_ITEMS: usize = 8;
/// The longest result or reason a schema-bound answer may hold, in characters.
const MAX_FIELD_CHARS: usize = 300;
/// The longest label of a schema-bound plan item: a few words.
const MAX_LABEL_CHARS: usize = 100;
/// The longest description of a schema-bound plan item: a sentence or two. With its label and
/// its targets, one item fits in a small reply limit (256 tokens), where a description as long
/// as a result had small models cut off in the middle of their plan.
const MAX_DESCRIPTION_CHARS: usize = 240;
/// The most targets one schema-bound plan item may name.
const MAX_ITEM_TARGETS: usize = 4;

/// The shape a phase's final answer takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AnswerShape {
    /// Free text (research notes, the summary).
    #[default]
    Text,
    /// A plan: items with a label, a description and the files they write; or, when
    /// `no_change` is allowed, the reason nothing needs to change. `targets`, when not empty,
    /// are the only files an item may name (the files the request names that the workbench
    /// does not have: a small model otherwise names the file it reads). `sources`: the
    /// workbench's tables and text files, one of which a computed target's source names
    /// ([`crate::contract::target_schema`]).
    Plan {
        no_change: bool,
        targets: Vec<String>,
        sources: Vec<String>,
    },
    /// An item's result: done (with a one-line result), failed (with the reason), or, when
    /// `no_change` is allowed, no change needed (with why).
    ItemResult { no_change: bool },
}

impl AnswerShape {
    /// The JSON schema of the `answer` value, or `None` for free text.
    pub fn schema(&self) -> Option<Value> {
        match self {
            AnswerShape::Text => None,
            AnswerShape::Plan {
                no_change,
                targets,
                sources,
            } => Some(plan_schema(*no_change, targets, sources)),
            AnswerShape::ItemResult { no_change } => Some(item_result_schema(*no_change)),
        }
    }

    /// A filled-in answer of this shape, as the model would write it in the final-answer
    /// object (its file names are placeholders in angle brackets, so a copy is no plan).
    pub fn example(&self) -> Option<&'static str> {
        match self {
            AnswerShape::Text => None,
            AnswerShape::Plan { .. } => Some(
                r#"{"items": [{"label": "<what to do>", "description": "<which tool, on which file>", "targets": [{"path": "<file it writes>", "holds": "<number, list, table, text, edit or absent>"}]}]}"#,
            ),
            AnswerShape::ItemResult { .. } => {
                Some(r#"{"status": "done", "result": "<one line: what the tool calls did>"}"#)
            }
        }
    }

    /// `answer` (JSON text of this shape) as the text the phase reads; `None` when it is not
    /// JSON of this shape (then the text is read as it is).
    pub fn to_text(&self, answer: &str) -> Option<String> {
        let value: Value = serde_json::from_str(answer.trim()).ok()?;
        match self {
            AnswerShape::Text => None,
            AnswerShape::Plan { .. } => plan_text(&value),
            AnswerShape::ItemResult { .. } => item_result_text(&value),
        }
    }
}

fn bounded_string() -> Value {
    string_of_at_most(MAX_FIELD_CHARS)
}

fn string_of_at_most(chars: usize) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": chars})
}

fn plan_schema(no_change: bool, targets: &[String], sources: &[String]) -> Value {
    let path = if targets.is_empty() {
        bounded_string()
    } else {
        json!({"type": "string", "enum": targets})
    };
    let target = crate::contract::target_schema(path, sources);
    let item = json!({
        "type": "object",
        "properties": {
            "label": string_of_at_most(MAX_LABEL_CHARS),
            "description": string_of_at_most(MAX_DESCRIPTION_CHARS),
            "targets": {"type": "array", "items": target, "maxItems": MAX_ITEM_TARGETS}
        },
        "required": ["label", "description", "targets"],
        "additionalProperties": false
    });
    let items = json!({
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": item, "minItems": 1, "maxItems": MAX_PLAN_ITEMS}
        },
        "required": ["items"],
        "additionalProperties": false
    });
    if !no_change {
        return items;
    }
    json!({"anyOf": [items, no_change_schema()]})
}

fn no_change_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"no_change": bounded_string()},
        "required": ["no_change"],
        "additionalProperties": false
    })
}

fn item_result_schema(no_change: bool) -> Value {
    let mut statuses = vec!["done", "failed"];
    if no_change {
        statuses.push("no_change");
    }
    json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": statuses},
            "result": bounded_string()
        },
        "required": ["status", "result"],
        "additionalProperties": false
    })
}

/// A plan object as checklist lines; a no-change object as its marker line.
fn plan_text(value: &Value) -> Option<String> {
    if let Some(reason) = value.get("no_change").and_then(Value::as_str) {
        return Some(format!("NO_CHANGE_NEEDED: {}", one_line(reason)));
    }
    let items = value.get("items")?.as_array()?;
    let lines: Vec<String> = items
        .iter()
        .filter_map(|item| {
            let label = one_line(item.get("label")?.as_str()?);
            let description = one_line(item.get("description").and_then(Value::as_str)?);
            let targets: Vec<&Value> = item
                .get("targets")
                .and_then(Value::as_array)
                .map(|targets| targets.iter().collect())
                .unwrap_or_default();
            Some((label, description, targets))
        })
        .enumerate()
        .map(|(index, (label, description, targets))| {
            item_lines(index + 1, &label, &description, &targets)
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// One schema-bound item as its checklist line and, under it, the contract line of each
/// target that is an object with a kind (a bare string target, as older plans and plain
/// models write it, is a target without one).
fn item_lines(number: usize, label: &str, description: &str, targets: &[&Value]) -> String {
    let contracts: Vec<_> = targets
        .iter()
        .filter_map(|target| crate::contract::from_json(target))
        .collect();
    let paths: Vec<String> = targets
        .iter()
        .filter_map(|target| match target {
            Value::String(path) => Some(crate::contract::clean_path(&one_line(path))),
            object => object
                .get("path")
                .and_then(Value::as_str)
                .map(|path| crate::contract::clean_path(&one_line(path))),
        })
        .filter(|path| !path.is_empty())
        .collect();
    let arrow = if paths.is_empty() {
        String::new()
    } else {
        format!(" → {}", paths.join(", "))
    };
    let mut text = format!("- [ ] {number}. {label} — {description}{arrow}");
    for contract in &contracts {
        text.push_str(&format!("\n  - {}", crate::contract::render(contract)));
    }
    text
}

/// An item-result object as the line the implement phase reads.
fn item_result_text(value: &Value) -> Option<String> {
    let result = one_line(value.get("result")?.as_str()?);
    match value.get("status")?.as_str()? {
        "done" => Some(result),
        "failed" => Some(format!("ITEM_FAILED: {result}")),
        "no_change" => Some(format!("NO_CHANGE_NEEDED: {result}")),
        _ => None,
    }
}

/// `text` on one line: line breaks become spaces, the ends are trimmed.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan;

    #[test]
    fn a_schema_bound_plan_reads_as_the_checklist_the_plan_phase_parses() {
        let shape = AnswerShape::Plan {
            no_change: false,
            targets: Vec::new(),
            sources: Vec::new(),
        };
        let answer = r#"{"items": [
            {"label": "Count rows", "description": "table_query on penguins.csv", "targets": []},
            {"label": "Write the count", "description": "write_text_file\nwith the number", "targets": [{"path": "count.txt", "holds": "number", "source": {"path": "penguins.csv", "query": "SELECT count(*)\n FROM data"}}]}
        ]}"#;
        let text = shape.to_text(answer).expect("a plan");
        assert_eq!(
            text,
            "- [ ] 1. Count rows — table_query on penguins.csv\n\
             - [ ] 2. Write the count — write_text_file with the number → count.txt\n  \
             - count.txt: number from penguins.csv = SELECT count(*) FROM data"
        );
        let items = plan::parse(&text);
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].targets, ["count.txt"]);
        assert_eq!(
            items[1].contracts[0].holds,
            atelier_messages::contract::Holds::Number
        );
        assert!(items[0].targets.is_empty());
        // A plain string target (an older journaled plan) is a target without a contract.
        let older = shape
            .to_text(r#"{"items": [{"label": "W", "description": "d", "targets": ["a.txt"]}]}"#)
            .expect("a plan");
        assert_eq!(older, "- [ ] 1. W — d → a.txt");
        // Not this shape: read as the text it is.
        assert_eq!(shape.to_text("- [ ] 1. Count — rows"), None);
        assert_eq!(shape.to_text(r#"{"items": []}"#), None);
    }

    #[test]
    fn the_no_change_form_is_in_a_schema_only_where_the_engine_accepts_it() {
        let refused = AnswerShape::Plan {
            no_change: false,
            targets: Vec::new(),
            sources: Vec::new(),
        }
        .schema()
        .expect("schema");
        assert!(refused.get("anyOf").is_none(), "{refused}");
        assert_eq!(refused["properties"]["items"]["minItems"], 1);
        assert!(!refused.to_string().contains("no_change"));
        let allowed = AnswerShape::Plan {
            no_change: true,
            targets: Vec::new(),
            sources: Vec::new(),
        }
        .schema()
        .expect("schema");
        assert_eq!(allowed["anyOf"][1]["required"], json!(["no_change"]));
        assert_eq!(
            AnswerShape::Plan {
                no_change: true,
                targets: Vec::new(),
                sources: Vec::new(),
            }
            .to_text(r#"{"no_change": "It has 344 rows."}"#)
            .as_deref(),
            Some("NO_CHANGE_NEEDED: It has 344 rows.")
        );
        let item = AnswerShape::ItemResult { no_change: false }
            .schema()
            .expect("schema");
        assert_eq!(
            item["properties"]["status"]["enum"],
            json!(["done", "failed"])
        );
        let item = AnswerShape::ItemResult { no_change: true }
            .schema()
            .expect("schema");
        assert_eq!(
            item["properties"]["status"]["enum"],
            json!(["done", "failed", "no_change"])
        );
        assert_eq!(AnswerShape::Text.schema(), None);
        // The files the request names are the only targets an item may name.
        // A computed target names its source, one of the workbench's sources, when it has any.
        let bound = AnswerShape::Plan {
            no_change: false,
            targets: vec!["count.txt".into()],
            sources: vec!["penguins.csv".into()],
        }
        .schema()
        .expect("schema");
        let kinds =
            &bound["properties"]["items"]["items"]["properties"]["targets"]["items"]["anyOf"];
        let kind = |name: &str| {
            kinds
                .as_array()
                .and_then(|kinds| {
                    kinds
                        .iter()
                        .find(|kind| kind["properties"]["holds"]["enum"][0] == name)
                })
                .cloned()
                .unwrap_or_default()
        };
        for name in ["number", "list", "table", "text", "edit", "absent"] {
            assert_eq!(
                kind(name)["properties"]["path"]["enum"],
                json!(["count.txt"]),
                "{name}"
            );
        }
        assert_eq!(
            kind("number")["required"],
            json!(["path", "holds", "source"])
        );
        assert_eq!(
            kind("number")["properties"]["source"]["properties"]["path"]["enum"],
            json!(["penguins.csv"])
        );
        assert_eq!(kind("text")["required"], json!(["path", "holds"]));
        assert_eq!(kind("text")["properties"].get("source"), None);
        assert_eq!(kind("edit")["properties"]["touches"]["type"], "array");
        assert_eq!(kind("number")["properties"].get("touches"), None);
    }

    #[test]
    fn a_plan_items_text_fields_are_short_enough_for_a_small_reply_limit() {
        let shape = AnswerShape::Plan {
            no_change: false,
            targets: Vec::new(),
            sources: vec!["penguins.csv".into()],
        };
        let schema = shape.schema().expect("a plan has a schema");
        let item = &schema["properties"]["items"]["items"];
        assert_eq!(item["properties"]["label"]["maxLength"], 100);
        assert_eq!(item["properties"]["description"]["maxLength"], 240);
        let targets = item["properties"]["targets"]["items"]["anyOf"]
            .as_array()
            .expect("one object per kind");
        let number = targets
            .iter()
            .find(|target| target["properties"]["holds"]["enum"][0] == "number")
            .expect("a number target");
        assert_eq!(
            number["properties"]["source"]["properties"]["query"]["maxLength"],
            500
        );
    }

    #[test]
    fn item_results_read_as_the_lines_the_implement_phase_judges() {
        let shape = AnswerShape::ItemResult { no_change: true };
        let read = |answer: &str| shape.to_text(answer);
        assert_eq!(
            read(r#"{"status": "done", "result": "Wrote 344 to count.txt."}"#).as_deref(),
            Some("Wrote 344 to count.txt.")
        );
        assert_eq!(
            read(r#"{"status": "failed", "result": "no such column"}"#).as_deref(),
            Some("ITEM_FAILED: no such column")
        );
        assert_eq!(
            read(r#"{"status": "no_change", "result": "already sorted"}"#).as_deref(),
            Some("NO_CHANGE_NEEDED: already sorted")
        );
        assert_eq!(read(r#"{"status": "maybe", "result": "x"}"#), None);
        assert_eq!(read("Wrote it."), None);
    }

    #[test]
    fn the_examples_are_answers_of_their_shape_that_name_no_real_file() {
        for shape in &[
            AnswerShape::Plan {
                no_change: false,
                targets: Vec::new(),
                sources: Vec::new(),
            },
            AnswerShape::ItemResult { no_change: false },
        ] {
            let example = shape.example().expect("example");
            let text = shape.to_text(example).expect("readable");
            assert!(text.contains('<'), "{text}");
            assert!(!text.contains("NO_CHANGE"), "{text}");
        }
    }
}
