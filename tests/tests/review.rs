//! The draft review shows what was added, not only that something was: on `atelier up`, writes
//! through `atelier mcp` (rmcp over stdio) give a workbook a `Forecast` sheet and a sheet larger
//! than the review shows, a deck a slide, and the workbench a new text file and a new workbook;
//! `atelier draft diff --json`, its text form, MCP `draft_diff`, the dashboard's API and (in
//! headless Chromium) its draft panel then show the added cells, the slide's text and the lines.

use anyhow::Context;
use atelier_messages::review::{
    ADDED_SHEET_COLUMNS, ADDED_SHEET_ROWS, AddedSheet, ContentDiff, FileDiff, Review, UnitOp,
};
use atelier_tests::browser::{self, PageScript, browser_setup};
use atelier_tests::up::Up;
use atelier_tests::{atelier_bin, fixtures};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

const NOTES: &str = "# Quarter\nTotal 3500\nNorth leads.\n";

async fn mcp(up: &Up) -> anyhow::Result<RunningService<RoleClient, ()>> {
    let command = tokio::process::Command::new(atelier_bin()).configure(|command| {
        command
            .arg("mcp")
            .args(["--data", &up.data().to_string_lossy()])
            .env_remove("ATELIER_NATS_URL")
            .current_dir(up.workdir());
    });
    Ok(().serve(TokioChildProcess::new(command)?).await?)
}

async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    args: Value,
) -> anyhow::Result<Value> {
    let Value::Object(args) = args else {
        anyhow::bail!("arguments are an object")
    };
    let request = CallToolRequestParams::new(tool.to_string()).with_arguments(args);
    let result = client.call_tool(request).await?;
    Ok(result.structured_content.unwrap_or_default())
}

/// A write through MCP that must land in the draft.
async fn write(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    args: Value,
) -> anyhow::Result<()> {
    let written = call(client, tool, args).await?;
    anyhow::ensure!(written["state"] == "succeeded", "{tool}: {written}");
    Ok(())
}

/// Workbench `rev` with a published workbook and deck, and a draft that adds to both and adds
/// `notes.md` and a whole new workbook.
async fn draft_with_additions(up: &Up) -> anyhow::Result<RunningService<RoleClient, ()>> {
    let office = fixtures().join("keenbench/office");
    up.cli_ok(&["wb", "create", "rev"])?;
    for (file, name) in [
        ("multi-sheet.xlsx", "book.xlsx"),
        ("slides.pptx", "deck.pptx"),
    ] {
        let path = office.join(file).to_string_lossy().to_string();
        up.cli_ok(&["wb", "add", "rev", &path, "--as", name])?;
    }
    let client = mcp(up).await?;
    let big: Vec<Value> = (0..60)
        .map(|r| Value::Array((0..25).map(|c| json!(r * 100 + c)).collect()))
        .collect();
    write(&client, "xlsx_operations", json!({"workbench": "rev", "path": "book.xlsx", "operations": [
        {"op": "ensure_sheet", "sheet": "Forecast"},
        {"op": "set_cells", "sheet": "Forecast", "cells": [
            {"cell": "A1", "value": "Total"}, {"cell": "B1", "value": 3500},
            {"cell": "A2", "value": "Double"}, {"cell": "B2", "value": "=B1*2", "type": "formula"}
        ]},
        {"op": "ensure_sheet", "sheet": "Big"},
        {"op": "set_range", "sheet": "Big", "start": "A1", "values": big},
    ]}))
    .await?;
    write(
        &client,
        "pptx_operations",
        json!({"workbench": "rev", "path": "deck.pptx", "operations": [
            {"op": "add_slide", "title": "Summary", "bullets": ["Revenue 3500", "North leads"]},
        ]}),
    )
    .await?;
    write(
        &client,
        "write_text_file",
        json!({"workbench": "rev", "path": "notes.md", "content": NOTES}),
    )
    .await?;
    write(&client, "xlsx_operations", json!({"workbench": "rev", "path": "totals.xlsx", "create_new": true, "operations": [
        {"op": "ensure_sheet", "sheet": "Totals"},
        {"op": "set_range", "sheet": "Totals", "start": "A1", "values": [["Region", "Revenue"], ["North", 120], ["South", 80]]},
    ]}))
    .await?;
    Ok(client)
}

fn file<'a>(review: &'a Review, path: &str) -> anyhow::Result<&'a FileDiff> {
    review
        .files
        .iter()
        .find(|file| file.path == path)
        .with_context(|| format!("{path} is not in the review: {review:?}"))
}

fn added_sheets<'a>(review: &'a Review, path: &str) -> anyhow::Result<&'a [AddedSheet]> {
    match &file(review, path)?.content {
        ContentDiff::Workbook { added_sheets, .. } => Ok(added_sheets),
        other => anyhow::bail!("{path} is no workbook diff: {other:?}"),
    }
}

fn sheet<'a>(sheets: &'a [AddedSheet], name: &str) -> anyhow::Result<&'a AddedSheet> {
    sheets
        .iter()
        .find(|sheet| sheet.sheet == name)
        .with_context(|| format!("no added sheet {name}: {sheets:?}"))
}

