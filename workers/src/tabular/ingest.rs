//! One persistent DuckDB database per CSV digest: `<cache_dir>/tabular/<digest>.duckdb`.
//!
//! The first call for a digest ingests the CSV with `read_csv(auto_detect)` into table `data`
//! (plus the sniffed dialect and encoding in `atelier_source`) inside a temporary file, then
//! renames it into place, so a crash never leaves a half-built database. A per-digest lock makes
//! concurrent first calls in one process ingest once; across processes the rename is atomic.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use atelier_messages::{ErrorBody, ErrorCode};
use duckdb::Connection;

use crate::files::{check_digest, temp_path_for};

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The cache of ingested CSV databases.
pub(crate) struct TableCache {
    root: PathBuf,
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl TableCache {
    pub(crate) fn new(cache_dir: &Path) -> Self {
        Self {
            root: cache_dir.join("tabular"),
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The database of the CSV at `csv` with content digest `digest`, ingested on first use.
    pub(crate) fn database(&self, csv: &Path, digest: &str) -> Result<PathBuf, ErrorBody> {
        check_digest(digest)?;
        let target = self.root.join(format!("{digest}.duckdb"));
        if target.exists() {
            return Ok(target);
        }
        let lock = self.lock_for(digest);
        let _guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        if !target.exists() {
            build(csv, &target)?;
        }
        Ok(target)
    }

    fn lock_for(&self, digest: &str) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        locks.entry(digest.to_string()).or_default().clone()
    }
}

/// The text encoding a CSV is read with.
struct Encoding {
    /// The name reported to the model and passed to DuckDB's `read_csv(encoding = ...)`.
    name: &'static str,
    confidence: f64,
}

/// UTF-8 (with or without BOM) when the bytes decode, else Latin-1 (every byte is valid).
fn detect_encoding(bytes: &[u8]) -> Encoding {
    let body = bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes);
    match std::str::from_utf8(body) {
        Ok(_) => Encoding {
            name: "utf-8",
            confidence: 1.0,
        },
        Err(_) => Encoding {
            name: "latin-1",
            confidence: 0.5,
        },
    }
}

fn read_failed(csv: &Path) -> impl Fn(duckdb::Error) -> ErrorBody + '_ {
    move |e| {
        ErrorBody::new(
            ErrorCode::FileReadFailed,
            format!("cannot read {} as CSV: {e}", csv.display()),
        )
    }
}

fn cache_failed(e: std::io::Error) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Internal,
        format!("cannot write the table cache: {e}"),
    )
}

fn build(csv: &Path, target: &Path) -> Result<(), ErrorBody> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(cache_failed)?;
    }
    let bytes = std::fs::read(csv).map_err(|e| {
        ErrorBody::new(
            ErrorCode::FileReadFailed,
            format!("cannot read {}: {e}", csv.display()),
        )
    })?;
    let encoding = detect_encoding(&bytes);
    drop(bytes);
    let temp = temp_path_for(target);
    let built = ingest(csv, &temp, &encoding)
        .and_then(|()| std::fs::rename(&temp, target).map_err(cache_failed));
    if built.is_err() {
        let _ = std::fs::remove_file(&temp);
        let _ = std::fs::remove_file(wal_of(&temp));
    }
    tracing::info!(csv = %csv.display(), database = %target.display(), ok = built.is_ok(), "ingested CSV");
    built
}

fn wal_of(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_os_string();
    name.push(".wal");
    PathBuf::from(name)
}

/// A SQL string literal.
fn sql_string(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn ingest(csv: &Path, database: &Path, encoding: &Encoding) -> Result<(), ErrorBody> {
    let conn = Connection::open(database).map_err(|e| {
        ErrorBody::new(
            ErrorCode::Internal,
            format!("cannot create table cache database: {e}"),
        )
    })?;
    let source = sql_string(&csv.to_string_lossy());
    let options = format!("encoding = {}", sql_string(encoding.name));
    let sql = format!(
        "CREATE TABLE data AS SELECT * FROM read_csv({source}, auto_detect = true, {options});
         CREATE TABLE atelier_source AS
           SELECT Delimiter AS delimiter, Quote AS quote, HasHeader AS has_header,
                  {name} AS encoding, {confidence}::DOUBLE AS encoding_confidence
           FROM sniff_csv({source}, {options});
         CHECKPOINT;",
        name = sql_string(encoding.name),
        confidence = encoding.confidence,
    );
    conn.execute_batch(&sql).map_err(read_failed(csv))?;
    conn.close().map_err(|(_, e)| read_failed(csv)(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_utf8_with_and_without_bom_and_falls_back_to_latin1() {
        assert_eq!(detect_encoding(b"a,b\n1,2\n").name, "utf-8");
        assert_eq!(detect_encoding(b"\xEF\xBB\xBFa,b\n").name, "utf-8");
        let latin = detect_encoding(b"name\nJos\xE9\n");
        assert_eq!(latin.name, "latin-1");
        assert!(latin.confidence < 1.0);
    }

    #[test]
    fn builds_once_atomically_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("in.csv");
        std::fs::write(&csv, "a,b\n1,x\n2,y\n").unwrap();
        let digest = crate::files::sha256_hex(b"a,b\n1,x\n2,y\n");
        let cache = Arc::new(TableCache::new(&dir.path().join("cache")));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (cache, csv, digest) = (cache.clone(), csv.clone(), digest.clone());
                std::thread::spawn(move || cache.database(&csv, &digest))
            })
            .collect();
        let paths: Vec<PathBuf> = handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect();
        assert!(paths.iter().all(|p| p == &paths[0]));
        let names: Vec<String> = std::fs::read_dir(dir.path().join("cache/tabular"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![format!("{digest}.duckdb")]);
    }

    #[test]
    fn unreadable_csv_is_file_read_failed_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TableCache::new(dir.path());
        let missing = dir.path().join("missing.csv");
        let err = cache.database(&missing, &"0".repeat(64)).unwrap_err();
        assert_eq!(err.code, ErrorCode::FileReadFailed);
        let leftovers = std::fs::read_dir(dir.path().join("tabular"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(leftovers, 0);
    }
}
