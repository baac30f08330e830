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
    let Some(content) = written_content(call) else {
        return Vec::new();
    };
    let mut shown: Vec<f64> = Vec::new();
    for fact in facts {
        match serde_json::from_str::<Value>(fact) {
            // A file's map: its counts and ranges say how the file is cut, not what it holds
            // (a one-line text's `line_count: 1` grounded `1.000000` as a budget's total).
            Ok(map) if map.is_object() => result_numbers(&map, &mut shown),
            _ => shown.extend(numbers(fact).into_iter().map(|(_, value)| value)),
        }
    }
    for result in results {
        match serde_json::from_str::<Value>(result) {
            // An aggregate whose filter matched no row shows nothing about the table.
            Ok(value) if value.get("matched_rows").and_then(Value::as_u64) == Some(0) => {}
            Ok(value) => result_numbers(&value, &mut shown),
            Err(_) => shown.extend(numbers(result).into_iter().map(|(_, v)| v)),
        }
        if let Ok(value) = serde_json::from_str::<Value>(result) {
            shown.extend(column_aggregates(&value));
        }
    }
    let mut made_up: Vec<String> = numbers(&content)
        .into_iter()
        .filter(|(text, value)| !shown.iter().any(|seen| rounds_to(*seen, text, *value)))
        .map(|(text, _)| text)
        .collect();
    made_up.dedup();
    made_up
}

/// The fewest numbers a shown column holds for its aggregates to count as shown.
const AGGREGATED_VALUES: usize = 2;

/// The sum, mean, least, greatest and count of the numbers of each column a whole tool result
/// shows (rows of `table_query` or `table_read_rows`, a delimited text `read_file` gave): a
/// number the model computed from one shown column, such as the mean of the values it read,
/// was shown as much as the values were. A result that shows part of its table (`has_more`,
/// fewer lines than the file's) grounds no aggregate: its sum is not the table's.
fn column_aggregates(result: &Value) -> Vec<f64> {
    let lines = |key: &str| result.get(key).and_then(Value::as_u64);
    let partial = result.get("has_more").and_then(Value::as_bool) == Some(true)
        || matches!((lines("line_count"), lines("total_lines")), (Some(read), Some(all)) if read < all)
        || lines("line_start").is_some_and(|start| start > 1);
    if partial {
        return Vec::new();
    }
    let mut found = Vec::new();
    for column in shown_columns(result) {
        let values: Vec<f64> = column.iter().filter_map(|cell| cell_number(cell)).collect();
        if values.len() < AGGREGATED_VALUES {
            continue;
        }
        let count = f64::from(u32::try_from(values.len()).unwrap_or(u32::MAX));
        let sum: f64 = values.iter().sum();
        let least = values.iter().copied().fold(f64::INFINITY, f64::min);
        let greatest = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        found.extend([sum, sum / count, least, greatest, count]);
    }
    found
}

/// The columns of the table a tool result shows, each as its cells' text by row: the `rows`
/// of a query or read, or the lines of a delimited text (split at the first line's delimiter,
/// lines with as many fields as the first).
fn shown_columns(result: &Value) -> Vec<Vec<String>> {
    let mut table: Vec<Vec<String>> = Vec::new();
    if let Some(rows) = result.get("rows").and_then(Value::as_array) {
        table.extend(rows.iter().filter_map(Value::as_array).map(|row| {
            row.iter()
                .map(|cell| match cell {
                    Value::String(text) => text.trim().to_string(),
                    Value::Number(number) => number.to_string(),
                    _ => String::new(),
                })
                .collect()
        }));
    } else if let Some(text) = result.get("content").and_then(Value::as_str) {
        let mut lines = text.lines().filter(|line| !line.trim().is_empty());
        let first = lines.next().unwrap_or_default();
        let Some(delimiter) = ['\t', ';', ',']
            .into_iter()
            .filter(|delimiter| first.contains(*delimiter))
            .max_by_key(|delimiter| first.matches(*delimiter).count())
        else {
            return Vec::new();
        };
        let split = |line: &str| -> Vec<String> {
            (line.split(delimiter))
                .map(|field| field.trim().trim_matches('"').trim().to_string())
                .collect()
        };
        let header = split(first);
        table.extend(lines.map(split).filter(|row| row.len() == header.len()));
    }
    let width = table.iter().map(Vec::len).max().unwrap_or(0);
    (0..width)
        .map(|index| {
            table
                .iter()
                .filter_map(|row| row.get(index).cloned())
                .collect()
        })
        .collect()
}

