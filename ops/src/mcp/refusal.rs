//! A refused tool call as MCP says (SEP-1303): a tool *result* with `isError: true`, so the
//! host's model reads the message and corrects its call. Its text names Atelier's code, what
//! went wrong and what to do; its `structuredContent` is
//! `{"error": {"code": "SANDBOX_VIOLATION", "message": "…"}}`. Only a call the protocol cannot
//! route (a tool this server does not offer) is a JSON-RPC error.

use atelier_messages::{ErrorBody, ErrorCode};
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

/// `error` as a tool result the model reads.
pub(super) fn tool_error(error: &ErrorBody) -> CallToolResult {
    let mut result = CallToolResult::structured_error(json!({
        "error": {"code": error.code.as_str(), "message": error.message}
    }));
    let mut text = format!("{}: {}", error.code, error.message);
    if let Some(hint) = what_to_do(error.code) {
        text.push_str("\nWhat to do: ");
        text.push_str(hint);
    }
    result.content = vec![ContentBlock::text(text)];
    result
}

/// A call of a tool this server does not offer: JSON-RPC `-32602` (invalid params), as the
/// specification answers an unknown tool, with Atelier's code in `data.code`.
pub(super) fn unknown_tool(name: &str) -> McpError {
    let code = ErrorCode::ValidationFailed;
    McpError::invalid_params(
        format!("{code}: unknown tool `{name}`; the tools are in tools/list"),
        Some(json!({ "code": code.as_str() })),
    )
}

/// What a model can do about a refusal of `code`, when there is something.
fn what_to_do(code: ErrorCode) -> Option<&'static str> {
    Some(match code {
        ErrorCode::ValidationFailed => {
            "correct the arguments as the tool's input schema and the message say, then call again"
        }
        ErrorCode::SandboxViolation => {
            "name the file by its path inside the workbench, as list_files shows it"
        }
        ErrorCode::NotFound => {
            "check the name: list_workbenches lists the workbenches, list_files a workbench's files"
        }
        ErrorCode::FileReadFailed => {
            "list_files shows the workbench's files; a file that is there but cannot be read will not read on a retry either"
        }
        ErrorCode::DraftExists => {
            "call again with continue_draft: true to work on the draft that waits, or ask a person to publish or discard it"
        }
        ErrorCode::WorkbenchBusy => "wait for the running job to end, then call again",
        ErrorCode::ApprovalRejected => {
            "a person rejected this call: do not send it again unchanged; ask them why"
        }
        ErrorCode::ResultTooLarge => "ask for less: a part of the file, fewer rows or columns",
        ErrorCode::QueryOutOfMemory => {
            "narrow the query (filters, fewer columns, aggregate in steps) rather than retrying it unchanged"
        }
        ErrorCode::ToolWorkerUnavailable | ErrorCode::ToolTimeout | ErrorCode::ShardUnavailable => {
            "try again in a moment"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_a_tool_result_with_the_code_the_message_and_what_to_do() {
        let refused = ErrorBody::new(
            ErrorCode::SandboxViolation,
            "path \"../x.csv\" leaves the workbench",
        );
        let result = tool_error(&refused);
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.structured_content,
            Some(json!({"error": {
                "code": "SANDBOX_VIOLATION",
                "message": "path \"../x.csv\" leaves the workbench"
            }}))
        );
        let text = result
            .content
            .first()
            .and_then(|content| content.as_text())
            .map(|text| text.text.clone())
            .unwrap_or_default();
        assert!(
            text.starts_with("SANDBOX_VIOLATION: path \"../x.csv\" leaves the workbench\nWhat to do: name the file by its path"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_tool_is_a_json_rpc_invalid_params_error() {
        let error = unknown_tool("format_disk");
        assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert_eq!(error.data, Some(json!({"code": "VALIDATION_FAILED"})));
        assert!(error.message.contains("format_disk"), "{}", error.message);
    }
}
