//! Numbers a small model writes must come from somewhere it was shown.
//!
//! With a compact prompt (a small model), a `write_text_file` whose content holds a number
//! that appears nowhere the model was shown facts — the user's request, the structural maps,
//! the tool results (not the engine's own wording, nor the model's plan and notes) — is not
//! run: the model is told which numbers it made
//! up and to compute them with the tools first (`table_query` sums, counts and products). A
//! small model otherwise writes `1` for a count it never looked up, or a total it invented, and
//! the job would end `succeeded` with a wrong file. Numbers are compared by value (`1,249.50`,
//! `1249.5` and `1249.50` are one number); a number that is part of a longer one does not
//! count (`1` is not found in `2026-02-18`).

use serde_json::Value;

use atelier_messages::ErrorCode;

use crate::provider::ToolCall;

/// The tool whose content is checked.
const CHECKED_TOOL: &str = "write_text_file";

/// The numbers of a `write_text_file` call's content that neither `facts` (the request and the
/// maps) nor `results` (the tool results the loop got) show; empty for any other call.
pub(super) fn made_up_numbers(call: &ToolCall, facts: &[&str], results: &[String]) -> Vec<String> {
    if call.name != CHECKED_TOOL {
        return Vec::new();
    }
    let Some(content) = serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .and_then(|arguments| arguments.get("content")?.as_str().map(str::to_string))
    else {
        return Vec::new();
    };
    let mut shown: Vec<f64> = facts
        .iter()
        .flat_map(|fact| numbers(fact))
        .map(|(_, value)| value)
        .collect();
    for result in results {
        match serde_json::from_str::<Value>(result) {
            Ok(value) => result_numbers(&value, None, &mut shown),
            Err(_) => shown.extend(numbers(result).into_iter().map(|(_, v)| v)),
        }
    }
    let mut made_up: Vec<String> = numbers(&content)
        .into_iter()
        .filter(|(_, value)| !shown.iter().any(|seen| same(*seen, *value)))
        .map(|(text, _)| text)
        .collect();
    made_up.dedup();
    made_up
}

/// The example placeholders `call`'s arguments carry (a write copied from the prompt's
/// example instead of filled in).
pub(super) fn copied_placeholders(call: &ToolCall) -> Vec<&'static str> {
    super::prompts::EXAMPLE_PLACEHOLDERS
        .iter()
        .copied()
        .filter(|placeholder| call.arguments.contains(placeholder))
        .collect()
}

/// What the model is told when its write carries an example's placeholders.
pub(super) fn placeholder_refusal(copied: &[&str]) -> String {
    not_written(format!(
        "not written: the call carries {}, the example's placeholder; put the real text there",
        copied.join(", ")
    ))
}

/// A write the engine did not run, told as a tool's `VALIDATION_FAILED` result (the shape
/// `steps::render` gives a failed tool call).
pub(super) fn not_written(message: String) -> String {
    serde_json::json!({"error": {"code": ErrorCode::ValidationFailed, "message": message}})
        .to_string()
}

/// What the model is told instead of the call's result.
pub(super) fn refusal(made_up: &[String]) -> String {
    not_written(format!(
        "not written: the content holds {}, which no tool result, file map or the request \
         shows. Compute it with the tools first (for a table: table_query with SQL such as \
         SELECT COUNT(*) or SUM(...)), then write the number the tool returned.",
        made_up.join(", ")
    ))
}

/// A tool result's keys whose numbers say where or how much was read, not what the file holds
/// (`read_file`'s `line_start: 1` is no count of anything).
const RESULT_METADATA_KEYS: &[&str] = &[
    "line_start",
    "line_count",
    "total_lines",
    "offset",
    "length",
    "window_offset",
    "window_rows",
    "bytes_written",
    "index",
    "chunks",
    "slide_index",
    "encoding_confidence",
];

