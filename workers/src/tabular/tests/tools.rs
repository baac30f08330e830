//! Every tool over the KeenBench fixtures and generated tables, with exact values.

use super::*;

fn launch_plan() -> (PathBuf, String) {
    corpus("keenbench/context/keenbench_launch_plan.csv")
}

#[test]
fn keenbench_launch_plan_through_every_read_tool() {
    let fixture = Fixture::new();
    let plan = launch_plan();
    let map = fixture.map(&plan);
    assert_eq!(
        (map["row_count"].as_u64(), map["column_count"].as_u64()),
        (Some(5), Some(6))
    );
    assert_eq!(map["chunks"], json!([{"index": 0, "rows": "1-5"}]));
    let described = to_json(&fixture.engine.describe(csv(&plan)).unwrap());
    assert_eq!(described["row_count"], 5);
    assert_eq!(
        described["columns"][3],
        json!({"name": "Due", "index": 3, "inferred_type": "date", "nullable": false, "non_null_count": 5, "distinct_estimate": 4})
    );
    assert_eq!(described["columns"][1]["distinct_estimate"], 4);
    let stats = to_json(
        &fixture
            .engine
            .stats(csv(&plan), Some(&["Due".into(), "owner".into()]))
            .unwrap(),
    );
    assert_eq!(
        stats,
        json!({"row_count": 5, "columns": [
            {"name": "Due", "type": "date", "non_null_count": 5, "distinct_estimate": 4,
             "min": "2026-02-18", "max": "2026-02-21"},
            {"name": "Owner", "type": "string", "non_null_count": 5, "distinct_estimate": 4,
             "min_length": 9, "max_length": 12,
             "most_common": [{"value": "Ethan Park", "count": 2}, {"value": "Luis Alvarez", "count": 1},
                             {"value": "Mira Kwon", "count": 1}, {"value": "Priya Desai", "count": 1}]}
        ]})
    );
    let read = fixture
        .engine
        .read_rows(csv(&plan), 4, 10, Some(&["Milestone".into(), "Due".into()]))
        .unwrap();
    assert_eq!(
        read.rows,
        vec![
            vec![json!("Launch memo draft"), json!("2026-02-21")],
            vec![json!("Release candidate cut"), json!("2026-02-21")]
        ]
    );
    assert_eq!(
        (
            read.row_start,
            read.row_count,
            read.total_rows,
            read.has_more
        ),
        (4, 2, 5, false)
    );
    let query = fixture
        .query(
            &plan,
            "SELECT Department, count(*) AS n FROM data GROUP BY ALL ORDER BY n DESC, Department",
            2,
            0,
        )
        .unwrap();
    assert_eq!(
        query.rows,
        vec![
            vec![json!("Engineering"), json!(3)],
            vec![json!("Ops"), json!(1)]
        ]
    );
    assert_eq!(
        (query.row_count, query.total_row_count, query.has_more),
        (2, 3, true)
    );
}

#[test]
fn client_data_and_projects_through_map_stats_and_rows() {
    let fixture = Fixture::new();
    let client = corpus("keenbench/synthetic/client_data.csv");
    let stats = to_json(&fixture.engine.stats(csv(&client), None).unwrap());
    assert_eq!(
        stats["columns"][3],
        json!({"name": "Quantity", "type": "integer", "non_null_count": 1, "distinct_estimate": 1,
               "min": 50, "max": 50, "mean": 50.0, "sum": 50, "stddev": null})
    );
    assert_eq!(stats["columns"][4]["sum"], 24.99);
    let projects = corpus("keenbench/synthetic/projects.csv");
    let map = fixture.map(&projects);
    assert_eq!(
        map["columns"],
        json!([{"name": "Project", "index": 0, "inferred_type": "string"},
               {"name": "Start Date", "index": 1, "inferred_type": "date"},
               {"name": "Status", "index": 2, "inferred_type": "string"}])
    );
    assert_eq!(
        fixture.rows(&projects, 1, 10).rows,
        vec![
            vec![json!("Atlas"), json!("2026-01-15"), json!("Active")],
            vec![json!("Beacon"), json!("2026-02-01"), json!("Planning")]
        ]
    );
}

#[test]
fn numeric_and_boolean_stats_are_exact() {
    let fixture = Fixture::new();
    let file = fixture.csv("n.csv", b"x,flag\n1,true\n2,false\n3,true\n4,\n");
    let stats = to_json(&fixture.engine.stats(csv(&file), None).unwrap());
    let x = &stats["columns"][0];
    assert_eq!(
        (x["min"].as_i64(), x["max"].as_i64(), x["sum"].as_i64()),
        (Some(1), Some(4), Some(10))
    );
    assert_eq!(x["mean"], 2.5);
    assert_eq!(
        x["stddev"].as_f64().map(|s| (s * 1e6).round() / 1e6),
        Some(1.290994)
    );
    assert_eq!(
        stats["columns"][1],
        json!({"name": "flag", "type": "boolean", "non_null_count": 3, "distinct_estimate": 2,
               "true_count": 2, "false_count": 1})
    );
    let described = to_json(&fixture.engine.describe(csv(&file)).unwrap());
    assert_eq!(described["columns"][1]["nullable"], true);
}

