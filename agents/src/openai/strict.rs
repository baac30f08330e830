//! OpenAI's `strict` function schemas: what strict mode requires of a tool's parameters, and
//! reading the arguments of a strict call back into the tool's own shape.
//!
//! Strict mode decodes arguments against the schema exactly, but only accepts schemas in which
//! every object lists its `properties`, all of them `required`, with
//! `additionalProperties: false`, and every array has `items`. A tool's schema is normalized
//! to that: a property that was optional becomes nullable (`"type": ["string", "null"]`, `null`
//! added to an `enum`), so the model writes `null` where it would have left it out. A schema
//! that cannot be made strict (a free-form object or an array without `items`) is sent as it
//! is, without `strict`. The `null`s of optional properties are dropped from the arguments
//! again before the call reaches the tool, so tools see exactly what the non-strict call would
//! have given them.

use serde_json::{Map, Value};

/// `schema` normalized for strict mode, or `None` when it cannot be.
pub(super) fn strict_schema(schema: &Value) -> Option<Value> {
    let Value::Object(object) = schema else {
        return None;
    };
    let mut strict = object.clone();
    if let Some(any_of) = object.get("anyOf") {
        let shapes = any_of
            .as_array()?
            .iter()
            .map(strict_schema)
            .collect::<Option<Vec<_>>>()?;
        strict.insert("anyOf".into(), Value::Array(shapes));
    }
    if has_type(object, "object") {
        strict_object(object, &mut strict)?;
    }
    if has_type(object, "array") {
        let items = strict_schema(object.get("items")?)?;
        strict.insert("items".into(), items);
    }
    Some(Value::Object(strict))
}

/// Fills `strict` with the strict form of the object schema `object`.
fn strict_object(object: &Map<String, Value>, strict: &mut Map<String, Value>) -> Option<()> {
    let properties = object.get("properties")?.as_object()?;
    let required = required_names(object);
    let mut strict_properties = Map::new();
    for (name, property) in properties {
        let normalized = strict_schema(property)?;
        let normalized = if required.contains(&name.as_str()) {
            normalized
        } else {
            nullable(normalized)
        };
        strict_properties.insert(name.clone(), normalized);
    }
    let names = properties.keys().cloned().map(Value::String).collect();
    strict.insert("properties".into(), Value::Object(strict_properties));
    strict.insert("required".into(), Value::Array(names));
    strict.insert("additionalProperties".into(), Value::Bool(false));
    Some(())
}

fn has_type(object: &Map<String, Value>, wanted: &str) -> bool {
    match object.get("type") {
        Some(Value::String(kind)) => kind == wanted,
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == wanted),
        _ => false,
    }
}