/// The numbers of a JSON tool result: in its text values and its numeric values, except those
/// of [`RESULT_METADATA_KEYS`].
fn result_numbers(value: &Value, key: Option<&str>, into: &mut Vec<f64>) {
    match value {
        Value::Number(number) => {
            let metadata = key.is_some_and(|key| RESULT_METADATA_KEYS.contains(&key));
            if let (false, Some(number)) = (metadata, number.as_f64()) {
                into.push(number);
            }
        }
        Value::String(text) => into.extend(numbers(text).into_iter().map(|(_, v)| v)),
        Value::Array(items) => items
            .iter()
            .for_each(|item| result_numbers(item, key, into)),
        Value::Object(object) => object
            .iter()
            .for_each(|(key, item)| result_numbers(item, Some(key), into)),
        _ => {}
    }
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Every number in `text` (digits with optional thousands commas and decimals, an optional
/// minus), with its value; digits that are part of a word or a date-like run are taken whole.
fn numbers(text: &str) -> Vec<(String, f64)> {
    let mut found = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut index = 0;
    while index < chars.len() {
        let starts = chars[index].is_ascii_digit()
            && (index == 0 || {
                let before = chars[index - 1];
                // After a comma that follows a digit, the digits continue a number (1,249).
                let continues = before == ',' && index >= 2 && chars[index - 2].is_ascii_digit();
                !(before.is_ascii_digit() || before == '.' || before.is_alphabetic() || continues)
            });
        if !starts {
            index += 1;
            continue;
        }
        let start = index;
        while index < chars.len() && is_number_char(chars[index]) {
            index += 1;
        }
        // A trailing separator belongs to the sentence, not the number.
        let mut end = index;
        while end > start && matches!(chars[end - 1], ',' | '.') {
            end -= 1;
        }
        let token: String = chars[start..end].iter().collect();
        let followed_by_letter = chars.get(index).is_some_and(|c| c.is_alphabetic());
        if followed_by_letter || token.contains('-') {
            continue;
        }
        if let Ok(value) = token.replace(',', "").parse::<f64>() {
            let negative = start > 0 && chars[start - 1] == '-';
            found.push((token, if negative { -value } else { value }));
        }
    }
    found
}

fn is_number_char(c: char) -> bool {
    c.is_ascii_digit() || matches!(c, ',' | '.' | '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(content: &str) -> ToolCall {
        ToolCall {
            id: "call_t1".into(),
            name: CHECKED_TOOL.into(),
            arguments: serde_json::json!({"path": "count.txt", "content": content}).to_string(),
        }
    }

    #[test]
    fn numbers_are_read_whole_and_by_value() {
        let values =
            |text: &str| -> Vec<f64> { numbers(text).into_iter().map(|(_, v)| v).collect() };
        assert_eq!(
            values("5 data rows; 1,249.50 EUR, total 3500."),
            [5.0, 1249.5, 3500.0]
        );
        // Dates, versions and identifiers are not numbers to check.
        assert!(values("due 2026-02-18, v2 and abc123").is_empty());
        assert_eq!(values("-12.5 and 7"), [-12.5, 7.0]);
    }

    #[test]
    fn a_number_no_message_shows_is_made_up() {
        let facts = [
            "Write the number of milestones into count.txt",
            "5 data rows",
        ];
        let results = vec![
            r#"{"rows":[[1249.5]]}"#.to_string(),
            r#"{"content":"a,b\nx,7","line_start":1}"#.to_string(),
        ];
        let made_up = |content: &str| made_up_numbers(&write(content), &facts, &results);
        assert_eq!(made_up("1"), ["1"]);
        assert!(made_up("7").is_empty());
        assert!(made_up("5").is_empty());
        assert!(made_up("1,249.50\n").is_empty());
        assert_eq!(made_up("Total: EUR12345 and 3500"), ["3500"]);
        // Text without numbers, and other tools, pass.
        assert!(made_up("Ethan Park\nMira Kwon").is_empty());
        let other = ToolCall {
            name: "table_query".into(),
            ..write("1")
        };
        assert!(made_up_numbers(&other, &facts, &results).is_empty());
        assert!(refusal(&["1".into()]).contains("holds 1, which no tool result"));
        // As the 0.5B model wrote count.txt in text mode: the example's placeholder.
        let copied = write("<the text the request asks for>");
        assert_eq!(
            copied_placeholders(&copied),
            ["<the text the request asks for>"]
        );
        assert!(copied_placeholders(&write("5")).is_empty());
        assert!(placeholder_refusal(&copied_placeholders(&copied)).contains("VALIDATION_FAILED"));
    }
}
