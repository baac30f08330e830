//! The office pool end to end over real NATS: reading the corpus, template filling, workbook and
//! deck edits written to the draft, file deletes and renames, crafted files, small texts read
//! from memory, and LibreOffice opening what the pool writes.

use std::path::Path;

use atelier_messages::store::{DraftDiff, Listing};
use atelier_messages::{ErrorBody, ErrorCode};
use atelier_tests::{Cluster, call_tool, fixtures};
use serde_json::{Value, json};

const FILES: &[(&str, &str)] = &[
    ("keenbench/synthetic/invoice_template.docx", "invoice.docx"),
    (
        "keenbench/synthetic/quarterly_data.xlsx",
        "finance/quarterly.xlsx",
    ),
    ("keenbench/office/slides.pptx", "slides.pptx"),
    ("keenbench/office/report.pdf", "report.pdf"),
    (
        "keenbench/real/cuentas_octubre_2024_anonymized_draft.xlsx",
        "bank.xlsx",
    ),
];

struct Bench<'a> {
    cluster: &'a Cluster,
    client: async_nats::Client,
    name: String,
    calls: usize,
}

impl Bench<'_> {
    fn listing(&self) -> anyhow::Result<Listing> {
        self.cluster.current_listing(&self.name)
    }

    /// Calls an office tool with the manifest the agent would see now.
    async fn call(&mut self, tool: &str, args: Value) -> anyhow::Result<Result<Value, ErrorBody>> {
        self.calls += 1;
        let listing = self.listing()?;
        let call_id = format!("office-{}", self.calls);
        let reply = call_tool(&self.client, &listing, &call_id, tool, args, "office").await?;
        Ok(reply.map(|out| out.output))
    }

    async fn ok(&mut self, tool: &str, args: Value) -> anyhow::Result<Value> {
        self.call(tool, args.clone())
            .await?
            .map_err(|e| anyhow::anyhow!("{tool} {args}: {e}\n{}", self.cluster.logs()))
    }

    async fn code(&mut self, tool: &str, args: Value) -> anyhow::Result<Option<ErrorCode>> {
        Ok(self.call(tool, args).await?.err().map(|e| e.code))
    }
}

