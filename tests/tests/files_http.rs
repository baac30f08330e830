//! A workbench's files over the dashboard's HTTP API on `atelier up`, behind its token: create
//! a workbench, list its published files and its draft's (each marked added, modified,
//! unchanged or deleted), download any version of a file — inline or brought from the blob
//! store — as an attachment; bad names, paths and views refused with their codes.

use std::time::Duration;

use anyhow::Context;
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
