//! One persistent DuckDB database per CSV digest: `<cache_dir>/tabular/<digest>.duckdb`.
//!
//! The first call for a digest ingests the file into table `data` (and what was learned about it
//! into `atelier_source`) inside a temporary database, then renames it into place, so a crash
//! never leaves a half-built database and a new digest never sees another file's data. A lock per
//! digest (a mutex in the process, an advisory file lock across processes) makes concurrent first
//! calls ingest once on the whole host.
//!
//! Ingest: detect the encoding ([`super::encoding`]) and transcode anything but UTF-8 to a UTF-8
//! copy; on (a 1 MiB prefix of) the file, let DuckDB's sniffer find delimiter, quote, header and
//! metadata rows to skip, and sample 2,048 records to check the number format and null markers
//! ([`super::dialect`]); then `CREATE TABLE data AS SELECT * FROM read_csv(...)`. Reads fall back,
//! in order, to padding ragged rows, sniffing types on the whole file, and reading every column
//! as text (with a warning); the serial reader is used when DuckDB asks for it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::{Config, Connection};
use serde::{Deserialize, Serialize};

use super::dialect::{NumberFormat, detect_null_markers, detect_number_format, sample_values};
use super::encoding::{self, Detected, WEAK_GUESS};
use super::evict::{evict_databases, wal_of};
use super::query::{is_out_of_memory, with_deadline};
use super::sheets::{self, SheetCsv};
use super::{Limits, Shape, figures, sql_string};
use crate::files::{check_digest, mark_used, temp_path_for};

/// Rows the pre-checks sample (dialect, number format, null markers); the final read's own
/// sniffer samples DuckDB's default 20,480 rows for the types.
const SAMPLE_ROWS: usize = 2_048;
/// Metadata lines above the header kept for the map, and their longest length.
const PREAMBLE_LINES: usize = 20;
const PREAMBLE_CHARS: usize = 200;
/// Bytes of a large file the pre-checks look at.
const PREFIX_BYTES: u64 = 1 << 20;

/// What ingest learned about the file (stored as JSON in `atelier_source`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SourceMeta {
    pub(crate) delimiter: String,
    pub(crate) quote: String,
    pub(crate) has_header: bool,
    pub(crate) skipped_rows: u64,
    pub(crate) preamble: Vec<String>,
    pub(crate) encoding: String,
    pub(crate) encoding_confidence: f64,
    pub(crate) replaced_characters: u64,
    pub(crate) decimal_separator: String,
    pub(crate) thousands_separator: Option<String>,
    #[serde(default)]
    pub(crate) null_values: Vec<String>,
    pub(crate) warnings: Vec<String>,
}

/// The cache of ingested databases.
pub(crate) struct TableCache {
    root: PathBuf,
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Loading runs in the calling query's slot, share of the budget and threads; own time limit.
    limits: Limits,
}

impl TableCache {
    pub(crate) fn new(cache_dir: &Path, limits: Limits) -> Self {
        Self {
            root: cache_dir.join("tabular"),
            locks: Mutex::new(HashMap::new()),
            limits,
        }
    }

    /// The database of the file at `csv` with content digest `digest`, ingested on first use;
    /// a text file's holds its figures too and a workbook's its sheets, each under its own
    /// name.
    pub(crate) fn database(
        &self,
        csv: &Path,
        digest: &str,
        shape: Shape,
    ) -> Result<PathBuf, ErrorBody> {
        check_digest(digest)?;
        let name = format!("{digest}{}", shape.suffix());
        let target = self.root.join(format!("{name}.duckdb"));
        if target.exists() {
            // Opened again: the least recently opened databases are evicted first.
            let _ = mark_used(&target);
            return Ok(target);
        }
        let lock = self.lock_for(&name);
        let _guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let _host_lock = self.host_lock(&name)?;
        if !target.exists() {
            build(csv, &target, &self.limits, shape)?;
            if let Err(error) = evict_databases(&self.root, self.limits.cache_bytes, &target) {
                tracing::warn!(%error, "cannot evict cached table databases");
            }
        }
        Ok(target)
    }

    fn lock_for(&self, digest: &str) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        locks.entry(digest.to_string()).or_default().clone()
    }

    /// An exclusive advisory lock on `locks/<digest>.lock`, shared by every worker process on
    /// the host; released when the file is dropped.
    fn host_lock(&self, digest: &str) -> Result<File, ErrorBody> {
        let dir = self.root.join("locks");
        std::fs::create_dir_all(&dir).map_err(cache_failed)?;
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{digest}.lock")))
            .map_err(cache_failed)?;
        file.lock().map_err(cache_failed)?;
        Ok(file)
    }
}

