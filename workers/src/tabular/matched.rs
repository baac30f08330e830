//! How many rows an aggregate's filter matched: `SELECT sum(total) FROM data WHERE region =
//! 'Nowhere'` answers one row (a NULL sum, a zero count) whatever the filter, so a model reads a
//! number that describes no row of the table. For a plain `SELECT` over the table with a
//! `WHERE` and aggregates, no `GROUP BY`, the engine counts the filter's rows with DuckDB's own
//! parse of the query: the same `FROM` and `WHERE` under `count(*)`, turned back into SQL by
//! `json_deserialize_sql`. Anything it cannot do so reports nothing.

use duckdb::Connection;
use serde_json::Value;

use super::ast::objects;

/// The warning of an aggregate whose filter matched no row.
pub(super) const NO_ROW_MATCHED: &str = "no row of the table matches the WHERE clause, so the \
    aggregate describes no row (matched_rows is 0); check the filter's values, e.g. SELECT \
    DISTINCT column FROM data";

/// The aggregate functions: a table-less `SELECT` of one is refused, and one over a filter
/// reports how many rows the filter matched.
const AGGREGATES: &[&str] = &[
    "count_star",
    "count",
    "sum",
    "avg",
    "mean",
    "min",
    "max",
    "median",
    "string_agg",
    "list",
    "first",
    "last",
];

/// True when the expression (as DuckDB serializes it) calls an aggregate function.
pub(super) fn calls_aggregate(value: &Value) -> bool {
    objects(value).into_iter().any(|object| {
        object
            .get("function_name")
            .and_then(Value::as_str)
            .is_some_and(|name| AGGREGATES.contains(&name.to_lowercase().as_str()))
    })
}

/// The rows of `data` the filter of `statement` (a checked query's, as DuckDB serialized it)
/// matched, for an aggregate over a filter; `None` for any other query or when it cannot be
/// counted.
pub(super) fn rows_matched(conn: &Connection, statement: &Value) -> Option<u64> {
    let node = statement.get("node")?;
    let filtered_aggregate = node.get("type")? == "SELECT_NODE"
        && node.get("from_table")?.get("type")? == "BASE_TABLE"
        && !node.get("where_clause")?.is_null()
        && node
            .get("group_expressions")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        && calls_aggregate(node.get("select_list")?);
    if !filtered_aggregate {
        return None;
    }
    let mut counting = serialized(conn, "SELECT count(*) FROM data")?;
    let target = counting
        .get_mut("statements")?
        .get_mut(0)?
        .get_mut("node")?;
    target["from_table"] = node.get("from_table")?.clone();
    target["where_clause"] = node.get("where_clause")?.clone();
    let count_sql: String = conn
        .query_row(
            "SELECT json_deserialize_sql(?::JSON)",
            [counting.to_string()],
            |row| row.get(0),
        )
        .ok()?;
    let matched: i64 = conn.query_row(&count_sql, [], |row| row.get(0)).ok()?;
    u64::try_from(matched).ok()
}

/// `sql` as `json_serialize_sql` gives it, when it parses.
fn serialized(conn: &Connection, sql: &str) -> Option<Value> {
    let json: String = conn
        .query_row("SELECT json_serialize_sql(?::VARCHAR)", [sql], |row| {
            row.get(0)
        })
        .ok()?;
    let value: Value = serde_json::from_str(&json).ok()?;
    (value.get("error") == Some(&Value::Bool(false))).then_some(value)
}
