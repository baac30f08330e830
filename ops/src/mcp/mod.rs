//! `atelier mcp`: Atelier's workbenches for MCP clients (Claude Desktop and Code, Cursor, VS
//! Code, Zed, agent frameworks) on stdio, built on the official Rust SDK (`rmcp`).
//!
//! - **Tools**: every worker tool of the catalog (`read_file`, `table_query`,
//!   `xlsx_operations`, …) with its schema from the catalog and a `workbench` argument (unless
//!   the server is bound with `--workbench`), `readOnlyHint`/`destructiveHint` from its
//!   capability and action class; plus `list_workbenches`, `draft_diff` (the content review)
//!   and `submit_job` (a whole task for Atelier's own agent, with progress notifications).
//! - A reading tool is one request to its worker pool over the files the agent would see (the
//!   draft when there is one). A writing tool runs as a one-step job, as `atelier run` does:
//!   journaled, applied to the draft once — the job id comes from the session and the MCP
//!   request id, so a request sent again changes nothing more —, waiting for approval where the
//!   workbench's policy asks (`atelier approve JOB`). Nothing is ever published.
//! - **Resources**: each file as `atelier://WORKBENCH/PATH` (published) and
//!   `atelier://WORKBENCH/PATH?view=draft`.
//! - **Errors**: MCP errors whose `data.code` is Atelier's stable code (`NOT_FOUND`,
//!   `SANDBOX_VIOLATION`, `VALIDATION_FAILED`, …).
//! - The same server answers streamable HTTP at the dashboard's `/mcp` ([`http_service`]),
//!   behind the dashboard's host check and token, with bounded sessions (`http`).
//!
//! stdout carries only the protocol; logs go to stderr.

mod http;
mod jobs;
mod resources;

use std::process::ExitCode;

use atelier_agents::catalog::{self, ToolSpec};
use atelier_messages::approval::ActionClass;
use atelier_messages::review::ReviewDraft;
use atelier_messages::store::{ListFiles, ListWorkbenches, Listing, View};
use atelier_messages::tool::{ToolOutput, ToolRequest};
use atelier_messages::verb::Verb;
use atelier_messages::{ErrorBody, ErrorCode, PROTOCOL_VERSION};
use atelier_transport::Policy;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tracing::Instrument;

pub use self::http::{
    DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE_SECS, SessionLimits, http_service,
};

/// How long one store or control request may take.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Serves MCP on stdin/stdout until the client goes away.
pub async fn serve_stdio(
    nats: async_nats::Client,
    workbench: Option<String>,
) -> anyhow::Result<ExitCode> {
    let server = AtelierMcp::new(nats, workbench);
    let service = server.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(ExitCode::SUCCESS)
}

/// One MCP session's server.
#[derive(Clone)]
pub struct AtelierMcp {
    nats: async_nats::Client,
    /// The workbench every call is about (`--workbench`); none: each call names one.
    bound: Option<String>,
    /// This session's id, in the ids of the calls and jobs it makes.
    session: String,
}

/// An MCP error carrying Atelier's code in `data.code`, and at the head of the message for hosts
/// that show only the message (`SANDBOX_VIOLATION: path …`).
fn mcp_error(error: ErrorBody) -> McpError {
    let data = Some(json!({ "code": error.code.as_str() }));
    let message = format!("{}: {}", error.code, error.message);
    match error.code {
        ErrorCode::Internal => McpError::internal_error(message, data),
        _ => McpError::invalid_params(message, data),
    }
}

fn invalid(message: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::ValidationFailed, message)
}

/// The worker tools of the catalog (not the ones the agent answers itself).
fn worker_tools() -> Vec<ToolSpec> {
    catalog::catalog()
        .into_iter()
        .filter(|spec| spec.pool().is_some())
        .collect()
}

/// A tool Atelier adds to the catalog's.
struct OwnTool {
    name: &'static str,
    description: &'static str,
    /// Its arguments' properties and the required ones (besides `workbench`).
    properties: fn() -> Value,
    required: &'static [&'static str],
    /// About one workbench (it takes `workbench` unless the session is bound).
    per_workbench: bool,
    read_only: bool,
}