async fn bench<'a>(cluster: &'a Cluster, name: &str) -> anyhow::Result<Bench<'a>> {
    cluster.cli_ok(&["wb", "create", name])?;
    for (source, target) in FILES {
        let source = fixtures().join(source);
        cluster.cli_ok(&[
            "wb",
            "add",
            name,
            source.to_str().unwrap_or_default(),
            "--as",
            target,
        ])?;
    }
    Ok(Bench {
        cluster,
        client: async_nats::connect(&cluster.nats.url).await?,
        name: name.into(),
        calls: 0,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn office_tools_read_edit_and_manage_files_in_the_draft() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let mut wb = bench(&cluster, "office").await?;

    let info = wb
        .ok("get_file_info", json!({"path": "finance/quarterly.xlsx"}))
        .await?;
    let sheets: Vec<&str> = info["sheets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(sheets, vec!["Q1", "Q2", "Q3", "Q4"]);
    let bank = wb
        .ok(
            "read_file",
            json!({"path": "bank.xlsx", "sheet": "Movimientos", "range": "A8:E9"}),
        )
        .await?;
    assert_eq!(
        bank["rows"],
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
        ])
    );
    let map = wb.ok("get_file_map", json!({"path": "bank.xlsx"})).await?;
    assert_eq!(map["sheets"][0]["header_row"], 8);
    let pdf = wb
        .ok("read_file", json!({"path": "report.pdf", "pages": "1"}))
        .await?;
    assert!(
        pdf["pages"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Annual Report"),
        "{pdf}"
    );
    let slide = wb
        .ok(
            "read_file",
            json!({"path": "slides.pptx", "slide_index": 1}),
        )
        .await?;
    assert_eq!(slide["slide"]["title"], "Key Highlights");

    // Fill the invoice template.
    let filled = wb.ok("docx_operations", json!({"path": "invoice.docx", "operations": [
        {"op": "replace_text", "search": "{{company}}", "replace": "Acme Ltd"},
        {"op": "replace_text", "search": "{{date}}", "replace": "2026-03-01"},
        {"op": "replace_text", "search": "{{total}}", "replace": "1,000.00 EUR"},
        {"op": "set_table_cell", "table_index": 0, "row": 1, "col": 0, "text": "Consulting"},
        {"op": "set_table_cell", "table_index": 0, "row": 1, "col": 3, "text": "1,000.00"},
    ]})).await?;
    assert_eq!(filled["created"], false);
    assert_eq!(filled["operations"].as_array().map(Vec::len), Some(5));
    let invoice = wb.ok("read_file", json!({"path": "invoice.docx"})).await?;
    let texts: Vec<&str> = invoice["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect();
    assert_eq!(
        texts,
        vec![
            "Invoice",
            "Company: Acme Ltd",
            "Date: 2026-03-01",
            "",
            "",
            "Total: 1,000.00 EUR"
        ]
    );
    assert_eq!(
        invoice["blocks"][4]["rows"][1],
        json!(["Consulting", "", "", "1,000.00"])
    );
    let styles = wb
        .ok("docx_get_styles", json!({"path": "invoice.docx"}))
        .await?;
    assert_eq!(styles["paragraph_styles_in_use"]["Heading 1"], 1);

    // A Summary sheet with totals as numbers; the quarters read back unchanged.
    let q1_before = wb
        .ok(
            "read_file",
            json!({"path": "finance/quarterly.xlsx", "sheet": "Q1", "range": "A1:D13"}),
        )
        .await?;
    wb.ok("xlsx_operations", json!({"path": "finance/quarterly.xlsx", "operations": [
        {"op": "ensure_sheet", "sheet": "Summary"},
        {"op": "set_range", "sheet": "Summary", "start": "A1", "values": [["Quarter", "Total"], ["Q1", 3200.49], ["Q2", "=SUM(Q2!C2:C13)"]]},
    ]})).await?;
    let summary = wb
        .ok(
            "read_file",
            json!({"path": "finance/quarterly.xlsx", "sheet": "Summary", "range": "A1:B3"}),
        )
        .await?;
    assert_eq!(summary["rows"][1], json!(["Q1", 3200.49]));
    assert_eq!(summary["formulas"], json!({"B3": "=SUM(Q2!C2:C13)"}));
    let mut q1_after = wb
        .ok(
            "read_file",
            json!({"path": "finance/quarterly.xlsx", "sheet": "Q1", "range": "A1:D13"}),
        )
        .await?;
    q1_after["sheets"] = q1_before["sheets"].clone();
    assert_eq!(q1_after, q1_before);

    // Slides added and deleted.
    wb.ok(
        "pptx_operations",
        json!({"path": "slides.pptx", "operations": [
            {"op": "add_slide", "title": "Next Steps", "bullets": ["Hire", "Expand"]},
            {"op": "delete_slide", "index": 2},
        ]}),
    )
    .await?;
    let deck = wb
        .ok("get_file_info", json!({"path": "slides.pptx"}))
        .await?;
    assert_eq!(
        deck["slides"],
        json!([{"index": 0, "title": "Q4 Review"}, {"index": 1, "title": "Key Highlights"}, {"index": 2, "title": "Next Steps"}])
    );

    // New files, folders allowed; then rename and delete in the draft.
    let created = wb
        .ok(
            "xlsx_operations",
            json!({"path": "out/new.xlsx", "create_new": true, "operations": [
                {"op": "set_cells", "sheet": "Sheet1", "cells": [{"cell": "A1", "value": 7}]},
            ]}),
        )
        .await?;
    assert_eq!(created["created"], true);
    wb.ok(
        "rename_file",
        json!({"path": "report.pdf", "new_path": "archive/report-2025.pdf"}),
    )
    .await?;
    wb.ok("delete_file", json!({"path": "bank.xlsx"})).await?;
    let paths: Vec<String> = wb.listing()?.files.into_iter().map(|f| f.path).collect();
    assert_eq!(
        paths,
        vec![
            "archive/report-2025.pdf",
            "finance/quarterly.xlsx",
            "invoice.docx",
            "out/new.xlsx",
            "slides.pptx"
        ]
    );
    let diff: DraftDiff = cluster
        .cli_ok(&["draft", "diff", "office", "--json"])?
        .json()?;
    assert_eq!(diff.added, vec!["archive/report-2025.pdf", "out/new.xlsx"]);
    assert_eq!(diff.deleted, vec!["bank.xlsx", "report.pdf"]);
    assert_eq!(
        diff.modified,
        vec!["finance/quarterly.xlsx", "invoice.docx", "slides.pptx"]
    );

    // Refusals.
    assert_eq!(
        wb.code(
            "xlsx_operations",
            json!({"path": "missing.xlsx", "operations": [{"op": "ensure_sheet", "sheet": "A"}]})
        )
        .await?,
        Some(ErrorCode::NotFound)
    );
    assert_eq!(
        wb.code(
            "docx_operations",
            json!({"path": "slides.pptx", "operations": [{"op": "delete_paragraph", "index": 0}]})
        )
        .await?,
        Some(ErrorCode::ValidationFailed)
    );
    assert_eq!(
        wb.code(
            "pptx_operations",
            json!({"path": "slides.pptx", "operations": [{"op": "delete_slide", "index": 9}]})
        )
        .await?,
        Some(ErrorCode::ValidationFailed)
    );
    assert_eq!(
        wb.code(
            "rename_file",
            json!({"path": "slides.pptx", "new_path": "../x.pptx"})
        )
        .await?,
        Some(ErrorCode::SandboxViolation)
    );
    assert_eq!(
        wb.code(
            "rename_file",
            json!({"path": "slides.pptx", "new_path": "invoice.docx"})
        )
        .await?,
        Some(ErrorCode::ValidationFailed)
    );
    assert_eq!(
        wb.code("delete_file", json!({"path": "nope.txt"})).await?,
        Some(ErrorCode::FileReadFailed)
    );
    // A failed operation list writes nothing.
    let before = wb.listing()?;
    let partial = wb
        .code(
            "xlsx_operations",
            json!({"path": "out/new.xlsx", "operations": [
                {"op": "set_cells", "sheet": "Sheet1", "cells": [{"cell": "A2", "value": 1}]},
                {"op": "set_cells", "sheet": "Nope", "cells": [{"cell": "A1", "value": 1}]},
            ]}),
        )
        .await?;
    assert_eq!(partial, Some(ErrorCode::ValidationFailed));
    assert_eq!(wb.listing()?.files, before.files);
    Ok(())
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(dir.join(name), bytes)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn crafted_files_get_codes_and_the_worker_keeps_serving() -> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let mut wb = bench(&cluster, "crafted").await?;
    let dir = cluster.dir.path().join("crafted");
    std::fs::create_dir_all(&dir)?;
    let slides = std::fs::read(fixtures().join("keenbench/office/slides.pptx"))?;
    write(&dir, "truncated.pptx", &slides[..slides.len() / 3])?;
    let mut ole = vec![0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];
    ole.resize(2048, 0);
    write(&dir, "locked.docx", &ole)?;
    write(&dir, "legacy.doc", &ole)?;
    write(&dir, "legacy.ppt", &ole)?;
    write(&dir, "broken.pdf", b"%PDF-1.7\n1 0 obj <<")?;
    for file in [
        "truncated.pptx",
        "locked.docx",
        "legacy.doc",
        "legacy.ppt",
        "broken.pdf",
    ] {
        let path = dir.join(file);
        cluster.cli_ok(&["wb", "add", "crafted", path.to_str().unwrap_or_default()])?;
    }
    let expected = [
        ("truncated.pptx", ErrorCode::FileReadFailed),
        ("locked.docx", ErrorCode::FileReadFailed),
        ("legacy.doc", ErrorCode::ValidationFailed),
        ("legacy.ppt", ErrorCode::ValidationFailed),
        ("broken.pdf", ErrorCode::FileReadFailed),
    ];
    for (path, code) in expected {
        assert_eq!(
            wb.code("read_file", json!({"path": path})).await?,
            Some(code),
            "{path}"
        );
        assert_eq!(
            wb.code("get_file_map", json!({"path": path})).await?,
            Some(code),
            "{path}"
        );
    }
    let slide = wb
        .ok(
            "read_file",
            json!({"path": "slides.pptx", "slide_index": 0}),
        )
        .await?;
    assert_eq!(slide["slide"]["title"], "Q4 Review");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_office_call_past_its_time_limit_is_tool_timeout_and_changes_nothing()
-> anyhow::Result<()> {
    let mut cluster = Cluster::start_with(&["tabular"])?;
    cluster.start_worker_with_env("office", &[("ATELIER_OFFICE_TOOL_TIMEOUT_MS", "1")])?;
    let mut wb = bench(&cluster, "slow").await?;
    // Parsing a real bank statement takes longer than a millisecond.
    assert_eq!(
        wb.code("get_file_map", json!({"path": "bank.xlsx"}))
            .await?,
        Some(ErrorCode::ToolTimeout)
    );
    let edit =
        json!({"path": "bank.xlsx", "operations": [{"op": "ensure_sheet", "sheet": "Summary"}]});
    assert_eq!(
        wb.code("xlsx_operations", edit).await?,
        Some(ErrorCode::ToolTimeout)
    );
    assert!(
        cluster
            .cli(&["wb", "ls", "slow", "--draft"])?
            .failed_with("NO_DRAFT"),
        "a call that timed out wrote nothing"
    );
    // The worker keeps serving what fits in the limit.
    let listed = wb.ok("list_files", json!({})).await?;
    assert_eq!(listed["files"].as_array().map(Vec::len), Some(FILES.len()));
    Ok(())
}

/// A small text or CSV is read from disk once, then from the worker's memory by its digest
/// (no blocking thread): each answer is the same both times, and a text written since is read
/// as written, never as the copy held before.
#[tokio::test(flavor = "multi_thread")]
async fn a_small_text_answers_the_same_from_memory_and_a_written_one_is_read_as_written()
-> anyhow::Result<()> {
    let cluster = Cluster::start_with(&["office"])?;
    let mut wb = bench(&cluster, "held").await?;
    let dir = cluster.dir.path().join("held");
    std::fs::create_dir_all(&dir)?;
    write(&dir, "notes.txt", b"alpha\nbeta\ngamma\n")?;
    write(&dir, "people.csv", b"id;name\n1;Ada\n2;Grace\n")?;
    for file in ["notes.txt", "people.csv"] {
        let path = dir.join(file);
        cluster.cli_ok(&["wb", "add", "held", path.to_str().unwrap_or_default()])?;
    }
    let calls = [
        ("get_file_info", json!({"path": "notes.txt"})),
        (
            "read_file",
            json!({"path": "notes.txt", "line_start": 2, "line_count": 1}),
        ),
        ("get_file_map", json!({"path": "notes.txt"})),
        ("get_file_info", json!({"path": "people.csv"})),
    ];
    let mut first = Vec::new();
    for (tool, args) in &calls {
        first.push(wb.ok(tool, args.clone()).await?);
    }
    for ((tool, args), earlier) in calls.iter().zip(&first) {
        assert_eq!(&wb.ok(tool, args.clone()).await?, earlier, "{tool} {args}");
    }
    assert_eq!(first[0]["line_count"], 3);
    assert_eq!(first[0]["encoding"], "utf-8");
    assert_eq!(first[1]["content"], "beta");
    assert_eq!(first[2]["line_count"], 3);
    assert_eq!(first[3]["columns"], json!(["id", "name"]));

    wb.ok(
        "write_text_file",
        json!({"path": "notes.txt", "content": "one\ntwo\n"}),
    )
    .await?;
    let info = wb.ok("get_file_info", json!({"path": "notes.txt"})).await?;
    assert_eq!(info["line_count"], 2);
    let read = wb
        .ok(
            "read_file",
            json!({"path": "notes.txt", "line_start": 2, "line_count": 1}),
        )
        .await?;
    assert_eq!(read["content"], "two");
    Ok(())
}

/// The text of a docx's paragraphs as `read_file` gives them.
async fn paragraphs(wb: &mut Bench<'_>, path: &str) -> anyhow::Result<Vec<String>> {
    let read = wb.ok("read_file", json!({"path": path})).await?;
    Ok(read["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block["text"].as_str().map(str::to_string))
        .filter(|text| !text.is_empty())
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn create_if_missing_creates_a_missing_document_and_edits_an_existing_one_in_place()
-> anyhow::Result<()> {
    let cluster = Cluster::start()?;
    let mut wb = bench(&cluster, "seedcreate").await?;
    let append = |text: &str| json!([{"op": "append_paragraph", "text": text}]);
    let created = wb
        .ok(
            "docx_operations",
            json!({"path": "notes/seed.docx", "create_if_missing": true, "operations": append("First")}),
        )
        .await?;
    assert_eq!(created["created"], true);
    assert_eq!(paragraphs(&mut wb, "notes/seed.docx").await?, ["First"]);
    // Again on the file it made, and on a file the workbench had: edited, never replaced.
    let again = wb
        .ok(
            "docx_operations",
            json!({"path": "notes/seed.docx", "create_if_missing": true, "operations": append("Second")}),
        )
        .await?;
    assert_eq!(again["created"], false);
    assert_eq!(
        paragraphs(&mut wb, "notes/seed.docx").await?,
        ["First", "Second"]
    );
    let before = paragraphs(&mut wb, "invoice.docx").await?;
    wb.ok(
        "docx_operations",
        json!({"path": "invoice.docx", "create_if_missing": true, "operations": append("Paid")}),
    )
    .await?;
    let mut expected = before.clone();
    expected.push("Paid".to_string());
    assert_eq!(paragraphs(&mut wb, "invoice.docx").await?, expected);
    assert!(before.iter().any(|text| text.starts_with("Company:")));
    // With create_new or copy_from it is refused; a missing file without it is NOT_FOUND.
    for other in [
        json!({"create_new": true}),
        json!({"copy_from": "invoice.docx"}),
    ] {
        let mut args =
            json!({"path": "x.docx", "create_if_missing": true, "operations": append("x")});
        if let (Some(args), Some(other)) = (args.as_object_mut(), other.as_object()) {
            args.extend(other.clone());
        }
        assert_eq!(
            wb.code("docx_operations", args).await?,
            Some(ErrorCode::ValidationFailed)
        );
    }
    assert_eq!(
        wb.code(
            "xlsx_operations",
            json!({"path": "missing.xlsx", "operations": [{"op": "ensure_sheet", "sheet": "S"}]})
        )
        .await?,
        Some(ErrorCode::NotFound)
    );
    Ok(())
}

/// Skips with a printed reason when LibreOffice is absent (CI installs it; see docs/tools.md).
#[allow(clippy::print_stderr)]
#[tokio::test(flavor = "multi_thread")]
async fn new_and_edited_documents_open_in_libreoffice() -> anyhow::Result<()> {
    let Some(office) = ["libreoffice", "soffice"].into_iter().find(|bin| {
        std::process::Command::new(bin)
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success())
    }) else {
        eprintln!(
            "SKIPPED new_and_edited_documents_open_in_libreoffice: `libreoffice` is not installed (apt-get install libreoffice-core libreoffice-writer libreoffice-calc libreoffice-impress)"
        );
        return Ok(());
    };
    let cluster = Cluster::start()?;
    let mut wb = bench(&cluster, "lo").await?;
    wb.ok("xlsx_operations", json!({"path": "new.xlsx", "create_new": true, "operations": [
        {"op": "rename_sheet", "sheet": "Sheet1", "new_name": "Data"},
        {"op": "set_range", "sheet": "Data", "start": "A1", "values": [["Item", "Amount"], ["a", 1.5], ["b", 2], ["Total", "=SUM(B2:B3)"]]},
        {"op": "set_style", "sheet": "Data", "range": "A1:B1", "style": {"bold": true, "fill_color": "DDEBF7", "border": "thin"}},
        {"op": "freeze_panes", "sheet": "Data", "cell": "A2"},
        {"op": "set_column_widths", "sheet": "Data", "widths": {"A": 20}},
    ]})).await?;
    wb.ok("docx_operations", json!({"path": "new.docx", "create_new": true, "operations": [
        {"op": "append_paragraph", "style": "Heading 1", "text": "Report"},
        {"op": "append_paragraph", "runs": [{"text": "Bold ", "bold": true}, {"text": "and blue", "color": "1F4E79"}]},
        {"op": "append_table", "rows": [["a", "b"], [1, 2]], "header": true},
    ]})).await?;
    wb.ok("pptx_operations", json!({"path": "new.pptx", "create_new": true, "operations": [
        {"op": "add_slide", "layout": "Title Slide", "title": "Deck", "body": "Subtitle"},
        {"op": "add_slide", "title": "Agenda", "bullets": ["One", "Two"], "notes": "Speak slowly"},
    ]})).await?;
    wb.ok("docx_operations", json!({"path": "invoice.docx", "operations": [{"op": "replace_text", "search": "{{company}}", "replace": "Acme"}]})).await?;
    wb.ok("xlsx_operations", json!({"path": "finance/quarterly.xlsx", "operations": [{"op": "ensure_sheet", "sheet": "Summary"}, {"op": "set_cells", "sheet": "Summary", "cells": [{"cell": "A1", "value": 1}]}, {"op": "delete_sheet", "sheet": "Q4"}]})).await?;
    wb.ok("pptx_operations", json!({"path": "slides.pptx", "operations": [{"op": "add_slide", "title": "More"}, {"op": "delete_slide", "index": 0}, {"op": "set_notes", "index": 0, "text": "n"}]})).await?;
    let export = cluster.dir.path().join("export");
    cluster.cli_ok(&[
        "wb",
        "export",
        "lo",
        export.to_str().unwrap_or_default(),
        "--draft",
    ])?;
    let pdfs = cluster.dir.path().join("pdf");
    let profile = format!(
        "-env:UserInstallation=file://{}",
        cluster.dir.path().join("lo-profile").display()
    );
    for file in [
        "new.xlsx",
        "new.docx",
        "new.pptx",
        "invoice.docx",
        "finance/quarterly.xlsx",
        "slides.pptx",
    ] {
        let status = std::process::Command::new(office)
            .args([
                profile.as_str(),
                "--headless",
                "--convert-to",
                "pdf",
                "--outdir",
            ])
            .arg(&pdfs)
            .arg(export.join(file))
            .output()?;
        let stem = Path::new(file)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let pdf = std::fs::read(pdfs.join(format!("{stem}.pdf"))).unwrap_or_default();
        assert!(
            status.status.success() && pdf.starts_with(b"%PDF") && pdf.len() > 500,
            "LibreOffice could not convert {file}: {}\n{}",
            String::from_utf8_lossy(&status.stdout),
            String::from_utf8_lossy(&status.stderr)
        );
    }
    Ok(())
}
