//! The client against a Messages API stand-in speaking the real protocol: streamed text, tool
//! use assembled from `input_json_delta` fragments, the exact request body and headers,
//! retries on 529, and a 401 that is not retried and does not leak the key.

use std::time::Duration;

use axum::response::Response;
use serde_json::{Value, json};

use super::*;
use crate::AgentError;
use crate::catalog::{ToolSpec, catalog};
use crate::http::test_server::{self, Received, run, simple_request, sse, status};
use crate::http::{ClientOptions, RetryPolicy};
use crate::provider::{ChatMessage, ModelProvider, ModelRequest, ToolCall, ToolChoice, Usage};

const KEY: &str = "sk-ant-test-secret-456";

/// Starts a Messages API stand-in; `respond(n)` answers the n-th request (0-based).
async fn serve<F>(respond: F) -> (String, Received)
where
    F: Fn(usize) -> Response + Clone + Send + Sync + 'static,
{
    test_server::serve("/v1/messages", respond).await
}

/// One server-sent event as the API sends it: its name, then its data (which repeats it).
fn event(data: Value) -> String {
    let name = data["type"].as_str().unwrap_or_default().to_string();
    format!("event: {name}\ndata: {data}\n\n")
}

fn message_start(input_tokens: u64) -> String {
    event(json!({"type": "message_start", "message": {
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}))
}

fn message_end(stop_reason: &str, output_tokens: u64) -> Vec<String> {
    vec![
        event(json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens}})),
        event(json!({"type": "message_stop"})),
    ]
}

fn text_stream() -> Response {
    let mut events = vec![
        message_start(25),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})),
        event(json!({"type": "ping"})),
        event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Hel"}})),
        // One event split over two chunks, with CRLF line ends.
        "event: content_block_delta\r\ndata: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_".to_string(),
        "delta\", \"text\": \"lo world\"}}\r\n\r\n".to_string(),
        event(json!({"type": "content_block_stop", "index": 0})),
    ];
    events.extend(message_end("end_turn", 7));
    sse(events)
}

/// Options with millisecond backoffs.
fn options(max_retries: u32) -> ClientOptions {
    ClientOptions {
        api_key: Some(KEY.into()),
        idle_timeout: Duration::from_secs(10),
        ..ClientOptions::new(RetryPolicy {
            max_retries,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
        })
    }
}

fn provider(base: &str, max_retries: u32) -> AnthropicProvider {
    AnthropicProvider::new(base, "claude-sonnet-4-5", options(max_retries)).expect("provider")
}

#[tokio::test]
async fn anthropic_streams_text_deltas_to_the_sink_with_usage_and_headers() {
    let (base, received) = serve(|_| text_stream()).await;
    let provider = provider(&base, 0);
    let (result, deltas) = run(&provider, &simple_request()).await;
    let response = result.expect("message");
    assert_eq!(response.content, "Hello world");
    assert_eq!(deltas, "Hello world");
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    assert!(response.tool_calls.is_empty());
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 25,
            completion_tokens: 7
        }
    );
    assert_eq!(
        received.body(0),
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 4096,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "stream": true
        })
    );
    assert_eq!(received.header(0, "x-api-key").as_deref(), Some(KEY));
    assert_eq!(
        received.header(0, "anthropic-version").as_deref(),
        Some("2023-06-01")
    );
    assert_eq!(
        received.header(0, "content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(received.header(0, "authorization"), None);
    assert_eq!(provider.label(), "anthropic:claude-sonnet-4-5");
}

fn tool_use_stream() -> Response {
    let mut events = vec![
        message_start(410),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})),
        event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Reading the map."}})),
        event(json!({"type": "content_block_stop", "index": 0})),
        event(json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_01A", "name": "table_get_map",
                "input": {}}})),
        event(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": ""}})),
        event(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"sal"}})),
        event(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "es.csv\", \"sheet\": 2}"}})),
        event(json!({"type": "content_block_stop", "index": 1})),
    ];
    events.extend(message_end("tool_use", 42));
    sse(events)
}

fn tool(name: &str) -> ToolSpec {
    catalog()
        .into_iter()
        .find(|spec| spec.name.as_str() == name)
        .expect("tool")
}

