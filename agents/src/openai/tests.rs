//! The client against a Chat Completions stand-in: streaming, tool calls, plain JSON answers,
//! retries, and failures that must not leak the API key.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::http::HeaderMap as AxumHeaders;
use axum::response::Response;
use axum::routing::post;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::AgentError;
use crate::catalog::catalog;
use crate::provider::{
    ChatMessage, ModelProvider, ModelRequest, ModelResponse, ToolCall, ToolChoice, Usage,
};

const KEY: &str = "sk-test-secret-123";

/// What the test server received.
#[derive(Clone, Default)]
struct Received {
    bodies: Arc<Mutex<Vec<Value>>>,
    auth: Arc<Mutex<Vec<Option<String>>>>,
}

impl Received {
    fn count(&self) -> usize {
        self.bodies.lock().expect("lock").len()
    }

    fn body(&self, n: usize) -> Value {
        self.bodies.lock().expect("lock")[n].clone()
    }
}

/// Starts a Chat Completions stand-in; `respond(n)` answers the n-th request (0-based).
async fn serve<F>(respond: F) -> (String, Received)
where
    F: Fn(usize) -> Response + Clone + Send + Sync + 'static,
{
    let received = Received::default();
    let recorder = received.clone();
    let handler = move |headers: AxumHeaders, Json(body): Json<Value>| {
        let recorder = recorder.clone();
        let respond = respond.clone();
        async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            recorder.auth.lock().expect("lock").push(auth);
            let mut bodies = recorder.bodies.lock().expect("lock");
            bodies.push(body);
            respond(bodies.len() - 1)
        }
    };
    let app = Router::new().route("/v1/chat/completions", post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1"), received)
}

/// An SSE answer sent as the given body chunks.
fn sse(chunks: Vec<String>) -> Response {
    let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, Infallible>));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .expect("response")
}

fn event(value: Value) -> String {
    format!("data: {value}\n\n")
}

fn status(code: u16, headers: &[(&str, &str)], body: &str) -> Response {
    let mut builder = Response::builder().status(code);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder
        .body(Body::from(body.to_string()))
        .expect("response")
}

fn text_stream() -> Response {
    sse(vec![
        ": keep-alive\n\n".to_string(),
        event(json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})),
        event(json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]})),
        // One event split over two chunks, with CRLF line ends.
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"con".to_string(),
        "tent\": \"lo \"}}]}\r\n\r\n".to_string(),
        event(
            json!({"choices": [{"index": 0, "delta": {"content": "world"}, "finish_reason": null}]}),
        ),
        event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
        event(json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}})),
        "data: [DONE]\n\n".to_string(),
    ])
}

/// Options with a short timeout and millisecond backoffs.
fn options(api_key: Option<&str>, max_retries: u32) -> ClientOptions {
    ClientOptions {
        api_key: api_key.map(str::to_string),
        idle_timeout: Duration::from_secs(10),
        ..ClientOptions::new(RetryPolicy {
            max_retries,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
        })
    }
}

fn provider(base: &str, max_retries: u32) -> OpenAiProvider {
    OpenAiProvider::new(
        Flavor::OpenAi,
        base,
        "gpt-4o-mini",
        options(Some(KEY), max_retries),
    )
    .expect("provider")
}

fn simple_request() -> ModelRequest {
    ModelRequest {
        phase: "research".into(),
        item_index: None,
        messages: vec![ChatMessage::system("Be brief."), ChatMessage::user("Hi")],
        tools: Vec::new(),
        tool_choice: ToolChoice::Auto,
    }
}

/// Runs a call and returns the result with the concatenated deltas.
async fn run(
    provider: &OpenAiProvider,
    request: &ModelRequest,
) -> (Result<ModelResponse, AgentError>, String) {
    let deltas = Mutex::new(String::new());
    let sink = |text: &str| deltas.lock().expect("lock").push_str(text);
    let result = provider.complete(request, &sink).await;
    let text = deltas.lock().expect("lock").clone();
    (result, text)
}

#[tokio::test]
async fn openai_streams_text_deltas_usage_and_finish_reason() {
    let (base, received) = serve(|_| text_stream()).await;
    let provider = provider(&base, 0);
    let (result, deltas) = run(&provider, &simple_request()).await;
    let response = result.expect("completion");
    assert_eq!(response.content, "Hello world");
    assert_eq!(deltas, response.content);
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        response.usage,
        Usage {
            prompt_tokens: 12,
            completion_tokens: 3
        }
    );
    assert!(response.tool_calls.is_empty());

    let body = received.body(0);
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["temperature"], 0);
    assert!(body.get("tools").is_none());
    assert!(body.get("tool_choice").is_none());
    assert!(body.get("parallel_tool_calls").is_none());
    let auth = received.auth.lock().expect("lock")[0].clone();
    assert_eq!(auth.as_deref(), Some("Bearer sk-test-secret-123"));
}

