//! Reading one tool call out of a model's text reply.
//!
//! Every JSON object in the reply is a candidate, wherever it sits: bare, in a fenced
//! ```` ```json ```` block, inside `<tool_call>…</tool_call>` tags, or with prose around it.
//! Accepted call shapes:
//! - the seed's `{"tool": NAME, "parameters": {...}, "terminate": BOOL}`;
//! - Hermes/Qwen and Llama `{"name": NAME, "arguments": {...}}` (or `"parameters"`), where the
//!   arguments may also be a JSON object written as a string.
//!
//! The rule: the first candidate that is a valid call (a known tool, parameters an object with
//! every `required` key of the tool's schema) is the call; later calls are dropped and the
//! reading says so. With no call, an object whose `tool` is `null`/`""`/absent and that has
//! `"terminate": true` or an `"answer"` string is a final answer (its `answer`, else the text
//! around it); a call-shaped object that is not valid, or JSON broken where a call was clearly
//! meant (a `"tool"`/`"name"` key or a `<tool_call>` tag), is [`Reading::Invalid`] with the exact
//! problem; anything else is prose, a plain text answer. `terminate` never stops a call from
//! running: the RPI loop ends when a reply holds no call.

use atelier_messages::tool::json_kind;
use serde_json::{Map, Value};

use crate::catalog::ToolSpec;

/// The most JSON objects looked at in one reply.
const MAX_CANDIDATES: usize = 64;

/// What a text reply amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// A tool call; `note` says when other calls in the reply were dropped.
    Call {
        name: String,
        arguments: Map<String, Value>,
        note: Option<String>,
    },
    /// A final answer in plain text.
    Answer(String),
    /// A call was meant but cannot be used; the text says exactly why.
    Invalid(String),
}

/// A call's arguments, or why they cannot be used.
type Arguments = Result<Map<String, Value>, String>;

/// What one JSON object in the reply is.
enum Shape {
    Call { name: String, arguments: Arguments },
    Final { answer: Option<String> },
    Other,
}

/// A JSON object found in the reply and where it sits.
struct Found {
    value: Map<String, Value>,
    start: usize,
    end: usize,
}

/// Reads `text` as a reply to a turn that offered `tools` (see the module docs).
pub fn read_reply(text: &str, tools: &[ToolSpec]) -> Reading {
    let found = json_objects(text);
    let mut calls = Vec::new();
    let mut finals = Vec::new();
    for object in &found {
        match shape(&object.value, tools) {
            Shape::Call { name, arguments } => calls.push((name, arguments)),
            Shape::Final { answer } => finals.push((answer, object)),
            Shape::Other => {}
        }
    }
    if !calls.is_empty() {
        return first_valid_call(calls, tools);
    }
    if let Some((answer, object)) = finals.into_iter().next() {
        let answer = answer.unwrap_or_else(|| prose_around(text, object));
        return Reading::Answer(answer);
    }
    if let Some(problem) = broken_attempt(text) {
        return Reading::Invalid(problem);
    }
    Reading::Answer(text.trim().to_string())
}

/// The first valid call among `calls`, or the problem of the first one.
fn first_valid_call(calls: Vec<(String, Arguments)>, tools: &[ToolSpec]) -> Reading {
    let total = calls.len();
    let mut first_problem = None;
    for (name, arguments) in calls {
        match arguments.and_then(|arguments| validate(&name, arguments, tools)) {
            Ok(arguments) => {
                let note = (total > 1).then(|| {
                    format!(
                        "the reply held {total} tool calls; only the first valid one (`{name}`) \
                         runs: send one call per reply"
                    )
                });
                return Reading::Call {
                    name,
                    arguments,
                    note,
                };
            }
            Err(problem) => {
                first_problem.get_or_insert(problem);
            }
        }
    }
    Reading::Invalid(first_problem.unwrap_or_default())
}

