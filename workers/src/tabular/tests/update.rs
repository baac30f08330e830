//! `table_update_from_export` into KeenBench's quarterly_data.xlsx and new workbooks, read back
//! with calamine.

use std::collections::BTreeMap;

use super::*;

type Sheets = BTreeMap<String, Vec<Vec<Data>>>;

fn sheets(bytes: &[u8]) -> Sheets {
    let mut workbook: Xlsx<_> = open_workbook_from_rs(Cursor::new(bytes.to_vec())).unwrap();
    workbook
        .sheet_names()
        .into_iter()
        .map(|name| {
            let range = workbook.worksheet_range(&name).unwrap();
            let start = range.start().unwrap_or((0, 0));
            let mut rows = vec![Vec::new(); start.0 as usize];
            rows.extend(range.rows().map(|row| {
                let mut cells = vec![Data::Empty; start.1 as usize];
                cells.extend(row.iter().cloned());
                cells
            }));
            (name, rows)
        })
        .collect()
}

fn quarterly() -> Vec<u8> {
    std::fs::read(Path::new(CORPORA).join("keenbench/synthetic/quarterly_data.xlsx")).unwrap()
}

fn request<'a>(mode: UpdateMode, sheet: &'a str, query: &'a str) -> UpdateRequest<'a> {
    UpdateRequest {
        query: Some(query),
        target_path: "quarterly_data.xlsx",
        sheet,
        mode,
        start_cell: None,
        include_header: None,
    }
}

fn update(fixture: &Fixture, request: &UpdateRequest<'_>, existing: Option<&[u8]>) -> Updated {
    let file = corpus("keenbench/context/keenbench_launch_plan.csv");
    fixture
        .engine
        .update_workbook(csv(&file), request, existing)
        .unwrap()
}

const DUES: &str = "SELECT Milestone, Due, length(Notes) AS note_len, Status = 'Planned' AS planned \
                    FROM data ORDER BY Due, Milestone";

fn date(serial: f64) -> Data {
    Data::DateTime(calamine::ExcelDateTime::new(
        serial,
        calamine::ExcelDateTimeType::DateTime,
        false,
    ))
}

/// 2026-02-18 as an Excel serial.
const FEB_18: f64 = 46_071.0;

fn expected_dues(with_header: bool) -> Vec<Vec<Data>> {
    let s = |t: &str| Data::String(t.to_string());
    let mut rows = Vec::new();
    if with_header {
        rows.push(vec![s("Milestone"), s("Due"), s("note_len"), s("planned")]);
    }
    rows.extend([
        vec![
            s("Context UX polish"),
            date(FEB_18),
            Data::Float(34.0),
            Data::Bool(false),
        ],
        vec![
            s("Direct edit guardrails"),
            date(FEB_18 + 1.0),
            Data::Float(54.0),
            Data::Bool(true),
        ],
        vec![
            s("Design partner check-in"),
            date(FEB_18 + 2.0),
            Data::Float(51.0),
            Data::Bool(false),
        ],
        vec![
            s("Launch memo draft"),
            date(FEB_18 + 3.0),
            Data::Float(47.0),
            Data::Bool(true),
        ],
        vec![
            s("Release candidate cut"),
            date(FEB_18 + 3.0),
            Data::Float(38.0),
            Data::Bool(true),
        ],
    ]);
    rows
}

#[test]
fn replace_sheet_keeps_the_other_sheets() {
    let fixture = Fixture::new();
    let before = sheets(&quarterly());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        vec!["Q1", "Q2", "Q3", "Q4"]
    );
    let updated = update(
        &fixture,
        &request(UpdateMode::ReplaceSheet, "Q2", DUES),
        Some(&quarterly()),
    );
    let after = sheets(&updated.content);
    assert_eq!(after["Q2"], expected_dues(true));
    for name in ["Q1", "Q3", "Q4"] {
        assert_eq!(after[name], before[name], "{name}");
    }
    assert_eq!(before["Q1"][2][2], Data::Float(450.0));
    let summary = to_json(&updated.summary);
    assert_eq!(
        summary,
        json!({"target_path": "quarterly_data.xlsx", "sheet": "Q2", "mode": "replace_sheet",
               "range": "A1:D6", "include_header": true, "row_count": 5, "column_count": 4,
               "created_workbook": false, "created_sheet": false, "warnings": []})
    );
}

