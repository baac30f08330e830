//! The `response_format` of constrained mode: a JSON schema admitting exactly one call of an
//! offered tool, or a final answer of the phase's shape ([`AnswerShape`]).

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value, json};

use crate::answer::AnswerShape;
use crate::catalog::ToolSpec;
use crate::provider::ToolChoice;

/// `{"type": "json_schema", "json_schema": {"name": "tool_call", "schema": …, "strict": true}}`
/// whose schema is an `anyOf` of one call object per tool (`tool` fixed to its name,
/// `parameters` its schema) plus, unless a call is required, the final-answer object whose
/// `answer` has the phase's shape (a string for free text).
pub fn response_format(tools: &[ToolSpec], choice: ToolChoice, answer: &AnswerShape) -> Value {
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

/// A JSON schema that serializes each `properties` object in the order of its `required`
/// list, then the other properties (other keys keep serde_json's sorted order). A server
/// decoding under the schema makes the model write properties in that order: the call's
/// `tool` before its `parameters`, a plan item's `label` before its `description`, a file's
/// `path` before its `content` — what to do before how.
#[derive(Debug, Clone, PartialEq)]
pub struct InRequiredOrder(pub Value);

impl Serialize for InRequiredOrder {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Ordered(&self.0).serialize(serializer)
    }
}

struct Ordered<'a>(&'a Value);

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(object) => {
                let mut map = serializer.serialize_map(Some(object.len()))?;
                for (key, value) in object {
                    match (key.as_str(), value) {
                        ("properties", Value::Object(properties)) => {
                            map.serialize_entry(key, &Properties(properties, object))?;
                        }
                        _ => map.serialize_entry(key, &Ordered(value))?,
                    }
                }
                map.end()
            }
            Value::Array(items) => serializer.collect_seq(items.iter().map(Ordered)),
            other => other.serialize(serializer),
        }
    }
}

/// A `properties` object and the schema holding it (for its `required` list).
struct Properties<'a>(&'a Map<String, Value>, &'a Map<String, Value>);

impl Serialize for Properties<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Properties(properties, schema) = self;
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut map = serializer.serialize_map(Some(properties.len()))?;
        for name in &required {
            if let Some(value) = properties.get(*name) {
                map.serialize_entry(name, &Ordered(value))?;
            }
        }
        for (name, value) in properties.iter() {
            if !required.contains(&name.as_str()) {
                map.serialize_entry(name, &Ordered(value))?;
            }
        }
        map.end()
    }
}

fn call_schema(spec: &ToolSpec) -> Value {
    json!({
        "type": "object",
        "properties": {
            "tool": {"type": "string", "enum": [spec.name.as_str()]},
            "parameters": exact_parameters(&spec.parameters),
            "terminate": {"type": "boolean"}
        },
        "required": ["tool", "parameters", "terminate"],
        "additionalProperties": false
    })
}

/// A tool's parameters as constrained decoding binds them: no parameter the tool does not
/// know (the tools refuse unknown fields), and an `operations` list as a union of one object
/// per operation, each with only its own fields — a field described `op_name: …` belongs to
/// that operation (`op_name (required): …` must be given), one without such a prefix to every
/// operation.
fn exact_parameters(parameters: &Value) -> Value {
    let mut parameters = parameters.clone();
    let Some(object) = parameters.as_object_mut() else {
        return parameters;
    };
    object.insert("additionalProperties".into(), Value::Bool(false));
    if let Some(items) = object
        .get_mut("properties")
        .and_then(|properties| properties.get_mut("operations"))
        .and_then(|operations| operations.get_mut("items"))
        && let Some(union) = per_operation(items)
    {
        *items = union;
    }
    parameters
}

/// An operation item schema (`op` an enum, every operation's fields together) as `anyOf` one
/// object per operation.
fn per_operation(items: &Value) -> Option<Value> {
    let properties = items.get("properties")?.as_object()?;
    let ops = properties.get("op")?.get("enum")?.as_array()?;
    let shapes: Vec<Value> = ops
        .iter()
        .filter_map(Value::as_str)
        .map(|op| {
            let mut fields: Map<String, Value> = Map::new();
            let mut required = vec!["op".to_string()];
            fields.insert("op".into(), json!({"type": "string", "enum": [op]}));
            for (name, field) in properties.iter().filter(|(name, _)| *name != "op") {
                match owner(field, op) {
                    Owner::Other => {}
                    Owner::Optional => {
                        fields.insert(name.clone(), field.clone());
                    }
                    Owner::Required => {
                        fields.insert(name.clone(), field.clone());
                        required.push(name.clone());
                    }
                }
            }
            required.sort_by_key(|name| written_order(name));
            json!({
                "type": "object",
                "properties": fields,
                "required": required,
                "additionalProperties": false
            })
        })
        .collect();
    Some(json!({"anyOf": shapes}))
}

/// The order a model writes an operation's required fields in (schemas keep no order of their
/// own): what to act on before what to put there (`search` before `replace`).
fn written_order(name: &str) -> (usize, String) {
    const FIRST: &[&str] = &[
        "op",
        "sheet",
        "search",
        "table_index",
        "row",
        "col",
        "index",
    ];
    let rank = FIRST
        .iter()
        .position(|first| *first == name)
        .unwrap_or(FIRST.len());
    (rank, name.to_string())
}

/// Whether an operation field is one of `op`'s.
enum Owner {
    Other,
    Optional,
    Required,
}

