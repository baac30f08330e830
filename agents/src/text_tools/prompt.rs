//! What the model reads in text tool-call mode: the tool catalog in the system message, the
//! conversation with tool calls and results written as text, and the corrections sent after
//! an unusable reply.

use serde_json::Value;

use atelier_messages::tool::ToolName;

use super::parse::tool_names;
use crate::answer::AnswerShape;
use crate::catalog::ToolSpec;
use crate::provider::{ChatMessage, Role, ToolCall, ToolChoice};

/// The exact call shape the model is asked for.
pub const CALL_SHAPE: &str = r#"{"tool": "TOOL_NAME", "parameters": {...}, "terminate": false}"#;
/// The exact final-answer shape (plain text is accepted too, except in constrained mode).
pub const ANSWER_SHAPE: &str = r#"{"tool": null, "answer": "YOUR ANSWER", "terminate": true}"#;
/// A filled-in call, shown when `read_file` is offered: small models follow an example far
/// better than a shape with placeholders.
const CALL_EXAMPLE: &str =
    r#"{"tool": "read_file", "parameters": {"path": "notes.txt"}, "terminate": false}"#;

/// What the catalog prompt says besides the tools: the shape of the final answer (bound by a
/// schema in constrained mode, else free text) and whether it is compact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogStyle {
    /// The final answer's shape as the model is asked to write it ([`AnswerShape::Text`] for
    /// a free-text answer).
    pub answer: AnswerShape,
    /// Each tool's first sentence and its schema without descriptions.
    pub compact: bool,
}

/// The system text describing `tools` and how to call them.
pub fn catalog_prompt(tools: &[ToolSpec], choice: ToolChoice, style: &CatalogStyle) -> String {
    let mut text = String::from(
        "# Tools\n\nYou can use these tools. Each has a description and the JSON schema of its \
         parameters.\n",
    );
    for spec in tools {
        let (description, parameters) = if style.compact {
            (
                first_sentence(spec.description),
                bare_schema(&spec.parameters),
            )
        } else {
            (spec.description, spec.parameters.clone())
        };
        text.push_str(&format!(
            "\n## {}\n{description}\nParameters: {parameters}\n",
            spec.name.as_str(),
        ));
    }
    text.push_str(&format!(
        "\n# How to call a tool\n\nTo call a tool, answer with ONLY one JSON object in this \
         exact shape, and nothing else:\n{CALL_SHAPE}\n"
    ));
    if tools.iter().any(|spec| spec.name == ToolName::ReadFile) {
        text.push_str(&format!(
            "TOOL_NAME is a tool name from the list above, never a file name. For example, to \
             read the file notes.txt:\n{CALL_EXAMPLE}\n"
        ));
    }
    text.push_str(
        "\nCall one tool per reply; its result comes back in the next message. Set \
         \"terminate\" to true when this call is your last action.\n",
    );
    if choice == ToolChoice::Required {
        text.push_str("This reply must call a tool.\n");
    } else {
        text.push_str(&format!(
            "When you need no more tools, give your final answer as {}\n",
            answer_shape(&style.answer)
        ));
    }
    text
}

/// The final-answer object the model is shown: [`ANSWER_SHAPE`], or the structured answer's
/// filled-in example in its place.
pub fn answer_shape(answer: &AnswerShape) -> String {
    match answer.example() {
        Some(example) => format!(r#"{{"tool": null, "answer": {example}, "terminate": true}}"#),
        None => ANSWER_SHAPE.to_string(),
    }
}

/// The first sentence of a description (up to the first `. ` or line end).
fn first_sentence(description: &str) -> &str {
    let line = description.lines().next().unwrap_or_default();
    match line.find(". ") {
        Some(end) => &line[..=end],
        None => line,
    }
}

/// A JSON schema without its `description`s (and `examples`), for the compact catalog; the
/// names under `properties` are parameters, kept whatever they are called.
fn bare_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(object) => Value::Object(
            object
                .iter()
                .filter(|(key, _)| !matches!(key.as_str(), "description" | "examples"))
                .map(|(key, value)| {
                    let value = match (key.as_str(), value) {
                        ("properties", Value::Object(properties)) => Value::Object(
                            properties
                                .iter()
                                .map(|(name, schema)| (name.clone(), bare_schema(schema)))
                                .collect(),
                        ),
                        _ => bare_schema(value),
                    };
                    (key.clone(), value)
                })
                .collect(),
        ),
        Value::Array(values) => Value::Array(values.iter().map(bare_schema).collect()),
        other => other.clone(),
    }
}

/// `messages` as a text-mode model reads them: the catalog (when tools are offered) added to
/// the (first) system message, assistant tool calls as their JSON text, tool results as user
/// messages.
pub fn text_transcript(messages: &[ChatMessage], catalog: Option<&str>) -> Vec<ChatMessage> {
    let mut transcript: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    let mut calls: Vec<&ToolCall> = Vec::new();
    for message in messages {
        match message.role {
            Role::Assistant if !message.tool_calls.is_empty() => {
                calls.extend(&message.tool_calls);
                transcript.push(ChatMessage::assistant(
                    calls_as_text(&message.tool_calls),
                    Vec::new(),
                ));
            }
            Role::Tool => {
                let id = message.tool_call_id.as_deref().unwrap_or_default();
                let name = calls
                    .iter()
                    .find(|call| call.id == id)
                    .map_or("tool", |call| call.name.as_str());
                // No call id: text mode sends one call per reply, and a small model took the
                // ids shown here for the call ids `recall_tool_result` reads (those of receipts).
                transcript.push(ChatMessage::user(format!(
                    "Tool result for {name}:\n{}",
                    message.content
                )));
            }
            _ => transcript.push(ChatMessage {
                tool_calls: Vec::new(),
                tool_call_id: None,
                ..message.clone()
            }),
        }
    }
    match catalog {
        Some(catalog) => with_system_text(transcript, catalog),
        None => transcript,
    }
}

