//! The tabular engine: delimited text files (CSV, TSV, PSV, delimited TXT) as DuckDB table `data`,
//! a text file's figures (`.txt`, `.md`) as table `figures` (see [`figures`]), and a
//! workbook's sheets as tables (see [`sheets`]).
//!
//! Each file is ingested once per content digest (see [`ingest`]); every tool call then runs on a
//! connection to that database opened read-only, with external access disabled, extension
//! loading off and the configuration locked, so a query can read table `data` and nothing else
//! on the machine. Opened databases are kept (as many as the worker has query slots, most
//! recently used) so warm calls only clone a connection; the worker's memory budget is shared by
//! them (see [`budget`]). All functions here block: callers run them on Tokio's blocking threads.

mod ast;
mod budget;
mod cells;
mod dialect;
mod encoding;
mod evict;
mod export;
mod figures;
mod ingest;
mod map;
mod matched;
mod names;
mod profile;
mod query;
mod sheets;
#[cfg(test)]
mod tests;
mod workbook;

use std::path::Path;
use std::time::Duration;

use atelier_messages::path::{TableShape, table_shape};
use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::{AccessMode, Config, Connection};

use crate::office::extension;
use export::ExportTarget;
pub(crate) use export::{ExportFormat, Exported};
pub(crate) use map::TableMap;
pub(crate) use profile::{Description, RowsRead, Stats};
pub(crate) use query::{DEFAULT_WINDOW_ROWS, MAX_WINDOW_ROWS, QueryWindow, Window};
pub(crate) use workbook::{CellRef, UpdateMode, UpdateRequest, Updated};

use budget::{OpenDatabases, Slots};
use ingest::TableCache;
use query::CheckedQuery;

/// Default: how long one tool call's SQL may run before DuckDB is interrupted.
const QUERY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default: how long loading a CSV into its cached database may take.
const INGEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Default: the worker's DuckDB memory budget, shared by its query slots (see [`budget`]).
const QUERY_MEMORY: u64 = 2_000_000_000;
/// Default: how many calls run DuckDB at once in a worker (and databases are kept open).
const QUERY_SLOTS: usize = 2;
/// Default: DuckDB threads per cached database.
const QUERY_THREADS: i64 = 2;
/// Default: the most bytes one `table_export` or `table_update_from_export` may write (see
/// [`export`]); the file is built in the worker's memory before it goes to the draft.
const EXPORT_BYTES: u64 = 256 * 1024 * 1024;
/// Environment overrides of the limits (until `WorkerConfig` carries them).
const ENV_TIMEOUT_MS: &str = "ATELIER_TABULAR_QUERY_TIMEOUT_MS";
const ENV_INGEST_TIMEOUT_MS: &str = "ATELIER_TABULAR_INGEST_TIMEOUT_MS";
const ENV_MEMORY: &str = "ATELIER_TABULAR_MEMORY_LIMIT";
const ENV_SLOTS: &str = "ATELIER_TABULAR_QUERY_SLOTS";
const ENV_THREADS: &str = "ATELIER_TABULAR_THREADS";
const ENV_EXPORT_BYTES: &str = "ATELIER_TABULAR_EXPORT_MAX_BYTES";

/// Resource limits of the query connections and of loading a CSV.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limits {
    pub(crate) timeout: Duration,
    /// How long loading a CSV may take (under the same memory limit and threads).
    pub(crate) ingest_timeout: Duration,
    /// The worker's DuckDB memory budget in bytes, whatever the number of tables.
    pub(crate) memory_bytes: u64,
    /// How many calls run DuckDB at once; each database gets `memory_bytes / slots`.
    pub(crate) slots: usize,
    /// DuckDB threads per database.
    pub(crate) threads: i64,
    /// The most bytes an export may write (CSV bytes; XLSX cell content, see [`export`]).
    pub(crate) export_bytes: u64,
    /// The most bytes of databases kept in the cache (least recently opened go first).
    pub(crate) cache_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: QUERY_TIMEOUT,
            ingest_timeout: INGEST_TIMEOUT,
            memory_bytes: QUERY_MEMORY,
            slots: QUERY_SLOTS,
            threads: QUERY_THREADS,
            export_bytes: EXPORT_BYTES,
            cache_bytes: crate::DEFAULT_TABLE_CACHE_BYTES,
        }
    }
}

