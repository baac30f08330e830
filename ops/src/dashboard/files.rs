//! A workbench's files over HTTP: creating a workbench, listing a view's files (a draft's
//! marked added, modified or deleted against the published state) and any file's bytes for
//! download, with the same sandbox and codes as `atelier wb ls` and `wb cat`; a file's preview
//! is in `preview`, an upload in `upload`.

use std::collections::BTreeMap;

use atelier_messages::store::{
    CreateWorkbench, FileBytes, ListFiles, ListWorkbenches, ManifestEntry, ReadFile, View,
};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::requests::{Shared, answer, call, coded, view_named};

/// The routes of workbenches and their files.
pub(super) fn routes() -> Router<Shared> {
    Router::new()
        .route("/api/workbenches", get(workbenches).post(create))
        .route(
            "/api/workbenches/{name}/files",
            get(list)
                .post(super::upload::upload)
                .layer(super::upload::body_limit()),
        )
        .route("/api/workbenches/{name}/files/{*path}", get(download))
        .route(
            "/api/workbenches/{name}/preview/{*path}",
            get(super::preview::preview),
        )
}

/// `GET /api/workbenches`: every workbench, as `atelier wb list --json`.
async fn workbenches(State(state): State<Shared>) -> Response {
    let request = ListWorkbenches {
        v: PROTOCOL_VERSION,
    };
    match call(&state, &request).await {
        Ok(list) => Json(list).into_response(),
        Err(response) => response,
    }
}

/// `?view=published|draft|current` (default `published`).
#[derive(Debug, Default, Deserialize)]
pub(super) struct ViewQuery {
    #[serde(default)]
    view: Option<String>,
}

impl ViewQuery {
    fn view(&self) -> Result<View, ErrorBody> {
        view_named(self.view.as_deref())
    }
}

/// `POST /api/workbenches` body.
#[derive(Debug, Deserialize)]
pub(super) struct NewWorkbench {
    name: String,
}

/// `POST /api/workbenches`: creates a workbench, as `atelier wb create`.
async fn create(State(state): State<Shared>, Json(new): Json<NewWorkbench>) -> Response {
    let request = CreateWorkbench {
        v: PROTOCOL_VERSION,
        workbench: new.name,
    };
    answer(call(&state, &request).await)
}

/// One file of a listing, with how the draft changed it (`unchanged` in the published view).
#[derive(Debug, Serialize)]
struct FileRow {
    path: String,
    kind: String,
    size: u64,
    digest: String,
    status: &'static str,
}

/// `GET /api/workbenches/{name}/files?view=…`: the view's files; a draft's (view `draft`, or
/// `current` with a draft) each marked `added`, `modified` or `unchanged`, and the published
/// files the draft removed listed as `deleted`.
async fn list(
    State(state): State<Shared>,
    Path(name): Path<String>,
    Query(query): Query<ViewQuery>,
) -> Response {
    let view = match query.view() {
        Ok(view) => view,
        Err(error) => return coded(error),
    };
    let listing = match call(&state, &list_files(&name, view)).await {
        Ok(listing) => listing,
        Err(response) => return response,
    };
    let of_draft = listing.has_draft && view != View::Published;
    let published = match of_draft {
        true => match call(&state, &list_files(&name, View::Published)).await {
            Ok(published) => Some(published.files),
            Err(response) => return response,
        },
        false => None,
    };
    let files = rows(&listing.files, published.as_deref());
    Json(serde_json::json!({
        "workbench": listing.workbench,
        "view": if of_draft { "draft" } else { "published" },
        "has_draft": listing.has_draft,
        "draft": listing.draft,
        "files": files,
    }))
    .into_response()
}

fn list_files(workbench: &str, view: View) -> ListFiles {
    ListFiles {
        v: PROTOCOL_VERSION,
        workbench: workbench.to_string(),
        view,
    }
}

/// The files of a view, marked against `published` when the view is a draft's.
fn rows(files: &[ManifestEntry], published: Option<&[ManifestEntry]>) -> Vec<FileRow> {
    let row = |entry: &ManifestEntry, status| FileRow {
        path: entry.path.clone(),
        kind: entry.kind.clone(),
        size: entry.size,
        digest: entry.digest.clone(),
        status,
    };
    let Some(published) = published else {
        return files.iter().map(|entry| row(entry, "unchanged")).collect();
    };
    let before: BTreeMap<&str, &ManifestEntry> = (published.iter())
        .map(|entry| (entry.path.as_str(), entry))
        .collect();
    let mut rows: Vec<FileRow> = files
        .iter()
        .map(|entry| match before.get(entry.path.as_str()) {
            None => row(entry, "added"),
            Some(old) if old.digest != entry.digest => row(entry, "modified"),
            Some(_) => row(entry, "unchanged"),
        })
        .collect();
    let after: std::collections::BTreeSet<&str> =
        files.iter().map(|entry| entry.path.as_str()).collect();
    rows.extend(
        (published.iter())
            .filter(|entry| !after.contains(entry.path.as_str()))
            .map(|entry| row(entry, "deleted")),
    );
    rows.sort_by(|a, b| a.path.cmp(&b.path));
    rows
}

