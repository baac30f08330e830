//! The `response_format` of constrained mode: a JSON schema admitting exactly one call of an
//! offered tool, or a final answer of the phase's shape ([`AnswerShape`]).

use serde_json::{Value, json};

use crate::answer::AnswerShape;
use crate::catalog::ToolSpec;
use crate::provider::ToolChoice;

/// `{"type": "json_schema", "json_schema": {"name": "tool_call", "schema": …, "strict": true}}`
/// whose schema is an `anyOf` of one call object per tool (`tool` fixed to its name,
/// `parameters` its schema) plus, unless a call is required, the final-answer object whose
/// `answer` has the phase's shape (a string for free text).
pub fn response_format(tools: &[ToolSpec], choice: ToolChoice, answer: AnswerShape) -> Value {
    let offered = if choice == ToolChoice::None {
        &[]
    } else {
        tools
    };
    let mut shapes: Vec<Value> = offered.iter().map(call_schema).collect();
    if choice != ToolChoice::Required || offered.is_empty() {
        shapes.push(answer_schema(answer));
    }
    json!({
        "type": "json_schema",
        "json_schema": {"name": "tool_call", "schema": {"anyOf": shapes}, "strict": true}
    })
}

fn call_schema(spec: &ToolSpec) -> Value {
    json!({
        "type": "object",
        "properties": {
            "tool": {"type": "string", "enum": [spec.name.as_str()]},
            "parameters": spec.parameters,
            "terminate": {"type": "boolean"}
        },
        "required": ["tool", "parameters", "terminate"],
        "additionalProperties": false
    })
}

fn answer_schema(answer: AnswerShape) -> Value {
    let answer = answer.schema().unwrap_or_else(|| json!({"type": "string"}));
    json!({
        "type": "object",
        "properties": {
            "tool": {"type": "null"},
            "answer": answer,
            "terminate": {"type": "boolean", "enum": [true]}
        },
        "required": ["tool", "answer", "terminate"],
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::catalog;

    #[test]
    fn constrained_schema_is_a_union_of_calls_and_the_answer() {
        let tools: Vec<_> = catalog().into_iter().take(2).collect();
        let format = response_format(&tools, ToolChoice::Auto, AnswerShape::Text);
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["json_schema"]["name"], "tool_call");
        assert_eq!(format["json_schema"]["strict"], true);
        let shapes = format["json_schema"]["schema"]["anyOf"]
            .as_array()
            .expect("anyOf");
        assert_eq!(shapes.len(), 3);
        assert_eq!(
            shapes[0]["properties"]["tool"]["enum"],
            json!(["list_files"])
        );
        assert_eq!(shapes[1]["properties"]["parameters"], tools[1].parameters);
        assert_eq!(shapes[2]["properties"]["terminate"]["enum"], json!([true]));
        assert_eq!(shapes[2]["properties"]["answer"]["type"], "string");
        let required = response_format(&tools, ToolChoice::Required, AnswerShape::Text);
        let shapes = required["json_schema"]["schema"]["anyOf"]
            .as_array()
            .expect("anyOf");
        assert_eq!(shapes.len(), 2);
    }

    #[test]
    fn a_plan_turn_binds_its_answer_to_the_plan_schema() {
        let tools: Vec<_> = catalog().into_iter().take(1).collect();
        let plan = AnswerShape::Plan { no_change: false };
        let format = response_format(&tools, ToolChoice::Auto, plan);
        let shapes = format["json_schema"]["schema"]["anyOf"]
            .as_array()
            .expect("anyOf");
        assert_eq!(shapes.len(), 2);
        assert_eq!(
            shapes[1]["properties"]["answer"],
            plan.schema().expect("plan schema")
        );
        // Without tools, the answer alone.
        let alone = response_format(&[], ToolChoice::None, plan);
        let shapes = alone["json_schema"]["schema"]["anyOf"]
            .as_array()
            .expect("anyOf");
        assert_eq!(shapes.len(), 1);
        assert_eq!(shapes[0]["properties"]["tool"]["type"], "null");
    }
}