const OWN_TOOLS: [OwnTool; 3] = [
    OwnTool {
        name: "list_workbenches",
        description: "List the workbenches: name, number of published files, whether a draft waits and since when.",
        properties: || json!({}),
        required: &[],
        per_workbench: false,
        read_only: true,
    },
    OwnTool {
        name: "draft_diff",
        description: "What the workbench's draft changes against its published files, file by file (added, modified, deleted) and inside each file (cells, paragraphs, slides, lines).",
        properties: || json!({}),
        required: &[],
        per_workbench: true,
        read_only: true,
    },
    OwnTool {
        name: "submit_job",
        description: "Hand a whole task to Atelier's own agent on a workbench: it researches, plans and carries it out in the draft (never published). Reports progress and answers with its summary and the files it changed.",
        properties: || {
            json!({
                "message": {"type": "string", "description": "The task, as to a colleague."},
                "model": {"type": "string", "description": "Model spec or profile (default: the workbench's)."},
                "continue_draft": {"type": "boolean", "description": "Work on the draft that waits (else a draft refuses the task)."}
            })
        },
        required: &["message"],
        per_workbench: true,
        read_only: false,
    },
];

impl AtelierMcp {
    /// A new session's server, bound to `workbench` when given.
    fn new(nats: async_nats::Client, workbench: Option<String>) -> Self {
        Self {
            nats,
            bound: workbench,
            session: uuid::Uuid::now_v7().simple().to_string(),
        }
    }

    /// A request to a coordinator verb, its error kept whole.
    async fn ask<V: Verb>(&self, request: &V) -> Result<V::Reply, ErrorBody> {
        atelier_transport::request(&self.nats, request, Policy::once(REQUEST_TIMEOUT)).await
    }