/// Checks a call against the offered tools: a known name, every required parameter given.
fn validate(
    name: &str,
    arguments: Map<String, Value>,
    tools: &[ToolSpec],
) -> Result<Map<String, Value>, String> {
    let Some(spec) = tools.iter().find(|spec| spec.name.as_str() == name) else {
        return Err(format!(
            "unknown tool `{name}`; the tools are: {}",
            tool_names(tools)
        ));
    };
    let required = spec
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let missing: Vec<&str> = required
        .iter()
        .filter_map(Value::as_str)
        .filter(|key| !arguments.contains_key(*key))
        .collect();
    if !missing.is_empty() {
        let list = missing
            .iter()
            .map(|key| format!("`{key}`"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(format!(
            "`{name}` is missing the required parameter(s) {list}"
        ));
    }
    Ok(arguments)
}

/// The offered tools' names, comma-separated.
pub(super) fn tool_names(tools: &[ToolSpec]) -> String {
    tools
        .iter()
        .map(|spec| spec.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn shape(object: &Map<String, Value>, tools: &[ToolSpec]) -> Shape {
    let terminates = object.get("terminate") == Some(&Value::Bool(true));
    // A structured answer (a plan, an item's result) is kept as its JSON text.
    let answer = object.get("answer").and_then(|answer| match answer {
        Value::String(text) => Some(text.clone()),
        Value::Object(_) | Value::Array(_) => Some(answer.to_string()),
        _ => None,
    });
    match object.get("tool") {
        Some(Value::String(name)) if !name.trim().is_empty() => {
            return Shape::Call {
                name: name.trim().to_string(),
                arguments: arguments_of(object, "parameters"),
            };
        }
        Some(Value::String(_) | Value::Null) => return Shape::Final { answer },
        _ => {}
    }
    if let Some(Value::String(name)) = object.get("name") {
        let names_a_tool = tools.iter().any(|spec| spec.name.as_str() == name);
        if object.contains_key("arguments") || object.contains_key("parameters") || names_a_tool {
            let key = if object.contains_key("arguments") {
                "arguments"
            } else {
                "parameters"
            };
            return Shape::Call {
                name: name.trim().to_string(),
                arguments: arguments_of(object, key),
            };
        }
    }
    if !object.contains_key("tool") && (terminates || answer.is_some()) {
        return Shape::Final { answer };
    }
    Shape::Other
}

/// The arguments under `key`: an object, a JSON object written as a string, or none (`{}`).
fn arguments_of(object: &Map<String, Value>, key: &str) -> Arguments {
    match object.get(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(arguments)) => Ok(arguments.clone()),
        Some(Value::String(text)) if text.trim().is_empty() => Ok(Map::new()),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(arguments)) => Ok(arguments),
            Ok(_) => Err(format!("`{key}` must be a JSON object")),
            Err(error) => Err(format!(
                "`{key}` is a string that is not a JSON object ({error})"
            )),
        },
        Some(other) => Err(format!(
            "`{key}` must be a JSON object, not {}",
            json_kind(other)
        )),
    }
}

/// Every top-level JSON object in `text`, in order (objects nested in one are not listed).
fn json_objects(text: &str) -> Vec<Found> {
    let mut found = Vec::new();
    let mut position = 0;
    while found.len() < MAX_CANDIDATES {
        let Some(offset) = text[position..].find('{') else {
            break;
        };
        let start = position + offset;
        match parse_object_at(text, start) {
            Some((value, end)) => {
                found.push(Found { value, start, end });
                position = end;
            }
            None => position = start + 1,
        }
    }
    found
}

/// The JSON object starting at byte `start`, and the byte after it.
fn parse_object_at(text: &str, start: usize) -> Option<(Map<String, Value>, usize)> {
    let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    match stream.next() {
        Some(Ok(Value::Object(object))) => Some((object, start + stream.byte_offset())),
        _ => None,
    }
}

/// The reply without the JSON object and without code fences, trimmed.
fn prose_around(text: &str, object: &Found) -> String {
    let outside = format!("{} {}", &text[..object.start], &text[object.end..]);
    outside
        .replace("```json", "")
        .replace("```", "")
        .trim()
        .to_string()
}

/// Why a reply that clearly meant to call a tool (a `<tool_call>` tag, or a `"tool"`/`"name"`
/// key) holds no JSON object that could be read.
fn broken_attempt(text: &str) -> Option<String> {
    if let Some(tag) = text.find("<tool_call>") {
        let after = tag + "<tool_call>".len();
        let Some(open) = text[after..].find('{') else {
            return Some("the <tool_call> tag holds no JSON object".to_string());
        };
        return json_problem(text, after + open);
    }
    let key = ["\"tool\"", "\"name\""]
        .iter()
        .filter_map(|key| text.find(key))
        .min()?;
    let open = text[..key].rfind('{')?;
    json_problem(text, open)
}

/// What is wrong with the JSON that starts at byte `start`, if anything.
fn json_problem(text: &str, start: usize) -> Option<String> {
    let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    match stream.next() {
        Some(Err(error)) => Some(format!("the tool call is not valid JSON ({error})")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::catalog::catalog;

    fn call(name: &str, arguments: Value) -> Reading {
        call_noted(name, arguments, None)
    }

    fn call_noted(name: &str, arguments: Value, note: Option<&str>) -> Reading {
        let Value::Object(arguments) = arguments else {
            panic!("arguments must be an object");
        };
        Reading::Call {
            name: name.to_string(),
            arguments,
            note: note.map(str::to_string),
        }
    }

    fn read(text: &str) -> Reading {
        read_reply(text, &catalog())
    }

    // Replies below are as a Qwen2.5-Coder-0.5B-Instruct server wrote them.

    #[test]
    fn text_reads_a_fenced_seed_call() {
        let reply = "```json\n{\n  \"tool\": \"table_get_map\",\n  \"parameters\": {\n    \"path\": \"sales.csv\"\n  },\n  \"terminate\": false\n}\n```";
        assert_eq!(
            read(reply),
            call("table_get_map", json!({"path": "sales.csv"}))
        );
    }

    #[test]
    fn text_reads_tool_call_tags_with_arguments_as_a_string() {
        let reply = "<tool_call>\n{\"name\": \"table_query\", \"arguments\": \"{\\\"path\\\": \\\"sales.csv\\\", \\\"query\\\": \\\"SELECT COUNT(*) FROM data\\\"}\"}\n</tool_call>";
        assert_eq!(
            read(reply),
            call(
                "table_query",
                json!({"path": "sales.csv", "query": "SELECT COUNT(*) FROM data"})
            )
        );
        let object_arguments =
            "<tool_call>\n{\"name\": \"list_files\", \"arguments\": {}}\n</tool_call>";
        assert_eq!(read(object_arguments), call("list_files", json!({})));
    }

    #[test]
    fn text_reads_a_bare_name_arguments_object() {
        let reply = "{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.md\"}}";
        assert_eq!(read(reply), call("read_file", json!({"path": "notes.md"})));
    }

    #[test]
    fn text_reads_a_call_with_prose_around_it() {
        let reply = "To see the columns first, I will get the map of the table.\n\n{\"tool\": \"table_get_map\", \"parameters\": {\"path\": \"sales.csv\"}, \"terminate\": false}\n\nAfter that I can count the rows.";
        assert_eq!(
            read(reply),
            call("table_get_map", json!({"path": "sales.csv"}))
        );
    }

    #[test]
    fn text_takes_the_first_valid_of_two_calls_and_says_so() {
        let reply = "{\"tool\": \"table_get_map\", \"parameters\": {\"path\": \"sales.csv\"}, \"terminate\": false}\n{\"tool\": \"table_stats\", \"parameters\": {\"path\": \"sales.csv\"}, \"terminate\": false}";
        assert_eq!(
            read(reply),
            call_noted(
                "table_get_map",
                json!({"path": "sales.csv"}),
                Some(
                    "the reply held 2 tool calls; only the first valid one (`table_get_map`) runs: send one call per reply"
                )
            )
        );
        let first_invalid = "{\"tool\": \"table_get_map\", \"parameters\": {}}\n{\"tool\": \"list_files\", \"parameters\": {}}";
        assert!(matches!(
            read(first_invalid),
            Reading::Call { ref name, .. } if name == "list_files"
        ));
    }

    #[test]
    fn text_reports_each_problem_exactly() {
        assert_eq!(
            read("{\"tool\": \"table_sum\", \"parameters\": {\"path\": \"a.csv\"}}"),
            Reading::Invalid(format!(
                "unknown tool `table_sum`; the tools are: {}",
                tool_names(&catalog())
            ))
        );
        assert_eq!(
            read("{\"tool\": \"table_query\", \"parameters\": {\"query\": \"SELECT 1\"}}"),
            Reading::Invalid("`table_query` is missing the required parameter(s) `path`".into())
        );
        assert_eq!(
            read("{\"tool\": \"list_files\", \"parameters\": [\"a\"]}"),
            Reading::Invalid("`parameters` must be a JSON object, not an array".into())
        );
        assert_eq!(
            read("{\"tool\": \"table_get_map\", \"parameters\": {\"path\": \"sales.csv\""),
            Reading::Invalid(
                "the tool call is not valid JSON (EOF while parsing an object at line 1 column 60)"
                    .into()
            )
        );
        assert_eq!(
            read("<tool_call>\ntable_get_map sales.csv\n</tool_call>"),
            Reading::Invalid("the <tool_call> tag holds no JSON object".into())
        );
    }

    #[test]
    fn text_without_a_call_is_an_answer() {
        assert_eq!(
            read("The table has 120 rows.\n"),
            Reading::Answer("The table has 120 rows.".into())
        );
        assert_eq!(
            read("```json\n{\"tool\": null, \"answer\": \"120 rows\", \"terminate\": true}\n```"),
            Reading::Answer("120 rows".into())
        );
        assert_eq!(
            read("The table has 120 rows.\n{\"terminate\": true}"),
            Reading::Answer("The table has 120 rows.".into())
        );
        // Data in an answer is not a call.
        assert_eq!(
            read("Top seller: {\"name\": \"North\", \"total\": 5}"),
            Reading::Answer("Top seller: {\"name\": \"North\", \"total\": 5}".into())
        );
    }
}
