//! The values a small model's query filters on must come from somewhere it was shown.
//!
//! With a compact prompt, a `table_query` whose `WHERE` compares a column with a text no fact
//! shows — the request, the maps, the tool results — is not run: the 0.5B model, asked for the
//! total of a table's one order, filtered on `Company = 'Your Company'`, matched no row and
//! wrote the empty aggregate as the total. A filter value that is in the table but that the
//! model never saw is refused too; it is told to read the column's values first. Only texts
//! compared by `=`, `<>`, `!=`, `LIKE` or `ILIKE` are checked (a format string such as
//! `strftime(d, '%Y')` is no filter); each part between `%` wildcards must have been shown.

use serde_json::Value;

use crate::provider::ToolCall;

use super::grounding::not_written;

/// The tool whose filters are checked.
const CHECKED_TOOL: &str = "table_query";

/// The words and operators after which a quoted text is a filter value.
const COMPARISONS: &[&str] = &["=", "<>", "!=", " like", " ilike"];

/// The texts `call`'s query compares columns with that neither `facts` nor `results` show (any
/// case); empty for any other call.
pub(super) fn invented_filter_values(
    call: &ToolCall,
    facts: &[&str],
    results: &[String],
) -> Vec<String> {
    if call.name != CHECKED_TOOL {
        return Vec::new();
    }
    let Some(query) = serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .and_then(|arguments| arguments.get("query")?.as_str().map(str::to_string))
    else {
        return Vec::new();
    };
    let shown: Vec<String> = facts
        .iter()
        .map(|fact| fact.to_lowercase())
        .chain(results.iter().map(|result| result.to_lowercase()))
        .collect();
    let mut invented: Vec<String> = compared_texts(&query)
        .into_iter()
        .filter(|text| {
            let text = text.to_lowercase();
            !text
                .split('%')
                .map(str::trim)
                .filter(|part| !part.is_empty())
                .all(|part| shown.iter().any(|fact| fact.contains(part)))
        })
        .collect();
    invented.dedup();
    invented
}

/// The single-quoted texts of `query` (`''` an escaped quote) that follow a comparison.
fn compared_texts(query: &str) -> Vec<String> {
    let mut texts = Vec::new();
    let mut rest = query;
    let mut before = String::new();
    while let Some(open) = rest.find('\'') {
        before.push_str(&rest[..open]);
        let mut text = String::new();
        let mut chars = rest[open + 1..].char_indices().peekable();
        let mut end = None;
        while let Some((at, c)) = chars.next() {
            if c != '\'' {
                text.push(c);
                continue;
            }
            if chars.peek().is_some_and(|(_, next)| *next == '\'') {
                text.push('\'');
                chars.next();
                continue;
            }
            end = Some(open + 1 + at + 1);
            break;
        }
        let Some(end) = end else { break };
        let lead = before.trim_end().to_lowercase();
        if COMPARISONS
            .iter()
            .any(|comparison| lead.ends_with(comparison.trim_start()))
        {
            texts.push(text);
        }
        before.clear();
        rest = &rest[end..];
    }
    texts
}

/// What the model is told when its query filters on values nothing showed.
pub(super) fn refusal(invented: &[String]) -> String {
    let quoted: Vec<String> = invented.iter().map(|text| format!("'{text}'")).collect();
    not_written(format!(
        "not run: the query filters on {}, which neither the request nor any result shows. \
         Query without that filter (the request may want every row), or first read the \
         column's values (SELECT DISTINCT column FROM table)",
        quoted.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> ToolCall {
        ToolCall {
            id: "call_q".into(),
            name: CHECKED_TOOL.into(),
            arguments: serde_json::json!({"path": "client_data.csv", "query": sql}).to_string(),
        }
    }

    #[test]
    fn a_query_filtering_on_values_nothing_showed_is_found() {
        let request = "client_data.csv has one order. Write its total into order_total.txt.";
        // As the 0.5B model wrote it.
        let made_up = query(
            "SELECT SUM(Quantity * Unit_Price) AS Total FROM client_data.csv WHERE \
             Company = 'Your Company' AND Date = 'Your Date' AND Product = 'Your Product'",
        );
        assert_eq!(
            invented_filter_values(&made_up, &[request], &[]),
            ["Your Company", "Your Date", "Your Product"]
        );
        // Values the request or a result shows, wildcards and escaped quotes included.
        let results = vec![r#"{"rows":[["Ethan Park"],["O'Brien Ltd"]]}"#.to_string()];
        let grounded = query(
            "SELECT * FROM t WHERE Owner = 'ethan park' OR Client LIKE '%O''Brien%' \
             OR Name ILIKE 'ethan%park' OR Owner = '%'",
        );
        assert!(invented_filter_values(&grounded, &[request], &results).is_empty());
        // Texts that are no filter values, and calls that are no query.
        let formats = query("SELECT strftime(Date, '%Y') AS y, 'x' AS label FROM t");
        assert!(invented_filter_values(&formats, &[request], &[]).is_empty());
        let write = ToolCall {
            name: "write_text_file".into(),
            ..made_up.clone()
        };
        assert!(invented_filter_values(&write, &[request], &[]).is_empty());
        assert!(refusal(&["Your Company".into()]).contains("'Your Company'"));
    }
}