    /// `schema` with a required `workbench` property unless the session is bound to one.
    fn with_workbench(&self, mut schema: Value) -> Map<String, Value> {
        if self.bound.is_none() {
            schema["properties"]["workbench"] =
                json!({"type": "string", "description": "The workbench (see list_workbenches)."});
            match schema["required"].as_array_mut() {
                Some(required) => required.insert(0, json!("workbench")),
                None => schema["required"] = json!(["workbench"]),
            }
        }
        match schema {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    fn tools(&self) -> Vec<Tool> {
        let mut tools: Vec<Tool> = worker_tools()
            .iter()
            .map(|spec| {
                let annotations = ToolAnnotations::new()
                    .read_only(spec.is_read_only())
                    .destructive(spec.action_class == ActionClass::Destructive);
                Tool::new(
                    spec.name.as_str(),
                    spec.description,
                    self.with_workbench(spec.parameters.clone()),
                )
                .with_annotations(annotations)
            })
            .collect();
        for own in &OWN_TOOLS {
            let schema = json!({"type": "object", "properties": (own.properties)(), "required": own.required});
            let schema = match (own.per_workbench, schema) {
                (true, schema) => self.with_workbench(schema),
                (false, Value::Object(map)) => map,
                (false, _) => Map::new(),
            };
            let annotations = ToolAnnotations::new()
                .read_only(own.read_only)
                .destructive(false);
            tools.push(Tool::new(own.name, own.description, schema).with_annotations(annotations));
        }
        tools
    }

    /// The workbench a call is about, and its other arguments.
    fn workbench_of(&self, mut args: Map<String, Value>) -> Result<(String, Value), ErrorBody> {
        let named = args.remove("workbench");
        let workbench = match (&self.bound, named) {
            (Some(bound), _) => bound.clone(),
            (None, Some(Value::String(named))) => named,
            (None, _) => {
                return Err(invalid(
                    "the call names no workbench: pass `workbench` (see list_workbenches)",
                ));
            }
        };
        check_workbench_name(&workbench)?;
        Ok((workbench, Value::Object(args)))
    }

    /// An id for this call, unique per session and MCP request (the same request sent again
    /// gets the same id): a short numeric or alphanumeric request id as it is, any other
    /// (punctuation, length) by its hash, so two ids never meet.
    fn call_id(&self, context: &RequestContext<RoleServer>) -> String {
        use std::hash::{Hash, Hasher};
        let request = context.id.to_string();
        let plain = request.len() <= 20 && request.chars().all(|c| c.is_ascii_alphanumeric());
        if plain {
            return format!("mcp-{}-{request}", self.session);
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        request.hash(&mut hasher);
        format!("mcp-{}-_{:016x}", self.session, hasher.finish())
    }

    async fn run(
        &self,
        name: &str,
        args: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorBody> {
        if name == "list_workbenches" {
            let listed = self
                .ask(&ListWorkbenches {
                    v: PROTOCOL_VERSION,
                })
                .await?;
            return Ok(json!({ "workbenches": listed }));
        }
        let (workbench, args) = self.workbench_of(args)?;
        match name {
            "draft_diff" => {
                let review = ReviewDraft {
                    v: PROTOCOL_VERSION,
                    workbench,
                    sample: None,
                };
                to_value(&self.ask(&review).await?)
            }
            "submit_job" => jobs::submit_job(self, &workbench, &args, context).await,
            _ => {
                let Some(spec) = worker_tools().into_iter().find(|s| s.name.as_str() == name)
                else {
                    return Err(invalid(format!(
                        "unknown tool `{name}`; the tools are in tools/list"
                    )));
                };
                match spec.is_read_only() {
                    true => self.read(&spec, workbench, args, context).await,
                    false => jobs::write(self, &spec, &workbench, args, context).await,
                }
            }
        }
    }

    /// A reading tool over the files the agent would see now.
    async fn read(
        &self,
        spec: &ToolSpec,
        workbench: String,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorBody> {
        let listing: Listing = self
            .ask(&ListFiles {
                v: PROTOCOL_VERSION,
                workbench: workbench.clone(),
                view: View::Current,
            })
            .await?;
        let Some(pool) = spec.pool() else {
            return Err(invalid(format!("`{}` is not a worker tool", spec.name)));
        };
        let request = ToolRequest {
            v: PROTOCOL_VERSION,
            call_id: self.call_id(context),
            job_id: None,
            workbench,
            tool: spec.name.to_string(),
            args,
            files: listing.files,
        };
        let output: ToolOutput =
            atelier_transport::request_to(&self.nats, &pool.subject(), &request, Policy::TOOLS)
                .await?;
        Ok(output.output)
    }
}

/// Refuses a workbench name no workbench can have (`VALIDATION_FAILED`) before it reaches a job:
/// 1 to 64 characters of `A-Z a-z 0-9 . _ -`, not starting with a dot, as the coordinator
/// names them. A name with control characters would otherwise be recorded as a failed job's.
pub(crate) fn check_workbench_name(name: &str) -> Result<(), ErrorBody> {
    let max = atelier_coordinator::workbench::MAX_NAME_LEN;
    let valid = !name.is_empty()
        && name.len() <= max
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        return Ok(());
    }
    let shown = crate::output::shown(name.get(..max).unwrap_or(name)).to_string();
    Err(invalid(format!(
        "`{shown}` is no workbench name: 1 to {max} characters of A-Z a-z 0-9 . _ - and not \
         starting with a dot"
    )))
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, ErrorBody> {
    serde_json::to_value(value)
        .map_err(|error| ErrorBody::new(ErrorCode::Internal, error.to_string()))
}

/// A tool's answer as MCP structured content (an object; anything else under `result`).
fn answer(value: Value) -> CallToolResponse {
    let object = match value {
        Value::Object(_) => value,
        other => json!({ "result": other }),
    };
    CallToolResult::structured(object).into()
}

impl ServerHandler for AtelierMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("atelier", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Atelier's workbenches: read their files, query tables with SQL, edit office \
             documents. Every write lands in the workbench's draft, which a person reviews \
             (`atelier draft diff`) and publishes.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        let span = tracing::info_span!("mcp_call", tool = %request.name);
        self.run(request.name.as_ref(), args, &context)
            .instrument(span)
            .await
            .map(answer)
            .map_err(mcp_error)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        resources::list(self).await.map_err(mcp_error)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        resources::read(self, &request.uri).await.map_err(mcp_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workbench_names_are_checked_before_any_job() {
        assert!(check_workbench_name("q3.sales_2024-v2").is_ok());
        for bad in [
            "",
            ".hidden",
            "a/b",
            "q3\u{1b}[31m",
            "q3\u{7}",
            &"x".repeat(65),
        ] {
            let refused = check_workbench_name(bad).map_err(|e| e.code);
            assert_eq!(refused, Err(ErrorCode::ValidationFailed), "{bad:?}");
        }
        let message = check_workbench_name("q3\u{1b}[31m")
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert!(!message.contains('\u{1b}'), "{message:?}");
    }
}
