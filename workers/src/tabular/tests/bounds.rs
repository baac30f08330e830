//! Result bounds: a huge value or a long result costs a bounded amount of the worker's memory.
//!
//! The memory tests run each call in a child process (this test binary, filtered to
//! [`child_scenario`]) so no other test's allocations count: the child resets its peak RSS
//! (`/proc/self/clear_refs`), makes the call and reports how far `VmHWM` rose above `VmRSS`.
//! Values are 10^8 bytes: computing a 10^9-byte `repeat` takes DuckDB alone about 2 GB and 20 s
//! here, which would measure DuckDB rather than the worker. Each call must stay under
//! [`MAX_GROWTH`] and within [`MAX_GROWTH_BEYOND_DUCKDB`] of DuckDB computing the value alone.

use super::peak::{child_report, peak_growth};
use super::*;
use crate::tabular::cells::MAX_CELL_BYTES;

/// The scenario a child process runs (unset: the test is a no-op).
const CHILD: &str = "ATELIER_TABULAR_BOUNDS_SCENARIO";
/// The size of the huge values.
const HUGE: u64 = 100_000_000;
/// What a call may add to the peak RSS of the worker, DuckDB's own work included.
const MAX_GROWTH: u64 = 300 * 1024 * 1024;
/// What a call may add beyond DuckDB computing the huge value by itself.
const MAX_GROWTH_BEYOND_DUCKDB: u64 = 64 * 1024 * 1024;
/// The export limit of the CSV scenario.
const SMALL_EXPORT: u64 = 64 * 1024 * 1024;

fn outcome<T: serde::Serialize>(result: Result<T, ErrorBody>) -> Value {
    match result {
        Ok(value) => json!({"ok": to_json(&value)}),
        Err(e) => json!({"code": e.code.as_str(), "message": e.message}),
    }
}

/// A table of 100 rows whose text cells hold 100 KB each.
fn long_cells(fixture: &Fixture) -> (PathBuf, String) {
    let mut text = String::from("id,v\n");
    for id in 1..=100 {
        text.push_str(&format!("{id},{}\n", "y".repeat(100_000)));
    }
    fixture.csv("long.csv", text.as_bytes())
}

/// One scenario, run in a child process: prints `BOUNDS {"outcome", "growth", "duckdb"}`, where
/// `duckdb` is the growth of DuckDB computing the huge value alone.
#[test]
#[allow(clippy::print_stdout, reason = "the child's report to the parent test")]
fn child_scenario() {
    let Ok(scenario) = std::env::var(CHILD) else {
        return;
    };
    let fixture = Fixture::new();
    let table = fixture.csv("t.csv", b"a,b\n1,x\n2,y\n");
    let long = long_cells(&fixture);
    // Ingest and open both tables before measuring.
    fixture.query(&table, "SELECT 1", 1, 0).unwrap();
    fixture.query(&long, "SELECT 1", 1, 0).unwrap();
    let huge = format!("SELECT repeat('x', {HUGE}) AS v, 1 AS n");
    let (_, duckdb) = peak_growth(|| {
        let alone = format!("SELECT strlen(repeat('x', {HUGE}))");
        fixture.query(&table, &alone, 1, 0).unwrap()
    });
    let small = Limits {
        export_bytes: SMALL_EXPORT,
        ..Limits::default()
    };
    let small = TabularEngine::with_limits(&fixture.dir.path().join("cache"), small);
    let exporting = |engine: &TabularEngine, format, target_path| {
        let request = ExportRequest {
            query: Some(&huge),
            target_path,
            format,
            sheet: None,
        };
        outcome(engine.export(csv(&table), request).map(|e| e.summary))
    };
    let (result, growth) = match scenario.as_str() {
        "query" => peak_growth(|| outcome(fixture.query(&table, &huge, 100, 0))),
        "read_rows" => {
            peak_growth(|| outcome(fixture.engine.read_rows(csv(&long), 1, 10_000, None)))
        }
        "export_csv" => peak_growth(|| exporting(&small, ExportFormat::Csv, "out.csv")),
        "export_xlsx" => peak_growth(|| exporting(&fixture.engine, ExportFormat::Xlsx, "out.xlsx")),
        "update_xlsx" => peak_growth(|| {
            let request = UpdateRequest {
                query: Some(&huge),
                target_path: "out.xlsx",
                sheet: "Sheet1",
                mode: UpdateMode::ReplaceSheet,
                start_cell: None,
                include_header: None,
            };
            let updated = fixture.engine.update_workbook(csv(&table), &request, None);
            outcome(updated.map(|u| u.summary))
        }),
        other => panic!("unknown scenario {other}"),
    };
    let report = json!({"outcome": result, "growth": growth, "duckdb": duckdb});
    println!("BOUNDS {report}");
}

