//! A workbench's files over the dashboard's HTTP API on `atelier up`, behind its token: create
//! a workbench, upload files (multipart, as a browser sends them), list its published files and
//! its draft's (each marked added, modified, unchanged or deleted), download any version of a
//! file — inline or brought from the blob store — as an attachment; bad names, paths, views and
//! sizes refused with their codes; previews of every kind a page at a time; and the workbench
//! page in Chromium (`tests/browser/files.test.mjs`) doing all of it as a person would.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use anyhow::Context;
use atelier_tests::browser::{self, PageScript, browser_setup};
use atelier_tests::scripted::{Script, ScriptedModel};
use atelier_tests::up::Up;
use reqwest::StatusCode;
use serde_json::{Value, json};

const TOKEN: &str = "files-token";

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    fn new(up: &Up) -> anyhow::Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(Self {
            base: format!("http://{}", up.dashboard_addr()?),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()?,
        })
    }

    async fn get(&self, path: &str) -> anyhow::Result<reqwest::Response> {
        Ok(self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await?)
    }

    async fn json(&self, path: &str) -> anyhow::Result<(StatusCode, Value)> {
        let response = self.get(path).await?;
        let status = response.status();
        Ok((status, response.json().await?))
    }

    /// The files of a view as (path, status).
    async fn files(&self, workbench: &str, view: &str) -> anyhow::Result<Vec<(String, String)>> {
        let (status, body) = self
            .json(&format!("/api/workbenches/{workbench}/files?view={view}"))
            .await?;
        anyhow::ensure!(status == StatusCode::OK, "{status}: {body}");
        Ok(body["files"]
            .as_array()
            .context("no files")?
            .iter()
            .map(|file| {
                let text = |key: &str| file[key].as_str().unwrap_or_default().to_string();
                (text("path"), text("status"))
            })
            .collect())
    }
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn files_are_listed_per_view_and_downloaded_as_attachments() -> anyhow::Result<()> {
    let up = Up::start_with(&[], &[("ATELIER_DASHBOARD_TOKEN", TOKEN)])?;
    let api = Api::new(&up)?;
    let created = api
        .http
        .post(format!("{}/api/workbenches", api.base))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "sheets"}))
        .send()
        .await?;
    assert_eq!(created.status(), StatusCode::OK);
    let created: Value = created.json().await?;
    assert_eq!(created["ok"]["name"], "sheets", "{created}");
    let refused = api
        .http
        .post(format!("{}/api/workbenches", api.base))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "../escape"}))
        .send()
        .await?;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);

    let penguins = atelier_tests::fixtures().join("palmerpenguins/penguins.csv");
    // Large enough to travel through the blob store rather than inline.
    let big = up.workdir().join("big.csv");
    let rows: String = (0..40_000).map(|n| format!("{n},row {n}\n")).collect();
    std::fs::write(&big, format!("n,label\n{rows}"))?;
    let (penguins_path, big_path) = (penguins.to_string_lossy(), big.to_string_lossy());
    up.cli_ok(&["wb", "add", "sheets", &penguins_path, &big_path])?;
    assert_eq!(
        api.files("sheets", "published").await?,
        [
            ("big.csv".to_string(), "unchanged".to_string()),
            ("penguins.csv".to_string(), "unchanged".to_string())
        ]
    );

    // A draft: a note added, big.csv deleted.
    let run = |tool: &str, args: Value| {
        let args = args.to_string();
        up.cli_ok(&[
            "run",
            "sheets",
            tool,
            "--args",
            &args,
            "--wait",
            "--continue-draft",
            "--auto-approve",
        ])
    };
    run(
        "write_text_file",
        json!({"path": "notes/résumé 1.txt", "content": "hello\n"}),
    )?;
    run("delete_file", json!({"path": "big.csv"}))?;
    assert_eq!(
        api.files("sheets", "draft").await?,
        [
            ("big.csv".to_string(), "deleted".to_string()),
            ("notes/résumé 1.txt".to_string(), "added".to_string()),
            ("penguins.csv".to_string(), "unchanged".to_string())
        ]
    );

    // An upload goes to the published state only without a draft, as `wb add` does.
    let (status, body) = upload(&api, "sheets", vec![("more.csv".into(), b"a\n".to_vec())]).await?;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "DRAFT_EXISTS")
    );

    // Downloads: the draft's note, the published big file whole, the penguins unchanged.
    let note = api
        .get("/api/workbenches/sheets/files/notes/r%C3%A9sum%C3%A9%201.txt?view=draft")
        .await?;
    assert_eq!(note.status(), StatusCode::OK);
    assert_eq!(
        note.headers()["content-disposition"],
        "attachment; filename=\"r_sum_ 1.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9%201.txt"
    );
    assert_eq!(note.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(note.bytes().await?.as_ref(), b"hello\n");
    let whole = api.get("/api/workbenches/sheets/files/big.csv").await?;
    assert_eq!(whole.status(), StatusCode::OK);
    assert_eq!(
        whole.bytes().await?.as_ref(),
        std::fs::read(&big)?.as_slice()
    );
    let table = api
        .get("/api/workbenches/sheets/files/penguins.csv")
        .await?;
    assert_eq!(table.headers()["content-type"], "text/csv; charset=utf-8");
    assert_eq!(
        table.bytes().await?.as_ref(),
        std::fs::read(&penguins)?.as_slice()
    );

    // The draft's deleted file is not in it; the published note is not yet.
    for (path, expected) in [
        (
            "/api/workbenches/sheets/files/big.csv?view=draft",
            "NOT_FOUND",
        ),
        (
            "/api/workbenches/sheets/files/notes/r%C3%A9sum%C3%A9%201.txt",
            "NOT_FOUND",
        ),
        (
            "/api/workbenches/sheets/files/..%2F..%2Fetc%2Fpasswd",
            "SANDBOX_VIOLATION",
        ),
        (
            "/api/workbenches/sheets/files?view=bogus",
            "VALIDATION_FAILED",
        ),
        ("/api/workbenches/nowhere/files", "NOT_FOUND"),
    ] {
        let (status, body) = api.json(path).await?;
        assert!(status.is_client_error(), "{path}: {status}");
        assert_eq!(code(&body), expected, "{path}: {body}");
    }
    // Without the token: refused.
    let anonymous = api
        .http
        .get(format!("{}/api/workbenches/sheets/files", api.base))
        .send()
        .await?;
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    Ok(())
}