/// The number a cell holds alone (`43.9`, `-2`, `1,249.50`); `None` for text, `NA` or empty.
fn cell_number(cell: &str) -> Option<f64> {
    match numbers(cell).as_slice() {
        [(text, value)] if cell.trim_start_matches('-') == text => Some(*value),
        _ => None,
    }
}

/// The fewest cells a row has for its copy to count as copying a row.
const COPIED_ROW_CELLS: usize = 3;

/// A row of a table that a `write_text_file` call's content copies whole (every cell of a row
/// of three or more, in order, as a tool result showed it: rows of `table_read_rows` or
/// `table_query`, lines of a delimited text `read_file` gave); `None` for any other call. A
/// small model asked for one column's values writes the whole first row instead.
pub(super) fn copied_row(call: &ToolCall, results: &[String]) -> Option<String> {
    if call.name != CHECKED_TOOL {
        return None;
    }
    let content = written_content(call)?;
    results
        .iter()
        .filter_map(|result| serde_json::from_str::<Value>(result).ok())
        .flat_map(|result| shown_rows(&result))
        .find(|cells| cells.len() >= COPIED_ROW_CELLS && in_order(&content, cells))
        .map(|cells| cells.join(", "))
}

/// Every cell the rows of `results` show, as text.
pub(super) fn shown_values(results: &[String]) -> Vec<String> {
    results
        .iter()
        .filter_map(|result| serde_json::from_str::<Value>(result).ok())
        .flat_map(|result| shown_rows(&result))
        .flatten()
        .collect()
}

/// The rows a tool result shows, each as its non-empty cells' text.
fn shown_rows(result: &Value) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    if let Some(table) = result.get("rows").and_then(Value::as_array) {
        rows.extend(table.iter().filter_map(Value::as_array).map(|row| {
            row.iter()
                .filter_map(|cell| match cell {
                    Value::String(text) => Some(text.trim().to_string()),
                    Value::Number(number) => Some(number.to_string()),
                    Value::Bool(flag) => Some(flag.to_string()),
                    _ => None,
                })
                .filter(|text| !text.is_empty())
                .collect()
        }));
    }
    if let Some(text) = result.get("content").and_then(Value::as_str) {
        rows.extend(text.lines().map(|line| {
            line.split([',', '\t', ';'])
                .map(|field| field.trim().to_string())
                .filter(|field| !field.is_empty())
                .collect()
        }));
    }
    rows
}

/// True when every one of `cells` occurs in `content`, each after the one before.
fn in_order(content: &str, cells: &[String]) -> bool {
    let mut rest = content;
    cells.iter().all(|cell| match rest.find(cell.as_str()) {
        Some(at) => {
            rest = &rest[at + cell.len()..];
            true
        }
        None => false,
    })
}

/// What the model is told when its write copies a row whole.
pub(super) fn copied_row_refusal(row: &str) -> String {
    not_written(format!(
        "not written: the content copies a whole row the tools showed ({row}); write only what \
         the request asks for. For a table, query just those values with table_query (for \
         example SELECT DISTINCT one column, or a COUNT or SUM), then write the result."
    ))
}