#[test]
fn append_rows_goes_below_the_last_row_without_a_header() {
    let fixture = Fixture::new();
    let before = sheets(&quarterly());
    let updated = update(
        &fixture,
        &request(UpdateMode::AppendRows, "Q1", DUES),
        Some(&quarterly()),
    );
    let after = sheets(&updated.content);
    let old_height = before["Q1"].len();
    assert_eq!(after["Q1"][..old_height], before["Q1"][..]);
    assert_eq!(after["Q1"][old_height..], expected_dues(false)[..]);
    assert_eq!(
        updated.summary.range.as_deref(),
        Some(format!("A{}:D{}", old_height + 1, old_height + 5).as_str())
    );
    assert!(!updated.summary.include_header);
    for name in ["Q2", "Q3", "Q4"] {
        assert_eq!(after[name], before[name], "{name}");
    }
}

#[test]
fn write_range_overwrites_only_its_rectangle() {
    let fixture = Fixture::new();
    let before = sheets(&quarterly());
    let mut req = request(
        UpdateMode::WriteRange,
        "Q3",
        "SELECT 'x' AS a, 7 AS b UNION ALL SELECT 'y', NULL",
    );
    req.start_cell = Some(CellRef::parse("C2").unwrap());
    req.include_header = Some(false);
    let updated = update(&fixture, &req, Some(&quarterly()));
    let after = sheets(&updated.content);
    let mut expected = before["Q3"].clone();
    expected[1][2] = Data::String("x".into());
    expected[1][3] = Data::Float(7.0);
    expected[2][2] = Data::String("y".into());
    expected[2][3] = Data::Empty;
    assert_eq!(after["Q3"], expected);
    assert_eq!(updated.summary.range.as_deref(), Some("C2:D3"));
}

#[test]
fn a_missing_sheet_or_workbook_is_created() {
    let fixture = Fixture::new();
    let before = sheets(&quarterly());
    let updated = update(
        &fixture,
        &request(UpdateMode::ReplaceSheet, "Plan", DUES),
        Some(&quarterly()),
    );
    let after = sheets(&updated.content);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        vec!["Plan", "Q1", "Q2", "Q3", "Q4"]
    );
    assert_eq!(after["Plan"], expected_dues(true));
    assert!(updated.summary.created_sheet);
    for (name, rows) in &before {
        assert_eq!(&after[name], rows, "{name}");
    }
    let mut req = request(UpdateMode::WriteRange, "Dues", DUES);
    req.start_cell = Some(CellRef::parse("B2").unwrap());
    let fresh = update(&fixture, &req, None);
    assert!(fresh.summary.created_workbook);
    let rows = &sheets(&fresh.content)["Dues"];
    assert_eq!(rows[0], Vec::<Data>::new());
    assert_eq!(rows[1][1..], expected_dues(true)[0][..]);
    assert_eq!(rows[6][1..], expected_dues(true)[5][..]);
    assert_eq!(fresh.summary.range.as_deref(), Some("B2:E7"));
}

#[test]
fn bad_requests_are_refused() {
    let fixture = Fixture::new();
    let file = corpus("keenbench/context/keenbench_launch_plan.csv");
    let mut req = request(UpdateMode::ReplaceSheet, "Q1", DUES);
    req.start_cell = Some(CellRef::parse("B2").unwrap());
    let err = fixture
        .engine
        .update_workbook(csv(&file), &req, Some(&quarterly()))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationFailed);
    let bad_sheet = request(UpdateMode::ReplaceSheet, "a/b", DUES);
    let err = fixture
        .engine
        .update_workbook(csv(&file), &bad_sheet, Some(&quarterly()))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationFailed);
    let not_xlsx = request(UpdateMode::ReplaceSheet, "Q1", DUES);
    let err = fixture
        .engine
        .update_workbook(csv(&file), &not_xlsx, Some(b"plain text"))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::FileReadFailed);
    let attack = request(
        UpdateMode::ReplaceSheet,
        "Q1",
        "SELECT * FROM read_text('/etc/passwd')",
    );
    let err = fixture
        .engine
        .update_workbook(csv(&file), &attack, Some(&quarterly()))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationFailed);
    assert_eq!(
        UpdateMode::parse("merge").unwrap_err().code,
        ErrorCode::ValidationFailed
    );
}

