//! The office engines against real files: the keenbench corpus and fixtures from the python-docx
//! and python-pptx sdists (tests/fixtures/office). Reads assert key content; edits are read back
//! and the untouched parts compared byte-for-byte.
use atelier_messages::store::ManifestEntry;
use atelier_messages::{ErrorBody, ErrorCode, path};
use serde_json::{Value, json};

use super::package::tests::{changed_parts, parts};
use super::{Format, Operations, Selector, StylesOf, blank, describe, map, read, styles};
use crate::files::sha256_hex;

fn entry(name: &str, bytes: &[u8]) -> ManifestEntry {
    ManifestEntry {
        path: name.into(),
        digest: sha256_hex(bytes),
        size: bytes.len() as u64,
        kind: path::kind_of(name).into(),
    }
}

fn corpus(rel: &str) -> (ManifestEntry, Vec<u8>) {
    let full = format!(
        "{}/../tests/fixtures/keenbench/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    (entry(rel.rsplit('/').next().unwrap_or(rel), &bytes), bytes)
}

fn fixture(name: &str) -> (ManifestEntry, Vec<u8>) {
    let full = format!(
        "{}/../tests/fixtures/office/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    (entry(name, &bytes), bytes)
}

/// Asserts a refusal's code and that its message contains `words`.
fn assert_refusal(err: &ErrorBody, code: ErrorCode, words: &str) {
    assert_eq!(err.code, code, "{}", err.message);
    assert!(err.message.contains(words), "{}", err.message);
}

fn selector() -> Selector {
    Selector {
        line_start: 1,
        line_count: 200,
        ..Selector::default()
    }
}

fn sheet(e: &ManifestEntry, bytes: &[u8], name: &str, range: Option<&str>) -> Value {
    let s = Selector {
        sheet: Some(name.into()),
        range: range.map(str::to_string),
        ..selector()
    };
    read(e, bytes.to_vec(), &s).unwrap()
}

fn apply(e: &ManifestEntry, bytes: &[u8], ops: Value) -> (Vec<u8>, Vec<Value>) {
    let format = Format::of(&e.path).unwrap();
    Operations::parse(format, "test", &ops)
        .unwrap()
        .apply(bytes.to_vec())
        .unwrap()
}

#[test]
fn reads_the_bank_statement_header_and_amounts() {
    let (e, bytes) = corpus("real/cuentas_octubre_2024_anonymized_draft.xlsx");
    let read = sheet(&e, &bytes, "Movimientos", Some("A8:E10"));
    assert_eq!(
        read["rows"],
        json!([
            [
                "FECHA OPERACIÓN",
                "FECHA VALOR",
                "CONCEPTO",
                "IMPORTE EUR",
                "SALDO"
            ],
            [
                "23/10/2024",
                "23/10/2024",
                "Pago Movil En Merchant 001, City 001, Tarj. :*000000",
                -5.15,
                31788.7
            ],
            [
                "23/10/2024",
                "23/10/2024",
                "Pago Movil En Merchant 002, City 002, Tarj. :*000000",
                -7.95,
                31793.85
            ],
        ])
    );
    assert_eq!(read["has_more"], true);
    let head = sheet(&e, &bytes, "Movimientos", Some("A1:D4"));
    assert_eq!(
        head["rows"][0],
        json!(["TEST BANK ACCOUNT", null, "CUENTA SANTANDER", "FECHA"])
    );
    assert_eq!(head["merged"], json!(["A1:B1", "A2:B2", "A3:B3", "A4:B4"]));
    let map = map(&e, bytes).unwrap();
    assert_eq!(map["sheets"][0]["header_row"], 8);
    assert_eq!(map["sheets"][0]["dimensions"], "A1:H180");
    assert_eq!(
        map["sheets"][0]["chunks"],
        json!([{"index": 0, "range": "A1:H180", "rows": "1-180"}])
    );
}

#[test]
fn reads_the_three_sheets_of_multi_sheet() {
    let (e, bytes) = corpus("office/multi-sheet.xlsx");
    let info = describe(&e, Some(bytes.clone())).unwrap();
    let sheets: Vec<(Value, Value)> = info["sheets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].clone(), s["dimensions"].clone()))
        .collect();
    assert_eq!(
        sheets,
        vec![
            (json!("Revenue"), json!("A1:B7")),
            (json!("Expenses"), json!("A1:C9")),
            (json!("Summary"), json!("A1:B4"))
        ]
    );
    assert_eq!(
        sheet(&e, &bytes, "Revenue", Some("A1:B3"))["rows"],
        json!([["Month", "Amount"], ["January", 12500], ["February", 13200]])
    );
    assert_eq!(
        sheet(&e, &bytes, "expenses", Some("A9:C9"))["rows"],
        json!([["April", "Marketing", 3100]])
    );
    assert_eq!(
        sheet(&e, &bytes, "Summary", None)["rows"],
        json!([
            ["Category", "Total"],
            ["Revenue", 81600],
            ["Expenses", 43000],
            ["Net", 38600]
        ])
    );
    let missing = read(
        &e,
        bytes,
        &Selector {
            sheet: Some("Nope".into()),
            ..selector()
        },
    )
    .unwrap_err();
    assert_refusal(
        &missing,
        ErrorCode::ValidationFailed,
        "Revenue, Expenses, Summary",
    );
}

#[test]
fn reads_the_slides_of_slides_pptx() {
    let (e, bytes) = corpus("office/slides.pptx");
    let all = read(&e, bytes.clone(), &selector()).unwrap();
    assert_eq!(all["slide_count"], 3);
    let slide = |i: usize| {
        read(
            &e,
            bytes.clone(),
            &Selector {
                slide_index: Some(i),
                ..selector()
            },
        )
        .unwrap()["slide"]
            .clone()
    };
    assert_eq!(
        (slide(0)["title"].clone(), slide(0)["body"].clone()),
        (json!("Q4 Review"), json!(["Annual Performance Summary"]))
    );
    assert_eq!(
        slide(1)["body"],
        json!([
            "Revenue increased 15% quarter-over-quarter",
            "Customer base grew to 1,200 active accounts",
            "Three major product releases shipped on schedule",
            "Employee satisfaction score: 4.3/5.0",
        ])
    );
    assert_eq!(
        slide(2)["other_text"],
        json!([
            "Thank you for reviewing. For questions, contact the analytics team at analytics@example.com."
        ])
    );
    let info = describe(&e, Some(bytes.clone())).unwrap();
    assert_eq!(
        info["slides"],
        json!([{"index": 0, "title": "Q4 Review"}, {"index": 1, "title": "Key Highlights"}, {"index": 2, "title": null}])
    );
    let out_of_range = read(
        &e,
        bytes,
        &Selector {
            slide_index: Some(3),
            ..selector()
        },
    )
    .unwrap_err();
    assert!(
        out_of_range.message.contains("has 3 slides"),
        "{}",
        out_of_range.message
    );
}

#[test]
fn reads_the_invoice_placeholders_and_sections() {
    let (e, bytes) = corpus("synthetic/invoice_template.docx");
    let read = read(
        &e,
        bytes.clone(),
        &Selector {
            section: Some("Invoice".into()),
            ..selector()
        },
    )
    .unwrap();
    let texts: Vec<&str> = read["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect();
    assert_eq!(
        texts,
        vec![
            "Invoice",
            "Company: {{company}}",
            "Date: {{date}}",
            "",
            "",
            "Total: {{total}}"
        ]
    );
    assert_eq!(
        read["blocks"][4]["rows"],
        json!([
            ["Item", "Quantity", "Unit Price", "Subtotal"],
            ["{{items_table}}", "", "", ""]
        ])
    );
    let (e, bytes) = corpus("office/simple.docx");
    let details = super::read(
        &e,
        bytes.clone(),
        &Selector {
            section: Some("1".into()),
            ..selector()
        },
    )
    .unwrap();
    assert_eq!(details["heading"], "Details");
    assert_eq!(details["blocks"].as_array().unwrap().len(), 2);
    let info = describe(&e, Some(bytes)).unwrap();
    assert_eq!(
        (
            info["words"].clone(),
            info["sections"].clone(),
            info["tables"].clone()
        ),
        (json!(89), json!(2), json!(0))
    );
}

#[test]
fn reads_every_other_fixture() {
    let (e, bytes) = corpus("office/report.pdf");
    let pdf = read(
        &e,
        bytes,
        &Selector {
            pages: Some("1".into()),
            ..selector()
        },
    )
    .unwrap();
    let text = pdf["pages"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Annual Report"), "{text}");
    assert!(text.contains("record revenue of 4.2 million EUR"), "{text}");
    let (e, bytes) = corpus("context/keenbench_company_metrics.xlsx");
    assert_eq!(
        sheet(&e, &bytes, "KPIs", Some("A3:D4"))["rows"],
        json!([
            ["Metric", "2026-01", "2026-02", "Target"],
            ["Weekly active workbenches", 12, 19, 25]
        ])
    );
    let (e, bytes) = corpus("context/keenbench_pitch_deck.pptx");
    assert_eq!(describe(&e, Some(bytes)).unwrap()["slide_count"], 5);
    let (e, bytes) = corpus("context/keenbench_company_overview.docx");
    assert_eq!(
        describe(&e, Some(bytes)).unwrap()["headings"][0]["text"],
        "KeenBench Company Overview (Fictional QA)"
    );
    let (e, bytes) = fixture("sct-inner-content.docx");
    let info = describe(&e, Some(bytes)).unwrap();
    assert_eq!(info["tables"], 2);
    let (e, bytes) = fixture("test.pptx");
    assert_eq!(
        describe(&e, Some(bytes)).unwrap()["slides"],
        json!([{"index": 0, "title": "Presentation Title Text"}])
    );
    let (e, bytes) = fixture("test.docx");
    let blocks = read(&e, bytes, &selector()).unwrap()["blocks"].clone();
    assert_eq!(blocks[0]["text"], "python-docx was here!");
    let (e, bytes) = corpus("office/notes.odt");
    let err = read(&e, bytes, &selector()).unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationFailed);
}

#[test]
fn fills_the_invoice_keeping_styles_and_the_table() {
    let (e, bytes) = corpus("synthetic/invoice_template.docx");
    let (filled, results) = apply(
        &e,
        &bytes,
        json!([
            {"op": "replace_text", "search": "{{company}}", "replace": "Acme Ltd"},
            {"op": "replace_text", "find": "{{date}}", "replace": "2026-03-01"},
            {"op": "replace_text", "search": "{{total}}", "replace": "1,250.00 EUR"},
            {"op": "set_table_cell", "table_index": 0, "row": 1, "col": 0, "text": "Consulting"},
            {"op": "set_table_cell", "table_index": 0, "row": 1, "col": 1, "text": "10"},
            {"op": "set_table_cell", "table_index": 0, "row": 1, "col": 2, "text": "100.00"},
            {"op": "set_table_cell", "table_index": 0, "row": 1, "col": 3, "text": "1,000.00"},
            {"op": "append_table_row", "table_index": 0, "values": ["Support", 5, "50.00", "250.00"]},
            {"op": "replace_text", "search": "{{missing}}", "replace": "x"},
        ]),
    );
    assert_eq!(results[0], json!({"op": "replace_text", "replacements": 1}));
    // A placeholder replaced by itself is refused: nothing would change.
    let itself = Operations::parse(
        Format::Docx,
        "t",
        &json!([{"op": "replace_text", "search": "{{company}}", "replace": "{{company}}"}]),
    )
    .unwrap()
    .apply(bytes.clone())
    .unwrap_err();
    assert_eq!(itself.code, ErrorCode::ValidationFailed);
    // Edits that found nothing to replace leave the file as it was, byte for byte.
    let (unchanged, _) = apply(
        &e,
        &bytes,
        json!([{"op": "replace_text", "search": "{{missing}}", "replace": "x"}]),
    );
    assert!(unchanged == bytes);
    assert!(
        itself.message.contains("changes nothing"),
        "{}",
        itself.message
    );
    assert_eq!(results[8]["replacements"], 0);
    assert!(
        results[8]["warning"]
            .as_str()
            .unwrap()
            .contains("no occurrence")
    );
    let read = read(&entry("invoice.docx", &filled), filled.clone(), &selector()).unwrap();
    let blocks = read["blocks"].as_array().unwrap();
    let texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    assert_eq!(
        texts,
        vec![
            "Invoice",
            "Company: Acme Ltd",
            "Date: 2026-03-01",
            "",
            "",
            "Total: 1,250.00 EUR"
        ]
    );
    assert_eq!(blocks[0]["style"], "Heading 1");
    assert_eq!(
        blocks[4]["rows"],
        json!([
            ["Item", "Quantity", "Unit Price", "Subtotal"],
            ["Consulting", "10", "100.00", "1,000.00"],
            ["Support", "5", "50.00", "250.00"],
        ])
    );
    assert_eq!(changed_parts(&bytes, &filled), vec!["word/document.xml"]);
    let before = styles(&e, bytes, StylesOf::Docx).unwrap();
    let after = styles(&entry("invoice.docx", &filled), filled, StylesOf::Docx).unwrap();
    for same in [
        "defaults",
        "table_styles_in_use",
        "character_styles_in_use",
        "available_paragraph_styles",
    ] {
        assert_eq!(before[same], after[same], "{same}");
    }
    assert_eq!(
        after["paragraph_styles_in_use"],
        json!({"Heading 1": 1, "Normal": 17})
    );
}

#[test]
fn replace_text_spans_runs_and_keeps_the_first_runs_formatting() {
    let (e, bytes) = fixture("having-images.docx");
    let blank = blank(Format::Docx).unwrap();
    let (doc, _) = apply(
        &entry("n.docx", &blank),
        &blank,
        json!([
            {"op": "append_paragraph", "style": "Heading 1", "text": "Plan"},
            {"op": "append_paragraph", "runs": [{"text": "Total: {{to", "bold": true, "color": "#1F4E79"}, {"text": "tal}} due", "italic": true, "size": 14}]},
            {"op": "insert_paragraph", "after_heading": "plan", "text": "Inserted"},
            {"op": "replace_text", "search": "{{total}}", "replace": "42"},
        ]),
    );
    let read = read(&entry("n.docx", &doc), doc.clone(), &selector()).unwrap();
    let texts: Vec<&str> = read["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect();
    assert_eq!(texts, vec!["Plan", "Inserted", "Total: 42 due"]);
    let xml = String::from_utf8(parts(&doc)["word/document.xml"].clone()).unwrap();
    assert!(xml.contains(r#"<w:r><w:rPr><w:b/><w:color w:val="1F4E79"/></w:rPr><w:t xml:space="preserve">Total: 42</w:t></w:r>"#), "{xml}");
    assert!(xml.contains(r#"<w:rPr><w:i/><w:sz w:val="28"/><w:szCs w:val="28"/></w:rPr><w:t xml:space="preserve"> due</w:t>"#), "{xml}");
    // Images and every other part survive an edit byte-for-byte.
    let (edited, _) = apply(
        &e,
        &bytes,
        json!([{"op": "append_paragraph", "text": "After the images"}, {"op": "delete_paragraph", "index": 0}]),
    );
    assert_eq!(changed_parts(&bytes, &edited), vec!["word/document.xml"]);
    let unknown_style = Operations::parse(
        Format::Docx,
        "t",
        &json!([{"op": "append_paragraph", "style": "Nope", "text": "x"}]),
    )
    .unwrap()
    .apply(bytes)
    .unwrap_err();
    assert_eq!(unknown_style.code, ErrorCode::ValidationFailed);
    assert!(
        unknown_style
            .message
            .starts_with("operation 0: the document has no paragraph style \"Nope\""),
        "{}",
        unknown_style.message
    );
}

#[test]
fn adds_a_summary_sheet_with_numbers_and_keeps_the_others() {
    let (e, bytes) = corpus("synthetic/quarterly_data.xlsx");
    let quarters = ["Q1", "Q2", "Q3", "Q4"];
    let before: Vec<Value> = quarters
        .iter()
        .map(|q| sheet(&e, &bytes, q, Some("A1:D13")))
        .collect();
    let totals: Vec<f64> = before
        .iter()
        .map(|s| {
            s["rows"]
                .as_array()
                .unwrap()
                .iter()
                .skip(1)
                .filter_map(|r| r[2].as_f64())
                .sum()
        })
        .collect();
    let mut values = vec![json!(["Quarter", "Total", "Check"])];
    for (q, total) in quarters.iter().zip(&totals) {
        values.push(json!([
            q,
            (total * 100.0).round() / 100.0,
            format!("=SUM({q}!C2:C13)")
        ]));
    }
    let (edited, results) = apply(
        &e,
        &bytes,
        json!([
            {"op": "ensure_sheet", "sheet": "Summary"},
            {"op": "set_range", "sheet": "Summary", "start": "A1", "values": values},
            {"op": "set_cells", "sheet": "Summary", "cells": [{"cell": "A6", "value": "Updated"}, {"cell": "B6", "value": "2026-12-31", "type": "date"}]},
            {"op": "set_style", "sheet": "Summary", "range": "A1:C1", "style": {"bold": true, "fill_color": "DDEBF7", "border": "thin"}},
            {"op": "set_style", "sheet": "Summary", "range": "B2:B5", "style": {"number_format": "#,##0.00"}},
            {"op": "set_column_widths", "sheet": "Summary", "widths": {"A": 14, "B": 16}},
            {"op": "freeze_panes", "sheet": "Summary", "cell": "A2"},
        ]),
    );
    assert_eq!(
        results[0],
        json!({"op": "ensure_sheet", "sheet": "Summary", "created": true})
    );
    let e2 = entry("q.xlsx", &edited);
    let summary = sheet(&e2, &edited, "Summary", Some("A1:C6"));
    assert_eq!(summary["rows"][0], json!(["Quarter", "Total", "Check"]));
    assert_eq!(
        summary["rows"][1][1],
        json!((totals[0] * 100.0).round() / 100.0)
    );
    assert!(
        summary["rows"].as_array().unwrap()[1..5]
            .iter()
            .all(|r| r[1].is_number()),
        "{summary}"
    );
    assert_eq!(summary["rows"][5], json!(["Updated", "2026-12-31", null]));
    assert_eq!(summary["formulas"]["C2"], "=SUM(Q1!C2:C13)");
    for (q, old) in quarters.iter().zip(&before) {
        assert_eq!(&sheet(&e2, &edited, q, Some("A1:D13")), &{
            let mut v = old.clone();
            v["sheets"] = json!(["Q1", "Q2", "Q3", "Q4", "Summary"]);
            v["path"] = json!("q.xlsx");
            v
        });
    }
    let mut changed = changed_parts(&bytes, &edited);
    changed.retain(|p| !p.starts_with("xl/worksheets/sheet5"));
    assert_eq!(
        changed,
        vec![
            "[Content_Types].xml",
            "xl/_rels/workbook.xml.rels",
            "xl/styles.xml",
            "xl/workbook.xml"
        ]
    );
    let described = styles(&e2, edited, StylesOf::Xlsx).unwrap();
    let summary_styles = described["sheets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sheet"] == "Summary")
        .unwrap()
        .clone();
    let header = summary_styles["styles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["font"]["bold"] == true)
        .unwrap()
        .clone();
    assert_eq!(
        (
            header["cells"].clone(),
            header["fill_color"].clone(),
            header["has_border"].clone()
        ),
        (json!(3), json!("FFDDEBF7"), json!(true))
    );
}

#[test]
fn deletes_renames_and_keeps_untouched_sheets_of_the_bank_statement() {
    let (e, bytes) = corpus("office/multi-sheet.xlsx");
    let (edited, _) = apply(
        &e,
        &bytes,
        json!([
            {"op": "delete_sheet", "sheet": "Expenses"},
            {"op": "rename_sheet", "sheet": "Revenue", "new_name": "Sales 2026"},
            {"op": "set_cells", "sheet": "Summary", "cells": [{"cell": "C1", "value": "=SUM('Sales 2026'!B2:B7)"}]},
        ]),
    );
    let info = describe(&entry("m.xlsx", &edited), Some(edited.clone())).unwrap();
    let names: Vec<&str> = info["sheets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, vec!["Sales 2026", "Summary"]);
    assert_eq!(
        sheet(
            &entry("m.xlsx", &edited),
            &edited,
            "Sales 2026",
            Some("A2:B2")
        )["rows"],
        json!([["January", 12500]])
    );
    assert!(!parts(&edited).contains_key("xl/worksheets/sheet2.xml"));
    assert_eq!(
        parts(&edited)["xl/worksheets/sheet1.xml"],
        parts(&bytes)["xl/worksheets/sheet1.xml"]
    );
    let last = Operations::parse(Format::Xlsx, "t", &json!([{"op": "delete_sheet", "sheet": "Summary"}, {"op": "delete_sheet", "sheet": "Sales 2026"}])).unwrap().apply(edited).unwrap_err();
    assert_eq!(last.code, ErrorCode::ValidationFailed);
    assert!(
        last.message
            .starts_with("operation 1: \"Sales 2026\" is the only sheet"),
        "{}",
        last.message
    );
}

#[test]
fn adds_and_deletes_slides_with_notes() {
    let (e, bytes) = corpus("office/slides.pptx");
    let (edited, results) = apply(
        &e,
        &bytes,
        json!([
            {"op": "add_slide", "layout": "Title and Content", "title": "Next Steps", "bullets": ["Hire two engineers", "Open Lisbon office"], "position": 2},
            {"op": "delete_slide", "index": 3},
            {"op": "append_bullets", "index": 1, "bullets": ["Churn fell to 2%"]},
            {"op": "set_slide_text", "slide_index": 0, "title": "Q4 Review 2026"},
            {"op": "set_notes", "index": 2, "text": "Mention the budget."},
        ]),
    );
    assert_eq!(
        results[0],
        json!({"op": "add_slide", "index": 2, "slide_count": 4})
    );
    let e2 = entry("s.pptx", &edited);
    let all = read(&e2, edited.clone(), &selector()).unwrap();
    let titles: Vec<Value> = all["slides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].clone())
        .collect();
    assert_eq!(
        titles,
        vec![
            json!("Q4 Review 2026"),
            json!("Key Highlights"),
            json!("Next Steps")
        ]
    );
    assert_eq!(
        all["slides"][2]["body"],
        json!(["Hire two engineers", "Open Lisbon office"])
    );
    assert_eq!(all["slides"][2]["notes"], "Mention the budget.");
    assert_eq!(all["slides"][1]["body"].as_array().unwrap().len(), 5);
    assert_eq!(all["slides"][1]["body"][4], "Churn fell to 2%");
    assert_eq!(
        all["slides"][0]["body"],
        json!(["Annual Performance Summary"])
    );
    let parts_after = parts(&edited);
    assert!(!parts_after.contains_key("ppt/slides/slide3.xml"));
    assert!(
        parts_after["ppt/slides/slide2.xml"].len() > parts(&bytes)["ppt/slides/slide2.xml"].len()
    );
    for untouched in [
        "ppt/slideMasters/slideMaster1.xml",
        "ppt/theme/theme1.xml",
        "docProps/thumbnail.jpeg",
        "ppt/slideLayouts/slideLayout2.xml",
    ] {
        assert_eq!(
            parts_after[untouched],
            parts(&bytes)[untouched],
            "{untouched}"
        );
    }
    let (e, bytes) = fixture("no-slides.pptx");
    let (first, _) = apply(
        &e,
        &bytes,
        json!([{"op": "add_slide", "layout": "Title Slide", "title": "Hello", "body": "World"}]),
    );
    let slide = read(
        &entry("f.pptx", &first),
        first,
        &Selector {
            slide_index: Some(0),
            ..selector()
        },
    )
    .unwrap();
    assert_eq!(
        (
            slide["slide"]["title"].clone(),
            slide["slide"]["body"].clone()
        ),
        (json!("Hello"), json!(["World"]))
    );
}

#[test]
fn creates_new_documents_of_every_format() {
    let xlsx = blank(Format::Xlsx).unwrap();
    let (xlsx, _) = apply(
        &entry("n.xlsx", &xlsx),
        &xlsx,
        json!([
            {"op": "rename_sheet", "sheet": "Sheet1", "new_name": "Data"},
            {"op": "set_range", "sheet": "Data", "start": "B2", "values": [["n", "ok"], [1.5, true], [null, "=B3*2"]]},
        ]),
    );
    let data = sheet(&entry("n.xlsx", &xlsx), &xlsx, "Data", Some("B2:C4"));
    assert_eq!(
        data["rows"],
        json!([["n", "ok"], [1.5, true], [null, null]])
    );
    assert_eq!(data["formulas"], json!({"C4": "=B3*2"}));
    let pptx = blank(Format::Pptx).unwrap();
    let (pptx, _) = apply(
        &entry("n.pptx", &pptx),
        &pptx,
        json!([
            {"op": "add_slide", "layout": "Title Slide", "title": "Deck", "body": "Subtitle"},
            {"op": "add_slide", "title": "Agenda", "bullets": ["One", "Two"], "notes": "Say hi"},
        ]),
    );
    let all = read(&entry("n.pptx", &pptx), pptx, &selector()).unwrap();
    assert_eq!(all["slides"][1]["body"], json!(["One", "Two"]));
    assert_eq!(all["slides"][1]["notes"], "Say hi");
    assert_eq!(all["slides"][1]["layout"], "Title and Content");
    let docx = blank(Format::Docx).unwrap();
    let (docx, _) = apply(
        &entry("n.docx", &docx),
        &docx,
        json!([
            {"op": "append_paragraph", "style": "Title", "text": "Report"},
            {"op": "append_table", "rows": [["a", "b"], [1, 2.5]], "header": true, "style": "Table Grid"},
        ]),
    );
    let blocks = read(&entry("n.docx", &docx), docx, &selector()).unwrap()["blocks"].clone();
    assert_eq!(blocks[1]["rows"], json!([["a", "b"], ["1", "2.5"]]));
}

#[test]
fn crafted_and_damaged_files_get_codes() {
    let (e, bytes) = corpus("office/slides.pptx");
    let truncated = bytes[..bytes.len() / 2].to_vec();
    let err = read(&e, truncated, &selector()).unwrap_err();
    assert_eq!(err.code, ErrorCode::FileReadFailed);
    let encrypted = super::package::tests::encrypted_file();
    for name in ["secret.docx", "secret.xlsx", "secret.pptx"] {
        let err = describe(&entry(name, &encrypted), Some(encrypted.clone())).unwrap_err();
        assert_eq!(err.code, ErrorCode::FileReadFailed, "{name}");
        assert!(
            err.message.contains("password-protected"),
            "{name}: {}",
            err.message
        );
    }
    let err = read(
        &entry("x.pdf", b"%PDF-1.4 garbage"),
        b"%PDF-1.4 garbage".to_vec(),
        &selector(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::FileReadFailed);
    let not_zip = read(&entry("x.docx", b"hello"), b"hello".to_vec(), &selector()).unwrap_err();
    assert_eq!(not_zip.code, ErrorCode::FileReadFailed);
    let info = describe(&entry("old.doc", b"x"), Some(b"x".to_vec())).unwrap();
    assert_eq!(info["readable"], false);
    let ops = Operations::parse(Format::Xlsx, "xlsx_operations", &json!([{"op": "explode"}]))
        .unwrap_err();
    assert_refusal(
        &ops,
        ErrorCode::ValidationFailed,
        "unknown variant `explode`",
    );
}

#[test]
fn editing_a_sheet_keeps_its_merged_cells_widths_and_formats() {
    let (e, bytes) = corpus("real/cuentas_octubre_2024_anonymized_draft.xlsx");
    let (edited, _) = apply(
        &e,
        &bytes,
        json!([
            {"op": "set_cells", "sheet": "Movimientos", "cells": [{"cell": "G9", "value": 1.5}, {"cell": "D9", "value": -6.15}]},
        ]),
    );
    let e2 = entry("bank.xlsx", &edited);
    let head = sheet(&e2, &edited, "Movimientos", Some("A1:G9"));
    assert_eq!(
        head["merged"],
        json!(["A1:B1", "A2:B2", "A3:B3", "A4:B4", "A6:B6"])
    );
    assert_eq!(
        head["rows"][8],
        json!([
            "23/10/2024",
            "23/10/2024",
            "Pago Movil En Merchant 001, City 001, Tarj. :*000000",
            -6.15,
            31788.7,
            null,
            1.5
        ])
    );
    let element = |bytes: &[u8], name: &str| {
        let xml = String::from_utf8(parts(bytes)["xl/worksheets/sheet1.xml"].clone()).unwrap();
        let doc = super::xml::Document::parse("s", &xml).unwrap();
        doc.root.child(name).cloned()
    };
    for kept in ["cols", "mergeCells", "sheetViews", "pageMargins"] {
        assert_eq!(element(&bytes, kept), element(&edited, kept), "{kept}");
    }
    let cell_style = |bytes: &[u8]| {
        let xml = String::from_utf8(parts(bytes)["xl/worksheets/sheet1.xml"].clone()).unwrap();
        let doc = super::xml::Document::parse("s", &xml).unwrap();
        let row = doc
            .root
            .child("sheetData")
            .unwrap()
            .elements()
            .find(|r| r.attr("r").as_deref() == Some("9"))
            .cloned()
            .unwrap();
        row.elements()
            .find(|c| c.attr("r").as_deref() == Some("D9"))
            .and_then(|c| c.attr("s"))
    };
    assert_eq!(cell_style(&edited), cell_style(&bytes));
    assert!(cell_style(&bytes).is_some());
    let untouched = read(
        &e2,
        edited.clone(),
        &Selector {
            sheet: Some("Movimientos".into()),
            range: Some("A10:E180".into()),
            ..selector()
        },
    )
    .unwrap();
    let original = read(
        &e,
        bytes,
        &Selector {
            sheet: Some("Movimientos".into()),
            range: Some("A10:E180".into()),
            ..selector()
        },
    )
    .unwrap();
    assert_eq!(untouched["rows"], original["rows"]);
}