/// A multipart upload of `files` (name, bytes) to `workbench`: the status and the body.
async fn upload(
    api: &Api,
    workbench: &str,
    files: Vec<(String, Vec<u8>)>,
) -> anyhow::Result<(StatusCode, Value)> {
    let mut form = reqwest::multipart::Form::new();
    for (name, bytes) in files {
        form = form.part(
            "file",
            reqwest::multipart::Part::bytes(bytes).file_name(name),
        );
    }
    let response = api
        .http
        .post(format!("{}/api/workbenches/{workbench}/files", api.base))
        .bearer_auth(TOKEN)
        .multipart(form)
        .send()
        .await?;
    let status = response.status();
    Ok((status, response.json().await?))
}

#[tokio::test(flavor = "multi_thread")]
async fn uploads_land_in_the_published_state_and_bad_ones_are_refused_early() -> anyhow::Result<()>
{
    let up = Up::start_with(&[], &[("ATELIER_DASHBOARD_TOKEN", TOKEN)])?;
    let api = Api::new(&up)?;
    up.cli_ok(&["wb", "create", "uploads"])?;
    let fixtures = atelier_tests::fixtures();
    let penguins = std::fs::read(fixtures.join("palmerpenguins/penguins.csv"))?;
    let quarterly = std::fs::read(fixtures.join("keenbench/synthetic/quarterly_data.xlsx"))?;
    // Large enough to go through the blob store.
    let big: Vec<u8> = (0..400_000_u32).flat_map(|n| n.to_le_bytes()).collect();
    let (status, body) = upload(
        &api,
        "uploads",
        vec![
            ("penguins.csv".into(), penguins.clone()),
            ("data/quarterly_data.xlsx".into(), quarterly.clone()),
            ("big.bin".into(), big.clone()),
        ],
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        api.files("uploads", "published").await?,
        [
            ("big.bin".to_string(), "unchanged".to_string()),
            (
                "data/quarterly_data.xlsx".to_string(),
                "unchanged".to_string()
            ),
            ("penguins.csv".to_string(), "unchanged".to_string())
        ]
    );
    for (path, bytes) in [
        ("data/quarterly_data.xlsx", &quarterly),
        ("big.bin", &big),
        ("penguins.csv", &penguins),
    ] {
        let downloaded = api
            .get(&format!("/api/workbenches/uploads/files/{path}"))
            .await?
            .bytes()
            .await?;
        assert_eq!(downloaded.as_ref(), bytes.as_slice(), "{path}");
    }
    // The CLI reads what the browser uploaded.
    let cat = up.cli(&["wb", "cat", "uploads", "penguins.csv"])?;
    assert_eq!(cat.stdout, penguins);

    // A path leaving the workbench.
    let (status, body) =
        upload(&api, "uploads", vec![("../x.csv".into(), b"a\n".to_vec())]).await?;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "SANDBOX_VIOLATION")
    );
    // No file part at all.
    let (status, body) = upload(&api, "uploads", Vec::new()).await?;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "VALIDATION_FAILED")
    );
    // A 2 GB upload is refused from its declared length, before a byte of it is read.
    let answer = declared_only(&up, "/api/workbenches/uploads/files", 2 << 30).await?;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("FILE_TOO_LARGE"), "{answer}");
    // The dashboard still serves.
    assert_eq!(api.files("uploads", "published").await?.len(), 3);
    Ok(())
}

