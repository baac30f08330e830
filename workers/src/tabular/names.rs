//! How a query may name table `data` and its columns, as a person (or a model) writes them.
//!
//! - The table by its file's name: `FROM launch_plan.csv`, `FROM "launch_plan.csv"` or
//!   `FROM launch_plan` for the workbench file `launch_plan.csv` mean `FROM data` (unless the
//!   query defines a common table expression, which could carry that name).
//! - A column by a spelling that differs only in case, spaces and punctuation: `Unit_Price`
//!   or `unit price` in quotes for the column `Unit Price`, when exactly one column reads so
//!   and no alias of the query does.
//!
//! The query is rewritten where DuckDB's parse locates those names, then parsed again. A query
//! that does not parse is answered with a hint when it names a column that needs double quotes
//! without them.

use duckdb::Connection;
use serde_json::Value;

use super::ast::objects;

/// One replacement in a query's text: bytes `start..end` become `text`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Edit {
    start: usize,
    end: usize,
    text: String,
}

/// The edits that make `sql` (parsed as `statement`) name table `data` and its columns as
/// they are, for the workbench file `file`.
pub(crate) fn respelled(conn: &Connection, sql: &str, statement: &Value, file: &str) -> Vec<Edit> {
    let mut edits = file_named(sql, statement, file);
    edits.extend(column_spellings(conn, sql, statement));
    edits.sort_unstable();
    edits.dedup();
    edits
}

/// `sql` with `edits` (sorted) applied; an edit overlapping the one before it, or not on
/// character boundaries, is left out (the query then fails as written).
pub(crate) fn edited(sql: &str, edits: &[Edit]) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for edit in edits {
        let fits = edit.start >= at
            && edit.end <= sql.len()
            && sql.is_char_boundary(edit.start)
            && sql.is_char_boundary(edit.end);
        if !fits {
            continue;
        }
        out.push_str(&sql[at..edit.start]);
        out.push_str(&edit.text);
        at = edit.end;
    }
    out.push_str(&sql[at..]);
    out
}