/// The file a `write_text_file` call writes; `None` for any other call.
pub(super) fn written_path(call: &ToolCall) -> Option<String> {
    if call.name != CHECKED_TOOL {
        return None;
    }
    serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .and_then(|arguments| arguments.get("path")?.as_str().map(str::to_string))
}

/// The content of a `write_text_file` call; `None` for any other call.
pub(super) fn text_content(call: &ToolCall) -> Option<String> {
    (call.name == CHECKED_TOOL)
        .then(|| written_content(call))
        .flatten()
}

fn written_content(call: &ToolCall) -> Option<String> {
    serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .and_then(|arguments| arguments.get("content")?.as_str().map(str::to_string))
}

/// The fewest words in a row the content shares with the request or the item for it to
/// count as restating them.
const RESTATED_WORDS: usize = 6;

/// True when a `write_text_file` call's content repeats [`RESTATED_WORDS`] words in a row of
/// one of `task` (the request, the item's label and description): a small model writes the
/// task instead of doing it (`Total (Quantity times Unit Price) of order 1 with two
/// decimals`). Words the content writes as one of `quoted` (the texts the request quotes, to
/// be written word for word) are the request's text, not its task: a run of them alone is no
/// restating (`Write "Revenue grew by 15% and three major releases shipped." into notes.txt`).
pub(super) fn restates(call: &ToolCall, task: &[&str], quoted: &[String]) -> bool {
    let Some(content) = written_content(call).filter(|_| call.name == CHECKED_TOOL) else {
        return false;
    };
    let written = words(&content);
    let mut in_quote = vec![false; written.len()];
    for quote in quoted.iter().map(|text| words(text)) {
        if quote.is_empty() || quote.len() > written.len() {
            continue;
        }
        for start in 0..=written.len() - quote.len() {
            if written[start..start + quote.len()] == quote[..] {
                in_quote[start..start + quote.len()].fill(true);
            }
        }
    }
    task.iter().any(|text| {
        let told = words(text);
        (0..written.len().saturating_sub(RESTATED_WORDS - 1)).any(|start| {
            let run = start..start + RESTATED_WORDS;
            !in_quote[run.clone()].iter().all(|quoted| *quoted)
                && told
                    .windows(RESTATED_WORDS)
                    .any(|other| other == &written[run.clone()])
        })
    })
}

/// The words of `text`, lower case.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// What the model is told when its write restates the task.
pub(super) fn restated_refusal() -> String {
    not_written(
        "not written: the content repeats the request instead of answering it; write the value \
         or text the request asks for"
            .to_string(),
    )
}

/// The template placeholders (`{{name}}`, `${name}`, `<name>`) a write's values introduce that nothing
/// the model was shown holds: a small model fills a template with new placeholders
/// (`{{new_text}}`) instead of the values the request gives.
pub(super) fn invented_placeholders(
    call: &ToolCall,
    facts: &[&str],
    results: &[String],
) -> Vec<String> {
    let Ok(arguments) = serde_json::from_str::<Value>(&call.arguments) else {
        return Vec::new();
    };
    let mut written = Vec::new();
    written_values(&arguments, &mut written);
    let shown = |placeholder: &str| {
        facts.iter().any(|fact| fact.contains(placeholder))
            || results.iter().any(|result| result.contains(placeholder))
    };
    let mut invented: Vec<String> = written
        .iter()
        .flat_map(|value| placeholders(value))
        .filter(|placeholder| !shown(placeholder))
        .collect();
    invented.dedup();
    invented
}

/// The argument keys whose values name what to find or where, not what is written.
const LOCATING_KEYS: &[&str] = &["path", "search", "find", "op", "sheet", "target_path"];

/// The texts `value` (a call's arguments) writes: its string leaves but those naming what to
/// find or where ([`LOCATING_KEYS`]).
pub(super) fn written_values<'a>(value: &'a Value, into: &mut Vec<&'a str>) {
    for_each_leaf(value, None, &mut |key, leaf| {
        if let Value::String(text) = leaf
            && !key.is_some_and(|key| LOCATING_KEYS.contains(&key))
        {
            into.push(text);
        }
    });
}

