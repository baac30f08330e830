//! Loop detection: recent tool calls as (tool, canonical arguments), and how often each repeats.

use std::collections::VecDeque;

use serde_json::Value;

use super::types::Budgets;
use crate::provider::ToolCall;

/// Remembers recent calls as (tool, canonical arguments) and counts repeats.
pub(super) struct LoopDetector {
    window: VecDeque<String>,
    size: usize,
}

impl LoopDetector {
    pub(super) fn new(budgets: &Budgets) -> Self {
        Self {
            window: VecDeque::new(),
            size: budgets.loop_window.max(1),
        }
    }

    /// Adds a call; returns how many times it now appears in the window.
    pub(super) fn observe(&mut self, call: &ToolCall) -> u32 {
        let signature = format!("{}:{}", call.name, canonical_arguments(&call.arguments));
        if self.window.len() == self.size {
            self.window.pop_front();
        }
        self.window.push_back(signature.clone());
        u32::try_from(
            self.window
                .iter()
                .filter(|seen| **seen == signature)
                .count(),
        )
        .unwrap_or(u32::MAX)
    }
}

/// Arguments with sorted keys and collapsed, lower-cased whitespace in strings, so trivially
/// different spellings of one call count as the same call.
fn canonical_arguments(arguments: &str) -> String {
    fn normalize(value: Value) -> Value {
        match value {
            Value::String(text) => Value::String(
                text.split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_lowercase(),
            ),
            Value::Array(items) => Value::Array(items.into_iter().map(normalize).collect()),
            Value::Object(map) => {
                Value::Object(map.into_iter().map(|(k, v)| (k, normalize(v))).collect())
            }
            other => other,
        }
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(value) => normalize(value).to_string(),
        Err(_) => arguments.trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: "x".into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn loop_detector_counts_canonically_equal_calls_in_its_window() {
        let budgets = Budgets {
            loop_window: 4,
            ..Budgets::default()
        };
        let mut detector = LoopDetector::new(&budgets);
        let query = r#"{"path":"a.csv","query":"SELECT 1"}"#;
        let steps = [
            ("table_query", query, 1),
            ("table_query", r#"{"query":"select   1","path":"a.csv"}"#, 2),
            ("read_file", r#"{"path":"a.csv"}"#, 1),
            ("table_query", query, 3),
            // The window holds 4 calls: the first one has left it.
            ("table_query", query, 3),
        ];
        for (step, (name, arguments, repeats)) in steps.into_iter().enumerate() {
            assert_eq!(
                detector.observe(&call(name, arguments)),
                repeats,
                "call #{step}"
            );
        }
    }
}
