//! Read-only queries over table `data`, with guardrails enforced by DuckDB itself.
//!
//! 1. The query is parsed by DuckDB: `json_serialize_sql` only serializes `SELECT` statements,
//!    so anything else (DML, DDL, COPY, ATTACH, PRAGMA, SET, INSTALL/LOAD…) and any syntax error
//!    is refused, and so is more than one statement.
//! 2. The connection is read-only with external access disabled and the configuration locked
//!    (see [`super::open_read_only`]), so table functions reading files (`read_csv`, `read_text`,
//!    `glob`…) fail even inside a `SELECT`.
//! 3. Every statement runs under a watchdog that interrupts it after the query timeout.
//!
//! The user's query always runs as a subquery: `SELECT … FROM (<q>) AS q LIMIT ? OFFSET ?`.
//! The outer select list reads text columns in bounded parts (see [`TextRead`]), and a window's
//! rows are turned into JSON cell by cell under [`MAX_WINDOW_BYTES`] ([`JsonRows`]), so neither
//! a huge value nor a long result makes a call's memory grow with it.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::Connection;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cells::{Cell, Column, ColumnType, MAX_CELL_BYTES, TextRead};
use super::matched::{self, calls_aggregate};
use super::names;

/// Rows per window when the caller does not say.
pub(crate) const DEFAULT_WINDOW_ROWS: u64 = 100;
/// The largest window a caller may ask for.
pub(crate) const MAX_WINDOW_ROWS: u64 = 10_000;
/// The most bytes of rows (as JSON) one window returns, whatever its row count: a window of
/// wide rows stops early, with `has_more` and a warning saying how to read on.
pub(crate) const MAX_WINDOW_BYTES: usize = 512 * 1024;
/// How window rows read text: enough characters for [`MAX_CELL_BYTES`] of it.
pub(crate) const WINDOW_TEXT: TextRead = TextRead::Prefix(MAX_CELL_BYTES);

/// A checked query: exactly one `SELECT`, trailing `;` removed.
#[derive(Debug, Clone)]
pub(crate) struct CheckedQuery {
    sql: String,
    /// Whether the top-level query has an `ORDER BY`.
    pub(crate) ordered: bool,
    /// The statement as DuckDB serialized it (`null` for [`CheckedQuery::whole_table`]).
    statement: Value,
}

impl CheckedQuery {
    /// The whole table, in insertion (file) order.
    pub(crate) fn whole_table() -> Self {
        Self {
            sql: "SELECT * FROM data".to_string(),
            ordered: true,
            statement: Value::Null,
        }
    }
}

/// Which rows of a result to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) rows: u64,
    pub(crate) offset: u64,
}

/// The `table_query` response.
#[derive(Debug, Serialize)]
pub(crate) struct QueryWindow {
    pub(crate) columns: Vec<String>,
    pub(crate) column_types: Vec<ColumnType>,
    pub(crate) rows: Vec<Vec<Value>>,
    pub(crate) row_count: u64,
    pub(crate) total_row_count: u64,
    pub(crate) window_rows: u64,
    pub(crate) window_offset: u64,
    pub(crate) has_more: bool,
    pub(crate) query_elapsed_ms: u64,
    /// For an aggregate over a filter (`SELECT sum(x) FROM data WHERE …`, no `GROUP BY`): the
    /// rows of `data` the filter matched; 0 means the aggregate's values describe no row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) matched_rows: Option<u64>,
    /// Set when the window stopped early at [`MAX_WINDOW_BYTES`] or text was cut at
    /// [`MAX_CELL_BYTES`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) warning: Option<String>,
}