/// A name with case, spaces and punctuation left out (`Unit_Price` and `unit price` are
/// `unitprice`).
fn folded(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// The columns of table `data`, in order; empty when they cannot be read.
fn columns(conn: &Connection) -> Vec<String> {
    let Ok(mut statement) = conn
        .prepare("SELECT column_name FROM information_schema.columns WHERE table_name = 'data'")
    else {
        return Vec::new();
    };
    let Ok(names) = statement.query_map([], |row| row.get::<_, String>(0)) else {
        return Vec::new();
    };
    names.filter_map(Result::ok).collect()
}

/// Column references (one part, not a column's exact name in any case, not an alias of the
/// query) whose folded spelling is exactly one column's: replaced by that column, quoted.
fn column_spellings(conn: &Connection, sql: &str, statement: &Value) -> Vec<Edit> {
    let references = column_references(statement);
    if references.is_empty() {
        return Vec::new();
    }
    let columns = columns(conn);
    let aliases = query_aliases(statement);
    references
        .into_iter()
        .filter_map(|(start, name)| {
            let exact = columns
                .iter()
                .any(|column| column.eq_ignore_ascii_case(&name));
            let alias = aliases
                .iter()
                .any(|alias| alias.eq_ignore_ascii_case(&name));
            if exact || alias {
                return None;
            }
            let mut matching = columns
                .iter()
                .filter(|column| folded(column) == folded(&name));
            let column = matching.next()?;
            if matching.next().is_some() {
                return None;
            }
            let (end, _) = reference_at(sql, start)?;
            Some(Edit {
                start,
                end,
                text: quoted(column),
            })
        })
        .collect()
}

/// Where each one-part column reference starts, with its name.
fn column_references(statement: &Value) -> Vec<(usize, String)> {
    objects(statement)
        .into_iter()
        .filter(|object| object.get("class").and_then(Value::as_str) == Some("COLUMN_REF"))
        .filter_map(|object| {
            let [name] = object.get("column_names")?.as_array()?.as_slice() else {
                return None;
            };
            let at = object.get("query_location")?.as_u64()?;
            Some((
                usize::try_from(at).unwrap_or(usize::MAX),
                name.as_str()?.to_string(),
            ))
        })
        .collect()
}

/// Every alias the query gives (select-list names, table aliases).
fn query_aliases(statement: &Value) -> Vec<&str> {
    objects(statement)
        .into_iter()
        .filter_map(|object| object.get("alias")?.as_str())
        .filter(|alias| !alias.is_empty())
        .collect()
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The byte ranges of `sql` where a table reference names the workbench file `file` (its
/// path, its name or its name without the extension, any case, quoted or not), when the query
/// defines no common table expressions (which could carry such a name).
fn file_named(sql: &str, statement: &Value, file: &str) -> Vec<Edit> {
    let name = file.rsplit('/').next().unwrap_or(file);
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    let aliases = [file, name, stem].map(str::to_lowercase);
    if defines_ctes(statement) {
        return Vec::new();
    }
    table_references(statement)
        .into_iter()
        .filter_map(|start| {
            let (end, named) = reference_at(sql, start)?;
            aliases.contains(&named).then(|| Edit {
                start,
                end,
                text: "data".to_string(),
            })
        })
        .collect()
}

fn defines_ctes(statement: &Value) -> bool {
    objects(statement).into_iter().any(|object| {
        object
            .get("cte_map")
            .and_then(|ctes| ctes.get("map"))
            .and_then(Value::as_array)
            .is_some_and(|map| !map.is_empty())
    })
}

/// Where each table reference (not in another catalog) starts in the query.
fn table_references(statement: &Value) -> Vec<usize> {
    objects(statement)
        .into_iter()
        .filter(|object| {
            object.get("type").and_then(Value::as_str) == Some("BASE_TABLE")
                && object.get("catalog_name").and_then(Value::as_str) == Some("")
        })
        .filter_map(|object| object.get("query_location")?.as_u64())
        .map(|at| usize::try_from(at).unwrap_or(usize::MAX))
        .collect()
}

/// The table reference starting at byte `start` of `sql` (identifiers, quoted or not, joined
/// by dots): where it ends and the name it gives, unquoted, lower case.
fn reference_at(sql: &str, start: usize) -> Option<(usize, String)> {
    let rest = sql.get(start..)?;
    let mut chars = rest.char_indices().peekable();
    let mut named = String::new();
    let mut end = 0;
    loop {
        match chars.peek().copied() {
            Some((_, '"')) => {
                chars.next();
                loop {
                    let (at, c) = chars.next()?;
                    if c != '"' {
                        named.push(c);
                    } else if chars.peek().is_some_and(|(_, next)| *next == '"') {
                        chars.next();
                        named.push('"');
                    } else {
                        end = at + 1;
                        break;
                    }
                }
            }
            Some((_, c)) if c.is_alphanumeric() || c == '_' || c == '$' => {
                while let Some((at, c)) = chars.peek().copied() {
                    if !(c.is_alphanumeric() || c == '_' || c == '$') {
                        break;
                    }
                    named.push(c);
                    end = at + c.len_utf8();
                    chars.next();
                }
            }
            _ => return None,
        }
        if chars.peek().is_some_and(|(_, c)| *c == '.') {
            chars.next();
            named.push('.');
            continue;
        }
        return Some((start + end, named.to_lowercase()));
    }
}

/// For a query that does not parse: the columns of `data` whose names need double quotes
/// (spaces, symbols) that the query names without them, as a hint.
pub(crate) fn quoting_hint(conn: &Connection, sql: &str) -> String {
    let unquoted: Vec<String> = columns(conn)
        .into_iter()
        .filter(|name| !is_plain_identifier(name))
        .filter(|name| named_unquoted(sql, name))
        .map(|name| quoted(&name))
        .collect();
    if unquoted.is_empty() {
        return String::new();
    }
    format!(
        "; column names with spaces or symbols take double quotes: {}",
        unquoted.join(", ")
    )
}

fn is_plain_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// True when `name` occurs in `sql` (ignoring case) without a double quote right before it.
fn named_unquoted(sql: &str, name: &str) -> bool {
    let sql = sql.to_lowercase();
    let name = name.to_lowercase();
    sql.match_indices(&name)
        .any(|(at, _)| !sql[..at].ends_with('"'))
}
