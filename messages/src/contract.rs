//! What a plan item promises each of its targets holds when it is done: a target contract.
//!
//! The plan declares, per target, a kind ([`Holds`]) and where the request implies one, the
//! source it comes from (a query over a workbench table). The engine checks the written
//! content against the contract when the item ends; the contract is part of the plan as it is
//! journaled, shown and reviewed.

use serde::{Deserialize, Serialize};

/// What a target must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Holds {
    /// One number, alone (a sign, a decimal point and thousands separators allowed).
    Number,
    /// Values one per line: `count` of them when stated, those of the source when given.
    List,
    /// A delimited table whose header is `columns` when stated, with the source's row count
    /// when given.
    Table,
    /// Text: not empty.
    Text,
    /// An existing file changed in place: the draft changed it, and only at the `touches`
    /// references when they are stated.
    Edit,
    /// An existing file the item deletes or moves away: it is no longer in the draft.
    Absent,
}

impl Holds {
    /// Every kind, in the order the plan's schema offers them.
    pub const ALL: [Holds; 6] = [
        Holds::Number,
        Holds::List,
        Holds::Table,
        Holds::Text,
        Holds::Edit,
        Holds::Absent,
    ];

    /// The kind's name in a plan (`number`, `list`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Holds::Number => "number",
            Holds::List => "list",
            Holds::Table => "table",
            Holds::Text => "text",
            Holds::Edit => "edit",
            Holds::Absent => "absent",
        }
    }

    /// True for the kinds whose values may be computed from a workbench table: a number, a
    /// list, a table.
    pub fn computed(self) -> bool {
        matches!(self, Holds::Number | Holds::List | Holds::Table)
    }

    /// The kind named `name` (any case).
    pub fn parse(name: &str) -> Option<Holds> {
        Holds::ALL
            .into_iter()
            .find(|holds| holds.as_str().eq_ignore_ascii_case(name.trim()))
    }
}

impl std::fmt::Display for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a target's values come from: a read-only query over a workbench table (the table is
/// `data` in the query, as in `table_query`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// The workbench file queried.
    pub path: String,
    /// The SQL `SELECT`.
    pub query: String,
}

/// What one target of a plan item must hold when the item is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contract {
    /// The target's workbench path.
    pub path: String,
    pub holds: Holds,
    /// A list's number of values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// A table's header, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
    /// What an edit touches: cells (`B2`, `Summary!B2`), paragraphs (`paragraph 3`), slides
    /// (`slide 2`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub touches: Vec<String>,
    /// The query the values come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
}

impl Contract {
    /// A contract of kind `holds` on `path`, with nothing more stated.
    pub fn new(path: impl Into<String>, holds: Holds) -> Self {
        Self {
            path: path.into(),
            holds,
            count: None,
            columns: Vec::new(),
            touches: Vec::new(),
            source: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_stable_names() {
        let names: Vec<&str> = Holds::ALL.iter().map(|holds| holds.as_str()).collect();
        assert_eq!(names, ["number", "list", "table", "text", "edit", "absent"]);
        assert_eq!(Holds::parse(" List "), Some(Holds::List));
        assert_eq!(Holds::parse("numbers"), None);
        let json = serde_json::to_string(&Contract::new("a.txt", Holds::Number)).unwrap();
        assert_eq!(json, r#"{"path":"a.txt","holds":"number"}"#);
    }
}