/// Calls `visit` on every value of `value` that is neither an array nor an object, with the
/// key of the nearest object field holding it (`None` at the top).
fn for_each_leaf<'a>(
    value: &'a Value,
    key: Option<&'a str>,
    visit: &mut impl FnMut(Option<&'a str>, &'a Value),
) {
    match value {
        Value::Array(items) => items
            .iter()
            .for_each(|item| for_each_leaf(item, key, visit)),
        Value::Object(object) => object
            .iter()
            .for_each(|(key, item)| for_each_leaf(item, Some(key), visit)),
        leaf => visit(key, leaf),
    }
}

/// The `{{…}}`, `${…}` and `<…>` tokens of `text` (short, on one line).
fn placeholders(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (open, close) in [("{{", "}}"), ("${", "}"), ("<", ">")] {
        let mut rest = text;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len()..];
            let Some(end) = after.find(close) else { break };
            let inner = &after[..end];
            if !inner.is_empty() && inner.len() <= 40 && !inner.contains('\n') {
                found.push(format!("{open}{inner}{close}"));
            }
            rest = &after[end + close.len()..];
        }
    }
    found
}

/// What the model is told when its write introduces placeholders.
pub(super) fn invented_refusal(invented: &[String]) -> String {
    not_written(format!(
        "not written: {} is a placeholder, not a value; write the actual text the request gives",
        invented.join(", ")
    ))
}

/// The fewest words a placeholder's wording has to count as copied without its brackets
/// (`<new text>` is too short to tell from content).
const PLACEHOLDER_WORDS: usize = 3;

/// The example placeholders `call`'s arguments carry (a write copied from the prompt's
/// example instead of filled in): as shown, or their wording of [`PLACEHOLDER_WORDS`] or more
/// words without the brackets, in any case.
pub(super) fn copied_placeholders(call: &ToolCall) -> Vec<&'static str> {
    let arguments = call.arguments.to_lowercase();
    super::prompts::EXAMPLE_PLACEHOLDERS
        .iter()
        .copied()
        .filter(|placeholder| {
            let wording = placeholder.trim_matches(['<', '>']).to_lowercase();
            call.arguments.contains(placeholder)
                || (wording.split_whitespace().count() >= PLACEHOLDER_WORDS
                    && arguments.contains(&wording))
        })
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
/// (`read_file`'s `line_start: 1` is no count of anything; a query's `row_count: 1` is the
/// size of its answer, not the table's: the table's row count is `total_rows`, or the map's).
const RESULT_METADATA_KEYS: &[&str] = &[
    "line_start",
    "line_count",
    "total_lines",
    "offset",
    "length",
    "window_offset",
    "window_rows",
    "bytes_written",
    "row_start",
    "row_count",
    "total_row_count",
    "query_elapsed_ms",
    "matched_rows",
    "size",
    "replacements",
    "index",
    "chunks",
    "slide_index",
    "encoding_confidence",
    "line_end",
    "level",
    "heading_level",
    "paragraphs",
    "tables",
    "words",
];

/// Keys whose text values are ranges of the file (`"rows": "1-500"`, `"range": "A1:H500"`) when
/// they look like one.
const RANGE_KEYS: &[&str] = &["rows", "range"];

/// True for `1-500` and `A1:H500`.
fn is_range(text: &str) -> bool {
    let cell = |part: &str| {
        let digits = part.trim_start_matches(|c: char| c.is_ascii_uppercase());
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    };
    let numbered = |part: &str| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit());
    match (text.split_once('-'), text.split_once(':')) {
        (Some((from, to)), None) => numbered(from) && numbered(to),
        (None, Some((from, to))) => cell(from) && cell(to),
        _ => false,
    }
}

