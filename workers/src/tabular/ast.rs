//! Walking a statement as DuckDB's `json_serialize_sql` gives it.

use serde_json::{Map, Value};

/// Every JSON object in `value`, itself first, then depth first in document order.
pub(super) fn objects(value: &Value) -> Vec<&Map<String, Value>> {
    let mut found = Vec::new();
    collect(value, &mut found);
    found
}

fn collect<'a>(value: &'a Value, into: &mut Vec<&'a Map<String, Value>>) {
    match value {
        Value::Object(object) => {
            into.push(object);
            object.values().for_each(|item| collect(item, into));
        }
        Value::Array(items) => items.iter().for_each(|item| collect(item, into)),
        _ => {}
    }
}
