//! The table cache's byte bound: `<cache_dir>/tabular` keeps at most `Limits::cache_bytes` of
//! databases; when a new one is built, the least recently opened others go first (a database
//! is marked used each time a worker opens it). A database removed while a connection holds it
//! stays readable through that connection; the next worker to need it loads the CSV again.

use std::path::{Path, PathBuf};

use super::CACHE_SUFFIXES;
use crate::files::{Cached, Evicted, check_digest, evict_oldest};

/// The extension of a cached database.
const DATABASE: &str = "duckdb";

/// Removes the least recently opened databases under `root` (and their write-ahead logs)
/// until they take at most `bound` bytes; `keep`, the one just built, stays.
pub(super) fn evict_databases(root: &Path, bound: u64, keep: &Path) -> std::io::Result<Evicted> {
    let mut databases = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        let named_by_digest = path.extension().is_some_and(|ext| ext == DATABASE)
            && path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .map(|stem| {
                    CACHE_SUFFIXES
                        .iter()
                        .find_map(|suffix| stem.strip_suffix(suffix))
                        .unwrap_or(stem)
                })
                .is_some_and(|digest| check_digest(digest).is_ok());
        if !named_by_digest {
            continue;
        }
        let wal = wal_of(&path);
        databases.push(Cached::of(path, vec![wal])?);
    }
    let evicted = evict_oldest(databases, bound, keep)?;
    if evicted.removed > 0 {
        tracing::info!(
            removed = evicted.removed,
            freed_bytes = evicted.freed_bytes,
            "evicted cached table databases"
        );
    }
    Ok(evicted)
}

/// The write-ahead log DuckDB keeps beside `database`.
pub(super) fn wal_of(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_os_string();
    name.push(".wal");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn database(root: &Path, digit: char, bytes: usize, age_secs: u64) -> std::path::PathBuf {
        let path = root.join(format!("{}.{DATABASE}", digit.to_string().repeat(64)));
        std::fs::write(&path, vec![0u8; bytes]).unwrap();
        let used = SystemTime::now() - Duration::from_secs(age_secs);
        std::fs::File::options()
            .append(true)
            .open(&path)
            .and_then(|file| file.set_modified(used))
            .unwrap();
        path
    }

    #[test]
    fn the_least_recently_opened_databases_go_first_and_the_new_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let oldest = database(root, 'a', 400, 300);
        let older = database(root, 'b', 400, 200);
        let recent = database(root, 'c', 400, 100);
        let fresh = database(root, 'd', 400, 0);
        std::fs::write(wal_of(&oldest), vec![0u8; 100]).unwrap();
        std::fs::create_dir_all(root.join("locks")).unwrap();
        let evicted = evict_databases(root, 900, &fresh).unwrap();
        assert_eq!(
            evicted,
            Evicted {
                removed: 2,
                freed_bytes: 900
            }
        );
        assert!(!oldest.exists() && !wal_of(&oldest).exists());
        assert!(!older.exists() && recent.exists() && fresh.exists());
        assert!(root.join("locks").exists());
        // The new one stays even alone over the bound.
        let evicted = evict_databases(root, 10, &fresh).unwrap();
        assert_eq!(evicted.removed, 1);
        assert!(fresh.exists() && !recent.exists());
    }
}