/// Sends only the head of a multipart POST declaring `length` bytes; the answer read back.
async fn declared_only(up: &Up, path: &str, length: u64) -> anyhow::Result<String> {
    let addr = up.dashboard_addr()?;
    let mut stream = tokio::net::TcpStream::connect(&addr).await?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: multipart/form-data; boundary=x\r\nContent-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let mut answer = vec![0_u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
        .await
        .context("no answer within 10 s: the server waited for the body")??;
    Ok(String::from_utf8_lossy(&answer[..read]).into_owned())
}

/// The preview of `path` in `workbench` with `query` (after `?`): status and body.
async fn preview(
    api: &Api,
    workbench: &str,
    path: &str,
    query: &str,
) -> anyhow::Result<(StatusCode, Value)> {
    api.json(&format!(
        "/api/workbenches/{workbench}/preview/{path}?{query}"
    ))
    .await
}

/// A workbook whose used range spans the whole grid (A1 and XFD1048576): reading it whole
/// would take 512 GiB.
fn crafted_workbook(path: &std::path::Path) -> anyhow::Result<()> {
    let mut workbook = rust_xlsxwriter::Workbook::new();
    let sheet = workbook.add_worksheet();
    sheet.write_string(0, 0, "first")?;
    sheet.write_string(1_048_575, 16_383, "last")?;
    workbook.save(path)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn previews_page_through_each_kind_and_refuse_bad_files_with_their_codes()
-> anyhow::Result<()> {
    let up = Up::start_with(&[], &[("ATELIER_DASHBOARD_TOKEN", TOKEN)])?;
    let api = Api::new(&up)?;
    up.cli_ok(&["wb", "create", "peek"])?;
    let fixtures = atelier_tests::fixtures();
    let work = up.workdir();
    std::fs::write(work.join("notes.md"), "# Notes\nTotal 3\n")?;
    std::fs::write(work.join("blob.bin"), [0_u8, 1, 2, 3])?;
    crafted_workbook(&work.join("crafted.xlsx"))?;
    let mut files: Vec<String> = [
        "palmerpenguins/penguins.csv",
        "keenbench/synthetic/quarterly_data.xlsx",
        "keenbench/office/simple.docx",
        "keenbench/office/slides.pptx",
        "keenbench/office/report.pdf",
    ]
    .iter()
    .map(|path| fixtures.join(path).to_string_lossy().into_owned())
    .collect();
    for name in ["notes.md", "blob.bin", "crafted.xlsx"] {
        files.push(work.join(name).to_string_lossy().into_owned());
    }
    let mut add = vec!["wb", "add", "peek"];
    add.extend(files.iter().map(String::as_str));
    up.cli_ok(&add)?;

    // A CSV: its header as the columns, 50 rows a page, typed values, paged by offset.
    let (status, csv) = preview(&api, "peek", "penguins.csv", "").await?;
    assert_eq!(status, StatusCode::OK, "{csv}");
    assert_eq!(
        (
            csv["kind"].clone(),
            csv["header"].clone(),
            csv["total"].clone()
        ),
        (json!("grid"), json!(true), json!(344))
    );
    assert_eq!(csv["columns"][0], "species");
    assert_eq!(csv["columns"].as_array().map(Vec::len), Some(8));
    assert_eq!(csv["rows"].as_array().map(Vec::len), Some(50));
    assert_eq!(csv["rows"][0][1], "Torgersen");
    assert_eq!(csv["rows"][0][4], 181);
    assert_eq!(csv["next_offset"], 50);
    let (_, last) = preview(&api, "peek", "penguins.csv", "offset=300").await?;
    assert_eq!(last["rows"].as_array().map(Vec::len), Some(44), "{last}");
    assert_eq!(
        (last["first_row"].clone(), last["next_offset"].clone()),
        (json!(301), Value::Null)
    );

    // A workbook: its sheets as tabs, a sheet's used range with column letters.
    let (status, book) = preview(&api, "peek", "quarterly_data.xlsx", "").await?;
    assert_eq!(status, StatusCode::OK, "{book}");
    assert_eq!(book["sheets"], json!(["Q1", "Q2", "Q3", "Q4"]));
    assert_eq!(book["sheet"], "Q1");
    assert_eq!(book["columns"], json!(["A", "B", "C", "D"]));
    assert_eq!(book["total"], 13);
    assert_eq!(
        book["rows"][0],
        json!(["Date", "Category", "Amount", "Description"])
    );
    let (_, q2) = preview(&api, "peek", "quarterly_data.xlsx", "sheet=Q2").await?;
    assert_eq!(q2["sheet"], "Q2");
    assert_eq!(q2["rows"][2][2], 610);
    assert_eq!(q2["rows"][2][3], "Flight to Lisbon");

    // A document's blocks, a deck's slides, a PDF's pages, a text file's lines.
    let (_, docx) = preview(&api, "peek", "simple.docx", "").await?;
    assert_eq!(docx["kind"], "document", "{docx}");
    assert_eq!(docx["blocks"][0]["text"], "Introduction");
    let (_, deck) = preview(&api, "peek", "slides.pptx", "").await?;
    assert_eq!(
        (deck["kind"].clone(), deck["total"].clone()),
        (json!("slides"), json!(3))
    );
    assert_eq!(deck["slides"][0]["title"], "Q4 Review");
    assert!(
        deck["slides"][2]
            .to_string()
            .contains("analytics@example.com"),
        "{deck}"
    );
    let (_, pdf) = preview(&api, "peek", "report.pdf", "").await?;
    assert_eq!(pdf["kind"], "pages", "{pdf}");
    assert_eq!(pdf["pages"][0]["page"], 1);
    assert!(
        pdf["pages"][0]["text"]
            .as_str()
            .is_some_and(|text| !text.trim().is_empty())
    );
    let (_, notes) = preview(&api, "peek", "notes.md", "").await?;
    assert_eq!(
        (
            notes["kind"].clone(),
            notes["markdown"].clone(),
            notes["lines"].clone()
        ),
        (json!("text"), json!(true), json!(["# Notes", "Total 3"]))
    );
    let (_, blob) = preview(&api, "peek", "blob.bin", "").await?;
    assert_eq!(blob["kind"], "none");

    // Bad files, views, paths and callers: their codes, and the dashboard goes on serving.
    let (status, crafted) = preview(&api, "peek", "crafted.xlsx", "").await?;
    assert_eq!(
        (status, code(&crafted)),
        (StatusCode::UNPROCESSABLE_ENTITY, "FILE_TOO_COMPLEX"),
        "{crafted}"
    );
    let (status, body) = preview(&api, "peek", "penguins.csv", "view=nope").await?;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "VALIDATION_FAILED")
    );
    let (status, body) = preview(&api, "peek", "missing.csv", "").await?;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "NOT_FOUND"),
        "{body}"
    );
    let (status, body) = preview(&api, "peek", "penguins.csv", "view=draft").await?;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "NO_DRAFT"),
        "{body}"
    );
    let anonymous = reqwest::get(format!(
        "{}/api/workbenches/peek/preview/penguins.csv",
        api.base
    ))
    .await?;
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let elsewhere = api
        .http
        .get(format!(
            "{}/api/workbenches/peek/preview/penguins.csv",
            api.base
        ))
        .bearer_auth(TOKEN)
        .header("Origin", "http://evil.example")
        .send()
        .await?;
    assert_eq!(elsewhere.status(), StatusCode::FORBIDDEN);
    // A modified file: each view previews its own version.
    let args = json!({"path": "notes.md", "content": "# Notes\nTotal 4\n"}).to_string();
    up.cli_ok(&[
        "run",
        "peek",
        "write_text_file",
        "--args",
        &args,
        "--wait",
        "--auto-approve",
    ])?;
    let (_, draft) = preview(&api, "peek", "notes.md", "view=draft").await?;
    let (_, published) = preview(&api, "peek", "notes.md", "view=published").await?;
    assert_eq!(
        (draft["lines"][1].clone(), published["lines"][1].clone()),
        (json!("Total 4"), json!("Total 3"))
    );
    let (status, again) = preview(&api, "peek", "penguins.csv", "").await?;
    assert_eq!(
        (status, again["rows"][0][1].clone()),
        (StatusCode::OK, json!("Torgersen"))
    );
    Ok(())
}