/// The numbers of a JSON tool result: in its text values and its numeric values, except those
/// of [`RESULT_METADATA_KEYS`].
fn result_numbers(value: &Value, into: &mut Vec<f64>) {
    for_each_leaf(value, None, &mut |key, leaf| match leaf {
        Value::Number(number) => {
            let metadata = key.is_some_and(|key| RESULT_METADATA_KEYS.contains(&key));
            if let (false, Some(number)) = (metadata, number.as_f64()) {
                into.push(number);
            }
        }
        Value::String(text)
            if key.is_some_and(|key| RANGE_KEYS.contains(&key)) && is_range(text) => {}
        Value::String(text) => into.extend(numbers(text).into_iter().map(|(_, v)| v)),
        _ => {}
    });
}

/// The most decimals a written number may round a shown one to; a longer one must be the
/// shown number as it is (`1.0000000000000001` is no rounding of `1`).
const MAX_ROUNDED_DECIMALS: usize = 6;

/// True when the written number (`text`, of value `value`) is `shown` as written or rounded to
/// the decimals it has (`1249.50` and `1249.5` for 1249.5; `0.30` for 0.30000000000000004).
fn rounds_to(shown: f64, text: &str, value: f64) -> bool {
    let decimals = text
        .split_once('.')
        .map_or(0, |(_, fraction)| fraction.len());
    if decimals > MAX_ROUNDED_DECIMALS {
        return shown.to_string() == text.replace(',', "");
    }
    let half_unit = 0.5 * 10f64.powi(-i32::try_from(decimals).unwrap_or(0));
    (shown - value).abs() <= half_unit + 1e-9 * shown.abs().max(value.abs()).max(1.0)
}

