//! Target contracts in a plan: how they are written, read and rendered, and how written
//! content is checked against one.
//!
//! In a checklist a contract is a line under its item, one per target:
//!
//! ```text
//! - [ ] 1. Count — count the distinct islands → islands.txt
//!   - islands.txt: number from penguins.csv = SELECT count(DISTINCT island) FROM data
//!   - names.txt: list of 3
//!   - summary.csv: table (island, penguins)
//!   - budget.xlsx: edit at Summary!B2, Summary!B3
//! ```
//!
//! `PATH: KIND [of N] [(COLUMNS)] [at REFS] [from FILE = SQL]`, the kind one of
//! [`Holds`]. In a schema-bound plan a target is an object with the same fields
//! ([`from_json`]). The checks here are on text the engine read back from the draft
//! ([`check`]); the driver gathers the text and the source's rows.

use atelier_messages::contract::{Contract, Holds, Source};
use serde_json::{Value, json};

/// Reads a contract line (`PATH: KIND …`, after an optional bullet); `None` for any other
/// line.
pub fn parse_line(line: &str) -> Option<Contract> {
    let line = line.trim();
    let line = line
        .strip_prefix(['-', '*', '↳'])
        .map_or(line, str::trim_start);
    let (path, rest) = line.split_once(':')?;
    let path = clean_path(path);
    if path.is_empty() || path.contains(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim_start();
    let kind_end = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    let holds = Holds::parse(&rest[..kind_end])?;
    let mut contract = Contract::new(path, holds);
    let mut rest = &rest[kind_end..];
    if let Some(at) = rest.find(" from ") {
        contract.source = parse_source(&rest[at + " from ".len()..]);
        rest = &rest[..at];
    }
    read_modifiers(rest, &mut contract);
    Some(contract)
}

/// `FILE = SQL` of a contract line.
fn parse_source(text: &str) -> Option<Source> {
    let (path, query) = text.split_once('=')?;
    let path = clean_path(path);
    let query = query.trim().trim_matches('`').trim();
    (!path.is_empty() && !query.is_empty()).then(|| Source {
        path,
        query: query.to_string(),
    })
}

/// `of N`, `(COLUMNS)` and `at REFS` of a contract line, in any order.
fn read_modifiers(text: &str, contract: &mut Contract) {
    let text = text.trim();
    match (text.find('('), text.rfind(')')) {
        (Some(open), Some(close)) if open < close => {
            contract.columns = split_list(&text[open + 1..close]);
            let remaining = format!("{} {}", &text[..open], &text[close + 1..]);
            read_count_and_touches(&remaining, contract);
        }
        _ => read_count_and_touches(text, contract),
    }
}

fn read_count_and_touches(text: &str, contract: &mut Contract) {
    let text = text.trim();
    let (before, touches) = match text.find("at ") {
        Some(at) if at == 0 || text[..at].ends_with(' ') => (&text[..at], Some(&text[at + 3..])),
        _ => (text, None),
    };
    if let Some(touches) = touches {
        contract.touches = split_list(touches);
    }
    let mut words = before.split_whitespace();
    while let Some(word) = words.next() {
        let number = if word == "of" {
            words.next()
        } else {
            Some(word)
        };
        if let Some(count) = number.and_then(|word| word.parse().ok()) {
            contract.count = Some(count);
        }
    }
}

fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(|part| {
            part.trim()
                .trim_matches(['`', '"', '\''])
                .trim()
                .to_string()
        })
        .filter(|part| !part.is_empty())
        .collect()
}

/// A path as a plan writes it: trimmed of quotes, backticks, emphasis and a leading `./`.
pub fn clean_path(text: &str) -> String {
    text.trim()
        .trim_matches(|c: char| matches!(c, '`' | '"' | '\'' | '*'))
        .trim_start_matches("./")
        .to_string()
}