/// A load failure: running out of the worker's memory budget is `QUERY_OUT_OF_MEMORY` (the file
/// is too large for this worker); anything else is the file's (`FILE_READ_FAILED`).
fn read_failed(csv: &Path) -> impl Fn(duckdb::Error) -> ErrorBody + '_ {
    move |e| {
        let message = e.to_string();
        if message.contains("No space left on device") {
            return disk_full(&message);
        }
        if is_out_of_memory(&e) {
            return ErrorBody::new(
                ErrorCode::QueryOutOfMemory,
                format!(
                    "loading {} needed more memory than this worker gives a table (raise ATELIER_TABULAR_MEMORY_LIMIT, or split the file): {message}",
                    csv.display()
                ),
            );
        }
        ErrorBody::new(
            ErrorCode::FileReadFailed,
            format!("cannot read {} as a table: {message}", csv.display()),
        )
    }
}

fn cache_failed(e: std::io::Error) -> ErrorBody {
    if e.kind() == std::io::ErrorKind::StorageFull {
        return disk_full(&e.to_string());
    }
    ErrorBody::new(
        ErrorCode::Internal,
        format!("cannot write the table cache: {e}"),
    )
}

/// The table cache's disk is full: a stable code and what the operator can do.
pub(super) fn disk_full(message: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::DiskFull,
        format!(
            "the worker's disk is full while caching the table ({message}); free space in its \
             data directory or lower `table_cache_bytes`, then retry"
        ),
    )
}

/// Files made while building, removed whatever happens.
struct Scratch(Vec<PathBuf>);

impl Drop for Scratch {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn build(file: &Path, target: &Path, limits: &Limits, shape: Shape) -> Result<(), ErrorBody> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(cache_failed)?;
    }
    let temp = temp_path_for(target);
    let mut scratch = Scratch(vec![temp.clone(), wal_of(&temp)]);
    // A workbook's sheets are written as CSVs; its first is the table `data`.
    let sheets = match shape {
        Shape::Workbook { zip_based } => {
            sheets::write_csvs(file, zip_based, &temp, &mut scratch.0)?
        }
        Shape::Delimited | Shape::Prose => Vec::new(),
    };
    let csv = sheets.first().map_or(file, |sheet| sheet.path.as_path());
    let detected = encoding::detect(csv)?;
    let mut replaced = 0;
    let source = if detected.is_utf8() {
        csv.to_path_buf()
    } else {
        let utf8 = temp.with_extension("utf8.csv");
        scratch.0.push(utf8.clone());
        replaced = encoding::transcode(csv, detected, &utf8)?;
        utf8
    };
    let loading = Loading {
        detected,
        replaced,
        shape,
        sheets: &sheets,
    };
    let built = ingest(&source, &temp, &loading, limits)
        .and_then(|()| std::fs::rename(&temp, target).map_err(cache_failed));
    tracing::info!(file = %file.display(), database = %target.display(), encoding = %detected.name(), ok = built.is_ok(), "ingested table");
    built
}

/// What a build loads besides the file's bytes.
struct Loading<'a> {
    detected: Detected,
    replaced: u64,
    shape: Shape,
    /// A workbook's sheets, each loaded as a table too.
    sheets: &'a [SheetCsv],
}

/// The sniffer's dialect.
struct Sniffed {
    delimiter: String,
    quote: String,
    has_header: bool,
    skip_rows: u64,
    columns: usize,
    /// Whether the padded sniff decided (ragged rows near the top).
    padded: bool,
}

fn sniff_with(conn: &Connection, source: &str, options: &str) -> Result<Sniffed, duckdb::Error> {
    conn.query_row(
        &format!(
            "SELECT Delimiter, Quote, HasHeader, SkipRows, len(Columns) FROM sniff_csv({source}{options}, sample_size = {SAMPLE_ROWS})"
        ),
        [],
        |row| {
            Ok(Sniffed {
                delimiter: row.get(0)?,
                quote: row.get(1)?,
                has_header: row.get(2)?,
                skip_rows: row.get::<_, i64>(3)?.try_into().unwrap_or(0),
                columns: row.get::<_, i64>(4)?.try_into().unwrap_or(0),
                padded: !options.is_empty(),
            })
        },
    )
}

/// The dialect: the strict sniff finds metadata rows above the header (rows with fewer fields
/// are not padded, so they stand out); when it sees a single column (ragged rows defeat it) the
/// padded sniff decides.
fn sniff(conn: &Connection, source: &str) -> Result<Sniffed, duckdb::Error> {
    let strict = sniff_with(conn, source, "")?;
    if strict.columns > 1 {
        return Ok(strict);
    }
    sniff_with(conn, source, ", null_padding = true")
}

