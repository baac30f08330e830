//! Engine tests on real DuckDB and real files.

mod bounds;
mod budget;
mod peak;
mod real_world;
mod tools;
mod update;

use std::io::Cursor;
use std::path::{Path, PathBuf};

use atelier_messages::ErrorCode;
use calamine::{Data, Reader, Xlsx, open_workbook_from_rs};
use serde_json::{Value, json};

use super::*;
use crate::files::sha256_hex;

/// Real files from elsewhere, kept with the end-to-end tests.
const CORPORA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures");
const ROWS: u64 = 1200;
const REGIONS: [&str; 3] = ["east", "north", "south"];

struct Fixture {
    dir: tempfile::TempDir,
    engine: TabularEngine,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let engine = TabularEngine::with_limits(&dir.path().join("cache"), Limits::default());
        Self { dir, engine }
    }

    /// Writes a CSV into the fixture and returns its path and digest.
    fn csv(&self, name: &str, content: &[u8]) -> (PathBuf, String) {
        let path = self.dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        (path, sha256_hex(content))
    }

    /// The generated sales table: `id,region,amount,day` with `ROWS` rows.
    fn sales(&self) -> (PathBuf, String) {
        let mut text = String::from("id,region,amount,day\n");
        for id in 1..=ROWS {
            let region = REGIONS[(id % 3) as usize];
            let day = 1 + id % 28;
            text.push_str(&format!("{id},{region},{}.5,2024-02-{day:02}\n", id * 2));
        }
        self.csv("sales.csv", text.as_bytes())
    }

    fn map(&self, file: &(PathBuf, String)) -> Value {
        to_json(&self.engine.map(csv(file)).unwrap())
    }

    fn rows(&self, file: &(PathBuf, String), start: u64, count: u64) -> RowsRead {
        self.engine
            .read_rows(csv(file), start, count, None)
            .unwrap()
    }

    fn query(
        &self,
        file: &(PathBuf, String),
        sql: &str,
        rows: u64,
        offset: u64,
    ) -> Result<QueryWindow, ErrorBody> {
        let window = Window { rows, offset };
        self.engine.query(csv(file), sql, window)
    }
}

fn csv(file: &(PathBuf, String)) -> CsvFile<'_> {
    CsvFile {
        name: file.0.to_str().unwrap(),
        path: &file.0,
        digest: &file.1,
    }
}

fn corpus(relative: &str) -> (PathBuf, String) {
    let path = Path::new(CORPORA).join(relative);
    let digest = sha256_hex(&std::fs::read(&path).unwrap());
    (path, digest)
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap()
}

#[test]
fn maps_client_data() {
    let fixture = Fixture::new();
    let map = fixture
        .engine
        .map(csv(&corpus("keenbench/synthetic/client_data.csv")))
        .unwrap();
    let map = to_json(&map);
    assert_eq!(map["format"], "csv");
    assert_eq!(map["delimiter"], ",");
    assert_eq!(map["quote_char"], "\"");
    assert_eq!(map["encoding_detected"], "utf-8");
    assert_eq!(map["encoding_confidence"], 1.0);
    assert_eq!(map["has_header"], true);
    assert_eq!(map["row_count"], 1);
    assert_eq!(map["column_count"], 5);
    assert_eq!(
        map["columns"],
        json!([
            {"name": "Company", "index": 0, "inferred_type": "string"},
            {"name": "Date", "index": 1, "inferred_type": "date"},
            {"name": "Product", "index": 2, "inferred_type": "string"},
            {"name": "Quantity", "index": 3, "inferred_type": "integer"},
            {"name": "Unit Price", "index": 4, "inferred_type": "float"},
        ])
    );
    assert_eq!(map["chunks"], json!([{"index": 0, "rows": "1-1"}]));
    assert_eq!(map["warnings"], json!([]));
}

#[test]
fn client_data_values_come_back_typed() {
    let fixture = Fixture::new();
    let file = corpus("keenbench/synthetic/client_data.csv");
    let result = fixture.query(&file, "SELECT * FROM data", 100, 0).unwrap();
    assert_eq!(
        result.rows,
        vec![vec![
            json!("Acme Corp"),
            json!("2026-03-01"),
            json!("Widget"),
            json!(50),
            json!(24.99)
        ]]
    );
    assert_eq!(
        to_json(&result.column_types),
        json!(["string", "date", "string", "integer", "float"])
    );
}

