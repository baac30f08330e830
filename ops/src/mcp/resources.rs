//! Workbench files as MCP resources: `atelier://WORKBENCH/PATH` is a published file,
//! `atelier://WORKBENCH/PATH?view=draft` the file in the draft. Text comes as text, anything
//! else base64; a file over [`MAX_RESOURCE_BYTES`] is `RESULT_TOO_LARGE` (read it with the
//! tools, a part at a time).

use atelier_messages::path::media_type;
use atelier_messages::store::{
    FileBytes, ListFiles, ListWorkbenches, Listing, ManifestEntry, ReadFile, View,
};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use atelier_transport::pieces;
use rmcp::model::{
    ListResourcesResult, ReadResourceResponse, ReadResourceResult, Resource, ResourceContents,
};

use super::AtelierMcp;

/// The scheme of Atelier's resource URIs.
const SCHEME: &str = "atelier://";
/// The query naming the draft's version of a file.
const DRAFT: &str = "?view=draft";
/// The most resources listed.
const MAX_LISTED: usize = 1000;
/// The largest file read as a resource.
pub const MAX_RESOURCE_BYTES: u64 = 8 << 20;

fn uri(workbench: &str, path: &str, view: View) -> String {
    let query = if view == View::Draft { DRAFT } else { "" };
    format!("{SCHEME}{workbench}/{path}{query}")
}

fn resource(workbench: &str, file: &ManifestEntry, view: View) -> Resource {
    let name = match view {
        View::Draft => format!("{}/{} (draft)", workbench, file.path),
        _ => format!("{}/{}", workbench, file.path),
    };
    Resource::new(uri(workbench, &file.path, view), name).with_mime_type(media_type(&file.path))
}

/// Every file of the session's workbenches, published then draft.
pub(super) async fn list(server: &AtelierMcp) -> Result<ListResourcesResult, ErrorBody> {
    let workbenches = match &server.bound {
        Some(bound) => vec![bound.clone()],
        None => server
            .ask(&ListWorkbenches {
                v: PROTOCOL_VERSION,
            })
            .await?
            .into_iter()
            .map(|info| info.name)
            .collect(),
    };
    let mut listed = Vec::new();
    for workbench in workbenches {
        let published = listing(server, &workbench, View::Published).await?;
        let has_draft = published.has_draft;
        listed.extend(
            published
                .files
                .iter()
                .map(|f| resource(&workbench, f, View::Published)),
        );
        if has_draft {
            let draft = listing(server, &workbench, View::Draft).await?;
            listed.extend(
                draft
                    .files
                    .iter()
                    .map(|f| resource(&workbench, f, View::Draft)),
            );
        }
        if listed.len() >= MAX_LISTED {
            listed.truncate(MAX_LISTED);
            break;
        }
    }
    Ok(ListResourcesResult::with_all_items(listed))
}

async fn listing(server: &AtelierMcp, workbench: &str, view: View) -> Result<Listing, ErrorBody> {
    server
        .ask(&ListFiles {
            v: PROTOCOL_VERSION,
            workbench: workbench.to_string(),
            view,
        })
        .await
}

/// (workbench, path, view) of an `atelier://` URI.
fn parse(uri: &str) -> Result<(String, String, View), ErrorBody> {
    let not_ours = || {
        ErrorBody::new(
            ErrorCode::NotFound,
            format!("`{uri}` is not an Atelier resource: atelier://WORKBENCH/PATH[?view=draft]"),
        )
    };
    let rest = uri.strip_prefix(SCHEME).ok_or_else(not_ours)?;
    let (rest, view) = match rest.strip_suffix(DRAFT) {
        Some(rest) => (rest, View::Draft),
        None => (rest, View::Published),
    };
    let (workbench, path) = rest.split_once('/').ok_or_else(not_ours)?;
    if workbench.is_empty() || path.is_empty() {
        return Err(not_ours());
    }
    Ok((workbench.to_string(), path.to_string(), view))
}

pub(super) async fn read(
    server: &AtelierMcp,
    uri: &str,
) -> Result<ReadResourceResponse, ErrorBody> {
    let (workbench, path, view) = parse(uri)?;
    if server
        .bound
        .as_ref()
        .is_some_and(|bound| *bound != workbench)
    {
        return Err(ErrorBody::new(
            ErrorCode::NotFound,
            format!(
                "this server serves workbench `{}` only",
                server.bound.as_deref().unwrap_or_default()
            ),
        ));
    }
    let file: FileBytes = server
        .ask(&ReadFile {
            v: PROTOCOL_VERSION,
            workbench: workbench.clone(),
            path: path.clone(),
            view,
        })
        .await?;
    let bytes = content(server, &workbench, file).await?;
    let contents = match String::from_utf8(bytes) {
        Ok(text) if !media_type(&path).starts_with("application/vnd") => {
            ResourceContents::text(text, uri.to_string())
        }
        Ok(text) => ResourceContents::blob(
            data_encoding::BASE64.encode(text.as_bytes()),
            uri.to_string(),
        ),
        Err(binary) => ResourceContents::blob(
            data_encoding::BASE64.encode(binary.as_bytes()),
            uri.to_string(),
        ),
    };
    Ok(ReadResourceResult::new(vec![contents.with_mime_type(media_type(&path))]).into())
}

/// A file's bytes: inline, or fetched from the store in pieces.
async fn content(
    server: &AtelierMcp,
    workbench: &str,
    file: FileBytes,
) -> Result<Vec<u8>, ErrorBody> {
    let Some(blob) = &file.blob else {
        return Ok(file.content.into_vec());
    };
    if blob.size > MAX_RESOURCE_BYTES {
        return Err(ErrorBody::new(
            ErrorCode::ResultTooLarge,
            format!(
                "{} has {} bytes, more than a resource carries ({MAX_RESOURCE_BYTES}); read it with the tools, a part at a time",
                file.path, blob.size
            ),
        ));
    }
    let dir = tempfile::tempdir()
        .map_err(|error| ErrorBody::new(ErrorCode::Internal, error.to_string()))?;
    let target = dir.path().join("blob");
    pieces::fetch_to(&server.nats, Some(workbench), blob, &target, false, &|_| {}).await?;
    std::fs::read(&target)
        .map_err(|error| ErrorBody::new(ErrorCode::FileReadFailed, error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_the_workbench_the_path_and_the_view() {
        assert_eq!(
            parse("atelier://q3/reports/a b.docx?view=draft").ok(),
            Some(("q3".into(), "reports/a b.docx".into(), View::Draft))
        );
        assert_eq!(
            parse("atelier://q3/sales.csv").ok(),
            Some(("q3".into(), "sales.csv".into(), View::Published))
        );
        for bad in [
            "file:///etc/passwd",
            "atelier://q3",
            "atelier:///x",
            "atelier://q3/",
        ] {
            assert_eq!(
                parse(bad).err().map(|e| e.code),
                Some(ErrorCode::NotFound),
                "{bad}"
            );
        }
        assert_eq!(
            uri("q3", "a.csv", View::Draft),
            "atelier://q3/a.csv?view=draft"
        );
    }
}
