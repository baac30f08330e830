//! `table_describe`, `table_stats` and `table_read_rows`: the table itself, without SQL from
//! the model. Every statement is built here from quoted column names of table `data`.

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::Connection;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::cells::{Cell, Column, ColumnType, MAX_CELL_BYTES, quote_ident};
use super::query::{
    CheckedQuery, JsonRows, MAX_WINDOW_BYTES, WINDOW_TEXT, Window, count,
    describe as describe_query, query_failed, scan,
};

/// Most common values listed per text column.
const MOST_COMMON: usize = 5;

/// The `table_describe` response.
#[derive(Debug, Serialize)]
pub(crate) struct Description {
    pub(crate) row_count: u64,
    pub(crate) column_count: usize,
    pub(crate) columns: Vec<DescribedColumn>,
}

#[derive(Debug, Serialize)]
pub(crate) struct DescribedColumn {
    pub(crate) name: String,
    pub(crate) index: usize,
    pub(crate) inferred_type: ColumnType,
    /// Whether the column holds at least one empty value (NULL).
    pub(crate) nullable: bool,
    pub(crate) non_null_count: u64,
    /// DuckDB's HyperLogLog estimate (`approx_count_distinct`).
    pub(crate) distinct_estimate: u64,
}

/// The `table_stats` response: per-column objects whose keys depend on the column type.
#[derive(Debug, Serialize)]
pub(crate) struct Stats {
    pub(crate) row_count: u64,
    pub(crate) columns: Vec<Map<String, Value>>,
}

/// The `table_read_rows` response.
#[derive(Debug, Serialize)]
pub(crate) struct RowsRead {
    pub(crate) columns: Vec<String>,
    pub(crate) column_types: Vec<ColumnType>,
    pub(crate) rows: Vec<Vec<Value>>,
    pub(crate) row_start: u64,
    pub(crate) row_count: u64,
    pub(crate) total_rows: u64,
    pub(crate) has_more: bool,
    pub(crate) warnings: Vec<String>,
}

fn table_columns(conn: &Connection) -> Result<Vec<Column>, ErrorBody> {
    describe_query(conn, &CheckedQuery::whole_table())
}

/// The columns named in `wanted` (exact name, else a unique case-insensitive match), or all.
pub(crate) fn select_columns(
    all: &[Column],
    wanted: Option<&[String]>,
) -> Result<Vec<Column>, ErrorBody> {
    let Some(wanted) = wanted else {
        return Ok(all.to_vec());
    };
    if wanted.is_empty() {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            "`columns` is empty; omit it for all columns",
        ));
    }
    wanted
        .iter()
        .map(|name| {
            let exact = all.iter().find(|c| &c.name == name);
            let loose: Vec<&Column> = all
                .iter()
                .filter(|c| c.name.eq_ignore_ascii_case(name))
                .collect();
            match (exact, loose.as_slice()) {
                (Some(column), _) => Ok(column.clone()),
                (None, [column]) => Ok((*column).clone()),
                _ => Err(unknown_column(all, name)),
            }
        })
        .collect()
}

fn unknown_column(all: &[Column], name: &str) -> ErrorBody {
    let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
    ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!(
            "unknown column {name:?}; the table's columns are: {}",
            names.join(", ")
        ),
    )
}

/// One aggregate query over `data`; returns its single row.
fn aggregate(conn: &Connection, expressions: &[String]) -> Result<Vec<Cell>, ErrorBody> {
    let sql = format!("SELECT {} FROM data", expressions.join(", "));
    conn.query_row(&sql, [], |row| {
        (0..expressions.len())
            .map(|index| row.get_ref(index).map(Cell::from_value))
            .collect::<Result<Vec<_>, _>>()
    })
    .map_err(query_failed)
}

fn as_count(cell: &Cell) -> u64 {
    match cell {
        Cell::Int(n) => u64::try_from(*n).unwrap_or(0),
        _ => 0,
    }
}

/// Runs `table_describe`.
pub(crate) fn describe(conn: &Connection) -> Result<Description, ErrorBody> {
    let columns = table_columns(conn)?;
    let mut expressions = vec!["count(*)".to_string()];
    for column in &columns {
        let ident = quote_ident(&column.name);
        expressions.push(format!("count({ident})"));
        expressions.push(format!("approx_count_distinct({ident})"));
    }
    let cells = aggregate(conn, &expressions)?;
    let at = |index: usize| cells.get(index).map_or(0, as_count);
    let row_count = at(0);
    let described = columns
        .into_iter()
        .enumerate()
        .map(|(index, column)| {
            let non_null_count = at(1 + 2 * index);
            DescribedColumn {
                name: column.name,
                index,
                inferred_type: column.kind,
                nullable: non_null_count < row_count,
                non_null_count,
                distinct_estimate: at(2 + 2 * index),
            }
        })
        .collect::<Vec<_>>();
    Ok(Description {
        row_count,
        column_count: described.len(),
        columns: described,
    })
}