/// `read_csv` options fixed for the whole ingest.
#[derive(Debug, Clone)]
struct ReadOptions {
    /// Delimiter and rows to skip, when metadata rows were found above the header (the padded
    /// reader would otherwise read them as data); else DuckDB detects both.
    preamble: Option<(String, u64)>,
    /// Pad short rows with NULL (ragged files); off otherwise, as it slows the parser.
    padding: bool,
    numbers: NumberFormat,
    /// Extra spellings of NULL (`NA`…), besides the empty field.
    nulls: Vec<String>,
}

impl ReadOptions {
    /// The options; `serial` turns the parallel reader off (it refuses padding ragged rows
    /// when quoted fields hold line breaks).
    fn render(&self, serial: bool) -> String {
        let dialect = match &self.preamble {
            Some((delimiter, skip)) => {
                format!(", delim = {}, skip = {skip}", sql_string(delimiter))
            }
            None => String::new(),
        };
        let nulls = match self.nulls.is_empty() {
            true => String::new(),
            false => {
                let list: Vec<String> = self.nulls.iter().map(|n| sql_string(n)).collect();
                format!(", nullstr = ['', {}]", list.join(", "))
            }
        };
        format!(
            "{dialect}{}{}{nulls}{}",
            if self.padding {
                ", null_padding = true"
            } else {
                ""
            },
            self.numbers.read_options(),
            if serial { ", parallel = false" } else { "" }
        )
    }
}

/// Runs `read` with the parallel reader, then serially if DuckDB asks for it.
fn with_reader<T>(
    options: &ReadOptions,
    mut read: impl FnMut(&str) -> Result<T, duckdb::Error>,
) -> Result<T, duckdb::Error> {
    match read(&options.render(false)) {
        Err(error) if error.to_string().contains("parallel=false") => read(&options.render(true)),
        other => other,
    }
}

/// The `read_csv` attempts, most precise first, and the warning each one implies: as sniffed;
/// padding ragged rows found past the sniffer's sample; types sniffed from the whole file; text.
///
/// With a thousands separator the first attempt sniffs types on 2,048 rows: DuckDB 1.5's sniffer
/// drops to VARCHAR when it refines types past its first 2,048-row chunk with `thousands` set,
/// although the reader itself parses such values fine.
fn attempts(padding: bool, numbers: NumberFormat) -> Vec<(String, Option<&'static str>)> {
    let pad = if padding { "" } else { ", null_padding = true" };
    let first = match numbers.thousands_separator() {
        Some(_) => format!(", sample_size = {SAMPLE_ROWS}"),
        None => String::new(),
    };
    let mut attempts = vec![(first, None)];
    if !padding {
        attempts.push((pad.to_string(), None));
    }
    attempts.push((format!("{pad}, sample_size = -1"), None));
    attempts.push((
        format!("{pad}, all_varchar = true"),
        Some(
            "column types could not be inferred consistently, so every column was read as text; cast in SQL (TRY_CAST) where you need numbers or dates",
        ),
    ));
    attempts
}

fn create_data(
    conn: &Connection,
    source: &str,
    options: &str,
    padding: bool,
    numbers: NumberFormat,
) -> Result<Vec<String>, duckdb::Error> {
    let mut last_error = None;
    for (extra, warning) in attempts(padding, numbers) {
        let sql = format!(
            "DROP TABLE IF EXISTS data;
             CREATE TABLE data AS SELECT * FROM read_csv({source}, auto_detect = true{options}{extra});"
        );
        match conn.execute_batch(&sql) {
            Ok(()) => return Ok(warning.map(str::to_string).into_iter().collect()),
            Err(error) => {
                tracing::debug!(%error, %extra, "read_csv attempt failed");
                last_error = Some(error);
            }
        }
    }
    Err(last_error.unwrap_or(duckdb::Error::InvalidQuery))
}

