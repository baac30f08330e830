//! The tabular engine: CSV files as DuckDB table `data`.
//!
//! Each CSV is ingested once per content digest (see [`ingest`]); every tool call then opens that
//! database read-only, with external access disabled and the configuration locked, so a query
//! can read table `data` and nothing else on the machine. All functions here block: callers run
//! them on Tokio's blocking threads.

mod cells;
mod export;
mod ingest;
mod map;
mod query;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::time::Duration;

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::{AccessMode, Config, Connection};

pub(crate) use export::{ExportFormat, Exported};
pub(crate) use map::TableMap;
pub(crate) use query::{DEFAULT_WINDOW_ROWS, MAX_WINDOW_ROWS, QueryWindow, Window};

use ingest::TableCache;
use query::CheckedQuery;

/// How long one tool call's SQL may run before DuckDB is interrupted.
const QUERY_TIMEOUT: Duration = Duration::from_secs(60);
/// DuckDB's memory limit per query connection.
const QUERY_MEMORY: &str = "2GB";
/// DuckDB threads per query connection.
const QUERY_THREADS: i64 = 2;

/// A CSV file on local disk and its content digest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CsvFile<'a> {
    pub(crate) path: &'a Path,
    pub(crate) digest: &'a str,
}

/// What `table_export` should write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExportRequest<'a> {
    pub(crate) query: Option<&'a str>,
    pub(crate) target_path: &'a str,
    pub(crate) format: ExportFormat,
    pub(crate) sheet: Option<&'a str>,
}

/// Runs the tabular tools over cached DuckDB databases.
pub(crate) struct TabularEngine {
    cache: TableCache,
    timeout: Duration,
}

impl TabularEngine {
    pub(crate) fn new(cache_dir: &Path) -> Self {
        Self {
            cache: TableCache::new(cache_dir),
            timeout: QUERY_TIMEOUT,
        }
    }

    /// `table_get_map`.
    pub(crate) fn map(&self, csv: CsvFile<'_>) -> Result<TableMap, ErrorBody> {
        let conn = self.open(csv)?;
        query::with_deadline(&conn, self.timeout, || map::read_map(&conn))
    }

    /// `table_query`.
    pub(crate) fn query(
        &self,
        csv: CsvFile<'_>,
        sql: &str,
        window: Window,
    ) -> Result<QueryWindow, ErrorBody> {
        let conn = self.open(csv)?;
        query::run_window(&conn, sql, window, self.timeout)
    }

    /// `table_export`: the file content to write and the response.
    pub(crate) fn export(
        &self,
        csv: CsvFile<'_>,
        request: ExportRequest<'_>,
    ) -> Result<Exported, ErrorBody> {
        let conn = self.open(csv)?;
        let checked = match request.query {
            Some(sql) => query::check(&conn, sql)?,
            None => CheckedQuery::whole_table(),
        };
        query::with_deadline(&conn, self.timeout, || {
            let columns = query::describe(&conn, &checked)?;
            export::export(
                &conn,
                &checked,
                &columns,
                request.format,
                request.sheet,
                request.target_path,
            )
        })
    }

    fn open(&self, csv: CsvFile<'_>) -> Result<Connection, ErrorBody> {
        let database = self.cache.database(csv.path, csv.digest)?;
        open_read_only(&database)
    }
}

/// Opens a cached database for queries: read-only, no file system or network access, no
/// extension loading, bounded memory and threads, and the configuration locked so SQL cannot
/// change any of it.
fn open_read_only(database: &Path) -> Result<Connection, ErrorBody> {
    let config = Config::default()
        .access_mode(AccessMode::ReadOnly)
        .and_then(|c| c.enable_external_access(false))
        .and_then(|c| c.enable_autoload_extension(false))
        .and_then(|c| c.max_memory(QUERY_MEMORY))
        .and_then(|c| c.threads(QUERY_THREADS))
        .and_then(|c| c.with("lock_configuration", "true"));
    config
        .and_then(|config| Connection::open_with_flags(database, config))
        .map_err(|e| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!("cannot open the table cache: {e}"),
            )
        })
}
