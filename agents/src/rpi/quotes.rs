//! The request's own words as obligations: texts it quotes to be added word for word (`Append …
//! a paragraph "Conclusion"`) and template placeholders it names to be replaced (`replace the
//! {{company}}, {{date}} and {{total}} placeholders`).
//!
//! With a compact prompt (a small model) the engine holds the job to them: a job whose calls
//! never wrote one of the quoted texts, or never replaced one of the placeholders, does not
//! succeed (`ITEM_NOT_DONE`, naming what is missing; the 0.5B model replaced `{{company}}`,
//! said the item was done and left the other two). A paragraph appended or inserted again with
//! a text the document already showed is refused (given two items, it appended the same
//! paragraph twice and never the other one).

use atelier_messages::{ErrorBody, ErrorCode};
use serde_json::Value;

use crate::provider::ToolCall;

use super::grounding::{self, not_written};
use super::types::RpiState;

/// The operations that add a paragraph.
const ADDING_OPS: &[&str] = &["append_paragraph", "insert_paragraph"];

/// Crosses off what the successful write `call` did: the quoted texts it wrote and the
/// placeholders it replaced.
pub(super) fn record(state: &mut RpiState, call: &ToolCall) {
    state.unwritten_quotes.retain(|text| !writes(call, text));
    state
        .unreplaced_placeholders
        .retain(|placeholder| !replaces(call, placeholder));
}

/// True when `call` replaces `placeholder` (a `search` it gives holds it).
fn replaces(call: &ToolCall, placeholder: &str) -> bool {
    let Ok(arguments) = serde_json::from_str::<Value>(&call.arguments) else {
        return false;
    };
    let Some(operations) = arguments.get("operations").and_then(Value::as_array) else {
        return false;
    };
    operations
        .iter()
        .filter_map(|operation| operation.get("search")?.as_str())
        .any(|search| search.contains(placeholder))
}

/// True when `call` writes `text` (in a value it writes, not in one naming what to find).
fn writes(call: &ToolCall, text: &str) -> bool {
    let Ok(arguments) = serde_json::from_str::<Value>(&call.arguments) else {
        return false;
    };
    let mut written = Vec::new();
    grounding::written_values(&arguments, &mut written);
    written.iter().any(|value| value.contains(text))
}

/// Why `call` is refused when it adds a paragraph whose text a document `results` showed
/// already holds.
pub(super) fn added_again(call: &ToolCall, results: &[String]) -> Option<String> {
    let arguments: Value = serde_json::from_str(&call.arguments).ok()?;
    let shown: Vec<String> = results
        .iter()
        .filter_map(|result| serde_json::from_str::<Value>(result).ok())
        .flat_map(|result| paragraphs(&result))
        .collect();
    let text = arguments
        .get("operations")?
        .as_array()?
        .iter()
        .filter(|operation| {
            operation
                .get("op")
                .and_then(Value::as_str)
                .is_some_and(|op| ADDING_OPS.contains(&op))
        })
        .filter_map(|operation| operation.get("text")?.as_str())
        .find(|text| shown.iter().any(|paragraph| paragraph == text.trim()))?;
    Some(not_written(format!(
        "not written: the document already holds the paragraph {text:?}; add the text the \
         request asks for that it does not hold yet"
    )))
}

/// The texts of a `read_file` result's paragraphs, trimmed.
fn paragraphs(result: &Value) -> Vec<String> {
    let Some(blocks) = result.get("blocks").and_then(Value::as_array) else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("paragraph"))
        .filter_map(|block| block.get("text")?.as_str())
        .map(|text| text.trim().to_string())
        .filter(|text| !text.is_empty())
        .collect()
}

/// `ITEM_NOT_DONE` when a text the request quotes to be added was written by no call, or a
/// placeholder it names was replaced by none.
pub(super) fn unwritten(state: &RpiState) -> Option<ErrorBody> {
    let mut missing: Vec<String> = Vec::new();
    if !state.unwritten_quotes.is_empty() {
        let quoted: Vec<String> = (state.unwritten_quotes.iter())
            .map(|text| format!("{text:?}"))
            .collect();
        missing.push(format!(
            "quotes {} to be added, and no call wrote it",
            quoted.join(", ")
        ));
    }
    if !state.unreplaced_placeholders.is_empty() {
        missing.push(format!(
            "names {} to be replaced, and no call replaced it",
            state.unreplaced_placeholders.join(", ")
        ));
    }
    if missing.is_empty() {
        return None;
    }
    Some(ErrorBody::new(
        ErrorCode::ItemNotDone,
        format!(
            "the request {}; the job did not do what was asked",
            missing.join("; it ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(text: &str) -> ToolCall {
        ToolCall {
            id: "call_a".into(),
            name: "docx_operations".into(),
            arguments: serde_json::json!({
                "path": "simple.docx",
                "operations": [{"op": "append_paragraph", "text": text}]
            })
            .to_string(),
        }
    }

    #[test]
    fn quoted_texts_are_checked_on_what_the_calls_write() {
        let sentence = "Revenue grew by 15% and three major releases shipped.";
        assert!(writes(&append(sentence), sentence));
        assert!(!writes(&append(sentence), "Conclusion"));
        // A text searched for is not written.
        let replace = ToolCall {
            arguments: serde_json::json!({"path": "a.docx", "operations": [
                {"op": "replace_text", "search": "Conclusion", "replace": "Summary"}]})
            .to_string(),
            ..append("")
        };
        assert!(!writes(&replace, "Conclusion"));
        // As the 0.5B model did it: item 2 appended the paragraph item 1 had appended.
        let read = serde_json::json!({"blocks": [
            {"index": 0, "type": "paragraph", "text": "Introduction"},
            {"index": 5, "type": "paragraph", "text": sentence}]})
        .to_string();
        let again = added_again(&append(sentence), std::slice::from_ref(&read));
        assert!(again.is_some_and(|why| why.contains("already holds the paragraph")));
        assert_eq!(added_again(&append("Conclusion"), &[read]), None);
        let mut state = RpiState {
            unwritten_quotes: vec!["Conclusion".into(), sentence.into()],
            unreplaced_placeholders: vec!["{{company}}".into(), "{{date}}".into()],
            ..RpiState::default()
        };
        record(&mut state, &append(sentence));
        // As the 0.5B model filled the invoice: one placeholder of three.
        let fill = ToolCall {
            arguments: serde_json::json!({"path": "invoice.docx", "operations": [
                {"op": "replace_text", "search": "{{company}}", "replace": "Acme Ltd"}]})
            .to_string(),
            ..append("")
        };
        record(&mut state, &fill);
        let error = unwritten(&state).expect("not done");
        assert_eq!(error.code, ErrorCode::ItemNotDone);
        assert_eq!(
            error.message,
            "the request quotes \"Conclusion\" to be added, and no call wrote it; it names \
             {{date}} to be replaced, and no call replaced it; the job did not do what was asked"
        );
        assert_eq!(unwritten(&RpiState::default()), None);
    }
}