fn required_names(object: &Map<String, Value>) -> Vec<&str> {
    object
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `schema` that also admits `null`.
fn nullable(schema: Value) -> Value {
    let Value::Object(mut object) = schema else {
        return schema;
    };
    match object.get_mut("type") {
        Some(Value::String(kind)) => {
            let kind = std::mem::take(kind);
            object.insert("type".into(), serde_json::json!([kind, "null"]));
        }
        Some(Value::Array(kinds)) if !kinds.iter().any(|kind| kind == "null") => {
            kinds.push(Value::String("null".into()));
        }
        Some(_) => {}
        None => {
            return serde_json::json!({"anyOf": [Value::Object(object), {"type": "null"}]});
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    Value::Object(object)
}

/// The arguments of a strict call with the `null`s of optional properties left out again, as
/// `schema` (the tool's own, not normalized) describes them. Arguments that are not a JSON
/// object come back unchanged (the driver reports them).
pub(super) fn drop_absent(arguments: &str, schema: &Value) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(mut value @ Value::Object(_)) => {
            drop_absent_in(&mut value, schema);
            value.to_string()
        }
        _ => arguments.to_string(),
    }
}

fn drop_absent_in(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(members) => {
            let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            let required = schema.as_object().map(required_names).unwrap_or_default();
            members.retain(|name, member| {
                !(member.is_null()
                    && properties.contains_key(name)
                    && !required.contains(&name.as_str()))
            });
            for (name, member) in members.iter_mut() {
                if let Some(property) = properties.get(name) {
                    drop_absent_in(member, property);
                }
            }
        }
        Value::Array(elements) => {
            let Some(items) = schema.get("items") else {
                return;
            };
            for element in elements {
                drop_absent_in(element, items);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::catalog::catalog;

    #[test]
    fn optional_properties_become_required_and_nullable_and_objects_closed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Workbench file path"},
                "format": {"type": "string", "enum": ["csv", "xlsx"]},
                "limit": {"type": "integer", "minimum": 1},
                "columns": {"type": "array", "items": {"type": "string"}},
                "style": {"type": "object", "properties": {"bold": {"type": "boolean"}}}
            },
            "required": ["path"]
        });
        let strict = strict_schema(&schema).expect("strict");
        assert_eq!(
            strict["required"],
            json!(["columns", "format", "limit", "path", "style"]),
            "every property, in the map's order"
        );
        assert_eq!(strict["additionalProperties"], false);
        let properties = &strict["properties"];
        assert_eq!(properties["path"]["type"], "string");
        assert_eq!(properties["format"]["type"], json!(["string", "null"]));
        assert_eq!(properties["format"]["enum"], json!(["csv", "xlsx", null]));
        assert_eq!(properties["limit"]["type"], json!(["integer", "null"]));
        assert_eq!(properties["limit"]["minimum"], 1);
        assert_eq!(properties["columns"]["items"], json!({"type": "string"}));
        assert_eq!(properties["style"]["type"], json!(["object", "null"]));
        assert_eq!(properties["style"]["required"], json!(["bold"]));
        assert_eq!(properties["style"]["additionalProperties"], false);
        assert_eq!(
            properties["style"]["properties"]["bold"]["type"],
            json!(["boolean", "null"])
        );
    }

    #[test]
    fn free_form_objects_and_arrays_without_items_cannot_be_strict() {
        let open = json!({"type": "object", "properties": {
            "cells": {"type": "array", "items": {"type": "object"}}
        }});
        assert_eq!(strict_schema(&open), None);
        let no_items = json!({"type": "object", "properties": {"values": {"type": "array"}}});
        assert_eq!(strict_schema(&no_items), None);
        let untyped = json!({"type": "object", "properties": {"value": {"description": "any"}},
                             "required": []});
        assert_eq!(
            strict_schema(&untyped).expect("strict")["properties"]["value"],
            json!({"anyOf": [{"description": "any"}, {"type": "null"}]})
        );
    }

    #[test]
    fn every_catalog_tool_is_either_strict_or_sent_as_it_is() {
        let (strict, loose): (Vec<_>, Vec<_>) = catalog()
            .into_iter()
            .partition(|tool| strict_schema(&tool.parameters).is_some());
        let names = |tools: &[crate::catalog::ToolSpec]| -> Vec<String> {
            tools.iter().map(|tool| tool.name.to_string()).collect()
        };
        assert!(names(&strict).contains(&"read_file".to_string()));
        assert!(names(&strict).contains(&"table_query".to_string()));
        assert!(
            names(&loose).contains(&"xlsx_operations".to_string()),
            "{:?}",
            names(&loose)
        );
    }

    #[test]
    fn nulls_of_optional_properties_are_dropped_and_required_ones_kept() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "sheet": {"type": "string"},
                "rows": {"type": "array", "items": {"type": "object",
                    "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                    "required": ["a"]}}
            },
            "required": ["path"]
        });
        let arguments = json!({
            "path": "a.csv", "sheet": null,
            "rows": [{"a": null, "b": null}, {"a": "x", "b": "y"}]
        });
        let read: Value =
            serde_json::from_str(&drop_absent(&arguments.to_string(), &schema)).expect("json");
        assert_eq!(
            read,
            json!({"path": "a.csv", "rows": [{"a": null}, {"a": "x", "b": "y"}]})
        );
        assert_eq!(drop_absent("[1, null]", &schema), "[1, null]");
        assert_eq!(drop_absent("{oops", &schema), "{oops");
    }
}
