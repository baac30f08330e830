//! Cell values from JSON, sheet references in formulas, and cell text escaping.

use serde_json::json;

use super::cells::escape_cell_text;
use super::formulas::sheet_ref;
use super::values::CellValue;
use super::*;

#[test]
fn converts_json_keeping_types() {
    assert_eq!(
        CellValue::from_json(&json!(12.5), None, false).unwrap(),
        CellValue::Number(12.5)
    );
    assert_eq!(
        CellValue::from_json(&json!("12.5"), None, false).unwrap(),
        CellValue::Text("12.5".into())
    );
    assert_eq!(
        CellValue::from_json(&json!("12.5"), Some("number"), false).unwrap(),
        CellValue::Number(12.5)
    );
    assert_eq!(
        CellValue::from_json(&json!("=SUM(A1:A3)"), None, false).unwrap(),
        CellValue::Formula("SUM(A1:A3)".into())
    );
    assert_eq!(
        CellValue::from_json(&json!(true), None, false).unwrap(),
        CellValue::Bool(true)
    );
    assert_eq!(
        CellValue::from_json(&json!(null), None, false).unwrap(),
        CellValue::Clear
    );
    assert_eq!(
        CellValue::from_json(&json!("2026-01-05"), Some("date"), false).unwrap(),
        CellValue::Date(46027.0, false)
    );
    assert_eq!(
        CellValue::from_json(&json!("2024-10-23T12:00:00"), Some("date"), false).unwrap(),
        CellValue::Date(45588.5, true)
    );
    for (value, kind) in [
        (json!("x"), Some("number")),
        (json!("2026-13-01"), Some("date")),
        (json!([1]), None),
        (json!(1), Some("money")),
    ] {
        assert_eq!(
            CellValue::from_json(&value, kind, false).unwrap_err().code,
            ErrorCode::ValidationFailed,
            "{value}"
        );
    }
}

#[test]
fn quotes_sheet_references() {
    assert_eq!(sheet_ref("Q1"), "Q1!");
    assert_eq!(sheet_ref("Q1 Sales"), "'Q1 Sales'!");
    assert_eq!(sheet_ref("it's"), "'it''s'!");
}

#[test]
fn cell_text_keeps_control_characters_as_ooxml_escapes() {
    assert_eq!(
        escape_cell_text("a<b & \"c\"\u{1}\t"),
        "a&lt;b &amp; \"c\"_x0001_\t"
    );
    assert_eq!(escape_cell_text("plain"), "plain");
}

#[test]
fn a_range_past_the_sheet_edge_is_refused() {
    let workbook = crate::office::xlsx::blank_workbook().unwrap();
    let ops: Vec<XlsxOp> = serde_json::from_value(json!([
        {"op": "set_range", "sheet": "Sheet1", "start": "XFD1", "values": [[1, 2]]}
    ]))
    .unwrap();
    let err = apply(workbook, &ops).err().unwrap();
    assert_eq!(err.code, ErrorCode::ValidationFailed);
    assert_eq!(
        err.message,
        "operation 0: 1 row(s) × 2 column(s) from XFD1 do not fit in a sheet (XFD1048576)"
    );
}