#[test]
fn only_the_target_sheet_and_what_it_needs_change() {
    let fixture = Fixture::new();
    let original = quarterly();
    let appended = update(
        &fixture,
        &request(UpdateMode::AppendRows, "Q1", DUES),
        Some(&original),
    );
    assert_eq!(
        crate::office::changed_parts(&original, &appended.content),
        vec![
            "xl/styles.xml",
            "xl/workbook.xml",
            "xl/worksheets/sheet1.xml"
        ]
    );
    let numbers = update(
        &fixture,
        &request(
            UpdateMode::ReplaceSheet,
            "Q3",
            "SELECT note_len FROM (SELECT length(Notes) AS note_len FROM data) ORDER BY 1",
        ),
        Some(&original),
    );
    assert_eq!(
        crate::office::changed_parts(&original, &numbers.content),
        vec!["xl/workbook.xml", "xl/worksheets/sheet3.xml"]
    );
    let added = update(
        &fixture,
        &request(UpdateMode::ReplaceSheet, "Plan", DUES),
        Some(&original),
    );
    assert_eq!(
        crate::office::changed_parts(&original, &added.content),
        vec![
            "[Content_Types].xml",
            "xl/_rels/workbook.xml.rels",
            "xl/styles.xml",
            "xl/workbook.xml",
            "xl/worksheets/sheet5.xml"
        ]
    );
}

#[test]
fn hostile_targets_get_the_office_pools_refusal_and_nothing_is_written() {
    let fixture = Fixture::new();
    let file = corpus("keenbench/context/keenbench_launch_plan.csv");
    let ops = json!([{"op": "set_cells", "sheet": "Q1", "cells": [{"cell": "A1", "value": 1}]}]);
    let office_edit =
        crate::office::Operations::parse(crate::office::Format::Xlsx, "xlsx_operations", &ops)
            .unwrap();
    for (refusal, bytes) in crate::office::hostile_xlsx_files() {
        let office = office_edit.apply(bytes.clone()).unwrap_err();
        for mode in [
            UpdateMode::ReplaceSheet,
            UpdateMode::AppendRows,
            UpdateMode::WriteRange,
        ] {
            let err = fixture
                .engine
                .update_workbook(csv(&file), &request(mode, "Q1", DUES), Some(&bytes))
                .unwrap_err();
            assert_eq!(err.code, ErrorCode::FileReadFailed, "{refusal} {mode:?}");
            assert_eq!(err.code, office.code, "{refusal} {mode:?}");
            assert!(err.message.contains(refusal), "{refusal}: {}", err.message);
            assert_eq!(err.message, office.message);
        }
    }
}

#[test]
fn the_calculation_chain_is_dropped() {
    let fixture = Fixture::new();
    let original = crate::office::xlsx_with_calc_chain();
    let mut req = request(UpdateMode::WriteRange, "Sheet1", "SELECT 1.5 AS x");
    req.start_cell = Some(CellRef::parse("B2").unwrap());
    let updated = update(&fixture, &req, Some(&original));
    assert_eq!(
        crate::office::changed_parts(&original, &updated.content),
        vec![
            "[Content_Types].xml",
            "xl/_rels/workbook.xml.rels",
            "xl/calcChain.xml",
            "xl/worksheets/sheet1.xml"
        ]
    );
    let rows = &sheets(&updated.content)["Sheet1"];
    assert_eq!(rows[1], vec![Data::Empty, Data::String("x".into())]);
    assert_eq!(rows[2], vec![Data::Empty, Data::Float(1.5)]);
    let parts = crate::office::parts(&updated.content);
    assert!(!parts.contains_key("xl/calcChain.xml"));
    for part in ["[Content_Types].xml", "xl/_rels/workbook.xml.rels"] {
        let xml = String::from_utf8(parts[part].clone()).unwrap();
        assert!(!xml.contains("calcChain"), "{part}: {xml}");
    }
    let workbook = String::from_utf8(parts["xl/workbook.xml"].clone()).unwrap();
    assert!(workbook.contains(r#"fullCalcOnLoad="1""#), "{workbook}");
}
