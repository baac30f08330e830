//! A read-only workbench tool run directly on its worker pool over one view's files: the MCP
//! server's reading tools and the dashboard's previews. Nothing is journaled and nothing
//! changes; the call goes to the pool as a job's would, with the same limits and codes.

use std::time::Duration;

use atelier_messages::store::{ListFiles, Listing, View};
use atelier_messages::tool::{ToolName, ToolOutput, ToolRequest};
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use atelier_transport::Policy;
use serde_json::Value;

/// How long listing the view's files may take.
const LISTING_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the read-only `tool` with `args` over the files of `workbench`'s `view`; its result
/// object, or its error as the pool gave it.
pub async fn run(
    nats: &async_nats::Client,
    workbench: &str,
    view: View,
    tool: ToolName,
    args: Value,
    call_id: String,
) -> Result<Value, ErrorBody> {
    let listing = files(nats, workbench, view).await?;
    run_over(nats, &listing, tool, args, call_id).await
}

/// The files of `workbench`'s `view`.
pub async fn files(
    nats: &async_nats::Client,
    workbench: &str,
    view: View,
) -> Result<Listing, ErrorBody> {
    let request = ListFiles {
        v: PROTOCOL_VERSION,
        workbench: workbench.to_string(),
        view,
    };
    atelier_transport::request(nats, &request, Policy::once(LISTING_TIMEOUT)).await
}

/// Runs the read-only `tool` with `args` over the files `listing` holds.
pub async fn run_over(
    nats: &async_nats::Client,
    listing: &Listing,
    tool: ToolName,
    args: Value,
    call_id: String,
) -> Result<Value, ErrorBody> {
    let Some(pool) = tool.pool() else {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!("`{tool}` is not a worker tool"),
        ));
    };
    let request = ToolRequest {
        v: PROTOCOL_VERSION,
        call_id,
        job_id: None,
        workbench: listing.workbench.clone(),
        tool: tool.to_string(),
        args,
        files: listing.files.clone(),
    };
    let output: ToolOutput =
        atelier_transport::request_to(nats, &pool.subject(), &request, Policy::TOOLS).await?;
    Ok(output.output)
}
