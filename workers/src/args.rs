//! Typed access to a tool's JSON arguments. Every refusal is `VALIDATION_FAILED` naming the field.

use atelier_messages::tool::json_kind;
use atelier_messages::{ErrorBody, ErrorCode};
use serde_json::{Map, Value};

/// A tool's arguments: a JSON object.
pub(crate) struct Args<'a> {
    tool: &'a str,
    fields: &'a Map<String, Value>,
}

fn invalid(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

impl<'a> Args<'a> {
    /// The arguments of `tool`; `null` counts as no arguments.
    pub(crate) fn new(tool: &'a str, value: &'a Value) -> Result<Self, ErrorBody> {
        static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
        let fields = match value {
            Value::Object(fields) => fields,
            Value::Null => &EMPTY,
            other => {
                return Err(invalid(format!(
                    "{tool}: arguments must be a JSON object, got {}",
                    json_kind(other)
                )));
            }
        };
        Ok(Self { tool, fields })
    }

    fn present(&self, name: &str) -> Option<&'a Value> {
        self.fields.get(name).filter(|value| !value.is_null())
    }

    fn wrong_type(&self, name: &str, expected: &str, got: &Value) -> ErrorBody {
        invalid(format!(
            "{}: argument `{name}` must be {expected}, got {}",
            self.tool,
            json_kind(got)
        ))
    }

    /// A required string argument.
    pub(crate) fn string(&self, name: &str) -> Result<&'a str, ErrorBody> {
        self.optional_string(name)?.ok_or_else(|| {
            invalid(format!(
                "{}: missing required argument `{name}` (a string)",
                self.tool
            ))
        })
    }

    /// An optional string argument (absent or `null` gives `None`).
    pub(crate) fn optional_string(&self, name: &str) -> Result<Option<&'a str>, ErrorBody> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(self.wrong_type(name, "a string", other)),
        }
    }

    /// An optional integer argument within `range` (absent or `null` gives `None`).
    pub(crate) fn optional_integer(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<Option<i64>, ErrorBody> {
        let Some(value) = self.present(name) else {
            return Ok(None);
        };
        let number = value
            .as_i64()
            .or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            })
            .ok_or_else(|| self.wrong_type(name, "an integer", value))?;
        if !range.contains(&number) {
            return Err(invalid(format!(
                "{}: argument `{name}` must be between {} and {}, got {number}",
                self.tool,
                range.start(),
                range.end()
            )));
        }
        Ok(Some(number))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_typed_fields_and_names_bad_ones() {
        let value = json!({"path": "a.csv", "window_rows": 5, "bad": 1.5, "neg": -1});
        let args = Args::new("table_query", &value).unwrap();
        assert_eq!(args.string("path").unwrap(), "a.csv");
        assert_eq!(
            args.optional_integer("window_rows", 1..=10).unwrap(),
            Some(5)
        );
        assert_eq!(args.optional_integer("absent", 1..=10).unwrap(), None);
        let missing = args.string("query").unwrap_err();
        assert_eq!(missing.code, ErrorCode::ValidationFailed);
        assert!(missing.message.contains("`query`"), "{}", missing.message);
        let wrong = args.string("window_rows").unwrap_err();
        assert!(
            wrong.message.contains("`window_rows` must be a string"),
            "{}",
            wrong.message
        );
        let fractional = args.optional_integer("bad", 0..=10).unwrap_err();
        assert!(
            fractional.message.contains("`bad` must be an integer"),
            "{}",
            fractional.message
        );
        let negative = args.optional_integer("neg", 0..=10).unwrap_err();
        assert!(
            negative.message.contains("between 0 and 10"),
            "{}",
            negative.message
        );
    }

    #[test]
    fn refuses_non_objects_and_accepts_null() {
        assert!(Args::new("list_files", &Value::Null).is_ok());
        let err = Args::new("read_file", &json!([1])).err().map(|e| e.code);
        assert_eq!(err, Some(ErrorCode::ValidationFailed));
    }
}
