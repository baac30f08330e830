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
//!   journaled, applied to the draft once — the job id comes from the session, the MCP request
//!   id and what the call asks (tool and arguments), so the same request sent again changes
//!   nothing more, and a request id used again for another call is another job —, waiting for
//!   approval where the workbench's policy asks (`atelier approve JOB`). Nothing is ever
//!   published.
//! - **Resources**: each file as `atelier://WORKBENCH/PATH` (published) and
//!   `atelier://WORKBENCH/PATH?view=draft`.
//! - **Errors**: a refused tool call is a tool result with `isError: true` (SEP-1303) whose
//!   `structuredContent.error.code` is Atelier's stable code (`NOT_FOUND`, `SANDBOX_VIOLATION`,
//!   `VALIDATION_FAILED`, …), so the host's model reads it and corrects the call (`refusal`);
//!   an unknown tool and a refused resource request are JSON-RPC errors with the code in
//!   `data.code`.
//! - The same server answers streamable HTTP at the dashboard's `/mcp` ([`http_service`]),
//!   behind the dashboard's host check and token, with bounded sessions (`http`).
//!
//! stdout carries only the protocol; logs go to stderr.

mod http;
mod jobs;
mod refusal;
mod resources;

use std::process::ExitCode;

use atelier_agents::catalog::{self, ToolSpec};
use atelier_messages::approval::ActionClass;
use atelier_messages::review::ReviewDraft;
use atelier_messages::store::{ListWorkbenches, View};
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

/// A JSON-RPC error (of a resource request) carrying Atelier's code in `data.code`, and at the
/// head of the message for hosts that show only the message (`NOT_FOUND: …`).
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

/// Whether `name` is a tool this server offers (any session: binding only drops `workbench`).
fn offered(name: &str) -> bool {
    OWN_TOOLS.iter().any(|own| own.name == name)
        || worker_tools().iter().any(|spec| spec.name.as_str() == name)
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
                "continue_draft": {"type": "boolean", "description": "Work on the draft that waits (else a draft refuses the task)."},
                "budget_tokens": {"type": "integer", "minimum": 1, "description": "Stop the job (BUDGET_EXCEEDED, draft kept) once it spent this many model tokens."},
                "budget_usd": {"type": "number", "exclusiveMinimum": 0, "description": "Stop the job once it spent this many dollars at the model profile's prices."}
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

    /// An id for this call (the id of its job when it writes): the session, then a digest of
    /// the MCP request id and of what the call asks (the tool and its arguments, keys in order).
    /// The same request sent again gets the same id, so it finds its job instead of writing
    /// again; a request id used again for another call gets another id, so it is never answered
    /// with the first call's result.
    fn call_id(
        &self,
        context: &RequestContext<RoleServer>,
        tool: &str,
        args: &Map<String, Value>,
    ) -> String {
        let mut asked = String::new();
        canonical(&Value::Object(args.clone()), &mut asked);
        let request = context.id.to_string();
        format!("mcp-{}-{}", self.session, digest(&[&request, tool, &asked]))
    }

    async fn run(
        &self,
        name: &str,
        args: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorBody> {
        let call_id = self.call_id(context, name, &args);
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
            "submit_job" => jobs::submit_job(self, &call_id, &workbench, &args, context).await,
            _ => {
                let Some(spec) = worker_tools().into_iter().find(|s| s.name.as_str() == name)
                else {
                    return Err(invalid(format!(
                        "unknown tool `{name}`; the tools are in tools/list"
                    )));
                };
                match spec.is_read_only() {
                    true => self.read(&spec, call_id, workbench, args).await,
                    false => jobs::write(self, &call_id, &spec, &workbench, args, context).await,
                }
            }
        }
    }

    /// A reading tool over the files the agent would see now.
    async fn read(
        &self,
        spec: &ToolSpec,
        call_id: String,
        workbench: String,
        args: Value,
    ) -> Result<Value, ErrorBody> {
        crate::read_tool::run(
            &self.nats,
            &workbench,
            View::Current,
            spec.name,
            args,
            call_id,
        )
        .await
    }
}

/// Refuses a workbench name no workbench can have (`VALIDATION_FAILED`) before it reaches a job:
/// 1 to 64 characters of `A-Z a-z 0-9 . _ -`, not starting with a dot, as the coordinator
/// names them. A name with control characters would otherwise be recorded as a failed job's.
pub(crate) fn check_workbench_name(name: &str) -> Result<(), ErrorBody> {
    let max = atelier_messages::path::MAX_WORKBENCH_NAME_LEN;
    if atelier_messages::path::is_workbench_name(name) {
        return Ok(());
    }
    let shown = crate::output::shown(name.get(..max).unwrap_or(name)).to_string();
    Err(invalid(format!(
        "`{shown}` is no workbench name: 1 to {max} characters of A-Z a-z 0-9 . _ - and not \
         starting with a dot"
    )))
}

/// `value` as JSON with every object's keys in order, so that two spellings of the same
/// arguments read the same.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (n, key) in keys.into_iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// 96 bits (24 hex digits) digesting `parts`, each told apart from the next by its length.
/// Stable within one process, which is as long as a session's ids must be.
fn digest(parts: &[&str]) -> String {
    use std::hash::{Hash, Hasher};
    let mut out = String::new();
    for seed in [0x5eed_u64, 0x0a7e_11e7] {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut hasher);
        for part in parts {
            part.hash(&mut hasher);
        }
        out.push_str(&format!("{:016x}", hasher.finish()));
    }
    out.truncate(24);
    out
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
        let name = request.name.as_ref();
        if !offered(name) {
            return Err(refusal::unknown_tool(name));
        }
        let args = request.arguments.unwrap_or_default();
        let span = tracing::info_span!("mcp_call", tool = %name);
        let answered = self.run(name, args, &context).instrument(span).await;
        Ok(match answered {
            Ok(value) => answer(value),
            Err(refused) => refusal::tool_error(&refused).into(),
        })
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

    fn spelled(value: &Value) -> String {
        let mut out = String::new();
        canonical(value, &mut out);
        out
    }

    #[test]
    fn a_calls_id_tells_what_it_asks_apart_and_not_how_it_is_spelt() {
        let one = spelled(&json!({"path": "a.txt", "n": {"b": 1, "a": [1, {"d": 2, "c": 3}]}}));
        let same = spelled(&json!({"n": {"a": [1, {"c": 3, "d": 2}], "b": 1}, "path": "a.txt"}));
        let other = spelled(&json!({"path": "b.txt", "n": {"b": 1, "a": [1, {"d": 2, "c": 3}]}}));
        assert_eq!(one, same);
        let id = |args: &str| digest(&["40", "write_text_file", args]);
        assert_eq!(id(&one), id(&same));
        assert_ne!(id(&one), id(&other));
        assert_ne!(
            digest(&["40", "write_text_file", &one]),
            digest(&["41", "write_text_file", &one])
        );
        // Each part is told apart from the next.
        assert_ne!(digest(&["4", "0x"]), digest(&["40", "x"]));
        // `mcp-SESSION-DIGEST` is a job id (at most 64 characters).
        let job_id = format!("mcp-{}-{}", uuid::Uuid::now_v7().simple(), id(&one));
        assert!(
            atelier_messages::job::JobSubmit::new(job_id, "q3".into(), "x".into())
                .validate()
                .is_ok()
        );
    }

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