/// What the review must show of every addition.
fn assert_additions_shown(review: &Review) -> anyhow::Result<()> {
    let book = added_sheets(review, "book.xlsx")?;
    let names: Vec<&str> = book.iter().map(|s| s.sheet.as_str()).collect();
    assert_eq!(names, ["Forecast", "Big"]);
    let forecast = sheet(book, "Forecast")?;
    assert_eq!(forecast.range.as_deref(), Some("A1:B2"));
    assert_eq!(forecast.cells[0], [json!("Total"), json!(3500)]);
    assert_eq!(forecast.cells[1][0], json!("Double"));
    assert_eq!(forecast.formulas["B2"], "=B1*2");
    assert!(!forecast.truncated);
    let big = sheet(book, "Big")?;
    assert_eq!((big.rows, big.columns, big.truncated), (60, 25, true));
    assert_eq!(big.range.as_deref(), Some("A1:Y60"));
    assert_eq!(big.cells.len() as u64, ADDED_SHEET_ROWS);
    assert!(
        big.cells
            .iter()
            .all(|row| row.len() as u64 == ADDED_SHEET_COLUMNS)
    );
    assert_eq!(big.cells[49][19], json!(4919));

    let totals = sheet(added_sheets(review, "totals.xlsx")?, "Totals")?;
    assert_eq!(totals.cells[2], [json!("South"), json!(80)]);

    let ContentDiff::Slides { slides } = &file(review, "deck.pptx")?.content else {
        anyhow::bail!("deck.pptx is no slides diff: {review:?}")
    };
    let added: Vec<_> = slides
        .sample
        .iter()
        .filter(|unit| unit.op == UnitOp::Added)
        .collect();
    let [slide] = added.as_slice() else {
        anyhow::bail!("one added slide: {slides:?}")
    };
    assert_eq!(
        slide.new.as_deref(),
        Some(&["Summary", "Revenue 3500", "North leads"].map(String::from)[..])
    );

    let ContentDiff::Text {
        unified,
        lines_added,
        truncated,
        ..
    } = &file(review, "notes.md")?.content
    else {
        anyhow::bail!("notes.md is no text diff: {review:?}")
    };
    assert_eq!((*lines_added, *truncated), (3, false));
    assert!(
        unified.contains("+# Quarter\n+Total 3500\n+North leads.\n"),
        "{unified}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_draft_review_shows_added_cells_slide_text_and_lines_everywhere() -> anyhow::Result<()>
{
    let up = Up::start()?;
    let client = draft_with_additions(&up).await?;

    let review: Review = serde_json::from_str(&up.cli_ok(&["draft", "diff", "rev", "--json"])?)?;
    assert_eq!(review.added, ["notes.md", "totals.xlsx"]);
    assert_additions_shown(&review)?;

    // The text form shows the same values, a line per row.
    let text = up.cli_ok(&["draft", "diff", "rev"])?;
    for shown in [
        "  + sheet Forecast: A1:B2 (2 rows × 2 columns)",
        "    A1: Total | 3500",
        "    B2 =B1*2",
        "  + sheet Big: A1:Y60 (60 rows × 25 columns)",
        "    … (more cells than shown: at most 50 rows × 20 columns)",
        "  + sheet Totals: A1:B3 (3 rows × 2 columns)",
        "    A3: South | 80",
        ": Summary / Revenue 3500 / North leads",
        "    +Total 3500",
    ] {
        assert!(text.contains(shown), "{shown:?} is not in:\n{text}");
    }
    assert!(!text.contains("A51:"), "rows past the cut are not printed");

    // MCP draft_diff and the dashboard's API answer the same review.
    let over_mcp: Review =
        serde_json::from_value(call(&client, "draft_diff", json!({"workbench": "rev"})).await?)?;
    assert_additions_shown(&over_mcp)?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!("http://{}/api/workbenches/rev/diff", up.dashboard_addr()?);
    let over_http: Review = reqwest::get(&url).await?.error_for_status()?.json().await?;
    assert_additions_shown(&over_http)?;
    assert_eq!(over_http, review);
    client.cancel().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboards_draft_panel_shows_an_added_sheet_as_a_grid_and_the_added_text()
-> anyhow::Result<()> {
    if browser::skipped() {
        return Ok(());
    }
    let chromium = browser_setup()?;
    let up = Up::start()?;
    let client = draft_with_additions(&up).await?;
    let url = format!("http://{}", up.dashboard_addr()?);
    let page = PageScript {
        script: "review.test.mjs",
        artifacts: "artifacts-review",
        chromium: &chromium,
        url: &url,
        subject: ("WORKBENCH", "rev"),
        env: &[],
    };
    let (result, artifacts) = page.run(&|| up.log())?;
    assert_eq!(result.get("error"), None, "{result}");
    assert_eq!(
        result["forecast"],
        json!([
            ["", "A", "B"],
            ["1", "Total", "3500"],
            ["2", "Double", "=B1*2"]
        ]),
        "{result}"
    );
    assert_eq!(result["forecastFormula"], "=B1*2", "{result}");
    // The header row and the 50 rows shown, then the cut said.
    assert_eq!(result["bigRows"], 1 + ADDED_SHEET_ROWS, "{result}");
    assert_eq!(result["bigColumns"], 1 + ADDED_SHEET_COLUMNS, "{result}");
    assert!(
        result["bigCut"]
            .as_str()
            .is_some_and(|cut| cut.contains("50 rows × 20 columns")),
        "{result}"
    );
    assert!(
        result["slides"]
            .as_array()
            .is_some_and(|units| units.iter().any(|unit| unit
                .as_str()
                .is_some_and(|u| u.contains("Summary / Revenue 3500 / North leads")))),
        "{result}"
    );
    assert!(
        result["notes"]
            .as_str()
            .is_some_and(|notes| notes.contains("+Total 3500")),
        "{result}"
    );
    browser::assert_screenshots(&artifacts, &["r1-review"])?;
    client.cancel().await?;
    Ok(())
}