fn refused(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// DuckDB's errors on the user's query are the user's to fix (`VALIDATION_FAILED` with DuckDB's
/// own message); running out of the worker's memory budget is `QUERY_OUT_OF_MEMORY`, with what
/// to do instead.
pub(crate) fn query_failed(e: duckdb::Error) -> ErrorBody {
    let message = e.to_string();
    if is_out_of_memory(&e) {
        return ErrorBody::new(
            ErrorCode::QueryOutOfMemory,
            format!(
                "the query needed more memory than this worker gives a table; narrow it (filters, \
                 fewer columns, LIMIT) or aggregate in steps (GROUP BY first, then summarize the \
                 groups) instead of retrying it unchanged: {message}"
            ),
        );
    }
    refused(format!("query failed: {message}"))
}

/// Whether DuckDB gave up for lack of memory: its error says so first (an error a query raises
/// itself, e.g. with `error('Out of Memory Error')`, is an `Invalid Input Error`).
pub(crate) fn is_out_of_memory(e: &duckdb::Error) -> bool {
    match e {
        duckdb::Error::DuckDBFailure(_, Some(message)) => {
            message.trim_start().starts_with("Out of Memory Error")
        }
        _ => false,
    }
}

/// The answer of `json_serialize_sql`.
#[derive(Deserialize)]
struct Serialized {
    error: bool,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    statements: Vec<Value>,
}

/// Parses the query with DuckDB and accepts exactly one `SELECT` statement, the table and its
/// columns as [`names`] reads them.
pub(crate) fn check(conn: &Connection, query: &str, file: &str) -> Result<CheckedQuery, ErrorBody> {
    let tables = if super::is_prose(file) {
        "table `data` or `figures` (the text's numbers: line, label, value, unit)"
    } else {
        "table `data`"
    };
    let checked = parse(conn, query, tables)?;
    let edits = names::respelled(conn, &checked.sql, &checked.statement, file);
    if edits.is_empty() {
        return Ok(checked);
    }
    parse(conn, &names::edited(&checked.sql, &edits), tables)
}

/// Parses the query with DuckDB and accepts exactly one `SELECT` statement; `tables` names
/// what it may read, for the refusals.
fn parse(conn: &Connection, query: &str, tables: &str) -> Result<CheckedQuery, ErrorBody> {
    let trimmed = query.trim();
    let sql = trimmed
        .strip_suffix(';')
        .unwrap_or(trimmed)
        .trim_end()
        .to_string();
    if sql.is_empty() {
        return Err(refused(format!(
            "query is empty; write one SELECT over {tables}"
        )));
    }
    let json: String = conn
        .query_row("SELECT json_serialize_sql(?::VARCHAR)", [&sql], |row| {
            row.get(0)
        })
        .map_err(query_failed)?;
    let parsed: Serialized = serde_json::from_str(&json).map_err(|e| {
        ErrorBody::new(
            ErrorCode::Internal,
            format!("unreadable parse of the query: {e}"),
        )
    })?;
    if parsed.error {
        let reason = parsed
            .error_message
            .unwrap_or_else(|| "unknown parse error".into());
        return Err(refused(format!(
            "query refused: {reason} (only a single read-only SELECT over {tables} is \
             allowed){}",
            names::quoting_hint(conn, &sql)
        )));
    }
    match parsed.statements.as_slice() {
        [statement] if reads_no_table(statement) => Err(refused(
            "query refused: it aggregates no table (a SELECT without FROM counts one row); \
             read table `data`, e.g. SELECT COUNT(*) FROM data",
        )),
        [statement] => Ok(CheckedQuery {
            ordered: has_order_by(statement),
            sql,
            statement: statement.clone(),
        }),
        many => Err(refused(format!(
            "query refused: expected exactly one SELECT statement, found {}",
            many.len()
        ))),
    }
}

/// True for a plain `SELECT` with no `FROM` that aggregates (`SELECT COUNT(*)` answers 1,
/// `SELECT SUM(x)` fails on a column no table holds): it meant table `data`. A `SELECT` of
/// constants without `FROM` stays a query (a row to write with `table_update_from_export`).
fn reads_no_table(statement: &Value) -> bool {
    let node = &statement["node"];
    node["type"] == "SELECT_NODE"
        && node["from_table"]["type"] == "EMPTY"
        && calls_aggregate(&node["select_list"])
}

fn has_order_by(statement: &Value) -> bool {
    statement["node"]["modifiers"]
        .as_array()
        .is_some_and(|modifiers| modifiers.iter().any(|m| m["type"] == "ORDER_MODIFIER"))
}

/// The query as a subquery; the newlines keep a trailing `--` comment from eating the `)`.
fn subquery(query: &CheckedQuery) -> String {
    format!("(\n{}\n) AS q", query.sql)
}

/// The result columns of a query, from DuckDB's `DESCRIBE`.
pub(crate) fn describe(conn: &Connection, query: &CheckedQuery) -> Result<Vec<Column>, ErrorBody> {
    let sql = format!("DESCRIBE SELECT * FROM {}", subquery(query));
    let mut statement = conn.prepare(&sql).map_err(query_failed)?;
    let columns = statement
        .query_map([], |row| Ok(Column::new(row.get(0)?, row.get(1)?)))
        .map_err(query_failed)?;
    columns.collect::<Result<_, _>>().map_err(query_failed)
}

/// The number of rows the query returns.
pub(crate) fn count(conn: &Connection, query: &CheckedQuery) -> Result<u64, ErrorBody> {
    let sql = format!("SELECT count(*) FROM {}", subquery(query));
    let total: i64 = conn
        .query_row(&sql, [], |row| row.get(0))
        .map_err(query_failed)?;
    Ok(u64::try_from(total).unwrap_or(0))
}

/// Feeds each row of the query (optionally windowed) to `sink`, in result order, until `sink`
/// breaks. Text columns are read as `text` says.
pub(crate) fn scan(
    conn: &Connection,
    query: &CheckedQuery,
    columns: &[Column],
    window: Option<Window>,
    text: TextRead,
    mut sink: impl FnMut(Vec<Cell>) -> Result<ControlFlow<()>, ErrorBody>,
) -> Result<(), ErrorBody> {
    let select: Vec<String> = columns.iter().flat_map(|c| c.read_items(text)).collect();
    let mut sql = format!("SELECT {} FROM {}", select.join(", "), subquery(query));
    if let Some(window) = window {
        // Literal numbers, not parameters: DuckDB plans a literal LIMIT as a top-N.
        sql.push_str(&format!(
            " LIMIT {} OFFSET {}",
            to_i64(window.rows),
            to_i64(window.offset)
        ));
    }
    let mut statement = conn.prepare(&sql).map_err(query_failed)?;
    let mut rows = statement.query([]).map_err(query_failed)?;
    while let Some(row) = rows.next().map_err(query_failed)? {
        let mut cells = Vec::with_capacity(columns.len());
        let mut item = 0;
        for column in columns {
            let cell = if column.is_text() {
                let part = row.get_ref(item).map_err(query_failed)?;
                let size = row.get_ref(item + 1).map_err(query_failed)?;
                item += 2;
                Cell::from_text(part, size)
            } else {
                item += 1;
                Cell::from_value(row.get_ref(item - 1).map_err(query_failed)?)
            };
            cells.push(cell);
        }
        if sink(cells)?.is_break() {
            break;
        }
    }
    Ok(())
}

/// Rows turned into JSON for the model under [`MAX_WINDOW_BYTES`]: cell by cell, stopping at
/// the first cell that would pass the budget, so no more is converted than is returned.
#[derive(Debug, Default)]
pub(crate) struct JsonRows {
    pub(crate) rows: Vec<Vec<Value>>,
    /// The JSON size of `rows` (brackets and commas included).
    bytes: usize,
    /// Whether a row was left out because it did not fit.
    pub(crate) full: bool,
    /// Cut text values ([`Cell::is_cut`]) per column index.
    cut: BTreeMap<usize, u64>,
}

impl JsonRows {
    /// Adds a row if it fits; else marks the rows full and breaks. A first row that does not fit
    /// alone is `RESULT_TOO_LARGE` (`row_number` names it).
    pub(crate) fn push(
        &mut self,
        cells: &[Cell],
        columns: &[Column],
        row_number: u64,
    ) -> Result<ControlFlow<()>, ErrorBody> {
        // `[` + `]` of the rows, a comma before any but the first row, the row's own brackets
        // and the commas between its cells.
        let mut size = usize::from(!self.rows.is_empty()) + 2 + cells.len().saturating_sub(1);
        let mut row = Vec::with_capacity(cells.len());
        for cell in cells {
            let value = cell.to_json();
            size += json_len(&value);
            if 2 + self.bytes + size > MAX_WINDOW_BYTES {
                if self.rows.is_empty() {
                    return Err(row_too_large(row_number, columns.len()));
                }
                self.full = true;
                return Ok(ControlFlow::Break(()));
            }
            row.push(value);
        }
        for (index, _) in cells.iter().enumerate().filter(|(_, c)| c.is_cut()) {
            *self.cut.entry(index).or_default() += 1;
        }
        self.bytes += size;
        self.rows.push(row);
        Ok(ControlFlow::Continue(()))
    }

    /// The warning about cut text values, naming their columns; `None` when none was cut.
    pub(crate) fn cut_warning(&self, columns: &[Column]) -> Option<String> {
        let count: u64 = self.cut.values().sum();
        let names: Vec<String> = self
            .cut
            .keys()
            .filter_map(|&index| columns.get(index))
            .map(|column| format!("{:?}", column.name))
            .collect();
        let first = names.first()?;
        Some(format!(
            "{count} text value(s) longer than {MAX_CELL_BYTES} bytes were cut to their first \
             {MAX_CELL_BYTES} bytes, ending in \"…[truncated: <whole size> bytes]\" (column(s) {}); \
             read a long value in pieces with substr({first}, start, length) (in characters) or \
             measure it with octet_length",
            names.join(", ")
        ))
    }
}

/// The size of `value` as compact JSON, without building the text.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(0, |()| count.0)
}

