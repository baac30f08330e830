//! Entry points for the fuzz targets (feature `fuzzing`, see `tests/fuzz`): the SQL guard, the
//! office package reader, and the xlsx, docx and pptx readers as the office pool calls them, on
//! arbitrary input. Nothing here is used by the workers.

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

/// An office format the readers' fuzz targets feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Office {
    Xlsx,
    Docx,
    Pptx,
}

impl Office {
    fn format(self) -> crate::office::Format {
        match self {
            Office::Xlsx => crate::office::Format::Xlsx,
            Office::Docx => crate::office::Format::Docx,
            Office::Pptx => crate::office::Format::Pptx,
        }
    }

    /// The package `input` stands for: `input` itself when it is a zip (starts with `PK`),
    /// else a new document of this format whose main parts are replaced, in order, by the
    /// input's `\0`-separated pieces (xlsx: the sheet, shared strings, styles, workbook and its
    /// relationships; docx: the document, styles, relationships, content types; pptx: the
    /// slide, presentation, its relationships, the slide's relationships, a layout, the theme).
    pub fn package(self, input: &[u8]) -> Vec<u8> {
        crate::office::fuzz_package(self.format(), input)
    }

    /// Runs every tool that reads this format on `bytes` as the office pool does
    /// (`get_file_info`, `get_file_map`, `read_file` whole and by selector, the styles tool,
    /// an edit, a content review): each answers or refuses with a code.
    pub fn read(self, bytes: &[u8]) -> Vec<Result<(), ErrorBody>> {
        crate::office::fuzz_read(self.format(), bytes)
    }
}