impl Limits {
    /// The defaults, overridden by `ATELIER_TABULAR_QUERY_TIMEOUT_MS`,
    /// `ATELIER_TABULAR_INGEST_TIMEOUT_MS`, `ATELIER_TABULAR_MEMORY_LIMIT` (a DuckDB size such as
    /// `2GB` or `512MiB`, for the whole worker), `ATELIER_TABULAR_QUERY_SLOTS`,
    /// `ATELIER_TABULAR_THREADS` and `ATELIER_TABULAR_EXPORT_MAX_BYTES` when set and valid.
    pub(crate) fn from_env() -> Self {
        let mut limits = Self::default();
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let millis = |name: &str| var(name).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(ms) = millis(ENV_TIMEOUT_MS) {
            limits.timeout = Duration::from_millis(ms.max(1));
        }
        if let Some(ms) = millis(ENV_INGEST_TIMEOUT_MS) {
            limits.ingest_timeout = Duration::from_millis(ms.max(1));
        }
        if let Some(memory) = var(ENV_MEMORY) {
            match budget::parse_size(&memory) {
                Some(bytes) => limits.memory_bytes = bytes,
                None => tracing::warn!(%memory, "{ENV_MEMORY} is not a memory size; ignored"),
            }
        }
        if let Some(slots) = var(ENV_SLOTS).and_then(|v| v.trim().parse::<usize>().ok()) {
            limits.slots = slots.max(1);
        }
        if let Some(threads) = var(ENV_THREADS).and_then(|v| v.trim().parse::<i64>().ok()) {
            limits.threads = threads.max(1);
        }
        if let Some(bytes) = var(ENV_EXPORT_BYTES).and_then(|v| v.trim().parse::<u64>().ok()) {
            limits.export_bytes = bytes.max(1);
        }
        limits
    }

    /// The memory limit of each database, as DuckDB reads it: the budget divided by the slots.
    pub(crate) fn database_memory(&self) -> String {
        let share = self.memory_bytes / u64::try_from(self.slots.max(1)).unwrap_or(1);
        format!("{}KiB", (share / 1024).max(1))
    }
}

/// A table file on local disk: its workbench path (for the format), local copy and digest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CsvFile<'a> {
    pub(crate) name: &'a str,
    pub(crate) path: &'a Path,
    pub(crate) digest: &'a str,
}

/// A SQL string literal.
pub(crate) fn sql_string(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// True for a text file whose figures are table `figures` beside `data` (by its extension).
pub(crate) fn is_prose(path: &str) -> bool {
    table_shape(path) == Some(TableShape::Prose)
}

/// What a file's database holds besides table `data`, by the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A delimited file: `data` only.
    Delimited,
    /// A text file: its figures as `figures`.
    Prose,
    /// A workbook (`zip_based`: an OOXML or ODS package, else a legacy `.xls`): its first
    /// sheet is `data`, and every sheet a table named after it.
    Workbook { zip_based: bool },
}

impl Shape {
    fn of(path: &str) -> Shape {
        match table_shape(path) {
            Some(TableShape::Prose) => Shape::Prose,
            Some(TableShape::Workbook) => Shape::Workbook {
                zip_based: extension(path) != "xls",
            },
            Some(TableShape::Delimited) | None => Shape::Delimited,
        }
    }

    /// What its cache key adds to the digest: a database is not shared by files of the same
    /// bytes and different shapes.
    fn suffix(self) -> &'static str {
        match self {
            Shape::Delimited => "",
            Shape::Prose => PROSE_SUFFIX,
            Shape::Workbook { .. } => WORKBOOK_SUFFIX,
        }
    }
}

impl CsvFile<'_> {
    fn shape(&self) -> Shape {
        Shape::of(self.name)
    }

    /// The name of its cached database.
    fn cache_key(&self) -> String {
        format!("{}{}", self.digest, self.shape().suffix())
    }
}

const PROSE_SUFFIX: &str = ".text";
const WORKBOOK_SUFFIX: &str = ".book";
/// The suffixes a cached database's name may add to its digest ([`Shape::suffix`]).
const CACHE_SUFFIXES: &[&str] = &[PROSE_SUFFIX, WORKBOOK_SUFFIX];

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
    limits: Limits,
    slots: Slots,
    open: OpenDatabases,
}

impl TabularEngine {
    /// An engine caching at most `cache_bytes` of databases under `cache_dir`, with
    /// [`Limits::from_env`].
    pub(crate) fn new(cache_dir: &Path, cache_bytes: u64) -> Self {
        let limits = Limits {
            cache_bytes,
            ..Limits::from_env()
        };
        Self::with_limits(cache_dir, limits)
    }

    pub(crate) fn with_limits(cache_dir: &Path, limits: Limits) -> Self {
        Self {
            cache: TableCache::new(cache_dir, limits.clone()),
            slots: Slots::new(limits.slots),
            open: OpenDatabases::new(limits.slots),
            limits,
        }
    }

    /// `table_get_map`.
    pub(crate) fn map(&self, csv: CsvFile<'_>) -> Result<TableMap, ErrorBody> {
        self.on_table(csv, |conn| map::read_map(conn, csv.name))
    }