fn row_too_large(row_number: u64, columns: usize) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ResultTooLarge,
        format!(
            "row {row_number} alone is more than a window's {} KiB as JSON, even with text cut at \
             {MAX_CELL_BYTES} bytes a value ({columns} columns); select fewer columns",
            MAX_WINDOW_BYTES / 1024
        ),
    )
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Runs `table_query`: checks the query and returns one window of its result.
///
/// The query runs once for the window, asking for one row more than the window holds; only when
/// that extra row exists (or the window starts past the end) does a `count(*)` run for
/// `total_row_count`, so small results (aggregates, top-N) cost a single execution.
pub(crate) fn run_window(
    conn: &Connection,
    query: &str,
    file: &str,
    window: Window,
) -> Result<QueryWindow, ErrorBody> {
    let started = Instant::now();
    let checked = check(conn, query, file)?;
    let columns = describe(conn, &checked)?;
    let mut json = JsonRows::default();
    let mut longer = false;
    let probe = Window {
        rows: window.rows.saturating_add(1),
        offset: window.offset,
    };
    scan(
        conn,
        &checked,
        &columns,
        Some(probe),
        WINDOW_TEXT,
        |cells| {
            if json.rows.len() as u64 == window.rows {
                longer = true;
                return Ok(ControlFlow::Break(()));
            }
            let row_number = window.offset + json.rows.len() as u64 + 1;
            json.push(&cells, &columns, row_number)
        },
    )?;
    let more = json.full || longer;
    let returned = json.rows.len() as u64;
    let total = if more || (returned == 0 && window.offset > 0) {
        count(conn, &checked)?
    } else {
        window.offset + returned
    };
    let stopped = json.full.then(|| {
        format!(
            "the window stopped at {returned} rows to stay under {} KiB; read on with \
             window_offset {} or select fewer columns",
            MAX_WINDOW_BYTES / 1024,
            window.offset + returned
        )
    });
    let matched_rows = matched::rows_matched(conn, &checked.statement);
    let warnings: Vec<String> = stopped
        .into_iter()
        .chain(json.cut_warning(&columns))
        .chain((matched_rows == Some(0)).then(|| matched::NO_ROW_MATCHED.to_string()))
        .collect();
    Ok(QueryWindow {
        columns: columns.iter().map(|c| c.name.clone()).collect(),
        column_types: columns.iter().map(|c| c.kind).collect(),
        rows: json.rows,
        row_count: returned,
        total_row_count: total,
        window_rows: window.rows,
        window_offset: window.offset,
        has_more: more,
        query_elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        matched_rows,
        warning: (!warnings.is_empty()).then(|| warnings.join("; ")),
    })
}