/// `text` added to the first message when it is a system message (some chat templates accept
/// a system message only first), else as a new first system message.
pub fn with_system_text(mut messages: Vec<ChatMessage>, text: &str) -> Vec<ChatMessage> {
    match messages.first_mut() {
        Some(first) if first.role == Role::System => {
            first.content = format!("{}\n\n{text}", first.content);
        }
        _ => messages.insert(0, ChatMessage::system(text)),
    }
    messages
}

/// Tool calls in the seed shape, one JSON object a line.
pub fn calls_as_text(calls: &[ToolCall]) -> String {
    calls
        .iter()
        .map(|call| {
            let parameters = serde_json::from_str::<Value>(&call.arguments)
                .unwrap_or_else(|_| Value::String(call.arguments.clone()));
            // Written by hand so the keys keep the order the model was shown.
            format!(
                r#"{{"tool": {}, "parameters": {parameters}, "terminate": false}}"#,
                Value::String(call.name.clone())
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The message telling the model why its reply was not usable, and what to send: `expected`,
/// as [`crate::turn`] words it for the turn (a call, or a call or the phase's answer).
pub fn correction(problem: &str, expected: &str, tools: &[ToolSpec]) -> String {
    let mut text = format!(
        "Your last reply could not be used: {problem}.\nAnswer again with {expected}, and \
         nothing else."
    );
    if !tools.is_empty() {
        text.push_str(&format!("\nTOOL_NAME is one of: {}.", tool_names(tools)));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::catalog;

    #[test]
    fn text_transcript_writes_calls_and_results_as_text() {
        let call = ToolCall {
            id: "call_t1".into(),
            name: "table_get_map".into(),
            arguments: "{\"path\":\"sales.csv\"}".into(),
        };
        let messages = vec![
            ChatMessage::system("Research."),
            ChatMessage::user("Count the rows."),
            ChatMessage::assistant("", vec![call]),
            ChatMessage::tool_result("call_t1", "{\"rows\":120}"),
        ];
        let transcript = text_transcript(&messages, Some("CATALOG"));
        assert_eq!(
            transcript,
            vec![
                ChatMessage::system("Research.\n\nCATALOG"),
                ChatMessage::user("Count the rows."),
                ChatMessage::assistant(
                    "{\"tool\": \"table_get_map\", \"parameters\": {\"path\":\"sales.csv\"}, \"terminate\": false}",
                    Vec::new()
                ),
                ChatMessage::user("Tool result for table_get_map:\n{\"rows\":120}"),
            ]
        );
        let without_system = text_transcript(&[ChatMessage::user("Hi")], Some("CATALOG"));
        assert_eq!(without_system[0], ChatMessage::system("CATALOG"));
    }

    #[test]
    fn text_catalog_lists_each_tool_with_its_schema_and_the_shape() {
        let tools: Vec<_> = catalog().into_iter().take(2).collect();
        let prompt = catalog_prompt(&tools, ToolChoice::Auto, &CatalogStyle::default());
        assert!(prompt.contains("\n## list_files\n"), "{prompt}");
        assert!(
            prompt.contains(&tools[1].parameters.to_string()),
            "{prompt}"
        );
        assert!(prompt.contains(CALL_SHAPE));
        assert!(prompt.contains(ANSWER_SHAPE));
        let required = catalog_prompt(&tools, ToolChoice::Required, &CatalogStyle::default());
        assert!(required.ends_with("This reply must call a tool.\n"));
        assert!(!required.contains(ANSWER_SHAPE));
        // The filled-in example only where the tool it calls is offered.
        assert!(!prompt.contains(CALL_EXAMPLE));
        let with_read = catalog_prompt(
            &crate::catalog::plan_tools(),
            ToolChoice::Auto,
            &CatalogStyle::default(),
        );
        assert!(with_read.contains(CALL_EXAMPLE), "{with_read}");
        assert!(with_read.contains("never a file name"));
    }

    #[test]
    fn the_compact_catalog_keeps_first_sentences_and_bare_schemas() {
        let tools = crate::catalog::implement_tools();
        let full = catalog_prompt(&tools, ToolChoice::Auto, &CatalogStyle::default());
        let plan = AnswerShape::Plan {
            no_change: false,
            targets: Vec::new(),
            sources: Vec::new(),
        };
        let compact = catalog_prompt(
            &tools,
            ToolChoice::Auto,
            &CatalogStyle {
                answer: plan,
                compact: true,
            },
        );
        assert!(
            compact.len() * 5 < full.len() * 3,
            "compact {} vs full {}",
            compact.len(),
            full.len()
        );
        assert!(!compact.contains("Workbench file path"), "{compact}");
        for spec in &tools {
            assert!(compact.contains(&format!("\n## {}\n", spec.name.as_str())));
        }
        // The structured answer's example replaces the free-text shape.
        assert!(!compact.contains(ANSWER_SHAPE));
        assert!(
            compact.contains(r#""answer": {"items": [{"label""#),
            "{compact}"
        );
        assert_eq!(
            first_sentence("Reads a file. Then more.\nDetails."),
            "Reads a file."
        );
        assert_eq!(first_sentence("One line"), "One line");
        let schema = serde_json::json!({"type": "object", "description": "x", "properties": {
            "description": {"type": "string", "description": "the text"}}});
        assert_eq!(
            bare_schema(&schema),
            serde_json::json!({"type": "object", "properties": {"description": {"type": "string"}}})
        );
    }
}