/// Whose field it is, by its description: `op, other (required): …` names its operations
/// (and that they need it); a description naming none is every operation's.
fn owner(field: &Value, op: &str) -> Owner {
    let Some(description) = field.get("description").and_then(Value::as_str) else {
        return Owner::Optional;
    };
    let Some((owners, _)) = description.split_once(':') else {
        return Owner::Optional;
    };
    let (owners, required) = match owners.strip_suffix(" (required)") {
        Some(owners) => (owners, true),
        None => (owners, false),
    };
    if !is_op_name(owners) {
        return Owner::Optional;
    }
    match (owners.split(", ").any(|name| name == op), required) {
        (false, _) => Owner::Other,
        (true, false) => Owner::Optional,
        (true, true) => Owner::Required,
    }
}

/// True for `name` or `name, other` written in operation-name form (lower case, underscores).
fn is_op_name(text: &str) -> bool {
    text.split(", ")
        .all(|name| !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
}

fn answer_schema(answer: &AnswerShape) -> Value {
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
        let format = response_format(&tools, ToolChoice::Auto, &AnswerShape::Text);
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
        assert_eq!(
            shapes[1]["properties"]["parameters"]["properties"],
            tools[1].parameters["properties"]
        );
        assert_eq!(
            shapes[1]["properties"]["parameters"]["additionalProperties"],
            false
        );
        assert_eq!(shapes[2]["properties"]["terminate"]["enum"], json!([true]));
        assert_eq!(shapes[2]["properties"]["answer"]["type"], "string");
        let required = response_format(&tools, ToolChoice::Required, &AnswerShape::Text);
        let shapes = required["json_schema"]["schema"]["anyOf"]
            .as_array()
            .expect("anyOf");
        assert_eq!(shapes.len(), 2);
    }

    #[test]
    fn properties_are_written_in_the_order_of_the_required_list() {
        let tools: Vec<_> = catalog()
            .into_iter()
            .filter(|spec| spec.name.as_str() == "write_text_file")
            .collect();
        let format = response_format(
            &tools,
            ToolChoice::Auto,
            &AnswerShape::Plan {
                no_change: false,
                targets: Vec::new(),
                sources: Vec::new(),
            },
        );
        let text = serde_json::to_string(&InRequiredOrder(format.clone())).expect("json");
        let at = |needle: &str| text.find(needle).unwrap_or(usize::MAX);
        // The call: tool, parameters, terminate; its parameters: path, then content.
        assert!(at(r#""tool":{"enum""#) < at(r#""parameters":{"#), "{text}");
        assert!(at(r#""path":{"#) < at(r#""content":{"#), "{text}");
        // The answer: tool, answer, terminate; a plan item: label, description, targets.
        assert!(
            at(r#""tool":{"type":"null"}"#) < at(r#""answer":{"#),
            "{text}"
        );
        assert!(at(r#""label":{"#) < at(r#""description":{"#), "{text}");
        // The same schema, only in another order.
        let back: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(back, format);
    }

    #[test]
    fn operations_are_bound_one_object_per_operation_with_only_its_fields() {
        let docx: Vec<_> = catalog()
            .into_iter()
            .filter(|spec| spec.name.as_str() == "docx_operations")
            .collect();
        let format = response_format(&docx, ToolChoice::Required, &AnswerShape::Text);
        let parameters = &format["json_schema"]["schema"]["anyOf"][0]["properties"]["parameters"];
        assert_eq!(parameters["additionalProperties"], false);
        let ops = parameters["properties"]["operations"]["items"]["anyOf"]
            .as_array()
            .cloned()
            .expect("one shape per operation");
        let replace = ops
            .iter()
            .find(|shape| shape["properties"]["op"]["enum"] == json!(["replace_text"]))
            .expect("replace_text");
        let fields = replace["properties"].as_object().expect("fields");
        // As the 0.5B model wrote it: `values` belongs to append_table_row only.
        assert!(fields.contains_key("search") && fields.contains_key("replace"));
        assert!(!fields.contains_key("values") && !fields.contains_key("after_heading"));
        assert!(
            !fields.contains_key("text"),
            "the paragraph operations' field"
        );
        let cell = ops
            .iter()
            .find(|shape| shape["properties"]["op"]["enum"] == json!(["set_table_cell"]))
            .expect("set_table_cell");
        assert!(
            cell["properties"].get("text").is_some() && cell["properties"].get("row").is_some()
        );
        assert_eq!(replace["additionalProperties"], false);
        assert_eq!(replace["required"], json!(["op", "search", "replace"]));
    }

    #[test]
    fn a_plan_turn_binds_its_answer_to_the_plan_schema() {
        let tools: Vec<_> = catalog().into_iter().take(1).collect();
        let plan = AnswerShape::Plan {
            no_change: false,
            targets: Vec::new(),
            sources: Vec::new(),
        };
        let format = response_format(&tools, ToolChoice::Auto, &plan);
        let shapes = format["json_schema"]["schema"]["anyOf"]
            .as_array()
            .expect("anyOf");
        assert_eq!(shapes.len(), 2);
        assert_eq!(
            shapes[1]["properties"]["answer"],
            plan.schema().expect("plan schema")
        );
        // Without tools, the answer alone.
        let alone = response_format(&[], ToolChoice::None, &plan);
        let shapes = alone["json_schema"]["schema"]["anyOf"]
            .as_array()
            .expect("anyOf");
        assert_eq!(shapes.len(), 1);
        assert_eq!(shapes[0]["properties"]["tool"]["type"], "null");
    }
}