/// The statistics of one column kind: `(key, SQL expression)` pairs.
fn stat_expressions(column: &Column) -> Vec<(&'static str, String)> {
    let c = quote_ident(&column.name);
    let text = if column.duckdb_type.eq_ignore_ascii_case("VARCHAR") {
        c.clone()
    } else {
        format!("CAST({c} AS VARCHAR)")
    };
    match column.kind {
        ColumnType::Integer => vec![
            ("min", format!("min({c})")),
            ("max", format!("max({c})")),
            ("mean", format!("avg({c})::DOUBLE")),
            ("sum", format!("sum({c})")),
            ("stddev", format!("stddev_samp({c})::DOUBLE")),
        ],
        ColumnType::Float => vec![
            ("min", format!("min({c})::DOUBLE")),
            ("max", format!("max({c})::DOUBLE")),
            ("mean", format!("avg({c})::DOUBLE")),
            ("sum", format!("sum({c})::DOUBLE")),
            ("stddev", format!("stddev_samp({c})::DOUBLE")),
        ],
        ColumnType::Date => vec![("min", format!("min({c})")), ("max", format!("max({c})"))],
        ColumnType::Timestamp => vec![
            ("min", format!("min({c})::TIMESTAMP")),
            ("max", format!("max({c})::TIMESTAMP")),
        ],
        ColumnType::Boolean => vec![
            ("true_count", format!("count_if({c})")),
            ("false_count", format!("count_if(NOT {c})")),
        ],
        ColumnType::String => vec![
            ("min_length", format!("min(length({text}))")),
            ("max_length", format!("max(length({text}))")),
        ],
    }
}

/// The most frequent values of a column, most frequent first (ties by value); values over
/// [`MAX_CELL_BYTES`] are cut as in query windows.
fn most_common(conn: &Connection, column: &Column) -> Result<Value, ErrorBody> {
    let c = quote_ident(&column.name);
    let sql = format!(
        "SELECT left(value, {MAX_CELL_BYTES}), strlen(value), n FROM (\
         SELECT CAST({c} AS VARCHAR) AS value, count(*) AS n FROM data WHERE {c} IS NOT NULL \
         GROUP BY 1 ORDER BY n DESC, value LIMIT {MOST_COMMON}) ORDER BY n DESC, value"
    );
    let mut statement = conn.prepare(&sql).map_err(query_failed)?;
    let rows = statement
        .query_map([], |row| {
            let value = Cell::from_text(row.get_ref(0)?, row.get_ref(1)?);
            Ok(json!({"value": value.to_json(), "count": row.get::<_, i64>(2)?}))
        })
        .map_err(query_failed)?;
    rows.collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
        .map_err(query_failed)
}

/// Runs `table_stats` over the selected columns.
pub(crate) fn stats(conn: &Connection, wanted: Option<&[String]>) -> Result<Stats, ErrorBody> {
    let columns = select_columns(&table_columns(conn)?, wanted)?;
    let mut expressions = vec!["count(*)".to_string()];
    let mut plan = Vec::new();
    for column in &columns {
        let ident = quote_ident(&column.name);
        expressions.push(format!("count({ident})"));
        expressions.push(format!("approx_count_distinct({ident})"));
        let stats = stat_expressions(column);
        expressions.extend(stats.iter().map(|(_, sql)| sql.clone()));
        plan.push(stats.into_iter().map(|(key, _)| key).collect::<Vec<_>>());
    }
    let cells = aggregate(conn, &expressions)?;
    let mut next = cells.iter().skip(1);
    let mut out = Vec::with_capacity(columns.len());
    for (column, keys) in columns.iter().zip(plan) {
        let mut entry = Map::new();
        entry.insert("name".into(), json!(column.name));
        entry.insert("type".into(), json!(column.kind));
        entry.insert(
            "non_null_count".into(),
            json!(next.next().map_or(0, as_count)),
        );
        entry.insert(
            "distinct_estimate".into(),
            json!(next.next().map_or(0, as_count)),
        );
        for key in keys {
            entry.insert(key.into(), next.next().map_or(Value::Null, Cell::to_json));
        }
        if column.kind == ColumnType::String {
            entry.insert("most_common".into(), most_common(conn, column)?);
        }
        out.push(entry);
    }
    Ok(Stats {
        row_count: cells.first().map_or(0, as_count),
        columns: out,
    })
}

/// Runs `table_read_rows`: `count` rows from 1-based `start`, in file order.
pub(crate) fn read_rows(
    conn: &Connection,
    start: u64,
    count_wanted: u64,
    wanted: Option<&[String]>,
) -> Result<RowsRead, ErrorBody> {
    let columns = select_columns(&table_columns(conn)?, wanted)?;
    let whole = CheckedQuery::whole_table();
    let total_rows = count(conn, &whole)?;
    let window = Window {
        rows: count_wanted,
        offset: start.saturating_sub(1),
    };
    let mut json = JsonRows::default();
    scan(conn, &whole, &columns, Some(window), WINDOW_TEXT, |cells| {
        let row_number = window.offset + json.rows.len() as u64 + 1;
        json.push(&cells, &columns, row_number)
    })?;
    let returned = json.rows.len() as u64;
    let mut warnings = Vec::new();
    if returned == 0 && total_rows > 0 {
        warnings.push(format!(
            "row_start {start} is past the last row ({total_rows}); nothing was read"
        ));
    }
    if json.full {
        warnings.push(format!(
            "stopped at {returned} rows to stay under {} KiB; read on with row_start {} or \
             select fewer columns",
            MAX_WINDOW_BYTES / 1024,
            window.offset + returned + 1
        ));
    }
    warnings.extend(json.cut_warning(&columns));
    Ok(RowsRead {
        columns: columns.iter().map(|c| c.name.clone()).collect(),
        column_types: columns.iter().map(|c| c.kind).collect(),
        rows: json.rows,
        row_start: start,
        row_count: returned,
        total_rows,
        has_more: window.offset + returned < total_rows,
        warnings,
    })
}