#[tokio::test]
async fn anthropic_assembles_tool_use_from_input_json_deltas() {
    let (base, _) = serve(|_| tool_use_stream()).await;
    let mut request = simple_request();
    request.tools = vec![tool("table_get_map")];
    request.tool_choice = ToolChoice::Required;
    let (result, deltas) = run(&provider(&base, 0), &request).await;
    let response = result.expect("message");
    assert_eq!(deltas, "Reading the map.");
    assert_eq!(response.content, "Reading the map.");
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "toolu_01A".into(),
            name: "table_get_map".into(),
            arguments: "{\"path\": \"sales.csv\", \"sheet\": 2}".into(),
        }]
    );
    let arguments: Value =
        serde_json::from_str(&response.tool_calls[0].arguments).expect("arguments are JSON");
    assert_eq!(arguments, json!({"path": "sales.csv", "sheet": 2}));
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 410,
            completion_tokens: 42
        }
    );
}

#[tokio::test]
async fn anthropic_sends_system_tools_tool_choice_and_merged_tool_results() {
    let (base, received) = serve(|_| text_stream()).await;
    let provider = provider(&base, 0);
    let calls = vec![
        ToolCall {
            id: "toolu_1".into(),
            name: "list_files".into(),
            arguments: "{}".into(),
        },
        ToolCall {
            id: "toolu_2".into(),
            name: "table_get_map".into(),
            arguments: "{\"path\":\"sales.csv\"}".into(),
        },
    ];
    let tools = vec![tool("list_files"), tool("table_get_map")];
    let mut request = ModelRequest {
        resample: false,
        phase: "research".into(),
        item_index: None,
        messages: vec![
            ChatMessage::system("Research."),
            ChatMessage::system("Files: sales.csv"),
            ChatMessage::user("Summarize sales.csv"),
            ChatMessage::assistant("Looking.", calls),
            ChatMessage::tool_result("toolu_1", "[\"sales.csv\"]"),
            ChatMessage::tool_result("toolu_2", "{\"rows\":120}"),
        ],
        tools: tools.clone(),
        tool_choice: ToolChoice::Required,
        answer: crate::answer::AnswerShape::Text,
    };
    let (result, _) = run(&provider, &request).await;
    result.expect("message");
    let schema = |spec: &ToolSpec| spec.parameters.clone();
    assert_eq!(
        received.body(0),
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 4096,
            "system": "Research.\n\nFiles: sales.csv",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Summarize sales.csv"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "list_files", "input": {}},
                    {"type": "tool_use", "id": "toolu_2", "name": "table_get_map",
                        "input": {"path": "sales.csv"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "[\"sales.csv\"]"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "{\"rows\":120}"}
                ]}
            ],
            "stream": true,
            "tools": [
                {"name": "list_files", "description": tools[0].description,
                    "input_schema": schema(&tools[0])},
                {"name": "table_get_map", "description": tools[1].description,
                    "input_schema": schema(&tools[1])}
            ],
            "tool_choice": {"type": "any"}
        })
    );
    for (choice, expected) in [(ToolChoice::Auto, "auto"), (ToolChoice::None, "none")] {
        request.tool_choice = choice;
        let (result, _) = run(&provider, &request).await;
        result.expect("message");
        let body = received.body(received.count() - 1);
        assert_eq!(body["tool_choice"], json!({"type": expected}));
    }
}

#[tokio::test]
async fn anthropic_retries_529_overloaded_then_succeeds() {
    let (base, received) = serve(|n| {
        if n == 0 {
            status(
                529,
                &[("content-type", "application/json"), ("retry-after", "0")],
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
        } else {
            text_stream()
        }
    })
    .await;
    let (result, deltas) = run(&provider(&base, 2), &simple_request()).await;
    assert_eq!(result.expect("message").content, "Hello world");
    assert_eq!(deltas, "Hello world");
    assert_eq!(received.count(), 2);
    assert_eq!(received.body(0), received.body(1));
}

#[tokio::test]
async fn anthropic_gives_up_on_persistent_529_with_the_servers_message() {
    let (base, received) = serve(|_| {
        status(
            529,
            &[("retry-after", "0")],
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )
    })
    .await;
    let (result, _) = run(&provider(&base, 1), &simple_request()).await;
    let error = result.expect_err("overloaded");
    assert_eq!(
        error.to_string(),
        "the provider is unavailable: HTTP 529: overloaded_error: Overloaded"
    );
    assert_eq!(
        error.code(),
        atelier_messages::ErrorCode::ProviderUnavailable
    );
    assert_eq!(received.count(), 2);
}

#[tokio::test]
async fn anthropic_does_not_retry_401_and_keeps_the_key_out_of_errors() {
    let (base, received) = serve(|_| {
        let body = format!(
            r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {KEY}"}}}}"#
        );
        status(401, &[("content-type", "application/json")], &body)
    })
    .await;
    let provider = provider(&base, 3);
    let (result, _) = run(&provider, &simple_request()).await;
    let error = result.expect_err("auth failed");
    assert!(matches!(error, AgentError::AuthFailed(_)), "{error}");
    assert_eq!(
        error.code(),
        atelier_messages::ErrorCode::ProviderAuthFailed
    );
    assert_eq!(
        error.to_string(),
        "the provider rejected the credentials: HTTP 401: authentication_error: invalid \
         x-api-key <redacted>"
    );
    assert!(!format!("{provider:?}").contains(KEY));
    assert_eq!(received.count(), 1);
}

#[tokio::test]
async fn anthropic_reports_400_at_once_with_the_servers_message() {
    let (base, received) = serve(|_| {
        status(
            400,
            &[("content-type", "application/json")],
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}"#,
        )
    })
    .await;
    let (result, _) = run(&provider(&base, 3), &simple_request()).await;
    let error = result.expect_err("bad request");
    assert!(
        matches!(error, AgentError::RequestRefused { status: 400, ref message }
            if message == "invalid_request_error: max_tokens: Field required"),
        "{error}"
    );
    assert_eq!(received.count(), 1);
}