/// Every number in `text` (digits with optional thousands commas and decimals, an optional
/// minus), with its value; digits that are part of a word or a date-like run are taken whole.
pub(super) fn numbers(text: &str) -> Vec<(String, f64)> {
    let mut found = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut index = 0;
    while index < chars.len() {
        let starts = chars[index].is_ascii_digit()
            && (index == 0 || {
                let before = chars[index - 1];
                // After a comma that follows a digit, the digits continue a number (1,249).
                let continues = before == ',' && index >= 2 && chars[index - 2].is_ascii_digit();
                let in_word = before.is_alphabetic() && !after_code(&chars[..index]);
                !(before.is_ascii_digit() || before == '.' || in_word || continues)
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

/// True when `before` ends in a code of three or more capitals (`EUR1234`, `USD12`): the
/// digits after it are an amount, not part of an identifier (`abc123`, `v2`, `Q1`).
fn after_code(before: &[char]) -> bool {
    let letters = before
        .iter()
        .rev()
        .take_while(|c| c.is_alphabetic())
        .collect::<Vec<_>>();
    letters.len() >= 3 && letters.iter().all(|c| c.is_ascii_uppercase())
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
        assert!(values("due 2026-02-18, v2, Q1 and abc123").is_empty());
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
        // As the 0.5B model wrote count.txt after `SELECT COUNT(*)` answered 5 in one row.
        let counted = vec![r#"{"columns":["count_star()"],"row_count":1,"rows":[[5]],"total_row_count":1,"query_elapsed_ms":4}"#.to_string()];
        assert_eq!(
            made_up_numbers(&write("1"), &["count.txt"], &counted),
            ["1"]
        );
        assert!(made_up_numbers(&write("5"), &["count.txt"], &counted).is_empty());
        // As it wrote order_total.txt: a count over a filter that matched nothing.
        let nothing = vec![r#"{"columns":["Total"],"rows":[[0]],"matched_rows":0}"#.to_string()];
        assert_eq!(
            made_up_numbers(&write("Total: 0.00"), &["order_total.txt"], &nothing),
            ["0.00"]
        );
        // As it wrote total.txt: a one-line text's map counts its lines, not the budget.
        let map = r#"{"path":"budget_notes.txt","line_count":1,"chunks":[{"index":0,"line_start":1,"line_count":1}],"sections":[{"index":0,"words":12,"rows":"1-500","range":"A1:H500"}]}"#;
        let notes = vec![
            r#"{"content":"Entertainment 500 EUR, Bills 2000 EUR.","line_count":1}"#.to_string(),
        ];
        assert_eq!(
            made_up_numbers(
                &write("1.000000"),
                &["Write the total into total.txt", map],
                &notes
            ),
            ["1.000000"]
        );
        assert!(made_up_numbers(&write("2000"), &[map], &notes).is_empty());
        let made_up = |content: &str| made_up_numbers(&write(content), &facts, &results);
        assert_eq!(made_up("1"), ["1"]);
        assert!(made_up("7").is_empty());
        assert!(made_up("5").is_empty());
        assert!(made_up("1,249.50\n").is_empty());
        assert_eq!(made_up("Total: EUR12345 and 3500"), ["12345", "3500"]);
        // Rounded to the decimals written, not past a few of them.
        assert!(made_up("1249.50").is_empty());
        assert!(made_up("1250").is_empty());
        assert_eq!(made_up("1.0000000000000001"), ["1.0000000000000001"]);
        // As the 0.5B model wrote total.txt: an amount glued to its currency.
        assert_eq!(
            made_up("Total monthly budget: EUR1234567890"),
            ["1234567890"]
        );
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
        // As it wrote contact.txt: the placeholder's wording without its brackets.
        assert_eq!(
            copied_placeholders(&write("The text the request asks for")),
            ["<the text the request asks for>"]
        );
        assert!(copied_placeholders(&write("new text")).is_empty());
        assert!(placeholder_refusal(&copied_placeholders(&copied)).contains("VALIDATION_FAILED"));
    }

    #[test]
    fn a_write_that_copies_a_shown_row_whole_is_found() {
        // As the 0.5B model wrote owners.txt: the first row of the table it read.
        let rows = r#"{"columns":["Milestone","Owner","Department","Due"],"rows":[["Context UX polish","Ethan Park","Engineering","2026-02-18"]]}"#;
        let text = r#"{"content":"Milestone,Owner,Due\nDirect edit,Luis Alvarez,2026-02-19\n"}"#;
        let results = vec![rows.to_string(), text.to_string()];
        let copied = |content: &str| copied_row(&write(content), &results);
        assert_eq!(
            copied("Context UX polish,Ethan Park,Engineering,2026-02-18,In progress").as_deref(),
            Some("Context UX polish, Ethan Park, Engineering, 2026-02-18")
        );
        assert_eq!(
            copied("Milestone\tOwner\tDue").as_deref(),
            Some("Milestone, Owner, Due")
        );
        // Values picked out of rows are what the request asks for.
        assert_eq!(copied("Ethan Park\nLuis Alvarez"), None);
        // Cells out of order are no copy.
        assert_eq!(copied("Engineering: Ethan Park, Context UX polish"), None);
        assert!(copied_row_refusal("a, b, c").contains("copies a whole row"));
    }

    #[test]
    fn a_write_restating_the_task_or_inventing_placeholders_is_found() {
        let task = [
            "client_data.csv has one order. Write its total (Quantity times Unit Price) with two decimals into order_total.txt.",
        ];
        // As the 0.5B model wrote order_total.txt.
        let restated = write(
            "Total (Quantity times Unit Price) of order 1 with two decimals into order_total.txt",
        );
        assert!(restates(&restated, &task, &[]));
        assert!(!restates(&write("1249.50"), &task, &[]));
        assert!(restated_refusal().contains("repeats the request"));
        // As it filled the invoice: a new placeholder instead of the request's value.
        let facts =
            ["Fill invoice_template.docx: company Acme Ltd (replace the {{company}} placeholder)"];
        let results = vec![r#"{"blocks":[{"text":"Date: <date>"}]}"#.to_string()];
        let fill = |replace: &str| ToolCall {
            id: "call_t1".into(),
            name: "docx_operations".into(),
            arguments: serde_json::json!({"path": "invoice.docx", "operations": [
                {"op": "replace_text", "search": "{{company}}", "replace": replace}]})
            .to_string(),
        };
        assert_eq!(
            invented_placeholders(&fill("{{new_text}}"), &facts, &results),
            ["{{new_text}}"]
        );
        assert!(invented_placeholders(&fill("Acme Ltd"), &facts, &results).is_empty());
        // Placeholders the request or a result shows are not invented.
        assert!(
            invented_placeholders(&fill("{{company}} and <date>"), &facts, &results).is_empty()
        );
        assert!(invented_refusal(&["{{x}}".into()]).contains("{{x}} is a placeholder"));
        // As it wrote order_total.txt: a template variable.
        assert_eq!(
            invented_placeholders(&write("Total: ${Total}\n"), &facts, &results),
            ["${Total}"]
        );
    }

    #[test]
    fn a_quoted_text_written_as_asked_is_no_restating() {
        let sentence = "Revenue grew by 15% and three major releases shipped.";
        let request = format!("Write \"{sentence}\" into notes.txt");
        let task = [
            request.as_str(),
            "Do plan item 1: Write — write the sentence",
        ];
        let quoted = crate::request::quoted_texts(&request);
        assert!(!restates(&write(sentence), &task, &quoted));
        assert!(!restates(
            &write(&format!("Summary: {sentence}\n")),
            &task,
            &quoted
        ));
        // Without the quotes it is six of the request's words in a row.
        assert!(restates(&write(sentence), &task, &[]));
        // Words of the request around the quote are still its task.
        assert!(restates(
            &write(&format!("{sentence} into notes.txt")),
            &task,
            &quoted
        ));
    }

    #[test]
    fn a_sum_mean_extreme_or_count_of_one_whole_shown_column_is_shown() {
        // A bill-length column as table_query gave it, one value NA (null).
        let query = r#"{"columns":["species","bill_length_mm"],"row_count":5,"rows":[["Adelie",39.1],["Adelie",39.5],["Adelie",40.3],["Adelie",null],["Adelie",36.7]],"total_row_count":5,"has_more":false,"query_elapsed_ms":3}"#;
        let made_up = |content: &str, result: &str| {
            made_up_numbers(
                &write(content),
                &["Write the mean bill length into mean.txt"],
                &[result.to_string()],
            )
        };
        for computed in ["38.90", "38.9", "155.6", "4", "36.7", "40.3"] {
            assert!(made_up(computed, query).is_empty(), "{computed}");
        }
        assert_eq!(made_up("38.95", query), ["38.95"]);
        assert_eq!(made_up("5", query), ["5"]);
        // A window of a longer table: its mean is not the table's.
        let window = query.replace(r#""has_more":false"#, r#""has_more":true"#);
        assert_eq!(made_up("38.90", &window), ["38.90"]);
        // A delimited text read whole: its columns by the header's delimiter, NA skipped.
        let read = r#"{"content":"species;bill_length_mm\nAdelie;39.1\nAdelie;NA\nGentoo;46.5\n","line_start":1,"line_count":4,"total_lines":4}"#;
        assert!(made_up("42.80", read).is_empty());
        assert!(made_up("85.6", read).is_empty());
        let part = read.replace(r#""line_count":4"#, r#""line_count":3"#);
        assert_eq!(made_up("42.80", &part), ["42.80"]);
        // Values of two columns are not aggregated together.
        let two = r#"{"columns":["a","b"],"rows":[[1,10],[2,20]],"has_more":false}"#;
        assert!(made_up("15", two).is_empty());
        assert_eq!(made_up("33", two), ["33"]);
    }
}
