//! A workbench's files over the dashboard's HTTP API on `atelier up`, behind its token: create
//! a workbench, upload files (multipart, as a browser sends them), list its published files and
//! its draft's (each marked added, modified, unchanged or deleted), download any version of a
//! file — inline or brought from the blob store — as an attachment; bad names, paths, views and
//! sizes refused with their codes.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