fn ingest(
    source: &Path,
    database: &Path,
    loading: &Loading<'_>,
    limits: &Limits,
) -> Result<(), ErrorBody> {
    let config = Config::default()
        .max_memory(&limits.database_memory())
        .and_then(|config| config.threads(limits.threads));
    let conn = config
        .and_then(|config| Connection::open_with_flags(database, config))
        .map_err(|e| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!("cannot create table cache database: {e}"),
            )
        })?;
    with_deadline(&conn, limits.ingest_timeout, || {
        if loading.shape == Shape::Prose {
            figures::load(&conn, source).map_err(read_failed(source))?;
        }
        sheets::create_tables(&conn, loading.sheets).map_err(read_failed(source))?;
        load(&conn, source, database, loading.detected, loading.replaced)
    })
    .map_err(|error| match error.code {
        ErrorCode::ToolTimeout => ErrorBody::new(
            ErrorCode::ToolTimeout,
            format!(
                "loading {} took longer than the worker's {} ms; the file is too large for this worker \
                 (raise ATELIER_TABULAR_INGEST_TIMEOUT_MS)",
                source.display(),
                limits.ingest_timeout.as_millis()
            ),
        ),
        _ => error,
    })?;
    conn.close().map_err(|(_, e)| read_failed(source)(e))
}

/// Loads `source` into the table `data` of `conn`.
fn load(
    conn: &Connection,
    source: &Path,
    database: &Path,
    detected: Detected,
    replaced: u64,
) -> Result<(), ErrorBody> {
    let failed = read_failed(source);
    let literal = sql_string(&source.to_string_lossy());
    let started = std::time::Instant::now();
    let prefix = prefix_copy(source, database);
    let checked = match prefix.as_ref().and_then(|scratch| scratch.0.first()) {
        Some(path) => pre_check(conn, path).or_else(|_| pre_check(conn, source)),
        None => pre_check(conn, source),
    };
    drop(prefix);
    let (sniffed, sample, sample_options) = checked.map_err(&failed)?;
    let check_ms = started.elapsed().as_millis();
    let options = ReadOptions {
        padding: sniffed.padded,
        numbers: detect_number_format(&sample, &sniffed.delimiter),
        nulls: detect_null_markers(&sample),
        ..sample_options
    };
    let format = options.numbers;
    let mut warnings = with_reader(&options, |o| {
        create_data(conn, &literal, o, options.padding, options.numbers)
    })
    .map_err(&failed)?;
    tracing::info!(
        check_ms,
        load_ms = started.elapsed().as_millis() - check_ms,
        "table loaded"
    );
    if !options.nulls.is_empty() {
        warnings.push(format!(
            "the values {} were read as empty (NULL) in every column",
            options.nulls.join(", ")
        ));
    }
    if detected.confidence <= WEAK_GUESS {
        warnings.push(format!(
            "the encoding is uncertain: read as {} (confidence {}); check accented text",
            detected.name(),
            detected.confidence
        ));
    }
    if replaced > 0 {
        warnings.push(format!(
            "{replaced} byte sequence(s) were not valid {} and read as U+FFFD",
            detected.name()
        ));
    }
    let meta = SourceMeta {
        delimiter: sniffed.delimiter,
        quote: sniffed.quote,
        has_header: sniffed.has_header,
        skipped_rows: sniffed.skip_rows,
        preamble: preamble(source, sniffed.skip_rows),
        encoding: detected.name(),
        encoding_confidence: detected.confidence,
        replaced_characters: replaced,
        decimal_separator: format.decimal_separator().to_string(),
        thousands_separator: format.thousands_separator().map(str::to_string),
        null_values: options.nulls.clone(),
        warnings,
    };
    let json = serde_json::to_string(&meta).map_err(|e| {
        ErrorBody::new(
            ErrorCode::Internal,
            format!("cannot encode table metadata: {e}"),
        )
    })?;
    conn.execute_batch(&format!(
        "CREATE TABLE atelier_source AS SELECT {} AS meta; CHECKPOINT;",
        sql_string(&json)
    ))
    .map_err(&failed)?;
    Ok(())
}

/// The first lines of the file, when the sniffer skipped them as metadata above the header.
fn preamble(source: &Path, skipped: u64) -> Vec<String> {
    let Ok(file) = File::open(source) else {
        return Vec::new();
    };
    let keep = usize::try_from(skipped)
        .unwrap_or(usize::MAX)
        .min(PREAMBLE_LINES);
    BufReader::new(file)
        .lines()
        .take(keep)
        .map_while(Result::ok)
        .map(|line| {
            let line = line.trim_start_matches('\u{FEFF}').trim_end();
            line.chars().take(PREAMBLE_CHARS).collect()
        })
        .collect()
}