/// How often a timed-out statement is interrupted again.
const REINTERRUPT_EVERY: Duration = Duration::from_millis(10);

/// Runs `work` on `conn`, interrupting DuckDB if it takes longer than `timeout`
/// (then the error is `TOOL_TIMEOUT`).
pub(crate) fn with_deadline<T>(
    conn: &Connection,
    timeout: Duration,
    work: impl FnOnce() -> Result<T, ErrorBody>,
) -> Result<T, ErrorBody> {
    let interrupt = conn.interrupt_handle();
    let fired = Arc::new(AtomicBool::new(false));
    let (done, wait) = mpsc::channel::<()>();
    let flag = fired.clone();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(timeout) {
            flag.store(true, Ordering::SeqCst);
            // DuckDB forgets an interrupt that arrives between two statements, so keep
            // interrupting until the work gives up.
            loop {
                interrupt.interrupt();
                if !matches!(
                    wait.recv_timeout(REINTERRUPT_EVERY),
                    Err(mpsc::RecvTimeoutError::Timeout)
                ) {
                    break;
                }
            }
        }
    });
    let result = work();
    drop(done);
    result.map_err(|error| match fired.load(Ordering::SeqCst) {
        true => ErrorBody::new(
            ErrorCode::ToolTimeout,
            format!(
                "query interrupted after {} ms (the worker's query timeout); narrow it (filters, LIMIT, fewer joins)",
                timeout.as_millis()
            ),
        ),
        false => error,
    })
}
