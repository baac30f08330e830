//! Content diffs of real files (tests/fixtures/keenbench) edited with the office editors.
use atelier_messages::review::{ContentDiff, UnitOp};
use serde_json::{Value, json};

use super::diff;
use crate::office::{Format, Operations};

fn corpus(rel: &str) -> Vec<u8> {
    let full = format!(
        "{}/../tests/fixtures/keenbench/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

fn edited(path: &str, bytes: &[u8], ops: Value) -> Vec<u8> {
    let format = Format::of(path).unwrap_or_else(|e| panic!("{e}"));
    Operations::parse(format, "test", &ops)
        .and_then(|ops| ops.apply(bytes.to_vec()))
        .map(|(bytes, _)| bytes)
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn an_edited_workbook_shows_old_and_new_cell_values_and_added_sheets() {
    let before = corpus("office/multi-sheet.xlsx");
    let after = edited(
        "m.xlsx",
        &before,
        json!([
            {"op": "set_cells", "sheet": "Revenue", "cells": [{"cell": "B2", "value": 999}, {"cell": "D9", "value": "new note"}]},
            {"op": "ensure_sheet", "sheet": "Forecast"},
            {"op": "set_cells", "sheet": "Forecast", "cells": [{"cell": "A1", "value": "Total"}, {"cell": "B1", "value": 3500}, {"cell": "B2", "value": "=B1*2", "type": "formula"}]},
        ]),
    );
    let ContentDiff::Workbook {
        sheets_added,
        sheets_removed,
        sheets,
        added_sheets,
    } = diff("m.xlsx", Some(&before), Some(&after), 10)
    else {
        panic!("not a workbook diff")
    };
    assert_eq!(sheets_added, ["Forecast"]);
    // The added sheet is shown with its values and formulas, not only its name.
    let [forecast] = added_sheets.as_slice() else {
        panic!("one added sheet: {added_sheets:?}")
    };
    assert_eq!(forecast.sheet, "Forecast");
    assert_eq!(forecast.range.as_deref(), Some("A1:B2"));
    assert_eq!(forecast.cells[0], [json!("Total"), json!(3500)]);
    assert_eq!(forecast.formulas["B2"], "=B1*2");
    assert!(!forecast.truncated);
    assert!(sheets_removed.is_empty());
    assert_eq!(sheets.len(), 1, "{sheets:?}");
    let revenue = &sheets[0];
    assert_eq!(revenue.sheet, "Revenue");
    assert_eq!(revenue.cells_changed, 2);
    let b2 = &revenue.sample[0];
    assert_eq!(b2.cell, "B2");
    assert_ne!(b2.old, json!(999));
    assert_eq!(b2.new, json!(999));
    assert_eq!(revenue.sample[1].cell, "D9");
    assert_eq!(revenue.sample[1].old, Value::Null);
    assert_eq!(revenue.sample[1].new, json!("new note"));
}

#[test]
fn a_csv_diff_counts_rows_and_columns_by_header() {
    let before = corpus("context/keenbench_launch_plan.csv");
    let text = String::from_utf8(before.clone()).unwrap_or_default();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[1] = lines[1].replacen(',', ",CHANGED-", 1);
    lines.remove(2);
    lines.push(lines[1].clone());
    let after = lines.join("\n");
    let ContentDiff::Table {
        columns_added,
        columns_removed,
        rows,
    } = diff("plan.csv", Some(&before), Some(after.as_bytes()), 10)
    else {
        panic!("not a table diff")
    };
    assert!(columns_added.is_empty() && columns_removed.is_empty());
    assert_eq!(
        (rows.added, rows.removed, rows.changed),
        (1, 1, 1),
        "{rows:?}"
    );
    assert_eq!(rows.sample[0].op, UnitOp::Changed);
    assert_eq!(rows.sample[0].position, 1);
    assert!(
        rows.sample[0]
            .new
            .as_ref()
            .is_some_and(|row| row[1].starts_with("CHANGED-"))
    );
}

#[test]
fn docx_paragraphs_and_pptx_slides_are_compared_as_text() {
    let before = corpus("office/simple.docx");
    let after = edited(
        "s.docx",
        &before,
        json!([{"op": "append_paragraph", "text": "A closing line."}]),
    );
    let ContentDiff::Document { paragraphs } = diff("s.docx", Some(&before), Some(&after), 10)
    else {
        panic!("not a document diff")
    };
    assert_eq!(
        (paragraphs.added, paragraphs.removed),
        (1, 0),
        "{paragraphs:?}"
    );
    assert_eq!(paragraphs.sample[0].new.as_deref(), Some("A closing line."));

    let before = corpus("office/slides.pptx");
    let after = edited(
        "d.pptx",
        &before,
        json!([{"op": "set_slide_text", "slide_index": 0, "title": "Q4 Review 2026"}]),
    );
    let ContentDiff::Slides { slides } = diff("d.pptx", Some(&before), Some(&after), 10) else {
        panic!("not a slides diff")
    };
    assert_eq!((slides.added, slides.removed, slides.changed), (0, 0, 1));
    let changed = &slides.sample[0];
    assert_eq!(changed.position, 1);
    assert_eq!(
        changed
            .new
            .as_ref()
            .and_then(|t| t.first())
            .map(String::as_str),
        Some("Q4 Review 2026")
    );
}

#[test]
fn text_gets_a_unified_diff_new_files_diff_against_nothing_and_damage_is_unavailable() {
    let ContentDiff::Text {
        unified,
        lines_added,
        lines_removed,
        truncated,
    } = diff("n.md", Some(b"a\nb\n"), Some(b"a\nc\nd\n"), 10)
    else {
        panic!("not a text diff")
    };
    assert_eq!((lines_added, lines_removed, truncated), (2, 1, false));
    assert!(unified.contains("-b\n+c\n+d\n"), "{unified}");

    let big: String = (0..20_000).map(|n| format!("line {n}\n")).collect();
    let ContentDiff::Text {
        lines_added,
        truncated,
        unified,
        ..
    } = diff("big.txt", None, Some(big.as_bytes()), 10)
    else {
        panic!("not a text diff")
    };
    assert_eq!(lines_added, 20_000);
    assert!(truncated && unified.len() <= super::MAX_UNIFIED_BYTES);

    let ContentDiff::Unavailable { reason } = diff("x.xlsx", None, Some(b"not a zip"), 10) else {
        panic!("a damaged workbook is unavailable")
    };
    assert!(
        reason.contains("FILE_READ_FAILED") || reason.contains("VALIDATION_FAILED"),
        "{reason}"
    );
    assert_eq!(
        diff("logo.png", Some(b"12"), Some(b"1234"), 10),
        ContentDiff::Binary {
            old_size: 2,
            new_size: 4
        }
    );
}

#[test]
fn a_new_workbook_shows_every_sheet_it_holds_cut_at_the_documented_size() {
    use atelier_messages::review::{ADDED_SHEET_COLUMNS, ADDED_SHEET_ROWS};
    let book = corpus("office/multi-sheet.xlsx");
    let big: Vec<Value> = (0..60)
        .map(|r| Value::Array((0..25).map(|c| json!(r * 100 + c)).collect()))
        .collect();
    let after = edited(
        "m.xlsx",
        &book,
        json!([
            {"op": "ensure_sheet", "sheet": "Big"},
            {"op": "set_range", "sheet": "Big", "start": "A1", "values": big},
        ]),
    );
    let ContentDiff::Workbook {
        sheets_added,
        added_sheets,
        ..
    } = diff("new.xlsx", None, Some(&after), 10)
    else {
        panic!("not a workbook diff")
    };
    let names: Vec<&str> = added_sheets.iter().map(|s| s.sheet.as_str()).collect();
    assert_eq!(names, sheets_added);
    assert!(names.len() >= 2 && names.contains(&"Revenue"), "{names:?}");
    let revenue = &added_sheets[0];
    assert!(!revenue.cells.is_empty(), "{revenue:?}");
    let big = added_sheets
        .iter()
        .find(|s| s.sheet == "Big")
        .unwrap_or_else(|| panic!("no Big sheet: {names:?}"));
    assert_eq!(big.range.as_deref(), Some("A1:Y60"));
    assert_eq!((big.rows, big.columns, big.truncated), (60, 25, true));
    assert_eq!(big.cells.len() as u64, ADDED_SHEET_ROWS);
    assert_eq!(big.cells[0].len() as u64, ADDED_SHEET_COLUMNS);
    assert_eq!(big.cells[49][19], json!(4919));
}

#[test]
fn an_added_slide_shows_its_text_and_an_added_text_file_its_lines() {
    let before = corpus("office/slides.pptx");
    let after = edited(
        "d.pptx",
        &before,
        json!([{"op": "add_slide", "title": "Summary", "bullets": ["Revenue 3500", "Costs down"]}]),
    );
    let ContentDiff::Slides { slides } = diff("d.pptx", Some(&before), Some(&after), 10) else {
        panic!("not a slides diff")
    };
    assert_eq!((slides.added, slides.removed, slides.changed), (1, 0, 0));
    let added = &slides.sample[0];
    assert_eq!(added.op, UnitOp::Added);
    assert_eq!(
        added.new.as_deref(),
        Some(&["Summary", "Revenue 3500", "Costs down"].map(String::from)[..])
    );

    let ContentDiff::Text {
        unified,
        lines_added,
        ..
    } = diff("notes.md", None, Some(b"# Notes\nTotal 3500\n"), 10)
    else {
        panic!("not a text diff")
    };
    assert_eq!(lines_added, 2);
    assert!(unified.contains("+# Notes\n+Total 3500\n"), "{unified}");
}