/// The contract as its checklist line (without the bullet): the form [`parse_line`] reads.
pub fn render(contract: &Contract) -> String {
    let mut line = format!("{}: {}", contract.path, contract.holds);
    if let Some(count) = contract.count {
        line.push_str(&format!(" of {count}"));
    }
    if !contract.columns.is_empty() {
        line.push_str(&format!(" ({})", contract.columns.join(", ")));
    }
    if !contract.touches.is_empty() {
        line.push_str(&format!(" at {}", contract.touches.join(", ")));
    }
    if let Some(source) = &contract.source {
        line.push_str(&format!(
            " from {} = {}",
            source.path,
            one_line(&source.query)
        ));
    }
    line
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A target object of a schema-bound plan (`{"path", "holds", "count", "columns", "touches",
/// "source": {"path", "query"}}`) as a contract; `None` without a path or a known kind (a
/// bare string target has no contract).
pub fn from_json(target: &Value) -> Option<Contract> {
    let path = clean_path(target.get("path")?.as_str()?);
    let holds = Holds::parse(target.get("holds")?.as_str()?)?;
    let strings = |key: &str| -> Vec<String> {
        target
            .get(key)
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(Value::as_str)
                    .map(|text| text.trim().to_string())
                    .filter(|text| !text.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut contract = Contract::new(path, holds);
    contract.count = target.get("count").and_then(Value::as_u64);
    contract.columns = strings("columns");
    contract.touches = strings("touches");
    contract.source = target.get("source").and_then(|source| {
        let path = clean_path(source.get("path")?.as_str()?);
        let query = source.get("query")?.as_str()?.trim().to_string();
        (!path.is_empty() && !query.is_empty()).then_some(Source { path, query })
    });
    (!contract.path.is_empty()).then_some(contract)
}

/// The longest source query a schema-bound target may name: a query giving one figure, list or
/// table is short, and a reply limit of a few hundred tokens must hold it with its plan.
const MAX_QUERY_CHARS: usize = 500;

/// The JSON schema of a schema-bound plan's target object; `path` is `path_schema`. Each kind
/// has its own object, with only the fields it can use (`count` on a list, `columns` on a
/// table, `touches` on an edit). When the workbench has files a source can name (`sources`:
/// tables and text files, [`review::Sources`]), a number, list or table must name its source,
/// one of those files and a query: a figure computed from data says where it comes from, so
/// the engine can check it.
pub fn target_schema(path_schema: Value, sources: &[String]) -> Value {
    let text = json!({"type": "string", "minLength": 1, "maxLength": 300});
    let source_path = if sources.is_empty() {
        text.clone()
    } else {
        json!({"type": "string", "enum": sources})
    };
    let source = json!({
        "type": "object",
        "properties": {
            "path": source_path,
            "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS}
        },
        "required": ["path", "query"],
        "additionalProperties": false
    });
    let strings = json!({"type": "array", "items": text, "maxItems": 32});
    let variant = |holds: Holds, extra: &[(&str, Value)]| {
        let mut properties = serde_json::Map::new();
        properties.insert("path".into(), path_schema.clone());
        properties.insert(
            "holds".into(),
            json!({"type": "string", "enum": [holds.as_str()]}),
        );
        let mut required = vec!["path", "holds"];
        for (name, schema) in extra {
            properties.insert((*name).to_string(), schema.clone());
        }
        if holds.computed() {
            properties.insert("source".into(), source.clone());
            if !sources.is_empty() {
                required.push("source");
            }
        }
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        })
    };
    let count = json!({"type": "integer", "minimum": 0});
    json!({"anyOf": [
        variant(Holds::Number, &[]),
        variant(Holds::List, &[("count", count)]),
        variant(Holds::Table, &[("columns", strings.clone())]),
        variant(Holds::Text, &[]),
        variant(Holds::Edit, &[("touches", strings)]),
        variant(Holds::Absent, &[]),
    ]})
}

/// What a source query returned: its column names and rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
    /// False when the query returned more rows than were read: only the first are compared.
    pub complete: bool,
}

impl Rows {
    /// The rows of a `table_query` result (`{"columns": [...], "rows": [[...]]}`).
    pub fn of_result(result: &Value) -> Option<Rows> {
        let columns = result
            .get("columns")
            .and_then(Value::as_array)
            .map(|columns| {
                columns
                    .iter()
                    .map(|column| match column {
                        Value::String(name) => name.clone(),
                        other => other
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let rows = result
            .get("rows")?
            .as_array()?
            .iter()
            .filter_map(|row| row.as_array().cloned())
            .collect();
        Some(Rows {
            columns,
            rows,
            complete: read_whole(result),
        })
    }
}

/// True when a read tool's result holds all there is (its `has_more` is not true).
fn read_whole(result: &Value) -> bool {
    !result
        .get("has_more")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

pub mod cells;
mod checks;
mod grounded;
pub mod parts;
pub mod review;

pub use checks::{check, check_sheets, figures_as_text, parse_number, told};
pub use grounded::{NamedSource, shown_text, ungrounded_text};

#[cfg(test)]
mod tests;