/// `GET /api/workbenches/{name}/files/{path}?view=…`: the file's bytes, as an attachment named
/// after it. A large file is brought from the blob store into a temporary file and streamed.
async fn download(
    State(state): State<Shared>,
    Path((name, path)): Path<(String, String)>,
    Query(query): Query<ViewQuery>,
) -> Response {
    let view = match query.view() {
        Ok(view) => view,
        Err(error) => return coded(error),
    };
    let request = ReadFile {
        v: PROTOCOL_VERSION,
        workbench: name.clone(),
        path,
        view,
    };
    let file = match call(&state, &request).await {
        Ok(file) => file,
        Err(response) => return response,
    };
    match body_of(&state, &name, &file).await {
        Ok(body) => attachment(&file.path, body),
        Err(error) => coded(error),
    }
}

/// The file's bytes as a body: inline, or streamed from a temporary copy of its blob.
async fn body_of(state: &Shared, workbench: &str, file: &FileBytes) -> Result<Body, ErrorBody> {
    let Some(blob) = &file.blob else {
        return Ok(Body::from(file.content.to_vec()));
    };
    let temp = tempfile::tempdir().map_err(|error| internal(&error))?;
    let local = temp.path().join("content");
    atelier_transport::pieces::fetch_to(&state.nats, Some(workbench), blob, &local, false, &|_| {})
        .await?;
    let opened = tokio::fs::File::open(&local)
        .await
        .map_err(|error| internal(&error))?;
    // The directory goes when the stream ends; the open file stays readable until then.
    let chunks = futures::stream::unfold((opened, temp), |(mut file, temp)| async move {
        use tokio::io::AsyncReadExt;
        let mut chunk = vec![0_u8; 64 * 1024];
        match file.read(&mut chunk).await {
            Ok(0) => None,
            Ok(read) => {
                chunk.truncate(read);
                Some((Ok::<_, std::io::Error>(chunk), (file, temp)))
            }
            Err(error) => Some((Err(error), (file, temp))),
        }
    });
    Ok(Body::from_stream(chunks))
}

fn internal(error: &dyn std::fmt::Display) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Internal,
        format!("cannot stage the file: {error}"),
    )
}

/// `body` as a download of `path`: its type by extension, `Content-Disposition: attachment`
/// with an ASCII name and the UTF-8 one (RFC 6266), never sniffed.
fn attachment(path: &str, body: Body) -> Response {
    let name = path.rsplit('/').next().unwrap_or(path);
    let ascii: String = name
        .chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => '_',
        })
        .collect();
    let disposition = format!(
        "attachment; filename=\"{ascii}\"; filename*=UTF-8''{}",
        percent_encode(name)
    );
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, content_type(name));
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// RFC 5987 percent-encoding of a file name's UTF-8 bytes.
fn percent_encode(name: &str) -> String {
    name.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// A download's media type by its extension, text types in UTF-8.
fn content_type(name: &str) -> HeaderValue {
    let media = atelier_messages::path::media_type(name);
    match media.starts_with("text/") {
        true => HeaderValue::from_str(&format!("{media}; charset=utf-8"))
            .unwrap_or(HeaderValue::from_static("text/plain; charset=utf-8")),
        false => HeaderValue::from_static(media),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, digest: &str) -> ManifestEntry {
        ManifestEntry {
            path: path.into(),
            digest: digest.into(),
            size: 1,
            kind: "text".into(),
        }
    }

    #[test]
    fn a_drafts_files_are_marked_against_the_published_ones() {
        let published = [
            entry("a.txt", "1"),
            entry("b.txt", "2"),
            entry("c.txt", "3"),
        ];
        let draft = [
            entry("a.txt", "1"),
            entry("b.txt", "9"),
            entry("d.txt", "4"),
        ];
        let marked: Vec<(String, &str)> = rows(&draft, Some(&published))
            .into_iter()
            .map(|row| (row.path, row.status))
            .collect();
        assert_eq!(
            marked,
            [
                ("a.txt".to_string(), "unchanged"),
                ("b.txt".to_string(), "modified"),
                ("c.txt".to_string(), "deleted"),
                ("d.txt".to_string(), "added"),
            ]
        );
    }

    #[test]
    fn a_download_is_named_safely_in_ascii_and_utf8() {
        let response = attachment("reports/Q3 résumé \"final\".xlsx", Body::empty());
        let disposition = response.headers()[header::CONTENT_DISPOSITION]
            .to_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(
            disposition,
            "attachment; filename=\"Q3 r_sum_ _final_.xlsx\"; \
             filename*=UTF-8''Q3%20r%C3%A9sum%C3%A9%20%22final%22.xlsx"
        );
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
        );
    }
}