#[tokio::test]
async fn anthropic_retries_an_overloaded_error_event_mid_stream() {
    let (base, received) = serve(|n| {
        if n == 0 {
            sse(vec![
                message_start(25),
                event(json!({"type": "error",
                    "error": {"type": "overloaded_error", "message": "Overloaded"}})),
            ])
        } else {
            text_stream()
        }
    })
    .await;
    let (result, _) = run(&provider(&base, 1), &simple_request()).await;
    let response = result.expect("message");
    assert_eq!(response.content, "Hello world");
    assert_eq!(response.usage.prompt_tokens, 25);
    assert_eq!(received.count(), 2);
}

#[tokio::test]
async fn anthropic_sums_usage_over_a_nudged_turn_and_uses_the_profile_max_tokens() {
    let (base, received) = serve(|n| {
        if n == 0 {
            let mut events = vec![message_start(100)];
            events.extend(message_end("end_turn", 0));
            sse(events)
        } else {
            tool_use_stream()
        }
    })
    .await;
    let provider = AnthropicProvider::new(
        &base,
        "claude-sonnet-4-5",
        ClientOptions {
            max_tokens: Some(1024),
            ..options(0)
        },
    )
    .expect("provider");
    let mut request = simple_request();
    request.tools = vec![tool("table_get_map")];
    request.tool_choice = ToolChoice::Required;
    let (result, _) = run(&provider, &request).await;
    let response = result.expect("message");
    assert_eq!(response.tool_calls[0].name, "table_get_map");
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 510,
            completion_tokens: 42
        }
    );
    assert_eq!(received.count(), 2);
    assert_eq!(received.body(0)["max_tokens"], 1024);
    // The empty reply is left out and the nudge joins the user turn before it.
    let retry = received.body(1);
    let messages = retry["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(
        messages[0]["content"][0],
        json!({"type": "text", "text": "Hi"})
    );
    assert_eq!(messages[0]["content"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn anthropic_treats_a_stream_without_a_stop_as_unavailable() {
    let (base, received) = serve(|_| sse(vec![message_start(3)])).await;
    let (result, _) = run(&provider(&base, 1), &simple_request()).await;
    let error = result.expect_err("unavailable");
    assert!(
        matches!(error, AgentError::Unavailable(ref m) if m.contains("ended before")),
        "{error}"
    );
    assert_eq!(received.count(), 2);
}

#[tokio::test]
async fn anthropic_accepts_a_plain_message() {
    let (base, _) = serve(|_| {
        let body = json!({
            "id": "msg_02", "type": "message", "role": "assistant",
            "content": [
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_9", "name": "list_files", "input": {"glob": "*"}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 9, "output_tokens": 4}
        });
        status(
            200,
            &[("content-type", "application/json")],
            &body.to_string(),
        )
    })
    .await;
    let (result, deltas) = run(&provider(&base, 0), &simple_request()).await;
    let response = result.expect("message");
    assert_eq!(deltas, "Listing.");
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "toolu_9".into(),
            name: "list_files".into(),
            arguments: "{\"glob\":\"*\"}".into(),
        }]
    );
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 9,
            completion_tokens: 4
        }
    );
}

#[test]
fn anthropic_requires_a_key() {
    let error = AnthropicProvider::new(
        DEFAULT_BASE_URL,
        "claude-sonnet-4-5",
        ClientOptions::new(RetryPolicy::new(0)),
    )
    .expect_err("no key");
    assert!(
        matches!(error, AgentError::NotConfigured(ref m) if m.contains("ANTHROPIC_API_KEY")),
        "{error}"
    );
}