#[tokio::test]
async fn openai_assembles_tool_calls_and_sends_the_openai_request_shape() {
    let (base, received) = serve(|_| {
        sse(vec![
            event(
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null,
                "tool_calls": [{"index": 0, "id": "call_abc", "type": "function",
                    "function": {"name": "table_get_map", "arguments": ""}}]}}]}),
            ),
            event(json!({"choices": [{"index": 0, "delta": {
                "tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": "}}]}}]})),
            event(json!({"choices": [{"index": 0, "delta": {
                "tool_calls": [{"index": 0, "function": {"arguments": "\"sales.csv\"}"}}]}}]})),
            event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
            // No [DONE]: a finish reason is enough.
        ])
    })
    .await;
    let provider = provider(&base, 0);
    let earlier = ToolCall {
        id: "call_1".into(),
        name: "list_files".into(),
        arguments: "{}".into(),
    };
    let request = ModelRequest {
        phase: "research".into(),
        item_index: None,
        messages: vec![
            ChatMessage::system("Research."),
            ChatMessage::user("Summarize sales.csv"),
            ChatMessage::assistant("", vec![earlier]),
            ChatMessage::tool_result("call_1", "[\"sales.csv\"]"),
        ],
        tools: catalog().into_iter().take(3).collect(),
        tool_choice: ToolChoice::Required,
    };
    let (result, deltas) = run(&provider, &request).await;
    let response = result.expect("completion");
    assert_eq!(deltas, "");
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "call_abc".into(),
            name: "table_get_map".into(),
            arguments: "{\"path\": \"sales.csv\"}".into(),
        }]
    );

    let body = received.body(0);
    assert_eq!(body["stream"], true);
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["parallel_tool_calls"], false);
    let tools = body["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 3);
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "list_files");
    assert!(tools[0]["function"]["description"].is_string());
    assert_eq!(tools[0]["function"]["parameters"]["type"], "object");
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "Research."})
    );
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "list_files", "arguments": "{}"}}]})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "content": "[\"sales.csv\"]", "tool_call_id": "call_1"})
    );
}

#[tokio::test]
async fn openai_accepts_a_non_streaming_json_answer() {
    let (base, _) = serve(|_| {
        let body = json!({
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Looking.",
                "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "list_files", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2}
        });
        status(
            200,
            &[("content-type", "application/json")],
            &body.to_string(),
        )
    })
    .await;
    let (result, deltas) = run(&provider(&base, 0), &simple_request()).await;
    let response = result.expect("completion");
    assert_eq!(response.content, "Looking.");
    assert_eq!(deltas, "Looking.");
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].name, "list_files");
    assert_eq!(response.usage.completion_tokens, 2);
}

#[tokio::test]
async fn openai_retries_429_honouring_retry_after() {
    let (base, received) = serve(|n| {
        if n == 0 {
            status(
                429,
                &[("retry-after", "0")],
                r#"{"error":{"message":"slow down"}}"#,
            )
        } else {
            text_stream()
        }
    })
    .await;
    let (result, _) = run(&provider(&base, 3), &simple_request()).await;
    assert_eq!(result.expect("completion").content, "Hello world");
    assert_eq!(received.count(), 2);
}

#[tokio::test]
async fn openai_gives_up_on_persistent_429_as_rate_limited() {
    let (base, received) = serve(|_| {
        status(
            429,
            &[("retry-after", "0")],
            r#"{"error":{"message":"quota"}}"#,
        )
    })
    .await;
    let (result, _) = run(&provider(&base, 1), &simple_request()).await;
    let error = result.expect_err("rate limited");
    assert!(
        matches!(error, AgentError::RateLimited(ref m) if m.contains("quota")),
        "{error}"
    );
    assert_eq!(received.count(), 2);
}

#[tokio::test]
async fn openai_gives_up_on_500_after_max_retries() {
    let (base, received) = serve(|_| status(500, &[], "upstream broke")).await;
    let (result, _) = run(&provider(&base, 2), &simple_request()).await;
    let error = result.expect_err("unavailable");
    assert!(matches!(error, AgentError::Unavailable(_)), "{error}");
    assert_eq!(received.count(), 3);
}

#[tokio::test]
async fn openai_does_not_retry_401_and_keeps_the_key_out_of_errors() {
    let (base, received) = serve(|_| {
        let body = format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#);
        status(401, &[("content-type", "application/json")], &body)
    })
    .await;
    let provider = provider(&base, 3);
    let (result, _) = run(&provider, &simple_request()).await;
    let error = result.expect_err("auth failed");
    assert!(matches!(error, AgentError::AuthFailed(_)), "{error}");
    assert!(error.to_string().contains("Incorrect API key"), "{error}");
    assert!(!error.to_string().contains(KEY), "{error}");
    assert!(!format!("{provider:?}").contains(KEY));
    assert_eq!(received.count(), 1);
}

#[tokio::test]
async fn openai_reports_other_4xx_with_the_server_message() {
    let (base, received) = serve(|_| {
        status(
            400,
            &[],
            r#"{"error":{"message":"Invalid schema for function"}}"#,
        )
    })
    .await;
    let (result, _) = run(&provider(&base, 3), &simple_request()).await;
    let error = result.expect_err("bad request");
    assert!(
        matches!(error, AgentError::BadResponse(ref m) if m.contains("Invalid schema for function")),
        "{error}"
    );
    assert_eq!(received.count(), 1);
}

#[tokio::test]
async fn openai_treats_an_empty_stream_as_unavailable() {
    let (base, received) = serve(|_| sse(vec![": keep-alive\n\n".to_string()])).await;
    let (result, _) = run(&provider(&base, 1), &simple_request()).await;
    let error = result.expect_err("unavailable");
    assert!(matches!(error, AgentError::Unavailable(_)), "{error}");
    assert_eq!(received.count(), 2);
}

#[tokio::test]
async fn openai_connection_errors_are_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let (result, _) = run(
        &provider(&format!("http://{addr}/v1"), 1),
        &simple_request(),
    )
    .await;
    let error = result.expect_err("unavailable");
    assert!(matches!(error, AgentError::Unavailable(_)), "{error}");
}