/// Runs `scenario` in a child process; returns its outcome after checking its memory growth.
#[allow(
    clippy::print_stderr,
    reason = "the measurement, shown with --nocapture"
)]
fn measured(scenario: &str) -> Value {
    let report = child_report(
        "tabular::tests::bounds::child_scenario",
        CHILD,
        scenario,
        "BOUNDS",
    );
    let growth = report["growth"].as_u64().unwrap();
    let duckdb = report["duckdb"].as_u64().unwrap();
    let mib = |bytes: u64| bytes / (1024 * 1024);
    eprintln!(
        "{scenario}: peak RSS +{} MiB (DuckDB computing the value alone: +{} MiB)",
        mib(growth),
        mib(duckdb)
    );
    assert!(
        growth < MAX_GROWTH,
        "{scenario}: peak RSS grew by {} MiB",
        mib(growth)
    );
    assert!(
        growth < duckdb + MAX_GROWTH_BEYOND_DUCKDB,
        "{scenario}: peak RSS grew by {} MiB, DuckDB alone by {} MiB",
        mib(growth),
        mib(duckdb)
    );
    report["outcome"].clone()
}

fn marker(bytes: u64) -> String {
    format!("…[truncated: {bytes} bytes]")
}

#[test]
fn a_huge_value_in_a_query_window_is_cut_and_never_copied_whole() {
    let outcome = measured("query");
    let window = &outcome["ok"];
    let value = window["rows"][0][0].as_str().unwrap();
    assert_eq!(
        value,
        format!("{}{}", "x".repeat(MAX_CELL_BYTES), marker(HUGE))
    );
    assert_eq!(window["rows"][0][1], json!(1));
    assert_eq!(window["has_more"], json!(false));
    let warning = window["warning"].as_str().unwrap();
    assert!(
        warning.contains("1 text value(s)") && warning.contains("\"v\""),
        "{warning}"
    );
}

#[test]
fn read_rows_cuts_long_cells_and_stops_at_the_window_budget() {
    let outcome = measured("read_rows");
    let read = &outcome["ok"];
    let rows = read["rows"].as_array().unwrap();
    let json_bytes = serde_json::to_vec(rows).unwrap().len();
    assert!(json_bytes <= query::MAX_WINDOW_BYTES, "{json_bytes}");
    // Each row is an id and 8 KiB of text: about 62 rows fit in 512 KiB.
    assert!((50..100).contains(&rows.len()), "{}", rows.len());
    assert_eq!(read["row_count"], json!(rows.len()));
    assert_eq!(read["has_more"], json!(true));
    assert_eq!(
        rows[0][1].as_str().unwrap(),
        format!("{}{}", "y".repeat(MAX_CELL_BYTES), marker(100_000))
    );
    let warnings = read["warnings"].to_string();
    let next = format!("row_start {}", rows.len() + 1);
    assert!(
        warnings.contains(&next) && warnings.contains("were cut"),
        "{warnings}"
    );
}

#[test]
fn a_csv_export_past_its_limit_is_result_too_large_without_reading_the_value() {
    let outcome = measured("export_csv");
    assert_eq!(outcome["code"], json!("RESULT_TOO_LARGE"), "{outcome}");
    let message = outcome["message"].as_str().unwrap();
    assert!(
        message.contains("column \"v\"") && message.contains(&HUGE.to_string()),
        "{message}"
    );
    assert!(message.contains("64 MiB"), "{message}");
}

#[test]
fn an_xlsx_export_reads_only_what_a_cell_holds() {
    let outcome = measured("export_xlsx");
    let warnings = outcome["ok"]["warnings"].to_string();
    assert!(
        warnings.contains("1 text cell(s) longer than 32767"),
        "{warnings}"
    );
}

