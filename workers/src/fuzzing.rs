//! Entry points for the fuzz targets (feature `fuzzing`, see `tests/fuzz`): the SQL guard and
//! the office package reader on arbitrary input. Nothing here is used by the workers.

use atelier_messages::ErrorBody;
use duckdb::Connection;

/// `table_query`'s guard over an in-memory database with a small `data` table.
pub struct SqlGuard {
    conn: Connection,
}

impl SqlGuard {
    pub fn new() -> Result<Self, duckdb::Error> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(
            "CREATE TABLE data AS SELECT range AS id, 'x' || range AS name FROM range(3)",
        )?;
        Ok(Self { conn })
    }

    /// The guard's answer on `query`: accepted, or its refusal.
    pub fn check(&self, query: &str) -> Result<(), ErrorBody> {
        crate::tabular::fuzz_check(&self.conn, query)
    }

    /// The rows of `data` (3 unless something changed it).
    pub fn rows(&self) -> Result<i64, duckdb::Error> {
        self.conn
            .query_row("SELECT count(*) FROM data", [], |row| row.get(0))
    }
}

/// Opens `bytes` as an office package through the guarded reader.
pub fn open_package(bytes: Vec<u8>) -> Result<(), ErrorBody> {
    crate::office::fuzz_open(bytes)
}