/// Adds a Summary sheet to a new summary.xlsx, as a model's run would.
fn summary_script() -> anyhow::Result<Script> {
    Ok(serde_json::from_value(json!({
        "research": [{"content": "quarterly_data.xlsx has the sheets Q1 to Q4."}],
        "plan": [{"content": "- [ ] 1. Summary — add a Summary sheet to summary.xlsx"}],
        "implement": {"1": [
            {"tool_calls": [{"name": "xlsx_operations", "arguments": {
                "path": "summary.xlsx", "create_if_missing": true,
                "operations": [
                    {"op": "ensure_sheet", "sheet": "Summary"},
                    {"op": "set_cells", "sheet": "Summary", "cells": [
                        {"cell": "A1", "value": "Quarter"}, {"cell": "B1", "value": "Total"},
                        {"cell": "A2", "value": "Q1"}, {"cell": "B2", "value": 2379.49}
                    ]}
                ]
            }}]},
            {"content": "Done."}
        ]},
        "summary": [{"content": "summary.xlsx has a Summary sheet."}]
    }))?)
}

/// The cells of `sheet` in the workbook at `path`, as text, row by row.
fn sheet_cells(path: &std::path::Path, sheet: &str) -> anyhow::Result<Vec<Vec<String>>> {
    use calamine::Reader;
    let mut workbook = calamine::open_workbook_auto(path)?;
    let range = workbook.worksheet_range(sheet)?;
    Ok(range
        .rows()
        .map(|row| row.iter().map(ToString::to_string).collect())
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_workbench_page_in_chromium_uploads_previews_downloads_and_publishes()
-> anyhow::Result<()> {
    if browser::skipped() {
        return Ok(());
    }
    let chromium = browser_setup()?;
    let model = ScriptedModel::start(summary_script()?).await?;
    let config = tempfile::tempdir()?;
    let config_path = config.path().join("atelier.toml");
    std::fs::write(&config_path, model.profile_toml("scripted", ""))?;
    let up = Up::start_with(&[], &[("ATELIER_CONFIG", &config_path.to_string_lossy())])?;
    let fixtures = atelier_tests::fixtures();
    let penguins = fixtures.join("palmerpenguins/penguins.csv");
    let quarterly = fixtures.join("keenbench/synthetic/quarterly_data.xlsx");
    let crafted = up.workdir().join("crafted.xlsx");
    crafted_workbook(&crafted)?;
    let downloads = tempfile::tempdir()?;
    let paths = [&penguins, &quarterly, &crafted].map(|path| path.to_string_lossy().into_owned());
    let downloads_path = downloads.path().to_string_lossy().into_owned();
    let url = format!("http://{}", up.dashboard_addr()?);
    let page = PageScript {
        script: "files.test.mjs",
        artifacts: "artifacts-files",
        chromium: &chromium,
        url: &url,
        subject: ("WORKBENCH", "browsed"),
        env: &[
            ("PENGUINS", &paths[0]),
            ("QUARTERLY", &paths[1]),
            ("CRAFTED", &paths[2]),
            ("DOWNLOADS", &downloads_path),
        ],
    };
    let (result, artifacts) = page.run(&|| up.log())?;
    assert_eq!(result.get("error"), None, "{result}");

    // Created from the list, after a refused name.
    assert_eq!(result["navActive"], true);
    assert_eq!(result["badName"], "VALIDATION_FAILED", "{result}");
    // Both uploads landed in the published files.
    assert_eq!(
        result["uploads"],
        json!(["penguins.csv:done", "quarterly_data.xlsx:done"]),
        "{result}"
    );
    assert_eq!(
        result["listedFirst"],
        json!(["penguins.csv:unchanged", "quarterly_data.xlsx:unchanged"])
    );
    // The CSV's grid: row numbers, the header, typed values as shown, 50 rows then 100.
    assert_eq!(result["csvHeader"][1], "species", "{result}");
    assert_eq!(
        result["csvFirst"],
        json!([
            "1",
            "Adelie",
            "Torgersen",
            "39.1",
            "18.7",
            "181",
            "3750",
            "male",
            "2007"
        ])
    );
    assert_eq!(
        (
            result["csvRows"].clone(),
            result["csvRowsAfterMore"].clone()
        ),
        (json!(50), json!(100))
    );
    assert_eq!(result["csvCount"], "100 of 344 rows");
    // The workbook's tabs and its second sheet.
    assert_eq!(result["tabs"], json!(["Q1", "Q2", "Q3", "Q4"]));
    assert_eq!(result["q2Selected"], "Q2");
    assert_eq!(
        result["q2"][2],
        json!(["3", "2026-04-10", "Travel", "610", "Flight to Lisbon"]),
        "{result}"
    );
    assert_eq!(result["unlabeled"], json!([]), "{result}");
    // Bad files: the crafted workbook's preview and the escaping path, with their codes.
    assert_eq!(result["craftedPreview"], "FILE_TOO_COMPLEX", "{result}");
    assert_eq!(result["escape"], "refused:SANDBOX_VIOLATION", "{result}");
    // The run's draft: summary.xlsx added, its added sheet's cells shown, then published.
    assert!(
        result["listedDraft"]
            .as_array()
            .is_some_and(|files| files.contains(&json!("summary.xlsx:added"))),
        "{result}"
    );
    assert_eq!(
        result["viewButtons"],
        json!(["draft:true", "published:false"])
    );
    assert_eq!(
        result["summary"],
        json!([["1", "Quarter", "Total"], ["2", "Q1", "2379.49"]]),
        "{result}"
    );
    assert_eq!(result["downloadName"], "summary.xlsx");
    assert_eq!(
        sheet_cells(&downloads.path().join("summary.xlsx"), "Summary")?,
        [["Quarter", "Total"], ["Q1", "2379.49"]]
    );
    assert!(
        result["listedPublished"]
            .as_array()
            .is_some_and(|files| files.contains(&json!("summary.xlsx:unchanged"))),
        "{result}"
    );
    assert_eq!(result["viewButtonsAfter"], 0);
    let published = up.cli_ok(&["wb", "ls", "browsed"])?;
    assert!(published.contains("summary.xlsx"), "{published}");
    // 390 px wide: nothing wider than the screen.
    assert!(
        result["narrowWidth"]
            .as_u64()
            .is_some_and(|width| width <= 390),
        "{result}"
    );
    assert!(
        result["narrowListWidth"]
            .as_u64()
            .is_some_and(|width| width <= 390),
        "{result}"
    );
    assert_eq!(result["benchRow"][0], "browsed");
    assert_eq!(result["benchRow"][1], "4", "{result}");
    browser::assert_screenshots(
        &artifacts,
        &[
            "f1-files-1280",
            "f2-draft-preview-1280",
            "f3-files-390",
            "f4-workbenches-390",
        ],
    )?;
    Ok(())
}