    /// `table_describe`.
    pub(crate) fn describe(&self, csv: CsvFile<'_>) -> Result<Description, ErrorBody> {
        self.on_table(csv, profile::describe)
    }

    /// `table_stats` (all columns when `columns` is `None`).
    pub(crate) fn stats(
        &self,
        csv: CsvFile<'_>,
        columns: Option<&[String]>,
    ) -> Result<Stats, ErrorBody> {
        self.on_table(csv, |conn| profile::stats(conn, columns))
    }

    /// `table_read_rows`: `count` rows from 1-based `start`, in file order.
    pub(crate) fn read_rows(
        &self,
        csv: CsvFile<'_>,
        start: u64,
        count: u64,
        columns: Option<&[String]>,
    ) -> Result<RowsRead, ErrorBody> {
        self.on_table(csv, |conn| profile::read_rows(conn, start, count, columns))
    }

    /// `table_query`.
    pub(crate) fn query(
        &self,
        csv: CsvFile<'_>,
        sql: &str,
        window: Window,
    ) -> Result<QueryWindow, ErrorBody> {
        self.on_table(csv, |conn| query::run_window(conn, sql, csv.name, window))
    }

    /// `table_export`: the file content to write and the response.
    pub(crate) fn export(
        &self,
        csv: CsvFile<'_>,
        request: ExportRequest<'_>,
    ) -> Result<Exported, ErrorBody> {
        self.on_table(csv, |conn| {
            let checked = checked_or_whole(conn, request.query, csv.name)?;
            let columns = query::describe(conn, &checked)?;
            let target = ExportTarget {
                format: request.format,
                sheet: request.sheet,
                target_path: request.target_path,
                max_bytes: self.limits.export_bytes,
            };
            export::export(conn, &checked, &columns, target)
        })
    }

    /// `table_update_from_export`: the updated workbook and the response. `existing` is the
    /// current content of the target workbook, if it exists.
    pub(crate) fn update_workbook(
        &self,
        csv: CsvFile<'_>,
        request: &UpdateRequest<'_>,
        existing: Option<&[u8]>,
    ) -> Result<Updated, ErrorBody> {
        self.on_table(csv, |conn| {
            let checked = checked_or_whole(conn, request.query, csv.name)?;
            let columns = query::describe(conn, &checked)?;
            let grid = workbook::Grid::collect(conn, &checked, &columns, self.limits.export_bytes)?;
            workbook::update(request, existing, grid)
        })
    }

    /// Runs `work` on a connection to the file's database under the query timeout, holding a
    /// query slot throughout: the database is ingested on first use, then opened once and its
    /// connection cloned for each call.
    fn on_table<T>(
        &self,
        csv: CsvFile<'_>,
        work: impl FnOnce(&Connection) -> Result<T, ErrorBody>,
    ) -> Result<T, ErrorBody> {
        let slot = self.slots.acquire();
        let conn = self.open.connect(&slot, &csv.cache_key(), || {
            let database = self.cache.database(csv.path, csv.digest, csv.shape())?;
            open_read_only(&database, &self.limits)
        })?;
        query::with_deadline(&conn, self.limits.timeout, || work(&conn))
    }
}

fn checked_or_whole(
    conn: &Connection,
    sql: Option<&str>,
    file: &str,
) -> Result<CheckedQuery, ErrorBody> {
    match sql {
        Some(sql) => query::check(conn, sql, file),
        None => Ok(CheckedQuery::whole_table()),
    }
}

fn open_failed(e: duckdb::Error) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Internal,
        format!("cannot open the table cache: {e}"),
    )
}

/// Opens a cached database for queries: read-only, no file system or network access, no
/// extension loading or installing, its share of the worker's memory budget, bounded threads,
/// and the configuration locked so SQL cannot change any of it.
fn open_read_only(database: &Path, limits: &Limits) -> Result<Connection, ErrorBody> {
    let config = Config::default()
        .access_mode(AccessMode::ReadOnly)
        .and_then(|c| c.enable_external_access(false))
        .and_then(|c| c.enable_autoload_extension(false))
        .and_then(|c| c.with("autoinstall_known_extensions", "false"))
        .and_then(|c| c.with("allow_community_extensions", "false"))
        .and_then(|c| c.max_memory(&limits.database_memory()))
        .and_then(|c| c.threads(limits.threads))
        .and_then(|c| c.with("lock_configuration", "true"));
    config
        .and_then(|config| Connection::open_with_flags(database, config))
        .map_err(open_failed)
}

/// The SQL guard of `table_query`, for the fuzz targets.
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_check(conn: &Connection, query: &str) -> Result<(), ErrorBody> {
    query::check(conn, query, "data.csv").map(|_| ())
}