#[test]
fn a_workbook_update_reads_only_what_a_cell_holds() {
    let outcome = measured("update_xlsx");
    let warnings = outcome["ok"]["warnings"].to_string();
    assert!(
        warnings.contains("1 text cell(s) longer than 32767"),
        "{warnings}"
    );
}

#[test]
fn exports_stop_at_their_limit_while_writing() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        export_bytes: 10_000,
        ..Limits::default()
    };
    let engine = TabularEngine::with_limits(&dir.path().join("cache"), limits);
    let path = dir.path().join("t.csv");
    std::fs::write(&path, "a\n1\n").unwrap();
    let digest = sha256_hex(b"a\n1\n");
    let file = CsvFile {
        name: "t.csv",
        path: &path,
        digest: &digest,
    };
    let export = |query: &str, format| {
        let request = ExportRequest {
            query: Some(query),
            target_path: "o",
            format,
            sheet: None,
        };
        engine.export(file, request)
    };
    // 1,000 rows of 100 bytes: over 10,000 bytes in either format, at about row 100.
    let rows = "SELECT repeat('z', 99) AS v FROM range(1000) ORDER BY range";
    for format in [ExportFormat::Csv, ExportFormat::Xlsx] {
        let err = export(rows, format).unwrap_err();
        assert_eq!(err.code, ErrorCode::ResultTooLarge, "{err}");
        assert!(
            err.message.contains("nothing was written"),
            "{}",
            err.message
        );
        let at: u64 = err
            .message
            .split("at row ")
            .nth(1)
            .and_then(|rest| rest.split(';').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{}", err.message));
        assert!((60..=101).contains(&at), "{format:?}: {}", err.message);
    }
    // Just under the limit is written whole: 99 rows of 100 bytes and a 2-byte header.
    let fits = "SELECT repeat('z', 99) AS v FROM range(99) ORDER BY range";
    let exported = export(fits, ExportFormat::Csv).unwrap();
    assert_eq!(exported.content.len(), 2 + 99 * 100);
    assert_eq!(exported.summary.row_count, 99);
    let update = UpdateRequest {
        query: Some(rows),
        target_path: "o.xlsx",
        sheet: "Sheet1",
        mode: UpdateMode::ReplaceSheet,
        start_cell: None,
        include_header: None,
    };
    let err = engine.update_workbook(file, &update, None).unwrap_err();
    assert_eq!(err.code, ErrorCode::ResultTooLarge, "{err}");
}

#[test]
fn a_first_row_wider_than_a_window_is_result_too_large() {
    let fixture = Fixture::new();
    let sales = fixture.sales();
    let columns: Vec<String> = (0..80)
        .map(|n| format!("repeat('w', 10000) AS c{n}"))
        .collect();
    let wide = format!("SELECT {} FROM data", columns.join(", "));
    let err = fixture.query(&sales, &wide, 10, 0).unwrap_err();
    assert_eq!(err.code, ErrorCode::ResultTooLarge, "{err}");
    assert!(
        err.message.contains("row 1 ") && err.message.contains("select fewer columns"),
        "{}",
        err.message
    );
    let some = format!("SELECT {} FROM data", columns[..10].join(", "));
    let window = fixture.query(&sales, &some, 10, 0).unwrap();
    assert_eq!(window.row_count, 6);
    assert!(window.has_more);
}

#[test]
fn most_common_values_are_cut_like_window_cells() {
    let fixture = Fixture::new();
    let long = long_cells(&fixture);
    let stats = to_json(
        &fixture
            .engine
            .stats(csv(&long), Some(&["v".to_string()]))
            .unwrap(),
    );
    let common = &stats["columns"][0]["most_common"][0];
    assert_eq!(common["count"], json!(100));
    assert_eq!(
        common["value"].as_str().unwrap(),
        format!("{}{}", "y".repeat(MAX_CELL_BYTES), marker(100_000))
    );
}

#[test]
fn the_default_export_limit_is_256_mib() {
    assert_eq!(Limits::default().export_bytes, 256 * 1024 * 1024);
}