#[test]
fn maps_chunks_of_500_rows() {
    let fixture = Fixture::new();
    let map = to_json(&fixture.engine.map(csv(&fixture.sales())).unwrap());
    assert_eq!(map["row_count"], ROWS);
    assert_eq!(
        map["chunks"],
        json!([{"index": 0, "rows": "1-500"}, {"index": 1, "rows": "501-1000"}, {"index": 2, "rows": "1001-1200"}])
    );
    let types: Vec<&Value> = map["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["inferred_type"])
        .collect();
    assert_eq!(types, vec!["integer", "string", "float", "date"]);
}

#[test]
fn aggregates_match_computed_values() {
    let fixture = Fixture::new();
    let sales = fixture.sales();
    let sql = "SELECT region, count(*) AS n, sum(amount) AS total, max(day) AS last_day \
               FROM data GROUP BY region ORDER BY region;";
    let result = fixture.query(&sales, sql, 100, 0).unwrap();
    assert_eq!(result.columns, vec!["region", "n", "total", "last_day"]);
    assert_eq!(
        to_json(&result.column_types),
        json!(["string", "integer", "float", "date"])
    );
    let expected: Vec<Vec<Value>> = REGIONS
        .iter()
        .enumerate()
        .map(|(index, region)| {
            let ids: Vec<u64> = (1..=ROWS).filter(|id| (id % 3) as usize == index).collect();
            let total: f64 = ids.iter().map(|id| (id * 2) as f64 + 0.5).sum();
            vec![
                json!(region),
                json!(ids.len()),
                json!(total),
                json!("2024-02-28"),
            ]
        })
        .collect();
    assert_eq!(result.rows, expected);
    assert_eq!(
        (result.row_count, result.total_row_count, result.has_more),
        (3, 3, false)
    );
}

#[test]
fn windows_page_through_ordered_results() {
    let fixture = Fixture::new();
    let sales = fixture.sales();
    let sql = "SELECT id, amount FROM data ORDER BY id DESC";
    let first = fixture.query(&sales, sql, 10, 0).unwrap();
    assert_eq!(first.rows[0], vec![json!(1200), json!(2400.5)]);
    assert_eq!(
        (first.row_count, first.total_row_count, first.has_more),
        (10, ROWS, true)
    );
    assert_eq!((first.window_rows, first.window_offset), (10, 0));
    let last = fixture.query(&sales, sql, 10, 1195).unwrap();
    let ids: Vec<Value> = last.rows.iter().map(|row| row[0].clone()).collect();
    assert_eq!(ids, vec![json!(5), json!(4), json!(3), json!(2), json!(1)]);
    assert_eq!((last.row_count, last.has_more), (5, false));
    let past = fixture.query(&sales, sql, 10, 5000).unwrap();
    assert_eq!(
        (past.row_count, past.total_row_count, past.has_more),
        (0, ROWS, false)
    );
}

#[test]
fn a_trailing_comment_or_semicolon_does_not_break_the_wrapping() {
    let fixture = Fixture::new();
    let sales = fixture.sales();
    let result = fixture
        .query(
            &sales,
            "SELECT count(*) AS n FROM data -- all rows\n ; ",
            5,
            0,
        )
        .unwrap();
    assert_eq!(result.rows, vec![vec![json!(ROWS)]]);
}

#[test]
fn duckdb_errors_are_validation_failed_with_duckdb_message() {
    let fixture = Fixture::new();
    let sales = fixture.sales();
    let unknown = fixture
        .query(&sales, "SELECT nope FROM data", 5, 0)
        .unwrap_err();
    assert_eq!(unknown.code, ErrorCode::ValidationFailed);
    assert!(unknown.message.contains("nope"), "{}", unknown.message);
    let syntax = fixture
        .query(&sales, "SELEC * FROM data", 5, 0)
        .unwrap_err();
    assert_eq!(syntax.code, ErrorCode::ValidationFailed);
    assert!(
        syntax.message.contains("syntax error"),
        "{}",
        syntax.message
    );
    let empty = fixture.query(&sales, " ; ", 5, 0).unwrap_err();
    assert_eq!(empty.code, ErrorCode::ValidationFailed);
}

#[test]
fn a_query_that_reads_no_table_or_leaves_a_spaced_name_bare_says_what_to_write() {
    let fixture = Fixture::new();
    // `SELECT COUNT(*)` without FROM counts one row, whatever the table holds.
    let sales = fixture.sales();
    let no_table = fixture.query(&sales, "SELECT COUNT(*)", 5, 0).unwrap_err();
    assert_eq!(no_table.code, ErrorCode::ValidationFailed);
    assert!(
        no_table.message.contains("aggregates no table") && no_table.message.contains("FROM data"),
        "{}",
        no_table.message
    );
    let client = corpus("keenbench/synthetic/client_data.csv");
    let bare = fixture
        .query(&client, "SELECT SUM(Quantity * Unit Price) FROM data", 5, 0)
        .unwrap_err();
    assert_eq!(bare.code, ErrorCode::ValidationFailed);
    assert!(
        bare.message
            .ends_with("column names with spaces or symbols take double quotes: \"Unit Price\""),
        "{}",
        bare.message
    );
    let quoted = fixture
        .query(
            &client,
            "SELECT SUM(Quantity * \"Unit Price\") AS total FROM data",
            5,
            0,
        )
        .unwrap();
    assert_eq!(quoted.rows, vec![vec![json!(1249.5)]]);
    // The table named by its file's name is table `data`.
    for named in [
        "SELECT COUNT(*) FROM client_data.csv",
        "SELECT COUNT(*) FROM \"client_data.csv\"",
        "select count(*) from CLIENT_DATA where Quantity > (SELECT 0 FROM client_data LIMIT 1)",
    ] {
        let counted = fixture.query(&client, named, 5, 0).unwrap();
        assert_eq!(counted.rows, vec![vec![json!(1)]], "{named}");
    }
    // A column spelled with another case, underscores or spaces is the column, unless an
    // alias of the query has that name.
    for spelled in [
        "SELECT Quantity * Unit_Price FROM data",
        "SELECT quantity * \"unit price\" FROM client_data.csv",
        "SELECT QUANTITY * UNITPRICE AS total FROM data",
    ] {
        let total = fixture.query(&client, spelled, 5, 0).unwrap();
        assert_eq!(total.rows, vec![vec![json!(1249.5)]], "{spelled}");
    }
    let aliased = "SELECT Quantity AS unit_price FROM data ORDER BY unit_price";
    let ordered = fixture.query(&client, aliased, 5, 0).unwrap();
    assert_eq!(ordered.rows, vec![vec![json!(50)]]);
    // An aggregate over a filter says how many rows the filter matched.
    let none = fixture
        .query(
            &client,
            "SELECT count(*) AS total FROM data WHERE Company = 'Nobody'",
            5,
            0,
        )
        .unwrap();
    assert_eq!(
        (none.rows.clone(), none.matched_rows),
        (vec![vec![json!(0)]], Some(0))
    );
    assert!(
        none.warning
            .as_deref()
            .is_some_and(|w| w.contains("matches the WHERE clause"))
    );
    let one = fixture
        .query(
            &client,
            "SELECT sum(Quantity) FROM client_data WHERE Company = 'Acme Corp'",
            5,
            0,
        )
        .unwrap();
    assert_eq!((one.matched_rows, one.warning), (Some(1), None));
    let plain = fixture
        .query(&client, "SELECT sum(Quantity) FROM data", 5, 0)
        .unwrap();
    assert_eq!(plain.matched_rows, None);
    // Not where a common table expression could carry the name.
    let shadowed = "WITH client_data AS (SELECT 7 AS n) SELECT n FROM client_data";
    let cte = fixture.query(&client, shadowed, 5, 0).unwrap();
    assert_eq!(cte.rows, vec![vec![json!(7)]]);
}

#[test]
fn refuses_everything_but_one_select_and_touches_no_file() {
    let fixture = Fixture::new();
    let sales = fixture.sales();
    let probe = fixture.dir.path().join("probe");
    let p = probe.display();
    let attacks = [
        format!("COPY data TO '{p}.csv'"),
        format!("COPY (SELECT * FROM data) TO '{p}.parquet' (FORMAT parquet)"),
        format!("ATTACH '{p}.db' AS other"),
        "INSTALL httpfs".to_string(),
        "LOAD httpfs".to_string(),
        "PRAGMA database_list".to_string(),
        "SET enable_external_access = true".to_string(),
        "RESET lock_configuration".to_string(),
        "SELECT 1; SELECT 2".to_string(),
        "SELECT 1; DROP TABLE data".to_string(),
        "SELECT * FROM read_csv('/etc/passwd')".to_string(),
        "SELECT * FROM read_text('/etc/passwd')".to_string(),
        "SELECT * FROM read_blob('/etc/passwd')".to_string(),
        "SELECT * FROM '/etc/passwd'".to_string(),
        "SELECT * FROM glob('/*')".to_string(),
        "SELECT * FROM read_json('/etc/hosts')".to_string(),
        "SELECT * FROM read_parquet('/tmp/x.parquet')".to_string(),
        format!("SELECT * FROM read_csv('{p}.csv')"),
        "DELETE FROM data".to_string(),
        "UPDATE data SET amount = 0".to_string(),
        "INSERT INTO data SELECT * FROM data".to_string(),
        "CREATE TABLE t AS SELECT 1".to_string(),
        format!("CREATE TABLE t AS SELECT * FROM read_csv('{p}.csv')"),
        "DROP TABLE data".to_string(),
        "ALTER TABLE data RENAME TO x".to_string(),
        "CREATE SECRET s (TYPE s3)".to_string(),
        format!("EXPORT DATABASE '{p}'"),
        "CHECKPOINT".to_string(),
        "CALL pragma_version()".to_string(),
        "BEGIN TRANSACTION".to_string(),
        "DETACH memory".to_string(),
        "USE memory".to_string(),
        format!("SELECT * FROM data; COPY data TO '{p}.csv'"),
        "SELECT * FROM duckdb_extensions()".to_string(),
        "WITH x AS (DELETE FROM data RETURNING *) SELECT * FROM x".to_string(),
    ];
    for attack in &attacks {
        let err = fixture.query(&sales, attack, 10, 0).unwrap_err();
        assert_eq!(err.code, ErrorCode::ValidationFailed, "{attack}: {err}");
    }
    let export = ExportRequest {
        query: Some("SELECT * FROM read_text('/etc/passwd')"),
        target_path: "out.csv",
        format: ExportFormat::Csv,
        sheet: None,
    };
    assert_eq!(
        fixture.engine.export(csv(&sales), export).unwrap_err().code,
        ErrorCode::ValidationFailed
    );
    let mut entries: Vec<String> = std::fs::read_dir(fixture.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    assert_eq!(entries, vec!["cache", "sales.csv"]);
    let mut cached: Vec<String> = std::fs::read_dir(fixture.dir.path().join("cache/tabular"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    cached.sort();
    assert_eq!(
        cached,
        vec![format!("{}.duckdb", sales.1), "locks".to_string()],
        "only the table database is cached"
    );
    let still = fixture
        .query(&sales, "SELECT count(*) FROM data", 1, 0)
        .unwrap();
    assert_eq!(still.rows, vec![vec![json!(ROWS)]]);
}

#[test]
fn long_queries_are_interrupted_with_tool_timeout() {
    let mut fixture = Fixture::new();
    fixture.engine.limits.timeout = Duration::from_millis(200);
    let sales = fixture.sales();
    let heavy = "SELECT sum(a.range * b.range) FROM range(200000) a, range(200000) b";
    let err = fixture.query(&sales, heavy, 1, 0).unwrap_err();
    assert_eq!(err.code, ErrorCode::ToolTimeout, "{err}");
}

fn export(fixture: &Fixture, file: &(PathBuf, String), request: ExportRequest<'_>) -> Exported {
    fixture.engine.export(csv(file), request).unwrap()
}

#[test]
fn exports_csv_bytes() {
    let fixture = Fixture::new();
    let file = fixture.csv("mixed.csv", b"name,qty,price,when,note\n\"Lee, Ann\",2,1.5,2024-01-31,\n Bo ,3,,2024-02-01,\"say \"\"hi\"\"\"\n");
    let request = ExportRequest {
        query: Some("SELECT * FROM data ORDER BY qty"),
        target_path: "out/result.csv",
        format: ExportFormat::Csv,
        sheet: None,
    };
    let exported = export(&fixture, &file, request);
    assert_eq!(
        String::from_utf8(exported.content).unwrap(),
        "name,qty,price,when,note\n\"Lee, Ann\",2,1.5,2024-01-31,\n Bo ,3,,2024-02-01,\"say \"\"hi\"\"\"\n"
    );
    let summary = to_json(&exported.summary);
    assert_eq!(
        summary,
        json!({"target_path": "out/result.csv", "format": "csv", "sheet": null,
               "row_count": 2, "column_count": 5, "warnings": []})
    );
}

#[test]
fn exports_xlsx_with_typed_cells() {
    let fixture = Fixture::new();
    let sales = fixture.sales();
    let request = ExportRequest {
        query: Some(
            "SELECT id, region, amount, day, id > 1198 AS late, NULL AS nothing FROM data WHERE id > 1195 ORDER BY id",
        ),
        target_path: "report.xlsx",
        format: ExportFormat::Xlsx,
        sheet: Some("Sales"),
    };
    let exported = export(&fixture, &sales, request);
    assert_eq!(
        (exported.summary.row_count, exported.summary.column_count),
        (5, 6)
    );
    assert_eq!(exported.summary.sheet.as_deref(), Some("Sales"));
    assert!(
        exported.summary.warnings.is_empty(),
        "{:?}",
        exported.summary.warnings
    );
    let mut workbook: Xlsx<_> = open_workbook_from_rs(Cursor::new(exported.content)).unwrap();
    let range = workbook.worksheet_range("Sales").unwrap();
    assert_eq!(range.height(), 6);
    let header: Vec<String> = (0..6)
        .map(|c| range.get_value((0, c)).unwrap().to_string())
        .collect();
    assert_eq!(
        header,
        vec!["id", "region", "amount", "day", "late", "nothing"]
    );
    for (row, id) in (1u32..).zip(1196u64..=1200) {
        assert_eq!(range.get_value((row, 0)), Some(&Data::Float(id as f64)));
        assert_eq!(
            range.get_value((row, 1)),
            Some(&Data::String(REGIONS[(id % 3) as usize].into()))
        );
        assert_eq!(
            range.get_value((row, 2)),
            Some(&Data::Float((id * 2) as f64 + 0.5))
        );
        let Some(Data::DateTime(date)) = range.get_value((row, 3)) else {
            panic!(
                "day of row {row} is not a date: {:?}",
                range.get_value((row, 3))
            );
        };
        let february_first_2024 = 45_323.0;
        assert_eq!(date.as_f64(), february_first_2024 + (id % 28) as f64);
        assert_eq!(range.get_value((row, 4)), Some(&Data::Bool(id > 1198)));
        assert!(matches!(
            range.get_value((row, 5)),
            None | Some(Data::Empty)
        ));
    }
}

#[test]
fn exports_the_whole_table_by_default_and_warns_on_unordered_queries() {
    let fixture = Fixture::new();
    let sales = fixture.sales();
    let whole = ExportRequest {
        query: None,
        target_path: "all.xlsx",
        format: ExportFormat::Xlsx,
        sheet: None,
    };
    let exported = export(&fixture, &sales, whole);
    assert_eq!(exported.summary.row_count, ROWS);
    assert_eq!(
        exported.summary.sheet.as_deref(),
        Some(export::DEFAULT_SHEET)
    );
    let mut workbook: Xlsx<_> = open_workbook_from_rs(Cursor::new(exported.content)).unwrap();
    let range = workbook.worksheet_range(export::DEFAULT_SHEET).unwrap();
    assert_eq!(range.get_value((1, 0)), Some(&Data::Float(1.0)));
    assert_eq!(
        range.get_value((ROWS as u32, 0)),
        Some(&Data::Float(ROWS as f64))
    );
    let grouped = ExportRequest {
        query: Some("SELECT region, count(*) FROM data GROUP BY region"),
        target_path: "g.csv",
        format: ExportFormat::Csv,
        sheet: Some("ignored"),
    };
    let warnings = export(&fixture, &sales, grouped).summary.warnings;
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("ORDER BY"));
    let bad_sheet = ExportRequest {
        query: None,
        target_path: "x.xlsx",
        format: ExportFormat::Xlsx,
        sheet: Some("a/b"),
    };
    let err = fixture.engine.export(csv(&sales), bad_sheet).unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationFailed);
}