#[test]
fn unknown_columns_and_empty_lists_are_refused_with_the_column_list() {
    let fixture = Fixture::new();
    let plan = launch_plan();
    let err = fixture
        .engine
        .stats(csv(&plan), Some(&["Budget".into()]))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationFailed);
    assert_eq!(
        err.message,
        "unknown column \"Budget\"; the table's columns are: Milestone, Owner, Department, Due, Status, Notes"
    );
    let err = fixture
        .engine
        .read_rows(csv(&plan), 1, 1, Some(&[]))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationFailed);
    let past = fixture.engine.read_rows(csv(&plan), 99, 5, None).unwrap();
    assert_eq!((past.row_count, past.has_more), (0, false));
    assert_eq!(
        past.warnings,
        vec!["row_start 99 is past the last row (5); nothing was read"]
    );
}

#[test]
fn query_windows_count_only_when_needed() {
    let fixture = Fixture::new();
    let sales = fixture.sales();
    let sql = "SELECT id FROM data WHERE id <= 250 ORDER BY id";
    let first = fixture.query(&sales, sql, 100, 0).unwrap();
    assert_eq!(
        (first.row_count, first.total_row_count, first.has_more),
        (100, 250, true)
    );
    let last = fixture.query(&sales, sql, 100, 200).unwrap();
    assert_eq!(
        (last.row_count, last.total_row_count, last.has_more),
        (50, 250, false)
    );
    assert_eq!(last.rows[49], vec![json!(250)]);
    let exact = fixture.query(&sales, sql, 250, 0).unwrap();
    assert_eq!(
        (exact.row_count, exact.total_row_count, exact.has_more),
        (250, 250, false)
    );
    let past = fixture.query(&sales, sql, 10, 300).unwrap();
    assert_eq!(
        (past.row_count, past.total_row_count, past.has_more),
        (0, 250, false)
    );
}

#[test]
fn running_out_of_memory_is_query_out_of_memory_and_the_engine_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        memory_bytes: 128 << 20,
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
    let window = Window { rows: 1, offset: 0 };
    let err = engine
        .query(file, "SELECT length(string_agg(repeat('x', 100) || range::VARCHAR, ',')) FROM range(5000000)", window)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::QueryOutOfMemory, "{err}");
    // An error the query raises itself is its own, whatever it says.
    let raised = engine
        .query(
            file,
            "SELECT error('Out of Memory Error: not really') FROM data",
            window,
        )
        .unwrap_err();
    assert_eq!(raised.code, ErrorCode::ValidationFailed, "{raised}");
    let ok = engine
        .query(file, "SELECT sum(a) FROM data", window)
        .unwrap();
    assert_eq!(ok.rows, vec![vec![json!(1)]]);
}

#[test]
fn a_timed_out_query_leaves_the_engine_healthy() {
    let mut fixture = Fixture::new();
    fixture.engine.limits.timeout = Duration::from_millis(200);
    let sales = fixture.sales();
    let heavy =
        "SELECT count(*) FROM range(100000000) a, range(1000) b WHERE a.range % 7 = b.range";
    assert_eq!(
        fixture.query(&sales, heavy, 1, 0).unwrap_err().code,
        ErrorCode::ToolTimeout
    );
    let ok = fixture
        .query(&sales, "SELECT count(*) FROM data", 1, 0)
        .unwrap();
    assert_eq!(ok.rows, vec![vec![json!(ROWS)]]);
}

#[test]
fn a_window_of_wide_rows_stops_at_its_byte_limit_and_says_how_to_read_on() {
    let fixture = Fixture::new();
    let sales = fixture.sales();
    let wide = "SELECT id, repeat('x', 4000) AS text FROM data ORDER BY id";
    let window = fixture.query(&sales, wide, 1000, 0).unwrap();
    let bytes = serde_json::to_vec(&window.rows).unwrap().len();
    assert!(bytes <= query::MAX_WINDOW_BYTES, "{bytes}");
    assert!(
        window.row_count > 0 && window.row_count < 250,
        "{}",
        window.row_count
    );
    assert!(window.has_more);
    assert_eq!(window.total_row_count, ROWS);
    let next = format!("window_offset {}", window.row_count);
    assert!(
        window.warning.as_deref().is_some_and(|w| w.contains(&next)),
        "{:?}",
        window.warning
    );
    let narrow = fixture
        .query(&sales, "SELECT id FROM data", 1000, 0)
        .unwrap();
    assert_eq!(narrow.warning, None);
}

#[test]
fn loading_a_csv_past_its_time_limit_is_tool_timeout_and_leaves_no_broken_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let hurried = Limits {
        ingest_timeout: Duration::from_millis(1),
        ..Limits::default()
    };
    let path = dir.path().join("big.csv");
    let mut text = String::from("a,b,c\n");
    for n in 0..300_000 {
        text.push_str(&format!("{n},{},row {n}\n", n * 3));
    }
    std::fs::write(&path, &text).unwrap();
    let digest = sha256_hex(text.as_bytes());
    let file = CsvFile {
        name: "big.csv",
        path: &path,
        digest: &digest,
    };
    let window = Window { rows: 1, offset: 0 };
    let count = "SELECT count(*) FROM data";
    let err = TabularEngine::with_limits(&cache, hurried)
        .query(file, count, window)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ToolTimeout, "{err}");
    assert!(
        err.message.contains("ATELIER_TABULAR_INGEST_TIMEOUT_MS"),
        "{}",
        err.message
    );
    // The interrupted load left nothing half-made behind: a patient engine loads it whole.
    let patient = TabularEngine::with_limits(&cache, Limits::default());
    let ok = patient.query(file, count, window).unwrap();
    assert_eq!(ok.rows, vec![vec![json!(300_000)]]);
}