/// Sniffs the dialect of the file at `path` and samples its values.
fn pre_check(
    conn: &Connection,
    path: &Path,
) -> Result<(Sniffed, Vec<Vec<String>>, ReadOptions), duckdb::Error> {
    let sniffed = sniff(conn, &sql_string(&path.to_string_lossy()))?;
    let options = ReadOptions {
        preamble: (sniffed.skip_rows > 0).then(|| (sniffed.delimiter.clone(), sniffed.skip_rows)),
        padding: true,
        numbers: NumberFormat::Plain,
        nulls: Vec::new(),
    };
    let text = head_text(path);
    let quote = match sniffed.quote.as_str() {
        "" | "(empty)" => Some('"'),
        other => other.chars().next(),
    };
    let skip = usize::try_from(sniffed.skip_rows).unwrap_or(0);
    let sample = sample_values(
        &text,
        &sniffed.delimiter,
        quote,
        skip,
        sniffed.has_header,
        SAMPLE_ROWS,
    );
    Ok((sniffed, sample, options))
}

/// The first [`PREFIX_BYTES`] of a UTF-8 file (a character cut at the end is dropped).
fn head_text(path: &Path) -> String {
    let mut head = Vec::new();
    if let Ok(file) = File::open(path) {
        let _ = std::io::Read::read_to_end(&mut std::io::Read::take(file, PREFIX_BYTES), &mut head);
    }
    match String::from_utf8(head) {
        Ok(text) => text,
        Err(error) => {
            let valid = error.utf8_error().valid_up_to();
            let mut bytes = error.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap_or_default()
        }
    }
}

/// For a file larger than [`PREFIX_BYTES`], a copy of its first lines (cut at a line end) for
/// the pre-checks, which then do not scan the whole file; removed when dropped.
fn prefix_copy(source: &Path, database: &Path) -> Option<Scratch> {
    let mut file = File::open(source).ok()?;
    if file.metadata().ok()?.len() <= PREFIX_BYTES * 2 {
        return None;
    }
    let mut head = vec![0u8; usize::try_from(PREFIX_BYTES).ok()?];
    std::io::Read::read_exact(&mut file, &mut head).ok()?;
    let end = head.iter().rposition(|b| *b == b'\n')? + 1;
    let path = database.with_extension("prefix.csv");
    std::fs::write(&path, &head[..end]).ok()?;
    Some(Scratch(vec![path]))
}

/// Reads the metadata stored at ingest.
pub(crate) fn read_meta(conn: &Connection) -> Result<SourceMeta, ErrorBody> {
    let broken = |message: String| {
        ErrorBody::new(
            ErrorCode::Internal,
            format!("table cache is unreadable: {message}"),
        )
    };
    let json: String = conn
        .query_row("SELECT meta FROM atelier_source", [], |row| row.get(0))
        .map_err(|e| broken(e.to_string()))?;
    serde_json::from_str(&json).map_err(|e| broken(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_once_atomically_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("in.csv");
        std::fs::write(&csv, "a,b\n1,x\n2,y\n").unwrap();
        let digest = crate::files::sha256_hex(b"a,b\n1,x\n2,y\n");
        let cache = Arc::new(TableCache::new(
            &dir.path().join("cache"),
            Limits::default(),
        ));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (cache, csv, digest) = (cache.clone(), csv.clone(), digest.clone());
                std::thread::spawn(move || cache.database(&csv, &digest, Shape::Delimited))
            })
            .collect();
        let paths: Vec<PathBuf> = handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect();
        assert!(paths.iter().all(|p| p == &paths[0]));
        let mut names: Vec<String> = std::fs::read_dir(dir.path().join("cache/tabular"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec![format!("{digest}.duckdb"), "locks".to_string()]);
    }

    #[test]
    fn unreadable_csv_is_file_read_failed_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TableCache::new(dir.path(), Limits::default());
        let missing = dir.path().join("missing.csv");
        let err = cache
            .database(&missing, &"0".repeat(64), Shape::Delimited)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::FileReadFailed);
        let databases = std::fs::read_dir(dir.path().join("tabular"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name() != "locks")
            .count();
        assert_eq!(databases, 0);
    }

    #[test]
    fn a_full_disk_is_disk_full_saying_what_to_do() {
        let full = cache_failed(std::io::Error::from_raw_os_error(28));
        assert_eq!(full.code, ErrorCode::DiskFull);
        assert!(
            full.message.contains("table_cache_bytes"),
            "{}",
            full.message
        );
        let other = cache_failed(std::io::Error::from_raw_os_error(13));
        assert_eq!(other.code, ErrorCode::Internal);
    }

    #[test]
    fn preamble_keeps_the_skipped_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.csv");
        std::fs::write(&path, "\u{FEFF}Report\nAccount: 1 \na;b\n1;2\n").unwrap();
        assert_eq!(preamble(&path, 2), vec!["Report", "Account: 1"]);
        assert!(preamble(&path, 0).is_empty());
    }
}
